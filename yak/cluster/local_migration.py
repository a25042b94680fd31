"""A single broker's data directory from before the one metadata path, moved into `LocalKV`.

Until issue 22 a single broker kept its metadata in `<data dir>/__yak_metadata.json`
(topics with ids, configs and partition states, the cluster id, the next producer id;
version 1 files had no partition states) and its ACLs, SCRAM credentials and client quotas
in `__acls.json`, `__scram_credentials.json` and `__client_quotas.json`. Now a single
broker is a one-node cluster whose metadata is the etcd layout (`layout.py`) in its local
KV store, and those three stores are documents of it, in the same format as the files.

On the first start of such a data directory, `migrate` writes all of it into the empty
store in one revision (`LocalKV.load_initial`: one atomic file write, so a crash leaves
either nothing, and the migration runs again, or everything). The cluster id is kept, so
`meta.properties` and clients see the same cluster. Every replica, ISR and leader becomes
this broker (a single broker hosted everything, under whatever `node.id` it had: Kafka's
controller moves leadership the same way when a broker takes over a data directory); the
epochs are kept, and the controller bumps them when it elects this broker under its new
registration. The old files are left in place, unused, so a downgrade still finds them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from yak.cluster.layout import ClusterKeys
from yak.cluster.local_kv import LocalKV
from yak.cluster.records import (
    ConfigRecord,
    PartitionRecord,
    ProducerIdsRecord,
    TopicRecord,
    encode,
)
from yak.partition.state import LEADER_RECOVERED

__all__ = ["OLD_METADATA_FILE", "SECURITY_DOCUMENTS", "migrate"]

log = logging.getLogger(__name__)

OLD_METADATA_FILE = "__yak_metadata.json"
TOPIC_RESOURCE = 2  # Kafka's ConfigResource.Type.TOPIC
# document name (yak/security/cluster_stores.py) -> the single broker's file of old
SECURITY_DOCUMENTS = {
    "acls": "__acls.json",
    "scram": "__scram_credentials.json",
    "quotas": "__client_quotas.json",
}


def migrate(kv: LocalKV, keys: ClusterKeys, data_dir: Path, node_id: int) -> bool:
    """Fill the empty store from the data dir's old files; False when there were none or
    the store already holds metadata. Synchronous: run it in a worker thread."""
    if not kv.is_empty():
        return False
    old = data_dir / OLD_METADATA_FILE
    docs = {name: data_dir / f for name, f in SECURITY_DOCUMENTS.items()
            if (data_dir / f).is_file()}
    if not old.is_file() and not docs:
        return False
    items: dict[str, bytes] = {}
    topics = 0
    if old.is_file():
        try:
            doc = json.loads(old.read_text("utf-8"))
        except ValueError as e:
            raise ValueError(f"{old}: cannot migrate, not JSON ({e})") from None
        items[keys.cluster_id] = str(doc["cluster_id"]).encode()
        me = (node_id,)
        for t in doc.get("topics", []):
            name, topic_id = str(t["name"]), str(t["topic_id"])
            count = int(t["partitions"])
            states = t.get("partitionStates") or [{}] * count  # version 1: none recorded
            items[keys.topic(name)] = encode(TopicRecord(name, topic_id))
            for p in range(count):
                s = states[p] if p < len(states) else {}
                items[keys.partition(topic_id, p)] = encode(PartitionRecord(
                    topic_id=topic_id, partition_id=p, replicas=me, isr=me, leader=node_id,
                    leader_epoch=int(s.get("leaderEpoch", 0)),
                    partition_epoch=int(s.get("partitionEpoch", 0)),
                    leader_recovery_state=int(s.get("leaderRecoveryState", LEADER_RECOVERED)),
                    directories=("",)))
            configs = {str(k): str(v) for k, v in (t.get("configs") or {}).items()}
            if configs:
                items[keys.config(TOPIC_RESOURCE, name)] = encode(
                    ConfigRecord(TOPIC_RESOURCE, name, configs))
            topics += 1
        # Version 1 kept the end of the last reserved block under another name.
        next_pid = int(doc.get("nextProducerId", doc.get("producer_id_block_end", 0)))
        if next_pid:
            items[keys.producer_ids] = encode(ProducerIdsRecord(node_id, -1, next_pid))
    for name, path in docs.items():
        items[keys.document(name)] = path.read_bytes()
    kv.load_initial(items)
    log.info("migrated %s: %d topic(s), %s into %s", data_dir, topics,
             ", ".join(sorted(docs)) or "no security stores", kv.path.name)
    return True
