"""Real etcd processes for the cluster tests (no mocks of etcd).

    def test_x(etcd, keys): ...          # one etcd shared by the session; a fresh namespace
    def test_y(etcd_factory):            # a private etcd (1 or 3 members) to kill or pause
        e = etcd_factory(members=3)

Tests are synchronous and run their coroutines with `run(coro)`, which bounds every test
body (no pytest-asyncio needed).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from yak.cluster.layout import ClusterKeys
from yak.cluster.local import LocalEtcd, free_ports

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run a test coroutine on a fresh loop, failing it after `timeout` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def _start_etcd(base: Path, members: int) -> LocalEtcd:
    ports = free_ports(2 * members)
    return LocalEtcd(base, ports[:members], ports[members:]).start()


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEtcd]:
    """One single-member etcd for the session; tests keep apart by namespace (`keys`)."""
    e = _start_etcd(tmp_path_factory.mktemp("etcd"), 1)
    yield e
    e.stop()


@pytest.fixture
def etcd_factory(tmp_path: Path) -> Iterator[Callable[..., LocalEtcd]]:
    """Private etcd clusters a test may kill, pause or cut; all stopped at teardown."""
    started: list[LocalEtcd] = []

    def make(members: int = 1) -> LocalEtcd:
        e = _start_etcd(tmp_path / f"etcd-{len(started)}", members)
        started.append(e)
        return e

    yield make
    for e in started:
        for m in e.members:
            with contextlib.suppress(Exception):
                m.kill()


@pytest.fixture
def keys(request: pytest.FixtureRequest) -> ClusterKeys:
    """A namespace of its own for each test, so tests can share one etcd."""
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]
    return ClusterKeys(re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60] + "-" + digest)
