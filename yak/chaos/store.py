"""The object store of a tiered chaos run (`yak chaos run --tiered`) and its faults.

The store is the local harness's SeaweedFS (yak/devcluster/objectstore.py, started by
`LocalCluster.start_store` as `yak cluster up --tiered` does), on the chaos cluster's
ports +20 .. +30. This module holds what the chaos tool adds on top of it:

- the brokers' tiered settings (`tiered_broker_settings`) and the queue topic's
  (`TIERED_TOPIC_CONFIG`): small segments that roll every few seconds and a local
  retention of two of them, so that within a run most of the data lives only in the
  store and the final reads from offset 0 read it back from there through the brokers;
- `DutyCycle`, the thread behind `store-slow`: SIGSTOP / SIGCONT of the store in a short
  cycle, so every request to it waits up to the stopped part of the cycle (no network
  namespace is needed, and it acts on the store alone, not on the brokers' other links);
- `remote_segments`, a count of the segment objects in the bucket, recorded on each store
  fault's start operation as evidence that data was really moving to the store;
- `kill_mid_round`: `store-crash-commit` watches the bucket for a partition whose newest
  manifest names uploads COPY_SEGMENT_STARTED (committed, not yet FINISHED) and kills its
  leader at once: a crash between upload and commit. The brokers' copy quota (COPY_RATE)
  spaces uploads out, which widens the window.

The faults themselves (`store-down`, `store-slow`, `store-crash-commit`) are started and
undone by the nemesis (yak/chaos/faults.py); docs/reliability.md says what each does.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from yak.devcluster.objectstore import BUCKET, STORE_ACCESS_KEY, STORE_SECRET_KEY

if TYPE_CHECKING:
    from yak.devcluster.process import ManagedProcess

__all__ = ["COPY_RATE", "DutyCycle", "TIERED_TOPIC_CONFIG", "kill_mid_round",
           "remote_segments", "tiered_broker_settings", "uploads_in_flight"]

TIERED_TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    # A queue partition takes ~1-3 KB/s in a default run: 16 KB segments, rolled at the
    # latest every 5 s, keep uploads going all run long; two segments stay local.
    "segment.bytes": str(16 << 10),
    "segment.ms": "5000",
    "local.retention.bytes": str(32 << 10),
}

COPY_RATE = 32 << 10
"""The brokers' copy quota (bytes/s): uploads of 16 KB segments start 0.5 s apart, above
the queue's rate in a default run (~1.1 MB in 180 s over every topic and partition,
measured), so data still leaves the brokers as fast as it comes."""

LEADERS_EVERY_S = 2.0
"""kill_mid_round: how often who leads the topic is read again (Metadata)."""

SLOW_STOPPED_S = 0.4
"""store-slow: how long the store is stopped in each cycle..."""
SLOW_RUNNING_S = 0.6
"""...and how long it runs between two stops."""

LIST_TIMEOUT_S = 3.0
"""The bound on the bucket listing of `remote_segments` (the store may be down)."""


def tiered_broker_settings(uri: str) -> dict[str, str]:
    """Every broker's tiered settings on the run's store: short rounds of the remote log
    manager and a short retry backoff, so faults of the store are met within seconds, and
    a short remote fetch wait so a tiered read while the store is down answers (empty,
    never wrong) before the clients time out."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.storage.uri": uri,
        "remote.storage.access.key.id": STORE_ACCESS_KEY,
        "remote.storage.secret.access.key": STORE_SECRET_KEY,
        "remote.log.manager.task.interval.ms": "500",
        "remote.log.manager.task.retry.backoff.max.ms": "2000",
        "remote.fetch.max.wait.ms": "2000",
        "remote.log.manager.copy.max.bytes.per.second": str(COPY_RATE),
    }


def _store(s3_port: int) -> Any:
    from obstore.store import S3Store

    return S3Store(BUCKET, endpoint=f"http://127.0.0.1:{s3_port}", region="us-east-1",
                    access_key_id=STORE_ACCESS_KEY, secret_access_key=STORE_SECRET_KEY,
                    virtual_hosted_style_request=False,
                    client_options={"allow_http": True, "timeout": f"{LIST_TIMEOUT_S:g}s"},
                    retry_config={"max_retries": 0,
                                  "retry_timeout": timedelta(seconds=LIST_TIMEOUT_S)})


def remote_segments(s3_port: int, topic: str) -> int | None:
    """How many segment objects (`.log`) of `topic` the bucket holds; None if the store
    does not answer within LIST_TIMEOUT_S."""
    import obstore

    store = _store(s3_port)
    try:
        return sum(1 for chunk in obstore.list(store) for meta in chunk
                   if meta["path"].startswith(f"{topic}-") and meta["path"].endswith(".log"))
    except Exception:
        return None


class DutyCycle(threading.Thread):
    """SIGSTOP the store for `stopped` seconds, SIGCONT it for `running`, until stop()
    (which leaves it running). Requests arriving during a stop wait for it to end; those
    longer than the brokers' timeouts fail and are retried."""

    def __init__(self, proc: ManagedProcess, stopped: float = SLOW_STOPPED_S,
                 running: float = SLOW_RUNNING_S) -> None:
        super().__init__(name="chaos-store-slow", daemon=True)
        self.proc = proc
        self.stopped = stopped
        self.running = running
        self.cycles = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                self.proc.pause()
                self._stop_event.wait(self.stopped)
                self.proc.resume()
                self.cycles += 1
                self._stop_event.wait(self.running)
        finally:
            with contextlib.suppress(Exception):
                self.proc.resume()

    def stop(self) -> int:
        """End the cycle with the store running; returns the cycles done."""
        self._stop_event.set()
        self.join(10)
        with contextlib.suppress(Exception):
            self.proc.resume()
        return self.cycles


def uploads_in_flight(s3_port: int, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (entries of its newest manifest left COPY_SEGMENT_STARTED, how many of
    them have their `.log` in the bucket already), for the partitions with any. Keys are
    `<topic>-<topic id>/<partition>/...` (the run's URI has no prefix)."""
    import obstore

    from yak.tiered import Manifest
    from yak.tiered.metadata import SegmentState

    store = _store(s3_port)
    keys = {m["path"] for chunk in obstore.list(store) for m in chunk
            if m["path"].startswith(f"{topic}-")}
    newest: dict[str, str] = {}  # partition dir -> its newest manifest's key
    for k in keys:
        parts = k.split("/")
        if len(parts) == 4 and parts[2] == "manifest":
            d = f"{parts[0]}/{parts[1]}"
            newest[d] = max(newest.get(d, k), k)
    out: dict[int, tuple[int, int]] = {}
    for d, key in newest.items():
        m = Manifest.from_bytes(bytes(obstore.get(store, key).bytes()))
        started = [seg for seg in m.segments
                   if seg.state is SegmentState.COPY_SEGMENT_STARTED]
        if started:
            out[m.partition] = (len(started),
                                sum(seg.object_key(d, "log") in keys for seg in started))
    return out


def kill_mid_round(s3_port: int, topic: str, leaders: Callable[[], dict[int, int]],
                   kill: Callable[[int], None], wait_s: float, stop: threading.Event,
                   ) -> tuple[int, dict[int, tuple[int, int]]] | None:
    """Watch the bucket until a partition's newest manifest names uploads STARTED, and
    kill (`kill(node)`) its leader at once: (the node, what was in flight), or None after
    `wait_s`. Who leads is re-read every LEADERS_EVERY_S, not before each kill, so the kill
    follows the sighting by milliseconds."""
    deadline = time.monotonic() + wait_s
    led: dict[int, int] = {}
    led_at = 0.0
    while time.monotonic() < deadline and not stop.is_set():
        with contextlib.suppress(Exception):
            if time.monotonic() - led_at > LEADERS_EVERY_S:
                led, led_at = leaders(), time.monotonic()
            seen = uploads_in_flight(s3_port, topic)
            for p in sorted(seen):
                if led.get(p, -1) >= 0:
                    kill(led[p])
                    return led[p], seen
        stop.wait(0.02)
    return None
