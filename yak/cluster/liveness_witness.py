"""The frozen verdict's local witness of life: did the suspect fetch from this broker lately?

The frozen verdict (liveness_pings.py) reads silence on one connection: ApiVersions pings
unanswered for `broker.liveness.unresponsive.ms`. Run G (docs/reliability/
long-run-2026-11-27-g/verdicts.md) found two verdicts of that kind, at 720.3 s and
1766.2 s, on a broker that kept replicating: it was in all 24 ISRs, no leader had shrunk it,
its followers went on fetching from their leaders, while its answers to the prober waited
2 s. A paused process (SIGSTOP) or a stalled event loop sends no fetch at all, so a fetch
from the suspect that *arrived* here within the bound is a second witness, on this broker
alone, that it is alive: the verdict is withheld (liveness.py's `_Second`).

Which time counts: the arrival of the fetch, as the leader's follower state records it
(`FollowerState.last_fetch_ms`, set on the first pass of a follower's fetch, before any
long poll; yak/partition/follower_state.py: a replica fetcher keeps one fetch in flight
per leader, so nothing queues before that pass on its connection, and a prober whose own
loop was late enough to delay it has its window voided anyway, liveness_pings.py), never
the time a parked fetch is answered. A
fetch parked in the purgatory says the follower was alive when it sent it, not since: a
follower frozen right after sending one keeps it parked for up to
`replica.fetch.wait.max.ms`, so only an arrival inside the bound is evidence of the bound.
A frozen suspect's last fetch arrived at most a ping interval or so after its last answer,
so the witness can delay a true verdict by that much (a few hundred ms), never prevent it.

What it cannot do: confirm a verdict (a follower's fetch silence says less, later: it is
parked up to 500 ms, and the prober leads partitions of the suspect only by chance,
liveness_quorum.py). A suspect that follows nothing led here has no witness, and the
verdict is judged as before. The kill verdict (refused connections) never asks it.

The cluster layer reads the partition layer only through `LeaderFetches`, which the
composition builds over the ReplicaManager and hands to `BrokerLiveness.last_fetch_ms`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from yak.partition.replica_manager import ReplicaManager

__all__ = ["LeaderFetches", "fetched_within"]


class LeaderFetches:
    """`last_fetch_ms(node_id)`: when a fetch from follower `node_id` last arrived at any
    partition this broker leads, in `time.monotonic()` milliseconds (the ReplicaManager's
    clock is converted to it, so a test's manual clock reads the same), or None when
    `node_id` follows nothing led here or has not fetched in the current leader epochs.

    Called only while a suspicion lasts (each 250 ms tick of it): one pass over the hosted
    partitions, nothing kept."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas

    def __call__(self, node_id: int) -> int | None:
        newest = 0
        for p in self.replicas.partitions():
            if not p.is_leader:
                continue
            f = p.follower(node_id)
            if f is not None and f.last_fetch_ms > newest:
                newest = f.last_fetch_ms
        if newest <= 0:  # 0: not fetched since this leader epoch began
            return None
        return newest + time.monotonic_ns() // 1_000_000 - self.replicas.clock.now_ms()


def fetched_within(last_fetch_ms: int | None, now_s: float, bound_s: float) -> str | None:
    """The witness's evidence line when the last fetch arrived within `bound_s` before
    `now_s` (both on `time.monotonic()`'s clock), else None: no fetch, or an older one,
    is no witness."""
    if last_fetch_ms is None:
        return None
    age_s = now_s - last_fetch_ms / 1000
    if age_s > bound_s:
        return None
    return (f"but it fetched from this broker (a partition led here) {max(0.0, age_s):.2f} s"
            f" ago, within the bound {bound_s:.2f} s: replicating, so alive; verdict withheld")
