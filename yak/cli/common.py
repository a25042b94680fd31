"""What every `yak` client command shares: bootstrap option, client configs, errors.

Commands talk to any Kafka-compatible broker through confluent-kafka. librdkafka retries
forever and logs to stderr by default; a CLI must instead fail within a bounded time with
one readable line, so clients here are quiet (`log_level` 0) and every wait has a timeout.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_S = 5.0
MOVE_TIMEOUT_S = 30.0
"""For commands that submit many partition moves at once (decommission, rebalance): the
controller answers AlterPartitionReassignments once every move is written to the metadata
store, which took 9 s for 40 moves at load 14 (a 5 s default failed a decommission whose
moves had all been made). 30 s is Kafka's admin request timeout."""

Bootstrap = Annotated[
    str,
    typer.Option(
        "--bootstrap",
        "-b",
        envvar="YAK_BOOTSTRAP",
        help="Broker HOST:PORT (any Kafka-compatible broker).",
        show_envvar=True,
    ),
]
Timeout = Annotated[
    float,
    typer.Option("--timeout", help="Seconds to wait for the broker before giving up.", min=0.1),
]


CommandConfig = Annotated[
    str | None,
    typer.Option(
        "--command-config",
        envvar="YAK_COMMAND_CONFIG",
        help="Client settings file (Java .properties, as Kafka's tools take): "
        "security.protocol, sasl.*, ssl.*.",
        show_envvar=True,
    ),
]
ClientSettings = Annotated[
    list[str] | None,
    typer.Option(
        "-X",
        "--client-setting",
        help="Client setting KEY=VALUE (librdkafka or Kafka names, as kcat -X); repeatable; "
        "wins over --command-config.",
    ),
]

Profile = Annotated[
    str | None,
    typer.Option(
        "--profile",
        envvar="YAK_PROFILE",
        help="Connection profile (see 'yak profile'): its bootstrap, client settings and "
        "registry are defaults that explicit flags override. Default: the current profile.",
        show_envvar=True,
    ),
]

# The client security of this invocation (set by `secured` before the command runs).
_security: Any = None


def client_security() -> Any:
    """The `ClientSecurity` of this command (PLAINTEXT unless options said otherwise)."""
    from yak.security.client import ClientSecurity

    return _security if _security is not None else ClientSecurity()


def use_client_security(command_config: str | None, settings: list[str] | None,
                        defaults: dict[str, str] | None = None) -> Any:
    """Parse --command-config / -X over a profile's `defaults`; a bad setting is a usage
    error (one line, exit 2)."""
    global _security
    from yak.security.client import ClientSecurity, client_properties

    try:
        props = {**(defaults or {}), **client_properties(command_config, list(settings or []))}
        _security = ClientSecurity.from_properties(props)
    except ValueError as e:
        fail(str(e), exit_code=2)
    return _security


# Command parameters a profile gives defaults for (profile key -> parameter name).
_PROFILE_PARAMS = {"bootstrap": "bootstrap", "registry": "registry"}


def _apply_profile(name: str | None, kwargs: dict[str, Any]) -> dict[str, str]:
    """Fill the parameters left at their defaults from the profile; its client settings."""
    try:  # typer >= 0.20 runs its own copy of click
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover
        from click import get_current_context

    from yak.cli.profile import resolve

    profile = resolve(name)
    if profile is None:
        return {}
    ctx = get_current_context(silent=True)
    for key, param in _PROFILE_PARAMS.items():
        value = profile.get(key)
        # An option left at None is a switch (consume's --registry turns decoding on, as
        # rpk's --use-schema-registry): a profile fills addresses, it does not switch.
        if value is None or kwargs.get(param) is None:
            continue
        source = ctx.get_parameter_source(param) if ctx is not None else None
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):
            kwargs[param] = value
    return dict(profile.get("client_settings") or {})


F = TypeVar("F", bound=Callable[..., Any])


def secured(fn: F) -> F:
    """Give a client command `--command-config FILE` and `-X KEY=VALUE`, the client
    security settings of Kafka's tools and kcat, applied by `client_config()`, and
    `--profile NAME`, whose values are defaults for the options not given."""
    sig = inspect.signature(fn, eval_str=True)
    extra = [
        inspect.Parameter("command_config", inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=CommandConfig),
        inspect.Parameter("client_setting", inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=ClientSettings),
        inspect.Parameter("profile", inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=Profile),
    ]

    @functools.wraps(fn)
    def wrapper(*args: Any, command_config: str | None = None,
                client_setting: list[str] | None = None, profile: str | None = None,
                **kwargs: Any) -> Any:
        defaults = _apply_profile(profile, kwargs)
        use_client_security(command_config, client_setting, defaults)
        return fn(*args, **kwargs)

    wrapper.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[*sig.parameters.values(), *extra])
    wrapper.__annotations__ = {**{k: v.annotation for k, v in sig.parameters.items()},
                               "command_config": CommandConfig,
                               "client_setting": ClientSettings,
                               "profile": Profile}
    return wrapper  # type: ignore[return-value]


class CliError(Exception):
    """A failure to report as one line on stderr, with `exit_code`."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def fail(message: str, exit_code: int = 1) -> NoReturn:
    raise CliError(message, exit_code)


def eprint(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# librdkafka reports a refused login (or TLS failure) only to the error callback; the call
# that then fails just says "transport failure". Kept so the one-line error can say why.
_auth_errors: list[Any] = []


def _remember_error(err: KafkaError) -> None:
    if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
        _auth_errors.append(err)


def client_config(bootstrap: str, timeout: float, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        # Quiet: errors reach the user once, through CliError, not as librdkafka log spam.
        "log_level": 0,
        "socket.connection.setup.timeout.ms": max(1000, int(timeout * 1000)),
        "error_cb": _remember_error,
    }
    conf.update(client_security().librdkafka())
    conf.update(extra)
    return conf


def describe_kafka_error(err: BaseException | KafkaError) -> str:
    """A short human sentence for a librdkafka error or exception."""
    kerr = err
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        kerr = err.args[0]
    if isinstance(kerr, KafkaError):
        text = kerr.str() or kerr.name()
        if kerr.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            return f"broker unreachable ({text})"
        if kerr.code() == KafkaError._TIMED_OUT:
            return f"timed out waiting for the broker ({text})"
        return f"{kerr.name()}: {text}" if text != kerr.name() else text
    return str(err) or type(err).__name__


def connect_admin(bootstrap: str, timeout: float) -> tuple[AdminClient, ClusterMetadata]:
    """An AdminClient plus cluster metadata; fails fast if the broker cannot be reached."""
    admin = AdminClient(client_config(bootstrap, timeout))
    return admin, cluster_metadata(admin, bootstrap, timeout)


def cluster_metadata(client: Any, bootstrap: str, timeout: float) -> ClusterMetadata:
    try:
        return client.list_topics(timeout=timeout)
    except KafkaException as e:
        with contextlib.suppress(Exception):
            client.poll(0)  # serve the error callback: it holds the reason
        if _auth_errors:
            fail(f"cannot connect to {bootstrap}: {describe_kafka_error(_auth_errors[-1])}")
        fail(f"cannot reach broker at {bootstrap}: {describe_kafka_error(e)}")


def require_topic(md: ClusterMetadata, topic: str) -> Any:
    """The topic's metadata; listing all topics never auto-creates the one asked for."""
    tmd = md.topics.get(topic)
    if tmd is None or (
        tmd.error is not None and tmd.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    ):
        if client_security().security_protocol != "PLAINTEXT":
            # An authorizer hides the topics a principal may not describe (Kafka's rule).
            fail(f"topic {topic!r} does not exist or this principal may not describe it")
        fail(f"topic {topic!r} does not exist")
    if tmd.error is not None:
        fail(f"topic {topic!r}: {describe_kafka_error(tmd.error)}")
    return tmd


def wait(future: Future[Any], timeout: float, what: str) -> Any:
    """The result of an AdminClient future, or a CliError naming `what` failed and why."""
    try:
        return future.result(timeout=timeout)
    except FutureTimeout:
        fail(f"{what}: timed out after {timeout:g}s")
    except KafkaException as e:
        fail(f"{what}: {describe_kafka_error(e)}")


def parse_pairs(items: list[str] | None, what: str) -> list[tuple[str, str]]:
    """`k=v` strings -> pairs; a missing '=' is a usage error (exit 2)."""
    out: list[tuple[str, str]] = []
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"invalid {what} {item!r}: expected KEY=VALUE", exit_code=2)
        out.append((key, value))
    return out
