"""Group APIs at the wire, version by version, including the input real clients never send.

A raw kio-encoded client drives one member through JoinGroup/SyncGroup so each bad
request (unknown member, wrong generation, other protocol type, empty or oversize
group id, oversize offset metadata) can be checked for Kafka's exact error code, and
then checks that the group is still Stable and serving its member.
"""

from __future__ import annotations

import datetime
import socket
import struct
from typing import Any

import pytest

from yak.group.consumer_protocol import encode_assignment, encode_subscription
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

pytestmark = pytest.mark.timeout(60)

SUB = encode_subscription(["wt"])
MS = datetime.timedelta(milliseconds=1)


class Wire:
    def __init__(self, bootstrap: str, client_id: str = "wire") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.cid = 0
        self.client_id = client_id

    def close(self) -> None:
        self.sock.close()

    def _recv(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by broker")
            buf += chunk
        return buf

    def call(self, api: str, version: int, **fields: Any) -> Any:
        key = kio_compat.api_key_for(api)
        req = kio_compat.build(kio_compat.request_class(key, version), **fields)
        self.cid += 1
        self.sock.sendall(kio_compat.encode_request(req, self.cid, self.client_id))
        (size,) = struct.unpack(">i", self._recv(4))
        cid, resp = kio_compat.decode_response(key, version, self._recv(size))
        assert cid == self.cid
        return resp


def req_mod(api: str, version: int) -> Any:
    return kio_compat.schema_module(api, version, "request")


def join(w: Wire, version: int, group: str, member_id: str = "", **kw: Any) -> Any:
    m = req_mod("join_group", version)
    fields: dict[str, Any] = dict(
        group_id=group,
        session_timeout=10_000 * MS,
        rebalance_timeout=10_000 * MS,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(m.JoinGroupRequestProtocol(name="range", metadata=SUB),),
        reason=None,
    )
    fields.update(kw)
    return w.call("join_group", version, **fields)


def stable_member(w: Wire, group: str) -> tuple[str, int]:
    first = join(w, 9, group)
    assert first.error_code is ErrorCode.member_id_required
    res = join(w, 9, group, first.member_id)
    assert res.error_code is ErrorCode.none and res.leader == res.member_id
    m = req_mod("sync_group", 5)
    sync = w.call(
        "sync_group",
        5,
        group_id=group,
        generation_id=res.generation_id,
        member_id=res.member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=(
            m.SyncGroupRequestAssignment(
                member_id=res.member_id, assignment=encode_assignment({"wt": [0]})
            ),
        ),
    )
    assert sync.error_code is ErrorCode.none
    assert sync.assignment == encode_assignment({"wt": [0]})
    return res.member_id, res.generation_id


def heartbeat(w: Wire, group: str, gen: int, member: str, version: int = 4) -> ErrorCode:
    return w.call(
        "heartbeat",
        version,
        group_id=group,
        generation_id=gen,
        member_id=member,
        group_instance_id=None,
    ).error_code


def commit(w: Wire, group: str, gen: int, member: str, offsets: list[tuple[str, int, int, str]]):
    m = req_mod("offset_commit", 9)
    topics: dict[str, list[Any]] = {}
    for t, p, o, meta in offsets:
        topics.setdefault(t, []).append(
            m.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_metadata=meta
            )
        )
    resp = w.call(
        "offset_commit",
        9,
        group_id=group,
        generation_id_or_member_epoch=gen,
        member_id=member,
        group_instance_id=None,
        topics=tuple(
            m.OffsetCommitRequestTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()
        ),
    )
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


@pytest.fixture
def wire_broker(broker_factory):  # type: ignore[no-untyped-def]
    b = broker_factory(**{"group.initial.rebalance.delay.ms": "0"})
    w = Wire(b.bootstrap)
    m = req_mod("create_topics", 5)
    w.call(
        "create_topics",
        5,
        topics=(
            m.CreatableTopic(
                name="wt", num_partitions=2, replication_factor=1, assignments=(), configs=()
            ),
        ),
        timeout=10_000 * MS,
        validate_only=False,
    )
    yield b, w
    w.close()


def test_find_coordinator_every_version(wire_broker) -> None:  # type: ignore[no-untyped-def]
    b, w = wire_broker
    port = int(b.bootstrap.rsplit(":", 1)[1])
    for v in range(4):
        r = w.call("find_coordinator", v, key="g", key_type=0)
        assert r.error_code is ErrorCode.none and r.port == port and r.host == "127.0.0.1"
    for v in (4, 5, 6):
        r = w.call("find_coordinator", v, key_type=0, coordinator_keys=("a", "b"))
        assert [(c.key, c.port, c.error_code) for c in r.coordinators] == [
            ("a", port, ErrorCode.none),
            ("b", port, ErrorCode.none),
        ]


def test_bad_input_gets_kafka_codes_and_group_stays_stable(wire_broker) -> None:  # type: ignore[no-untyped-def]
    _, w = wire_broker
    member, gen = stable_member(w, "bad")
    assert join(w, 9, "bad", "who-is-this").error_code is ErrorCode.unknown_member_id
    assert heartbeat(w, "bad", gen, "who-is-this") is ErrorCode.unknown_member_id
    assert heartbeat(w, "bad", gen + 5, member) is ErrorCode.illegal_generation
    other_type = join(w, 9, "bad", protocol_type="connect")
    assert other_type.error_code is ErrorCode.inconsistent_group_protocol
    assert join(w, 9, "").error_code is ErrorCode.invalid_group_id
    assert join(w, 9, "g" * 40_000).error_code is ErrorCode.invalid_group_id
    assert join(w, 9, "bad", session_timeout=1 * MS).error_code is ErrorCode.invalid_session_timeout
    codes = commit(
        w, "bad", gen, member, [("wt", 0, 5, "x" * 5000), ("wt", 1, 7, "fine"), ("nope", 0, 1, "")]
    )
    assert codes == {
        ("wt", 0): ErrorCode.offset_metadata_too_large,
        ("wt", 1): ErrorCode.none,
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert commit(w, "bad", gen + 1, member, [("wt", 0, 1, "")]) == {
        ("wt", 0): ErrorCode.illegal_generation
    }
    # The group is untouched by all of the above.
    assert heartbeat(w, "bad", gen, member) is ErrorCode.none
    d = w.call("describe_groups", 5, groups=("bad",), include_authorized_operations=False)
    (g,) = d.groups
    assert g.group_state == "Stable" and [m.member_id for m in g.members] == [member]


def test_old_join_versions_and_batched_leave(wire_broker) -> None:  # type: ignore[no-untyped-def]
    _, w = wire_broker
    # JoinGroup v3 (before KIP-394) joins at once, without MEMBER_ID_REQUIRED.
    res = join(w, 3, "old")
    assert res.error_code is ErrorCode.none and res.member_id and res.generation_id == 1
    assert heartbeat(w, "old", 1, res.member_id, version=0) is ErrorCode.none
    m = req_mod("leave_group", 5)
    leave = w.call(
        "leave_group",
        5,
        group_id="old",
        members=(
            m.MemberIdentity(member_id=res.member_id, group_instance_id=None, reason="bye"),
            m.MemberIdentity(member_id="ghost", group_instance_id=None, reason=None),
        ),
    )
    assert leave.error_code is ErrorCode.none
    assert [x.error_code for x in leave.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
    lg = w.call("list_groups", 4, states_filter=("Empty",))
    assert [(g.group_id, g.group_state) for g in lg.groups] == [("old", "Empty")]
    assert w.call("list_groups", 4, states_filter=("Stable",)).groups == ()


def test_offset_fetch_several_groups_and_describe_unknown(wire_broker) -> None:  # type: ignore[no-untyped-def]
    _, w = wire_broker
    for group, off in (("f1", 11), ("f2", 22)):
        assert commit(w, group, -1, "", [("wt", 0, off, f"m{off}")]) == {("wt", 0): ErrorCode.none}
    m = req_mod("offset_fetch", 8)
    r = w.call(
        "offset_fetch",
        8,
        groups=(
            m.OffsetFetchRequestGroup(
                group_id="f1",
                topics=(m.OffsetFetchRequestTopics(name="wt", partition_indexes=(0, 1)),),
            ),
            m.OffsetFetchRequestGroup(group_id="f2", topics=None),
        ),
        require_stable=False,
    )
    got = {
        (g.group_id, p.partition_index): (p.committed_offset, p.metadata)
        for g in r.groups
        for t in g.topics
        for p in t.partitions
    }
    assert got == {("f1", 0): (11, "m11"), ("f1", 1): (-1, ""), ("f2", 0): (22, "m22")}
    old = w.call(
        "offset_fetch",
        1,
        group_id="f1",
        topics=(
            req_mod("offset_fetch", 1).OffsetFetchRequestTopic(name="wt", partition_indexes=(0,)),
        ),
    )
    assert old.topics[0].partitions[0].committed_offset == 11
    v5 = w.call("describe_groups", 5, groups=("nobody",), include_authorized_operations=False)
    assert (v5.groups[0].error_code, v5.groups[0].group_state) == (ErrorCode.none, "Dead")
    v6 = w.call("describe_groups", 6, groups=("nobody",), include_authorized_operations=False)
    assert v6.groups[0].error_code is ErrorCode.group_id_not_found
    dg = w.call("delete_groups", 2, groups_names=("f1", "nobody"))
    assert [(x.group_id, x.error_code) for x in dg.results] == [
        ("f1", ErrorCode.none),
        ("nobody", ErrorCode.group_id_not_found),
    ]


def test_offset_delete(wire_broker) -> None:  # type: ignore[no-untyped-def]
    _, w = wire_broker
    m = req_mod("offset_delete", 0)

    def delete(group: str, partitions: tuple[int, ...], topic: str = "wt") -> Any:
        return w.call(
            "offset_delete",
            0,
            group_id=group,
            topics=(
                m.OffsetDeleteRequestTopic(
                    name=topic,
                    partitions=tuple(
                        m.OffsetDeleteRequestPartition(partition_index=p) for p in partitions
                    ),
                ),
            ),
        )

    assert commit(w, "od", -1, "", [("wt", 0, 4, ""), ("wt", 1, 5, "")]) == {
        ("wt", 0): ErrorCode.none,
        ("wt", 1): ErrorCode.none,
    }
    r = delete("od", (0,))
    assert r.error_code is ErrorCode.none
    assert [(p.partition_index, p.error_code) for p in r.topics[0].partitions] == [
        (0, ErrorCode.none)
    ]
    fetched = w.call(
        "offset_fetch",
        1,
        group_id="od",
        topics=(
            req_mod("offset_fetch", 1).OffsetFetchRequestTopic(name="wt", partition_indexes=(0, 1)),
        ),
    )
    assert [p.committed_offset for p in fetched.topics[0].partitions] == [-1, 5]
    assert delete("nope", (0,)).error_code is ErrorCode.group_id_not_found
    # A live member subscribed to the topic: refused per partition.
    member, gen = stable_member(w, "od-live")
    commit(w, "od-live", gen, member, [("wt", 0, 1, "")])
    r = delete("od-live", (0,))
    assert r.error_code is ErrorCode.none
    assert r.topics[0].partitions[0].error_code is ErrorCode.group_subscribed_to_topic
    r = delete("od-live", (0,), topic="missing")
    assert r.topics[0].partitions[0].error_code is ErrorCode.unknown_topic_or_partition
