"""`yak group ...`: list, describe (with lag), reset-offsets, offset-delete, delete.

Like `kafka-consumer-groups.sh`, built on confluent-kafka's AdminClient so it works on
any Kafka-compatible cluster (OffsetDelete, which it lacks, goes through Yak's own
client). Lag is what operators act on, so `describe` shows it per
partition: log end offset (the high watermark a consumer can read up to) minus the
committed offset. Offsets are only reset for an Empty group: a live member would
overwrite the new offsets with its next commit, silently undoing the reset.
"""

from __future__ import annotations

import datetime
import json
import re
import sys
import time
from dataclasses import asdict, dataclass
from typing import Annotated, Any

import typer
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec
from rich.console import Console
from rich.table import Table

from yak.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    Bootstrap,
    Timeout,
    client_security,
    connect_admin,
    fail,
    require_topic,
    secured,
    wait,
)
from yak.cli.offset_reset import reset_targets

app = typer.Typer(
    help="List, describe (with lag), reset and delete offsets of, and delete consumer groups.",
    no_args_is_help=True,
)
# Member ids are long; piped output must not be cut to 80 columns with "…".
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 400)

Format = Annotated[str, typer.Option("--format", "-f", help="table or json.")]

_STATE_NAMES = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}


def _group_type(listing: Any) -> str:
    """classic (JoinGroup protocol), consumer (KIP-848) or simple (offsets only)."""
    if getattr(listing, "type", None) == ConsumerGroupType.CONSUMER:
        return "consumer"
    return "simple" if listing.is_simple_consumer_group else "classic"


def _check_format(fmt: str) -> None:
    if fmt not in ("table", "json"):
        fail(f"invalid --format {fmt!r}: expected table or json", exit_code=2)


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int
    lag: int | None
    member_id: str | None
    client_id: str | None
    host: str | None


@app.command("list")
@secured
def list_groups(
    fmt: Format = "table",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """List consumer groups and their states."""
    _check_format(fmt)
    admin, _ = connect_admin(bootstrap, timeout)
    result = wait(admin.list_consumer_groups(request_timeout=timeout), timeout, "list groups")
    rows = sorted(
        (
            g.group_id,
            _STATE_NAMES.get(g.state, str(g.state)),
            _group_type(g),
        )
        for g in result.valid
    )
    if fmt == "json":
        out.print(json.dumps([{"group": g, "state": s, "type": t} for g, s, t in rows]))
        return
    table = Table("GROUP", "STATE", "TYPE", box=None, pad_edge=False)
    for row in rows:
        table.add_row(*row)
    out.print(table)


def _describe(admin: AdminClient, group: str, timeout: float) -> Any:
    return wait(
        admin.describe_consumer_groups([group], request_timeout=timeout)[group],
        timeout,
        f"describe group {group!r}",
    )


def _committed(admin: AdminClient, group: str, timeout: float) -> dict[tuple[str, int], int]:
    req = ConsumerGroupTopicPartitions(group)
    res = wait(
        admin.list_consumer_group_offsets([req], request_timeout=timeout)[group],
        timeout,
        f"fetch offsets of {group!r}",
    )
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in res.topic_partitions or []
        if tp.offset is not None and tp.offset >= 0
    }


def _offsets(
    admin: AdminClient, specs: dict[TopicPartition, OffsetSpec], timeout: float
) -> dict[tuple[str, int], int]:
    if not specs:
        return {}
    futures = admin.list_offsets(specs, request_timeout=timeout)
    return {
        (tp.topic, tp.partition): wait(
            f, timeout, f"list offsets of {tp.topic}-{tp.partition}"
        ).offset
        for tp, f in futures.items()
    }


def group_lag(admin: AdminClient, group: str, timeout: float) -> tuple[Any, list[PartitionLag]]:
    """The group's description and one row per partition it has offsets for or owns."""
    desc = _describe(admin, group, timeout)
    committed = _committed(admin, group, timeout)
    owner: dict[tuple[str, int], Any] = {}
    for m in desc.members:
        for tp in m.assignment.topic_partitions if m.assignment else []:
            owner[(tp.topic, tp.partition)] = m
    keys = sorted(set(committed) | set(owner))
    ends = _offsets(admin, {TopicPartition(t, p): OffsetSpec.latest() for t, p in keys}, timeout)
    rows = []
    for t, p in keys:
        c = committed.get((t, p))
        end = ends.get((t, p), -1)
        m = owner.get((t, p))
        rows.append(
            PartitionLag(
                t,
                p,
                c,
                end,
                None if c is None or end < 0 else max(end - c, 0),
                m.member_id if m else None,
                m.client_id if m else None,
                m.host if m else None,
            )
        )
    return desc, rows


@app.command("describe")
@secured
def describe(
    group: Annotated[str, typer.Argument(help="Group id.")],
    members_only: Annotated[
        bool,
        typer.Option("--members", help="Only the members, each with its assigned partitions."),
    ] = False,
    fmt: Format = "table",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """State, members, assignments and per-partition committed offset, log end and lag."""
    _check_format(fmt)
    admin, _ = connect_admin(bootstrap, timeout)
    desc, rows = group_lag(admin, group, timeout)
    state = _STATE_NAMES.get(desc.state, str(desc.state))
    if desc.state == ConsumerGroupState.DEAD and not rows:
        fail(f"group {group!r} does not exist")
    members = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "host": m.host,
            "assignment": sorted(
                f"{tp.topic}-{tp.partition}"
                for tp in (m.assignment.topic_partitions if m.assignment else [])
            ),
        }
        for m in desc.members
    ]
    if members_only:
        _print_members(group, state, desc, fmt)
        return
    if fmt == "json":
        doc = {
            "group": group,
            "state": state,
            "assignor": desc.partition_assignor or None,
            "members": members,
            "partitions": [asdict(r) for r in rows],
            "total_lag": sum(r.lag or 0 for r in rows),
        }
        out.print(json.dumps(doc))
        return
    out.print(
        f"Group: {group}  State: {state}  Assignor: {desc.partition_assignor or '-'}"
        f"  Members: {len(members)}"
    )
    if members:
        mt = Table("MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT", box=None)
        for m in members:
            mt.add_row(
                m["member_id"],
                m["group_instance_id"] or "-",
                m["client_id"],
                m["host"],
                ",".join(m["assignment"]) or "-",
            )
        out.print(mt)
    pt = Table(
        "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", box=None
    )
    for r in rows:
        pt.add_row(
            r.topic,
            str(r.partition),
            "-" if r.committed_offset is None else str(r.committed_offset),
            str(r.log_end_offset),
            "-" if r.lag is None else str(r.lag),
            r.member_id or "-",
        )
    out.print(pt)


def _print_members(group: str, state: str, desc: Any, fmt: str) -> None:
    """`describe --members`, as kafka-consumer-groups.sh --members --verbose: one row per
    member with its partition count and assignment, `topic(0,1)` per topic."""
    rows = []
    for m in desc.members:
        tps = sorted(
            (tp.topic, tp.partition)
            for tp in (m.assignment.topic_partitions if m.assignment else [])
        )
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        rows.append((m, tps, by_topic))
    rows.sort(key=lambda r: r[0].member_id)
    if fmt == "json":
        doc = {
            "group": group,
            "state": state,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "host": m.host,
                    "partitions": len(tps),
                    "assignment": [{"topic": t, "partition": p} for t, p in tps],
                }
                for m, tps, _ in rows
            ],
        }
        out.print(json.dumps(doc))
        return
    if not rows:
        out.print(f"Group {group} ({state}) has no active members.")
        return
    table = Table(
        "GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT", box=None
    )
    for m, tps, by_topic in rows:
        table.add_row(
            group,
            m.member_id,
            m.host,
            m.client_id,
            str(len(tps)),
            ", ".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or "-",
        )
    out.print(table)


def _parse_datetime(text: str) -> int:
    try:
        dt = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        fail(f"invalid --to-datetime {text!r}: expected ISO 8601, e.g. 2024-01-31T12:00:00Z", 2)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.UTC)
    return int(dt.timestamp() * 1000)


_ISO_DURATION = re.compile(
    r"P(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)
_SHORT_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """Kafka's ISO 8601 `PnDTnHnMnS` (P1DT2H, PT10M) or a short `10m`, `1h30m`, `2d`."""
    t = text.strip()
    iso = _ISO_DURATION.fullmatch(t)
    if iso and any(iso.groupdict().values()) and not t.upper().endswith("T"):
        scale = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000}
        return int(sum(float(v) * scale[k] for k, v in iso.groupdict().items() if v))
    parts = _SHORT_PART.findall(t.lower())
    if t and "".join(n + u for n, u in parts) == t.lower():
        return int(sum(float(n) * _UNIT_MS[u] for n, u in parts))
    fail(f"invalid --by-duration {text!r}: expected PnDTnHnMnS (e.g. PT10M) or e.g. 10m, 1h30m", 2)


@app.command("reset-offsets")
@secured
def reset_offsets(
    group: Annotated[str, typer.Argument(help="Group id (must have no active members).")],
    topic: Annotated[
        str | None, typer.Option("--topic", "-t", help="Topic whose offsets to reset.")
    ] = None,
    all_topics: Annotated[
        bool,
        typer.Option("--all-topics", help="Every topic the group has committed offsets for."),
    ] = False,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="Log start offset.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="Log end offset.")] = False,
    to_offset: Annotated[
        int | None, typer.Option("--to-offset", help="This offset (clamped to the log).")
    ] = None,
    to_datetime: Annotated[
        str | None,
        typer.Option("--to-datetime", help="First offset at or after this ISO 8601 time."),
    ] = None,
    shift_by: Annotated[
        int | None,
        typer.Option(
            "--shift-by", help="The committed offset plus N (negative: back), clamped to the log."
        ),
    ] = None,
    by_duration: Annotated[
        str | None,
        typer.Option(
            "--by-duration",
            help="First offset at or after this long ago: PnDTnHnMnS (PT10M) or 10m, 1h30m.",
        ),
    ] = None,
    partition: Annotated[
        list[int] | None, typer.Option("--partition", "-p", help="Only these partitions.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the new offsets without committing them.")
    ] = False,
    export: Annotated[
        bool,
        typer.Option("--export", help="Print the new offsets as CSV lines topic,partition,offset."),
    ] = False,
    fmt: Format = "table",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Move GROUP's committed offsets on TOPIC or all its topics (the group must be empty)."""
    _check_format(fmt)
    chosen = [
        to_earliest,
        to_latest,
        to_offset is not None,
        to_datetime is not None,
        shift_by is not None,
        by_duration is not None,
    ]
    if sum(chosen) != 1:
        fail(
            "choose exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, "
            "--shift-by, --by-duration",
            2,
        )
    if (topic is None) == (not all_topics):
        fail("choose exactly one of --topic and --all-topics", 2)
    if all_topics and partition:
        fail("--partition needs --topic, not --all-topics", 2)
    if export and fmt != "table":
        fail("--export prints CSV: it takes no --format", 2)
    duration_ms = parse_duration_ms(by_duration) if by_duration is not None else 0
    ts = _parse_datetime(to_datetime) if to_datetime is not None else 0
    admin, md = connect_admin(bootstrap, timeout)
    tps: list[TopicPartition] = []
    if topic is not None:
        tmd = require_topic(md, topic)
        parts = sorted(tmd.partitions)
        if partition:
            missing = sorted(set(partition) - set(parts))
            if missing:
                fail(f"topic {topic!r} has no partition {missing[0]}", 2)
            parts = sorted(set(partition))
        tps = [TopicPartition(topic, p) for p in parts]
    desc = _describe(admin, group, timeout)
    if desc.state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD):
        state = _STATE_NAMES.get(desc.state, str(desc.state))
        fail(
            f"group {group!r} is {state} with {len(desc.members)} active member(s): "
            "stop its consumers first (offsets can only be reset for an empty group)"
        )
    current = _committed(admin, group, timeout) if all_topics or shift_by is not None else {}
    if all_topics:
        tps = [TopicPartition(t, p) for t, p in sorted(current) if t in md.topics]
        if not tps:
            fail(f"group {group!r} has no committed offsets on any existing topic")
    starts = _offsets(admin, {tp: OffsetSpec.earliest() for tp in tps}, timeout)
    ends = _offsets(admin, {tp: OffsetSpec.latest() for tp in tps}, timeout)
    if shift_by is not None:
        missing_c = sorted(k for k in ends if k not in current)
        if missing_c:
            t, p = missing_c[0]
            fail(
                f"cannot shift the offset of {group!r} on {t}-{p}: it has no committed offset "
                "(use --to-earliest, --to-latest or --to-offset for it)"
            )
    if by_duration is not None:
        ts = int(time.time() * 1000) - duration_ms
    target = reset_targets(
        starts, ends, to_earliest=to_earliest, to_latest=to_latest, to_offset=to_offset,
        shift_by=shift_by, current=current,
        by_time=lambda: _offsets(admin, {tp: OffsetSpec.for_timestamp(ts) for tp in tps}, timeout),
    )
    if not dry_run:
        req = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, o) for (t, p), o in sorted(target.items())]
        )
        res = wait(
            admin.alter_consumer_group_offsets([req], request_timeout=timeout)[group],
            timeout,
            f"reset offsets of {group!r}",
        )
        for tp in res.topic_partitions:
            if tp.error is not None:
                fail(f"reset offsets of {group!r} on {tp.topic}-{tp.partition}: {tp.error.str()}")
    rows = [{"topic": t, "partition": p, "new_offset": o} for (t, p), o in sorted(target.items())]
    if export:
        # kafka-consumer-groups.sh --export: what --from-file reads back
        for r in rows:
            print(f"{r['topic']},{r['partition']},{r['new_offset']}")
        return
    if fmt == "json":
        out.print(json.dumps(rows))
        return
    table = Table("TOPIC", "PARTITION", "NEW-OFFSET", box=None)
    for r in rows:
        table.add_row(r["topic"], str(r["partition"]), str(r["new_offset"]))
    out.print(table)
    if dry_run:
        out.print("(dry run: nothing committed)")


def _delete_offsets(
    bootstrap: str, timeout: float, group: str, topic: str, parts: list[int]
) -> list[tuple[int, str | None]]:
    """OffsetDelete (KIP-496) at the group's coordinator: [(partition, error name or None)].
    No Python Kafka client has it, so this is Yak's own client on the wire."""
    from kio.schema.offset_delete.v0 import request as req_mod
    from kio.schema.offset_delete.v0.response import OffsetDeleteResponse

    from yak.client.connection import BrokerConnectionError
    from yak.client.transactions import TransactionalClient
    from yak.errors import ErrorCode, KafkaError

    client = TransactionalClient(
        bootstrap,
        client_id="yak-cli",
        request_timeout_ms=int(timeout * 1000),
        retries=1,
        security=client_security(),
    )
    what = f"delete offsets of {group!r} on {topic!r}"
    request = req_mod.OffsetDeleteRequest(
        group_id=group,
        topics=(
            req_mod.OffsetDeleteRequestTopic(
                name=topic,
                partitions=tuple(
                    req_mod.OffsetDeleteRequestPartition(partition_index=p) for p in parts
                ),
            ),
        ),
    )
    try:
        for _ in range(3):  # the coordinator may move between FindCoordinator and the call
            node = client.find_coordinator(group, key_type=0)
            resp = client._connect(node).send(request, OffsetDeleteResponse)
            if resp.error_code not in (
                ErrorCode.not_coordinator,
                ErrorCode.coordinator_not_available,
                ErrorCode.coordinator_load_in_progress,
            ):
                break
    except BrokerConnectionError as e:
        fail(f"{what}: {e.message}")
    except KafkaError as e:
        fail(f"{what}: {getattr(e.code, 'name', str(e.code)).upper()}")
    finally:
        client.close()
    if resp.error_code is not ErrorCode.none:
        fail(f"{what}: {resp.error_code.name.upper()}")
    return sorted(
        (
            int(p.partition_index),
            None if p.error_code is ErrorCode.none else p.error_code.name.upper(),
        )
        for t in resp.topics
        for p in t.partitions
    )


@app.command("offset-delete")
@secured
def offset_delete(
    group: Annotated[str, typer.Argument(help="Group id.")],
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic whose offsets to delete.")],
    partition: Annotated[
        list[int] | None,
        typer.Option("--partition", "-p", help="Only these partitions (default: all)."),
    ] = None,
    fmt: Format = "table",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Delete GROUP's committed offsets on TOPIC (kafka-consumer-groups.sh --delete-offsets).

    Refused (GROUP_SUBSCRIBED_TO_TOPIC) for a topic an active member consumes."""
    _check_format(fmt)
    admin, md = connect_admin(bootstrap, timeout)
    tmd = require_topic(md, topic)
    parts = sorted(tmd.partitions)
    if partition:
        missing = sorted(set(partition) - set(parts))
        if missing:
            fail(f"topic {topic!r} has no partition {missing[0]}", 2)
        parts = sorted(set(partition))
    results = _delete_offsets(bootstrap, timeout, group, topic, parts)
    if fmt == "json":
        out.print(json.dumps([{"topic": topic, "partition": p, "error": e} for p, e in results]))
    else:
        table = Table("TOPIC", "PARTITION", "STATUS", box=None)
        for p, e in results:
            table.add_row(topic, str(p), e or "Successful")
        out.print(table)
    failed = [(p, e) for p, e in results if e]
    if failed:
        p, e = failed[0]
        fail(f"delete offsets of {group!r} on {topic}-{p}: {e}")


@app.command("delete")
@secured
def delete(
    group: Annotated[str, typer.Argument(help="Group id (must have no active members).")],
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Delete an empty group and its committed offsets."""
    admin, _ = connect_admin(bootstrap, timeout)
    wait(
        admin.delete_consumer_groups([group], request_timeout=timeout)[group],
        timeout,
        f"delete group {group!r}",
    )
    out.print(f"deleted group {group}")
