"""The pipeline's guard against a client call that never returns (librdkafka #5456/#5511:
`send_offsets_to_transaction` blocked far past its timeout in the 30-minute run): the call
runs in a daemon thread and is given up after a bound, so the pipeline can replace its
producer instead of stopping the workload."""

from __future__ import annotations

import threading
import time

import pytest

from yak.chaos.pipeline import _bounded, _Stuck


def test_a_call_that_returns_gives_its_result_or_its_error() -> None:
    assert _bounded(lambda: 42, 5, "fast") == 42

    def boom() -> None:
        raise ValueError("from the client")

    with pytest.raises(ValueError, match="from the client"):
        _bounded(boom, 5, "boom")


def test_a_call_that_never_returns_is_given_up_after_the_bound() -> None:
    release = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(_Stuck, match="send_offsets_to_transaction still blocked"):
        _bounded(release.wait, 0.2, "send_offsets_to_transaction")
    assert time.monotonic() - t0 < 2
    release.set()  # the abandoned daemon thread ends on its own
