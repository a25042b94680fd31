"""ISR maintenance on the broker (Kafka's ReplicaManager "isr-expiration" task and its
`AlterPartitionManager` submissions).

Each led `Partition` decides when its ISR should change (a follower caught up, or fell
behind for `replica.lag.time.max.ms`, or stopped fetching for `replica.fetch.dead.ms`:
`update_follower_fetch_state`, `maybe_shrink_isr`); this part runs the periodic check
over every led partition and sends each requested change to the `AlterPartitionManager`
(yak/partition/isr.py) in a task of its own, handing the answer back to the partition.
Nothing is sent while the broker is fenced or when there is no store (a ReplicaManager
built without one, as unit tests do: the ISR never changes). It also keeps the ISR
counters the metrics read.

`IsrMaintenance` is a part of `ReplicaManager` (a class it extends, like `FetchPath`): it
reads the ReplicaManager's partitions, clock, fencing and store, which the composition
sets after construction (`alter_partition`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from yak.errors import KafkaError

if TYPE_CHECKING:
    from yak.clock import Clock
    from yak.partition.isr import AlterPartitionManager, IsrChange
    from yak.partition.partition import Partition

__all__ = ["IsrMaintenance"]

log = logging.getLogger(__name__)


class IsrMaintenance:
    """The isr-expiration task and AlterPartition submissions (see the module's docstring)."""

    # The ReplicaManager's, read here.
    _partitions: dict[tuple[str, int], Partition]
    _fenced: bool
    clock: Clock
    alter_partition: AlterPartitionManager | None
    replica_lag_time_max_ms: int
    replica_fetch_dead_ms: int
    # Set up by the ReplicaManager, kept here: the submissions in flight, the counters
    # for metrics (`_retired_counts`: of partitions no longer hosted here).
    _isr_tasks: set[asyncio.Task[None]]
    isr_shrinks: int
    isr_expands: int
    _retired_counts: tuple[int, int]

    def isr_check_interval_s(self) -> float:
        """How often the ISR expiration task runs: every half `replica.lag.time.max.ms`
        (Kafka's), and every quarter `replica.fetch.dead.ms` so a dead follower leaves
        the ISR within about 1.25 times that bound; between 50 ms and a second."""
        interval = self.replica_lag_time_max_ms / 2000
        if self.replica_fetch_dead_ms > 0:
            interval = min(interval, self.replica_fetch_dead_ms / 4000)
        return min(max(interval, 0.05), 1.0)

    async def _isr_expiration_loop(self) -> None:
        """Kafka's "isr-expiration" task: each led partition drops the followers that have
        not caught up for `replica.lag.time.max.ms`, or (issue 27) that stopped fetching
        for `replica.fetch.dead.ms`."""
        while True:
            await asyncio.sleep(self.isr_check_interval_s())
            if self._fenced:
                continue
            now = self.clock.now_ms()
            for p in list(self._partitions.values()):
                if p.is_leader:
                    try:
                        p.maybe_shrink_isr(now)
                    except Exception:
                        log.exception("ISR check of %s-%d failed", p.topic, p.index)

    def _submit_isr(self, p: Partition, change: IsrChange) -> bool:
        """A partition asks for an ISR change: send it to the store in the background.
        Refused (False) while fenced or with no store: the ISR then stays as it is."""
        if self._fenced or self.alter_partition is None:
            return False
        task = asyncio.get_running_loop().create_task(self._alter_isr(p, change),
                                                      name=f"alter-isr-{p.topic}-{p.index}")
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)
        return True

    async def _alter_isr(self, p: Partition, change: IsrChange) -> None:
        assert self.alter_partition is not None
        before = set(p.state.isr)
        try:
            state = await self.alter_partition.submit(change)
        except asyncio.CancelledError:
            raise
        except KafkaError as e:
            log.info("%s-%d: ISR change to %s refused: %s", change.topic, change.partition,
                     list(change.new_isr), e)
            p.isr_change_done(change, None)
            return
        except Exception as e:
            log.warning("%s-%d: ISR change to %s not made (%s); the ISR stays %s",
                        change.topic, change.partition, list(change.new_isr), e,
                        list(p.state.isr))
            p.isr_change_done(change, None)
            return
        p.isr_change_done(change, state)
        after = set(p.state.isr)
        if after - before:
            self.isr_expands += 1
        if before - after:
            self.isr_shrinks += 1

    # ------------------------------------------------------------------ metrics

    @property
    def dead_follower_shrinks(self) -> int:
        """ISR shrinks of followers that had stopped fetching (issue 27), ever."""
        return self._retired_counts[0] + sum(
            p.dead_follower_shrinks for p in self._partitions.values())

    @property
    def isr_expansions_held(self) -> int:
        """Expansions the flapping guard held back (issue 27), ever."""
        return self._retired_counts[1] + sum(
            p.isr_expansions_held for p in self._partitions.values())

    def under_replicated_partitions(self) -> int:
        """Partitions led here with fewer in-sync replicas than replicas (Kafka's URP)."""
        return sum(1 for p in self._partitions.values() if p.is_under_replicated)
