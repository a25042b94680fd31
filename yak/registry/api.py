"""Confluent Schema Registry's REST API, as a FastAPI router the gateway app mounts at its root.

Paths, bodies, query parameters and error codes are Confluent's, so its clients work
unchanged (confluent-kafka's `SchemaRegistryClient` and serializers are the tests' client).
Requests may be `application/vnd.schemaregistry.v1+json`, `application/json` or untyped;
answers are `application/vnd.schemaregistry.v1+json`. Query parameters clients add that
change nothing here (`verbose`, `fetchMaxId`, `subject`, ...) are accepted.

Writes are made by the elected leader only: a gateway that is not the leader forwards the
request, unchanged, to the leader's HTTP address and relays the answer (Confluent does the
same). The routes are left out of the gateway's OpenAPI document: this API is Confluent's.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from yak.registry import compat
from yak.registry.election import Identity
from yak.registry.errors import (
    REQUEST_FORWARDING_FAILED,
    SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
    SUBJECT_LEVEL_MODE_NOT_CONFIGURED,
    RegistryError,
)
from yak.registry.service import SchemaRegistry
from yak.registry.state import Reference, SchemaVersion

SR_JSON = "application/vnd.schemaregistry.v1+json"
FORWARDED = "x-yak-registry-forwarded"

router = APIRouter(include_in_schema=False)


class SRResponse(JSONResponse):
    media_type = SR_JSON


def install(app: FastAPI, bootstrap: str, timeout_s: float = 10.0,
            security: Any = None) -> SchemaRegistry:
    """Mount the registry on `app` and return it (its `stop()` belongs to the app's shutdown).
    `security`: the gateway's ClientSecurity, which the registry's Kafka clients use too.
    The gateway plugs the registry's record formats into its core itself
    (`yak.gateway.core.registry_formats`): the registry knows nothing of the gateway."""
    registry = SchemaRegistry(bootstrap, timeout_s=timeout_s, security=security)
    app.state.registry = registry
    app.include_router(router)
    app.add_middleware(_LearnAddress, registry=registry)

    @app.exception_handler(RegistryError)
    async def _registry_error(_: Request, e: RegistryError) -> JSONResponse:
        return SRResponse(e.body(), status_code=e.status)

    return registry


class _LearnAddress:
    """Tells the registry this gateway's own HTTP address (the local end of the first
    request's socket): its identity in the leader election, where others forward writes."""

    def __init__(self, app: ASGIApp, registry: SchemaRegistry) -> None:
        self.app = app
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.registry.identity is None and scope["type"] in ("http", "websocket"):
            server = scope.get("server")
            if server and server[1]:
                scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
                self.registry.identity = Identity(str(server[0]), int(server[1]), scheme)
        await self.app(scope, receive, send)


# ------------------------------------------------------------------ helpers


async def _registry(request: Request) -> SchemaRegistry:
    reg: SchemaRegistry = request.app.state.registry
    await reg.ensure_started()
    return reg


def _flag(request: Request, name: str) -> bool:
    return str(request.query_params.get(name, "false")).lower() == "true"


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as e:
        raise RegistryError(400, 400, f"Request body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise RegistryError(422, 422, "Request body must be a JSON object")
    return body


def _schema_body(body: dict[str, Any]) -> tuple[str | None, str, list[Reference]]:
    text = body.get("schema")
    if not isinstance(text, str):
        raise RegistryError(422, 42201, "Invalid schema: the body needs a 'schema' string")
    kind = body.get("schemaType")
    if kind is not None and not isinstance(kind, str):
        raise RegistryError(422, 42201, "Invalid schema: 'schemaType' must be a string")
    refs = []
    for r in body.get("references") or ():
        try:
            refs.append(Reference(str(r["name"]), str(r["subject"]), int(r["version"])))
        except (KeyError, TypeError, ValueError):
            raise RegistryError(422, 42201, "Invalid schema: each reference needs name, "
                                "subject and version") from None
    return kind, text, refs


def _refs_json(sv: SchemaVersion) -> list[dict[str, Any]]:
    return [r.to_json() for r in sv.references]


def _display(reg: SchemaRegistry, sv: SchemaVersion, fmt: str | None) -> str:
    """The schema string to return: `.proto` text for Protobuf unless `format=serialized`."""
    if sv.schema_type != "PROTOBUF":
        return sv.schema
    try:
        parsed = reg.parsed(sv)
    except RegistryError:
        return sv.schema
    if fmt == "serialized":
        return str(parsed.serialized())
    return str(parsed.proto_text())


def _version_json(reg: SchemaRegistry, sv: SchemaVersion, fmt: str | None = None,
                  ) -> dict[str, Any]:
    out: dict[str, Any] = {"subject": sv.subject, "version": sv.version, "id": sv.id}
    if sv.schema_type != "AVRO":
        out["schemaType"] = sv.schema_type
    if sv.references:
        out["references"] = _refs_json(sv)
    out["schema"] = _display(reg, sv, fmt)
    if sv.deleted:
        out["deleted"] = True
    return out


async def _write_here_or_forward(request: Request, reg: SchemaRegistry) -> Response | None:
    """None when this gateway is the leader; otherwise the leader's answer, relayed."""
    if request.headers.get(FORWARDED):
        leader = await reg.leader()
        if reg.identity is not None and leader == reg.identity:
            return None
        raise RegistryError(500, REQUEST_FORWARDING_FAILED,
                            f"forwarded to {reg.identity.url if reg.identity else '?'}, which "
                            f"is not the leader ({leader.url})")
    path = request.url.path + ("?" + request.url.query if request.url.query else "")
    headers = {"content-type": request.headers.get("content-type", SR_JSON), FORWARDED: "1",
               "accept": SR_JSON}
    resp = await reg.forward(request.method, path, await request.body(), headers)
    if resp is None:
        return None
    return Response(resp.content, status_code=resp.status_code,
                    media_type=resp.headers.get("content-type", SR_JSON))


# ------------------------------------------------------------------ schemas


@router.get("/schemas/types")
async def schema_types() -> Response:
    return SRResponse(list(compat.SCHEMA_TYPES))


@router.get("/schemas")
async def list_schemas(request: Request) -> Response:
    reg = await _registry(request)
    deleted = _flag(request, "deleted")
    latest_only = _flag(request, "latestOnly")
    prefix = request.query_params.get("subjectPrefix", "")
    out = []
    for subject in reg.state.subject_names(deleted):
        if not subject.startswith(prefix):
            continue
        versions = reg.state.versions(subject, deleted)
        for sv in versions[-1:] if latest_only else versions:
            out.append(_version_json(reg, sv))
    return SRResponse(out)


def _id(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise RegistryError(404, 40403, f"Schema {raw} not found") from None


@router.get("/schemas/ids/{schema_id}")
async def schema_by_id(request: Request, schema_id: str) -> Response:
    reg = await _registry(request)
    sv = reg.by_id(_id(schema_id))
    out: dict[str, Any] = {}
    if sv.schema_type != "AVRO":
        out["schemaType"] = sv.schema_type
    if sv.references:
        out["references"] = _refs_json(sv)
    out["schema"] = _display(reg, sv, request.query_params.get("format"))
    return SRResponse(out)


@router.get("/schemas/ids/{schema_id}/schema")
async def raw_schema_by_id(request: Request, schema_id: str) -> Response:
    reg = await _registry(request)
    sv = reg.by_id(_id(schema_id))
    return Response(_display(reg, sv, request.query_params.get("format")), media_type=SR_JSON)


def _uses(reg: SchemaRegistry, schema_id: int, deleted: bool) -> list[SchemaVersion]:
    reg.by_id(schema_id)
    return [sv for subject in sorted(reg.state.subjects)
            for sv in reg.state.versions(subject, deleted) if sv.id == schema_id]


@router.get("/schemas/ids/{schema_id}/versions")
async def versions_of_id(request: Request, schema_id: str) -> Response:
    reg = await _registry(request)
    uses = _uses(reg, _id(schema_id), _flag(request, "deleted"))
    return SRResponse([{"subject": sv.subject, "version": sv.version} for sv in uses])


@router.get("/schemas/ids/{schema_id}/subjects")
async def subjects_of_id(request: Request, schema_id: str) -> Response:
    reg = await _registry(request)
    uses = _uses(reg, _id(schema_id), _flag(request, "deleted"))
    return SRResponse(sorted({sv.subject for sv in uses}))


# ------------------------------------------------------------------ subjects


@router.get("/subjects")
async def list_subjects(request: Request) -> Response:
    reg = await _registry(request)
    prefix = request.query_params.get("subjectPrefix", "")
    names = reg.state.subject_names(_flag(request, "deleted") or _flag(request, "deletedOnly"))
    if _flag(request, "deletedOnly"):
        live = set(reg.state.subject_names())
        names = [n for n in names if n not in live]
    return SRResponse([n for n in names if n.startswith(prefix)])


@router.get("/subjects/{subject}/versions")
async def list_versions(request: Request, subject: str) -> Response:
    reg = await _registry(request)
    versions = reg.subject_versions(subject, _flag(request, "deleted"))
    return SRResponse([sv.version for sv in versions])


@router.get("/subjects/{subject}/versions/{version}")
async def get_version(request: Request, subject: str, version: str) -> Response:
    reg = await _registry(request)
    sv = reg.version(subject, version, _flag(request, "deleted"))
    return SRResponse(_version_json(reg, sv, request.query_params.get("format")))


@router.get("/subjects/{subject}/versions/{version}/schema")
async def get_version_schema(request: Request, subject: str, version: str) -> Response:
    reg = await _registry(request)
    sv = reg.version(subject, version, _flag(request, "deleted"))
    return Response(_display(reg, sv, request.query_params.get("format")), media_type=SR_JSON)


@router.get("/subjects/{subject}/versions/{version}/referencedby")
async def referenced_by(request: Request, subject: str, version: str) -> Response:
    reg = await _registry(request)
    sv = reg.version(subject, version, True)
    return SRResponse(reg.state.referenced_by(subject, sv.version))


@router.post("/subjects/{subject}/versions")
async def register(request: Request, subject: str) -> Response:
    reg = await _registry(request)
    body = await _body(request)
    kind, text, refs = _schema_body(body)
    forwarded = await _write_here_or_forward(request, reg)
    if forwarded is not None:
        return forwarded
    sv = await reg.register(subject, kind, text, refs, _flag(request, "normalize"))
    return SRResponse({"id": sv.id, "version": sv.version})


@router.post("/subjects/{subject}")
async def lookup(request: Request, subject: str) -> Response:
    reg = await _registry(request)
    kind, text, refs = _schema_body(await _body(request))
    sv = reg.lookup(subject, kind, text, refs, _flag(request, "normalize"),
                    _flag(request, "deleted"))
    return SRResponse(_version_json(reg, sv))


@router.delete("/subjects/{subject}")
async def delete_subject(request: Request, subject: str) -> Response:
    reg = await _registry(request)
    forwarded = await _write_here_or_forward(request, reg)
    if forwarded is not None:
        return forwarded
    return SRResponse(await reg.delete_subject(subject, _flag(request, "permanent")))


@router.delete("/subjects/{subject}/versions/{version}")
async def delete_version(request: Request, subject: str, version: str) -> Response:
    reg = await _registry(request)
    forwarded = await _write_here_or_forward(request, reg)
    if forwarded is not None:
        return forwarded
    return SRResponse(await reg.delete_version(subject, version, _flag(request, "permanent")))


# ------------------------------------------------------------------ compatibility


async def _compat(request: Request, subject: str, version: str | None) -> Response:
    reg = await _registry(request)
    kind, text, refs = _schema_body(await _body(request))
    if version is not None:
        reg.version(subject, version)
    msgs = reg.compatibility(subject, version, kind, text, refs, _flag(request, "normalize"))
    out: dict[str, Any] = {"is_compatible": not msgs}
    if _flag(request, "verbose") or msgs:
        out["messages"] = msgs
    return SRResponse(out)


@router.post("/compatibility/subjects/{subject}/versions/{version}")
async def compatibility_version(request: Request, subject: str, version: str) -> Response:
    return await _compat(request, subject, version)


@router.post("/compatibility/subjects/{subject}/versions")
async def compatibility_all(request: Request, subject: str) -> Response:
    return await _compat(request, subject, None)


# ------------------------------------------------------------------ config and mode


def _level_body(body: dict[str, Any]) -> str:
    level = body.get("compatibility", body.get("compatibilityLevel"))
    if not isinstance(level, str):
        raise RegistryError(422, 42203, "Invalid compatibility level: the body needs "
                            "'compatibility'")
    return level


@router.get("/config")
async def get_global_config(request: Request) -> Response:
    reg = await _registry(request)
    return SRResponse({"compatibilityLevel": reg.level(None)})


@router.put("/config")
async def put_global_config(request: Request) -> Response:
    reg = await _registry(request)
    level = _level_body(await _body(request))
    forwarded = await _write_here_or_forward(request, reg)
    if forwarded is not None:
        return forwarded
    return SRResponse({"compatibility": await reg.set_level(None, level)})


@router.delete("/config")
async def delete_global_config(request: Request) -> Response:
    reg = await _registry(request)
    forwarded = await _write_here_or_forward(request, reg)
    if forwarded is not None:
        return forwarded
    return SRResponse({"compatibilityLevel": await reg.delete_level(None)})


@router.get("/config/{subject}")
async def get_subject_config(request: Request, subject: str) -> Response:
    reg = await _registry(request)
    level = reg.state.level(subject)
    if level is None:
        if not _flag(request, "defaultToGlobal"):
            raise RegistryError(404, SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
                                f"Subject '{subject}' does not have subject-level "
                                "compatibility configured")
        level = reg.level(None)
    return SRResponse({"compatibilityLevel": level})


@router.put("/config/{subject}")
async def put_subject_config(request: Request, subject: str) -> Response:
    reg = await _registry(request)
    level = _level_body(await _body(request))
    forwarded = await _write_here_or_forward(request, reg)
    if forwarded is not None:
        return forwarded
    return SRResponse({"compatibility": await reg.set_level(subject, level)})


@router.delete("/config/{subject}")
async def delete_subject_config(request: Request, subject: str) -> Response:
    reg = await _registry(request)
    forwarded = await _write_here_or_forward(request, reg)
    if forwarded is not None:
        return forwarded
    return SRResponse({"compatibilityLevel": await reg.delete_level(subject)})


def _mode_body(body: dict[str, Any]) -> str:
    mode = body.get("mode")
    if not isinstance(mode, str):
        raise RegistryError(422, 42204, "Invalid mode: the body needs 'mode'")
    return mode


@router.get("/mode")
async def get_global_mode(request: Request) -> Response:
    reg = await _registry(request)
    return SRResponse({"mode": reg.mode(None)})


@router.put("/mode")
async def put_global_mode(request: Request) -> Response:
    reg = await _registry(request)
    mode = _mode_body(await _body(request))
    forwarded = await _write_here_or_forward(request, reg)
    if forwarded is not None:
        return forwarded
    return SRResponse({"mode": await reg.set_mode(None, mode)})


@router.get("/mode/{subject}")
async def get_subject_mode(request: Request, subject: str) -> Response:
    reg = await _registry(request)
    mode = reg.state.modes.get(subject)
    if mode is None:
        if not _flag(request, "defaultToGlobal"):
            raise RegistryError(404, SUBJECT_LEVEL_MODE_NOT_CONFIGURED,
                                f"Subject '{subject}' does not have subject-level mode "
                                "configured")
        mode = reg.mode(None)
    return SRResponse({"mode": mode})


@router.put("/mode/{subject}")
async def put_subject_mode(request: Request, subject: str) -> Response:
    reg = await _registry(request)
    mode = _mode_body(await _body(request))
    forwarded = await _write_here_or_forward(request, reg)
    if forwarded is not None:
        return forwarded
    return SRResponse({"mode": await reg.set_mode(subject, mode)})


@router.delete("/mode/{subject}")
async def delete_subject_mode(request: Request, subject: str) -> Response:
    reg = await _registry(request)
    forwarded = await _write_here_or_forward(request, reg)
    if forwarded is not None:
        return forwarded
    return SRResponse({"mode": await reg.delete_mode(subject)})


# ------------------------------------------------------------------ the console's helper


@router.post("/api/registry/decode")
async def console_decode(request: Request) -> Response:
    """Decode registry-framed values for the console's message browser.

    Body `{"values": [base64 | null, ...]}`; each answer is null (not registry-framed),
    `{"schema_id", "schema_type", "value"}` (the value as JSON), or `{"schema_id", "error"}`
    (an unknown id or a payload that does not match its schema): one bad message never
    breaks the page.
    """
    import base64
    import binascii

    from yak.registry import serde

    body = await _body(request)
    values = body.get("values")
    if not isinstance(values, list) or len(values) > 1000:
        raise RegistryError(422, 422, "body needs 'values': a list of at most 1000 base64 strings")
    framed: list[tuple[int, bytes] | None] = []
    for v in values:
        try:
            data = base64.b64decode(v, validate=True) if isinstance(v, str) else b""
            framed.append((serde.schema_id_of(data), data))
        except (binascii.Error, ValueError):  # FramingError is a ValueError
            framed.append(None)
    if not any(framed):
        # nothing registry-framed: do not start the registry (or create _schemas) for it
        return SRResponse({"decoded": [None] * len(values)})
    reg = await _registry(request)
    out: list[Any] = []
    for item in framed:
        if item is None:
            out.append(None)
            continue
        schema_id, data = item
        sv = reg.state.by_id.get(schema_id)
        if sv is None:
            out.append({"schema_id": schema_id,
                        "error": f"schema id {schema_id} is not in the registry"})
            continue
        try:
            value = serde.decode_payload(reg.parsed(sv), memoryview(data)[5:])
        except Exception as e:  # a payload that does not match the schema its id names
            out.append({"schema_id": schema_id, "schema_type": sv.schema_type,
                        "error": f"does not decode with schema id {schema_id}: {e}"})
            continue
        out.append({"schema_id": schema_id, "schema_type": sv.schema_type, "value": value})
    return SRResponse({"decoded": out})
