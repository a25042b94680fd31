"""A response that carries only an error code, built for any API and version from kio's
schema: what a connection answers when a handler raises (or a SASL gate refuses), so a
client sees a Kafka error code it retries on instead of a closed connection."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import typing
import uuid
from typing import Any

from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode

log = logging.getLogger(__name__)


def _default_for(f: dataclasses.Field[Any], code: ErrorCode) -> Any:
    kafka_type = f.metadata.get("kafka_type")
    if typing.get_origin(f.type) is tuple:
        return ()
    match kafka_type:
        case "error_code":
            return code
        case "int8" | "int16" | "int32" | "int64" | "uint8" | "uint16" | "uint32" | "uint64":
            return 0
        case "float64":
            return 0.0
        case "string":
            return ""
        case "bytes" | "records":
            return b""
        case "bool":
            return False
        case "uuid":
            return uuid.UUID(int=0)
        case "timedelta_i32" | "timedelta_i64":
            return datetime.timedelta(0)
        case "datetime_i64":
            return datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
        case _:
            if dataclasses.is_dataclass(f.type):
                return _default_entity(f.type, code)
            return None


def _default_entity(cls: Any, code: ErrorCode) -> Any:
    values = {}
    for f in dataclasses.fields(cls):
        if f.name == "error_code":
            values[f.name] = code
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = _default_for(f, code)
    return cls(**values)


def error_response(api_key: int, api_version: int, code: ErrorCode) -> Any | None:
    """A response carrying `code` in its top-level error field, or None if it has none.

    Used when a handler raises: clients understand a top-level error and retry, whereas
    an API with only per-partition errors gets its connection closed instead.
    """
    cls = kio_compat.response_class(api_key, api_version)
    if not any(f.name == "error_code" for f in dataclasses.fields(cls)):
        return None
    try:
        return _default_entity(cls, code)
    except Exception:
        log.exception("cannot build an error response for API %d v%d", api_key, api_version)
        return None
