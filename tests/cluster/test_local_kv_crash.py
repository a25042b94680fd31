"""Crash safety of the local metadata store's file (`yak.cluster.local_kv`), now that the
writer thread builds the file from its own image of it (issue 25).

What must hold, as before the change: an acknowledged write survives a crash; a
transaction is in the file whole or not at all; keys on leases are never in it; the
revision never goes back. Three ways to break it: a real writer process killed with
SIGKILL at random points of its writes (then reopened and compared with what it
acknowledged), a failure injected into the write path between its steps (partial bytes,
before the rename, after it), and a random run of every kind of write whose reopened file
must equal the store's memory (the image the writer keeps is exactly the durable state).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import yak.cluster.local_kv as local_kv
from tests.cluster.conftest import run
from yak.cluster.etcd import Compare, Op
from yak.cluster.local_kv import KV_FILE, LocalKV

REPO = Path(__file__).resolve().parents[2]

# The writer: 4 concurrent transactions at a time, each puts /c/a/<i> and /c/b/<i> (the
# same value) and a key on a lease, and deletes /c/a/<i-50> and /c/b/<i-50> (so deletes
# are in the file too); prints "<i> <revision>" once the transaction is acknowledged.
WRITER = r"""
import asyncio, sys
from yak.cluster.etcd import Op
from yak.cluster.local_kv import LocalKV

async def main(path, start):
    kv = await LocalKV(path).open()
    lease, _ = await kv.lease_grant(60)
    if kv.is_empty():  # a store of some size, so that a write takes a while
        await asyncio.to_thread(kv.load_initial, {f"/c/seed/{n:05d}": b"s" * 200
                                                  for n in range(2000)})
    async def one(i):
        v = f"value-{i}".encode()
        r = await kv.txn([], [Op.put(f"/c/a/{i:06d}", v), Op.put(f"/c/b/{i:06d}", v),
                              Op.put(f"/c/leased/{i:06d}", v, lease=lease),
                              Op.delete(f"/c/a/{i - 50:06d}"),
                              Op.delete(f"/c/b/{i - 50:06d}")])
        print(i, r.revision, flush=True)
    i = start
    while True:
        await asyncio.gather(*(one(i + j) for j in range(4)))
        i += 4

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def _reopen(path: Path) -> tuple[LocalKV, dict[str, Any]]:
    kv = LocalKV(path).open_sync()
    return kv, {k: v for k, v in kv._kvs.items()}


def test_sigkill_during_writes_loses_nothing_acknowledged_and_no_half_transaction(
        tmp_path: Path) -> None:
    path = tmp_path / KV_FILE
    rng = random.Random(25)
    start, last_revision = 0, 0
    for _round in range(4):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(start)],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        acked: dict[int, int] = {}
        want = rng.randint(10, 120)
        deadline = time.monotonic() + 60
        while len(acked) < want and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            i, rev = map(int, line.split())
            acked[i] = rev
        proc.send_signal(signal.SIGKILL)  # mid-write, most likely: it writes all the time
        proc.wait(timeout=30)
        # The rest through the same buffered reader: `communicate()` reads the pipe's file
        # descriptor directly, past what `readline` had already buffered, so its output
        # could start inside a line (a full run saw a line "59" of "125 459"). The writer
        # is dead, so both pipes hold all they will and reading one then the other is safe.
        out = proc.stdout.read()
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
        # Acknowledged before the kill, read after it: whole lines only (the kill can land
        # inside a print, leaving "123" of "123 456\n"; that one was not acknowledged).
        for line in out.split(b"\n")[:-1]:
            i, rev = map(int, line.split())
            acked[i] = rev
        assert acked, f"the writer acknowledged nothing: {err.decode()[-2000:]}"

        kv, kvs = _reopen(path)
        # Nothing acknowledged is lost, and the revision never goes back.
        assert kv.revision >= max(acked.values()) >= last_revision
        # Transaction i deletes i-50's keys; in flight at the kill: at most the batch of 4
        # after the one that holds the last acknowledged. So i's keys may be gone only if
        # i + 50 may have landed.
        top = max(acked)
        for i in acked:
            got = kvs.get(f"/c/a/{i:06d}")
            if i + 50 > top + 4:
                assert got is not None, f"acknowledged transaction {i} lost"
            if got is not None:
                assert got.value == f"value-{i}".encode()
        # All of a transaction or none of it: /c/a/<i> and /c/b/<i> come and go together.
        a = {k.rsplit("/", 1)[1]: v for k, v in kvs.items() if k.startswith("/c/a/")}
        b = {k.rsplit("/", 1)[1]: v for k, v in kvs.items() if k.startswith("/c/b/")}
        assert a.keys() == b.keys()
        for k in a:
            assert (a[k].value, a[k].mod_revision) == (b[k].value, b[k].mod_revision)
        # Keys on leases die with the process; the seed is whole.
        assert not [k for k in kvs if k.startswith("/c/leased/")]
        assert len([k for k in kvs if k.startswith("/c/seed/")]) == 2000
        last_revision = kv.revision
        start = max(int(k) for k in a) + 4 if a else top + 4


def test_a_write_that_fails_between_its_steps_leaves_the_previous_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / KV_FILE
    real_write_all, real_replace = local_kv._write_all, os.replace

    def half_then_fail(fd: int, data: bytes) -> None:
        real_write_all(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device (injected)")

    def no_rename(src: Any, dst: Any) -> None:
        raise OSError(5, "Input/output error (injected)")

    async def body() -> None:
        kv = await LocalKV(path).open()
        for n in range(300):
            await kv.put(f"/f/k{n:04d}", b"v" * 100)
        before = _reopen(path)[1]

        # Killed in the middle of the temp file's bytes: the file is the last one.
        monkeypatch.setattr(local_kv, "_write_all", half_then_fail)
        with pytest.raises(OSError):
            await kv.txn([], [Op.put("/f/new", b"1"), Op.delete("/f/k0000")])
        assert _reopen(path)[1] == before
        # Killed before the rename: the temp file is complete, the file is still the last.
        monkeypatch.setattr(local_kv, "_write_all", real_write_all)
        monkeypatch.setattr(local_kv.os, "replace", no_rename)
        with pytest.raises(OSError):
            await kv.put("/f/new2", b"2")
        monkeypatch.setattr(local_kv.os, "replace", real_replace)
        assert _reopen(path)[1] == before

        # The next write carries the failed ones (applied in memory, as before the change).
        rev = await kv.put("/f/after", b"3")
        got_kv, got = _reopen(path)
        assert got_kv.revision == rev
        assert "/f/k0000" not in got and got["/f/new"].value == b"1"
        assert got["/f/new2"].value == b"2" and got["/f/after"].value == b"3"
        assert got == {k: v for k, v in kv._kvs.items() if not v.lease}

    run(body())


def test_the_file_is_the_durable_state_after_every_kind_of_write(tmp_path: Path) -> None:
    """Random puts, deletes (one key, a prefix), nested and failed transactions, keys moved
    onto a lease and off it, leases revoked: after each step a reopen of the file holds
    exactly the store's keys that are on no lease, with their revisions and versions."""
    path = tmp_path / KV_FILE
    rng = random.Random(7)

    async def body() -> None:
        kv = await LocalKV(path).open()
        lease, _ = await kv.lease_grant(60)
        keys = [f"/r/{p}/{n}" for p in "abc" for n in range(8)]
        for step in range(150):
            k, k2 = rng.choice(keys), rng.choice(keys)
            pick = rng.randrange(7)
            if pick == 0:
                await kv.put(k, f"{step}".encode())
            elif pick == 1:
                await kv.put(k, b"leased", lease=lease)
            elif pick == 2:
                await kv.delete(k)
            elif pick == 3:
                await kv.delete(k.rsplit("/", 1)[0] + "/", prefix=True)
            elif pick == 4:
                await kv.txn([Compare.version(k, ">", 0)],
                             [Op.txn([], [Op.put(k2, f"n{step}".encode()), Op.delete(k)])],
                             [Op.put(k, f"f{step}".encode())])
            elif pick == 5:
                await kv.lease_revoke(lease)
                lease, _ = await kv.lease_grant(60)
            else:
                await kv.txn([Compare.value(k, "==", b"never")], [Op.put(k2, b"no")])
            durable = {kk: v for kk, v in kv._kvs.items() if not v.lease}
            reopened, got = _reopen(path)
            assert got == durable, f"step {step}"
            assert reopened.revision == kv.revision
            assert list(reopened._sorted) == sorted(x.encode() for x in durable)

    run(body())
