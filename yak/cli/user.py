"""`yak user create|delete|list`: SCRAM users (KIP-554), as `kafka-configs --entity-type
users --alter --add-config 'SCRAM-SHA-512=[password=...]'` does.

    yak user create alice --password s3cret [--mechanism SCRAM-SHA-256] [--iterations 8192]
    yak user delete alice [--mechanism SCRAM-SHA-256]
    yak user list [alice ...]

The password never leaves this process: AlterUserScramCredentials carries a salted
password (PBKDF2 with a random salt, computed here by librdkafka), and the broker keeps
only the derived keys. Without `--password` it is read from the terminal (or stdin).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
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

app = typer.Typer(help="Create, delete and list SCRAM users.", no_args_is_help=True)

_MECHS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
          "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
Mechanisms = Annotated[list[str] | None, typer.Option(
    "--mechanism", help="SCRAM-SHA-256 and/or SCRAM-SHA-512 (default: both); repeatable.")]


def _may_describe_users(admin: AdminClient, timeout: float) -> None:
    """DescribeUserScramCredentials needs DESCRIBE on the cluster. librdkafka (2.16) crashes
    its process on that API's refusal (a top-level error), so ask the cluster first what
    this principal may do on it (DescribeCluster's authorized operations)."""
    desc = wait(admin.describe_cluster(include_authorized_operations=True,
                                       request_timeout=timeout), timeout, "describe cluster")
    # None: no operation at all (librdkafka reports an empty bit field as None).
    if AclOperation.DESCRIBE not in (desc.authorized_operations or ()):
        fail("CLUSTER_AUTHORIZATION_FAILED: not authorized to describe users "
             "(DESCRIBE on the cluster)")


def _mechanisms(names: list[str] | None) -> list[ScramMechanism]:
    out = []
    for n in names or list(_MECHS):
        m = _MECHS.get(n.strip().upper())
        if m is None:
            fail(f"invalid --mechanism {n!r}: expected SCRAM-SHA-256 or SCRAM-SHA-512", 2)
        out.append(m)
    return out


@app.command("create")
@secured
def create(
    name: Annotated[str, typer.Argument(help="User name (the principal is User:<name>).")],
    password: Annotated[str, typer.Option(
        "--password", prompt=True, hide_input=True, help="Read from the terminal if omitted.")],
    mechanism: Mechanisms = None,
    iterations: Annotated[int, typer.Option(
        "--iterations", help="PBKDF2 iterations, 4096 to 16384 (Kafka's bounds).")] = 8192,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Create a SCRAM user or change its password."""
    if not name:
        fail("the user name must not be empty", exit_code=2)
    if not 4096 <= iterations <= 16384:
        fail(f"invalid --iterations {iterations}: must be 4096 to 16384", exit_code=2)
    if not password:
        fail("the password must not be empty", exit_code=2)
    ups = [UserScramCredentialUpsertion(name, ScramCredentialInfo(m, iterations),
                                        password.encode())
           for m in _mechanisms(mechanism)]
    admin, _ = connect_admin(bootstrap, timeout)
    # One request per mechanism: KIP-554 refuses two changes to one user in one request.
    for up in ups:
        for fut in admin.alter_user_scram_credentials([up], request_timeout=timeout).values():
            wait(fut, timeout, f"create user {name}")
    print(f"user {name}: {', '.join(u.scram_credential_info.mechanism.name for u in ups)}")


@app.command("delete")
@secured
def delete(
    name: Annotated[str, typer.Argument()],
    mechanism: Mechanisms = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Delete a user's SCRAM credentials (all mechanisms unless --mechanism)."""
    admin, _ = connect_admin(bootstrap, timeout)
    if mechanism:
        mechs = _mechanisms(mechanism)
    else:
        _may_describe_users(admin, timeout)
        desc = wait(admin.describe_user_scram_credentials([name], request_timeout=timeout)
                    [name], timeout, f"describe user {name}")
        mechs = [c.mechanism for c in desc.scram_credential_infos]
    for m in mechs:
        dels = [UserScramCredentialDeletion(name, m)]
        for fut in admin.alter_user_scram_credentials(dels, request_timeout=timeout).values():
            wait(fut, timeout, f"delete user {name}")
    print(f"deleted user {name}")


@app.command("list")
@secured
def list_users(
    names: Annotated[list[str] | None, typer.Argument(help="Only these users.")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """SCRAM users with their mechanisms and iteration counts (never keys)."""
    if fmt not in ("table", "json"):
        fail(f"invalid --format {fmt!r}: expected table or json", exit_code=2)
    admin, _ = connect_admin(bootstrap, timeout)
    _may_describe_users(admin, timeout)
    futs = admin.describe_user_scram_credentials(names or None, request_timeout=timeout)
    if isinstance(futs, dict):
        found = {u: wait(f, timeout, f"describe user {u}") for u, f in futs.items()}
    else:
        found = wait(futs, timeout, "list users")
    rows = sorted(
        (user, c.mechanism.name.replace("_", "-"), c.iterations)
        for user, desc in found.items() for c in desc.scram_credential_infos
    )
    if fmt == "json":
        print(json.dumps([{"user": u, "mechanism": m, "iterations": i} for u, m, i in rows]))
        return
    if not rows:
        print("no SCRAM users")
    for u, m, i in rows:
        print(f"{u}  {m}  iterations={i}")
