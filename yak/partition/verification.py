"""KIP-890 part 1 on the leader: a transactional batch that would start a transaction in a
partition is appended only if the transaction coordinator says the partition is in the
producer's ongoing transaction, and nothing that ended that transaction happened between
the answer and the append (Kafka's `VerificationGuard`).

Why a guard and not just the answer: the coordinator's answer arrives after an await (the
coordinator may be another broker). Meanwhile the transaction may end: its marker is
written here, and a batch appended after it would open a transaction nobody will ever
close, holding the LSO (and every read_committed consumer) for good. So:

- before asking, the partition creates (or reuses) a guard for the producer;
- writing a marker for that producer, a new leader epoch, or the transaction starting
  here drops the partition's guard;
- the append checks, with no await between the check and the write, that the guard it
  was verified with is still the partition's: if not, INVALID_TXN_STATE.

Concurrent requests of one producer for the same partition share one guard and one
question to the coordinator (`pending`), so a pipelined producer pays one round trip.

`TxnVerification` is the produce path's side of it (Kafka's ReplicaManager's
`maybeStartTransactionVerification` with the `AddPartitionsToTxnManager`): it groups the
batches of one request that need verifying by producer, asks the coordinator once per
producer in a task of its own, and hands each batch its guard or the coordinator's
refusal. The guards themselves live in each `Partition`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from yak.errors import ErrorCode

if TYPE_CHECKING:
    from yak.partition.partition import Partition
    from yak.protocol.records import BatchHeader

__all__ = ["TxnVerification", "TxnVerifier", "VerificationGuard"]

log = logging.getLogger(__name__)

# (transactional id, producer id, producer epoch, partitions) -> each partition's Produce
# error code (0: in the ongoing transaction). Built by the composition root: it asks the
# local transaction coordinator, or the one on another broker (AddPartitionsToTxn v4
# verify_only), and maps the coordinator's answers to Produce's.
TxnVerifier = Callable[[str, int, int, Sequence[tuple[str, int]]], Awaitable[dict[tuple[str, int], int]]]


class VerificationGuard:
    """One producer's pending verification in one partition (identity is what counts)."""

    __slots__ = ("producer_id", "producer_epoch", "pending")

    def __init__(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        # The coordinator's answer being awaited (a Produce error code), shared by every
        # request that needs it; None when no question is in flight.
        self.pending: asyncio.Future[int] | None = None

    def __repr__(self) -> str:
        return f"VerificationGuard(pid={self.producer_id}, epoch={self.producer_epoch})"


class TxnVerification:
    """KIP-890 verification for the produce path: one question to the transaction
    coordinator per producer, shared by concurrent requests, answered into the guards."""

    def __init__(self) -> None:
        # Asks the transaction coordinator (here or on another broker) whether partitions
        # are in a producer's ongoing transaction; set by the composition. None: no
        # coordinator, transactional batches that would start a transaction are refused
        # (INVALID_TXN_STATE).
        self.verifier: TxnVerifier | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def verify(
        self, transactional_id: str, unverified: Sequence[tuple[int, Partition, BatchHeader]],
    ) -> tuple[dict[int, VerificationGuard], dict[int, int]]:
        """Verify each (entry index, partition, header), one question to the coordinator
        per producer for the partitions no concurrent request is asking about already.
        Returns the guards of the entries that passed, and the Produce error code of each
        entry refused."""
        asking: dict[tuple[int, int], list[tuple[tuple[str, int], VerificationGuard]]] = {}
        waits: list[tuple[int, VerificationGuard, asyncio.Future[int]]] = []
        loop = asyncio.get_running_loop()
        for i, p, h in unverified:
            guard = p.maybe_start_verification(h.producer_id, h.producer_epoch)
            if guard.pending is None or guard.pending.done():
                guard.pending = loop.create_future()
                asking.setdefault((h.producer_id, h.producer_epoch), []).append(
                    ((p.topic, p.index), guard))
            waits.append((i, guard, guard.pending))
        for (pid, epoch), asked in asking.items():
            # A task of its own: the answer is shared, so no request's cancellation (its
            # connection closing) may cancel it.
            task = loop.create_task(self._ask_coordinator(transactional_id, pid, epoch, asked))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        guards: dict[int, VerificationGuard] = {}
        refused: dict[int, int] = {}
        for i, guard, fut in waits:
            code = await asyncio.shield(fut)
            if code:
                refused[i] = code
            else:
                guards[i] = guard
        return guards, refused

    async def _ask_coordinator(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        asked: list[tuple[tuple[str, int], VerificationGuard]],
    ) -> None:
        """Ask the transaction coordinator about `asked` and answer each guard's future
        with a Produce error code; a failure to ask is NOT_ENOUGH_REPLICAS, retriable
        (Kafka's answer when verification cannot reach the coordinator)."""
        tps = [tp for tp, _ in asked]
        codes: dict[tuple[str, int], int] = {}
        try:
            if self.verifier is None:
                codes = {tp: int(ErrorCode.invalid_txn_state) for tp in tps}
            else:
                codes = await self.verifier(transactional_id, producer_id,
                                            producer_epoch, tps)
        except Exception:
            log.exception("KIP-890 verification of %s for %s failed", tps, transactional_id)
        finally:
            for tp, guard in asked:
                fut = guard.pending
                if fut is not None and not fut.done():
                    fut.set_result(int(codes.get(tp, ErrorCode.not_enough_replicas)))

    async def stop(self) -> None:
        """Cancel the questions in flight (the broker is stopping)."""
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
