from __future__ import annotations

import time

import pytest

from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager


def make_batch(n: int = 1, *, key: bytes | None = b"k", size: int = 10, ts: int | None = None,
               **kw) -> bytes:
    now = int(time.time() * 1000) if ts is None else ts
    recs = [Record(key, bytes([65 + i % 26]) * size, now) for i in range(n)]
    return build_batch(recs, **kw)


@pytest.fixture
def manager(tmp_path):
    mgrs: list[LogManager] = []

    def make(cfg: LogConfig | None = None, **kw) -> LogManager:
        m = LogManager(str(tmp_path / "data"), cfg or LogConfig(), start_cleaner=False, **kw)
        m.startup()
        mgrs.append(m)
        return m

    yield make
    for m in mgrs:
        if m.started:
            m.shutdown()
