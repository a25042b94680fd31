"""yak.cluster: the cluster's metadata and who decides it.

The metadata store over etcd or, on a single broker (a one-node cluster), the local KV
backend (`etcd_store.py`, `kv.py`, `local_kv.py`), the topic manager (`cluster_topics.py`),
membership, controller election and producer id blocks, composed by `yak.broker.compose`
(see docs/cluster.md). The local-cluster harness and the TCP proxy are an
edge, `yak.devcluster`, which imports this package, never the reverse.
"""
