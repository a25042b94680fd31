"""`yak partitions move|move-status|move-cancel`: partition reassignment (KIP-455, issue 23),
as rpk's `cluster partitions move|move-status|move-cancel` and Kafka's
`kafka-reassign-partitions.sh --execute|--verify|--cancel` do.

    yak partitions move orders/0 orders/1 --replicas 2,3,4
    yak partitions move orders/0:1,2 orders/1:2,3     # a target per partition
    yak partitions move-status [--json]               # adding and removing replicas
    yak partitions move-cancel orders/0

`move` sends AlterPartitionReassignments and returns once the brokers have written the
targets, as Kafka's tool does; the data moves afterwards (`move-status` shows what is still
moving, `yak cluster decommission` uses the same request for a whole broker). Why a group
of its own rather than under `yak topic`: a move names partitions of any topics and
brokers, as rpk's `cluster partitions` does.

Errors are one line: a bad target or partition is the broker's own error
(INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS ...)
with exit 2, like any bad input; an unreachable broker or a refused login exits 1. With
several partitions the accepted ones are printed and the refused ones make the error line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, NoReturn, TypeVar

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
    secured,
)
from yak.cli.config_wire import ConfigWireError
from yak.cli.reassign_wire import Ongoing, TopicPartition, reassign_client

app = typer.Typer(help="Move partitions to other brokers (partition reassignment, KIP-455), "
                  "as rpk cluster partitions and kafka-reassign-partitions do.",
                  no_args_is_help=True)
out = Console(highlight=False, soft_wrap=True)

# Error codes that mean the input was wrong (exit 2): UNKNOWN_TOPIC_OR_PARTITION,
# INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS.
BAD_INPUT = frozenset({3, 38, 39, 85})

T = TypeVar("T")


def code_name(code: int) -> str:
    from yak.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error {code}"


def fail_line(message: str, code: int) -> NoReturn:
    fail(" ".join(message.split()), exit_code=code)  # one line, whatever the broker wrote


def call(what: str, fn: Callable[[], T]) -> T:
    """Run one exchange; every failure becomes one line (exit 2 for bad input)."""
    from yak.errors import KafkaError

    try:
        return fn()
    except ConfigWireError as e:
        name = code_name(e.code)
        fail_line(f"{what}: {name}: {e.message}" if e.message else f"{what}: {name}",
                  2 if e.code in BAD_INPUT else 1)
    except ValueError as e:
        fail_line(str(e), 2)
    except KafkaError as e:  # unreachable, TLS or login refused
        fail_line(f"{what}: {e.message or type(e).__name__}", 1)


def parse_partition(spec: str) -> TopicPartition:
    """TOPIC/PARTITION (topic names cannot hold '/')."""
    topic, sep, part = spec.rpartition("/")
    if not sep or not topic or not part.isdigit():
        fail_line(f"invalid partition {spec!r}: expected TOPIC/PARTITION, e.g. orders/0", 2)
    return topic, int(part)


def parse_replicas(spec: str) -> list[int]:
    items = [s.strip() for s in spec.split(",")]
    if not spec.strip() or not all(s.isdigit() for s in items):
        fail_line(f"invalid replicas {spec!r}: expected broker ids, e.g. 2,3,4", 2)
    return [int(s) for s in items]


def report(what: str, results: Mapping[TopicPartition, tuple[int, str | None]],
           done: Callable[[TopicPartition], str]) -> None:
    """Print the accepted partitions; the refused ones are one error line (exit 2 when
    all refusals are bad input, else 1)."""
    refused = []
    for (topic, p), (code, message) in sorted(results.items()):
        if code:
            refused.append((code, f"{topic}/{p}: {code_name(code)}"
                            + (f": {message}" if message else "")))
        else:
            out.print(f"{topic}/{p}: {done((topic, p))}")
    if refused:
        exit_code = 2 if all(c in BAD_INPUT for c, _ in refused) else 1
        fail_line(f"{what}: " + "; ".join(m for _, m in refused), exit_code)


def _targets(specs: Sequence[str], replicas: str | None) -> dict[TopicPartition, list[int]]:
    shared = parse_replicas(replicas) if replicas is not None else None
    moves: dict[TopicPartition, list[int]] = {}
    for spec in specs:
        part, sep, own = spec.partition(":")
        tp = parse_partition(part)
        if sep and shared is not None:
            fail_line(f"{spec}: give a target after ':' or --replicas, not both", 2)
        target = parse_replicas(own) if sep else shared
        if target is None:
            fail_line(f"{spec}: no target replicas (--replicas 2,3,4 or {part}:2,3,4)", 2)
        if tp in moves:
            fail_line(f"{part} is named twice", 2)
        moves[tp] = target
    return moves


@app.command("move")
@secured
def move(
    partitions: Annotated[list[str], typer.Argument(
        help="TOPIC/PARTITION, one or more; TOPIC/PARTITION:2,3,4 gives that one's target.")],
    replicas: Annotated[str | None, typer.Option(
        "--replicas", "-r", help="Target broker ids, the first the preferred leader: 2,3,4.")]
    = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Move partitions to new replica sets (AlterPartitionReassignments).

    New replicas join as followers and catch up; once all are in sync the old ones are
    removed and their data deleted, and a leader being removed hands over. A partition
    already moving gets the new target. Returns once the targets are written.
    """
    moves = _targets(partitions, replicas)
    with reassign_client(bootstrap, timeout, client_security()) as c:
        results = call("cannot move partitions", lambda: c.alter(moves))
    report("cannot move", results, lambda tp: f"moving to replicas {_ids(moves[tp])}")


@app.command("move-status")
@secured
def move_status(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Partitions being moved (ListPartitionReassignments): replicas, adding, removing."""
    with reassign_client(bootstrap, timeout, client_security()) as c:
        moving = call("cannot list partition moves", c.ongoing)
    if as_json:
        print(json.dumps({"reassignments": [_json(o) for o in moving]}))
        return
    if not moving:
        out.print("no partition is being moved")
        return
    table = Table("PARTITION", "REPLICAS", "ADDING", "REMOVING", box=None, pad_edge=False)
    for o in moving:
        table.add_row(f"{o.topic}/{o.partition}", _ids(o.replicas), _ids(o.adding),
                      _ids(o.removing))
    out.print(table)


def _ids(ids: Sequence[int]) -> str:
    return ",".join(map(str, ids)) or "-"


def _json(o: Ongoing) -> dict[str, Any]:
    return {"topic": o.topic, "partition": o.partition, "replicas": list(o.replicas),
            "target": list(o.target), "adding": list(o.adding), "removing": list(o.removing)}


@app.command("move-cancel")
@secured
def move_cancel(
    partitions: Annotated[list[str], typer.Argument(help="TOPIC/PARTITION, one or more.")],
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Cancel moves: back to the original replicas, the adding ones stopped and deleted."""
    tps = [parse_partition(s) for s in partitions]
    with reassign_client(bootstrap, timeout, client_security()) as c:
        results = call("cannot cancel partition moves",
                       lambda: c.alter(dict.fromkeys(tps)))
    report("cannot cancel", results, lambda tp: "move cancelled")
