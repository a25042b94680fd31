"""The valueFormat decoder on hand-built batches (no Spark, no broker): the polars batch path
and the fastavro fallback give what fastavro gives record by record, in log order, with
tombstones, several schema ids in one batch, and clear errors."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from yak.registry.compat import parse
from yak.spark.registry_codec import RegistryDecodeError, ValueDecoder, arrow_type

BASE = [{"name": "id", "type": "long"}, {"name": "city", "type": "string"},
        {"name": "km", "type": ["null", "double"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}}]
BATCH = {"type": "record", "name": "T", "fields": BASE}  # polars can read it
FALLBACK = {"type": "record", "name": "T", "fields": [
    *BASE, {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}},
    {"name": "m", "type": {"type": "map", "values": "long"}}]}


def _row(i: int) -> dict:
    return {"id": i, "city": f"c{i % 3}", "km": None if i % 2 else i / 4, "tags": ["t"] * (i % 3),
            "kind": "AB"[i % 2], "m": {"k": i}}


@pytest.mark.parametrize("schema", [BATCH, FALLBACK], ids=["polars", "fastavro"])
def test_decoded_batch_equals_fastavro(schema: dict) -> None:
    v1 = parse("AVRO", json.dumps(schema), [])
    v2_schema = {**schema, "fields": [*schema["fields"],
                                      {"name": "extra", "type": "int", "default": 7}]}
    v2 = parse("AVRO", json.dumps(v2_schema), [])
    values: list[bytes | None] = []
    expect: list[dict | None] = []
    for i in range(50):
        sid, p = (1, v1) if i < 20 or i % 5 else (2, v2)
        row = _row(i) | ({"extra": i} if sid == 2 else {})
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, p.parsed, row)
        values.append(struct.pack(">bI", 0, sid) + buf.getvalue())
        got = fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), p.parsed, None)
        expect.append(got | ({} if sid == 2 else {"extra": None}))
    values.insert(10, None)
    expect.insert(10, None)
    dec = ValueDecoder("http://unused", "avro", arrow_type(v2))
    dec.registry._by_id.update({1: v1, 2: v2})
    arr = pa.array([b"pad", *values], pa.binary()).slice(1)  # an offset into the buffers
    out = dec.decode(arr, np.arange(len(values)), "t", 0).to_pylist()
    if "m" in schema["fields"][-1]["name"]:
        for o in out:
            if o is not None:
                o["m"] = dict(o["m"])
    assert out == expect


def test_errors_name_the_offset_and_the_id() -> None:
    v1 = parse("AVRO", json.dumps(BATCH), [])
    dec = ValueDecoder("http://127.0.0.1:9", "avro", arrow_type(v1))
    dec.registry._by_id[1] = v1
    with pytest.raises(RegistryDecodeError, match="t-0@101: the value is not registry-framed"):
        dec.decode(pa.array([b"plain text"]), np.array([101]), "t", 0)
    with pytest.raises(RegistryDecodeError, match="t-0@5: schema id 77 is not in the registry"):
        dec.decode(pa.array([struct.pack(">bI", 0, 77) + b"\x02"]), np.array([5]), "t", 0)
