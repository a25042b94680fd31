"""`yak cluster up|status|stop|purge` as a user runs it: real etcd and broker processes in the
background, every port within --base-port .. +19, a cluster that serves real clients."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import REPO

YAK = [sys.executable, "-c", "from yak.cli.main import app; app()"]


def _yak(*args: str, timeout: float = 120, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*YAK, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=dict(os.environ, **(env or {})))


def _free_block(span: int = 20) -> int:
    """A base port with `span` free ports after it (checked by binding each)."""
    for _ in range(200):
        base = random.randrange(20000, 60000 - span)
        socks = []
        try:
            for p in range(base, base + span):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no block of free ports")


def _listening_ports(pids: list[int]) -> set[int]:
    """TCP ports the given processes listen on (from /proc/net/tcp and their fds)."""
    inodes: set[str] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def _brokers_listed(admin: AdminClient, want: dict[int, int]) -> dict[int, int]:
    """node id -> port as Metadata lists them, asked until they are `want` (10 s).

    `cluster up` returns once every broker listed all of them. A broker the liveness probe
    fences a moment later (CI failed once with broker 3 missing, 2026-11-27, no logs kept)
    registers again with a new epoch; a broker that never comes back fails the test."""
    deadline = time.monotonic() + 10
    first = None
    while True:
        seen = {b.id: b.port for b in admin.list_topics(timeout=10).brokers.values()}
        first = seen if first is None else first
        if seen == want or time.monotonic() > deadline:
            if first != want:  # shown in the run's warnings summary: worth a look
                warnings.warn(f"Metadata first listed {first}, then {seen}", stacklevel=2)
            return seen
        time.sleep(0.2)


def _session_events(d: Path) -> list[str]:
    """The brokers' log lines about lost sessions and liveness verdicts: why a broker
    left the metadata."""
    words = ("fenced", "lost its registration", "registered, epoch", "frozen")
    return [f"{log.name}: {line}" for log in sorted((d / "logs").glob("*.log"))
            for line in log.read_text(errors="replace").splitlines()
            if any(w in line for w in words)]


def test_cluster_up_serves_status_stop_purge(tmp_path: Path) -> None:
    d = tmp_path / "yc"
    base = _free_block()
    t0 = time.monotonic()
    up = _yak("cluster", "up", "-n", "3", "--dir", str(d), "--base-port", str(base))
    took = time.monotonic() - t0
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        assert took < 90, took
        lines = dict(line.split(": ", 1) for line in up.stdout.splitlines() if ": " in line)
        bootstrap = lines["Bootstrap servers"]
        assert bootstrap == ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        assert lines["Console"] == f"http://127.0.0.1:{base + 5}/"

        a = AdminClient({"bootstrap.servers": bootstrap})
        want = {1: base, 2: base + 1, 3: base + 2}
        seen = _brokers_listed(a, want)
        assert seen == want, (seen, _session_events(d))
        a.create_topics([NewTopic("up", 3, 3, config={"min.insync.replicas": "2"})])[
            "up"].result(20)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                      "enable.idempotence": True})
        for i in range(100):
            p.produce("up", b"%d" % i)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "up-reader"})
        c.assign([TopicPartition("up", i, 0) for i in range(3)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 100 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        assert sorted(got) == sorted(b"%d" % i for i in range(100))

        status = _yak("cluster", "status", "--dir", str(d), timeout=60)
        assert status.returncode == 0, status.stderr
        for i in range(3):
            assert f"broker-{i + 1}   127.0.0.1:{base + i}" in status.stdout
        assert "controller: broker " in status.stdout
        pids = [int(line.split("(pid ")[1].split(")")[0])
                for line in status.stdout.splitlines() if "(pid " in line]
        assert len(pids) == 4  # etcd and three brokers
        ports = _listening_ports(pids)
        assert ports and all(base <= port <= base + 19 for port in ports), sorted(ports)

        stop = _yak("cluster", "stop", "--dir", str(d))
        assert stop.returncode == 0, stop.stderr
        for pid in pids:
            assert not Path(f"/proc/{pid}").exists() or \
                Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
        stopped = _yak("cluster", "status", "--dir", str(d), timeout=60)
        assert "running (pid" not in stopped.stdout
    finally:
        _yak("cluster", "stop", "--dir", str(d))
    purge = _yak("cluster", "purge", "--dir", str(d))
    assert purge.returncode == 0 and not d.exists()


def test_cluster_up_refuses_bad_input_with_one_line(tmp_path: Path) -> None:
    missing = _yak("cluster", "up", "--dir", str(tmp_path / "a"), "--base-port",
                   str(_free_block()), env={"YAK_ETCD": "/nonexistent/etcd"})
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1 and "etcd-server" in missing.stderr
    too_many = _yak("cluster", "up", "-n", "9", "--dir", str(tmp_path / "b"))
    assert too_many.returncode == 2 and too_many.stderr.count("\n") == 1
    nothing = _yak("cluster", "status", "--dir", str(tmp_path / "none"))
    assert nothing.returncode == 2 and "cluster.json" in nothing.stderr
