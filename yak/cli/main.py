"""The `yak` command: a broker (`yak serve`) and Kafka client tools in one binary.

Errors are one line on stderr with a non-zero exit, never a traceback: usage mistakes
exit 2 (like Kafka's tools and Unix convention), failures talking to the broker exit 1.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from yak.cli import serve as _serve


class YakApp(typer.Typer):
    """A Typer app whose errors are single lines instead of rich panels or tracebacks."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        command = typer.main.get_command(self)
        try:
            rv = command.main(*args, prog_name="yak", standalone_mode=False, **kwargs)
        except typer.TyperException as e:  # usage errors (exit 2) and other click errors
            ctx = getattr(e, "ctx", None)
            code = int(getattr(e, "exit_code", 1))
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None and code == 2 else ""
            if e.format_message():  # empty when help was printed for a bare group
                print(f"yak: error: {e.format_message()}{hint}", file=sys.stderr, flush=True)
            sys.exit(code)
        except (typer.Abort, KeyboardInterrupt):
            sys.exit(130)
        except Exception as e:
            # CliError, by way of the module that raised it: yak.cli.common loads
            # confluent-kafka, which `yak serve` is not made to import (issue 27).
            common = sys.modules.get("yak.cli.common")
            if common is None or not isinstance(e, common.CliError):
                raise
            print(f"yak: error: {e.message}", file=sys.stderr, flush=True)
            sys.exit(e.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)


app = YakApp(
    name="yak",
    help="Yak: a Kafka-compatible event-streaming broker, and tools for any Kafka cluster.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from yak import __version__

        print(f"yak {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", "-V", is_eager=True, callback=_print_version,
        help="Print Yak's version and exit.")] = False,
) -> None:
    pass


def _add_tool_commands() -> None:
    """Every command but `serve`: Kafka client tools, the gateway, bench, chaos...

    Imported here, not at the top: a process started as `yak serve` skips them (issue 27).
    They pull in 130-odd modules (the Kafka clients, the CLI's own client, typer's extras),
    about a quarter of the imports of a broker's start, which a restarted broker paid
    before it could recover a log."""
    from yak.cli import acl as _acl
    from yak.cli import bench as _bench
    from yak.cli import chaos as _chaos
    from yak.cli import cluster as _cluster
    from yak.cli import config as _config
    from yak.cli import consume as _consume
    from yak.cli import decommission as _decommission
    from yak.cli import elect_leaders as _elect_leaders
    from yak.cli import gateway as _gateway
    from yak.cli import group as _group
    from yak.cli import partitions as _partitions
    from yak.cli import produce as _produce
    from yak.cli import profile as _profile
    from yak.cli import quota as _quota
    from yak.cli import rebalance as _rebalance
    from yak.cli import schema as _schema
    from yak.cli import share_group as _share_group
    from yak.cli import tiered as _tiered
    from yak.cli import topic as _topic
    from yak.cli import txn as _txn
    from yak.cli import user as _user

    app.add_typer(_topic.app, name="topic")
    app.add_typer(_partitions.app, name="partitions")
    app.command("produce")(_produce.produce)
    app.command("consume")(_consume.consume)
    app.command("gateway")(_gateway.gateway)
    app.add_typer(_bench.app, name="bench")
    app.add_typer(_group.app, name="group")
    app.add_typer(_share_group.app, name="share-group")
    app.add_typer(_schema.app, name="schema")
    app.add_typer(_acl.app, name="acl")
    app.add_typer(_user.app, name="user")
    app.add_typer(_quota.app, name="quota")
    _cluster.app.command("decommission")(_decommission.decommission)
    _cluster.app.command("elect-leaders")(_elect_leaders.elect_leaders)
    _cluster.app.command("rebalance")(_rebalance.rebalance)
    app.add_typer(_cluster.app, name="cluster")
    app.add_typer(_config.app, name="config")
    app.add_typer(_chaos.app, name="chaos")
    app.add_typer(_txn.app, name="txn")
    app.add_typer(_tiered.app, name="tiered")
    app.add_typer(_profile.app, name="profile")


app.command("serve")(_serve.serve)
# A process whose command line is `yak serve ...` (the console script, `python -m
# yak.cli.main serve`, `-c "...app()" serve`) runs nothing else; everyone else, an
# import included, gets every command.
if sys.argv[1:2] != ["serve"]:
    _add_tool_commands()

if __name__ == "__main__":  # python -m yak.cli.main
    app()
