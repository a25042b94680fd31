"""`yak quota set|list`: client quotas by user and/or client id (KIP-546), as
`kafka-configs --entity-type users|clients --alter --add-config` does.

    yak quota set --user alice producer_byte_rate=1048576 consumer_byte_rate=2097152
    yak quota set --user alice --client-id etl request_percentage=50
    yak quota set --default-user producer_byte_rate=10485760
    yak quota set --user alice --delete producer_byte_rate
    yak quota list [--user alice] [--client-id etl]

No Python Kafka client has these APIs, so this goes through Yak's own client
(`yak.client`), with the same --command-config / -X security settings.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from yak.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    Bootstrap,
    Timeout,
    client_security,
    fail,
    parse_pairs,
    secured,
)

app = typer.Typer(help="Set and list client quotas (users, client ids).", no_args_is_help=True)

KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
        "controller_mutation_rate")
User = Annotated[str | None, typer.Option("--user", help="A user (principal User:<name>).")]
DefaultUser = Annotated[bool, typer.Option("--default-user", help="The default user quota.")]
ClientId = Annotated[str | None, typer.Option("--client-id", help="A client id.")]
DefaultClient = Annotated[bool, typer.Option("--default-client-id",
                                             help="The default client-id quota.")]


def _entity(user: str | None, default_user: bool, client_id: str | None,
            default_client: bool) -> dict[str, str | None]:
    if user is not None and default_user:
        fail("give --user or --default-user, not both", exit_code=2)
    if client_id is not None and default_client:
        fail("give --client-id or --default-client-id, not both", exit_code=2)
    entity: dict[str, str | None] = {}
    if user is not None or default_user:
        entity["user"] = user
    if client_id is not None or default_client:
        entity["client-id"] = client_id
    return entity


def _client(bootstrap: str, timeout: float):  # noqa: ANN202
    from yak.client import KafkaClient

    return KafkaClient(bootstrap, client_id="yak-cli", request_timeout_ms=int(timeout * 1000),
                       retries=1, security=client_security())


def _run(what: str, fn):  # noqa: ANN001, ANN202
    """Call the broker; a Kafka error or an unreachable broker is one line, exit 1."""
    from yak.errors import KafkaError

    try:
        return fn()
    except KafkaError as e:
        name = getattr(e.code, "name", str(e.code)).upper()
        fail(f"{what}: {name}: {e.message}" if e.message else f"{what}: {name}")


@app.command("set")
@secured
def set_quota(
    values: Annotated[list[str] | None, typer.Argument(help="KEY=VALUE: " + ", ".join(KEYS))]
    = None,
    user: User = None,
    default_user: DefaultUser = False,
    client_id: ClientId = None,
    default_client_id: DefaultClient = False,
    delete: Annotated[list[str] | None, typer.Option("--delete", help="Remove a key.")] = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Set or remove quota values of one entity."""
    entity = _entity(user, default_user, client_id, default_client_id)
    if not entity:
        fail("give the entity: --user/--default-user and/or --client-id/--default-client-id",
             exit_code=2)
    ops: dict[str, float | None] = {}
    for key, value in parse_pairs(values, "quota"):
        if key not in KEYS:
            fail(f"unknown quota {key!r}: expected one of {', '.join(KEYS)}", exit_code=2)
        try:
            ops[key] = float(value)
        except ValueError:
            fail(f"invalid value {value!r} for {key}: expected a number", exit_code=2)
    for key in delete or []:
        if key not in KEYS:
            fail(f"unknown quota {key!r}: expected one of {', '.join(KEYS)}", exit_code=2)
        ops[key] = None
    if not ops:
        fail("nothing to change: give KEY=VALUE or --delete KEY", exit_code=2)
    with _client(bootstrap, timeout) as c:
        results = _run("set quota", lambda: c.alter_client_quotas([(entity, ops)]))
    for _, code, message in results:
        if code:
            from yak.errors import ErrorCode

            fail(f"set quota: {ErrorCode(code).name.upper()}: {message or ''}".rstrip(": "))
    print(f"quota of {_name(entity)} updated")


def _name(entity: dict[str, str | None]) -> str:
    return ", ".join(f"{t} {n if n is not None else '<default>'}" for t, n in entity.items())


@app.command("list")
@secured
def list_quotas(
    user: User = None,
    client_id: ClientId = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Configured quotas (all, or those naming this user / client id)."""
    if fmt not in ("table", "json"):
        fail(f"invalid --format {fmt!r}: expected table or json", exit_code=2)
    components = []
    if user is not None:
        components.append(("user", 0, user))
    if client_id is not None:
        components.append(("client-id", 0, client_id))
    with _client(bootstrap, timeout) as c:
        found = _run("list quotas", lambda: c.describe_client_quotas(components))
    rows = sorted(found, key=lambda ev: _name(ev[0]))
    if fmt == "json":
        print(json.dumps([{"entity": e, "quotas": v} for e, v in rows]))
        return
    if not rows:
        print("no quotas")
    for entity, vals in rows:
        print(f"{_name(entity)}: " + ", ".join(f"{k}={_number(v)}" for k, v in sorted(vals.items())))


def _number(v: float) -> str:
    """1048576.0 -> "1048576" (never "1.04858e+06"); fractions as Python writes them."""
    f = float(v)
    return str(int(f)) if f.is_integer() else repr(f)
