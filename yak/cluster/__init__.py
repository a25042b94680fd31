"""yak.cluster: the cluster's metadata and who decides it.

Today: the `MetadataStore` interface and its local-file backend (`metadata.py`), the topic
manager that is a single broker's controller (`topics.py`) and producer id blocks
(`producer_ids.py`), all composed by `yak.broker.compose`. The etcd client, broker
membership and controller election for issue 11 live here too and are not composed into
the broker yet (see docs/cluster.md). The local-cluster harness and the TCP proxy are an
edge, `yak.devcluster`, which imports this package, never the reverse.
"""
