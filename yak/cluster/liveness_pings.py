"""Is a broker frozen? Cheap requests on the liveness probe's connection, and a guarded verdict.

A killed broker is found by its closed connection and refused port (liveness.py). A frozen
one (SIGSTOP, a long GC or swap stall, a frozen VM) keeps both: its kernel still completes
connections and keeps the idle one open, and its session lease lapses only after
`broker.session.timeout.ms` (9 s), because the lease's keeper is frozen with it. The
partitions it leads take no writes meanwhile (issue 27).

So the probe also asks: it sends ApiVersions (v0: 14 bytes, answered by the broker's event
loop without touching a partition, and allowed before SASL authentication) on its
connection, one at a time (another after half the bound unanswered), at most every
`interval` (250 ms), and `watch` returns a `FreezeJudge` whose verdict is "frozen" when the
broker has answered nothing for `broker.liveness.unresponsive.ms` (2000 ms by default) and
the verdict's second source agrees (liveness_quorum.py: a majority of the brokers must
stand behind it, so a prober that is itself cut off judges nobody). liveness.py then
fences it through the same checked revoke the kill verdict uses.

Why this shape, and not corroboration by the followers' fetch silence: the followers' fetch
to a leader is parked for up to `replica.fetch.wait.max.ms` (500 ms), so silence on it says
less, later, and would need every follower to report to the controller (a new request and
a second path to the revoke). The controller's own connection already exists, and one
request in flight costs the broker 4 tiny requests a second. Why not the lease's remaining
TTL as corroboration: etcd reports it in whole seconds and the keeper renews every 2 s, so
it could confirm a freeze only 3-4 s in, later than the bound.

The guards, because a wrong verdict costs a live broker its registration, every ISR and
its leaderships (it registers again and catches up: availability, never safety; see
below):

- the broker must have answered once on this connection before its silence counts, so a
  connection that cannot carry Kafka framing (an SSL or SASL_SSL listener is pinged only
  on a TLS connection, made with the broker's own inter-broker TLS settings: liveness.py)
  or a broker frozen before the probe connected is never judged here (its session is);
- the prober's own lateness voids the window: each tick measures how late this event loop
  woke (the probe's own lag). A tick later than a quarter of the bound means this loop may
  itself have left an answer unread, or the whole host is starved (on one loaded machine
  every process is), so the silence is counted again from that tick. A starved prober
  judges nothing;
- the verdict is about one registration: liveness.py revokes only while the registration
  is still the one probed (same create_revision, the broker epoch), never a broker in
  controlled shutdown, and a revoke of a lease already gone is no verdict.

Why a wrong verdict cannot cost safety: the revoke does exactly what the session's expiry
would (the registration goes; the controller moves leaderships to ISR members and shrinks
the ISRs through etcd's compare-and-set on each partition's record), as in KRaft, where the
controller fences a broker whose heartbeats stopped while it may still be running. A
broker that was merely slow goes on believing it is registered until its keeper's next
renewal finds the lease gone (at most `broker.heartbeat.interval.ms`), and meanwhile: its
controller writes compare on the controller key's create revision (gone), its ISR changes
compare on the partition epoch (moved on), and an acks=all write it leads is acknowledged
only when every member of its ISR has fetched it, and the new leader was one of them: so
whatever it acknowledges is on the new leader. Its local session deadline
(`LeaseKeeper.valid`), which otherwise stops it first, is not what keeps this safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["PINGABLE_PROTOCOLS", "TLS_PROTOCOLS", "Corroboration", "FreezeJudge",
           "PING_INTERVAL_S", "api_versions_request", "watch"]

PING_INTERVAL_S = 0.25  # at most this between two pings (less for a bound under 2 s)
PINGABLE_PROTOCOLS = frozenset({0, 2})  # Kafka's SecurityProtocol ids: PLAINTEXT, SASL_PLAINTEXT
TLS_PROTOCOLS = frozenset({1, 3})  # SSL, SASL_SSL: pinged only on a TLS connection
API_VERSIONS = 18
CLIENT_ID = b"yak-liveness"


def api_versions_request(correlation_id: int) -> bytes:
    """A framed ApiVersions v0 request (header v1: key, version, correlation id, client id;
    an empty body). Written out here: 14 + 12 bytes, no codec needed for so little."""
    body = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(CLIENT_ID)) + CLIENT_ID
    return struct.pack(">i", len(body)) + body


class FreezeJudge:
    """The verdict of one watch: frozen when the broker has answered nothing for `bound_s`
    while this prober was never late by more than `lag_limit_s` (a quarter of the bound).

    Pure (times are passed in), so the guard is tested without processes.
    """

    def __init__(self, bound_s: float, now: float) -> None:
        self.bound_s = bound_s
        self.lag_limit_s = bound_s / 4
        self.started = now
        self.heard_at: float | None = None  # the last answer (None: never answered)
        self.quiet_since = now  # the start of the window being judged
        self.voided = 0  # windows restarted because this prober was late
        self.max_lag_s = 0.0  # the largest lag of a tick in the current window
        self.pings = 0  # sent on this connection
        self.answers = 0
        self.judged_at = now  # when `frozen` last said so

    def heard(self, now: float) -> None:
        self.answers += 1
        self.heard_at = now
        self.quiet_since = now
        self.max_lag_s = 0.0

    def tick(self, lag_s: float, now: float) -> None:
        """One tick of the prober, `lag_s` after it was due."""
        if lag_s > self.lag_limit_s:
            self.voided += 1
            self.quiet_since = now  # this loop was late: judge the silence from here
            self.max_lag_s = 0.0
        else:
            self.max_lag_s = max(self.max_lag_s, lag_s)

    def frozen(self, now: float) -> bool:
        if self.heard_at is not None and now - self.quiet_since >= self.bound_s:
            self.judged_at = now
            return True
        return False

    def evidence(self, now: float) -> str:
        """One line for the verdict's log."""
        last = "never" if self.heard_at is None else f"{now - self.heard_at:.2f} s ago"
        return (f"answered no ApiVersions for {now - self.quiet_since:.2f} s (bound"
                f" {self.bound_s:.2f} s; last answer {last}; {self.answers} answers to"
                f" {self.pings} pings on this connection; this prober's loop at most"
                f" {self.max_lag_s * 1000:.0f} ms late in the window, limit"
                f" {self.lag_limit_s * 1000:.0f} ms; {self.voided} windows voided by its"
                f" own lateness)")


class Corroboration(Protocol):
    """The second source a silence needs before it is a verdict (liveness_quorum.py says
    which, and why): told of every answer, asked while the judge finds the broker silent,
    told when a suspicion it was asked about ended without a verdict (`answered`: the
    broker answered again; else the watch ended)."""

    evidence: str  # one line for the log: why `agrees` said what it said last

    def heard(self, now: float) -> None: ...

    async def agrees(self, judge: FreezeJudge, now: float) -> bool: ...

    async def withdraw(self, answered: bool) -> None: ...


async def _read_answers(reader: asyncio.StreamReader, judge: FreezeJudge,
                        clock: Callable[[], float], second: Corroboration | None) -> None:
    """Every answer (any frame) is a sign of life; returns when the connection ends."""
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while True:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)
            now = clock()
            judge.heard(now)
            if second is not None:
                second.heard(now)


async def watch(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, bound_s: float,
                *, clock: Callable[[], float] = time.monotonic,
                second: Corroboration | None = None) -> FreezeJudge | None:
    """Ping the broker on this connection until it closes (None) or the judge finds it
    frozen (the judge, for its evidence) and `second`, when given, agrees; while it does
    not, the pings and the judge go on (an answer ends the suspicion). The caller closes
    the writer."""
    now = clock()
    judge = FreezeJudge(bound_s, now)
    interval = min(PING_INTERVAL_S, bound_s / 8)
    answers = asyncio.get_running_loop().create_task(
        _read_answers(reader, judge, clock, second), name="liveness-answers")
    suspected = False  # `second` was asked, and no verdict came of it yet
    heard_at = judge.heard_at  # the last answer when it was asked
    sent_at = now  # the last ping
    try:
        due = now
        while True:
            now = clock()
            judge.tick(now - due, now)
            if judge.frozen(now):
                if second is None:
                    return judge
                heard_at = judge.heard_at
                suspected = True
                # Still silent once the second source has answered: the verdict.
                if await second.agrees(judge, now) and judge.heard_at == heard_at:
                    suspected = False
                    return judge
            elif suspected:  # an answer, or this prober was late: the window restarts
                suspected = False
                await second.withdraw(judge.heard_at != heard_at)  # type: ignore[union-attr]
            # One in flight at a time; but one unanswered for half the bound is followed
            # by another: a proxy or middlebox may have dropped it, and a prober that
            # judged nothing (a suspicion without a second source) must hear the broker
            # again once the network heals.
            answered = judge.heard_at is not None and judge.heard_at >= sent_at
            if answered or judge.pings == 0 or now - sent_at >= bound_s / 2:
                judge.pings += 1
                sent_at = now
                try:
                    writer.write(api_versions_request(judge.pings))
                except (OSError, RuntimeError):
                    return None  # closing: the caller's close path judges it
            due = clock() + interval
            done, _ = await asyncio.wait({answers}, timeout=interval)
            if done:
                return None  # the connection ended: the kill path's evidence
    finally:
        answers.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await answers
        if suspected and second is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(second.withdraw(False), 1.0)
