"""`yak config describe|set|delete`: dynamic broker configs (issue 23), topic configs and
group configs (issue 24), as `kafka-configs --entity-type brokers|topics|groups` (and
rpk's `cluster config`) do.

    yak config describe --broker 1 [--all] [--json] [KEY ...]
    yak config describe --default                  # the cluster-wide dynamic defaults set
    yak config set --default log.retention.ms=86400000 message.max.bytes=2000000
    yak config set --broker 1 leader.replication.throttled.rate=10485760 [--validate-only]
    yak config delete --broker 1 leader.replication.throttled.rate
    yak config describe --topic orders             # the same for a topic's configs
    yak config set --group jobs share.auto.offset.reset=by_duration:PT1H
    yak config describe --group jobs --all         # every group config, defaults included

A broker's own values (`--broker ID`, Kafka's `--entity-name ID`) win over the cluster-wide
default (`--default`, Kafka's `--entity-default`), which wins over `server.properties`.
Changes are IncrementalAlterConfigs SET/DELETE: keys not named keep their values. A
group's configs (`--group`, share and KIP-848 consumer groups alike) win over the
broker's `group.*` settings; the broker bounds them (INVALID_CONFIG names the bounds).

Why a group of its own rather than under `yak cluster` or `yak topic`: it is one tool for
every config entity, as `kafka-configs` is; `yak topic describe --print-configs` and
`yak topic alter-config` stay for topics and do the same requests.

Errors are one line: a key that is read-only, unknown or given a bad value prints the
broker's own error (INVALID_REQUEST / INVALID_CONFIG and its message) and exits 2, like
any bad input; an unreachable broker or a refused login exits 1.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

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
from yak.client.config_wire import (
    BROKER,
    DELETE,
    DYNAMIC_SOURCES,
    GROUP,
    SET,
    TOPIC,
    ConfigWireError,
    Entry,
    NoSuchBroker,
    config_client,
)

app = typer.Typer(help="Describe and change broker configs (one broker or the cluster-wide "
                  "default), topic configs and group configs, as kafka-configs does.",
                  no_args_is_help=True)
out = Console(highlight=False, soft_wrap=True)

BrokerId = Annotated[int | None, typer.Option(
    "--broker", min=0, help="One broker's configs (its node.id, kafka-configs' --entity-name).")]
Default = Annotated[bool, typer.Option(
    "--default", "--entity-default",
    help="The cluster-wide dynamic defaults (the BROKER resource with the empty name).")]
Topic = Annotated[str | None, typer.Option("--topic", help="A topic's configs.")]
Group = Annotated[str | None, typer.Option(
    "--group", help="A group's configs (share or consumer group; any group id).")]
ValidateOnly = Annotated[bool, typer.Option(
    "--validate-only", help="Let the broker check the change without applying it.")]

# Error codes that mean the input was wrong (exit 2, as usage errors): INVALID_CONFIG,
# INVALID_REQUEST (a read-only key), POLICY_VIOLATION.
_BAD_INPUT = frozenset({40, 42, 44})


def _target(broker: int | None, default: bool, topic: str | None,
            group: str | None = None) -> tuple[int, str, str]:
    """(resource type, resource name, words for messages) of the one entity given."""
    if (broker is not None) + default + (topic is not None) + (group is not None) != 1:
        fail("give exactly one of --broker ID, --default, --topic NAME or --group NAME",
             exit_code=2)
    if topic is not None:
        return TOPIC, topic, f"topic {topic}"
    if group is not None:
        if not group:
            fail("--group: the group name must not be empty", exit_code=2)
        return GROUP, group, f"group {group}"
    if default:
        return BROKER, "", "the cluster default"
    return BROKER, str(broker), f"broker {broker}"


def _call(what: str, fn: Any) -> Any:
    """Run one exchange; every failure becomes one line (exit 2 for bad input)."""
    from yak.errors import ErrorCode, KafkaError

    try:
        return fn()
    except ConfigWireError as e:
        try:
            name = ErrorCode(e.code).name.upper()
        except ValueError:
            name = f"error {e.code}"
        _fail_line(f"{what}: {name}: {e.message}" if e.message else f"{what}: {name}",
                   2 if e.code in _BAD_INPUT else 1)
    except NoSuchBroker as e:
        known = ", ".join(map(str, e.brokers)) or "none"
        _fail_line(f"{what}: broker {e.node_id} is not in the cluster (brokers: {known})", 2)
    except ValueError as e:
        _fail_line(str(e), 2)
    except KafkaError as e:  # unreachable, TLS or login refused
        _fail_line(f"{what}: {e.message or type(e).__name__}", 1)


def _fail_line(message: str, code: int) -> NoReturn:
    fail(" ".join(message.split()), exit_code=code)  # one line, whatever the broker wrote


@app.command("describe")
@secured
def describe(
    keys: Annotated[list[str] | None, typer.Argument(help="Only these keys.")] = None,
    broker: BrokerId = None,
    default: Default = False,
    topic: Topic = None,
    group: Group = None,
    all_: Annotated[bool, typer.Option(
        "--all", help="Every config, not only the dynamic ones (set by a change).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Configs of one broker, the cluster-wide default, a topic or a group, with sources.

    SOURCE is Kafka's: DYNAMIC_BROKER_CONFIG (this broker's own), DYNAMIC_DEFAULT_BROKER_CONFIG
    (the cluster-wide default), STATIC_BROKER_CONFIG (server.properties), DEFAULT_CONFIG,
    DYNAMIC_TOPIC_CONFIG, DYNAMIC_GROUP_CONFIG. Without --all or KEYs only the dynamic
    values are listed.
    """
    rtype, name, words = _target(broker, default, topic, group)
    with config_client(bootstrap, timeout, client_security()) as c:
        entries = _call(f"cannot describe configs of {words}",
                        lambda: c.describe(rtype, name, keys))
    if keys:
        missing = sorted(set(keys) - {e.name for e in entries})
        if missing:
            _fail_line(f"no config named {', '.join(missing)} on {words}", 2)
    elif not all_:
        entries = [e for e in entries if _dynamic(e)]
    entries.sort(key=lambda e: e.name)
    if as_json:
        kind = {TOPIC: "topic", GROUP: "group"}.get(rtype, "broker")
        print(json.dumps({"resource": {"type": kind, "name": name},
                          "configs": [_json(e) for e in entries]}))
        return
    if not entries:
        out.print(f"{words} has no dynamic configs (--all shows every config)")
        return
    table = Table("KEY", "VALUE", "SOURCE", "READ-ONLY", box=None, pad_edge=False)
    for e in entries:
        table.add_row(e.name, _shown(e), e.source, "yes" if e.read_only else "no")
    out.print(table)


def _dynamic(e: Entry) -> bool:
    return e.source in DYNAMIC_SOURCES


def _shown(e: Entry) -> str:
    if e.sensitive:
        return "(sensitive)"
    return "" if e.value is None else e.value


def _json(e: Entry) -> dict[str, Any]:
    return {"name": e.name, "value": None if e.sensitive else e.value, "source": e.source,
            "read_only": e.read_only, "sensitive": e.sensitive,
            "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in e.synonyms]}


@app.command("set")
@secured
def set_configs(
    values: Annotated[list[str], typer.Argument(help="KEY=VALUE, one or more.")],
    broker: BrokerId = None,
    default: Default = False,
    topic: Topic = None,
    group: Group = None,
    validate_only: ValidateOnly = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Set configs of one broker, the cluster-wide default, a topic or a group.

    IncrementalAlterConfigs SET: keys not named keep their values; dynamic broker configs
    and group configs take effect at once and survive restarts.
    """
    rtype, name, words = _target(broker, default, topic, group)
    ops = [(k, SET, v) for k, v in parse_pairs(values, "config")]
    _alter(rtype, name, words, ops, validate_only, bootstrap, timeout)


@app.command("delete")
@secured
def delete_configs(
    keys: Annotated[list[str], typer.Argument(help="Keys to remove, one or more.")],
    broker: BrokerId = None,
    default: Default = False,
    topic: Topic = None,
    group: Group = None,
    validate_only: ValidateOnly = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Remove configs of one broker, the cluster-wide default, a topic or a group.

    The value falls back to the next source: the cluster default, then server.properties,
    then the built-in default (a group's: the broker's group.* setting).
    """
    rtype, name, words = _target(broker, default, topic, group)
    _alter(rtype, name, words, [(k, DELETE, None) for k in keys], validate_only,
           bootstrap, timeout)


def _alter(rtype: int, name: str, words: str, ops: list[tuple[str, int, str | None]],
           validate_only: bool, bootstrap: str, timeout: float) -> None:
    verb = "set" if ops[0][1] == SET else "delete"
    with config_client(bootstrap, timeout, client_security()) as c:
        _call(f"cannot {verb} configs of {words}",
              lambda: c.alter(rtype, name, ops, validate_only))
    keys = ", ".join(k for k, _, _ in ops)
    if validate_only:
        out.print(f"valid: {verb} {keys} on {words} (nothing changed: --validate-only)")
    else:
        out.print(f"{'set' if verb == 'set' else 'deleted'} {keys} on {words}")

