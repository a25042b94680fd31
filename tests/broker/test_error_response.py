"""Generic error responses: every API/version with a top-level error field gets a response
kio can encode and decode, carrying the code; the others get None (connection closed)."""

from __future__ import annotations

import dataclasses

from yak.broker.connection import error_response
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode


def test_every_response_with_error_code_is_encodable() -> None:
    checked = 0
    for api_key in range(0, 100):
        for version in kio_compat.known_versions(api_key):
            cls = kio_compat.response_class(api_key, version)
            has = any(f.name == "error_code" for f in dataclasses.fields(cls))
            resp = error_response(api_key, version, ErrorCode.unknown_server_error)
            if not has:
                assert resp is None
                continue
            assert resp is not None, (api_key, version)
            frame = kio_compat.encode_response(7, resp)
            cid, back = kio_compat.decode_response(api_key, version, frame[4:])
            assert cid == 7 and back.error_code == ErrorCode.unknown_server_error
            checked += 1
    assert checked > 100


def test_produce_has_no_top_level_error() -> None:
    assert error_response(0, 9, ErrorCode.unknown_server_error) is None
