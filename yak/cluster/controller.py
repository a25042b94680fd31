"""Controller election on etcd, and the fenced writer every controller write goes through.

Whichever broker holds `/yak/<cluster>/controller` is the controller. It takes the key with a
transaction on `create_revision == 0` (the key does not exist), on its session lease, so the
key disappears when that broker dies or pauses past its session. The key's create_revision
is the controller epoch.

An etcd "lock" alone is unsafe (Jepsen's etcd 3.4 analysis): a controller paused after
winning can wake up and write after another took over. So every controller write is a
transaction whose first compare is `create_revision(controller key) == my epoch`; once the
key was deleted and re-created by a successor, that compare fails inside etcd and the write
is refused, however late it arrives. `FencedWriter` does this for every write; it also
refuses locally, without a round trip, once the lease's local deadline has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Sequence

from yak.cluster.etcd import (
    Compare,
    EtcdError,
    KeyValue,
    LeaseNotFoundError,
    Op,
    TxnResult,
)
from yak.cluster.kv import KVClient
from yak.cluster.layout import ClusterKeys
from yak.cluster.lease import LeaseKeeper

__all__ = ["ControllerElection", "FencedWriter", "NotControllerError", "controller_of"]

log = logging.getLogger(__name__)


class NotControllerError(EtcdError):
    """This broker is no longer (or not) the controller; the write was not applied.
    Kafka's NOT_CONTROLLER."""


def controller_of(kv: KeyValue | None) -> tuple[int, int] | None:
    """(node id, controller epoch) from the controller key, or None when there is none."""
    if kv is None:
        return None
    return int(json.loads(kv.value)["brokerId"]), kv.create_revision


class FencedWriter:
    """Controller writes, each refused by etcd unless the writer is still the controller."""

    def __init__(self, client: KVClient, controller_key: str, epoch: int,
                 lease: LeaseKeeper | None = None) -> None:
        self.client = client
        self.controller_key = controller_key
        self.epoch = epoch
        self.lease = lease

    async def txn(self, compares: Sequence[Compare] = (), success: Sequence[Op] = (),
                  failure: Sequence[Op] = (), *, check_local: bool = True) -> TxnResult:
        """Run `compares/success/failure` only if still controller; returns the inner result.

        The inner transaction is nested inside the fence (etcd >= 3.3), so a caller's own
        compare failing (`succeeded == False`) is told apart from having been deposed
        (NotControllerError). `check_local=False` skips the local lease check, to prove
        etcd's fence in tests.
        """
        if check_local and self.lease is not None and not self.lease.valid():
            raise NotControllerError(
                f"controller epoch {self.epoch}: session lease lapsed; write not sent")
        outer = await self.client.txn(
            [Compare.create_revision(self.controller_key, "==", self.epoch)],
            [Op.txn(compares, success, failure)],
            [Op.get(self.controller_key)])
        if not outer.succeeded:
            now = controller_of(outer.responses[0].kvs[0] if outer.responses[0].kvs else None)
            raise NotControllerError(
                f"controller epoch {self.epoch} was superseded (now: "
                + (f"node {now[0]}, epoch {now[1]}" if now else "no controller") + ")")
        inner: TxnResult = outer.responses[0]
        return inner

    async def put(self, key: str, value: bytes | str) -> int:
        return (await self.txn((), [Op.put(key, value)])).revision

    async def delete(self, key: str, prefix: bool = False) -> int:
        return (await self.txn((), [Op.delete(key, prefix=prefix)])).responses[0]

    async def compare_and_put(self, key: str, mod_revision: int, value: bytes | str) -> bool:
        """Write if the key is unchanged since `mod_revision` (0: does not exist yet)."""
        cmp = (Compare.mod_revision(key, "==", mod_revision) if mod_revision
               else Compare.create_revision(key, "==", 0))
        return (await self.txn([cmp], [Op.put(key, value)])).succeeded


class ControllerElection:
    """Campaigns for the controller key until stopped.

    `on_elected(epoch)` runs when this broker becomes controller, `on_resigned(epoch)` when it
    stops being it (key deleted, lease lost, or stop()). Call `writer()` for a FencedWriter of
    the current term. The lease is the broker's session lease (one keepalive for both; pass
    `lambda: registration.lease`, since a broker that lost its session registers again on a
    new lease), or a LeaseKeeper of its own.
    """

    def __init__(self, client: KVClient, keys: ClusterKeys, node_id: int,
                 lease: LeaseKeeper | Callable[[], LeaseKeeper | None],
                 *, on_elected: Callable[[int], None] | None = None,
                 on_resigned: Callable[[int], None] | None = None) -> None:
        self.client = client
        self.keys = keys
        self.node_id = node_id
        self._lease_of = lease if callable(lease) else (lambda: lease)
        self._term_lease: LeaseKeeper | None = None  # the lease the current term holds
        self.epoch = -1  # our term's epoch while controller
        self.current: tuple[int, int] | None = None  # (node id, epoch) of whoever holds it
        self._on_elected = on_elected
        self._on_resigned = on_resigned
        self._task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()  # replaced after each change of `current`

    @property
    def lease(self) -> LeaseKeeper | None:
        return self._lease_of()  # type: ignore[no-any-return]

    def is_controller(self) -> bool:
        return (self.epoch > 0 and self._term_lease is not None and self._term_lease.valid())

    def writer(self) -> FencedWriter:
        if self.epoch <= 0:
            raise NotControllerError(f"node {self.node_id} is not the controller")
        return FencedWriter(self.client, self.keys.controller, self.epoch, self._term_lease)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-election-{self.node_id}")

    async def stop(self, resign: bool = True) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if resign and self.epoch > 0:
            with contextlib.suppress(EtcdError):
                await self.client.txn([Compare.create_revision(self.keys.controller, "==",
                                                               self.epoch)],
                                      [Op.delete(self.keys.controller)])
        self._lose()

    async def wait_until(self, predicate: Callable[[ControllerElection], bool],
                         timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while not predicate(self):
                await self.changed.wait()

    def _set_current(self, current: tuple[int, int] | None) -> None:
        if current != self.current:
            self.current = current
            fired, self.changed = self.changed, asyncio.Event()
            fired.set()

    def _lose(self) -> None:
        self._term_lease = None
        if self.epoch > 0:
            epoch, self.epoch = self.epoch, -1
            log.warning("node %d is no longer the controller (epoch %d)", self.node_id, epoch)
            if self._on_resigned is not None:
                self._on_resigned(epoch)
            fired, self.changed = self.changed, asyncio.Event()
            fired.set()

    async def _run(self) -> None:
        key = self.keys.controller
        value = json.dumps({"brokerId": self.node_id}).encode()
        backoff = 0.05
        while True:
            lease = self.lease
            if lease is None or not lease.valid():
                # Our session is gone (or not renewed in time): wait for the owner to restore
                # it rather than campaigning on a lease etcd may have deleted.
                self._lose()
                await asyncio.sleep(0.2)
                continue
            try:
                r = await self.client.txn([Compare.create_revision(key, "==", 0)],
                                          [Op.put(key, value, lease=lease.lease_id)],
                                          [Op.get(key)])
                if r.succeeded:
                    self._term_lease = lease
                    self.epoch = r.revision
                    self._set_current((self.node_id, self.epoch))
                    log.info("node %d is the controller, epoch %d", self.node_id, self.epoch)
                    if self._on_elected is not None:
                        self._on_elected(self.epoch)
                    fired, self.changed = self.changed, asyncio.Event()
                    fired.set()
                    await self._until_gone(key, r.revision + 1, lease)
                    self._lose()
                    continue
                kvs = r.responses[0].kvs
                if kvs and kvs[0].lease == lease.lease_id:
                    # Still ours: the key outlived a spell without etcd (or a local lease
                    # lapse) on our own live lease. Resume the same term.
                    self._term_lease = lease
                    self.epoch = kvs[0].create_revision
                    self._set_current((self.node_id, self.epoch))
                    log.info("node %d is the controller again, epoch %d", self.node_id,
                             self.epoch)
                    if self._on_elected is not None:
                        self._on_elected(self.epoch)
                    fired, self.changed = self.changed, asyncio.Event()
                    fired.set()
                    await self._until_gone(key, kvs[0].mod_revision + 1, lease)
                    self._lose()
                    continue
                self._set_current(controller_of(kvs[0]) if kvs else None)
                if kvs:
                    await self._until_gone(key, kvs[0].mod_revision + 1, lease)
                backoff = 0.05
            except LeaseNotFoundError:
                # Our lease is gone and the keeper is about to say so: not an etcd fault.
                self._lose()
                await asyncio.sleep(0.2)
            except EtcdError as e:
                log.warning("controller election: %s", e)
                self._lose()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    async def _until_gone(self, key: str, from_revision: int, lease: LeaseKeeper) -> None:
        """Wait for the key's deletion (or our lease's loss: while controller, the key went
        with it; while not, campaigning on a dead lease is pointless)."""

        async def deleted() -> None:
            watch = self.client.watch(key, start_revision=from_revision)
            async with contextlib.aclosing(watch.__aiter__()) as stream:  # type: ignore[type-var]
                async for resp in stream:
                    if resp.snapshot is not None and not any(kv.key == key
                                                             for kv in resp.snapshot):
                        return
                    if any(e.type == "DELETE" for e in resp.events):
                        return

        gone = asyncio.ensure_future(deleted())
        lost = asyncio.ensure_future(lease.lost.wait())
        try:
            await asyncio.wait({gone, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            lost.cancel()
            await asyncio.gather(gone, lost, return_exceptions=True)
        if gone.done() and not gone.cancelled() and gone.exception() is not None:
            raise gone.exception()  # type: ignore[misc]
