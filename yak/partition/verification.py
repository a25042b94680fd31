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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

__all__ = ["TxnVerifier", "VerificationGuard"]

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
