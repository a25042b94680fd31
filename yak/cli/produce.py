"""`yak produce TOPIC`: one message per stdin line, like kafka-console-producer.

Acks default to `all` and the command only exits 0 once every line was acknowledged;
anything not acknowledged within the timeout is an error, never silently dropped.

`--null-value` writes tombstones (records with a null value, which compaction uses to
delete a key): with `-K` each line is `KEY<sep>`, else each line is a key. `--timestamp`
sets every record's CreateTime; `--partitioner` picks librdkafka's partitioner for keyed
records (murmur2_random, Java's default, unless told). `--partitioner load_aware` (issue 23)
keeps murmur2_random for keyed records and gives each keyless one the partition whose
leader acknowledges soonest (`yak.client.load_aware`, KIP-794's adaptive partitioning).

`--schema-subject S` (its latest version, or `--schema-version`) or `--schema-id N` encodes
each value, a JSON document per line, with that registry schema (Avro, JSON Schema or
Protobuf) in Confluent's wire format (magic byte, schema id, payload), as a serializer does.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any
from urllib.parse import quote

import typer
from confluent_kafka import KafkaError, Producer

from yak.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    Bootstrap,
    Timeout,
    client_config,
    cluster_metadata,
    describe_kafka_error,
    eprint,
    fail,
    parse_pairs,
    require_topic,
    secured,
)
from yak.client.load_aware import LOAD_AWARE, LoadAwarePartitioner


def _registry_get(registry: str, path: str, timeout: float) -> Any:
    from yak.cli.schema import _call

    return _call(registry, "GET", path, timeout)


def _value_encoder(
    registry: str, timeout: float, subject: str | None, version: str, schema_id: int | None
) -> Any:
    """line -> framed value bytes for the registry schema named by subject or id; raises
    ValueError for a line that is not JSON or does not match."""
    from yak.registry import serde
    from yak.registry.compat import parse
    from yak.registry.errors import RegistryError

    if subject is not None:
        if version != "latest" and not version.isdigit():
            fail(f"invalid --schema-version {version!r}: expected a number or latest", 2)
        doc = _registry_get(
            registry, f"/subjects/{quote(subject, safe='')}/versions/{version}", timeout
        )
        sid = int(doc["id"])
    else:
        sid = int(schema_id or 0)
        doc = _registry_get(registry, f"/schemas/ids/{sid}", timeout)

    def resolve(d: dict[str, Any], depth: int) -> Any:
        if depth > 32:
            fail("schema references nest too deep")
        refs = []
        for ref in d.get("references") or ():
            sub = _registry_get(
                registry,
                f"/subjects/{quote(ref['subject'], safe='')}/versions/{ref['version']}",
                timeout,
            )
            refs.append((ref["name"], resolve(sub, depth + 1)))
        try:
            return parse(d.get("schemaType") or "AVRO", d["schema"], refs)
        except RegistryError as e:
            fail(f"schema {sid}: {e.message}")

    schema = resolve(doc, 0)

    def encode(line: bytes) -> bytes:
        try:
            item = json.loads(line)
        except ValueError as e:
            raise ValueError(f"value is not JSON ({e})") from None
        try:
            return serde.frame(sid, serde.encode_json_datum(schema, item))
        except Exception as e:  # noqa: BLE001 - fastavro/jsonschema/protobuf raise their own
            raise ValueError(f"value does not match schema {sid}: {e}") from None

    return encode


PARTITIONERS = (
    "murmur2_random",
    "murmur2",
    "consistent_random",
    "consistent",
    "fnv1a_random",
    "fnv1a",
    "random",
    LOAD_AWARE,
)


@secured
def produce(
    topic: Annotated[str, typer.Argument(help="Topic to write to.")],
    key_separator: Annotated[
        str | None,
        typer.Option("--key-separator", "-K", help="Split each line into KEY<sep>VALUE."),
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option("--header", "-H", help="Header KEY=VALUE, repeatable.")
    ] = None,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", help="Partition (default: partitioner).")
    ] = None,
    partitioner: Annotated[
        str,
        typer.Option(
            "--partitioner",
            help="Partitioner for keyed records (librdkafka's names): murmur2_random (Java's "
            "default), murmur2, consistent_random, consistent, fnv1a_random, fnv1a or random; "
            "or load_aware (keyless records to the leaders that acknowledge soonest).",
        ),
    ] = "murmur2_random",
    null_value: Annotated[
        bool,
        typer.Option(
            "--null-value",
            "--tombstone",
            help="Write tombstones: every value is null; each line is a key (with -K, KEY<sep>).",
        ),
    ] = False,
    timestamp: Annotated[
        int | None,
        typer.Option("--timestamp", help="Every record's timestamp, in ms since the epoch."),
    ] = None,
    schema_subject: Annotated[
        str | None,
        typer.Option(
            "--schema-subject",
            help="Encode each value (a JSON line) with this subject's registry schema.",
        ),
    ] = None,
    schema_version: Annotated[
        str, typer.Option("--schema-version", help="Version of --schema-subject.")
    ] = "latest",
    schema_id: Annotated[
        int | None,
        typer.Option("--schema-id", help="Encode each value (a JSON line) with this schema id."),
    ] = None,
    registry: Annotated[
        str,
        typer.Option(
            "--registry",
            "-r",
            envvar="YAK_SCHEMA_REGISTRY",
            show_envvar=True,
            help="Schema registry URL (Yak's gateway HTTP address), for --schema-*.",
        ),
    ] = "http://127.0.0.1:8080",
    acks: Annotated[str, typer.Option("--acks", help="0, 1 or all.")] = "all",
    compression: Annotated[
        str, typer.Option("--compression", help="none, gzip, snappy, lz4 or zstd.")
    ] = "none",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No summary line.")] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Write stdin lines to TOPIC, one message each."""
    if acks not in ("0", "1", "all", "-1"):
        fail(f"invalid --acks {acks!r}: expected 0, 1 or all", exit_code=2)
    if partitioner not in PARTITIONERS:
        fail(
            f"invalid --partitioner {partitioner!r}: expected one of {', '.join(PARTITIONERS)}",
            exit_code=2,
        )
    if timestamp is not None and timestamp < 0:
        fail(f"invalid --timestamp {timestamp}: expected ms since the epoch, >= 0", exit_code=2)
    if schema_subject is not None and schema_id is not None:
        fail("choose one of --schema-subject and --schema-id", exit_code=2)
    if null_value and (schema_subject is not None or schema_id is not None):
        fail("--null-value writes no value: it takes no --schema-subject or --schema-id", 2)
    headers = [(k, v.encode()) for k, v in parse_pairs(header, "header")]
    encoder = None
    if schema_subject is not None or schema_id is not None:
        encoder = _value_encoder(registry, timeout, schema_subject, schema_version, schema_id)
    producer = Producer(
        client_config(
            bootstrap,
            timeout,
            acks=acks,
            **{
                "compression.type": compression,
                "linger.ms": 5,
                "message.timeout.ms": max(1000, int(timeout * 1000)),
                "partitioner": "murmur2_random" if partitioner == LOAD_AWARE else partitioner,
            },
        )
    )
    tmd = require_topic(cluster_metadata(producer, bootstrap, timeout), topic)
    if partition is not None and partition not in tmd.partitions:
        fail(f"topic {topic!r} has no partition {partition}", exit_code=2)

    errors: list[KafkaError] = []
    delivered = 0

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(err)
        else:
            delivered += 1

    load_aware = LoadAwarePartitioner() if partitioner == LOAD_AWARE else None
    leaders = {p: pm.leader for p, pm in tmd.partitions.items()}

    def placed(leader: int) -> Any:
        def report(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                load_aware.acked(leader, msg.latency() or 0.0)  # type: ignore[union-attr]
            else:
                load_aware.failed(leader)  # type: ignore[union-attr]
            on_delivery(err, msg)
        return report

    sent = 0
    for lineno, raw in enumerate(sys.stdin.buffer, 1):
        line = raw.rstrip(b"\n").rstrip(b"\r")
        key: bytes | None = None
        if key_separator is not None:
            k, sep, v = line.partition(key_separator.encode())
            if sep:
                key, line = k, v
        value: bytes | None = line
        if encoder is not None:
            try:
                value = encoder(line)
            except ValueError as e:
                producer.flush(timeout)
                fail(f"line {lineno}: {e} ({sent} earlier messages were sent)", exit_code=2)
        if null_value:
            value = None
            if key is None:  # no -K, or a line without the separator: the line is the key
                key = line
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_delivery}
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        if headers:
            kwargs["headers"] = headers
        if partition is not None:
            kwargs["partition"] = partition
        elif key is None and load_aware is not None:
            kwargs["partition"] = load_aware.partition(topic, leaders, len(value or b""))
            kwargs["on_delivery"] = placed(leaders[kwargs["partition"]])
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: let deliveries drain it
                producer.poll(0.1)
        sent += 1
        producer.poll(0)
        if errors:
            break
    remaining = producer.flush(timeout)
    if errors:
        fail(f"produce to {topic!r} failed: {describe_kafka_error(errors[0])}")
    if remaining:
        fail(
            f"produce to {topic!r} failed: {remaining} of {sent} messages not acknowledged in {timeout:g}s"
        )
    if not quiet:
        eprint(f"produced {delivered} messages to {topic}")
