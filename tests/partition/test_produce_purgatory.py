"""ProducePurgatory on its own: acks=all waiters complete exactly when the high watermark
reaches the offset each needs, in any order of registration, and a waiter given up on
(`forget`) or failed does not stay registered. The end-to-end parking is covered by
test_replica_manager.py and test_replication.py."""

from __future__ import annotations

import asyncio
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from yak.partition.purgatory import ProducePurgatory


def test_a_high_watermark_move_completes_exactly_the_waiters_it_satisfies() -> None:
    async def main() -> None:
        pg = ProducePurgatory()
        a = pg.watch("t", 0, 10)
        b = pg.watch("t", 0, 20)
        c = pg.watch("t", 0, 20)
        other = pg.watch("t", 1, 5)
        pg.check("t", 0, 9)
        assert not (a.done() or b.done() or c.done()) and pg.waiting() == 4
        pg.check("t", 0, 19)
        assert a.result() is True and not b.done() and not c.done()
        pg.check("t", 0, 25)
        assert b.result() is True and c.result() is True and not other.done()
        assert pg.waiting() == 1
        pg.fail("t", 1)
        assert other.result() is False and pg.waiting() == 0

    asyncio.run(main())


def test_forget_drops_a_waiter_given_up_on() -> None:
    async def main() -> None:
        pg = ProducePurgatory()
        a = pg.watch("t", 0, 10)
        b = pg.watch("t", 0, 11)
        a.cancel()  # the request timed out
        pg.forget("t", 0, a)
        assert pg.waiting() == 1 and len(pg._waiters[("t", 0)]) == 1
        pg.forget("t", 0, b)
        assert pg._waiters == {}
        pg.forget("t", 0, b)  # twice, or for a partition nobody waits on: nothing happens
        pg.check("t", 0, 100)
        assert not b.done()  # forgotten: no longer completed by the purgatory

    asyncio.run(main())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=40),
       st.lists(st.integers(0, 60), min_size=1, max_size=10), st.randoms())
def test_any_order_of_watches_and_moves(required: list[int], moves: list[int],
                                        rnd: random.Random) -> None:
    """Waiters registered in any order (not only the appends' offset order) complete
    exactly when some move reached their offset, done ones (timed out) are skipped."""

    async def main() -> None:
        pg = ProducePurgatory()
        futs = [pg.watch("t", 0, r) for r in required]
        cancelled = {i for i in range(len(futs)) if rnd.random() < 0.2}
        for i in cancelled:
            futs[i].cancel()
        hw = -1
        for m in moves:
            hw = max(hw, m)  # the high watermark never moves back
            pg.check("t", 0, hw)
            for i, (r, f) in enumerate(zip(required, futs, strict=True)):
                if i in cancelled:
                    assert f.cancelled()
                elif r <= hw:
                    assert f.done() and f.result() is True
                else:
                    assert not f.done()
        live = sum(1 for i, r in enumerate(required) if i not in cancelled and r > hw)
        assert pg.waiting() == live

    asyncio.run(main())
