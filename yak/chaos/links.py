"""One TCP proxy per replication link (follower -> leader), without root.

To cut one follower off from one leader while clients and every other link keep working,
each direction of replication traffic needs its own path. Kafka brokers reach a leader on
the leader's endpoint *for their own inter-broker listener name*, so giving every broker its
own inter-broker listener name does it, with listener settings alone:

- broker j listens on PLAINTEXT (clients) and on `REPLICA_FROM_<i>` for every broker i
  (its own included), each on its own port;
- broker j advertises `REPLICA_FROM_<i>` at the address of the proxy for the link i -> j
  (its own at its real port), and uses `REPLICA_FROM_<j>` as its inter-broker listener;
- so broker i, following a partition led by j, resolves j's `REPLICA_FROM_<i>` endpoint:
  the proxy i -> j, which `cut()` and `heal()` act on (yak/devcluster/netproxy.py).

Clients bootstrap on PLAINTEXT and Metadata answers with PLAINTEXT endpoints (the listener
they asked on), so client traffic never crosses a link proxy. Used by the failover tests
(tests/cluster/test_failover.py) and available to `yak chaos` for loopback clusters.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Literal

from yak.devcluster.local import free_ports
from yak.devcluster.netproxy import ThreadedNetProxy

__all__ = ["ReplicationLinks", "listener_name"]


def listener_name(follower: int) -> str:
    """The inter-broker listener name of broker `follower`."""
    return f"REPLICA_FROM_{follower}"


class ReplicationLinks:
    """Ports and proxies for every directed replication link among `nodes`. Create it
    before the brokers start (their settings name the proxies' addresses); `close()` when
    done."""

    def __init__(self, nodes: Iterable[int], host: str = "127.0.0.1") -> None:
        self.nodes = sorted(nodes)
        self.host = host
        pairs = [(i, j) for j in self.nodes for i in self.nodes]
        links = [(i, j) for i, j in pairs if i != j]
        # Listener and proxy ports drawn together, so none is handed out twice.
        ports = free_ports(len(pairs) + len(links), host)
        # broker j's listener for follower i
        self.listener_port: dict[tuple[int, int], int] = dict(
            zip(pairs, ports[:len(pairs)], strict=True))
        self.proxies: dict[tuple[int, int], ThreadedNetProxy] = {}
        try:
            for (i, j), port in zip(links, ports[len(pairs):], strict=True):
                self.proxies[(i, j)] = ThreadedNetProxy((host, self.listener_port[(i, j)]),
                                                        listen=(host, port))
        except BaseException:
            self.close()
            raise

    def settings(self, node: int, client_port: int) -> dict[str, str]:
        """The listener settings of broker `node` (clients on `client_port`)."""
        h = self.host
        names = [listener_name(i) for i in self.nodes]
        listeners = [f"PLAINTEXT://{h}:{client_port}"] + [
            f"{listener_name(i)}://{h}:{self.listener_port[(i, node)]}" for i in self.nodes]
        advertised = [f"PLAINTEXT://{h}:{client_port}"]
        for i in self.nodes:
            port = (self.listener_port[(i, node)] if i == node
                    else self.proxies[(i, node)].port)
            advertised.append(f"{listener_name(i)}://{h}:{port}")
        return {
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": ",".join(
                ["PLAINTEXT:PLAINTEXT"] + [f"{n}:PLAINTEXT" for n in names]),
            "inter.broker.listener.name": listener_name(node),
        }

    def cut(self, follower: int, leader: int,
            mode: Literal["drop", "reset"] = "drop") -> None:
        """`follower` can no longer fetch from `leader` (every other link is untouched)."""
        self.proxies[(follower, leader)].cut(mode)

    def heal(self, follower: int | None = None, leader: int | None = None) -> None:
        """Heal one link, or every link when none is named."""
        for (i, j), proxy in self.proxies.items():
            if (follower is None or i == follower) and (leader is None or j == leader):
                proxy.heal()

    def close(self) -> None:
        for proxy in self.proxies.values():
            with contextlib.suppress(Exception):
                proxy.close()
        self.proxies.clear()
