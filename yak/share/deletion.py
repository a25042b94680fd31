"""Deleting a share group (DeleteGroups, API 42) or its offsets for some topics
(DeleteShareGroupOffsets, API 92): Kafka's rules, a group with members answers
NON_EMPTY_GROUP and one this broker knows nothing of GROUP_ID_NOT_FOUND.

The share-partition state goes through the persister (DeleteShareGroupState, 86, to the
key's share coordinator: tombstones, durable before the answer), so a later consumer
starts fresh by `share.auto.offset.reset`; deleting the group also empties its group
configs. The keys a group has state for are not indexed anywhere, so a group delete
reads every partition of every (non-internal) topic and deletes those with state: an
admin request, rare, one read per partition, concurrent per topic.

The share-partition leaders forget the group too, on every broker: this broker's
windows are dropped first; then each other leader of a share partition with state gets
one DeleteShareGroupState for the keys it leads (a broker that does not coordinate a
key answers NOT_COORDINATOR for its state and drops its window of it:
`forget_windows`, called by the handler), before the tombstones are written. Kafka's
leaders are not told (they keep a window until a write of it fails), but a window with
nothing left to write never fails: the recreated group's consumer would get nothing
below the deleted group's start. A leader that cannot be reached fails the delete
(COORDINATOR_NOT_AVAILABLE, retriable) with nothing deleted. A window that writes after
all (one loaded again meanwhile) is refused by the share coordinator
(`ShareStateShard.deleted`) and dropped by its leader.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence

from yak.errors import ErrorCode
from yak.share.manager import ShareManager
from yak.share.records import ShareKey

__all__ = ["delete_share_group", "delete_share_offsets", "empty_group_error", "forget_windows"]


def empty_group_error(share: ShareManager, group_id: str) -> ErrorCode:
    """NON_EMPTY_GROUP while the group has members; COORDINATOR_NOT_AVAILABLE without
    durable state; else none."""
    if share.persister is None:
        return ErrorCode.coordinator_not_available
    g = share.groups.get(group_id)
    return ErrorCode.non_empty_group if g is not None and g.members else ErrorCode.none


def _configs(share: ShareManager, group_id: str) -> dict[str, str]:
    if share.config_store is not None:
        return share.config_store.get(group_id)
    return share.group_configs.get(group_id, {})


def _known(share: ShareManager, group_id: str) -> bool:
    return share.groups.get(group_id) is not None or bool(_configs(share, group_id))


def forget_windows(share: ShareManager, keys: Iterable[ShareKey]) -> int:
    """Drop this broker's share partitions of `keys` (DeleteShareGroupState's handler:
    the group coordinator deletes their state); how many there were. The next fetch of
    one reads the key again."""
    wanted = {(k.group_id, k.topic_id, k.partition) for k in keys}
    gone = [w for w in share.partitions
            if (found := share.topics(w[1])) is not None and (w[0], found[0], w[2]) in wanted]
    for w in gone:
        del share.partitions[w]
    return len(gone)


async def _tell_leaders(share: ShareManager, topic: str,
                        keys: Sequence[ShareKey]) -> ErrorCode:
    """DeleteShareGroupState to every other broker leading one of `keys` (not the key's
    coordinator, which gets its own): the first error other than NOT_COORDINATOR."""
    persister, leader_of = share.persister, share.dead_letters.leader_of
    if persister is None or leader_of is None or not persister.can_send:
        return ErrorCode.none  # one broker: its windows are gone already
    by_node: dict[int, list[ShareKey]] = {}
    for k in keys:
        node = leader_of(topic, k.partition)
        if node >= 0 and node != share.node_id and node != persister.coordinator_node(k):
            by_node.setdefault(node, []).append(k)
    answers = await asyncio.gather(*(persister.send_delete(n, ks)
                                     for n, ks in by_node.items()))
    return next((c for codes in answers for c in codes
                 if c not in (ErrorCode.none, ErrorCode.not_coordinator)), ErrorCode.none)


def _forget(share: ShareManager, group_id: str, topics: set[str] | None) -> None:
    """Drop this broker's windows of the group (on `topics`; None: all) before their
    state is deleted, so none is written back; a later fetch loads afresh."""
    for key in [k for k in share.partitions
                if k[0] == group_id and (topics is None or k[1] in topics)]:
        del share.partitions[key]
    if topics is None:
        share.metrics.forget_group(group_id)


async def _delete_topic(share: ShareManager, group_id: str, topic: str, topic_id: uuid.UUID,
                        partitions: int) -> tuple[ErrorCode, bool]:
    """Delete the group's state on each partition of one topic, its leaders told first:
    the first error, and whether any partition had state."""
    assert share.persister is not None
    keys = [ShareKey(group_id, topic_id, p) for p in range(partitions)]
    states = await asyncio.gather(*(share.persister.read(k, -1) for k in keys))
    had = [k for k, st in zip(keys, states, strict=True)
           if st.error is ErrorCode.none and st.exists]  # initialized with start -1 too
    for st in states:
        if st.error is not ErrorCode.none:
            return st.error, bool(had)
    code = await _tell_leaders(share, topic, had)
    if code is not ErrorCode.none:
        return code, bool(had)
    codes = await asyncio.gather(*(share.persister.delete(k) for k in had))
    return next((c for c in codes if c is not ErrorCode.none), ErrorCode.none), bool(had)


async def delete_share_offsets(share: ShareManager, group_id: str,
                               topics: Sequence[tuple[str, uuid.UUID, int]]
                               ) -> tuple[ErrorCode, list[ErrorCode]]:
    """DeleteShareGroupOffsets: the group's error, and one per (name, id, partitions)."""
    code = empty_group_error(share, group_id)
    if code is not ErrorCode.none:
        return code, []
    _forget(share, group_id, {name for name, _, _ in topics})
    results = [await _delete_topic(share, group_id, name, tid, n) for name, tid, n in topics]
    if not _known(share, group_id) and not any(had for _, had in results):
        return ErrorCode.group_id_not_found, []
    return ErrorCode.none, [c for c, _ in results]


async def delete_share_group(share: ShareManager, group_id: str,
                             topics: Sequence[tuple[str, uuid.UUID, int]]) -> ErrorCode:
    """DeleteGroups for a share group: every key's state (of `topics`, the cluster's),
    its group configs and this broker's memory of it."""
    code = empty_group_error(share, group_id)
    if code is not ErrorCode.none:
        return code
    known = _known(share, group_id)
    _forget(share, group_id, None)
    found = known
    for name, tid, n in topics:
        code, had = await _delete_topic(share, group_id, name, tid, n)
        if code is not ErrorCode.none:
            return code
        found = found or had
    if not found:
        return ErrorCode.group_id_not_found
    if share.config_store is not None:
        await share.config_store.replace(group_id, lambda _current: {})
    else:
        share.group_configs.pop(group_id, None)
    # the membership records' tombstones in __consumer_offsets (an empty group: its
    # epoch record), then it is forgotten here
    return await share.groups.delete_group(group_id)
