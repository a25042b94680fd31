"""REST errors in the Confluent REST Proxy shape: `{"error_code": int, "message": str}`.

Confluent's error codes are the HTTP status followed by two digits (40401 topic not
found, 40403 consumer instance not found, ...); generic failures use the bare status.
Existing REST Proxy clients branch on these codes, so they are kept exactly.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse

from yak.gateway.cluster import ClusterError
from yak.gateway.core import errors as core_errors
from yak.gateway.core.errors import GatewayError, Reason

log = logging.getLogger(__name__)

V2_JSON = "application/vnd.kafka.v2+json"

TOPIC_NOT_FOUND = 40401
PARTITION_NOT_FOUND = 40402
CONSUMER_INSTANCE_NOT_FOUND = 40403
LEADER_NOT_AVAILABLE = 40404
CONSUMER_FORMAT_MISMATCH = 40601
CONSUMER_ALREADY_SUBSCRIBED = 40901
CONSUMER_ALREADY_EXISTS = 40902
ILLEGAL_STATE = 40903
UNSUPPORTED_MEDIA_TYPE = 41501
INVALID_CONSUMER_CONFIG = 42204
INVALID_PAYLOAD = 42206
KAFKA_ERROR = 50002
KAFKA_RETRIABLE_ERROR = 50003
CLUSTER_UNREACHABLE = 50301

# Offsets and timestamps in JSON bodies are bounded by what a JSON number carries exactly
# (2^53 - 1): a larger literal silently becomes a different float in most clients.
MAX_SAFE_INT = 2**53 - 1


class ErrorBody(BaseModel):
    error_code: int
    message: str


class RestError(Exception):
    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message


class V2Response(JSONResponse):
    media_type = V2_JSON


def error_response(status: int, error_code: int, message: str) -> JSONResponse:
    return V2Response({"error_code": error_code, "message": message}, status_code=status)


# The REST adapter's translation of the core's transport-neutral reasons.
_STATUS: dict[Reason, tuple[int, int]] = {
    Reason.INVALID_ARGUMENT: (422, 42200),
    Reason.INVALID_PAYLOAD: (422, INVALID_PAYLOAD),
    Reason.UNSUPPORTED_FORMAT: (415, UNSUPPORTED_MEDIA_TYPE),
    Reason.TOPIC_NOT_FOUND: (404, TOPIC_NOT_FOUND),
    Reason.PARTITION_NOT_FOUND: (404, PARTITION_NOT_FOUND),
    Reason.SESSION_NOT_FOUND: (404, CONSUMER_INSTANCE_NOT_FOUND),
    Reason.GROUP_NOT_FOUND: (404, 40405),
    Reason.SESSION_EXISTS: (409, CONSUMER_ALREADY_EXISTS),
    Reason.TOPIC_EXISTS: (409, 409),
    Reason.ILLEGAL_STATE: (409, ILLEGAL_STATE),
    Reason.OFFSET_OUT_OF_RANGE: (422, 42207),
    Reason.TOO_LARGE: (413, 41301),
    Reason.UNAVAILABLE: (503, CLUSTER_UNREACHABLE),
    Reason.KAFKA_ERROR: (500, KAFKA_ERROR),
    Reason.UNAUTHENTICATED: (401, 40101),
    Reason.PERMISSION_DENIED: (403, 40301),
}


def from_gateway_error(e: GatewayError) -> RestError:
    status, code = _STATUS[e.reason]
    return RestError(status, code, e.message)


def from_cluster_error(e: ClusterError) -> RestError:
    return from_gateway_error(core_errors.from_cluster_error(e))


def install(app: FastAPI) -> None:
    """Every error leaving the app, ours or the framework's, gets the Confluent body."""

    @app.exception_handler(RestError)
    async def _rest(_: Request, e: RestError) -> JSONResponse:
        return error_response(e.status, e.error_code, e.message)

    @app.exception_handler(ClusterError)
    async def _cluster(_: Request, e: ClusterError) -> JSONResponse:
        r = from_cluster_error(e)
        return error_response(r.status, r.error_code, r.message)

    @app.exception_handler(GatewayError)
    async def _gateway(_: Request, e: GatewayError) -> JSONResponse:
        r = from_gateway_error(e)
        return error_response(r.status, r.error_code, r.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> JSONResponse:
        message = e.detail if isinstance(e.detail, str) else json.dumps(e.detail)
        resp = error_response(e.status_code, e.status_code, message)
        for k, v in (e.headers or {}).items():
            resp.headers[k] = v
        if e.status_code == 405:
            # Starlette's Allow names only the first route matching the path; RFC 9110
            # wants every method the resource supports (GET and POST /topics/{topic}).
            resp.headers["allow"] = ", ".join(_allowed_methods(request))
        return resp

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        errors: list[Any] = list(e.errors())
        if any(err.get("type") == "json_invalid" for err in errors):
            return error_response(400, 400, "Invalid JSON in request body: " + _describe(errors))
        return error_response(422, 422, "Unprocessable entity: " + _describe(errors))


def _describe(errors: list[Any]) -> str:
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        parts.append(f"{loc}: {err.get('msg', 'invalid')}" if loc else str(err.get("msg")))
    return "; ".join(parts)


def _allowed_methods(request: Request) -> list[str]:
    path = request.url.path
    methods: set[str] = set()
    for route in request.app.routes:
        regex = getattr(route, "path_regex", None)
        if regex is not None and regex.match(path) and getattr(route, "methods", None):
            methods |= set(route.methods)
    return sorted(methods)
