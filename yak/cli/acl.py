"""`yak acl add|list|remove`: ACLs with the options of Kafka's `kafka-acls.sh`.

    yak acl add --allow-principal User:alice --operation read --operation describe \\
        --topic orders- --resource-pattern-type prefixed
    yak acl add --deny-principal User:bob --operation write --topic payments
    yak acl list [--topic T | --group G | --cluster | --transactional-id X] [--principal P]
    yak acl remove --principal User:bob --topic payments

Built on confluent-kafka's AdminClient (CreateAcls, DescribeAcls, DeleteAcls), so it works
on any Kafka cluster with an authorizer. `list` and `remove` take filters: an option left
out matches anything. librdkafka drops DescribeAcls' top-level error (a refused listing
looks empty), so `list` first checks the broker has an authorizer and says so.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from yak.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    Bootstrap,
    Timeout,
    connect_admin,
    fail,
    secured,
    wait,
)

app = typer.Typer(help="Add, list and remove ACLs (kafka-acls).", no_args_is_help=True)

Topic = Annotated[str | None, typer.Option("--topic", help="A TOPIC resource.")]
Group = Annotated[str | None, typer.Option("--group", help="A GROUP resource.")]
Cluster = Annotated[bool, typer.Option("--cluster", help="The CLUSTER resource.")]
TxnId = Annotated[str | None, typer.Option("--transactional-id",
                                           help="A TRANSACTIONAL_ID resource.")]
Pattern = Annotated[str | None, typer.Option(
    "--resource-pattern-type",
    help="literal or prefixed (add); list/remove also take any and match.")]
Operations = Annotated[list[str] | None, typer.Option(
    "--operation", help="read, write, create, delete, alter, describe, cluster_action, "
    "describe_configs, alter_configs, idempotent_write, all; repeatable.")]
Format = Annotated[str, typer.Option("--format", "-f", help="table or json.")]


def _enum(cls: Any, text: str, what: str) -> Any:
    name = text.strip().upper().replace("-", "_")
    if name == "CLUSTERACTION":
        name = "CLUSTER_ACTION"
    try:
        return cls[name]
    except KeyError:
        choices = ", ".join(m.name.lower() for m in cls if m.name not in ("UNKNOWN",))
        fail(f"invalid {what} {text!r}: expected one of {choices}", exit_code=2)


def _resource(topic: str | None, group: str | None, cluster: bool,
              txn: str | None, required: bool) -> tuple[Any, str | None]:
    given = [(ResourceType.TOPIC, topic), (ResourceType.GROUP, group),
             (ResourceType.TRANSACTIONAL_ID, txn)]
    chosen = [(t, n) for t, n in given if n is not None]
    if cluster:
        chosen.append((ResourceType.BROKER, "kafka-cluster"))  # librdkafka's CLUSTER
    if len(chosen) > 1:
        fail("give one resource: --topic, --group, --cluster or --transactional-id", 2)
    if not chosen:
        if required:
            fail("a resource is required: --topic, --group, --cluster or --transactional-id", 2)
        return ResourceType.ANY, None
    return chosen[0]


def _principal(p: str) -> str:
    if ":" not in p or not p.split(":", 1)[1]:
        fail(f"invalid principal {p!r}: expected TYPE:NAME, e.g. User:alice", exit_code=2)
    return p


_RESOURCE_NAMES = {ResourceType.BROKER: "CLUSTER"}


def _row(b: AclBinding) -> dict[str, str]:
    return {
        "resource_type": _RESOURCE_NAMES.get(b.restype, b.restype.name),
        "name": b.name,
        "pattern_type": b.resource_pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission_type.name,
    }


def _print(bindings: list[AclBinding], fmt: str) -> None:
    rows = sorted((_row(b) for b in bindings), key=lambda r: tuple(r.values()))
    if fmt == "json":
        print(json.dumps(rows))
        return
    if not rows:
        print("no ACLs")
        return
    for r in rows:
        print(f"{r['resource_type']}:{r['pattern_type']}:{r['name']}  {r['principal']}  "
              f"{r['permission']} {r['operation']} from host {r['host']}")


@app.command("add")
@secured
def add(
    allow_principal: Annotated[list[str] | None, typer.Option(
        "--allow-principal", help="Principal to allow, e.g. User:alice; repeatable.")] = None,
    deny_principal: Annotated[list[str] | None, typer.Option(
        "--deny-principal", help="Principal to deny; repeatable.")] = None,
    operation: Operations = None,
    topic: Topic = None,
    group: Group = None,
    cluster: Cluster = False,
    transactional_id: TxnId = None,
    pattern: Pattern = "literal",
    host: Annotated[str, typer.Option("--host", help="Client IP the ACL applies to.")] = "*",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Add ALLOW / DENY ACLs for principals and operations on one resource."""
    rtype, name = _resource(topic, group, cluster, transactional_id, required=True)
    ptype = _enum(ResourcePatternType, pattern or "literal", "--resource-pattern-type")
    if ptype not in (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED):
        fail("--resource-pattern-type for add is literal or prefixed", exit_code=2)
    if not operation:
        fail("at least one --operation is required", exit_code=2)
    if not allow_principal and not deny_principal:
        fail("give --allow-principal or --deny-principal", exit_code=2)
    ops = [_enum(AclOperation, o, "operation") for o in operation]
    bindings = [
        AclBinding(rtype, name, ptype, _principal(p), host, op, perm)
        for perm, principals in ((AclPermissionType.ALLOW, allow_principal or []),
                                 (AclPermissionType.DENY, deny_principal or []))
        for p in principals for op in ops
    ]
    admin, _ = connect_admin(bootstrap, timeout)
    for b, fut in admin.create_acls(bindings, request_timeout=timeout).items():
        wait(fut, timeout, f"add ACL {b.principal} {b.operation.name} on {name}")
    print(f"added {len(bindings)} ACL(s)")


def _filter(topic: str | None, group: str | None, cluster: bool, txn: str | None,
            pattern: str | None, principal: str | None, operation: list[str] | None,
            permission: str | None, host: str | None) -> list[AclBindingFilter]:
    rtype, name = _resource(topic, group, cluster, txn, required=False)
    default = "literal" if name is not None else "any"
    ptype = _enum(ResourcePatternType, pattern or default, "--resource-pattern-type")
    perm = (AclPermissionType.ANY if permission is None
            else _enum(AclPermissionType, permission, "--permission"))
    ops = [_enum(AclOperation, o, "operation") for o in operation] if operation else [
        AclOperation.ANY]
    return [AclBindingFilter(rtype, name, ptype, principal and _principal(principal), host,
                             op, perm) for op in ops]


@app.command("list")
@secured
def list_acls(
    topic: Topic = None,
    group: Group = None,
    cluster: Cluster = False,
    transactional_id: TxnId = None,
    pattern: Pattern = None,
    principal: Annotated[str | None, typer.Option("--principal")] = None,
    fmt: Format = "table",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """List ACLs (all, or those of one resource and/or principal)."""
    if fmt not in ("table", "json"):
        fail(f"invalid --format {fmt!r}: expected table or json", exit_code=2)
    flt = _filter(topic, group, cluster, transactional_id, pattern, principal, None, None,
                  None)[0]
    admin, _ = connect_admin(bootstrap, timeout)
    _require_authorizer(admin, timeout)
    _print(wait(admin.describe_acls(flt, request_timeout=timeout), timeout, "list ACLs"), fmt)


@app.command("remove")
@secured
def remove(
    topic: Topic = None,
    group: Group = None,
    cluster: Cluster = False,
    transactional_id: TxnId = None,
    pattern: Pattern = None,
    principal: Annotated[str | None, typer.Option("--principal")] = None,
    operation: Operations = None,
    permission: Annotated[str | None, typer.Option("--permission", help="allow or deny")] = None,
    host: Annotated[str | None, typer.Option("--host")] = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Remove the ACLs matching the filter (at least a resource or a principal)."""
    if topic is None and group is None and not cluster and transactional_id is None \
            and principal is None:
        fail("refusing to remove every ACL: give a resource or --principal", exit_code=2)
    filters = _filter(topic, group, cluster, transactional_id, pattern, principal, operation,
                      permission, host)
    admin, _ = connect_admin(bootstrap, timeout)
    removed: list[AclBinding] = []
    for fut in admin.delete_acls(filters, request_timeout=timeout).values():
        removed += wait(fut, timeout, "remove ACLs")
    print(f"removed {len(removed)} ACL(s)")
    if removed:
        _print(removed, "table")


def _require_authorizer(admin: Any, timeout: float) -> None:
    """DescribeAcls' own error is lost by librdkafka; ask the cluster's configuration."""
    from confluent_kafka.admin import ConfigResource

    md = admin.list_topics(timeout=timeout)
    broker = next(iter(md.brokers), None)
    if broker is None:
        return
    res = ConfigResource(ConfigResource.Type.BROKER, str(broker))
    try:
        configs = admin.describe_configs([res], request_timeout=timeout)[res].result(timeout)
    except Exception:  # noqa: BLE001 - may not be allowed to look: list what we can
        return
    entry = configs.get("authorizer.class.name")
    if entry is not None and not entry.value:
        fail("the cluster has no authorizer (authorizer.class.name is not set): "
             "ACLs are not enforced")
