"""Effects in arrival order: one connection's pipelined requests change state in the order
they arrived, whatever each awaits first.

Kafka handles one request of a connection at a time (the channel is muted until the
response is sent), so nothing a client pipelines can overtake anything else: a producer's
batches reach each partition in the order it sent them, and its sequence numbers check.
Yak works on a connection's Produce and Fetch requests at once for speed (see
`yak.broker.connection`), so it keeps the same guarantee with an `EffectTurn` per request:

- the connection gives every pipelined request a turn, chained to the turn of the request
  before it, and releases it when the request ends however it ends (so a failed request
  never blocks the ones behind it);
- a request may await anything before its effects (KIP-890 verification with a remote
  transaction coordinator, quota muting, a lookup), then `await turn.wait()`, which returns
  once every earlier request of the connection has released its turn; then it changes
  state with no await in between, and releases its turn (`release()`); what it waits for
  afterwards (acks=all, a long poll) no longer holds anyone back.

Requests that are not pipelined are barriers in the connection loop (they start after
every earlier request has answered and nothing starts before they have), so they carry no
turn. The rule is enforced where the effects happen: `ReplicaManager.handle_produce_append`
(appends) and `ReplicaManager.fetch_messages` (reads, and a follower's fetch state).

`wait()` costs nothing when the request before has already released its turn, which is
the common case: it only suspends behind a request that is itself suspended before its
effects.
"""

from __future__ import annotations

import asyncio

__all__ = ["EffectTurn"]


class EffectTurn:
    """One pipelined request's place in its connection's order of effects."""

    __slots__ = ("_prev", "_next", "_released", "_done", "_waiter")

    def __init__(self, prev: EffectTurn | None = None) -> None:
        # The turn before this one while it is not done; None once it is (or if none).
        self._prev = prev if prev is not None and not prev._done else None
        self._next: EffectTurn | None = None
        self._released = False  # this request's effects are over (or it ended)
        self._done = False  # this one and every earlier one released
        self._waiter: asyncio.Future[None] | None = None
        if self._prev is not None:
            self._prev._next = self

    @property
    def ready(self) -> bool:
        """Every earlier request of the connection has released its turn."""
        return self._prev is None

    @property
    def done(self) -> bool:
        """This request and every earlier one have released their turns."""
        return self._done

    async def wait(self) -> None:
        """Return once every earlier request has released its turn (at once if so)."""
        if self._prev is None:
            return
        waiter = self._waiter
        if waiter is None:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
        # Shielded: a cancelled request (its connection closed) must not cancel the
        # future its successor's cascade sets; the cancellation still reaches the caller.
        await asyncio.shield(waiter)

    def release(self) -> None:
        """This request's effects are over; idempotent. The turns after it become ready
        once every turn before it is released too."""
        if self._released:
            return
        self._released = True
        turn: EffectTurn | None = self
        while turn is not None and turn._released and turn._prev is None:
            turn._done = True
            nxt = turn._next
            turn._next = None
            if nxt is None:
                return
            nxt._prev = None
            waiter = nxt._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            turn = nxt
