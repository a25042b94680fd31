"""`yak consume TOPIC`: print messages as text or JSON lines, like kafka-console-consumer.

Partitions are assigned directly (no consumer group, no offset commits), so reading a
topic never disturbs applications' groups; by default it starts at the end, like Kafka's
console consumer, and `-n` bounds how many messages to print before exiting.
With `--group` it subscribes as a member of that consumer group instead, resuming from
and committing the group's offsets (as kafka-console-consumer's `--group`).
"""

from __future__ import annotations

import base64
import json
import sys
import time
from typing import Annotated, Any

import typer
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

from yak.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    Bootstrap,
    Timeout,
    client_config,
    cluster_metadata,
    describe_kafka_error,
    fail,
    require_topic,
    secured,
)


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


def format_json(msg: Any) -> str:
    ts_type, ts = msg.timestamp()
    obj: dict[str, Any] = {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp": ts if ts_type else None,
        "timestamp_type": {1: "CreateTime", 2: "LogAppendTime"}.get(ts_type),
    }
    _json_bytes(obj, "key", msg.key())
    _json_bytes(obj, "value", msg.value())
    headers = []
    for k, v in msg.headers() or []:
        h: dict[str, Any] = {"key": k}
        _json_bytes(h, "value", v)
        headers.append(h)
    obj["headers"] = headers
    return json.dumps(obj, ensure_ascii=False)


@secured
def consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="Start at the log start offset.")
    ] = False,
    offset: Annotated[
        int | None, typer.Option("--offset", "-o", help="Start at this offset.")
    ] = None,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", help="Only this partition.")
    ] = None,
    max_messages: Annotated[
        int | None, typer.Option("--max-messages", "-n", help="Exit after N messages.", min=0)
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
    print_key: Annotated[
        bool, typer.Option("--print-key", help="text: print KEY<sep>VALUE.")
    ] = False,
    key_separator: Annotated[
        str, typer.Option("--key-separator", help="text: key separator.")
    ] = "\t",
    idle_timeout: Annotated[
        float | None,
        typer.Option("--idle-timeout", help="Exit after this many seconds without a message."),
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
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Print messages of TOPIC (one per line)."""
    if fmt not in ("text", "json"):
        fail(f"invalid --format {fmt!r}: expected text or json", exit_code=2)
    if from_beginning and offset is not None:
        fail("--from-beginning and --offset cannot be combined", exit_code=2)
    if group is not None and (offset is not None or partition is not None):
        fail("--group cannot be combined with --offset or --partition", exit_code=2)
    group_conf = {
        "group.id": group,
        "enable.auto.commit": True,  # plus a final commit in close()
        "enable.auto.offset.store": True,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
    }
    consumer = Consumer(
        client_config(
            bootstrap,
            timeout,
            **{
                # Required by librdkafka; never used: no subscribe, no commits.
                "group.id": "yak-cli",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                **(group_conf if group is not None else {}),
            },
        )
    )
    try:
        tmd = require_topic(cluster_metadata(consumer, bootstrap, timeout), topic)
        if partition is not None and partition not in tmd.partitions:
            fail(f"topic {topic!r} has no partition {partition}", exit_code=2)
        parts = [partition] if partition is not None else sorted(tmd.partitions)
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        if offset is not None:
            start = offset
        if group is not None:
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, p, start) for p in parts])
        count = 0
        last = time.monotonic()
        out = sys.stdout
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
            if fmt == "json":
                out.write(format_json(msg) + "\n")
            else:
                value = _text(msg.value()) or ""
                if print_key:
                    out.write(f"{_text(msg.key()) or ''}{key_separator}{value}\n")
                else:
                    out.write(value + "\n")
            out.flush()
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
