"""KIP-392's replica selector: which replica a consumer in a given rack should read from.

Kafka's `RackAwareReplicaSelector` (`replica.selector.class`), in Yak's shapes. The leader
asks it for each partition a consumer fetches with a `rack_id` (Fetch v11+): it answers the
leader when the leader is in the consumer's rack; else the most caught-up of the in-sync
replicas in that rack that hold the fetch offset (largest log end offset, then the most
recently caught up); else the leader. The leader answers a choice other than itself as
`preferred_read_replica`, with no records, and the consumer fetches from there.

Why here: it needs the brokers' racks, which only the cluster image knows; the partition
layer's Fetch path (`yak/partition/fetch.py`, `ReadReplicaSelector`) hands it the
candidates it already tracks (each follower's log end offset and last caught-up time) and
is given the selector by the composition, so `partition/` imports nothing from here.

A replica whose broker is not registered now (dead, fenced) has no rack here and is never
chosen: a consumer is not sent to a broker that cannot answer it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from yak.settings import ConfigError

if TYPE_CHECKING:
    from yak.cluster.etcd_store import BrokerInfo

__all__ = ["RACK_AWARE_SELECTOR", "RackAwareReplicaSelector", "replica_selector"]

RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


class RackAwareReplicaSelector:
    """Kafka's rack-aware choice (see the module's docstring). `rack_of(node id)`: the rack
    of a registered broker, None when it has none or is not registered."""

    __slots__ = ("_rack_of",)

    def __init__(self, rack_of: Callable[[int], str | None]) -> None:
        self._rack_of = rack_of

    def select(self, client_rack: str, leader: int,
               candidates: Sequence[tuple[int, int, int]]) -> int:
        """The replica a consumer in `client_rack` should read from: `leader`, or one of
        `candidates`, each (node id, log end offset, ms since it was last caught up):
        the in-sync followers holding the fetch offset."""
        if not client_rack:
            return leader
        rack_of = self._rack_of
        if rack_of(leader) == client_rack:
            return leader
        best = leader
        best_key: tuple[int, int] | None = None
        for node, log_end, lag_ms in candidates:
            if rack_of(node) != client_rack:
                continue
            key = (log_end, -lag_ms)  # Kafka's ReplicaView.comparator
            if best_key is None or key > best_key:
                best, best_key = node, key
        return best


def replica_selector(class_name: str | None,
                     broker: Callable[[int], BrokerInfo | None]) -> RackAwareReplicaSelector | None:
    """The selector `replica.selector.class` names, over the image's registered brokers
    (`broker(node id)`; a fenced one, or one in controlled shutdown, has no rack here);
    None (unset): consumers read from leaders only, Kafka's default. Another name is a
    ConfigError (the settings table refuses it at load; this keeps a hand-built config
    honest)."""
    if not class_name:
        return None
    if class_name != RACK_AWARE_SELECTOR:
        raise ConfigError(f"invalid value {class_name!r} for replica.selector.class: expected"
                          f" {RACK_AWARE_SELECTOR}")

    def rack_of(node_id: int) -> str | None:
        b = broker(node_id)
        if b is None or b.fenced or b.in_controlled_shutdown:
            return None
        return b.rack

    return RackAwareReplicaSelector(rack_of)
