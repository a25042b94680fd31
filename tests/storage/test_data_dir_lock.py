"""One data directory, one owner: the `.lock` file LogManager holds while it runs.

In-process: a second LogManager on a held directory is refused, and the lock is given back
by shutdown, by crash (as by a dead process) and by a start-up that failed. Over the wire:
a second `yak serve` on a running broker's directory exits 1 with one line naming the
directory and the holder, without touching the first broker's data; after the first is
SIGKILLed a new broker opens the directory and serves what was acknowledged.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from tests.conftest import REPO, YakBroker, _command, free_port
from yak.protocol.records import Record, build_batch
from yak.storage import LogConfig, LogManager
from yak.storage.manager import LOCK_FILE, LogDirInUseError


def _open(path: str) -> LogManager:
    m = LogManager(path, LogConfig(), start_cleaner=False)
    m.startup()
    return m


def test_second_manager_is_refused_until_the_first_lets_go(tmp_path):
    path = str(tmp_path / "d")
    m1 = _open(path)
    m1.create("t", 0).append_as_leader(build_batch([Record(b"k", b"v")]), 0)
    with pytest.raises(LogDirInUseError, match=f"data directory {path} is in use") as e:
        _open(path)
    assert f"(pid {os.getpid()})" in str(e.value)
    assert m1.get("t", 0).log_end_offset == 1  # the refused manager touched nothing

    m1.shutdown()
    m2 = _open(path)  # a clean shutdown lets go
    assert m2.was_clean_shutdown and m2.get("t", 0).log_end_offset == 1
    m2.crash()
    m3 = _open(path)  # so does a crash (a dead process's descriptors close)
    assert not m3.was_clean_shutdown
    m3.shutdown()
    assert os.path.exists(os.path.join(path, LOCK_FILE))  # left in place, like Kafka's


def test_failed_startup_lets_go(tmp_path, monkeypatch):
    path = str(tmp_path / "d")
    m = _open(path)
    m.create("t", 0)  # a log for the next start-up to load
    m.shutdown()

    def broken(*a, **kw):
        raise OSError("injected: cannot load")

    monkeypatch.setattr("yak.storage.manager.PartitionLog", broken)
    with pytest.raises(OSError, match="injected"):
        _open(path)
    monkeypatch.undo()
    _open(path).shutdown()  # the failed start-up released the lock


def _consume(bootstrap: str, n: int, timeout: float = 20.0) -> list[bytes]:
    # A fresh group each time: the first broker is SIGKILLed right after a consumer's
    # close, and LeaveGroup is answered before the emptied group is written (as in Kafka),
    # so a reused group could come back with a stale member and hold the successor's
    # JoinGroup for a whole session timeout (45 s), longer than this read waits.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lock-check-{uuid.uuid4()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["locked"])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
    finally:
        c.close()
    return out


def _produce(bootstrap: str, value: bytes) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    errors: list[object] = []
    p.produce("locked", value, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(20) == 0
    assert errors == [None]


def test_second_yak_serve_on_a_used_data_dir_fails_with_one_line(broker: YakBroker):
    _produce(broker.bootstrap, b"before")
    cmd = _command() + ["--data-dir", str(broker.data_dir),
                        "--listen", f"127.0.0.1:{free_port()}", "--http", "none"]
    second = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert second.returncode == 1, second.stderr
    lines = [ln for ln in second.stderr.splitlines() if ln.startswith("yak:")]
    assert lines == [
        f"yak: cannot start storage: data directory {broker.data_dir} is in use by another "
        f"broker (pid {broker.pid}): cannot lock {broker.data_dir / LOCK_FILE}"
    ], second.stderr
    assert "Traceback" not in second.stderr
    assert "ready" not in second.stdout

    # The first broker never noticed: it still takes and serves writes.
    assert broker.is_alive()
    _produce(broker.bootstrap, b"after")
    assert _consume(broker.bootstrap, 2) == [b"before", b"after"]

    # A SIGKILLed holder's lock dies with it: the next broker opens the directory.
    broker.kill()
    successor = YakBroker(broker.data_dir, {}, port=free_port()).start()
    try:
        assert _consume(successor.bootstrap, 2) == [b"before", b"after"]
    finally:
        assert successor.stop() == 0
