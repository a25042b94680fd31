"""The cluster id in etcd, and the data dir's `meta.properties` checked against it.

Kafka writes `meta.properties` into every log dir (`cluster.id`, `node.id`, `version=1`,
`directory.id`) and refuses to start when a log dir belongs to another cluster or node:
mixing two clusters' logs in one replica set would serve one cluster's records as the
other's. Yak does the same, with the id kept at `/yak/<cluster>/cluster_id` in etcd and
created by whichever broker starts first.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

from yak.cluster.etcd import Compare, Op
from yak.cluster.kv import KVClient
from yak.cluster.layout import ClusterKeys

__all__ = [
    "META_PROPERTIES",
    "DataDirMismatchError",
    "check_data_dir",
    "ensure_cluster_id",
    "new_cluster_id",
    "read_meta_properties",
    "write_meta_properties",
]

META_PROPERTIES = "meta.properties"


class DataDirMismatchError(Exception):
    """The data dir belongs to another cluster or node; str(e) is the one-line reason."""


def new_cluster_id() -> str:
    """A Kafka-style id: a random UUID in URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


async def ensure_cluster_id(client: KVClient, keys: ClusterKeys,
                            proposed: str | None = None) -> str:
    """The cluster's id, creating it (as `proposed`, or a new one) if this is the first broker.
    Concurrent first brokers agree: only one create can succeed, the others read it."""
    candidate = proposed or new_cluster_id()
    r = await client.txn([Compare.create_revision(keys.cluster_id, "==", 0)],
                         [Op.put(keys.cluster_id, candidate)],
                         [Op.get(keys.cluster_id)])
    if r.succeeded:
        return candidate
    return r.responses[0].kvs[0].value.decode()


def read_meta_properties(data_dir: str | Path) -> dict[str, str] | None:
    """The file's properties, or None when the data dir has none (a fresh dir)."""
    path = Path(data_dir) / META_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            props[line] = ""
        else:
            props[line[:sep].strip()] = line[sep + 1:].strip()
    return props


def write_meta_properties(data_dir: str | Path, cluster_id: str, node_id: int) -> None:
    """Write Kafka's v1 file atomically (temp file, fsync, rename, fsync of the dir)."""
    d = Path(data_dir)
    d.mkdir(parents=True, exist_ok=True)
    body = (
        "#\n#Written by Yak\n"
        f"cluster.id={cluster_id}\n"
        f"directory.id={new_cluster_id()}\n"
        f"node.id={node_id}\n"
        "version=1\n"
    ).encode()
    tmp = d / (META_PROPERTIES + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, d / META_PROPERTIES)
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def check_data_dir(data_dir: str | Path, cluster_id: str, node_id: int) -> None:
    """Accept the data dir for (cluster_id, node_id), writing meta.properties if it has none.

    Raises DataDirMismatchError with one line when it belongs to another cluster or node.
    """
    path = Path(data_dir) / META_PROPERTIES
    props = read_meta_properties(data_dir)
    if props is None:
        write_meta_properties(data_dir, cluster_id, node_id)
        return
    version = props.get("version")
    if version not in ("0", "1"):
        raise DataDirMismatchError(f"{path}: unsupported meta.properties version {version!r}")
    stored_cluster = props.get("cluster.id")
    if stored_cluster is not None and stored_cluster != cluster_id:
        raise DataDirMismatchError(
            f"{path} belongs to cluster {stored_cluster}, but this cluster's id is"
            f" {cluster_id}: refusing to start (use another data dir, or the cluster it"
            " belongs to)")
    stored_node = props.get("node.id", props.get("broker.id"))
    if stored_node is not None and stored_node != str(node_id):
        raise DataDirMismatchError(
            f"{path} belongs to node.id {stored_node}, but this broker is node.id {node_id}:"
            " refusing to start")
    if stored_cluster is None:
        raise DataDirMismatchError(f"{path} has no cluster.id")
