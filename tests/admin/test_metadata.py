"""MetadataStore: Kafka's topic-name rules, atomic persistence, producer ids never reused."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from yak.cluster.metadata import METADATA_FILE, MetadataStore, validate_topic_name
from yak.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)


@pytest.mark.parametrize("name", ["a", "A-b_c.9", "x" * 249, "__consumer_offsets"])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "a/b", "ä", "a:b"])
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_topics_persist_across_reopen(tmp_path: Path) -> None:
    m = MetadataStore(tmp_path)
    t = m.create_topic("orders", 3, {"retention.ms": "1000"})
    assert isinstance(t.topic_id, uuid.UUID) and t.topic_id.int != 0
    m.add_partitions("orders", 5)
    m.set_topic_configs("orders", {"cleanup.policy": "compact"})
    m.create_topic("gone", 1)
    m.delete_topic("gone")

    m2 = MetadataStore(tmp_path / METADATA_FILE)
    assert m2.cluster_id == m.cluster_id
    assert set(m2.topics) == {"orders"}
    o = m2.topics["orders"]
    assert (o.topic_id, o.partitions, o.configs) == (t.topic_id, 5, {"cleanup.policy": "compact"})
    assert m2.by_id(t.topic_id) is o
    # No temp file left behind; the file is valid JSON.
    assert [p.name for p in tmp_path.iterdir()] == [METADATA_FILE]
    json.loads((tmp_path / METADATA_FILE).read_text())


def test_errors(tmp_path: Path) -> None:
    m = MetadataStore(tmp_path)
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
    assert set(m.topics) == {"a.b"}


def test_producer_ids_are_never_reused_after_restart(tmp_path: Path) -> None:
    m = MetadataStore(tmp_path)
    first = [m.allocate_producer_id() for _ in range(5)]
    assert first == sorted(set(first))
    m2 = MetadataStore(tmp_path)  # a restart (or crash) mid-block
    later = [m2.allocate_producer_id() for _ in range(2000)]
    assert min(later) > max(first)
    assert len(set(later)) == len(later)
    m3 = MetadataStore(tmp_path)
    assert m3.allocate_producer_id() > max(later)
