"""Kafka's reassignment JSON (`yak/cli/reassign_json.py`, issue 23) without a broker: the
formats kafka-reassign-partitions.sh and kafka-leader-election.sh read and write, every
refusal as one readable line, `--generate`'s proposal (Kafka's round robin, racks), the
KIP-73 throttle values and `--verify`'s verdicts."""

from __future__ import annotations

import json
import random

import pytest

from yak.cli.reassign_json import (
    ReassignJsonError,
    check_targets,
    format_reassignment,
    parse_election_partitions,
    parse_reassignment,
    parse_topics_to_move,
    propose,
    state_of,
    throttled_brokers,
    throttled_replicas,
)
from yak.cluster.placement import assign_replicas

# What Kafka's tool writes for --generate (its documentation's example, two topics).
KAFKA_PLAN = ('{"version":1,"partitions":[{"topic":"foo1","partition":0,"replicas":[5,6],'
              '"log_dirs":["any","any"]},{"topic":"foo2","partition":1,"replicas":[6,5],'
              '"log_dirs":["any","any"]}]}')


def test_kafka_output_parses_and_formats_back_byte_for_byte() -> None:
    plan = parse_reassignment(KAFKA_PLAN)
    assert plan == {("foo1", 0): [5, 6], ("foo2", 1): [6, 5]}
    assert format_reassignment(plan) == KAFKA_PLAN


def test_format_sorts_by_topic_then_partition_and_keeps_replica_order() -> None:
    out = json.loads(format_reassignment({("b", 10): [3, 1], ("b", 2): [1], ("a", 0): [2, 3]}))
    assert [(e["topic"], e["partition"]) for e in out["partitions"]] == \
        [("a", 0), ("b", 2), ("b", 10)]
    assert out["partitions"][1]["replicas"] == [1]
    assert out["partitions"][2] == {"topic": "b", "partition": 10, "replicas": [3, 1],
                                    "log_dirs": ["any", "any"]}


def test_log_dirs_are_optional_and_any_is_accepted() -> None:
    text = json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2]},
        {"topic": "t", "partition": 1, "replicas": [2], "log_dirs": ["any"]}]})
    assert parse_reassignment(text) == {("t", 0): [1, 2], ("t", 1): [2]}


def _plan(*entries: dict, **top: object) -> str:
    return json.dumps({"version": 1, "partitions": list(entries), **top})


@pytest.mark.parametrize(("text", "fragment"), [
    ("{not json", "is not valid JSON: Expecting property name"),
    ("[1, 2]", "must be a JSON object"),
    ('{"partitions": []}', "unsupported version None"),
    (_plan(version=2), "unsupported version 2"),
    ('{"version": 1}', 'has no "partitions" list'),
    ('{"version": 1, "partitions": {}}', '"partitions" must be a list'),
    (_plan(), "names no partitions"),
    (_plan("t/0"), "partitions[0] must be an object"),
    (_plan({"topic": "t", "replicas": [1]}), 'partitions[0] has no "partition"'),
    (_plan({"topic": "", "partition": 0, "replicas": [1]}), "topic must be a non-empty"),
    (_plan({"topic": "t", "partition": -1, "replicas": [1]}), "partition must be a non-neg"),
    (_plan({"topic": "t", "partition": True, "replicas": [1]}), "not True"),
    (_plan({"topic": "t", "partition": "0", "replicas": [1]}), "not '0'"),
    (_plan({"topic": "t", "partition": 0, "replicas": []}), "t/0: \"replicas\" must be a"),
    (_plan({"topic": "t", "partition": 0, "replicas": [1, "2"]}), "t/0: replica must be"),
    (_plan({"topic": "t", "partition": 0, "replicas": [1, 2, 1]}),
     "t/0: INVALID_REPLICA_ASSIGNMENT: replica 1 is named twice"),
    (_plan({"topic": "t", "partition": 0, "replicas": [1]},
           {"topic": "t", "partition": 0, "replicas": [2]}), "t/0 is named twice"),
    (_plan({"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}),
     "one directory per replica (2)"),
    (_plan({"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/data"]}),
     "log directory '/data': only \"any\""),
])
def test_bad_reassignment_files_are_one_readable_line(text: str, fragment: str) -> None:
    with pytest.raises(ReassignJsonError) as e:
        parse_reassignment(text)
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("the reassignment file")


def test_topics_to_move() -> None:
    assert parse_topics_to_move('{"topics":[{"topic":"foo1"},{"topic":"foo2"}],"version":1}') \
        == ["foo1", "foo2"]
    assert parse_topics_to_move('{"topics":[{"topic":"a"}]}') == ["a"]  # version optional
    for text, fragment in [('{"topics":[]}', "names no topics"),
                           ('{"topics":["a"]}', 'topics[0] must be an object with a "topic"'),
                           ('{"topics":[{"topic":"a"},{"topic":"a"}]}', "'a' is named twice"),
                           ('{"version":3,"topics":[{"topic":"a"}]}', "unsupported version 3"),
                           ("", "is not valid JSON")]:
        with pytest.raises(ReassignJsonError, match=None) as e:
            parse_topics_to_move(text)
        assert fragment in str(e.value)


def test_election_partitions() -> None:
    text = '{"partitions":[{"topic":"foo","partition":1},{"topic":"foobar","partition":2}]}'
    assert parse_election_partitions(text) == [("foo", 1), ("foobar", 2)]
    for text, fragment in [('{"partitions":[]}', "names no partitions"),
                           ('{"partitions":[{"topic":"a"}]}', 'with "topic" and "partition"'),
                           ('{"partitions":[{"topic":"a","partition":0},'
                            '{"topic":"a","partition":0}]}', "a/0 is named twice")]:
        with pytest.raises(ReassignJsonError) as e:
            parse_election_partitions(text)
        assert fragment in str(e.value)


def test_check_targets_names_the_unknown_partition_or_broker() -> None:
    parts = {("t", 0), ("t", 1)}
    check_targets({("t", 0): [1, 2]}, [1, 2, 3], parts)  # fine: no exception
    with pytest.raises(ReassignJsonError, match=r"^t/7: UNKNOWN_TOPIC_OR_PARTITION"):
        check_targets({("t", 7): [1]}, [1, 2, 3], parts)
    with pytest.raises(ReassignJsonError, match=r"^t/1: INVALID_REPLICA_ASSIGNMENT: broker 9"
                       r" is not in the cluster \(brokers: 1, 2, 3\)$"):
        check_targets({("t", 0): [1], ("t", 1): [2, 9]}, [3, 1, 2], parts)


def test_propose_keeps_counts_and_uses_kafkas_round_robin() -> None:
    current = {("a", 0): [1, 2], ("a", 1): [2, 3], ("a", 2): [3, 1], ("b", 0): [1],
               ("c", 0): [1, 2, 3]}
    brokers = {2: None, 3: None, 4: None}
    got = propose(current, ["a", "b"], brokers, rng=random.Random(7))
    # The same as placement's round robin with the same random draws, per topic in order.
    rng = random.Random(7)
    a = assign_replicas(3, 2, brokers, rng=rng)
    b = assign_replicas(1, 1, brokers, rng=rng)
    assert got == {("a", 0): a[0], ("a", 1): a[1], ("a", 2): a[2], ("b", 0): b[0]}
    assert all(set(r) <= {2, 3, 4} and len(set(r)) == len(r) for r in got.values())


def test_propose_spreads_racks_and_refuses_mixed_racks() -> None:
    current = {("r", p): [1, 2, 3] for p in range(6)}
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    got = propose(current, ["r"], racks, rng=random.Random(1))
    assert all(len({racks[b] for b in reps}) == 3 for reps in got.values()), got
    mixed = {1: "a", 2: None, 3: "b"}
    with pytest.raises(ReassignJsonError, match=r"not every broker has a rack \(none on 2\):"
                       " give --disable-rack-aware"):
        propose(current, ["r"], mixed)
    # Without racks, the same brokers are accepted.
    assert set(propose(current, ["r"], mixed, rack_aware=False)) == set(current)


def test_propose_refusals() -> None:
    current = {("a", 0): [1, 2, 3]}
    with pytest.raises(ReassignJsonError, match="topic 'zz': UNKNOWN_TOPIC_OR_PARTITION"):
        propose(current, ["zz"], {1: None})
    with pytest.raises(ReassignJsonError, match="topic 'a': INVALID_REPLICATION_FACTOR:"
                       ".*only 2 broker"):
        propose(current, ["a"], {1: None, 2: None})


def test_throttles_name_current_replicas_as_leaders_and_added_ones_as_followers() -> None:
    current = {("t", 0): [1, 2, 3], ("t", 1): [2, 3, 1], ("t", 2): [3, 1, 2],
               ("u", 0): [1]}
    proposed = {("t", 0): [2, 3, 4], ("t", 1): [2, 3, 1], ("t", 2): [3, 4, 1],
                ("u", 0): [1, 5]}
    assert throttled_replicas(current, proposed) == {
        "t": ("0:1,0:2,0:3,2:3,2:1,2:2", "0:4,2:4"),
        "u": ("0:1", "0:5"),
    }
    assert throttled_brokers(current, proposed) == [1, 2, 3, 4, 5]
    # Only a leader change (the same set, another order) throttles no follower.
    assert throttled_replicas({("t", 0): [1, 2]}, {("t", 0): [2, 1]}) == {"t": ("0:1,0:2", "")}
    assert throttled_replicas(current, current) == {}
    assert throttled_brokers(current, current) == []


def test_verify_states() -> None:
    assert state_of([2, 3], [2, 3, 1], moving=True) == "in progress"
    assert state_of([2, 3], [2, 3], moving=False) == "complete"
    assert state_of([2, 3], [3, 2], moving=False) == "failed"  # Kafka compares in order
    assert state_of([2, 3], [1, 2], moving=False) == "failed"  # cancelled or replaced
    assert state_of([2, 3], None, moving=False) == "failed"  # the partition is gone
