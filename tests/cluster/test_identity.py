"""The cluster id in etcd and the data dir's meta.properties (Kafka's file) checked against it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from yak.cluster.etcd import EtcdClient
from yak.cluster.identity import (
    DataDirMismatchError,
    check_data_dir,
    ensure_cluster_id,
    read_meta_properties,
)
from yak.cluster.layout import ClusterKeys
from yak.devcluster.local import LocalEtcd

from .conftest import run


def test_first_broker_creates_the_id_and_all_agree(etcd: LocalEtcd, keys: ClusterKeys) -> None:
    async def body() -> list[str]:
        async with EtcdClient(etcd.endpoints) as c:
            ids = await asyncio.gather(*(ensure_cluster_id(c, keys) for _ in range(5)))
            again = await ensure_cluster_id(c, keys, proposed="ignored-now")
            return [*ids, again]

    ids = run(body())
    assert len(set(ids)) == 1 and len(ids[0]) == 22


def test_meta_properties_written_then_checked(tmp_path: Path) -> None:
    d = tmp_path / "data"
    check_data_dir(d, "clusterAAAAAAAAAAAAAAA", 1)  # fresh dir: the file is written
    props = read_meta_properties(d)
    assert props is not None
    assert props["cluster.id"] == "clusterAAAAAAAAAAAAAAA"
    assert props["node.id"] == "1" and props["version"] == "1" and props["directory.id"]
    check_data_dir(d, "clusterAAAAAAAAAAAAAAA", 1)  # same cluster and node: accepted

    with pytest.raises(DataDirMismatchError) as e:
        check_data_dir(d, "clusterBBBBBBBBBBBBBBB", 1)
    msg = str(e.value)
    assert "\n" not in msg
    assert "clusterAAAAAAAAAAAAAAA" in msg and "clusterBBBBBBBBBBBBBBB" in msg
    assert str(d / "meta.properties") in msg

    with pytest.raises(DataDirMismatchError, match="node.id 1.*node.id 2"):
        check_data_dir(d, "clusterAAAAAAAAAAAAAAA", 2)


def test_reads_a_file_kafka_wrote(tmp_path: Path) -> None:
    """The format Kafka 3.x's MetaPropertiesEnsemble writes (Java properties, comments)."""
    (tmp_path / "meta.properties").write_text(
        "#\n#Tue Mar 05 10:00:00 UTC 2024\nnode.id=3\ndirectory.id=Xw8jVrM4QDeBKxQ3mj5ZSg\n"
        "version=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n")
    check_data_dir(tmp_path, "MkU3OEVBNTcwNTJENDM2Qk", 3)
    with pytest.raises(DataDirMismatchError):
        check_data_dir(tmp_path, "another", 3)
    (tmp_path / "meta.properties").write_text("version=7\ncluster.id=x\nnode.id=3\n")
    with pytest.raises(DataDirMismatchError, match="unsupported meta.properties version"):
        check_data_dir(tmp_path, "x", 3)
