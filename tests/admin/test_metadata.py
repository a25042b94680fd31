"""MetadataStore: Kafka's topic-name rules, atomic persistence, producer ids never reused."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from yak.cluster.metadata import (
    METADATA_FILE,
    LocalMetadataStore,
    StalePartitionStateError,
    validate_topic_name,
)
from yak.cluster.producer_ids import ProducerIdManager
from yak.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from yak.partition import PartitionState


@pytest.mark.parametrize("name", ["a", "A-b_c.9", "x" * 249, "__consumer_offsets"])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "a/b", "ä", "a:b"])
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_topics_persist_across_reopen(tmp_path: Path) -> None:
    m = LocalMetadataStore(tmp_path)
    t = m.create_topic("orders", 3, {"retention.ms": "1000"})
    assert isinstance(t.topic_id, uuid.UUID) and t.topic_id.int != 0
    m.add_partitions("orders", 5)
    m.set_topic_configs("orders", {"cleanup.policy": "compact"})
    m.create_topic("gone", 1)
    m.delete_topic("gone")

    m2 = LocalMetadataStore(tmp_path / METADATA_FILE)
    assert m2.cluster_id == m.cluster_id
    assert [x.name for x in m2.topics()] == ["orders"]
    o = m2.get("orders")
    assert o is not None
    assert (o.topic_id, o.partitions, o.configs) == (t.topic_id, 5, {"cleanup.policy": "compact"})
    assert m2.by_id(t.topic_id) is o
    # No temp file left behind; the file is valid JSON.
    assert [p.name for p in tmp_path.iterdir()] == [METADATA_FILE]
    json.loads((tmp_path / METADATA_FILE).read_text())


def test_errors(tmp_path: Path) -> None:
    m = LocalMetadataStore(tmp_path)
    m.create_topic("a.b", 1)
    with pytest.raises(TopicAlreadyExistsError):
        m.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        m.create_topic("a_b", 1)
    with pytest.raises(InvalidPartitionsError):
        m.create_topic("zero", 0)
    with pytest.raises(InvalidPartitionsError):
        m.add_partitions("a.b", 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        m.delete_topic("nope")
    with pytest.raises(UnknownTopicOrPartitionError):
        m.set_topic_configs("nope", {})
    assert [x.name for x in m.topics()] == ["a.b"]


def test_producer_ids_are_never_reused_after_restart(tmp_path: Path) -> None:
    ids = ProducerIdManager(LocalMetadataStore(tmp_path))
    first = [ids.generate_producer_id() for _ in range(5)]
    assert first == sorted(set(first))
    # a restart (or crash) mid-block
    ids2 = ProducerIdManager(LocalMetadataStore(tmp_path))
    later = [ids2.generate_producer_id() for _ in range(2000)]
    assert min(later) > max(first)
    assert len(set(later)) == len(later)
    ids3 = ProducerIdManager(LocalMetadataStore(tmp_path))
    assert ids3.generate_producer_id() > max(later)
    assert ids3.was_allocated(max(later)) and not ids3.was_allocated(10**9)


def test_version_1_file_is_migrated_to_partition_states(tmp_path: Path) -> None:
    """A file written before partition states existed: every partition was led by the one
    broker at epoch 0, and the reserved producer id block is kept."""
    old = {
        "version": 1,
        "cluster_id": "abcdefghijklmnopqrstuv",
        "producer_id_block_end": 3000,
        "topics": [{"name": "orders", "topic_id": str(uuid.uuid4()), "partitions": 2,
                    "configs": {"retention.ms": "1000"}}],
    }
    (tmp_path / METADATA_FILE).write_text(json.dumps(old))
    m = LocalMetadataStore(tmp_path, node_id=7)
    assert m.cluster_id == "abcdefghijklmnopqrstuv"
    assert m.get("orders").configs == {"retention.ms": "1000"}
    assert m.partition_states("orders") == [PartitionState((7,), (7,), 7, 0, 0)] * 2
    assert m.next_producer_id() == 3000
    # Rewritten in the current format, readable again.
    doc = json.loads((tmp_path / METADATA_FILE).read_text())
    assert doc["version"] == 2 and "partitionStates" in doc["topics"][0]
    assert LocalMetadataStore(tmp_path, node_id=7).partition_states("orders") == \
        m.partition_states("orders")


def test_partition_state_is_persisted_and_compare_and_set(tmp_path: Path) -> None:
    m = LocalMetadataStore(tmp_path, node_id=1)
    m.create_topic("t", 2)
    s0 = m.partition_states("t")[1]
    assert (s0.leader, s0.replicas, s0.isr, s0.leader_epoch, s0.partition_epoch) == \
        (1, (1,), (1,), 0, 0)
    s1 = s0.with_leader(1)
    m.set_partition_state("t", 1, s1, expected_partition_epoch=0)
    with pytest.raises(StalePartitionStateError):
        m.set_partition_state("t", 1, s1.with_leader(1), expected_partition_epoch=0)
    again = LocalMetadataStore(tmp_path)
    assert again.partition_states("t") == [s0, s1]
    assert (s1.leader_epoch, s1.partition_epoch) == (1, 1)
    m.add_partitions("t", 3, assignment=[(4, 1)])
    assert again.partition_states("t") == [s0, s1]  # another handle: its own snapshot
    assert LocalMetadataStore(tmp_path).partition_states("t")[2] == \
        PartitionState((4, 1), (4, 1), 4, 0, 0)
