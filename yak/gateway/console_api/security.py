"""The ACLs and Users pages' API: who the caller is, whether the cluster enforces ACLs,
ACLs and SCRAM users (issue 13).

Everything goes to the cluster as the caller (`yak.gateway.http_auth.caller_core`), so the
cluster decides who may see or change what: DescribeAcls and DescribeUserScramCredentials
need DESCRIBE on the cluster, CreateAcls/DeleteAcls and AlterUserScramCredentials ALTER
(a super user has both). The console shows its ACL and user pages only when `/whoami`
says the cluster grants DESCRIBE; a caller without it gets 403 (40301) naming
CLUSTER_AUTHORIZATION_FAILED from every route here but `/authorizer`, which answers
`enforced: null` instead (and documents the other pages' errors). Passwords go in (to create a user)
and never come out; what is listed is the mechanism and iteration count, as Kafka's
DescribeUserScramCredentials answers.
"""

from __future__ import annotations

from typing import Any, Literal

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from yak.gateway.cluster import ClusterClient, ClusterError
from yak.gateway.console_api.common import ERRORS as PAGE_ERRORS
from yak.gateway.errors import ErrorBody, RestError, V2Response, from_cluster_error
from yak.gateway.http_auth import caller

router = APIRouter(prefix="/api", default_response_class=V2Response, tags=["console"])
_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorBody} for s in (400, 401, 403, 404, 409, 422, 500, 503)
}

RESOURCE_TYPES = ("TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID")
OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
              "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE")
MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
              "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
# Kafka's enum for the cluster resource is BROKER in confluent-kafka (same code, 4).
_RTYPE = {"TOPIC": ResourceType.TOPIC, "GROUP": ResourceType.GROUP,
          "CLUSTER": ResourceType.BROKER, "TRANSACTIONAL_ID": ResourceType.TRANSACTIONAL_ID}
_RTYPE_NAME = {v: k for k, v in _RTYPE.items()}


class AclBody(BaseModel):
    resource_type: Literal["TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"]
    resource_name: str = Field(min_length=1, max_length=1000)
    pattern_type: Literal["LITERAL", "PREFIXED"] = "LITERAL"
    principal: str = Field(min_length=3, max_length=1000, pattern=r"^[^:]+:.+$")
    host: str = Field(default="*", min_length=1, max_length=255)
    operation: Literal["ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE",
                       "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                       "IDEMPOTENT_WRITE"]
    permission_type: Literal["ALLOW", "DENY"] = "ALLOW"


class UserBody(BaseModel):
    name: str = Field(min_length=1, max_length=255)
    password: str = Field(min_length=1, max_length=1024)
    mechanism: Literal["SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    iterations: int = Field(default=8192, ge=4096, le=16384)


def _cluster(request: Request) -> ClusterClient:
    return caller(request).core.cluster


async def _call(coro: Any) -> Any:
    try:
        return await coro
    except ClusterError as e:
        if e.name == "SECURITY_DISABLED":
            raise RestError(409, 40901, "SECURITY_DISABLED: the cluster has no authorizer "
                            "(authorizer.class.name)") from None
        if e.name == "RESOURCE_NOT_FOUND":  # e.g. deleting a credential the user lacks
            msg = e.message if e.message.startswith(e.name) else f"{e.name}: {e.message}"
            raise RestError(404, 40401, msg) from None
        raise from_cluster_error(e) from None


def _acl_json(b: Any) -> dict[str, Any]:
    return {
        "resource_type": _RTYPE_NAME.get(b.restype, b.restype.name),
        "resource_name": b.name,
        "pattern_type": b.resource_pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission_type": b.permission_type.name,
    }


@router.get("/authorizer", responses=PAGE_ERRORS)
async def authorizer(request: Request) -> Any:
    """Whether the cluster enforces ACLs: its brokers' `authorizer.class.name` (an empty
    one means no authorizer: every principal may do everything, and ACLs, even if listed,
    are not checked). `enforced` is null when the caller may not read broker configs."""
    try:
        name = (await _cluster(request).broker_configs(["authorizer.class.name"]))[
            "authorizer.class.name"]
    except ClusterError:
        return {"enforced": None, "class_name": None}
    return {"enforced": bool(name), "class_name": name or None}




@router.get("/whoami", responses=_ERRORS)
async def whoami(request: Request) -> Any:
    """The caller's principal and what the cluster lets it do on the cluster resource."""
    who = caller(request)
    ops = sorted(await _call(who.core.cluster.cluster_operations()))
    return {
        "principal": who.principal,
        "authenticated": who.authenticated,
        "cluster_operations": ops,
        # DESCRIBE is implied by ALTER and ALL in the authorized-operations bit field.
        "security_visible": "DESCRIBE" in ops,
        "security_editable": "ALTER" in ops,
    }


@router.get("/acls", responses=_ERRORS)
async def list_acls(request: Request) -> Any:
    cluster = _cluster(request)
    # librdkafka drops DescribeAcls' top-level error: a caller without DESCRIBE on the
    # cluster would see an empty list. Ask the cluster what the caller may do first.
    if "DESCRIBE" not in await _call(cluster.cluster_operations()):
        raise RestError(403, 40301, "CLUSTER_AUTHORIZATION_FAILED: not authorized to "
                        "describe ACLs (DESCRIBE on the cluster)")
    bindings = await _call(cluster.describe_acls())
    rows = [_acl_json(b) for b in bindings]
    rows.sort(key=lambda r: (r["resource_type"], r["resource_name"], r["principal"],
                             r["operation"], r["permission_type"]))
    return {"acls": rows}


def _binding(body: AclBody) -> AclBinding:
    name = "kafka-cluster" if body.resource_type == "CLUSTER" else body.resource_name
    return AclBinding(_RTYPE[body.resource_type], name,
                      ResourcePatternType[body.pattern_type], body.principal, body.host,
                      AclOperation[body.operation], AclPermissionType[body.permission_type])


@router.post("/acls", status_code=201, responses=_ERRORS)
async def add_acl(request: Request, body: AclBody) -> Any:
    binding = _binding(body)
    await _call(_cluster(request).create_acls([binding]))
    return _acl_json(binding)


@router.delete("/acls", responses=_ERRORS)
async def remove_acl(request: Request, body: AclBody) -> Any:
    """Remove exactly this binding (a filter with every field given)."""
    b = _binding(body)
    flt = AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                           b.operation, b.permission_type)
    deleted = await _call(_cluster(request).delete_acls([flt]))
    if not deleted:
        raise RestError(404, 40401, "no such ACL")
    return {"deleted": [_acl_json(x) for x in deleted]}


@router.get("/users", responses=_ERRORS)
async def list_users(request: Request) -> Any:
    users = await _call(_cluster(request).scram_users())
    return {"users": [{"name": name, "credentials": [
        {"mechanism": m, "iterations": i} for m, i in creds]} for name, creds in users.items()]}


@router.post("/users", status_code=201, responses=_ERRORS)
async def create_user(request: Request, body: UserBody) -> Any:
    """Create the user's credential for one mechanism, or replace its password."""
    info = ScramCredentialInfo(MECHANISMS[body.mechanism], body.iterations)
    await _call(_cluster(request).alter_scram_users(
        [UserScramCredentialUpsertion(body.name, info, body.password.encode())]))
    return {"name": body.name, "mechanism": body.mechanism, "iterations": body.iterations}


@router.delete("/users/{name}", status_code=204, responses=_ERRORS)
async def delete_user(request: Request, name: str,
                      mechanism: Literal["SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Query(
                          default=None)) -> Response:
    """Delete the user's credential for `mechanism`, or for every mechanism it has."""
    cluster = _cluster(request)
    if mechanism is not None:  # validated by its type (422 in the REST error shape)
        mechs = [mechanism]
    else:
        users = await _call(cluster.scram_users())
        mechs = [m for m, _ in users.get(name, [])]
        if not mechs:
            raise RestError(404, 40401, f"no SCRAM credentials for user {name!r}")
    # KIP-554: one change per user and mechanism; one request each, as `yak user delete`.
    for m in mechs:
        await _call(cluster.alter_scram_users([UserScramCredentialDeletion(name,
                                                                           MECHANISMS[m])]))
    return Response(status_code=204)
