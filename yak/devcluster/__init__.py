"""yak.devcluster: the local-cluster developer harness, an edge over the cluster.

`local.py` runs etcd (1 or 3 members) and `yak serve` brokers as processes on one machine
(`yak cluster up|status|stop|purge`, the tests' cluster fixtures, the chaos tool, the
cluster benchmarks); `netproxy.py` is the TCP proxy whose links the tests and the chaos
tool cut and heal. Neither is part of a broker: nothing under `yak/cluster/` (or any lower
layer) imports this package; it imports only the standard library and httpx.
"""
