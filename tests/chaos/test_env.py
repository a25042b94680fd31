"""The fault mechanics on real processes: a broker's wall clock moved by libfaketime, a
broker's tmpfs data dir filled, and links cut between network namespaces. These need
root (namespaces, mounts) or Debian's libfaketime; scripts/system-deps.sh installs the
packages and CI runs as root, so a skip here names what is missing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from yak.chaos.env import ChaosCluster, ClusterSpec, faketime_library
from yak.chaos.netns import CLIENTS, NetnsTopology, netns_unavailable_reason

ROOT = os.geteuid() == 0


def _consume_one(bootstrap: str, topic: str) -> tuple[int, bytes]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                return m.timestamp()[1], m.value()
        raise AssertionError("nothing consumed in 30 s")
    finally:
        c.close()


def _produce(bootstrap: str, topic: str, value: bytes, timeout_ms: int = 20_000) -> object:
    """acks=all; returns the delivery error (None when acknowledged)."""
    from confluent_kafka import Producer

    out: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                  "message.timeout.ms": timeout_ms})
    p.produce(topic, value, on_delivery=lambda err, _m: out.append(err))
    p.flush(timeout_ms / 1000 + 10)
    return out[0] if out else "no delivery report"


@pytest.mark.skipif(faketime_library() is None, reason="Debian package libfaketime missing")
def test_clock_jump_moves_the_brokers_wall_clock(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    c = ChaosCluster(ClusterSpec(tmp_path, brokers=1, faketime=True)).start()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic("clock", 1, 1, config={
            "message.timestamp.type": "LogAppendTime"})])["clock"].result(30)
        c.set_clock_offset(1, -86400)
        assert _produce(c.bootstrap, "clock", b"a") is None
        ts, _ = _consume_one(c.bootstrap, "clock")  # the broker stamped it (LogAppendTime)
        assert abs(ts / 1000 - (time.time() - 86400)) < 60, ts
        c.set_clock_offset(1, 0)
        assert _produce(c.bootstrap, "clock", b"b") is None
        times = []
        from confluent_kafka import Consumer

        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "t2",
                         "auto.offset.reset": "earliest"})
        cons.subscribe(["clock"])
        deadline = time.monotonic() + 30
        while len(times) < 2 and time.monotonic() < deadline:
            m = cons.poll(1.0)
            if m is not None and m.error() is None:
                times.append(m.timestamp()[1] / 1000)
        cons.close()
        assert len(times) == 2 and abs(times[1] - time.time()) < 60, times
    finally:
        c.stop()


@pytest.mark.skipif(not ROOT, reason="mounting a tmpfs needs root")
def test_disk_full_refuses_writes_and_keeps_what_was_acked(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer

    c = ChaosCluster(ClusterSpec(tmp_path, brokers=1, tmpfs_broker=1, tmpfs_mb=64)).start()
    try:
        assert os.path.ismount(c.disk_mount(1))
        assert _produce(c.bootstrap, "disk", b"before") is None
        assert c.fill_disk(1) > 0
        # 8 KiB values: more than the free part of the segment's last page, so the disk
        # must be asked for space (a small write into that page can still succeed)
        acked: list[bytes] = []
        failed = 0
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all",
                      "message.timeout.ms": 5000, "linger.ms": 0})

        def report(err: object, m: object) -> None:
            nonlocal failed
            if err is None:
                acked.append(m.value())  # type: ignore[attr-defined]
            else:
                failed += 1

        for i in range(40):
            p.produce("disk", f"during-{i}".encode() + b"x" * 8192, on_delivery=report)
        p.flush(30)
        assert failed > 0, "every write was acknowledged on a full disk"
        assert c.alive(1)
        c.free_disk(1)
        assert _produce(c.bootstrap, "disk", b"after") is None
        cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "t",
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
        cons.subscribe(["disk"])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = cons.poll(1.0)
            if m is None:
                continue
            if m.error() is not None:
                if seen:
                    break  # end of the partition
                continue
            seen.append(m.value())
        cons.close()
        assert seen[0] == b"before" and seen[-1] == b"after"
        assert set(acked) <= set(seen)  # every acknowledged write survived
    finally:
        c.stop()
    assert not os.path.ismount(tmp_path / "broker1" / "disk")


SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7777)); s.listen(16); print("up", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"hi"); c.close()
"""
CLIENT = """
import socket, sys
s = socket.create_connection((sys.argv[1], 7777), timeout=1.5); print(s.recv(2).decode())
"""


def _reach(topo: NetnsTopology, src: str | None, dst: str) -> bool:
    argv = [sys.executable, "-c", CLIENT, topo.addr[dst]]
    if src is not None:
        argv = topo.wrap(src, argv)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    return r.stdout.strip() == "hi"


@pytest.mark.skipif(netns_unavailable_reason() is not None,
                    reason=str(netns_unavailable_reason()))
def test_netns_partition_cuts_only_the_chosen_links() -> None:
    topo = NetnsTopology(["b1", "b2", "b3"]).setup()
    servers = []
    try:
        for n in ("b1", "b2", "b3"):
            p = subprocess.Popen(topo.wrap(n, [sys.executable, "-c", SERVER, topo.addr[n]]),
                                 stdout=subprocess.PIPE, text=True)
            assert p.stdout is not None and p.stdout.readline().strip() == "up"
            servers.append(p)
        assert _reach(topo, "b2", "b1") and _reach(topo, None, "b1")
        topo.partition([["b1"], ["b2", "b3"]])  # b1 alone; clients in no group: untouched
        assert not _reach(topo, "b2", "b1") and not _reach(topo, "b1", "b3")
        assert _reach(topo, "b2", "b3") and _reach(topo, None, "b1")
        topo.heal()
        assert _reach(topo, "b2", "b1") and _reach(topo, "b1", "b3")
        topo.cut("b3", CLIENTS)
        assert not _reach(topo, None, "b3") and _reach(topo, "b1", "b3")
        topo.heal()
        assert _reach(topo, None, "b3")
    finally:
        for p in servers:
            p.kill()
            p.wait(10)
        topo.teardown()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"yk{topo.tag}-" not in listed
