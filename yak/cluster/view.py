"""The brokers of the cluster as handlers describe them (Metadata, DescribeCluster,
FindCoordinator, DescribeTopicPartitions): who is registered, where each listens, who is
the controller.

`ClusterView` is the interface; `yak.cluster.node.ClusterNode` serves it from the metadata
image, on every broker (a single broker is a one-node cluster on the local KV backend).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ClusterView", "NodeInfo"]


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
