"""`yak share-group ...`: list, describe (members, start offsets, lag), reset-offsets, delete.

Kafka's `kafka-share-groups.sh` for share groups (KIP-932), in the shape of `yak group`.
A share group has no committed offset per consumer: each share partition has one start
offset (below it every record is done), so `describe` shows the start offset and the lag
(records at or above it not yet acknowledged or archived) per partition, and
`reset-offsets` moves the start offset. As Kafka, a reset is refused while the group has
members (NON_EMPTY_GROUP): a member holding records would acknowledge them into a state
the reset just replaced.

The APIs (ListGroups type `share`, ShareGroupDescribe, DescribeShareGroupOffsets,
AlterShareGroupOffsets) go through `yak.client.share_groups` (no Python Kafka client has
them); `delete` is DeleteGroups through confluent-kafka's AdminClient, which any
KIP-932 broker answers for share groups.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Annotated, Any

import typer
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
    secured,
    wait,
)
from yak.cli.group import _parse_datetime
from yak.cli.offset_reset import reset_targets

app = typer.Typer(
    help="List, describe (start offsets, lag), reset offsets of, and delete share groups.",
    no_args_is_help=True,
)
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 400)

Format = Annotated[str, typer.Option("--format", "-f", help="table or json.")]

_EARLIEST, _LATEST = -2, -1


def _check_format(fmt: str) -> None:
    if fmt not in ("table", "json"):
        fail(f"invalid --format {fmt!r}: expected table or json", exit_code=2)


@contextlib.contextmanager
def _client(bootstrap: str, timeout: float) -> Iterator[Any]:
    """The share-group admin client; a broker error or an unreachable broker becomes one
    line (exit 1)."""
    from yak.client.client import YakClientError
    from yak.client.connection import BrokerConnectionError
    from yak.client.share_groups import ShareAdminClient
    from yak.errors import KafkaError

    try:
        client = ShareAdminClient(bootstrap, client_id="yak-cli",
                                  request_timeout_ms=int(timeout * 1000), retries=1,
                                  security=client_security())
    except YakClientError as e:
        fail(str(e), 2)
    try:
        yield client
    except BrokerConnectionError as e:
        fail(f"cannot reach broker at {bootstrap}: {e.message}")
    except KafkaError as e:
        fail(_kafka_message(e))
    finally:
        client.close()


def _kafka_message(e: Any) -> str:
    """`what: CODE_NAME` from the client's `what: code_name` message."""
    what, sep, code = e.message.rpartition(": ")
    return f"{what}: {code.upper()}" if sep and code == code.lower() else e.message


@app.command("list")
@secured
def list_groups(
    state: Annotated[
        list[str] | None,
        typer.Option("--state", help="Only groups in this state (Stable, Empty); repeatable."),
    ] = None,
    fmt: Format = "table",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """List share groups and their states (ListGroups with type share)."""
    _check_format(fmt)
    for s in state or []:
        if s.lower() not in ("stable", "empty", "dead", "unknown"):
            fail(f"invalid --state {s!r}: expected Stable, Empty, Dead or Unknown", 2)
    with _client(bootstrap, timeout) as client:
        groups = client.list_share_groups(states=[s.capitalize() for s in state or []])
    if fmt == "json":
        out.print(json.dumps([{"group": g.group_id, "state": g.state} for g in groups]))
        return
    table = Table("GROUP", "STATE", box=None, pad_edge=False)
    for g in groups:
        table.add_row(g.group_id, g.state)
    out.print(table)


def _topic_partitions(client: Any, only: str | None = None) -> dict[str, list[int]]:
    """Every non-internal topic's partitions (or `only`'s; unknown: exit 2)."""
    topics = client.topic_partitions(only)
    if only is not None and only not in topics:
        fail(f"topic {only!r} does not exist", 2)
    return topics


@app.command("describe")
@secured
def describe(
    group: Annotated[str, typer.Argument(help="Share group id.")],
    fmt: Format = "table",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """State, members with their assignments, and per partition the start offset, the log
    end offset and the lag (records not yet acknowledged or archived)."""
    _check_format(fmt)
    with _client(bootstrap, timeout) as client:
        doc = client.report(group)
    if fmt == "json":
        out.print(json.dumps(doc))
        return
    out.print(f"Group: {group}  State: {doc['state']}  Epoch: {doc['group_epoch']}"
              f"  Assignor: {doc['assignor'] or '-'}  Members: {len(doc['members'])}")
    if doc["members"]:
        mt = Table("MEMBER-ID", "EPOCH", "CLIENT-ID", "HOST", "ASSIGNMENT", box=None)
        for m in doc["members"]:
            mt.add_row(m["member_id"], str(m["member_epoch"]), m["client_id"], m["host"],
                       ",".join(m["assignment"]) or "-")
        out.print(mt)
    pt = Table("TOPIC", "PARTITION", "START-OFFSET", "LOG-END-OFFSET", "LAG", box=None)
    for p in doc["partitions"]:
        pt.add_row(p["topic"], str(p["partition"]),
                   "-" if p["start_offset"] is None else str(p["start_offset"]),
                   str(p["log_end_offset"]),
                   p["error"] or ("-" if p["lag"] is None else str(p["lag"])))
    out.print(pt)


@app.command("reset-offsets")
@secured
def reset_offsets(
    group: Annotated[str, typer.Argument(help="Share group id (must have no members).")],
    topic: Annotated[
        str | None, typer.Option("--topic", "-t", help="Topic whose start offsets to reset.")
    ] = None,
    all_topics: Annotated[
        bool,
        typer.Option("--all-topics", help="Every topic the group has a start offset on."),
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
    partition: Annotated[
        list[int] | None, typer.Option("--partition", "-p", help="Only these partitions.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the new start offsets without setting them.")
    ] = False,
    fmt: Format = "table",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Move GROUP's start offsets on TOPIC or all its topics (AlterShareGroupOffsets; the
    group must have no members). Records in flight there are forgotten: every record from
    the new start offset is delivered again, at delivery count 1."""
    _check_format(fmt)
    chosen = [to_earliest, to_latest, to_offset is not None, to_datetime is not None]
    if sum(chosen) != 1:
        fail("choose exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime", 2)
    if (topic is None) == (not all_topics):
        fail("choose exactly one of --topic and --all-topics", 2)
    if all_topics and partition:
        fail("--partition needs --topic, not --all-topics", 2)
    if to_offset is not None and to_offset < 0:
        fail(f"invalid --to-offset {to_offset}: an offset is >= 0", 2)
    ts = _parse_datetime(to_datetime) if to_datetime is not None else 0
    with _client(bootstrap, timeout) as client:
        if topic is not None:
            parts = _topic_partitions(client, topic)[topic]
            if partition:
                missing = sorted(set(partition) - set(parts))
                if missing:
                    fail(f"topic {topic!r} has no partition {missing[0]}", 2)
                parts = sorted(set(partition))
            tps = [(topic, p) for p in parts]
        # a group the coordinator does not know has no members: its offsets may be set
        # before its first consumer joins, or after a restart forgot it
        desc = client.describe_share_group_or_none(group) if not dry_run else None
        if desc is not None and desc.members:
            fail(f"share group {group!r} is {desc.state} with {len(desc.members)} member(s): "
                 "stop its consumers first (NON_EMPTY_GROUP: offsets can only be reset for "
                 "an empty group)")
        if all_topics:
            found = client.share_group_offsets(group, _topic_partitions(client))
            tps = [(o.topic, o.partition) for o in found if o.start_offset >= 0]
            if not tps:
                fail(f"share group {group!r} has no start offset on any existing topic")
        starts = client.list_offsets({tp: _EARLIEST for tp in tps})
        ends = client.list_offsets({tp: _LATEST for tp in tps})
        target = reset_targets(
            starts, ends, to_earliest=to_earliest, to_latest=to_latest, to_offset=to_offset,
            by_time=lambda: client.list_offsets({tp: ts for tp in tps}))
        if not dry_run:
            errors = client.alter_share_group_offsets(group, target)
            bad = sorted((k, e) for k, e in errors.items() if e)
            if bad:
                (t, p), e = bad[0]
                fail(f"reset offsets of share group {group!r} on {t}-{p}: {e}")
    rows = [{"topic": t, "partition": p, "new_start_offset": o}
            for (t, p), o in sorted(target.items())]
    if fmt == "json":
        out.print(json.dumps(rows))
        return
    table = Table("TOPIC", "PARTITION", "NEW-START-OFFSET", box=None)
    for r in rows:
        table.add_row(r["topic"], str(r["partition"]), str(r["new_start_offset"]))
    out.print(table)
    if dry_run:
        out.print("(dry run: nothing reset)")


@app.command("delete")
@secured
def delete(
    group: Annotated[str, typer.Argument(help="Share group id (must have no members).")],
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Delete an empty share group: its start offsets and in-flight state, and its group
    configs (DeleteGroups)."""
    admin, _ = connect_admin(bootstrap, timeout)
    wait(admin.delete_consumer_groups([group], request_timeout=timeout)[group],
         timeout, f"delete share group {group!r}")
    out.print(f"deleted share group {group}")
