"""The gateway core's record formats (no broker: pure data in, data out)."""

from __future__ import annotations

import asyncio
import base64
from collections import namedtuple

import pytest

from yak.gateway.core import GatewayError, Reason, SchemaSpec
from yak.gateway.core.formats import Formats, decode_records, text_or_b64

Rec = namedtuple("Rec", "topic partition offset key value")


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_binary_and_json_round_trip_and_keep_null_apart_from_empty() -> None:
    f = Formats()
    enc = run(f.get("binary").encode("t", False, [None, "", base64.b64encode(b"\xff").decode()],
                                      SchemaSpec()))
    assert enc.data == [None, b"", b"\xff"] and enc.schema_id is None
    assert run(f.get("binary").decode("t", False, enc.data)) == [None, "", "/w=="]
    enc = run(f.get("json").encode("t", True, [None, {"a": [1, 2]}, "s"], None))
    assert enc.data == [None, b'{"a":[1,2]}', b'"s"']
    assert run(f.get("json").decode("t", True, enc.data)) == [None, {"a": [1, 2]}, "s"]


def test_bad_input_and_unknown_formats_are_gateway_errors() -> None:
    f = Formats()
    with pytest.raises(GatewayError) as e:
        run(f.get("binary").encode("t", True, ["not base64!"], None))
    assert e.value.reason is Reason.INVALID_PAYLOAD and "key" in e.value.message
    with pytest.raises(GatewayError) as e:
        f.get("avro")
    assert e.value.reason is Reason.UNSUPPORTED_FORMAT


def test_decode_stops_before_the_first_bad_key_or_value_across_topics() -> None:
    recs = [Rec("a", 0, 0, None, b"1"), Rec("a", 0, 1, b'"k"', b"2"),
            Rec("b", 0, 5, b"3", b"4"), Rec("b", 0, 6, b"5", b"not json"),
            Rec("b", 0, 7, b"6", b"7")]
    got = run(decode_records(Formats().get("json"), recs))
    assert got.keys == [None, "k", 3] and got.values == [1, 2, 4]
    assert got.error is not None and got.error.index == 3
    assert "b-0@6" in got.error.message
    # A bad key before a bad value: the earlier record wins.
    recs2 = [Rec("a", 0, 0, b"1", b"1"), Rec("a", 0, 1, b"{", b"2"), Rec("a", 0, 2, b"3", b"[")]
    got = run(decode_records(Formats().get("json"), recs2))
    assert (got.keys, got.values, got.error.index) == ([1], [1], 1)  # type: ignore[union-attr]
    ok = run(decode_records(Formats().get("json"), recs[:3]))
    assert ok.error is None and len(ok.keys) == 3


def test_text_or_base64() -> None:
    assert text_or_b64(None) == (None, False)
    assert text_or_b64(b"hi") == ("hi", False)
    assert text_or_b64(b"\xff") == ("/w==", True)
    assert text_or_b64(b"hi", force_b64=True) == ("aGk=", True)
