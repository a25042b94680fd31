"""Tiered-storage metrics (yak/tiered/metrics.py) scraped from a real `yak serve --http`'s
/metrics, with a real `file://` store and unmodified confluent-kafka clients: after a
produce with small segments, RemoteCopyBytes reaches the bytes of the uploaded objects,
the copy lag goes to 0 and the remote log size is the manifest's; a read from offset 0
(below the local log start) raises RemoteFetchBytes and RemoteFetchRequests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from tests.conftest import YakBroker, free_port
from tests.tiered.test_broker_tiered import (
    consume_confluent,
    create_topic,
    local_segments,
    produce,
    wait_for,
)

BTM = "kafka_server_brokertopicmetrics_"


def scrape(http: str) -> str:
    return httpx.get(f"http://{http}/metrics", timeout=10).text


def sample(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def file_store_settings(store: Path, **more: str) -> dict[str, object]:
    return {"remote.log.storage.system.enable": "true", "remote.storage.uri": f"file://{store}",
            "remote.log.manager.task.interval.ms": "300",
            "remote.log.manager.task.retry.backoff.max.ms": "1000",
            "remote.fetch.max.wait.ms": "2000", **more}


def object_bytes(store: Path) -> int:
    """Bytes of the segment objects in the store (manifests are not copy bytes)."""
    return sum(p.stat().st_size for p in store.rglob("*")
               if p.is_file() and "manifest" not in p.parts)


def test_copy_lag_size_and_fetch_metrics(tmp_path: Path,
                                         broker_factory: Callable[..., YakBroker]) -> None:
    store = tmp_path / "store"
    store.mkdir()
    http = f"127.0.0.1:{free_port()}"
    b = broker_factory(http=http, **file_store_settings(store))
    before = scrape(http)
    assert sample(before, BTM + "remotecopybytes_total") == 0
    assert sample(before, "yak_tiered_disk_guard_active") == 0
    create_topic(b, "metered", **{"segment.bytes": str(256 << 10),
                                  "remote.storage.enable": "true",
                                  "local.retention.bytes": str(512 << 10)})
    n = 4000  # ~4 MB in ~16 segments
    produce(b, "metered", 0, n)

    def settled() -> bool:
        text = scrape(http)
        return (sample(text, BTM + "remotecopylagsegments", topic="metered") == 0
                and min(int(p.stem) for p in local_segments(b, "metered")) > 0)
    wait_for(settled, 60, "uploads done and the copy lag at 0")
    text = scrape(http)
    copied = sample(text, BTM + "remotecopybytes_total")
    assert copied == object_bytes(store)  # every uploaded byte, counted once
    assert sample(text, BTM + "remotecopylagbytes", topic="metered") == 0
    segs = sample(text, "yak_tiered_segments_copied_total")
    assert segs is not None and segs >= 12
    assert sample(text, BTM + "remotecopyrequests_total") == segs
    log_bytes = sum(p.stat().st_size for p in store.rglob("*.log"))
    assert sample(text, BTM + "remotelogsizebytes", topic="metered") == log_bytes
    assert 3 << 20 < log_bytes < copied
    assert sample(text, BTM + "remotecopyerrors_total") == 0
    assert sample(text, BTM + "remotefetchbytes_total") == 0

    assert consume_confluent(b, "metered", 0, n) == list(range(n))
    text = scrape(http)
    fetched = sample(text, BTM + "remotefetchbytes_total")
    local_start = min(int(p.stem) for p in local_segments(b, "metered"))
    # At least the records below the local start came from the store (~1 KB each).
    assert fetched is not None and fetched >= local_start * 1000
    requests = sample(text, BTM + "remotefetchrequests_total")
    assert requests is not None and requests >= 1
    assert sample(text, BTM + "remotefetcherrors_total") == 0
    assert "Traceback" not in b.log()
