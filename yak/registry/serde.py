"""Confluent's wire format: magic byte 0, a 4-byte big-endian schema id, then the payload
(Avro binary; JSON text; Protobuf message indexes then the message). Per schema type,
datum <-> bytes for the REST proxy, the console and the CLI (Spark has its own
vectorized path in `yak.spark.registry_codec`)."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

from yak.protocol.primitives import read_varint, write_varint
from yak.registry.avro import AvroSchema
from yak.registry.json_schema import JsonSchema
from yak.registry.proto import ProtobufSchema

MAGIC = 0
_HEADER = struct.Struct(">bI")


class FramingError(ValueError):
    """Bytes that are not registry-framed (no magic byte 0 and id)."""


def frame(schema_id: int, payload: bytes) -> bytes:
    return _HEADER.pack(MAGIC, schema_id) + payload


def schema_id_of(data: bytes | memoryview) -> int:
    if len(data) < 5 or data[0] != MAGIC:
        raise FramingError("not registry-framed (no magic byte 0 and schema id)")
    return int(_HEADER.unpack_from(data, 0)[1])


def message_indexes(payload: memoryview) -> tuple[list[int], int]:
    """Confluent's Protobuf message-index prefix (zigzag int32 varints, Kafka's
    `ByteUtils.readVarint`): [0] is written as a single 0."""
    count, pos = read_varint(payload, 0, None, FramingError)
    if count == 0:
        return [0], pos
    if count < 0 or count > 100:
        raise FramingError("bad Protobuf message index count")
    out = []
    for _ in range(count):
        v, pos = read_varint(payload, pos, None, FramingError)
        out.append(v)
    return out, pos


def encode_indexes(indexes: list[int]) -> bytes:
    if indexes == [0]:
        return b"\0"
    out = bytearray()
    write_varint(out, len(indexes))
    for i in indexes:
        write_varint(out, i)
    return bytes(out)


# -- per type: JSON-able datum <-> payload ---------------------------------------------------


def encode_json_datum(schema: Any, item: Any) -> bytes:
    """A value in the REST proxy's JSON form -> payload bytes (raises ValueError/TypeError)."""
    if isinstance(schema, AvroSchema):
        from fastavro import json_reader, schemaless_writer

        try:
            datum = next(iter(json_reader(io.StringIO(json.dumps(item)), schema.parsed)))
        except StopIteration:
            raise ValueError("no value") from None
        except (AttributeError, KeyError, IndexError) as e:
            raise ValueError(f"does not match the Avro schema ({type(e).__name__}: {e})") from None
        buf = io.BytesIO()
        schemaless_writer(buf, schema.parsed, datum)
        return buf.getvalue()
    if isinstance(schema, JsonSchema):
        from jsonschema.validators import Draft7Validator, validator_for

        cls = validator_for(schema.obj, default=Draft7Validator)
        err = next(iter(cls(schema.obj).iter_errors(item)), None)
        if err is not None:
            where = "/".join(str(p) for p in err.absolute_path)
            raise ValueError(f"{err.message}" + (f" at '{where}'" if where else ""))
        return json.dumps(item, separators=(",", ":")).encode()
    if isinstance(schema, ProtobufSchema):
        from google.protobuf import json_format

        msg = schema.message_class([0])()
        json_format.ParseDict(item, msg)
        return encode_indexes([0]) + msg.SerializeToString()
    raise TypeError(f"unknown schema {schema!r}")


def decode_payload(schema: Any, payload: memoryview) -> Any:
    """Payload bytes -> a JSON-able value (Avro's JSON encoding, the JSON document, or the
    Protobuf message as JSON)."""
    if isinstance(schema, AvroSchema):
        from fastavro import json_writer, schemaless_reader

        datum = schemaless_reader(io.BytesIO(payload), schema.parsed, None)
        out = io.StringIO()
        json_writer(out, schema.parsed, [datum])
        return json.loads(out.getvalue())
    if isinstance(schema, JsonSchema):
        return json.loads(bytes(payload))
    if isinstance(schema, ProtobufSchema):
        from google.protobuf import json_format

        indexes, pos = message_indexes(payload)
        msg = schema.message_class(indexes).FromString(bytes(payload[pos:]))
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)
    raise TypeError(f"unknown schema {schema!r}")
