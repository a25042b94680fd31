"""Share groups (KIP-932) for the admin tools: list, describe, start offsets, reset.

`yak share-group` and the console's share-group page read the same answers, so the
requests live here, once. No Python Kafka client speaks these APIs yet (confluent-kafka
2.16's AdminClient has no share-group calls, and its ListGroups cannot ask for type
`share`), so this is the blocking wire client with kio's codecs:
- ListGroups v5 with `types_filter=["share"]`, asked of every broker (a group lives on
  its coordinator, as kafka-share-groups.sh asks them all);
- ShareGroupDescribe (77), DescribeShareGroupOffsets (90) and AlterShareGroupOffsets (91)
  at the group's coordinator (FindCoordinator key type 0), found again after
  NOT_COORDINATOR.
Errors are Kafka's codes raised as `yak.errors` exceptions; callers turn them into one
line (the CLI) or an HTTP error (the console).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from yak.client.connection import build
from yak.client.transactions import _RE_FIND, TransactionalClient
from yak.errors import ErrorCode, KafkaError, error_for_code

__all__ = [
    "ShareAdminClient",
    "ShareGroupDescription",
    "ShareGroupListing",
    "ShareMember",
    "SharePartitionOffset",
]

# (api, version): the versions Yak and Kafka 4.2 both speak.
_LIST = ("list_groups", 5)
_DESCRIBE = ("share_group_describe", 1)
_OFFSETS = ("describe_share_group_offsets", 1)
_ALTER = ("alter_share_group_offsets", 0)


def _mod(api: tuple[str, int], kind: str) -> Any:
    return import_module(f"kio.schema.{api[0]}.v{api[1]}.{kind}")


def _cls(api: tuple[str, int], kind: str) -> Any:
    suffix = "Request" if kind == "request" else "Response"
    return getattr(_mod(api, kind), "".join(p.capitalize() for p in api[0].split("_")) + suffix)


@dataclass(frozen=True)
class ShareGroupListing:
    group_id: str
    state: str


@dataclass(frozen=True)
class ShareMember:
    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed_topics: list[str]
    assignment: list[tuple[str, int]]


@dataclass(frozen=True)
class ShareGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ShareMember] = field(default_factory=list)


@dataclass(frozen=True)
class SharePartitionOffset:
    """A share partition's start offset (-1: never initialized) and the lag the broker
    reports (-1 where it cannot say: Yak knows it only where it leads the partition)."""

    topic: str
    partition: int
    start_offset: int
    lag: int
    error: str | None


class ShareAdminClient(TransactionalClient):
    """The blocking client plus the share-group admin APIs."""

    def _coordinator_call(self, group_id: str, what: str, request: Any,
                          response_cls: Any, code_of: Any) -> Any:
        """`request` at the group's coordinator; its coordinator found again while it
        answers NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE (the retry policy's bound)."""
        node = [self.find_coordinator(group_id, key_type=0)]
        out: list[Any] = []

        def attempt() -> tuple[ErrorCode, None]:
            resp = self._retrying(node[0], lambda: self._connect(node[0]).send(
                request, response_cls))
            code = code_of(resp)
            if code in _RE_FIND:
                node[0] = self.find_coordinator(group_id, key_type=0)
            out[:] = [resp]
            return code, None

        self._retry(what, attempt)
        return out[0]

    def list_share_groups(self, states: Iterable[str] = ()) -> list[ShareGroupListing]:
        """Every share group of the cluster (each broker answers for the groups it
        coordinates), sorted by id."""
        self.metadata([])
        nodes = list(self._brokers) or [self._any_node()]
        req = build(_cls(_LIST, "request"), states_filter=tuple(states), types_filter=("share",))
        found: dict[str, ShareGroupListing] = {}
        for node in nodes:
            resp = self._retrying(node, lambda n=node: self._connect(n).send(
                req, _cls(_LIST, "response")))
            if resp.error_code is not ErrorCode.none:
                raise error_for_code(int(resp.error_code),
                                     f"list share groups: {resp.error_code.name.upper()}")
            for g in resp.groups:
                if g.group_type.lower() == "share":
                    found[g.group_id] = ShareGroupListing(g.group_id, g.group_state)
        return sorted(found.values(), key=lambda g: g.group_id)

    def describe_share_group(self, group_id: str) -> ShareGroupDescription:
        """ShareGroupDescribe: state, epochs and members with their assignments.
        GROUP_ID_NOT_FOUND (raised) for a group the coordinator does not know."""
        req = build(_cls(_DESCRIBE, "request"), group_ids=(group_id,),
                    include_authorized_operations=False)
        resp = self._coordinator_call(
            group_id, f"describe share group {group_id!r}", req, _cls(_DESCRIBE, "response"),
            lambda r: r.groups[0].error_code if r.groups else ErrorCode.unknown_server_error)
        g = resp.groups[0]
        members = [
            ShareMember(
                m.member_id, int(m.member_epoch), m.client_id, m.client_host, m.rack_id,
                sorted(m.subscribed_topic_names),
                sorted((t.topic_name, int(p)) for t in m.assignment.topic_partitions
                       for p in t.partitions))
            for m in g.members
        ]
        return ShareGroupDescription(g.group_id, g.group_state, int(g.group_epoch),
                                     int(g.assignment_epoch), g.assignor_name,
                                     sorted(members, key=lambda m: m.member_id))

    def describe_share_group_or_none(self, group_id: str) -> ShareGroupDescription | None:
        """`describe_share_group`, None for a group the coordinator does not know."""
        try:
            return self.describe_share_group(group_id)
        except KafkaError as e:
            if e.code is ErrorCode.group_id_not_found:
                return None
            raise

    def share_group_offsets(self, group_id: str,
                            topics: Mapping[str, Iterable[int]] | None = None,
                            ) -> list[SharePartitionOffset]:
        """DescribeShareGroupOffsets: start offset and lag per share partition of
        `topics` (None: the topics the group's members subscribe to)."""
        mod = _mod(_OFFSETS, "request")
        wanted = None if topics is None else tuple(
            build(mod.DescribeShareGroupOffsetsRequestTopic, topic_name=t,
                  partitions=tuple(sorted(ps))) for t, ps in sorted(topics.items()))
        req = build(mod.DescribeShareGroupOffsetsRequest, groups=(build(
            mod.DescribeShareGroupOffsetsRequestGroup, group_id=group_id, topics=wanted),))
        resp = self._coordinator_call(
            group_id, f"describe offsets of share group {group_id!r}", req,
            _cls(_OFFSETS, "response"),
            lambda r: r.groups[0].error_code if r.groups else ErrorCode.unknown_server_error)
        return sorted(
            (SharePartitionOffset(
                t.topic_name, int(p.partition_index), int(p.start_offset), int(p.lag),
                None if p.error_code is ErrorCode.none else p.error_code.name.upper())
             for t in resp.groups[0].topics for p in t.partitions),
            key=lambda o: (o.topic, o.partition))

    def alter_share_group_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int],
                                  ) -> dict[tuple[str, int], str | None]:
        """AlterShareGroupOffsets: new start offsets; (topic, partition) -> error name or
        None. The request's own error (NON_EMPTY_GROUP while the group has members) is
        raised."""
        mod = _mod(_ALTER, "request")
        by_topic: dict[str, list[Any]] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(build(
                mod.AlterShareGroupOffsetsRequestPartition, partition_index=p, start_offset=off))
        req = build(mod.AlterShareGroupOffsetsRequest, group_id=group_id, topics=tuple(
            build(mod.AlterShareGroupOffsetsRequestTopic, topic_name=t, partitions=tuple(ps))
            for t, ps in by_topic.items()))
        resp = self._coordinator_call(
            group_id, f"reset offsets of share group {group_id!r}", req,
            _cls(_ALTER, "response"), lambda r: r.error_code)
        return {
            (t.topic_name, int(p.partition_index)):
                None if p.error_code is ErrorCode.none else p.error_code.name.upper()
            for t in resp.responses for p in t.partitions
        }

    # ------------------------------------------------------------------ the tools' view

    def topic_partitions(self, only: str | None = None) -> dict[str, list[int]]:
        """Every non-internal topic's partitions (or only `only`'s, if it exists)."""
        md = self.metadata(None if only is None else [only])
        return {t: [p.partition for p in ps] for t, ps in md.items()
                if not t.startswith("__") and (only is None or t == only)}

    def report(self, group_id: str) -> dict[str, Any]:
        """The group as `yak share-group describe --format json` prints it and the
        console shows it: state, members with their assignments, and per share partition
        the start offset, the log end offset and the lag.

        With members, the partitions are those of their subscriptions
        (DescribeShareGroupOffsets with null topics); without, every topic's partitions
        that have a start offset (a group's state outlives its members: a group the
        coordinator does not know, never joined or forgotten by a restart, is shown
        Empty while it has start offsets, GROUP_ID_NOT_FOUND otherwise)."""
        desc = self.describe_share_group_or_none(group_id)
        members = desc.members if desc is not None else []
        offsets = self.share_group_offsets(
            group_id, None if members else self.topic_partitions())
        if not members:
            offsets = [o for o in offsets if o.start_offset >= 0 or o.error]
        if desc is None:
            if not offsets:
                self.describe_share_group(group_id)  # raises GROUP_ID_NOT_FOUND again
            desc = ShareGroupDescription(group_id, "Empty", -1, -1, "")
        ends = self.list_offsets({(o.topic, o.partition): -1 for o in offsets
                                  if o.error is None}) if offsets else {}
        parts = []
        for o in offsets:
            # -1 from the broker: it cannot say (Yak knows the lag where it leads the
            # partition); end - start would overstate it by every record done above it
            lag = o.lag if o.lag >= 0 else None
            parts.append({"topic": o.topic, "partition": o.partition,
                          "start_offset": o.start_offset if o.start_offset >= 0 else None,
                          "log_end_offset": ends.get((o.topic, o.partition), -1),
                          "lag": lag, "error": o.error})
        return {
            "group": desc.group_id,
            "state": desc.state,
            "group_epoch": desc.group_epoch,
            "assignment_epoch": desc.assignment_epoch,
            "assignor": desc.assignor or None,
            "members": [
                {"member_id": m.member_id, "member_epoch": m.member_epoch,
                 "client_id": m.client_id, "host": m.client_host, "rack": m.rack_id,
                 "subscriptions": m.subscribed_topics,
                 "assignment": [f"{t}-{p}" for t, p in m.assignment]}
                for m in desc.members
            ],
            "partitions": parts,
            "total_lag": sum(p["lag"] or 0 for p in parts),
        }
