"""`yak topic ...`: create, list, describe, alter-config, add-partitions, trim, delete.

Thin layers over confluent-kafka's AdminClient, so they work against Kafka, Redpanda or
Yak alike and exercise Yak's admin APIs the way real tools do.
"""

from __future__ import annotations

import json
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Annotated, Any

import typer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from rich.console import Console
from rich.table import Table

from yak.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    Bootstrap,
    Timeout,
    connect_admin,
    describe_kafka_error,
    fail,
    parse_pairs,
    require_topic,
    secured,
    wait,
)

app = typer.Typer(
    help="Create, list, describe, reconfigure and delete topics.", no_args_is_help=True
)
out = Console(highlight=False, soft_wrap=True)


@app.command("create")
@secured
def create(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    partitions: Annotated[
        int, typer.Option("--partitions", "-p", help="Partitions (-1: broker's num.partitions).")
    ] = -1,
    replication_factor: Annotated[
        int, typer.Option("--replication-factor", "-r", help="Replicas (-1: broker default).")
    ] = -1,
    config: Annotated[
        list[str] | None, typer.Option("--config", "-c", help="Topic config KEY=VALUE, repeatable.")
    ] = None,
    if_not_exists: Annotated[
        bool, typer.Option("--if-not-exists", help="Succeed if the topic already exists.")
    ] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Create a topic."""
    configs = dict(parse_pairs(config, "topic config"))
    admin, _ = connect_admin(bootstrap, timeout)
    new = NewTopic(
        name, num_partitions=partitions, replication_factor=replication_factor, config=configs
    )
    fut = admin.create_topics([new], request_timeout=timeout)[name]
    try:
        fut.result(timeout=timeout)
    except KafkaException as e:
        if if_not_exists and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        fail(f"cannot create topic {name!r}: {describe_kafka_error(e)}")
    except FutureTimeout:
        fail(f"cannot create topic {name!r}: timed out after {timeout:g}s")
    out.print(f"created topic {name}")


@app.command("list")
@secured
def list_topics(
    internal: Annotated[bool, typer.Option("--internal", help="Include internal topics.")] = False,
    fmt: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """List topics with their partition counts."""
    _, md = connect_admin(bootstrap, timeout)
    rows = []
    for name in sorted(md.topics):
        if name.startswith("__") and not internal:
            continue
        t = md.topics[name]
        rf = max((len(p.replicas) for p in t.partitions.values()), default=0)
        rows.append({"name": name, "partitions": len(t.partitions), "replication_factor": rf})
    if fmt == "json":
        print(json.dumps(rows))
        return
    if fmt != "table":
        fail(f"invalid --format {fmt!r}: expected table or json", exit_code=2)
    table = Table("TOPIC", "PARTITIONS", "REPLICATION", box=None, pad_edge=False)
    for r in rows:
        table.add_row(r["name"], str(r["partitions"]), str(r["replication_factor"]))
    out.print(table)


def _offsets(admin: Any, topic: str, n: int, timeout: float) -> dict[int, tuple[int, int]]:
    """(log start, log end) per partition; empty if the broker lacks ListOffsets."""
    result: dict[int, tuple[int, int]] = {}
    try:
        tps = [TopicPartition(topic, p) for p in range(n)]
        early = admin.list_offsets(
            {tp: OffsetSpec.earliest() for tp in tps}, request_timeout=timeout
        )
        late = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, request_timeout=timeout)
        for tp in tps:
            lo = early[tp].result(timeout=timeout).offset
            hi = late[tp].result(timeout=timeout).offset
            result[tp.partition] = (lo, hi)
    except Exception:  # offsets are extra information; describe still works without them
        return {}
    return result


_SOURCE_NAMES = {
    ConfigSource.DYNAMIC_TOPIC_CONFIG.value: "topic",
    ConfigSource.DYNAMIC_BROKER_CONFIG.value: "dynamic-broker",
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value: "dynamic-default-broker",
    ConfigSource.STATIC_BROKER_CONFIG.value: "broker",
    ConfigSource.DEFAULT_CONFIG.value: "default",
}


@app.command("describe")
@secured
def describe(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    all_configs: Annotated[
        bool, typer.Option("--all-configs", help="Show defaults too, not only overrides.")
    ] = False,
    print_configs: Annotated[
        bool,
        typer.Option(
            "--print-configs",
            "-c",
            help="Print only the configs whose value is not the default (topic or broker"
            " overrides), each with its source and the synonyms it overrides.",
        ),
    ] = False,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Partitions (leader, replicas, ISR, offsets) and configs of a topic."""
    if fmt not in ("text", "json"):
        fail(f"invalid --format {fmt!r}: expected text or json", exit_code=2)
    admin, md = connect_admin(bootstrap, timeout)
    tmd = require_topic(md, name)
    n = len(tmd.partitions)
    offsets = _offsets(admin, name, n, timeout)
    res = ConfigResource(ResourceType.TOPIC, name)
    entries: dict[str, Any] = wait(
        admin.describe_configs([res], request_timeout=timeout)[res],
        timeout,
        f"cannot describe configs of {name!r}",
    )
    if print_configs:
        _print_configs(name, entries, all_configs, fmt)
        return
    remote_error, tiered = None, {}
    rse = entries.get("remote.storage.enable")
    if rse is not None and rse.value == "true":
        remote_error, tiered = _tiered_rows(admin, md, name, timeout)
    configs = {
        k: {"value": e.value, "source": _SOURCE_NAMES.get(e.source, str(e.source))}
        for k, e in sorted(entries.items())
        if all_configs or e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }
    parts = []
    for p in sorted(tmd.partitions):
        pmd = tmd.partitions[p]
        lo, hi = offsets.get(p, (None, None))
        parts.append(
            {
                "partition": p,
                "leader": pmd.leader,
                "replicas": list(pmd.replicas),
                "isr": list(pmd.isrs),
                "log_start_offset": lo,
                "log_end_offset": hi,
            }
        )
        if tiered:
            row = tiered.get(p, {})
            parts[-1].update({k: row.get(k) for k in _TIERED_KEYS})
    if fmt == "json":
        doc: dict[str, Any] = {"topic": name, "partitions": parts, "configs": configs}
        if tiered:
            doc["remote_error"] = remote_error
        print(json.dumps(doc))
        return
    out.print(
        f"Topic: {name}  Partitions: {n}  ReplicationFactor: {len(tmd.partitions[0].replicas) if n else 0}"
    )
    table = Table(
        "PARTITION", "LEADER", "REPLICAS", "ISR", "START", "END", box=None, pad_edge=False
    )
    if tiered:
        for head in _TIERED_HEADS:
            table.add_column(head)
    for r in parts:
        table.add_row(
            str(r["partition"]),
            str(r["leader"]),
            ",".join(map(str, r["replicas"])),
            ",".join(map(str, r["isr"])),
            "" if r["log_start_offset"] is None else str(r["log_start_offset"]),
            "" if r["log_end_offset"] is None else str(r["log_end_offset"]),
            *(("" if r[k] is None else str(r[k]) for k in _TIERED_KEYS) if tiered else ()),
        )
    # Twelve columns do not fit 80: never cut a tiered table's heads to "LOCA…".
    (Console(highlight=False, width=max(out.width, 160)) if tiered else out).print(table)
    if remote_error:
        out.print(f"Remote: {remote_error}")
    if configs:
        out.print("Configs:")
        for k, c in configs.items():
            out.print(f"  {k}={c['value']}  ({c['source']})")


# A tiered topic's extra columns (issue 25): the leader's local log and what is remote.
_TIERED_KEYS = ("local_start", "remote_start", "uploaded_upto", "local_bytes",
                "remote_bytes", "remote_segments")
_TIERED_HEADS = ("LOCAL-START", "REMOTE-START", "UPLOADED-TO", "LOCAL-BYTES",
                 "REMOTE-BYTES", "REMOTE-SEGS")


def _tiered_rows(admin: Any, md: Any, name: str, timeout: float
                 ) -> tuple[str | None, dict[int, dict[str, Any]]]:
    """Local vs remote per partition of a tiered topic, read as `yak tiered status`
    reads them (its helpers, yak/cli/tiered.py): ListOffsets -2/-4/-5/-1 and DescribeLogDirs
    from each leader, the manifest from the brokers' bucket (credentials from the AWS
    variables). The error, when there is one, in one line; the wire columns stay."""
    from confluent_kafka import TopicCollection

    from yak.cli import tiered as t

    leaders = {(name, p): pmd.leader for p, pmd in md.topics[name].partitions.items()}
    rows = t._wire_rows(md, leaders, timeout)
    uri = t._broker_uri(admin, sorted(md.brokers), timeout, ConfigResource)
    ids = t._topic_ids(admin, [name], timeout, TopicCollection)
    error = t._add_manifests(rows, ids, uri, None, None, timeout)
    for r in rows:
        r.pop("_held", None)
        if r["remote_start"] is None and r["uploaded_upto"] is not None:
            r["remote_start"] = r["log_start"]  # the whole log's start is the remote one
    errors = [f"{r['topic']}-{r['partition']}: {r['error']}" for r in rows if r["error"]]
    return error or (errors[0] if errors else None), {r["partition"]: r for r in rows}


def _source(source: Any) -> str:
    return _SOURCE_NAMES.get(int(source), str(source))


def _print_configs(name: str, entries: dict[str, Any], all_configs: bool, fmt: str) -> None:
    """`describe --print-configs`: non-default configs (all with --all-configs), with sources.

    A value's source is where it comes from (`topic`: set on the topic; `broker`: the
    broker's server.properties; `dynamic-broker` ...); `synonyms` is DescribeConfigs'
    chain of places that could set it, most specific first (the topic config, then the
    broker's `log.*` settings, then the default), so one sees what a value overrides.
    """
    configs: dict[str, Any] = {}
    for k, e in sorted(entries.items()):
        src = _source(e.source)
        if src == "default" and not all_configs:
            continue
        synonyms = [
            {"name": s.name, "value": s.value, "source": _source(s.source)}
            for s in (e.synonyms or {}).values()
        ]
        value = None if e.is_sensitive else e.value
        configs[k] = {"value": value, "source": src, "synonyms": synonyms}
    if fmt == "json":
        print(json.dumps({"topic": name, "configs": configs}))
        return
    if not configs:
        out.print(f"topic {name} has no configs other than the defaults")
        return
    table = Table("KEY", "VALUE", "SOURCE", "OVERRIDES", box=None, pad_edge=False)
    for k, c in configs.items():
        overridden = [f"{s['name']}={s['value']} ({s['source']})" for s in c["synonyms"][1:]]
        value = "(sensitive)" if c["value"] is None else c["value"]
        table.add_row(k, value, c["source"], ", ".join(overridden))
    out.print(table)


@app.command("alter-config")
@secured
def alter_config(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    set_: Annotated[
        list[str] | None, typer.Option("--set", "-s", help="Set KEY=VALUE, repeatable.")
    ] = None,
    delete: Annotated[
        list[str] | None, typer.Option("--delete", "-d", help="Back to default: KEY, repeatable.")
    ] = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Change topic configs (incrementally: configs not named keep their values)."""
    pairs = parse_pairs(set_, "config")
    if not pairs and not delete:
        fail("nothing to change: give --set KEY=VALUE or --delete KEY", exit_code=2)
    admin, md = connect_admin(bootstrap, timeout)
    require_topic(md, name)
    ops = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in pairs]
    ops += [
        ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete or []
    ]
    res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=ops)
    wait(
        admin.incremental_alter_configs([res], request_timeout=timeout)[res],
        timeout,
        f"cannot alter configs of {name!r}",
    )
    out.print(f"altered configs of topic {name}")


@app.command("add-partitions")
@secured
def add_partitions(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    total: Annotated[int, typer.Option("--total", "-p", help="New total number of partitions.")],
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Grow a topic to TOTAL partitions (partitions can never be removed)."""
    if total < 1:
        fail(f"invalid --total {total}: expected a positive number of partitions", exit_code=2)
    admin, md = connect_admin(bootstrap, timeout)
    current = len(require_topic(md, name).partitions)
    if total <= current:
        fail(
            f"INVALID_PARTITIONS: cannot add partitions to {name!r}: it already has"
            f" {current} partitions"
            f" (--total must be more than that; partitions can never be removed)",
            exit_code=2,
        )
    wait(
        admin.create_partitions([NewPartitions(name, total)], request_timeout=timeout)[name],
        timeout,
        f"cannot add partitions to {name!r}",
    )
    out.print(f"topic {name} now has {total} partitions")


@app.command("trim")
@secured
def trim(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    partition: Annotated[
        list[int] | None,
        typer.Option(
            "--partition", "-p", help="Partition to trim, repeatable (default: every partition)."
        ),
    ] = None,
    offset: Annotated[
        int | None,
        typer.Option(
            "--offset",
            "-o",
            help="Delete the records before this offset (-1: every record, up to the high"
            " watermark).",
        ),
    ] = None,
    before_timestamp: Annotated[
        int | None,
        typer.Option(
            "--before-timestamp",
            help="Delete the records older than this time (ms since the epoch) instead.",
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Delete a partition's oldest records (DeleteRecords): its log start moves forward."""
    if fmt not in ("text", "json"):
        fail(f"invalid --format {fmt!r}: expected text or json", exit_code=2)
    if (offset is None) == (before_timestamp is None):
        fail("give exactly one of --offset O and --before-timestamp MS", exit_code=2)
    if offset is not None and offset < -1:
        fail(f"invalid --offset {offset}: expected an offset, or -1 for all", exit_code=2)
    if before_timestamp is not None and before_timestamp < 0:
        fail(
            f"invalid --before-timestamp {before_timestamp}: expected ms since the epoch",
            exit_code=2,
        )
    admin, md = connect_admin(bootstrap, timeout)
    n = len(require_topic(md, name).partitions)
    parts = sorted(set(partition)) if partition else list(range(n))
    bad = [p for p in parts if not 0 <= p < n]
    if bad:
        fail(f"topic {name!r} has no partition {bad[0]} (it has {n})", exit_code=2)
    if before_timestamp is not None:
        # The first offset at or after the time; -1 (none) means every record is older.
        tps = [TopicPartition(name, p) for p in parts]
        found = admin.list_offsets(
            {tp: OffsetSpec.for_timestamp(before_timestamp) for tp in tps},
            request_timeout=timeout,
        )
        targets = {
            tp.partition: wait(found[tp], timeout, f"cannot look up offsets of {name!r}").offset
            for tp in tps
        }
    else:
        targets = {p: offset for p in parts}
    request = [TopicPartition(name, p, o if o >= 0 else -1) for p, o in targets.items()]
    futures = admin.delete_records(request, request_timeout=timeout)
    rows = []
    for tp in request:
        deleted = wait(futures[tp], timeout, f"cannot trim {name!r} partition {tp.partition}")
        rows.append({"partition": tp.partition, "log_start_offset": deleted.low_watermark})
    if fmt == "json":
        print(json.dumps({"topic": name, "partitions": rows}))
        return
    for r in rows:
        out.print(
            f"trimmed {name} partition {r['partition']}: log start offset now"
            f" {r['log_start_offset']}"
        )


@app.command("delete")
@secured
def delete_topics(
    names: Annotated[list[str], typer.Argument(help="Topic names.")],
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Delete topics and all their data."""
    admin, md = connect_admin(bootstrap, timeout)
    for n in names:
        require_topic(md, n)
    futures = admin.delete_topics(names, request_timeout=timeout)
    for n in names:
        wait(futures[n], timeout, f"cannot delete topic {n!r}")
        out.print(f"deleted topic {n}")
