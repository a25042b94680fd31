"""Whose silence may a prober judge? The frozen verdict's second source (issue 27, run F).

A frozen broker and a cut-off network look the same on one connection: the pings go
unanswered. Run F (docs/reliability.md) showed the cost of judging one connection alone:
17 of 39 frozen verdicts fell during network partitions, and a controller cut off from the
others fenced the two healthy brokers, which then left every ISR. Only a prober that is
itself in touch with the rest of the cluster can tell "that broker is silent" from "I am
cut off". So, in Raft's spirit, a frozen verdict needs a MAJORITY of the registered
brokers (the judged one counted in the total, never on the judging side) to stand behind
it, each side of it shown by evidence from this very window:

- **A prober of several brokers** (the controller probes every other one) counts itself
  and every other probed broker that answered a ping within the last `recent_s` (half the
  bound). A prober that loses every peer at once, or a majority of them, judges none of
  them: from the inside that is what being cut off looks like, while a pause silences one
  broker. With 3 brokers: one of the two silent while the other answers is a verdict (2 of
  3); both silent at once is none (1 of 3). `peers_agree`.
- **A prober of one broker** (every other broker probes the controller) has nobody to
  compare with on its own connections, so it asks etcd, where every broker is: it records
  its suspicion (`liveness/suspects/<target>/<prober>`, the target's broker epoch, on a
  short lease of its own) and reads back every suspicion of that registration. The verdict
  needs suspicions from a majority of the registered brokers (`Suspicions`). A suspicion
  written and read back is this prober's evidence that it reaches etcd now; another
  broker's suspicion of the same epoch is the evidence that the silence is the target's:
  that broker, probing the same target over its own links, hears nothing either. A broker
  cut off alone suspects the controller alone, and judges nothing; a frozen controller is
  suspected by all the others. Suspicions are read linearizably after one's own is
  written, so of two probers that suspect at about the same time, the later one sees both.

Why not the replica fetchers' silence as the second source: a follower's fetch to a leader
is parked for up to `replica.fetch.wait.max.ms`, and the controller leads or follows
partitions only by chance, so it would confirm late, or never; etcd is always there, and
the revoke needs it anyway. Why a lease of its own (the bound, rounded up to whole seconds,
kept alive while the suspicion lasts) and not the prober's registration lease: a suspicion
that outlives its silence (the target answered, the delete was lost) must lapse by
itself within about a bound, or it could corroborate another prober's lone silence later.

What stays as before: a broker never answered on the probe's connection is never judged,
a late prober restarts its window (liveness_pings.py), and a wrong verdict costs only
availability (the revoke is the session's expiry, early; liveness_pings.py says why). A
cluster with fewer than 3 registered brokers gets no frozen verdict at all: no majority
can stand behind one (the session lease still fences). Suspicion keys are nobody's
metadata: the metadata image ignores them.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable

from yak.cluster.etcd import EtcdError
from yak.cluster.kv import KVClient
from yak.cluster.layout import ClusterKeys

__all__ = ["Hearing", "Suspicions", "majority", "peers_agree", "suspects_prefix"]

log = logging.getLogger(__name__)


def suspects_prefix(keys: ClusterKeys, target: int) -> str:
    """Where the suspicions of broker `target` are (docs/cluster.md, "The etcd layout")."""
    return f"{keys.root}liveness/suspects/{target}/"


def majority(members: int, cluster_size: int) -> bool:
    """More than half of `cluster_size` brokers."""
    return 2 * members > cluster_size


class Hearing:
    """When each probed broker last answered a ping, on this prober's monotonic clock."""

    def __init__(self) -> None:
        self._last: dict[int, float] = {}

    def heard(self, node: int, now: float) -> None:
        self._last[node] = now

    def forget(self, node: int) -> None:
        self._last.pop(node, None)

    def answering(self, now: float, recent_s: float, among: Iterable[int]) -> set[int]:
        """The brokers of `among` that answered within the last `recent_s`."""
        return {n for n in among
                if (t := self._last.get(n)) is not None and now - t <= recent_s}


def peers_agree(hearing: Hearing, target: int, probed: Iterable[int], cluster_size: int,
                now: float, recent_s: float) -> tuple[bool, str]:
    """The rule of a prober of several brokers: does a majority of `cluster_size` (this
    prober and the probed brokers besides `target` that answered within `recent_s`) stand
    behind a verdict on `target`? Also one line of evidence for the log."""
    others = set(probed) - {target}
    answering = hearing.answering(now, recent_s, others)
    ok = majority(1 + len(answering), cluster_size)
    return ok, (f"{len(answering)} of the {len(others)} other probed brokers answered within"
                f" {recent_s:.2f} s ({sorted(answering)}): {1 + len(answering)} of"
                f" {cluster_size} brokers {'agree' if ok else 'are no majority; not judged'}")


class Suspicions:
    """The suspicions this broker (`prober`) records in etcd, one per suspected target, and
    the count of every broker's suspicions of a target's registration."""

    def __init__(self, client: KVClient, keys: ClusterKeys, prober: int, ttl_s: float) -> None:
        self.client = client
        self.keys = keys
        self.prober = prober
        self.ttl_s = max(1, math.ceil(ttl_s))
        # target -> (lease, broker epoch suspected, last renewed)
        self._leases: dict[int, tuple[int, int, float]] = {}

    async def agree(self, target: int, epoch: int, registered: Iterable[int],
                    now: float) -> tuple[bool, str]:
        """Record (or keep alive) this prober's suspicion of `target` at broker `epoch`,
        then count the suspicions of that epoch by the `registered` brokers: a majority of
        them (the target counted in the total) is a verdict. False on any etcd error: a
        prober that cannot reach etcd judges nothing."""
        cluster = set(registered) | {self.prober, target}
        try:
            await self._record(target, epoch, now)
            got = await self.client.range(suspects_prefix(self.keys, target), prefix=True)
        except EtcdError as e:
            return False, f"etcd unreachable for the suspicion ({e}); not judged"
        agreeing = set()
        for kv in got.kvs:
            try:
                rec = json.loads(kv.value)
                node, their_epoch = int(rec["prober"]), int(rec["epoch"])
            except (ValueError, KeyError, TypeError):
                continue
            if their_epoch == epoch and node in cluster and node != target:
                agreeing.add(node)
        ok = majority(len(agreeing), len(cluster))
        return ok, (f"suspected in etcd by brokers {sorted(agreeing)}: {len(agreeing)} of"
                    f" {len(cluster)} brokers {'agree' if ok else 'are no majority; not judged'}")

    async def _record(self, target: int, epoch: int, now: float) -> None:
        held = self._leases.get(target)
        if held is not None and held[1] == epoch:
            if now - held[2] < self.ttl_s / 2:
                return
            if await self.client.lease_keepalive(held[0], timeout=1.0):
                self._leases[target] = (held[0], epoch, now)
                return
        elif held is not None:  # a suspicion of an older registration: replace it
            await self.withdraw(target)
        lease, _ttl = await self.client.lease_grant(self.ttl_s)
        self._leases[target] = (lease, epoch, now)
        value = json.dumps({"prober": self.prober, "epoch": epoch})
        await self.client.put(f"{suspects_prefix(self.keys, target)}{self.prober}", value,
                              lease=lease)

    async def withdraw(self, target: int) -> None:
        """The target answered again, or the probe ended: drop the suspicion (its lease
        lapses by itself should this fail)."""
        held = self._leases.pop(target, None)
        if held is None:
            return
        try:
            await self.client.lease_revoke(held[0])
        except EtcdError as e:
            log.info("liveness: could not withdraw the suspicion of broker %d: %s; it lapses"
                     " within %d s", target, e, self.ttl_s)
