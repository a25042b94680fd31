"""`yak cluster elect-leaders`: move leadership back to the preferred replicas, or elect a
leader for leaderless partitions from outside the ISR, as Kafka's kafka-leader-election.sh
does (ElectLeaders, API 43; issue 23).

    yak cluster elect-leaders --all-topic-partitions
    yak cluster elect-leaders --topic orders [--partition 0] [--election-type unclean]
    yak cluster elect-leaders --path-to-json-file parts.json

Why: after a broker restarts, the partitions it led are led by other replicas until an
election moves them back (the broker's `auto.leader.rebalance.enable` does it in time; this
does it now, for the partitions named). The rules are the broker's: a preferred replica
that is not in the ISR is not elected (PREFERRED_LEADER_NOT_AVAILABLE), and an unclean
election happens only for a partition with no leader.

Each partition's outcome is one line. ELECTION_NOT_NEEDED is no failure: the partition is
"already led by its preferred replica" (or, unclean, already has a leader). With
--all-topic-partitions the broker answers only the elections that happened or failed, as
in Kafka. One difference from Kafka's tool: `--topic` without `--partition` means every
partition of the topic (Kafka requires --partition). Refusals are one line: exit 2 when
every one is bad input (an unknown topic or partition), else 1; options that do not go
together exit 2.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from yak.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    Bootstrap,
    Timeout,
    client_security,
    secured,
)
from yak.cli.partitions import BAD_INPUT, call, code_name, fail_line
from yak.client.reassign_wire import PREFERRED, UNCLEAN, TopicPartition, reassign_client

out = Console(highlight=False, soft_wrap=True)

ELECTION_NOT_NEEDED = 84
TYPES = {"preferred": PREFERRED, "unclean": UNCLEAN}


def outcome(election_type: int, code: int, message: str | None) -> str | None:
    """The line for an election that happened or was not needed; None for a failure."""
    if code == 0:
        return ("preferred replica elected leader" if election_type == PREFERRED
                else "leader elected (unclean: from outside the ISR)")
    if code == ELECTION_NOT_NEEDED:
        return ("already led by its preferred replica" if election_type == PREFERRED
                else "already has a leader")
    return None


def _partitions(topic: str | None, partition: int | None, all_partitions: bool,
                json_file: str | None) -> list[TopicPartition] | str | None:
    """The partitions named (None: all), or the topic whose partitions Metadata gives."""
    given = [o for o, on in (("--topic", topic is not None),
                             ("--all-topic-partitions", all_partitions),
                             ("--path-to-json-file", json_file is not None)) if on]
    if len(given) != 1:
        fail_line("give one of --topic, --all-topic-partitions, --path-to-json-file"
                  + (f" (not {' and '.join(given)})" if given else ""), 2)
    if partition is not None and topic is None:
        fail_line("--partition goes with --topic", 2)
    if json_file is not None:
        from yak.cli.partitions import json_input
        from yak.cli.reassign_json import parse_election_partitions

        return json_input(parse_election_partitions, json_file)
    if all_partitions:
        return None
    assert topic is not None
    return [(topic, partition)] if partition is not None else topic


@secured
def elect_leaders(
    election_type: Annotated[str, typer.Option(
        "--election-type", metavar="preferred|unclean", case_sensitive=False,
        help="preferred: the first replica, if in sync; unclean: any live replica of a"
        " partition without a leader.")] = "preferred",
    topic: Annotated[str | None, typer.Option(
        "--topic", help="One topic (every partition, unless --partition).")] = None,
    partition: Annotated[int | None, typer.Option(
        "--partition", min=0, help="One partition of --topic.")] = None,
    all_topic_partitions: Annotated[bool, typer.Option(
        "--all-topic-partitions", help="Every partition of every topic.")] = False,
    path_to_json_file: Annotated[str | None, typer.Option(
        "--path-to-json-file", metavar="FILE",
        help='{"partitions":[{"topic":"orders","partition":0}]}')] = None,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Elect partition leaders (ElectLeaders), as kafka-leader-election.sh.

    A partition already led by its preferred replica is reported as such, not
    as an error. Exit 2 when only bad input was refused (an unknown topic or
    partition), 1 for any other refusal (PREFERRED_LEADER_NOT_AVAILABLE: the
    preferred replica is down or not in sync).
    """
    kind = TYPES.get(election_type.lower())
    if kind is None:
        fail_line(f"invalid --election-type {election_type!r}: preferred or unclean", 2)
    wanted = _partitions(topic, partition, all_topic_partitions, path_to_json_file)
    with reassign_client(bootstrap, timeout, client_security()) as c:
        if isinstance(wanted, str):
            view = call("cannot read the cluster's metadata", c.cluster)
            named = sorted(tp for tp in view.partitions if tp[0] == wanted)
            if not named:
                fail_line(f"cannot elect leaders: {wanted}: UNKNOWN_TOPIC_OR_PARTITION", 2)
            wanted = named
        results = call("cannot elect leaders", lambda: c.elect(kind, wanted))
    if not results:
        out.print("no partition needed an election")
        return
    refused = []
    for (t, p), (code, message) in sorted(results.items()):
        line = outcome(kind, code, message)
        if line is not None:
            out.print(f"{t}/{p}: {line}")
        else:
            refused.append((code, f"{t}/{p}: {code_name(code)}"
                            + (f": {message}" if message else "")))
    if refused:
        exit_code = 2 if all(c in BAD_INPUT for c, _ in refused) else 1
        fail_line("cannot elect leaders: " + "; ".join(m for _, m in refused), exit_code)
