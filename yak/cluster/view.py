"""The brokers of the cluster as handlers describe them (Metadata, DescribeCluster,
FindCoordinator, DescribeTopicPartitions): who is registered, where each listens, who is
the controller.

`ClusterView` is the interface; `LocalClusterView` is the single broker (its own
controller, the only node), and `yak.cluster.node.ClusterNode` serves the same reads from
the etcd metadata image in a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ClusterView", "LocalClusterView", "NodeInfo"]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A registered broker: id, rack, fenced, and (host, port) per listener name."""

    node_id: int
    rack: str | None
    fenced: bool
    endpoints: Mapping[str, tuple[str, int]]

    def endpoint(self, listener: str | None) -> tuple[str, int] | None:
        """The endpoint on `listener` (None: the first one), as clients on that listener
        must be told (Kafka never sends a client to another listener's port)."""
        if listener is None:
            return next(iter(self.endpoints.values()), None)
        return self.endpoints.get(listener)


class ClusterView(Protocol):
    def nodes(self) -> list[NodeInfo]: ...

    def node(self, node_id: int) -> NodeInfo | None: ...

    def controller_id(self) -> int:
        """The controller's node id, -1 while there is none."""
        ...


class LocalClusterView:
    """One broker: the only node and its own controller. `endpoints()` gives its
    advertised (host, port) per listener (bound ports are known only once it listens)."""

    def __init__(self, node_id: int, rack: str | None,
                 endpoints: Callable[[], Mapping[str, tuple[str, int]]]) -> None:
        self.node_id = node_id
        self.rack = rack
        self._endpoints = endpoints

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(self.node_id, self.rack, False, dict(self._endpoints()))]

    def node(self, node_id: int) -> NodeInfo | None:
        return self.nodes()[0] if node_id == self.node_id else None

    def controller_id(self) -> int:
        return self.node_id
