"""ListOffsets for one special timestamp on one broker, over `yak.client`'s blocking
connection: the offsets `yak tiered status` and the console's topic page show for a
tiered partition (KIP-405's EARLIEST_LOCAL, KIP-1005's LATEST_TIERED), which
confluent-kafka's AdminClient cannot ask for."""

from __future__ import annotations

from typing import Any

from yak.client.connection import Connection, build
from yak.errors import ErrorCode
from yak.protocol.kio_compat import schema_module
from yak.security.client import ClientSecurity

LIST_OFFSETS_VERSION = 9  # -4 needs v8 and -5 v9 (Kafka refuses them below)
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -4, -5


def list_special_offsets(host: str, port: int, tps: list[tuple[str, int]], timestamp: int,
                         timeout: float, security: ClientSecurity | Any
                         ) -> dict[tuple[str, int], int | str]:
    """ListOffsets v9 of `tps` (all led by this broker) at one special timestamp: per
    partition the offset, or the error's name."""
    req = schema_module("list_offsets", LIST_OFFSETS_VERSION, "request")
    resp_mod = schema_module("list_offsets", LIST_OFFSETS_VERSION, "response")
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    topics = tuple(
        build(req.ListOffsetsTopic, name=t, partitions=tuple(
            build(req.ListOffsetsPartition, partition_index=p, current_leader_epoch=-1,
                  timestamp=timestamp) for p in ps))
        for t, ps in by_topic.items())
    conn = Connection(host, port, client_id="yak-cli", timeout_s=timeout, security=security)
    try:
        resp = conn.send(build(req.ListOffsetsRequest, replica_id=-1, isolation_level=0,
                               topics=topics), resp_mod.ListOffsetsResponse)
    finally:
        conn.close()
    out: dict[tuple[str, int], int | str] = {}
    for t in resp.topics:
        for p in t.partitions:
            code = int(p.error_code)
            out[(str(t.name), int(p.partition_index))] = (
                int(p.offset) if code == 0 else ErrorCode(code).name.upper())
    return out
