"""Kafka's reassignment JSON, and the pure computations `yak partitions reassign` makes on
it (issue 23), as `kafka-reassign-partitions.sh` and `kafka-leader-election.sh` do.

The formats, as Kafka's tools read and write them:

- a reassignment (`--execute`, `--verify`, `--cancel`, and `--generate`'s output):
  `{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],
  "log_dirs":["any","any"]}]}` (`log_dirs` optional; one per replica);
- the topics to move (`--generate --topics-to-move-json-file`):
  `{"version":1,"topics":[{"topic":"t"}]}`;
- the partitions to elect (`yak cluster elect-leaders --path-to-json-file`):
  `{"partitions":[{"topic":"t","partition":0}]}`.

Why a module of its own, without I/O: the shapes and checks are what an operator's files
meet first, and each rule is tested here without a broker (tests/cli/test_reassign_json.py).
Every problem is a `ReassignJsonError` (a ValueError) whose message is one readable line;
the command turns it into exit 2.

A log directory other than "any" is refused: a Yak broker has one log directory, and
there is no AlterReplicaLogDirs to move a replica between directories.
"""

from __future__ import annotations

import json
import random
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

from yak.cluster.placement import assign_replicas
from yak.errors import InvalidReplicationFactorError

__all__ = [
    "ANY_LOG_DIR", "ReassignJsonError", "TopicPartition", "format_reassignment",
    "parse_reassignment", "parse_topics_to_move", "parse_election_partitions",
    "check_targets", "propose", "throttled_replicas", "throttled_brokers", "state_of",
]

TopicPartition = tuple[str, int]
ANY_LOG_DIR = "any"
State = Literal["complete", "in progress", "failed"]


class ReassignJsonError(ValueError):
    """A file that is not the JSON Kafka's tool expects; the message is one line."""


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReassignJsonError(f"{what} is not valid JSON: {e.msg} at line {e.lineno}"
                                f" column {e.colno}") from None
    if not isinstance(doc, dict):
        raise ReassignJsonError(f"{what} must be a JSON object")
    return doc


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ReassignJsonError(f"{what} must be a non-negative integer, not {value!r}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ReassignJsonError(f"{what} must be a non-empty string, not {value!r}")
    return value


def _list(doc: Mapping[str, Any], key: str, what: str) -> list[Any]:
    if key not in doc:
        raise ReassignJsonError(f"{what} has no \"{key}\" list")
    value = doc[key]
    if not isinstance(value, list):
        raise ReassignJsonError(f"{what}: \"{key}\" must be a list")
    return value


def _version(doc: Mapping[str, Any], what: str, required: bool) -> None:
    if "version" not in doc and not required:
        return
    if doc.get("version") != 1:
        raise ReassignJsonError(f"{what}: unsupported version {doc.get('version')!r}"
                                " (Kafka's format is version 1)")


def name(tp: TopicPartition) -> str:
    return f"{tp[0]}/{tp[1]}"


def parse_reassignment(text: str, what: str = "the reassignment file"
                       ) -> dict[TopicPartition, list[int]]:
    """Each partition's target replicas, in the file's order (the first is the preferred
    leader). Refused: no partitions, a partition named twice, an empty replica list, a
    replica named twice in one list, `log_dirs` of another length or other than "any"."""
    doc = _load(text, what)
    _version(doc, what, required=True)
    entries = _list(doc, "partitions", what)
    if not entries:
        raise ReassignJsonError(f"{what} names no partitions")
    plan: dict[TopicPartition, list[int]] = {}
    for i, entry in enumerate(entries):
        where = f"{what}: partitions[{i}]"
        if not isinstance(entry, dict):
            raise ReassignJsonError(f"{where} must be an object")
        for key in ("topic", "partition", "replicas"):
            if key not in entry:
                raise ReassignJsonError(f"{where} has no \"{key}\"")
        tp = (_str(entry["topic"], f"{where}.topic"),
              _int(entry["partition"], f"{where}.partition"))
        where = f"{what}: {name(tp)}"
        if tp in plan:
            raise ReassignJsonError(f"{where} is named twice")
        replicas = entry["replicas"]
        if not isinstance(replicas, list) or not replicas:
            raise ReassignJsonError(f"{where}: \"replicas\" must be a non-empty list of"
                                    " broker ids")
        ids = [_int(r, f"{where}: replica") for r in replicas]
        twice = sorted({r for r in ids if ids.count(r) > 1})
        if twice:
            raise ReassignJsonError(
                f"{where}: INVALID_REPLICA_ASSIGNMENT: replica {twice[0]} is named twice")
        dirs = entry.get("log_dirs")
        if dirs is not None:
            if not isinstance(dirs, list) or len(dirs) != len(ids):
                raise ReassignJsonError(f"{where}: \"log_dirs\" must list one directory per"
                                        f" replica ({len(ids)})")
            other = [d for d in dirs if d != ANY_LOG_DIR]
            if other:
                raise ReassignJsonError(
                    f"{where}: log directory {other[0]!r}: only \"any\" is supported"
                    " (a Yak broker has one log directory)")
        plan[tp] = ids
    return plan


def format_reassignment(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's reassignment JSON, compact and sorted by topic and partition, as its tool
    prints the current and proposed assignments."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(assignment[(t, p)]),
         "log_dirs": [ANY_LOG_DIR] * len(assignment[(t, p)])}
        for t, p in sorted(assignment)]}, separators=(",", ":"))


def parse_topics_to_move(text: str, what: str = "the topics-to-move file") -> list[str]:
    """The topic names, in the file's order, each once."""
    doc = _load(text, what)
    _version(doc, what, required=False)
    entries = _list(doc, "topics", what)
    if not entries:
        raise ReassignJsonError(f"{what} names no topics")
    topics: list[str] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "topic" not in entry:
            raise ReassignJsonError(f"{what}: topics[{i}] must be an object with a \"topic\"")
        topic = _str(entry["topic"], f"{what}: topics[{i}].topic")
        if topic in topics:
            raise ReassignJsonError(f"{what}: topic {topic!r} is named twice")
        topics.append(topic)
    return topics


def parse_election_partitions(text: str, what: str = "the election file"
                              ) -> list[TopicPartition]:
    """kafka-leader-election's `{"partitions":[{"topic":..,"partition":..}]}`: each once."""
    doc = _load(text, what)
    entries = _list(doc, "partitions", what)
    if not entries:
        raise ReassignJsonError(f"{what} names no partitions")
    out: list[TopicPartition] = []
    for i, entry in enumerate(entries):
        where = f"{what}: partitions[{i}]"
        if not isinstance(entry, dict) or "topic" not in entry or "partition" not in entry:
            raise ReassignJsonError(f"{where} must be an object with \"topic\" and"
                                    " \"partition\"")
        tp = (_str(entry["topic"], f"{where}.topic"),
              _int(entry["partition"], f"{where}.partition"))
        if tp in out:
            raise ReassignJsonError(f"{what}: {name(tp)} is named twice")
        out.append(tp)
    return out


def check_targets(plan: Mapping[TopicPartition, Sequence[int]], brokers: Collection[int],
                  partitions: Collection[TopicPartition]) -> None:
    """Kafka's tool checks a plan against the cluster before it sends anything (so no
    throttle is set for a plan that cannot start): every partition exists, and every
    replica is a broker the cluster lists."""
    missing = [tp for tp in plan if tp not in partitions]
    if missing:
        raise ReassignJsonError(
            f"{name(missing[0])}: UNKNOWN_TOPIC_OR_PARTITION: no such topic or partition")
    known = set(brokers)
    for tp, replicas in plan.items():
        unknown = [r for r in replicas if r not in known]
        if unknown:
            raise ReassignJsonError(
                f"{name(tp)}: INVALID_REPLICA_ASSIGNMENT: broker {unknown[0]} is not in the"
                f" cluster (brokers: {', '.join(map(str, sorted(known)))})")


def propose(current: Mapping[TopicPartition, Sequence[int]], topics: Sequence[str],
            brokers: Mapping[int, str | None], rack_aware: bool = True,
            rng: random.Random | None = None) -> dict[TopicPartition, list[int]]:
    """`--generate`: each topic's partitions placed anew on `brokers` (node id -> rack)
    by Kafka's round robin (`placement.assign_replicas`), keeping each topic's partition
    count and replication factor (its first partition's, as Kafka's tool takes it).

    Rack-aware when `rack_aware` and every listed broker has a rack; some with a rack and
    some without is refused, as Kafka refuses it without --disable-rack-aware."""
    racks = dict(brokers)
    with_rack = [b for b, r in racks.items() if r is not None]
    if rack_aware and with_rack and len(with_rack) != len(racks):
        without = sorted(b for b, r in racks.items() if r is None)
        raise ReassignJsonError(
            f"not every broker has a rack (none on {', '.join(map(str, without))}): give"
            " --disable-rack-aware to place replicas without racks")
    place: Mapping[int, str | None] | list[int] = racks if rack_aware else sorted(racks)
    proposed: dict[TopicPartition, list[int]] = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        if not parts:
            raise ReassignJsonError(f"topic {topic!r}: UNKNOWN_TOPIC_OR_PARTITION: no such"
                                    " topic")
        rf = len(current[(topic, parts[0])])
        try:
            lists = assign_replicas(len(parts), rf, place, rng=rng)
        except InvalidReplicationFactorError as e:
            raise ReassignJsonError(f"topic {topic!r}: INVALID_REPLICATION_FACTOR:"
                                    f" {e.message}") from None
        proposed.update({(topic, p): r for p, r in zip(parts, lists, strict=True)})
    return proposed


def _moves(current: Mapping[TopicPartition, Sequence[int]],
           proposed: Mapping[TopicPartition, Sequence[int]]
           ) -> dict[TopicPartition, tuple[Sequence[int], Sequence[int]]]:
    return {tp: (current[tp], target) for tp, target in proposed.items()
            if tp in current and list(current[tp]) != list(target)}


def throttled_replicas(current: Mapping[TopicPartition, Sequence[int]],
                       proposed: Mapping[TopicPartition, Sequence[int]]
                       ) -> dict[str, tuple[str, str]]:
    """Topic -> (`leader.replication.throttled.replicas`, `follower...`) for the moving
    partitions, as Kafka's tool sets them (KIP-73): the leader side names every current
    replica (any of them may lead while the data moves), the follower side the replicas
    being added. Partitions whose replicas do not change are left out."""
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    for (topic, p), (now, target) in sorted(_moves(current, proposed).items()):
        leader.setdefault(topic, []).extend(f"{p}:{b}" for b in now)
        follower.setdefault(topic, []).extend(f"{p}:{b}" for b in target if b not in now)
    return {t: (",".join(leader[t]), ",".join(follower.get(t, []))) for t in leader}


def throttled_brokers(current: Mapping[TopicPartition, Sequence[int]],
                      proposed: Mapping[TopicPartition, Sequence[int]]) -> list[int]:
    """The brokers a move involves (current and target replicas of the moving
    partitions): where Kafka's tool sets the `*.replication.throttled.rate`."""
    return sorted({b for now, target in _moves(current, proposed).values()
                   for b in (*now, *target)})


def state_of(target: Sequence[int], replicas: Sequence[int] | None, moving: bool) -> State:
    """`--verify`'s verdict for one partition: still moving ("in progress"), at its target
    in the target's order, as Kafka compares them ("complete"), or neither ("failed":
    cancelled, replaced by another move, or the partition is gone)."""
    if moving:
        return "in progress"
    if replicas is not None and list(replicas) == list(target):
        return "complete"
    return "failed"
