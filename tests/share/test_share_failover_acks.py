"""An acknowledgement that reached a deposed share-partition leader is answered only once
written (issue 24).

Found by `yak chaos run -n 3 --duration 180 --faults kill,pause --workloads share --seed
24`: broker 2, leader of chaos-share-3, was paused with a member's ACCEPT of offset 511
in its socket; broker 1 took over, read the state (the durable read fence) and handed 511
out again, accepted by another member. Broker 2 resumed, applied the ACCEPT to its window,
then, in the same ShareFetch, found it no longer led the partition and dropped the
window; the write of the acknowledgements skipped every share partition no longer in
memory, so the ACCEPT was answered as done though nothing was written (the state
partition holds no record of it): acknowledged twice. The write now goes from the window
the acknowledgements were applied to, refused by the share coordinator once the new
leader has read the state.

Through `ShareManager.fetch` with the share coordinator's runtime on the in-memory log;
the partition layer is a stand-in saying "led elsewhere now" (what a resumed broker's
replica manager says right after it learned of the new leader)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from yak.clock import ManualClock
from yak.coordinator.memory import MemoryCoordinatorLog
from yak.errors import ErrorCode
from yak.share import records as rec
from yak.share.coordinator import ShareCoordinator
from yak.share.manager import ShareConfig, ShareManager
from yak.share.partition import AckType
from yak.share.persister import CoordinatorPersister
from yak.share.records import ShareKey

TID = uuid.UUID("12345678-1234-5678-1234-567812345678")
KEY = ShareKey("g", TID, 0)


class _LedElsewhere:
    """The partition layer of a broker that no longer leads t-0 (broker 1 does, at 4)."""

    def get_partition(self, topic: str, partition: int) -> Any:
        return SimpleNamespace(is_leader=False, leader_epoch=4,
                               state=SimpleNamespace(leader=1))


def _setup() -> tuple[ShareCoordinator, ShareManager]:
    log = MemoryCoordinatorLog(num_partitions=3, topic=rec.SHARE_STATE_TOPIC)
    coord = ShareCoordinator(log, log, ManualClock())
    coord.runtime.load_led_partitions()
    share = ShareManager(ShareConfig(), ManualClock(), _LedElsewhere(),  # type: ignore[arg-type]
                         {"t": (TID, 1)}.get, 2, CoordinatorPersister(coord))
    return coord, share


async def _deposed_window(coord: ShareCoordinator, share: ShareManager) -> None:
    """The old leader (epoch 3) read the state, handed out 0..9 to m0, wrote that."""
    assert (await coord.read_state(KEY, 3))[0] is ErrorCode.none
    sp = share._new_share_partition("g", "t", 0)
    sp.leader_epoch = 3
    sp.initialize(0, 0, "earliest")
    share.partitions[("g", "t", 0)] = sp
    assert sp.acquire("m0", [(0, 9)], 10)
    assert await share.persist("g", [("t", 0)]) == {}
    # m0's ACCEPT of 0..9 arrives (applied synchronously by the handler)
    assert share.acknowledge("g", "m0", "t", 0, [(0, 9, (AckType.ACCEPT,))]) is ErrorCode.none


def _fetch(share: ShareManager, errors: dict[tuple[str, int], ErrorCode]) -> Any:
    return share.fetch("g", "m0", [("t", 0)], max_records=10, max_bytes=1 << 20,
                       max_wait_ms=0, acked=[("t", 0)], ack_errors=errors)


def test_an_ack_on_a_deposed_leader_is_refused_once_the_new_leader_read_the_state() -> None:
    async def run() -> None:
        coord, share = _setup()
        await _deposed_window(coord, share)
        assert (await coord.read_state(KEY, 4))[0] is ErrorCode.none  # the new leader
        errors: dict[tuple[str, int], ErrorCode] = {}
        results = await _fetch(share, errors)
        assert results[0].error is ErrorCode.not_leader_or_follower
        assert ("g", "t", 0) not in share.partitions  # the window is dropped
        assert errors == {("t", 0): ErrorCode.fenced_leader_epoch}  # not answered as done
        _, st = coord.read(KEY, -1)
        assert st is not None and all(s != 2 for _a, _b, s, _c in st.batches)  # no accept

    asyncio.run(run())


def test_an_ack_on_a_deposed_leader_is_written_while_no_newer_leader_read() -> None:
    async def run() -> None:
        coord, share = _setup()
        await _deposed_window(coord, share)
        errors: dict[tuple[str, int], ErrorCode] = {}
        results = await _fetch(share, errors)
        assert results[0].error is ErrorCode.not_leader_or_follower
        assert errors == {}  # answered as done: and it is, the new leader will read it
        _, st = coord.read(KEY, -1)
        assert st is not None and st.start_offset == 10  # 0..9 accepted

    asyncio.run(run())
