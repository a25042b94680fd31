"""The leader's side of replication for one partition: what it knows of each follower,
the high watermark that follows from it, and when it asks for an ISR change (Kafka's
`Replica`/`ReplicaState` and the ISR part of `Partition`: `updateFollowerFetchState`,
`maybeIncrementLeaderHW`, `maybeExpandIsr`, `maybeShrinkIsr`, the pending AlterPartition).

Kafka's rules (issue 11):
- the leader learns each follower's log end offset from its fetches
  (`update_follower_fetch_state`, with the time it was last caught up with the leader);
- the high watermark is the smallest log end offset over the ISR, and it only moves while
  the ISR has at least `min.insync.replicas` members (KAFKA-15583);
- a follower that has everything below the high watermark and the current epoch's first
  offset is added to the ISR; one that has not caught up for `replica.lag.time.max.ms`
  (or, issue 27, stopped fetching for `replica.fetch.dead.ms`) is removed
  (`maybe_shrink_isr`, run periodically by the ReplicaManager's isr-expiration task).
  Changes are asked of the `AlterPartitionManager` (yak/partition/isr.py) against the
  partition epoch, one at a time; while one is in flight the high watermark counts the
  larger of the two ISRs (Kafka's "maximal ISR"), so it never passes a replica that may
  still be in the ISR;
- a flapping guard (issue 27) holds back the re-expansion of a follower shrunk out of the
  ISR too often.

`FollowerTracking` is a part of `Partition` (a class it extends, not a field): the fetch
and append paths move the high watermark on the partition's own attributes. It declares
what it reads of the partition.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from yak.partition.isr import IsrChange

if TYPE_CHECKING:
    import uuid

    from yak.clock import Clock
    from yak.partition.purgatory import FetchPurgatory, ProducePurgatory
    from yak.partition.state import PartitionState
    from yak.storage import PartitionLog

__all__ = [
    "FLAP_HOLD_MAX_MS",
    "FLAP_HOLD_MS",
    "FLAP_SHRINKS",
    "FLAP_WINDOW_MS",
    "ISR_RETRY_MS",
    "FollowerState",
    "FollowerTracking",
]

log = logging.getLogger(__name__)


class FollowerState:
    """What the leader knows of one follower (Kafka's `ReplicaState`), from its fetches."""

    __slots__ = ("log_end_offset", "log_start_offset", "last_caught_up_ms",
                 "last_fetch_leader_leo", "last_fetch_ms", "broker_epoch", "fetching",
                 "silent_since_ms")

    def __init__(self, last_caught_up_ms: int) -> None:
        self.log_end_offset = -1
        self.log_start_offset = -1
        self.last_caught_up_ms = last_caught_up_ms
        self.last_fetch_leader_leo = -1
        self.last_fetch_ms = 0  # 0: it has not fetched from this leader epoch yet
        self.broker_epoch = -1
        # Its fetches this leader is serving now (a long poll counts), and since when it
        # has had none (the leader answered its last one, or its connection closed).
        self.fetching = 0
        self.silent_since_ms = 0

    def is_caught_up(self, leader_leo: int, now_ms: int, max_lag_ms: int) -> bool:
        return self.log_end_offset == leader_leo or now_ms - self.last_caught_up_ms <= max_lag_ms

    def is_dead(self, now_ms: int, dead_ms: int) -> bool:
        """It fetched from this leader epoch, and has not fetched for `dead_ms` since the
        leader answered (or dropped) its last fetch: killed (its socket closed and the
        fetch ended at once) or frozen (its long poll was answered and nothing followed).
        A follower that never fetched is judged by lag alone (it may still be finding
        the new leader)."""
        return (dead_ms > 0 and self.fetching == 0 and self.last_fetch_ms > 0
                and now_ms - self.silent_since_ms > dead_ms)


# After a refused or failed ISR change, the same partition waits this long before asking
# again (the metadata usually brings the newer state meanwhile).
ISR_RETRY_MS = 500
# The flapping guard (issue 27): a follower shrunk out of the ISR FLAP_SHRINKS times within
# FLAP_WINDOW_MS is expanded again only once FLAP_HOLD_MS (times each shrink past the
# limit, at most FLAP_HOLD_MAX_MS) have passed since its last shrink, so a follower that
# stops and starts every second does not move the ISR every second.
FLAP_SHRINKS = 3
FLAP_WINDOW_MS = 60_000
FLAP_HOLD_MS = 5_000
FLAP_HOLD_MAX_MS = 30_000


class FollowerTracking:
    """The leader's view of its followers and its ISR changes (see the module's docstring)."""

    # The partition's, read here.
    topic: str
    index: int
    topic_id: uuid.UUID
    node_id: int
    log: PartitionLog
    state: PartitionState
    leader_epoch: int
    is_leader: bool
    replica_lag_time_max_ms: int
    replica_fetch_dead_ms: int
    _clock: Clock
    _fetch_purgatory: FetchPurgatory
    _produce_purgatory: ProducePurgatory
    _submit_isr: Callable[..., bool] | None
    _leader_epoch_start_offset: int
    _is_newer: Callable[[PartitionState], bool]
    # Set up by the partition (its __init__, make_leader, make_follower), kept here.
    _followers: dict[int, FollowerState]
    _pending_isr: IsrChange | None
    _maximal_isr: tuple[int, ...]
    _isr_retry_at_ms: int
    _shrunk_at: dict[int, list[int]]
    _held_logged: tuple[int, int] | None
    isr_shrinks: int
    isr_expands: int
    dead_follower_shrinks: int
    isr_expansions_held: int

    def maybe_increment_high_watermark(self, log_moved: bool = True) -> bool:
        """Move the high watermark to the smallest log end offset over the ISR (the maximal
        ISR while a change is in flight), if the ISR has `min.insync.replicas` members.

        It never moves back, and only a leader moves it. Returns True if it moved; then
        waiting acks=all produces and fetches are re-checked. `log_moved` False (a
        follower's fetch: the log itself did not change) wakes only the fetches bounded by
        the high watermark: a parked follower's fetch would find nothing new.
        """
        if not self.is_leader:
            return False
        log_ = self.log
        if len(self.state.isr) < log_.config.min_insync_replicas:
            return False
        new_hw = log_.log_end_offset
        followers = self._followers
        for replica in self._maximal_isr:
            if replica != self.node_id:
                f = followers.get(replica)
                leo = -1 if f is None else f.log_end_offset
                if leo < new_hw:
                    new_hw = leo
        if new_hw <= log_.high_watermark:
            return False
        log_.update_high_watermark(new_hw)
        self._produce_purgatory.check(self.topic, self.index, log_.high_watermark)
        if log_moved:
            self._fetch_purgatory.notify(self.topic, self.index)
        else:
            self._fetch_purgatory.notify_high_watermark(self.topic, self.index)
        return True

    def follower(self, replica_id: int) -> FollowerState | None:
        return self._followers.get(replica_id)

    def update_follower_fetch_state(
        self, replica_id: int, log_end_offset: int, now_ms: int | None = None,
        broker_epoch: int = -1, log_start_offset: int = -1,
    ) -> bool:
        """A follower fetched from `log_end_offset`: it has everything below it (Kafka's
        `updateFollowerFetchState`). Updates when it was last caught up, asks to add it to
        the ISR if it now qualifies, and moves the high watermark. Returns True if the
        high watermark moved. A replica not assigned to this partition is ignored.
        """
        if not self.is_leader:
            return False
        f = self._followers.get(replica_id)
        if f is None:
            return False
        now = self._clock.now_ms() if now_ms is None else now_ms
        leader_leo = self.log.log_end_offset
        leo = min(log_end_offset, leader_leo)
        # Kafka's ReplicaState.updateFetchState: caught up now if it has all the leader
        # has; caught up as of its previous fetch if it has what the leader had then.
        if leo >= leader_leo:
            f.last_caught_up_ms = max(f.last_caught_up_ms, now)
        elif leo >= f.last_fetch_leader_leo >= 0:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.last_fetch_leader_leo = leader_leo
        f.last_fetch_ms = now
        if broker_epoch >= 0:
            f.broker_epoch = broker_epoch
        if log_start_offset >= 0:
            f.log_start_offset = log_start_offset
        previous = f.log_end_offset
        f.log_end_offset = leo
        if replica_id not in self.state.isr:
            self._maybe_expand_isr(replica_id, f, now)
        if leo != previous:
            return self.maybe_increment_high_watermark(False)
        return False

    def follower_fetch_started(self, replica_id: int) -> None:
        """The leader is serving a fetch of `replica_id` (which fetched just now)."""
        f = self._followers.get(replica_id)
        if f is not None and self.is_leader:
            f.fetching += 1

    def follower_fetch_ended(self, replica_id: int, now_ms: int | None = None) -> None:
        """That fetch was answered, or dropped with its connection: from now on the
        follower is silent until it fetches again."""
        f = self._followers.get(replica_id)
        if f is not None and f.fetching > 0:
            f.fetching -= 1
            if f.fetching == 0:
                f.silent_since_ms = self._clock.now_ms() if now_ms is None else now_ms

    # ------------------------------------------------------------------ ISR changes

    def _maybe_expand_isr(self, replica_id: int, f: FollowerState, now: int) -> None:
        """Kafka's `isFollowerInSync`: it has everything below the high watermark and
        everything of earlier epochs this leader has; and the flapping guard does not
        hold it back."""
        if self._pending_isr is not None or now < self._isr_retry_at_ms:
            return
        if f.log_end_offset < self.log.high_watermark \
                or f.log_end_offset < self._leader_epoch_start_offset:
            return
        hold = self._flap_hold_ms(replica_id, now)
        if hold and now - self._shrunk_at[replica_id][-1] < hold:
            if self._held_logged != (replica_id, self._shrunk_at[replica_id][-1]):
                self._held_logged = (replica_id, self._shrunk_at[replica_id][-1])
                self.isr_expansions_held += 1
                log.warning("%s-%d: follower %d shrunk out of the ISR %d times in %d s:"
                            " it rejoins no sooner than %d ms after its last shrink",
                            self.topic, self.index, replica_id,
                            len(self._shrunk_at[replica_id]), FLAP_WINDOW_MS // 1000, hold)
            return
        isr = self.state.isr
        new_isr = tuple(r for r in self.state.replicas if r in isr or r == replica_id)
        self._request_isr_change(new_isr, maximal=tuple(dict.fromkeys(isr + (replica_id,))))

    def out_of_sync_replicas(self, now_ms: int | None = None) -> list[int]:
        """ISR members (other than this leader) that have not been caught up for
        `replica.lag.time.max.ms`."""
        if not self.is_leader:
            return []
        now = self._clock.now_ms() if now_ms is None else now_ms
        leo = self.log.log_end_offset
        lag = self.replica_lag_time_max_ms
        out = []
        for r in self.state.isr:
            if r == self.node_id:
                continue
            f = self._followers.get(r)
            if f is None or not f.is_caught_up(leo, now, lag) \
                    or f.is_dead(now, self.replica_fetch_dead_ms):
                out.append(r)
        return out

    def _flap_hold_ms(self, replica_id: int, now: int) -> int:
        """How long after its last shrink `replica_id` must wait to rejoin the ISR (0:
        not flapping)."""
        shrunk = self._shrunk_at.get(replica_id)
        if not shrunk:
            return 0
        recent = [t for t in shrunk if now - t <= FLAP_WINDOW_MS]
        self._shrunk_at[replica_id] = recent
        if len(recent) < FLAP_SHRINKS:
            return 0
        return min(FLAP_HOLD_MS * (len(recent) - FLAP_SHRINKS + 1), FLAP_HOLD_MAX_MS)

    def maybe_shrink_isr(self, now_ms: int | None = None) -> bool:
        """Drop the ISR members that fell behind (Kafka's `maybeShrinkIsr`, run every
        half `replica.lag.time.max.ms`). The high watermark keeps waiting for them until
        the store has accepted the smaller ISR. Returns True if a change was submitted."""
        now = self._clock.now_ms() if now_ms is None else now_ms
        if not self.is_leader or self._pending_isr is not None or now < self._isr_retry_at_ms:
            return False
        lagging = self.out_of_sync_replicas(now)
        if not lagging:
            return False
        new_isr = tuple(r for r in self.state.isr if r not in lagging)
        dead = [r for r in lagging if (f := self._followers.get(r)) is not None
                and f.is_dead(now, self.replica_fetch_dead_ms)]
        log.info("%s-%d: shrinking the ISR from %s to %s (%s)", self.topic, self.index,
                 list(self.state.isr), list(new_isr),
                 f"no fetch from {dead} for {self.replica_fetch_dead_ms} ms" if dead
                 else f"no catch-up for {self.replica_lag_time_max_ms} ms")
        return self._request_isr_change(new_isr, maximal=self.state.isr)

    def _request_isr_change(self, new_isr: tuple[int, ...], maximal: tuple[int, ...]) -> bool:
        if self._submit_isr is None:
            return False
        st = self.state
        change = IsrChange(
            self.topic, self.index, self.topic_id, self.node_id, st.leader_epoch,
            st.partition_epoch, new_isr,
            tuple((r, f.broker_epoch) for r in new_isr
                  if r != self.node_id and (f := self._followers.get(r)) is not None),
        )
        if not self._submit_isr(self, change):
            return False
        self._pending_isr = change
        self._maximal_isr = maximal
        return True

    def isr_change_done(self, change: IsrChange, state: PartitionState | None,
                        now_ms: int | None = None) -> None:
        """The store answered `change`: `state` is what it stored (None: refused or
        failed, try again after ISR_RETRY_MS). A newer decision that arrived meanwhile
        (leadership moved, a later epoch) wins over this answer."""
        if self._pending_isr is not change:
            return
        self._pending_isr = None
        if state is None or not self.is_leader or state.leader != self.node_id \
                or state.leader_epoch != self.leader_epoch or not self._is_newer(state):
            self._maximal_isr = self.state.isr
            self._isr_retry_at_ms = (self._clock.now_ms() if now_ms is None else now_ms) + ISR_RETRY_MS
            return
        before = set(self.state.isr)
        self.state = state
        self._maximal_isr = state.isr
        after = set(state.isr)
        if after - before:
            self.isr_expands += 1
            log.info("%s-%d: ISR expanded to %s", self.topic, self.index, list(state.isr))
        if before - after:
            self.isr_shrinks += 1
            now = self._clock.now_ms() if now_ms is None else now_ms
            for r in before - after:
                self._shrunk_at.setdefault(r, []).append(now)
                f = self._followers.get(r)
                if f is not None and f.is_dead(now, self.replica_fetch_dead_ms):
                    self.dead_follower_shrinks += 1
            log.info("%s-%d: ISR shrunk to %s", self.topic, self.index, list(state.isr))
        self.maybe_increment_high_watermark()
