"""yak.devcluster: the local-cluster developer harness, an edge over the cluster.

`local.py` runs etcd (1 or 3 members), `yak serve` brokers and, with `--tiered`, an S3 store
(`objectstore.py`: SeaweedFS's `weed`) as processes on one machine (`yak cluster
up|status|stop|purge|start-broker|add-broker`, the tests' cluster fixtures, the chaos tool,
the cluster benchmarks); `process.py` is one such process with its fault hooks;
`netproxy.py` is the TCP proxy whose links the tests and the chaos tool cut and heal. None
is part of a broker: nothing under `yak/cluster/` (or any lower layer) imports this
package; it imports only the standard library and httpx.
"""
