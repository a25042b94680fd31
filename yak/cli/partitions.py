"""`yak partitions move|move-status|move-cancel|reassign`: partition reassignment (KIP-455,
issue 23), as rpk's `cluster partitions move|move-status|move-cancel` and Kafka's
`kafka-reassign-partitions.sh --generate|--execute|--verify|--cancel` do.

    yak partitions move orders/0 orders/1 --replicas 2,3,4
    yak partitions move orders/0:1,2 orders/1:2,3     # a target per partition
    yak partitions move-status [--json]               # adding and removing replicas
    yak partitions move-cancel orders/0
    yak partitions reassign --generate --topics orders --brokers 2,3,4
    yak partitions reassign --execute|--verify|--cancel --plan plan.json [--throttle B/s]

`move` sends AlterPartitionReassignments and returns once the brokers have written the
targets, as Kafka's tool does; the data moves afterwards (`move-status` shows what is still
moving, `yak cluster decommission` uses the same request for a whole broker). Why a group
of its own rather than under `yak topic`: a move names partitions of any topics and
brokers, as rpk's `cluster partitions` does.

Errors are one line: a bad target or partition is the broker's own error
(INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS ...)
with exit 2, like any bad input; an unreachable broker or a refused login exits 1. With
several partitions the accepted ones are printed and the refused ones make the error line.

`reassign` reads and writes Kafka's reassignment JSON, so plans move between Yak and
Kafka's tool; the formats, checks and the throttle values are `reassign_json.py`'s (pure),
the exchanges `reassign_wire.py`'s and `config_wire.py`'s. It follows Kafka's tool: the
plan is checked against Metadata before anything is sent (so no throttle is set for a plan
that cannot start), --execute refuses while other moves run unless --additional, and
--verify/--cancel clear the throttles. One difference, for scripts: --verify's exit status
says whether the moves are done (see its --help).
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
from yak.client.config_wire import ConfigWireError
from yak.client.reassign_wire import (
    ClusterView,
    Ongoing,
    ReassignClient,
    TopicPartition,
    reassign_client,
)

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


# --- `yak partitions reassign`: kafka-reassign-partitions.sh with Kafka's JSON -------------

LEADER_RATE, FOLLOWER_RATE = ("leader.replication.throttled.rate",
                              "follower.replication.throttled.rate")
LEADER_REPLICAS, FOLLOWER_REPLICAS = ("leader.replication.throttled.replicas",
                                      "follower.replication.throttled.replicas")
IN_PROGRESS_EXIT, FAILED_EXIT = 3, 4  # `--verify`'s exit statuses besides 0


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        fail_line(f"cannot read {path}: {e.strerror or e}", 2)
    except UnicodeDecodeError:
        fail_line(f"cannot read {path}: not UTF-8 text", 2)


def json_input(parse: Callable[[str], T], path: str) -> T:
    from yak.cli.reassign_json import ReassignJsonError

    try:
        return parse(_read(path))
    except ReassignJsonError as e:
        fail_line(f"{path}: {e}", 2)


def _broker_ids(spec: str) -> list[int]:
    items = [s.strip() for s in spec.split(",")]
    if not spec.strip() or not all(s.isdigit() for s in items):
        fail_line(f"invalid broker list {spec!r}: expected broker ids, e.g. 1,2,3", 2)
    ids = [int(s) for s in items]
    if len(set(ids)) != len(ids):
        fail_line(f"invalid broker list {spec!r}: a broker is named twice", 2)
    return ids


def _pname(tp: TopicPartition) -> str:
    return f"{tp[0]}/{tp[1]}"


def _set_throttles(bootstrap: str, timeout: float, rate: int,
                   current: Mapping[TopicPartition, Sequence[int]],
                   plan: Mapping[TopicPartition, Sequence[int]]) -> None:
    """Kafka's tool's throttle (KIP-73): the rate on every broker a move involves, and each
    topic's throttled replicas (leaders: the current replicas; followers: the added ones)."""
    from yak.cli.reassign_json import throttled_brokers, throttled_replicas
    from yak.client.config_wire import BROKER, SET, TOPIC, config_client

    brokers = throttled_brokers(current, plan)
    with config_client(bootstrap, timeout, client_security()) as c:
        for topic, (leaders, followers) in sorted(throttled_replicas(current, plan).items()):
            ops = [(LEADER_REPLICAS, SET, leaders)]
            if followers:
                ops.append((FOLLOWER_REPLICAS, SET, followers))
            call(f"cannot throttle topic {topic}", lambda t=topic, o=ops: c.alter(TOPIC, t, o))
        for b in brokers:
            call(f"cannot throttle broker {b}", lambda b=b: c.alter(
                BROKER, str(b), [(LEADER_RATE, SET, str(rate)), (FOLLOWER_RATE, SET, str(rate))]))
    out.print("Warning: You must run --verify periodically, until the reassignment"
              " completes, to ensure the throttle is removed.")
    out.print(f"The inter-broker throttle limit was set to {rate} B/s on brokers"
              f" {_ids(brokers)}")


def _clear_throttles(bootstrap: str, timeout: float, brokers: Sequence[int],
                     topics: Sequence[str]) -> None:
    """As Kafka's `--verify` and `--cancel`: delete the rates on every broker the cluster
    lists and the throttled replicas of the plan's topics (deleting an unset key is no
    change). A broker that cannot be reached does not stop the others: they are all
    tried, and what failed is one line at the end (exit 1; run the command again)."""
    from yak.cli.common import CliError
    from yak.client.config_wire import BROKER, DELETE, TOPIC, config_client

    failed: list[str] = []

    def attempt(what: str, fn: Callable[[], object]) -> None:
        try:
            call(what, fn)
        except CliError as e:
            failed.append(e.message)

    with config_client(bootstrap, timeout, client_security()) as c:
        out.print(f"Clearing broker-level throttles on brokers {_ids(brokers)}")
        for b in brokers:
            attempt(f"cannot clear the throttle of broker {b}", lambda b=b: c.alter(
                BROKER, str(b), [(LEADER_RATE, DELETE, None), (FOLLOWER_RATE, DELETE, None)]))
        out.print(f"Clearing topic-level throttles on topics {','.join(topics) or '-'}")
        for t in topics:
            attempt(f"cannot clear the throttle of topic {t}", lambda t=t: c.alter(
                TOPIC, t, [(LEADER_REPLICAS, DELETE, None), (FOLLOWER_REPLICAS, DELETE, None)]))
    if failed:
        fail_line("; ".join(failed), 1)


def _generate(c: ReassignClient, topics: list[str], brokers: list[int],
              rack_aware: bool) -> None:
    from yak.cli.reassign_json import ReassignJsonError, format_reassignment, propose

    view = call("cannot read the cluster's metadata", c.cluster)
    unknown = [b for b in brokers if b not in view.brokers]
    if unknown:
        fail_line(f"broker {unknown[0]} is not in the cluster (brokers:"
                  f" {', '.join(map(str, sorted(view.brokers)))})", 2)
    current = {tp: list(s.replicas) for tp, s in view.partitions.items() if tp[0] in topics}
    try:
        proposed = propose(current, topics, {b: view.brokers[b] for b in brokers}, rack_aware)
    except ReassignJsonError as e:
        fail_line(f"cannot generate a reassignment: {e}", 2)
    out.print("Current partition replica assignment")
    print(format_reassignment(current))
    out.print("\nProposed partition reassignment configuration")
    print(format_reassignment(proposed))


def _execute(c: ReassignClient, plan: dict[TopicPartition, list[int]], additional: bool,
             throttle: int | None, bootstrap: str, timeout: float) -> None:
    from yak.cli.reassign_json import ReassignJsonError, check_targets, format_reassignment

    view = call("cannot read the cluster's metadata", c.cluster)
    try:
        check_targets(plan, view.brokers, view.partitions)
    except ReassignJsonError as e:
        fail_line(f"cannot reassign: {e}", 2)
    moving = call("cannot list partition moves", c.ongoing)
    if moving and not additional:
        fail_line(f"cannot reassign: {len(moving)} partition(s) are already being moved"
                  f" ({', '.join(_pname((o.topic, o.partition)) for o in moving[:3])}"
                  f"{', ...' if len(moving) > 3 else ''}); give --additional to start"
                  " these moves beside them", 2)
    current = {tp: list(view.partitions[tp].replicas) for tp in plan}
    out.print("Current partition replica assignment\n")
    print(format_reassignment(current))
    out.print("\nSave this to use as the --reassignment-json-file option during rollback")
    if throttle is not None:
        _set_throttles(bootstrap, timeout, throttle, current, plan)
    results = call("cannot reassign partitions", lambda: c.alter(plan))
    report("cannot reassign", results, lambda tp: f"moving to replicas {_ids(plan[tp])}")


def _existing_topics(plan: Mapping[TopicPartition, object], view: ClusterView) -> list[str]:
    """The plan's topics that still exist (a deleted topic has no throttle to clear)."""
    existing = {t for t, _ in view.partitions}
    return sorted({t for t, _ in plan if t in existing})


def _verify(c: ReassignClient, plan: dict[TopicPartition, list[int]], preserve: bool,
            bootstrap: str, timeout: float) -> int:
    from yak.cli.reassign_json import state_of

    moving = {(o.topic, o.partition) for o in call("cannot list partition moves", c.ongoing)}
    view = call("cannot read the cluster's metadata", c.cluster)
    out.print("Status of partition reassignment:")
    states = []
    for tp in sorted(plan):
        now = view.partitions.get(tp)
        state = state_of(plan[tp], now.replicas if now else None, tp in moving)
        states.append(state)
        if state == "complete":
            out.print(f"Reassignment of partition {_pname(tp)} is complete.")
        elif state == "in progress":
            out.print(f"Reassignment of partition {_pname(tp)} is still in progress.")
        elif now is None:
            out.print(f"Reassignment of partition {_pname(tp)} failed: the partition does"
                      " not exist.")
        else:
            out.print(f"Reassignment of partition {_pname(tp)} failed: no reassignment is"
                      f" active, and its replicas are {_ids(now.replicas)} rather than"
                      f" {_ids(plan[tp])}.")
    if "in progress" in states:
        return IN_PROGRESS_EXIT
    if not preserve:
        topics = _existing_topics(plan, view)
        _clear_throttles(bootstrap, timeout, sorted(view.brokers), topics)
    return FAILED_EXIT if "failed" in states else 0


def _cancel(c: ReassignClient, plan: dict[TopicPartition, list[int]], preserve: bool,
            bootstrap: str, timeout: float) -> None:
    moving = {(o.topic, o.partition) for o in call("cannot list partition moves", c.ongoing)}
    for tp in sorted(tp for tp in plan if tp not in moving):
        out.print(f"{_pname(tp)}: no reassignment in progress")
    active = [tp for tp in plan if tp in moving]
    results = call("cannot cancel partition moves",
                   lambda: c.alter(dict.fromkeys(active))) if active else {}
    for tp in sorted(tp for tp, (code, _) in results.items() if not code):
        out.print(f"{_pname(tp)}: move cancelled")
    if not preserve:  # as Kafka's tool: even when some cancellation was refused
        view = call("cannot read the cluster's metadata", c.cluster)
        topics = _existing_topics(plan, view)
        _clear_throttles(bootstrap, timeout, sorted(view.brokers), topics)
    report("cannot cancel", {tp: r for tp, r in results.items() if r[0]}, lambda tp: "")


@app.command("reassign")
@secured
def reassign(
    generate: Annotated[bool, typer.Option(
        "--generate", help="Propose a placement of --topics on --brokers.")] = False,
    execute: Annotated[bool, typer.Option(
        "--execute", help="Start the moves in --reassignment-json-file.")] = False,
    verify: Annotated[bool, typer.Option(
        "--verify", help="Report each move; when none is in progress, clear the throttles."
    )] = False,
    cancel: Annotated[bool, typer.Option(
        "--cancel", help="Cancel the moves in --reassignment-json-file still in progress."
    )] = False,
    reassignment_file: Annotated[str | None, typer.Option(
        "--reassignment-json-file", "--plan", metavar="FILE",
        help="Kafka's reassignment JSON (what --generate proposes).")] = None,
    topics_file: Annotated[str | None, typer.Option(
        "--topics-to-move-json-file", metavar="FILE",
        help='{"version":1,"topics":[{"topic":"orders"}]}, for --generate.')] = None,
    topics: Annotated[str | None, typer.Option(
        "--topics", help="Topics for --generate, comma-separated (instead of the file).")]
    = None,
    broker_list: Annotated[str | None, typer.Option(
        "--broker-list", "--brokers", help="Brokers for --generate to place on: 1,2,3.")]
    = None,
    disable_rack_aware: Annotated[bool, typer.Option(
        "--disable-rack-aware", help="--generate: ignore the brokers' racks.")] = False,
    throttle: Annotated[int | None, typer.Option(
        "--throttle", metavar="BYTES_PER_SEC", min=1,
        help="--execute: replication throttle (bytes/s) for the moving replicas.")] = None,
    additional: Annotated[bool, typer.Option(
        "--additional", help="--execute while other moves are in progress.")] = False,
    preserve_throttles: Annotated[bool, typer.Option(
        "--preserve-throttles", help="--verify/--cancel: leave the throttles set.")] = False,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Reassign partitions with Kafka's reassignment JSON, as kafka-reassign-partitions.sh.

    \b
    yak partitions reassign --generate --topics orders --brokers 2,3,4
    yak partitions reassign --execute --plan plan.json [--throttle 10485760]
    yak partitions reassign --verify --plan plan.json
    yak partitions reassign --cancel --plan plan.json

    \b
    --generate prints the current assignment and a proposed one (Kafka's
      round robin, rack-aware when every listed broker has a rack).
    --execute prints the current assignment (save it for a rollback), then
      starts the moves; --throttle first sets leader/follower.replication.
      throttled.rate on the brokers involved and the topics' throttled
      replicas (*.replication.throttled.replicas), as Kafka's tool does.
    --verify reports each partition; when none is still moving it clears
      the throttles (the rates on every broker, the replicas on the plan's
      topics), as Kafka does, unless --preserve-throttles.
    --cancel cancels the listed moves still in progress and clears the
      throttles the same way.

    \b
    Exit status of --verify (Kafka's tool always exits 0; these let a script
    wait: until yak partitions reassign --verify --plan F; do sleep 5; done):
      0  every partition is at its target
      3  some partition is still moving
      4  none is moving, but some is not at its target (cancelled, replaced)
    Bad input (a file that is not Kafka's JSON, an unknown topic or broker,
    a replica named twice) is one line and exit 2; an unreachable broker, 1.
    """
    modes = [m for m, on in (("--generate", generate), ("--execute", execute),
                             ("--verify", verify), ("--cancel", cancel)) if on]
    if len(modes) != 1:
        fail_line("give one of --generate, --execute, --verify, --cancel"
                  + (f" (not {' and '.join(modes)})" if modes else ""), 2)
    if generate:
        if (topics_file is None) == (topics is None):
            fail_line("--generate needs --topics-to-move-json-file FILE or --topics A,B"
                      " (one of them)", 2)
        if broker_list is None:
            fail_line("--generate needs --broker-list 1,2,3", 2)
        brokers = _broker_ids(broker_list)
        if topics_file is not None:
            from yak.cli.reassign_json import parse_topics_to_move

            names = json_input(parse_topics_to_move, topics_file)
        else:
            names = list(dict.fromkeys(t.strip() for t in (topics or "").split(",")
                                       if t.strip()))
            if not names:
                fail_line(f"invalid --topics {topics!r}: expected topic names", 2)
        with reassign_client(bootstrap, timeout, client_security()) as c:
            _generate(c, names, brokers, not disable_rack_aware)
        return
    if reassignment_file is None:
        fail_line(f"{modes[0]} needs --reassignment-json-file FILE (or --plan FILE)", 2)
    if throttle is not None and not execute:
        fail_line("--throttle goes with --execute", 2)
    from yak.cli.reassign_json import parse_reassignment

    plan = json_input(parse_reassignment, reassignment_file)
    with reassign_client(bootstrap, timeout, client_security()) as c:
        if execute:
            _execute(c, plan, additional, throttle, bootstrap, timeout)
        elif verify:
            code = _verify(c, plan, preserve_throttles, bootstrap, timeout)
            if code:
                raise typer.Exit(code)
        else:
            _cancel(c, plan, preserve_throttles, bootstrap, timeout)
