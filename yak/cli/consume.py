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
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any, NamedTuple

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


class Record(NamedTuple):
    """One message, whichever client read it."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    timestamp_type: str | None  # CreateTime / LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="replace")


def _json_bytes(obj: dict[str, Any], name: str, b: bytes | None) -> None:
    """UTF-8 payloads as strings; anything else as base64 under `<name>_base64`."""
    if b is None:
        obj[name] = None
        return
    try:
        obj[name] = b.decode("utf-8")
    except UnicodeDecodeError:
        obj[name] = None
        obj[f"{name}_base64"] = base64.b64encode(b).decode("ascii")


VALUE_FORMATS = ("raw", "schema", "auto")


class Decoded(NamedTuple):
    """A registry-framed value, decoded."""

    schema_id: int
    value: Any  # JSON-able


class ValueDecoder:
    """Confluent wire format -> JSON-able values, each schema id fetched once from the
    registry (with its references). `strict`: a value that cannot be decoded is an error
    (CliError); otherwise it is left raw (None)."""

    def __init__(self, registry: str, timeout: float, strict: bool) -> None:
        self.registry, self.timeout, self.strict = registry, timeout, strict
        self.schemas: dict[int, Any] = {}  # id -> parsed schema, or None: unknown

    def _get(self, path: str) -> Any:
        import httpx

        url = self.registry.rstrip("/") + path
        try:
            r = httpx.get(url, timeout=self.timeout,
                          headers={"accept": "application/vnd.schemaregistry.v1+json"})
        except httpx.HTTPError as e:
            fail(f"schema registry unreachable at {self.registry} ({type(e).__name__}: {e})")
        if r.status_code == 404:
            return None
        try:
            answer = r.json()
        except ValueError:
            answer = None
        if r.status_code >= 400 or not isinstance(answer, dict):
            msg = answer.get("message") if isinstance(answer, dict) else None
            fail(f"schema registry at {self.registry}: {msg or f'HTTP {r.status_code}'}")
        return answer

    def _schema(self, sid: int) -> Any:
        if sid not in self.schemas:
            doc = self._get(f"/schemas/ids/{sid}")
            self.schemas[sid] = None if doc is None else self._parse(sid, doc, 0)
        return self.schemas[sid]

    def _parse(self, sid: int, doc: dict[str, Any], depth: int) -> Any:
        from urllib.parse import quote

        from yak.registry.compat import parse
        from yak.registry.errors import RegistryError

        if depth > 32:
            fail(f"schema {sid}: references nest too deep")
        refs = []
        for ref in doc.get("references") or ():
            sub = self._get(f"/subjects/{quote(ref['subject'], safe='')}/versions/"
                            f"{ref['version']}")
            if sub is None:
                fail(f"schema {sid}: its reference {ref['subject']!r} version"
                     f" {ref['version']} is not in the registry")
            refs.append((ref["name"], self._parse(sid, sub, depth + 1)))
        try:
            return parse(doc.get("schemaType") or "AVRO", doc["schema"], refs)
        except (RegistryError, KeyError) as e:
            fail(f"schema {sid}: {getattr(e, 'message', e)}")

    def __call__(self, rec: Record) -> Decoded | None:
        from yak.registry import serde

        if rec.value is None:
            return None  # a tombstone stays null
        where = f"{rec.topic}/{rec.partition}@{rec.offset}"
        try:
            sid = serde.schema_id_of(rec.value)
        except serde.FramingError:
            return self._refuse(f"value at {where} is not in the schema registry's wire format"
                                " (magic byte 0, schema id); --value-format auto prints it raw")
        schema = self._schema(sid)
        if schema is None:
            return self._refuse(f"value at {where}: schema id {sid} is not in the registry at"
                                f" {self.registry}; --value-format auto prints it raw")
        try:
            return Decoded(sid, serde.decode_payload(schema, memoryview(rec.value)[5:]))
        except Exception as e:  # noqa: BLE001 - fastavro/protobuf/json raise their own
            return self._refuse(f"value at {where} does not decode with schema {sid}"
                                f" ({type(e).__name__}: {e})")

    def _refuse(self, message: str) -> None:
        if self.strict:
            fail(message)
        return None


def format_json(rec: Record, decoded: Decoded | None = None) -> str:
    obj: dict[str, Any] = {
        "topic": rec.topic,
        "partition": rec.partition,
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "timestamp_type": rec.timestamp_type,
    }
    _json_bytes(obj, "key", rec.key)
    if decoded is None:
        _json_bytes(obj, "value", rec.value)
    else:
        obj["value"] = decoded.value
        obj["value_schema_id"] = decoded.schema_id
    headers = []
    for k, v in rec.headers:
        h: dict[str, Any] = {"key": k}
        _json_bytes(h, "value", v)
        headers.append(h)
    obj["headers"] = headers
    return json.dumps(obj, ensure_ascii=False)


def _from_confluent(msg: Any) -> Record:
    ts_type, ts = msg.timestamp()
    return Record(msg.topic(), msg.partition(), msg.offset(), ts if ts_type else None,
                  {1: "CreateTime", 2: "LogAppendTime"}.get(ts_type), msg.key(), msg.value(),
                  list(msg.headers() or []))


def _from_aiokafka(r: Any) -> Record:
    known = r.timestamp is not None and r.timestamp >= 0
    return Record(r.topic, r.partition, r.offset, r.timestamp if known else None,
                  {0: "CreateTime", 1: "LogAppendTime"}.get(r.timestamp_type) if known else None,
                  r.key, r.value, list(r.headers or []))


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
            # Kafka's console consumer order: timestamp, partition, offset, headers, key.
            fields = []
            if print_timestamp:
                fields.append("NO_TIMESTAMP" if rec.timestamp is None
                              else f"{rec.timestamp_type}:{rec.timestamp}")
            if print_partition:
                fields.append(f"Partition:{rec.partition}")
            if print_offset:
                fields.append(f"Offset:{rec.offset}")
            if print_headers:
                fields.append(",".join(f"{k}:{_text(v) or ''}" for k, v in rec.headers)
                              or "NO_HEADERS")
            if print_key:
                fields.append(_text(rec.key) or "")
            fields.append(_text(rec.value) or "")
            out.write(key_separator.join(fields) + "\n")
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
            emit(_from_confluent(msg))
    finally:
        consumer.close()


def _length(b: bytes | None) -> str:
    return "-1" if b is None else str(len(b))


_TEMPLATE_FIELDS: dict[str, Callable[[Record], str]] = {
    "t": lambda r: r.topic,
    "p": lambda r: str(r.partition),
    "o": lambda r: str(r.offset),
    "k": lambda r: _text(r.key) or "",
    "v": lambda r: _text(r.value) or "",
    "s": lambda r: _text(r.value) or "",
    "T": lambda r: "-1" if r.timestamp is None else str(r.timestamp),
    "h": lambda r: ",".join(f"{k}={_text(v) or ''}" for k, v in r.headers),
    "K": lambda r: _length(r.key),
    "V": lambda r: _length(r.value),
    "S": lambda r: _length(r.value),
}
_TEMPLATE_TOKEN = re.compile(r"%(.?)|\\(.?)|[^%\\]+", re.DOTALL)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def compile_template(template: str) -> Callable[[Record], str]:
    """kcat-style `-f` template -> a function of a Record; an unknown `%x`: exit 2."""
    parts: list[str | Callable[[Record], str]] = []
    for m in _TEMPLATE_TOKEN.finditer(template):
        spec, esc = m.group(1), m.group(2)
        if spec is not None:
            if spec == "%":
                parts.append("%")
            elif spec in _TEMPLATE_FIELDS:
                parts.append(_TEMPLATE_FIELDS[spec])
            else:
                fail(f"invalid --format-template {template!r}: unknown %{spec} (expected one"
                     f" of %{' %'.join(_TEMPLATE_FIELDS)} or %%)", exit_code=2)
        elif esc is not None:
            parts.append(_ESCAPES.get(esc, "\\" + esc))
        else:
            parts.append(m.group(0))
    return lambda rec: "".join(p if isinstance(p, str) else p(rec) for p in parts)


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
                emit(_from_aiokafka(r))
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
