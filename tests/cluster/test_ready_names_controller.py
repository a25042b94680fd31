"""A fresh single broker says it is ready only once its Metadata names a controller.

Why: librdkafka's AdminClient sends CreateTopics to the controller that Metadata names.
A Metadata answered with controller -1 makes it refresh once and then wait for a broker
state change that never comes on an idle one-broker cluster, so the CreateTopics is never
sent and `result(30)` times out with the connection up (the "CreateTopics unanswered for
30 s" of docs/testing.md's repeat runs). The broker printed its ready line before its
controller election had written the controller key, so a client that connected at once
could read controller -1. Now the ready line waits (bounded) for the key.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import READY, REPO, _command, free_port

ROUNDS = 3  # fresh brokers: each is one chance for the old order to show


def _start(data_dir: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """`yak serve` with its stdout on a pipe: the ready line is seen the moment it is
    written (the shared fixture polls a file every 50 ms, which would hide the order)."""
    port = free_port()
    log_path = data_dir.parent / f"{data_dir.name}-broker.log"
    cmd = _command() + ["--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}",
                        "--http", "none"]
    with open(log_path, "ab") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=REPO,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return proc, f"127.0.0.1:{port}", log_path


def test_a_fresh_broker_is_ready_only_once_it_is_the_controller(tmp_path: Path) -> None:
    for i in range(ROUNDS):
        data_dir = tmp_path / f"data-{i}"
        data_dir.mkdir()
        proc, bootstrap, log_path = _start(data_dir)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().decode(errors="replace")  # blocks until written
            assert READY in line, f"broker {i} did not start: {line!r}"
            # The election logs this line before its key reaches the image that the wait
            # reads, so it is in the log before the ready line, or the order is wrong.
            assert "is the controller" in log_path.read_text(errors="replace"), (
                f"broker {i}: ready before it was the controller")
            a = AdminClient({"bootstrap.servers": bootstrap})
            assert a.list_topics(timeout=10).controller_id == 1
            topic = f"ready-controller-{i}"
            a.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            assert topic in a.list_topics(timeout=10).topics
            del a
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
