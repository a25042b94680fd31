"""The coordinator runtime: one shard per internal-topic partition, in Kafka's shape.

Kafka's `CoordinatorRuntime` hosts the group, share and transaction-state machines: each
partition of an internal topic that the broker leads is one shard (a `ShardContext`:
the state machine, the leader epoch it was loaded at, its state), loaded by replaying the
partition when the broker becomes its leader (`schedule_load`) and dropped when it stops
(`schedule_unload`); every change to a shard's state is a write operation
(`schedule_write_operation`) whose records go through the `PartitionWriter`. Yak's runtime
is that, on the broker's one event loop, so a shard needs no thread of its own: the
per-shard event queue is a chain of futures.

**The ordering invariant.** Write operations on one shard take effect in submission
order: their records are appended in that order and their `apply` (the state change)
and responses happen in that order. How: the operation runs and its batch is appended
in `schedule_write_operation` before its first await, so two submissions cannot swap
their appends; each write then waits (1) for its batch to be committed (the high
watermark passing it; acks=all) and (2) for the write submitted before it on the same
shard to have completed (the shard's `tail` future), and only then applies. Those are
the only awaits between a submission and its effect; (1) completes in offset order
because the high watermark only moves up, and (2) is the queue itself, so nothing
overtakes. A write whose shard was unloaded, or loaded again at another epoch, while
it waited is answered NOT_COORDINATOR and applies nothing (the new leader replays it).

**Fencing.** A shard is loaded at the partition's leader epoch; the writer refuses an
append unless this broker still leads the partition at that epoch, so a deposed
coordinator's late write never lands.

**Loading never stalls the broker.** A load replays the partition through the loader's
`replay_chunks` (a `ChunkedCoordinatorLoader`'s; a plain loader's replay is one step),
one chunk (about 256 KiB of the log) per step: the first step runs in
`schedule_load`, so a small partition is active when it returns; the rest run in a task
that yields to the event loop between chunks, so the broker serves other requests
meanwhile (Kafka loads on its own threads). The shard is LOADING until then, and every
request for it is answered COORDINATOR_LOAD_IN_PROGRESS. The step that reaches the log end
also makes the shard active, with no await in between, so a record appended to the
partition during the load (a transaction marker) is either replayed or finds the shard
active.

Timers: one `TimerQueue` on the runtime's clock (a `ManualClock` in tests), run by one
task; `shard_timer_key` namespaces a shard's timers, which unloading cancels.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Generator, Hashable
from typing import Generic, TypeVar

from yak.clock import Clock
from yak.coordinator.api import (
    ChunkedCoordinatorLoader,
    CoordinatorLoader,
    CoordinatorResult,
    PartitionWriter,
)
from yak.coordinator.timer import TimerQueue
from yak.errors import ErrorCode, KafkaError, error_for_code

__all__ = ["CoordinatorRuntime", "ShardContext", "ShardState"]

log = logging.getLogger(__name__)

S = TypeVar("S")
T = TypeVar("T")


class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    CLOSED = "closed"


class ShardContext(Generic[S]):
    """One partition's shard: its state machine, epoch and event queue."""

    __slots__ = ("partition", "epoch", "shard", "state", "tail", "loaded_end", "load_task")

    def __init__(self, partition: int, epoch: int, shard: S) -> None:
        self.partition = partition
        self.epoch = epoch
        self.shard = shard
        self.state = ShardState.LOADING
        # completion of the last write submitted (None: nothing in flight)
        self.tail: asyncio.Future[None] | None = None
        self.loaded_end = 0  # the log end offset the load replayed to
        # the rest of a load that did not finish in its first step (None: none running)
        self.load_task: asyncio.Task[None] | None = None


class CoordinatorRuntime(Generic[S]):
    """Shards of one internal topic. `builder(partition, epoch)` makes an empty shard;
    `on_loaded(ctx)` / `on_unloaded(ctx)` (Kafka's onLoaded / onUnloaded) let the
    coordinator act on a shard becoming active or going."""

    def __init__(
        self,
        writer: PartitionWriter,
        loader: CoordinatorLoader,
        builder: Callable[[int, int], S],
        clock: Clock,
        timers: TimerQueue | None = None,
        on_loaded: Callable[[ShardContext[S]], None] | None = None,
        on_unloaded: Callable[[ShardContext[S]], None] | None = None,
    ) -> None:
        self.writer = writer
        self.loader = loader
        self.builder = builder
        self.clock = clock
        self.timers = timers if timers is not None else TimerQueue(clock)
        self.on_loaded = on_loaded
        self.on_unloaded = on_unloaded
        self._contexts: dict[int, ShardContext[S]] = {}
        self._timer_task: asyncio.Task[None] | None = None
        self._loaded_event: asyncio.Event | None = None  # set (and replaced) on each load

    @property
    def topic(self) -> str:
        return self.writer.topic

    # ================================================================ lifecycle

    def start_timers(self) -> None:
        if self._timer_task is None:
            self._timer_task = asyncio.get_running_loop().create_task(
                self.timers.run_forever(), name=f"{self.topic}-timers")

    async def stop(self) -> None:
        """Stop the timers and forget every shard (shutdown: no `on_unloaded`, the
        coordinator answers its waiters itself)."""
        task, self._timer_task = self._timer_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        loads = [c.load_task for c in self._contexts.values() if c.load_task is not None]
        for ctx in self._contexts.values():
            ctx.state = ShardState.CLOSED
            self._cancel_load(ctx)
        self._contexts.clear()
        if loads:
            await asyncio.gather(*loads, return_exceptions=True)

    # ================================================================ shards

    def context(self, partition: int) -> ShardContext[S] | None:
        return self._contexts.get(partition)

    def active(self, partition: int) -> ShardContext[S] | None:
        ctx = self._contexts.get(partition)
        return ctx if ctx is not None and ctx.state is ShardState.ACTIVE else None

    def contexts(self) -> list[ShardContext[S]]:
        return list(self._contexts.values())

    def shard_error(self, partition: int) -> ErrorCode | None:
        """Why a request for `partition` cannot be served here now, else None."""
        ctx = self._contexts.get(partition)
        if ctx is None or ctx.state in (ShardState.CLOSED, ShardState.FAILED):
            return ErrorCode.not_coordinator
        if ctx.state is ShardState.LOADING:
            return ErrorCode.coordinator_load_in_progress
        return None

    def is_loading(self, partition: int) -> bool:
        ctx = self._contexts.get(partition)
        return ctx is not None and ctx.state is ShardState.LOADING

    def held_epoch(self, partition: int) -> int | None:
        ctx = self._contexts.get(partition)
        return None if ctx is None else ctx.epoch

    def schedule_load(self, partition: int, epoch: int) -> ShardContext[S] | None:
        """This broker leads `partition` at `epoch`: replay it into a new shard. A load
        at an epoch already held (or older) is ignored; the shard of an older epoch is
        unloaded first. Returns the shard if it is active when this returns; None if its
        load failed, or goes on in the background (the shard is LOADING until then:
        `wait_loaded`, `on_loaded`). A load that fails in its first step raises.

        The first chunk is replayed here; if the log holds more, the rest is replayed by
        a task that yields to the event loop between chunks (without a running loop,
        here: nothing else could run meanwhile)."""
        ctx = self._contexts.get(partition)
        if ctx is not None and ctx.epoch >= epoch and ctx.state is not ShardState.FAILED:
            return ctx if ctx.state is ShardState.ACTIVE else None
        if ctx is not None:
            self._close(ctx)
        ctx = ShardContext(partition, epoch, self.builder(partition, epoch))
        self._contexts[partition] = ctx
        steps = self._replay_steps(partition, ctx.shard)
        try:
            end = _step(steps)
        except Exception:
            self._load_failed(ctx)
            raise
        if end is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                ctx.load_task = loop.create_task(
                    self._load_rest(ctx, steps), name=f"{self.topic}-{partition}-load")
                return None
            try:
                while end is None:
                    end = _step(steps)
            except Exception:
                self._load_failed(ctx)
                raise
        return self._activate(ctx, end)

    def _replay_steps(self, partition: int, shard: S) -> Generator[None, None, int]:
        if isinstance(self.loader, ChunkedCoordinatorLoader):
            return self.loader.replay_chunks(partition, shard)  # type: ignore[arg-type]
        return _in_one_step(self.loader, partition, shard)

    async def _load_rest(self, ctx: ShardContext[S], steps: Generator[None, None, int]) -> None:
        """The rest of a load, one chunk per turn of the event loop."""
        try:
            while True:
                await asyncio.sleep(0)
                if self._contexts.get(ctx.partition) is not ctx:
                    return  # unloaded, or loaded again at another epoch, meanwhile
                end = _step(steps)
                if end is not None:
                    self._activate(ctx, end)
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            self._load_failed(ctx)
        finally:
            steps.close()
            ctx.load_task = None

    def _load_failed(self, ctx: ShardContext[S]) -> None:
        log.exception("loading %s-%d failed", self.topic, ctx.partition)
        if self._contexts.get(ctx.partition) is ctx:
            ctx.state = ShardState.FAILED

    def _activate(self, ctx: ShardContext[S], end: int) -> ShardContext[S] | None:
        """The replay reached the log end `end`: the shard serves from now on."""
        if self._contexts.get(ctx.partition) is not ctx:
            return None  # resigned (or re-elected) while reading
        ctx.loaded_end = end
        ctx.state = ShardState.ACTIVE
        log.debug("loaded %s-%d at epoch %d", self.topic, ctx.partition, ctx.epoch)
        if self.on_loaded is not None:
            self.on_loaded(ctx)
        event, self._loaded_event = self._loaded_event, None
        if event is not None:
            event.set()
        return ctx

    @staticmethod
    def _cancel_load(ctx: ShardContext[S]) -> None:
        task, ctx.load_task = ctx.load_task, None
        if task is not None and not task.done():
            task.cancel()

    async def wait_loaded(self, partition: int, timeout_ms: int) -> bool:
        """Until the shard of `partition` is active here (True) or `timeout_ms` passed
        (False): a first write right after the topic's creation, whose leadership the
        partition layer applies a moment later."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while self.active(partition) is None:
            left = deadline - loop.time()
            if left <= 0:
                return False
            if self._loaded_event is None:
                self._loaded_event = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):  # not wait_for: 3.11's drops a cancel
                    await self._loaded_event.wait()
        return True

    def schedule_unload(self, partition: int, epoch: int | None = None) -> bool:
        """Another broker leads `partition` now: drop its shard. A resignation older than
        the epoch held (`epoch` below it) arrived out of order and is ignored."""
        ctx = self._contexts.get(partition)
        if ctx is None or (epoch is not None and ctx.epoch > epoch):
            return False
        self._close(ctx)
        return True

    def _close(self, ctx: ShardContext[S]) -> None:
        if self._contexts.get(ctx.partition) is ctx:
            del self._contexts[ctx.partition]
        was_active = ctx.state is ShardState.ACTIVE
        ctx.state = ShardState.CLOSED
        self._cancel_load(ctx)
        self.timers.cancel_shard(self.shard_timer_key(ctx.partition))
        if was_active and self.on_unloaded is not None:
            self.on_unloaded(ctx)

    def on_partition_change(self, partition: int, epoch: int | None, leads: bool) -> None:
        """The partition layer's leadership change (the cluster's publisher hook): load
        the shard when this broker leads `partition` at a new epoch, unload it when it
        does not lead it any more."""
        if leads and epoch is not None:
            if self.writer.leader_epoch(partition) != epoch:
                return  # a stale notice: the partition layer has moved on since
            ctx = self._contexts.get(partition)
            if ctx is not None and ctx.epoch == epoch and ctx.state is not ShardState.FAILED:
                return  # an ISR change: still the same term
            with contextlib.suppress(Exception):  # logged; the shard stays FAILED
                self.schedule_load(partition, epoch)
        else:
            self.schedule_unload(partition, epoch)

    def load_led_partitions(self) -> None:
        """Load every partition of the topic this broker leads and has no shard for (one
        broker: all of them, at start-up or right after the topic is created)."""
        if not self.writer.exists():
            return
        for partition in range(self.writer.num_partitions):
            epoch = self.writer.leader_epoch(partition)
            if epoch is not None:
                with contextlib.suppress(Exception):  # logged; the shard stays FAILED
                    self.schedule_load(partition, epoch)

    # ================================================================ operations

    async def schedule_write_operation(
        self, name: str, partition: int, op: Callable[[S], CoordinatorResult[T]],
    ) -> T:
        """Run `op` on the shard of `partition` now, append its records, and once they
        are committed and every earlier write on the shard has completed, apply it and
        return its response. Raises a KafkaError NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
        when the shard is not active here, the writer's KafkaError when the append fails,
        or whatever `op` raises (before anything is written)."""
        ctx = self._contexts.get(partition)
        if ctx is None or ctx.state is not ShardState.ACTIVE:
            raise self._not_active(partition, ctx)
        result = op(ctx.shard)
        prev = ctx.tail
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ctx.tail = done
        error: BaseException | None = None
        try:
            if result.records:
                try:
                    appended = self.writer.append(partition, ctx.epoch, result.records,
                                                  result.producer)
                except KafkaError as e:
                    error = e
                else:
                    if result.on_appended is not None:
                        result.on_appended()
                    try:
                        await self.writer.wait_committed(appended)
                    except KafkaError as e:
                        error = e
            if prev is not None and not prev.done():
                await asyncio.shield(prev)  # the shard's queue: earlier writes first
            if error is not None:
                raise error
            if self._contexts.get(partition) is not ctx or ctx.state is not ShardState.ACTIVE:
                raise error_for_code(ErrorCode.not_coordinator,
                                     f"{self.topic}-{partition} was unloaded during {name}")
            if result.apply is not None:
                return result.apply()
            return result.response  # type: ignore[return-value]
        finally:
            if prev is None or prev.done():
                done.set_result(None)
            else:  # cancelled while waiting: still complete after the one before
                prev.add_done_callback(lambda _f: done.set_result(None))
            if ctx.tail is done:
                ctx.tail = None

    def schedule_read_operation(self, partition: int, op: Callable[[S], T]) -> T:
        """Read the active shard's state (no await: what was applied so far)."""
        ctx = self._contexts.get(partition)
        if ctx is None or ctx.state is not ShardState.ACTIVE:
            raise self._not_active(partition, ctx)
        return op(ctx.shard)

    def _not_active(self, partition: int, ctx: ShardContext[S] | None) -> KafkaError:
        if ctx is not None and ctx.state is ShardState.LOADING:
            return error_for_code(ErrorCode.coordinator_load_in_progress,
                                  f"{self.topic}-{partition} is loading")
        return error_for_code(ErrorCode.not_coordinator,
                              f"{self.topic}-{partition} is not coordinated here")

    # ================================================================ timers

    def shard_timer_key(self, partition: int, *key: Hashable) -> tuple[Hashable, ...]:
        """A timer key belonging to the shard of `partition` (cancelled on unload)."""
        return ("shard", self.topic, partition, *key)

    def schedule_timer(self, partition: int, key: Hashable, delay_ms: int,
                       fn: Callable[[], None]) -> None:
        """Run `fn` in `delay_ms` unless the shard is unloaded first (Kafka's
        CoordinatorTimer.schedule); scheduling a key again replaces it."""
        self.timers.schedule(self.shard_timer_key(partition, key),
                             self.clock.now_ms() + delay_ms, fn)

    def cancel_timer(self, partition: int, key: Hashable) -> None:
        self.timers.cancel(self.shard_timer_key(partition, key))




def _step(steps: Generator[None, None, int]) -> int | None:
    """Replay the loader's next chunk: the log end offset once the replay reached it,
    else None (more to come)."""
    try:
        next(steps)
    except StopIteration as done:
        return int(done.value)
    return None


def _in_one_step(loader: CoordinatorLoader, partition: int,
                 shard: object) -> Generator[None, None, int]:
    """A plain loader's whole replay, as a single step."""
    return loader.load(partition, shard)  # type: ignore[arg-type]
    yield  # a generator, never reached
