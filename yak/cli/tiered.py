"""`yak tiered status`: per tiered partition, what its leader holds locally, what the object
store holds, and how far uploads lag (issue 25; docs/tiered.md).

Two sources, neither of them private to Yak:

- the wire, from each partition's leader: ListOffsets -2 (the whole log's start, remote
  included), -4 (EARLIEST_LOCAL, KIP-405: the local log's start), -5 (LATEST_TIERED,
  KIP-1005: the last offset uploaded) and -1 (the high watermark), all at v9; and
  DescribeLogDirs for the bytes the leader holds on disk;
- the partition's manifest in the bucket (yak/tiered/metadata.py, read with the bucket's
  credentials and no broker, as Spark's direct reader does): the remote segments, their
  bytes, uploads started but not finished. The bucket is the one the brokers were given
  (`remote.storage.uri`, read with DescribeConfigs) unless `--remote-storage-uri` names
  another; credentials come from `--access-key-id` / `--secret-access-key` or the AWS
  variables, as for the brokers.

Lag is what the leader holds and the store does not: in offsets (high watermark less the
uploaded end), in bytes (the leader's local bytes less those of the uploaded segments it
still holds, the active segment included), and in segments, estimated from the topic's
`segment.bytes` (rolled segments waiting; a broker-side count is not in any Kafka API).
A manifest that cannot be read leaves the remote columns empty and names the error; the
exit code is then 1, as for `yak cluster logdirs`.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

import typer

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

app = typer.Typer(help="Tiered storage (KIP-405): what is uploaded, what lags.",
                  no_args_is_help=True)

@app.command("status")
@secured
def status(
    topic: Annotated[list[str] | None, typer.Option(
        "--topic", "-t", help="Only this topic, repeatable (default: every tiered topic).")]
        = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
    remote_storage_uri: Annotated[str | None, typer.Option(
        "--remote-storage-uri", help="The bucket to read manifests from (default: the"
        " brokers' remote.storage.uri).")] = None,
    access_key_id: Annotated[str | None, typer.Option(
        "--access-key-id", envvar="AWS_ACCESS_KEY_ID", show_envvar=True,
        help="S3 access key for reading the manifests.")] = None,
    secret_access_key: Annotated[str | None, typer.Option(
        "--secret-access-key", envvar="AWS_SECRET_ACCESS_KEY", show_envvar=True,
        help="S3 secret key for reading the manifests.")] = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Per tiered partition: local start/end, uploaded up to, lag, remote size."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import ConfigResource


    admin, md = connect_admin(bootstrap, timeout)
    if topic:
        names = sorted(set(topic))
        for name in names:
            require_topic(md, name)
    else:
        names = sorted(t for t in md.topics if not t.startswith("__"))
    configs: dict[str, dict[str, str]] = {}
    if names:
        futures = admin.describe_configs([ConfigResource("TOPIC", n) for n in names],
                                         request_timeout=timeout)
        for res, fut in futures.items():
            entries = wait(fut, timeout, f"cannot describe topic {res.name}'s configs")
            configs[res.name] = {k: e.value for k, e in entries.items()}
    tiered = [n for n in names if configs[n].get("remote.storage.enable") == "true"]
    untiered = [n for n in names if n not in tiered]
    if not tiered:
        _print_none(names, untiered, as_json)
        return
    ids = _topic_ids(admin, tiered, timeout, TopicCollection)
    leaders = {(t, p): md.topics[t].partitions[p].leader
               for t in tiered for p in md.topics[t].partitions}
    uri = remote_storage_uri or _broker_uri(admin, sorted(md.brokers), timeout, ConfigResource)
    rows = _wire_rows(md, leaders, timeout)
    remote_error = _add_manifests(rows, ids, uri, access_key_id, secret_access_key, timeout)
    for r in rows:
        _add_lag(r, configs[r["topic"]])
    failed = remote_error is not None or any(r["error"] for r in rows)
    if as_json:
        print(json.dumps({"remote_storage_uri": uri, "remote_error": remote_error,
                          "partitions": rows, "not_tiered": untiered if topic else []}))
    else:
        _print_table(rows, uri, remote_error, untiered if topic else [])
    if failed:
        raise typer.Exit(1)


def _print_none(names: list[str], untiered: list[str], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"remote_storage_uri": None, "remote_error": None,
                          "partitions": [], "not_tiered": untiered}))
    elif names:
        print(f"no tiered topic among {', '.join(names)} (remote.storage.enable=false)")
    else:
        print("no topics")


def _topic_ids(admin: Any, names: list[str], timeout: float, collection: Any) -> dict[str, str]:
    """Topic name -> id in the UUID form the bucket's keys use (yak/tiered/metadata.py)."""
    futures = admin.describe_topics(collection(names), request_timeout=timeout)
    out = {}
    for name, fut in futures.items():
        u = wait(fut, timeout, f"cannot describe topic {name}").topic_id
        mask = (1 << 64) - 1
        out[name] = str(uuid.UUID(int=((u.get_most_significant_bits() & mask) << 64)
                                  | (u.get_least_significant_bits() & mask)))
    return out


def _broker_uri(admin: Any, brokers: list[int], timeout: float, resource: Any) -> str | None:
    """The brokers' remote.storage.uri (the first broker that answers with one)."""
    for bid in brokers:
        fut = admin.describe_configs([resource("BROKER", str(bid))],
                                     request_timeout=timeout)
        try:
            entries = next(iter(fut.values())).result(timeout=timeout)
        except Exception:  # noqa: BLE001, S112 - one broker down: ask the next
            continue
        if (entry := entries.get("remote.log.storage.system.enable")) is not None and \
                entry.value != "true":
            continue
        if (entry := entries.get("remote.storage.uri")) is not None and entry.value:
            return str(entry.value)
    return None


def _wire_rows(md: Any, leaders: dict[tuple[str, int], int],
               timeout: float) -> list[dict[str, Any]]:
    """One row per partition with what its leader answers: offsets and local bytes."""
    from yak.cli.cluster_info import _describe_log_dirs
    from yak.client.special_offsets import (
        EARLIEST,
        EARLIEST_LOCAL,
        LATEST,
        LATEST_TIERED,
        list_special_offsets,
    )

    rows = {tp: _row(tp, leader) for tp, leader in sorted(leaders.items())}
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for tp, leader in leaders.items():
        if leader < 0 or leader not in md.brokers:
            rows[tp]["error"] = "no leader"
            continue
        by_leader.setdefault(leader, []).append(tp)
    for leader, tps in by_leader.items():
        b = md.brokers[leader]
        try:
            offsets = {ts: list_special_offsets(b.host, b.port, tps, ts, timeout,
                                                client_security())
                       for ts in (EARLIEST, EARLIEST_LOCAL, LATEST_TIERED, LATEST)}
            dirs = _describe_log_dirs(b.host, b.port, timeout)
        except Exception as e:  # one broker down must not hide the others
            for tp in tps:
                rows[tp]["error"] = f"broker {leader}: {e or type(e).__name__}"
            continue
        sizes = {(p["topic"], p["partition"]): p["size"] for d in dirs for p in d["partitions"]}
        for tp in tps:
            r = rows[tp]
            errors = [v for ts in offsets if isinstance(v := offsets[ts][tp], str)]
            if errors:
                r["error"] = errors[0]
                continue
            last_tiered = offsets[LATEST_TIERED][tp]
            r.update(log_start=offsets[EARLIEST][tp], local_start=offsets[EARLIEST_LOCAL][tp],
                     local_end=offsets[LATEST][tp], local_bytes=sizes.get(tp),
                     uploaded_upto=last_tiered + 1 if last_tiered >= 0 else None)
    return list(rows.values())


def _row(tp: tuple[str, int], leader: int) -> dict[str, Any]:
    return {"topic": tp[0], "partition": tp[1], "leader": leader, "log_start": None,
            "local_start": None, "local_end": None, "local_bytes": None,
            "uploaded_upto": None, "remote_start": None, "remote_segments": None,
            "remote_bytes": None, "uploading_segments": None, "last_upload_ms": None,
            "lag_offsets": None, "lag_bytes": None, "lag_segments_est": None,
            "error": None}


def _add_manifests(rows: list[dict[str, Any]], ids: dict[str, str], uri: str | None,
                   key_id: str | None, secret: str | None, timeout: float) -> str | None:
    """Fill the remote columns from each partition's newest manifest; the error (one line)
    when the bucket cannot be read."""
    import asyncio

    from yak.tiered.metadata import ManifestStore, SegmentState
    from yak.tiered.store import RemoteStore, parse_uri

    if uri is None:
        return "no remote.storage.uri: the brokers run without remote.log.storage.system" \
               ".enable (or pass --remote-storage-uri)"
    try:
        store = RemoteStore(parse_uri(uri), {"access_key_id": key_id,
                                             "secret_access_key": secret},
                            request_timeout_s=timeout)
    except ValueError as e:
        fail(str(e), 2)
    manifests = ManifestStore(store)

    async def load_all() -> list[Any]:
        # Every read finishes (each is bounded by the store's request timeout) before the
        # loop closes. Suspected, not shown: a read still in flight when asyncio.run()
        # ended (the gather ended by the others' first error) is what aborted the process
        # at its exit once in the suite (SIGABRT after the JSON was printed).
        got = await asyncio.gather(*(
            manifests.load(r["topic"], ids[r["topic"]], r["partition"]) for r in rows),
            return_exceptions=True)
        for g in got:
            if isinstance(g, BaseException):
                raise g
        return got

    try:
        loaded = asyncio.run(load_all())
    except Exception as e:  # noqa: BLE001 - the store's error, said once
        text = str(e).strip().splitlines()
        hint = "" if key_id and secret else (
            " (no credentials given: --access-key-id and --secret-access-key, or"
            " AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
        return (f"cannot read the manifests in {uri}:"
                f" {text[0] if text else type(e).__name__}{hint}")
    for r, m in zip(rows, loaded, strict=True):
        copied = m.copied
        r.update(remote_start=m.start_offset, remote_segments=len(copied),
                 remote_bytes=sum(s.size for s in copied),
                 uploading_segments=sum(1 for s in m.segments
                                        if s.state is SegmentState.COPY_SEGMENT_STARTED),
                 last_upload_ms=max((s.event_ms for s in copied), default=None),
                 _held=sum(s.size for s in copied
                           if r["local_start"] is not None
                           and s.base_offset >= r["local_start"]))
        if r["uploaded_upto"] is None and copied:
            r["uploaded_upto"] = m.copied_upto
    return None


def _add_lag(r: dict[str, Any], config: dict[str, str]) -> None:
    held = r.pop("_held", None)
    if r["local_end"] is None:
        return
    upto = r["uploaded_upto"] if r["uploaded_upto"] is not None else r["local_start"]
    r["lag_offsets"] = max(0, r["local_end"] - upto)
    if held is None or r["local_bytes"] is None:
        return
    r["lag_bytes"] = max(0, r["local_bytes"] - held)
    segment_bytes = int(config.get("segment.bytes") or 0)
    if segment_bytes > 0:
        r["lag_segments_est"] = r["lag_bytes"] // segment_bytes


def _print_table(rows: list[dict[str, Any]], uri: str | None, remote_error: str | None,
                 untiered: list[str]) -> None:
    print(f"Remote storage: {uri or 'none'}")
    if remote_error:
        print(f"Remote: {remote_error}")
    head = ("TOPIC-PARTITION", "LEADER", "LOG-START", "LOCAL-START", "LOCAL-END",
            "UPLOADED-TO", "LAG-OFFSETS", "LAG-BYTES", "LAG-SEGS~", "REMOTE-SEGS",
            "REMOTE-BYTES", "UPLOADING")
    table = [head]
    for r in rows:
        if r["error"]:
            table.append((f"{r['topic']}-{r['partition']}", str(r["leader"]),
                          f"error: {r['error']}", *[""] * 9))
            continue
        table.append((f"{r['topic']}-{r['partition']}", str(r["leader"]), *(
            "-" if r[k] is None else str(r[k]) for k in (
                "log_start", "local_start", "local_end", "uploaded_upto", "lag_offsets",
                "lag_bytes", "lag_segments_est", "remote_segments", "remote_bytes",
                "uploading_segments"))))
    widths = [max(len(row[i]) for row in table if not row[2].startswith("error"))
              for i in range(len(head))]
    for row in table:
        if row[2].startswith("error"):
            print(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}")
        else:
            print("  ".join(f"{c:<{w}}" for c, w in zip(row, widths, strict=True)).rstrip())
    for name in untiered:
        print(f"{name}: not tiered (remote.storage.enable=false)")
