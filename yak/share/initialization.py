"""The group coordinator's InitializeShareGroupState (Kafka 4.1+, KIP-932): when a share
partition is assigned to a member, the group coordinator makes sure its state exists at
the share coordinator before the member fetches it from its leader.

Kafka's group coordinator keeps which topics it initialized in its own records
(ShareGroupStatePartitionMetadata: initializing / initialized topics) and answers a
heartbeat with initialized partitions only. Yak's group coordinator keeps no such
record: it sends InitializeShareGroupState with Kafka's uninitialized start (-1) for
every partition of an assignment it is about to answer, and the share coordinator
creates the states that do not exist and leaves the others as they are
(`ShareCoordinator.initialize`). The leader then chooses the start by
`share.auto.offset.reset` on its first read. The requests go through the persister: in
process for the states this broker coordinates, one RPC 83 per other coordinator broker.

Why it matters beyond Kafka's shape: after a group is deleted, its state is gone
(tombstones) while a leader elsewhere may still hold a window of the old group. A state
initialized here (start -1, read by no leader) refuses that window's write
(`unread_by`), so the recreated group starts by `share.auto.offset.reset`, never from
the deleted group's progress.

An assignment is sent only when it changes (a join, a subscription change), so this
costs one no-op coordinator operation per assigned partition then, not per heartbeat.
A failed initialization is logged and not retried here: the leader initializes a key it
finds without state itself with its first write (`ShareManager._load`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence

from yak.errors import ErrorCode
from yak.share.persister import CoordinatorPersister
from yak.share.records import ShareKey

__all__ = ["initialize_assignment"]

log = logging.getLogger(__name__)


async def initialize_assignment(persister: CoordinatorPersister | None, group_id: str,
                                assignment: Mapping[uuid.UUID, Sequence[int]]
                                ) -> dict[ShareKey, ErrorCode]:
    """Initialize the state of every share partition of `assignment` (topic id ->
    partitions) that has none; the keys that failed, with why (logged)."""
    if persister is None or not assignment:
        return {}
    keys = [ShareKey(group_id, tid, p) for tid, parts in assignment.items() for p in parts]
    codes = await persister.initialize(keys)
    failed = {k: c for k, c in zip(keys, codes, strict=True) if c is not ErrorCode.none}
    if failed:
        log.info("InitializeShareGroupState for group %s: %d of %d share partitions "
                 "failed (%s); their leaders initialize them", group_id, len(failed),
                 len(keys), sorted({c.name for c in failed.values()}))
    return failed
