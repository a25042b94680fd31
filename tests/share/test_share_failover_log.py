"""A failed share-partition load is logged (rate limited per share partition) and
counted per error code (issue 24: a load that kept failing used to be silent)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from yak.errors import ErrorCode
from yak.share.load_failures import LoadFailures


def test_failed_loads_are_logged_once_per_interval_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.new_event_loop()

    def _done(result: tuple[ErrorCode, str]) -> asyncio.Future[tuple[ErrorCode, str]]:
        fut: asyncio.Future[tuple[ErrorCode, str]] = loop.create_future()
        fut.set_result(result)  # what a finished ShareManager._load task holds
        return fut

    lf = LoadFailures()
    key = ("g", "t", 0)
    with caplog.at_level(logging.INFO, logger="yak.share.manager"):
        for _ in range(3):
            lf.done(key, _done((ErrorCode.not_coordinator, "ReadShareGroupState")))
        lf.done(("g", "t", 1), _done((ErrorCode.fenced_leader_epoch, "first write")))
        lf.done(key, _done((ErrorCode.none, "")))
        lf.done(key, _done((ErrorCode.none, "")))  # loaded and quiet: nothing more
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "share partition g-t-0 not loaded: NOT_COORDINATOR (ReadShareGroupState); it "
        "hands out nothing until a later ShareFetch loads it",
        "share partition g-t-1 not loaded: FENCED_LEADER_EPOCH (first write); it hands "
        "out nothing until a later ShareFetch loads it",
        "share partition g-t-0 loaded after 2 more failed tries",
    ]
    assert caplog.records[0].levelno == logging.WARNING
    assert lf.by_error == {"not_coordinator": 3, "fenced_leader_epoch": 1}
    loop.close()
