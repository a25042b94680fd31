"""`yak consume TOPIC...`: print messages as text or JSON lines, like kafka-console-consumer.

Partitions are assigned directly (no consumer group, no offset commits), so reading a
topic never disturbs applications' groups and needs only READ on the topic; by default it
starts at the end, like Kafka's console consumer, and `-n` bounds how many messages to
print before exiting. This path is aiokafka's consumer without a group id: librdkafka's
consumer needs a group id and then always looks up that group's coordinator (under ACLs:
GROUP_AUTHORIZATION_FAILED for a group it never uses), where kcat and Kafka's own console
consumer use none.
With `--group` it subscribes as a member of that consumer group instead (confluent-kafka),
resuming from and committing the group's offsets (as kafka-console-consumer's `--group`).

`--registry URL` (Yak's gateway HTTP address) decodes values in Confluent's wire format
(magic byte 0, a 4-byte schema id, then Avro, JSON Schema or Protobuf, as `yak produce
--schema-subject` writes them) and prints them as JSON. `--value-format` says what to do with
a value that is not in that format or names a schema the registry lacks: `schema` (the
default with --registry) refuses it (one line, exit 1), `auto` prints it raw, `raw` never
decodes (the default without --registry).

This module is the command and its two readers; how a message is printed (text, JSON,
template) is `consume_format.py`'s, the registry decoding `consume_registry.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from confluent_kafka import Consumer, KafkaError

from yak.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    Bootstrap,
    Timeout,
    client_config,
    client_security,
    cluster_metadata,
    connect_admin,
    describe_kafka_error,
    fail,
    require_topic,
    secured,
)
from yak.cli.consume_format import (
    Record,
    compile_template,
    format_json,
    format_text,
    record_from_aiokafka,
    record_from_confluent,
)
from yak.cli.consume_registry import VALUE_FORMATS, ValueDecoder


@secured
def consume(
    topics: Annotated[
        list[str] | None,
        typer.Argument(
            help="Topics to read; one that starts with ^ is a regular expression (as kcat's),"
            " matched against the topics' names (internal __ topics left out).",
            show_default=False,
        ),
    ] = None,
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="Start at the log start offset.")
    ] = False,
    offset: Annotated[
        int | None, typer.Option("--offset", "-o", help="Start at this offset.")
    ] = None,
    from_timestamp: Annotated[
        int | None,
        typer.Option("--from-timestamp", help="Start at the first message with a timestamp at"
                     " or after this one (epoch milliseconds).", min=0),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Start at messages at most this long ago: 90s, 10m, 2h,"
                     " 1d, 1h30m."),
    ] = None,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", help="Only this partition.")
    ] = None,
    max_messages: Annotated[
        int | None, typer.Option("--max-messages", "-n", help="Exit after N messages.", min=0)
    ] = None,
    fmt: Annotated[
        str,
        typer.Option("--format", "-f",
                     help="text, json, or a template with % (as --format-template)."),
    ] = "text",
    template: Annotated[
        str | None,
        typer.Option(
            "--format-template",
            help="Print each message as this template, as kcat's -f: %t topic, %p partition,"
            " %o offset, %k key, %v (or %s) value, %T timestamp (ms), %h headers (K=V,...),"
            " %K/%V key/value length, %% a %; \\n, \\t, \\r escapes.",
        ),
    ] = None,
    print_key: Annotated[
        bool, typer.Option("--print-key", help="text: print KEY<sep>VALUE.")
    ] = False,
    key_separator: Annotated[
        str, typer.Option("--key-separator", help="text: separator after each printed field.")
    ] = "\t",
    print_timestamp: Annotated[
        bool, typer.Option("--print-timestamp", help="text: print CreateTime:MS first.")
    ] = False,
    print_partition: Annotated[
        bool, typer.Option("--print-partition", help="text: print Partition:N.")
    ] = False,
    print_offset: Annotated[
        bool, typer.Option("--print-offset", help="text: print Offset:N.")
    ] = False,
    print_headers: Annotated[
        bool, typer.Option("--print-headers", help="text: print K:V,K2:V2 (or NO_HEADERS).")
    ] = False,
    idle_timeout: Annotated[
        float | None,
        typer.Option("--idle-timeout", help="Exit after this many seconds without a message."),
    ] = None,
    include: Annotated[
        str | None,
        typer.Option("--include", help="Also read every topic whose whole name matches this"
                     " regular expression (internal __ topics left out)."),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            "-g",
            help="Join this consumer group: share partitions with its members, resume from"
            " and commit its offsets (new groups start at the end unless --from-beginning).",
        ),
    ] = None,
    isolation_level: Annotated[
        str,
        typer.Option(
            "--isolation-level",
            help="read_committed: skip open and aborted transactions' records;"
            " read_uncommitted: print them too.",
        ),
    ] = "read_committed",
    registry: Annotated[
        str | None,
        typer.Option(
            "--registry",
            "-r",
            envvar="YAK_SCHEMA_REGISTRY",
            show_envvar=True,
            help="Schema registry URL (Yak's gateway HTTP address, as kcat's -r): decode"
            " values in Confluent's wire format (Avro, JSON Schema, Protobuf) and print them"
            " as JSON.",
            show_default=False,
        ),
    ] = None,
    value_format: Annotated[
        str | None,
        typer.Option(
            "--value-format",
            help="raw: print values as stored (default without --registry); schema: decode"
            " each with the registry, a value not in the wire format or with an unknown"
            " schema id is an error (default with --registry; rpk's --use-schema-registry,"
            " kcat's -s value=avro); auto: decode what can be, print the rest raw.",
            show_default=False,
        ),
    ] = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Print messages of TOPIC... (one per line)."""
    if value_format is None:
        value_format = "raw" if registry is None else "schema"
    if value_format not in VALUE_FORMATS:
        fail(f"invalid --value-format {value_format!r}: expected raw, schema or auto",
             exit_code=2)
    decode: ValueDecoder | None = None
    if value_format != "raw":
        if registry is None:
            fail(f"--value-format {value_format} needs --registry URL", exit_code=2)
        if not registry.startswith(("http://", "https://")):
            fail(f"--registry must be an http(s) URL, got {registry!r}", exit_code=2)
        decode = ValueDecoder(registry, timeout, strict=value_format == "schema")
    patterns: list[tuple[str, re.Pattern[str], bool]] = []  # (as given, regex, whole name)
    wanted = [(t, False) for t in topics or [] if t.startswith("^")]
    for t, whole in [*wanted, *([(include, True)] if include is not None else [])]:
        try:
            patterns.append((t, re.compile(t), whole))
        except re.error as e:
            fail(f"invalid topic regular expression {t!r}: {e}", exit_code=2)
    if not topics and include is None:
        fail("give at least one TOPIC, or --include REGEX", exit_code=2)
    if isolation_level not in ("read_committed", "read_uncommitted"):
        fail(f"invalid --isolation-level {isolation_level!r}: expected read_committed or"
             " read_uncommitted", exit_code=2)
    if "%" in fmt and template is None:
        template, fmt = fmt, "text"  # rpk's --format '%t %v\n'
    if fmt not in ("text", "json"):
        fail(f"invalid --format {fmt!r}: expected text, json or a template", exit_code=2)
    if template is not None and fmt == "json":
        fail("--format json and --format-template cannot be combined", exit_code=2)
    render = None if template is None else compile_template(template)
    starts = [name for name, given in (("--from-beginning", from_beginning),
                                       ("--offset", offset is not None),
                                       ("--from-timestamp", from_timestamp is not None),
                                       ("--since", since is not None)) if given]
    if len(starts) > 1:
        fail(f"{starts[0]} and {starts[1]} cannot be combined", exit_code=2)
    if since is not None:
        from_timestamp = int(time.time() * 1000) - parse_duration_ms(since)
    if group is not None and (offset is not None or partition is not None
                              or from_timestamp is not None):
        fail("--group cannot be combined with --offset, --partition, --from-timestamp or"
             " --since", exit_code=2)
    out = sys.stdout

    def emit(rec: Record) -> None:
        decoded = None if decode is None else decode(rec)
        if decoded is not None and fmt != "json":
            text = json.dumps(decoded.value, ensure_ascii=False, separators=(",", ":"))
            rec = rec._replace(value=text.encode())
        if render is not None:
            out.write(render(rec))
        elif fmt == "json":
            out.write(format_json(rec, decoded) + "\n")
        else:
            out.write(format_text(rec, print_timestamp=print_timestamp,
                                  print_partition=print_partition, print_offset=print_offset,
                                  print_headers=print_headers, print_key=print_key,
                                  key_separator=key_separator))
        out.flush()

    def resolve(md: Any) -> list[str]:
        """The topics named, then those the patterns match, each once, in that order."""
        names = [t for t in topics or [] if not t.startswith("^")]
        for t in names:
            require_topic(md, t)
        existing = sorted(n for n in md.topics if not n.startswith("__"))
        for given, rx, whole in patterns:
            matched = [n for n in existing if (rx.fullmatch(n) if whole else rx.search(n))]
            if not matched:
                fail(f"no topic matches {given!r}")
            names.extend(matched)
        return list(dict.fromkeys(names))

    try:
        if group is not None:
            _consume_in_group(resolve, group, from_beginning, max_messages, idle_timeout,
                              emit, isolation_level, bootstrap, timeout)
            return
        _admin, md = connect_admin(bootstrap, timeout)  # metadata; no group involved
        names = resolve(md)
        tps: list[tuple[str, int]] = []
        for name in names:
            tmd = md.topics[name]
            if partition is not None and partition not in tmd.partitions:
                fail(f"topic {name!r} has no partition {partition}", exit_code=2)
            tps.extend((name, p) for p in ([partition] if partition is not None
                                           else sorted(tmd.partitions)))
        start: int | str | tuple[str, int] = "beginning" if from_beginning else "end"
        if offset is not None:
            start = offset
        elif from_timestamp is not None:
            start = ("timestamp", from_timestamp)
        asyncio.run(_consume_assigned(tps, start, max_messages, idle_timeout, emit,
                                      isolation_level, bootstrap, timeout))
    except KeyboardInterrupt:
        pass


def _consume_in_group(resolve: Callable[[Any], list[str]], group: str, from_beginning: bool, max_messages: int | None,
                      idle_timeout: float | None, emit: Callable[[Record], None],
                      isolation_level: str, bootstrap: str, timeout: float) -> None:
    """A member of `group` (confluent-kafka): its partitions, its committed offsets."""
    consumer = Consumer(client_config(bootstrap, timeout, **{
        "group.id": group,
        "enable.auto.commit": True,  # plus a final commit in close()
        "enable.auto.offset.store": True,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        "enable.partition.eof": False,
        "isolation.level": isolation_level,
    }))
    try:
        names = resolve(cluster_metadata(consumer, bootstrap, timeout))
        topic = ", ".join(names)
        consumer.subscribe(names)
        count = 0
        last = time.monotonic()
        while max_messages is None or count < max_messages:
            msg = consumer.poll(0.2)
            if msg is None:
                if idle_timeout is not None and time.monotonic() - last > idle_timeout:
                    break
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.retriable() or err.code() == KafkaError._TRANSPORT:
                    continue  # librdkafka reconnects and refetches by itself
                fail(f"consume from {topic!r} failed: {describe_kafka_error(err)}")
            last = time.monotonic()
            count += 1
            emit(record_from_confluent(msg))
    finally:
        consumer.close()


_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration_ms(text: str) -> int:
    """`90s`, `10m`, `2h`, `1d`, `1h30m`, `500ms` -> milliseconds; anything else: exit 2."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        fail(f"invalid --since {text!r}: expected a duration such as 90s, 10m, 2h, 1d or"
             " 1h30m", exit_code=2)
    return int(sum(float(n) * _DURATION_UNITS_MS[u] for n, u in parts))


async def _consume_assigned(parts: list[tuple[str, int]], start: int | str | tuple[str, int],
                            max_messages: int | None, idle_timeout: float | None,
                            emit: Callable[[Record], None], isolation_level: str,
                            bootstrap: str, timeout: float) -> None:
    """Partitions assigned, no group id (aiokafka): no FindCoordinator, nothing committed.

    `start`: "beginning", "end", an offset (out of range: the end, as Kafka's tool) or
    ("timestamp", ms): each partition's first offset at or after ms (none: the end)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import KafkaError as AioKafkaError

    # aiokafka logs through `logging`; without a handler Python's last resort would print
    # its warnings on stderr, where the CLI promises one line.
    log = logging.getLogger("aiokafka")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, client_id="yak-cli",
        enable_auto_commit=False, isolation_level=isolation_level,
        auto_offset_reset="earliest" if start == "beginning" else "latest",
        request_timeout_ms=max(1000, int(timeout * 1000)), fetch_max_wait_ms=200,
        **client_security().aiokafka())
    try:
        try:
            await asyncio.wait_for(consumer.start(), timeout + 2)
        except (AioKafkaError, OSError, TimeoutError) as e:
            fail(f"cannot reach broker at {bootstrap}: {_aiokafka_error(e)}")
        tps = [TopicPartition(t, p) for t, p in parts]
        topic = ", ".join(dict.fromkeys(t for t, _ in parts))
        consumer.assign(tps)
        if start == "beginning":
            await consumer.seek_to_beginning(*tps)
        elif start == "end":
            await consumer.seek_to_end(*tps)
        elif isinstance(start, tuple):
            try:
                found = await consumer.offsets_for_times({tp: start[1] for tp in tps})
            except (AioKafkaError, TimeoutError) as e:
                fail(f"cannot look up offsets by timestamp in {topic!r}: {_aiokafka_error(e)}")
            for tp in tps:
                if found.get(tp) is None:
                    await consumer.seek_to_end(tp)
                else:
                    consumer.seek(tp, found[tp].offset)
        else:
            for tp in tps:
                consumer.seek(tp, int(start))
        count = 0
        last = time.monotonic()
        while max_messages is None or count < max_messages:
            try:
                batches = await consumer.getmany(
                    *tps, timeout_ms=200,
                    max_records=None if max_messages is None else max_messages - count)
            except AioKafkaError as e:
                if getattr(e, "retriable", False):
                    continue  # aiokafka reconnects and refetches by itself
                fail(f"consume from {topic!r} failed: {_aiokafka_error(e)}")
            records = sorted((r for rs in batches.values() for r in rs),
                             key=lambda r: (r.topic, r.partition, r.offset))
            if not records:
                if idle_timeout is not None and time.monotonic() - last > idle_timeout:
                    break
                continue
            last = time.monotonic()
            for r in records:
                if max_messages is not None and count >= max_messages:
                    break
                count += 1
                emit(record_from_aiokafka(r))
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(consumer.stop(), 5)


def _aiokafka_error(e: BaseException) -> str:
    """TOPIC_AUTHORIZATION_FAILED rather than "[Error 29] TopicAuthorizationFailedError"."""
    name = getattr(e, "message", None)
    detail = " ".join(str(a) for a in getattr(e, "args", ()) if a)
    if isinstance(name, str) and name.isupper():
        return f"{name}: {detail}" if detail else name
    return str(e) or type(e).__name__
