"""`partitioner=load_aware`: where Yak's own producers put records without a key (issue 23).

Why: a keyless record may go to any partition, so it should go where it is acknowledged
soonest. Kafka's producer does this since KIP-794 (the "uniform sticky" partitioner with
adaptive partition switching): it sticks to one partition for a batch, then picks the next
one with a probability that falls with that partition's queue, and leaves out a partition
whose leader has not taken a batch for `partitioner.availability.timeout.ms`. Yak's
producers (the gateway's REST/WebSocket/gRPC produce path, `yak produce`, the Spark sink)
do the same, per leader broker rather than per partition (a slow broker makes all its
partitions slow), with two more inputs:

- the producer's own observations per leader: records in flight, an average of their
  acknowledgement latency (halving every `HALF_LIFE_S` without news, so a broker that was
  slow once is tried again within seconds), and how long records have waited with no
  acknowledgement at all (a paused broker shows here at once, before any latency can be
  measured);
- where the producer runs beside a broker (`yak serve`'s gateway), the load each broker
  publishes (`yak/cluster/broker_load.py`'s score, 0..1), through `loads()`.

A leader is stalled when its oldest unacknowledged record has waited longer than
`STALL_FACTOR` times its usual latency (at least `STALL_MIN_S`, at most
`availability_timeout_s`, KIP-794's `partitioner.availability.timeout.ms`): a broker that
usually answers in 5 ms and has said nothing for 100 ms is paused, not busy.

A leader's cost is (1 + records in flight) x its expected latency x (1 + 2 x published
score); a partition is drawn with probability proportional to 1/cost of its leader, among
leaders not stalled for longer than `availability_timeout_s` (all of them if every one
is). The draw is made once per `sticky_bytes` of records (KIP-794's `batch.size`), so
batches stay full, and at least every `sticky_s` (a few of the producers' `linger.ms`):
KIP-794 draws again with each new batch, and small records sent by a few waiting callers
(REST requests) would otherwise stay on a paused broker's partition through its pause,
since no new request would come to notice it. Keyed records never come here: their
partition is the key's.

Thread-safe: the gateway picks on its event loop and hears acknowledgements on the
producer's poll thread.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["LOAD_AWARE", "LoadAwarePartitioner"]

LOAD_AWARE = "load_aware"

HALF_LIFE_S = 1.0
# A latency guess before any acknowledgement (and a floor: a leader is never free).
FLOOR_S = 0.002
EWMA_WEIGHT = 0.2
LOADS_EVERY_S = 1.0
STALL_FACTOR = 8.0
STALL_MIN_S = 0.1


@dataclass
class _Leader:
    in_flight: int = 0
    latency_s: float = FLOOR_S
    updated: float = 0.0  # when latency_s was last measured
    waiting_since: float = 0.0  # oldest moment records have waited without any ack


class LoadAwarePartitioner:
    def __init__(self, loads: Callable[[], Mapping[int, float]] | None = None, *,
                 sticky_bytes: int = 16384, sticky_s: float = 0.01,
                 availability_timeout_s: float = 0.5,
                 rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.loads = loads
        self.sticky_bytes = sticky_bytes
        self.sticky_s = sticky_s
        self.availability_timeout_s = availability_timeout_s
        self.rng = rng or random.Random()
        self.clock = clock
        self._leaders: dict[int, _Leader] = {}
        # topic -> (partition, bytes left, drawn at)
        self._sticky: dict[str, tuple[int, int, float]] = {}
        self._published: Mapping[int, float] = {}
        self._published_at = -LOADS_EVERY_S
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ choosing

    def partition(self, topic: str, leaders: Mapping[int, int], size: int = 0) -> int:
        """The partition for the next keyless record of `size` bytes; `leaders`:
        partition -> its leader's node id (-1: none). Counts the record as in flight
        to that leader: call `acked` or `failed` when it is settled."""
        with self._lock:
            now = self.clock()
            current = self._sticky.get(topic)
            if (current is not None and current[1] > 0 and current[0] in leaders
                    and now - current[2] < self.sticky_s):
                p = current[0]
                leader = leaders[p]
                if not self._stalled(leader, now):
                    self._sticky[topic] = (p, current[1] - max(1, size), current[2])
                    self._sent(leader, now)
                    return p
            p = self._draw(leaders, now)
            self._sticky[topic] = (p, self.sticky_bytes - max(1, size), now)
            self._sent(leaders[p], now)
            return p

    def _draw(self, leaders: Mapping[int, int], now: float) -> int:
        parts = sorted(p for p, b in leaders.items() if b >= 0) or sorted(leaders)
        usable = [p for p in parts if not self._stalled(leaders[p], now)] or parts
        published = self._published_scores(now)
        weights = [1.0 / self._cost(leaders[p], now, published) for p in usable]
        return self.rng.choices(usable, weights)[0]

    def _cost(self, leader: int, now: float, published: Mapping[int, float]) -> float:
        st = self._leaders.get(leader)
        if st is None:
            return FLOOR_S * (1 + 2 * published.get(leader, 0.0))
        age = now - st.updated
        latency = FLOOR_S + (st.latency_s - FLOOR_S) * 0.5 ** (age / HALF_LIFE_S)
        if st.in_flight:
            latency = max(latency, now - st.waiting_since)
        return (1 + st.in_flight) * latency * (1 + 2 * published.get(leader, 0.0))

    def _stalled(self, leader: int, now: float) -> bool:
        st = self._leaders.get(leader)
        if st is None or st.in_flight <= 0:
            return False
        usual = FLOOR_S + (st.latency_s - FLOOR_S) * 0.5 ** ((now - st.updated) / HALF_LIFE_S)
        bound = min(self.availability_timeout_s, max(STALL_MIN_S, STALL_FACTOR * usual))
        return now - st.waiting_since > bound

    def _published_scores(self, now: float) -> Mapping[int, float]:
        if self.loads is not None and now - self._published_at >= LOADS_EVERY_S:
            self._published_at = now
            try:
                self._published = dict(self.loads())
            except Exception:  # a load source that failed: own observations only
                self._published = {}
        return self._published

    def _sent(self, leader: int, now: float) -> None:
        st = self._leaders.get(leader)
        if st is None:
            st = self._leaders[leader] = _Leader(updated=now)
        if not st.in_flight:
            st.waiting_since = now
        st.in_flight += 1

    # ------------------------------------------------------------------ hearing back

    def acked(self, leader: int, latency_s: float) -> None:
        """A record to `leader` was acknowledged `latency_s` after it was handed over."""
        with self._lock:
            st = self._leaders.get(leader)
            if st is None:
                return
            now = self.clock()
            st.in_flight = max(0, st.in_flight - 1)
            st.waiting_since = now
            decayed = FLOOR_S + (st.latency_s - FLOOR_S) * 0.5 ** (
                (now - st.updated) / HALF_LIFE_S)
            st.latency_s = max(FLOOR_S, decayed + EWMA_WEIGHT * (latency_s - decayed))
            st.updated = now

    def failed(self, leader: int) -> None:
        """A record to `leader` was not acknowledged (its error is the caller's)."""
        with self._lock:
            st = self._leaders.get(leader)
            if st is not None:
                st.in_flight = max(0, st.in_flight - 1)

    def snapshot(self) -> dict[int, dict[str, float]]:
        """Per leader: records in flight and the current latency estimate (for logs and
        tests)."""
        with self._lock:
            now = self.clock()
            return {b: {"in_flight": st.in_flight,
                        "cost_s": self._cost(b, now, self._published)}
                    for b, st in self._leaders.items()}
