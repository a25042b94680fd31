"""How `yak consume` prints a message: text (Kafka's console consumer), JSON lines, or a
kcat-style template; and the one `Record` both of its readers (confluent-kafka in a group,
aiokafka without one) produce.

Bytes are printed as UTF-8 (invalid sequences replaced) in text and templates; JSON keeps a
payload that is not UTF-8 as base64 under `<name>_base64`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from yak.cli.common import fail

__all__ = ["Decoded", "Record", "compile_template", "format_json", "format_text",
           "record_from_aiokafka", "record_from_confluent", "text_of"]


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


def text_of(b: bytes | None) -> str | None:
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


class Decoded(NamedTuple):
    """A registry-framed value, decoded."""

    schema_id: int
    value: Any  # JSON-able


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


def record_from_confluent(msg: Any) -> Record:
    ts_type, ts = msg.timestamp()
    return Record(msg.topic(), msg.partition(), msg.offset(), ts if ts_type else None,
                  {1: "CreateTime", 2: "LogAppendTime"}.get(ts_type), msg.key(), msg.value(),
                  list(msg.headers() or []))


def record_from_aiokafka(r: Any) -> Record:
    known = r.timestamp is not None and r.timestamp >= 0
    return Record(r.topic, r.partition, r.offset, r.timestamp if known else None,
                  {0: "CreateTime", 1: "LogAppendTime"}.get(r.timestamp_type) if known else None,
                  r.key, r.value, list(r.headers or []))


def format_text(rec: Record, *, print_timestamp: bool, print_partition: bool,
                print_offset: bool, print_headers: bool, print_key: bool,
                key_separator: str) -> str:
    """One line as Kafka's console consumer prints it (fields in its order: timestamp,
    partition, offset, headers, key), then the value."""
    fields = []
    if print_timestamp:
        fields.append("NO_TIMESTAMP" if rec.timestamp is None
                      else f"{rec.timestamp_type}:{rec.timestamp}")
    if print_partition:
        fields.append(f"Partition:{rec.partition}")
    if print_offset:
        fields.append(f"Offset:{rec.offset}")
    if print_headers:
        fields.append(",".join(f"{k}:{text_of(v) or ''}" for k, v in rec.headers)
                      or "NO_HEADERS")
    if print_key:
        fields.append(text_of(rec.key) or "")
    fields.append(text_of(rec.value) or "")
    return key_separator.join(fields) + "\n"


def _length(b: bytes | None) -> str:
    return "-1" if b is None else str(len(b))


_TEMPLATE_FIELDS: dict[str, Callable[[Record], str]] = {
    "t": lambda r: r.topic,
    "p": lambda r: str(r.partition),
    "o": lambda r: str(r.offset),
    "k": lambda r: text_of(r.key) or "",
    "v": lambda r: text_of(r.value) or "",
    "s": lambda r: text_of(r.value) or "",
    "T": lambda r: "-1" if r.timestamp is None else str(r.timestamp),
    "h": lambda r: ",".join(f"{k}={text_of(v) or ''}" for k, v in r.headers),
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
