"""The tiered disk guard (yak/tiered/guard.py, remote.log.manager.copy.lag.max.bytes) on a
real broker process whose `file://` store breaks after start-up (its directory replaced by
a plain file, so every upload and manifest commit fails): the segments not uploaded pile
up locally, and past the bound the broker logs one WARNING line and sets
yak_tiered_disk_guard_active, while produce (acks=all) and reads go on as usual (the guard
refuses nothing, see its docstring). Once the store is back, uploads catch up, the gauge
drops to 0 and one INFO line says so."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import YakBroker, free_port
from tests.tiered.test_broker_tiered import (
    consume_confluent,
    create_topic,
    local_segments,
    produce,
    wait_for,
)
from tests.tiered.test_tiered_metrics import file_store_settings, sample, scrape

BOUND = 1 << 20


def test_the_guard_reports_a_growing_copy_lag_and_clears(
        tmp_path: Path, broker_factory: Callable[..., YakBroker]) -> None:
    store = tmp_path / "store"
    store.mkdir()
    http = f"127.0.0.1:{free_port()}"
    b = broker_factory(http=http, **file_store_settings(store, **{
        "remote.log.manager.copy.lag.max.bytes": str(BOUND)}))
    create_topic(b, "guarded", **{"segment.bytes": str(256 << 10),
                                  "remote.storage.enable": "true",
                                  "local.retention.bytes": str(256 << 10)})
    produce(b, "guarded", 0, 1000)
    wait_for(lambda: sample(scrape(http), "kafka_server_brokertopicmetrics_"
                            "remotecopylagsegments", topic="guarded") == 0, 30, "uploads")
    assert sample(scrape(http), "yak_tiered_disk_guard_active") == 0

    moved = tmp_path / "store-away"
    store.rename(moved)
    store.write_text("not a directory: the store is broken")
    produce(b, "guarded", 1000, 3000)  # ~3 MB, acks=all: unaffected by the store
    wait_for(lambda: sample(scrape(http), "yak_tiered_disk_guard_active") == 1, 30,
             "the guard active")
    lag = sample(scrape(http), "yak_tiered_copy_lag_bytes")
    assert lag is not None and lag > BOUND
    local = sum(p.stat().st_size for p in local_segments(b, "guarded"))
    assert local > BOUND  # kept: nothing is deleted locally before it is uploaded
    warnings = [ln for ln in b.log().splitlines() if "tiered storage disk guard" in ln]
    assert len(warnings) == 1 and "WARNING" in warnings[0], warnings
    assert "remote.log.manager.copy.lag.max.bytes=1048576" in warnings[0]
    # Produce and local reads go on while the guard is active.
    produce(b, "guarded", 4000, 500)
    assert consume_confluent(b, "guarded", 4000, 500, timeout=30) == list(range(4000, 4500))
    assert sample(scrape(http), "kafka_server_brokertopicmetrics_remotecopyerrors_total",
                  ) > 0

    store.unlink()
    moved.rename(store)
    wait_for(lambda: sample(scrape(http), "yak_tiered_disk_guard_active") == 0, 60,
             "the guard cleared once uploads caught up")
    assert "copy lag back to" in b.log()
    assert consume_confluent(b, "guarded", 0, 4500) == list(range(4500))
    assert "Traceback" not in b.log()


def test_the_guard_warns_once_per_interval_and_says_when_it_clears(
        caplog: pytest.LogCaptureFixture) -> None:
    from yak.tiered.guard import DiskGuard

    now = [0.0]
    g = DiskGuard(100, clock=lambda: now[0], interval_s=60)
    caplog.set_level(logging.INFO, logger="yak.tiered.guard")
    g.check(100, None)  # at the bound: not over
    assert not g.active and caplog.records == []
    g.check(150, "store down")
    assert g.active and g.lag_bytes == 150
    now[0] = 30
    g.check(200, "store down")  # within the interval: no second line
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "150 bytes" in caplog.records[0].getMessage()
    assert "store down" in caplog.records[0].getMessage()
    now[0] = 61
    g.check(250, "store down")
    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING"]
    g.check(10, None)
    assert not g.active and [r.levelname for r in caplog.records][-1] == "INFO"
    off = DiskGuard(-1)
    off.check(10**15, "x")
    assert not off.active
