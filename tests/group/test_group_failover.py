"""Issue 4's main scenario: three confluent-kafka group members in their own processes.

One joins late, one leaves cleanly, one is SIGKILLed. Its partitions must move within
the session timeout; every message is consumed at least once; the only duplicates are
the killed member's uncommitted tail; a restarted member resumes from the committed
offsets, also after the broker restarts.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.waiting import wait_until

WORKER = Path(__file__).with_name("consumer_worker.py")
TOPIC = "orders"
PARTITIONS = 6
SESSION_TIMEOUT_S = 6.0


class Member:
    def __init__(self, name: str, bootstrap: str, tmp: Path, *extra: str) -> None:
        self.name = name
        self.out = tmp / f"{name}.txt"
        self.out.touch()
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), bootstrap, "g", TOPIC, str(self.out), *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def lines(self) -> list[list[str]]:
        return [ln.split() for ln in self.out.read_text().splitlines() if ln.strip()]

    def messages(self) -> list[tuple[int, int, int]]:
        return [(int(p), int(o), int(v)) for tag, p, o, v in _tagged(self.lines(), "M")]

    def assignment(self) -> set[int]:
        """Partitions held now (eager protocol: each A replaces the previous set)."""
        held: set[int] = set()
        for ln in self.lines():
            if ln[0] == "A":
                held = {int(p) for p in ln[1].split(",")} if len(ln) > 1 else set()
            elif ln[0] == "R":
                held = set()
        return held

    def last_commits(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for _, p, o in _tagged(self.lines(), "C"):
            out[int(p)] = max(out.get(int(p), -1), int(o))
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _tagged(lines: list[list[str]], tag: str) -> list[list[str]]:
    return [ln for ln in lines if ln[0] == tag]


def _produce(bootstrap: str, start: int, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for v in range(start, start + count):
        p.produce(TOPIC, str(v).encode(), key=str(v).encode())
    assert p.flush(30) == 0


def _wait(cond, timeout: float, what: str) -> float:  # type: ignore[no-untyped-def]
    """Poll `cond` (tests/waiting.py); returns how long it took."""
    t0 = time.monotonic()
    wait_until(cond, timeout, what, every=0.1)
    return time.monotonic() - t0


@pytest.mark.slow
def test_three_members_join_late_leave_and_die(broker_factory, tmp_path: Path) -> None:
    b = broker_factory(**{"group.initial.rebalance.delay.ms": "500"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(15)
    members: list[Member] = []
    try:
        _produce(b.bootstrap, 0, 600)
        a = Member("a", b.bootstrap, tmp_path)
        # The one that will be SIGKILLed commits only on revoke, so it dies with an
        # uncommitted tail that its successor must read again.
        k = Member("k", b.bootstrap, tmp_path, "commit.every=100000")
        members += [a, k]
        _wait(
            lambda: (
                len(a.assignment()) + len(k.assignment()) == PARTITIONS
                and a.assignment()
                and k.assignment()
            ),
            30,
            "a and k to share the partitions",
        )
        late = Member("late", b.bootstrap, tmp_path)
        members.append(late)
        _wait(
            lambda: (
                all(m.assignment() for m in (a, k, late))
                and sum(len(m.assignment()) for m in (a, k, late)) == PARTITIONS
            ),
            30,
            "the late member to get partitions",
        )
        _produce(b.bootstrap, 600, 600)
        _wait(lambda: len(k.messages()) > 0, 20, "k to consume")

        # a leaves cleanly: it commits on revoke/exit, so nothing of it is read twice.
        a.stop()
        _wait(
            lambda: len(k.assignment()) + len(late.assignment()) == PARTITIONS,
            20,
            "a's partitions to move",
        )
        _produce(b.bootstrap, 1200, 600)
        _wait(lambda: any(v >= 1200 for _, _, v in k.messages()), 20, "k to read new data")

        # k dies without a word; its partitions must move within the session timeout.
        k_parts = k.assignment()
        k.kill()
        moved = _wait(
            lambda: late.assignment() == set(range(PARTITIONS)), 30, "k's partitions to move"
        )
        assert moved < SESSION_TIMEOUT_S + 3.0, f"partitions moved after {moved:.1f}s"
        _produce(b.bootstrap, 1800, 600)
        _wait(
            lambda: {v for m in members for _, _, v in m.messages()} >= set(range(2400)),
            30,
            "every message to be consumed",
        )

        # Duplicates: only offsets of k's partitions at or after k's last commit.
        k_commits = k.last_commits()
        readers: dict[tuple[int, int], list[str]] = defaultdict(list)
        for m in members:
            for p, o, _ in m.messages():
                readers[(p, o)].append(m.name)
        dups = {tp: names for tp, names in readers.items() if len(names) > 1}
        for (p, o), names in dups.items():
            assert "k" in names and p in k_parts, f"duplicate {p}@{o} read by {names}"
            assert o >= k_commits.get(p, 0), f"{p}@{o} was committed by k, yet read again"
        assert len(readers) == 2400
        assert dups, "k died with an uncommitted tail: someone must have re-read it"
        print(f"k partitions moved in {moved:.1f}s; {len(dups)} duplicates (k tail)")

        # late exits cleanly; new data arrives; the broker restarts; a new member must
        # read exactly the new data, from the committed offsets.
        late.stop()
        _produce(b.bootstrap, 2400, 300)
        b.restart()
        fresh = Member("fresh", b.bootstrap, tmp_path)
        members.append(fresh)
        _wait(lambda: len(fresh.messages()) >= 300, 40, "fresh to read the new data")
        time.sleep(1.0)  # the point: a window in which no extra (re-read) record may arrive
        assert sorted(v for _, _, v in fresh.messages()) == list(range(2400, 2700))
    finally:
        for m in members:
            if m.proc.poll() is None:
                m.kill()
