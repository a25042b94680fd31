"""Share group membership and share sessions: Kafka's epoch rules, on a ManualClock."""

from __future__ import annotations

import uuid

import pytest

from yak.clock import ManualClock
from yak.errors import ErrorCode
from yak.share.group import ShareGroups
from yak.share.session import ShareSessionCache, ShareSessionError

T1, T2 = uuid.uuid4(), uuid.uuid4()
TOPICS = {"a": (T1, 3), "b": (T2, 1)}


def _groups(clock: ManualClock, **kw: int) -> tuple[ShareGroups, list[tuple[str, str]]]:
    removed: list[tuple[str, str]] = []
    g = ShareGroups(clock, TOPICS.get, on_member_removed=lambda *a: removed.append(a), **kw)
    return g, removed


def test_every_member_gets_every_subscribed_partition() -> None:
    groups, _ = _groups(ManualClock())
    a = groups.heartbeat("g", "m1", 0, ["a"])
    assert a.error is ErrorCode.none and a.assignment == {T1: (0, 1, 2)}
    b = groups.heartbeat("g", "m2", 0, ["a", "b", "missing"])
    assert b.assignment == {T1: (0, 1, 2), T2: (0,)}
    assert b.member_epoch == 2
    # m1's epoch catches up at its next heartbeat, which carries the assignment again
    again = groups.heartbeat("g", "m1", a.member_epoch, None)
    assert again.member_epoch == 2 and again.assignment == {T1: (0, 1, 2)}
    steady = groups.heartbeat("g", "m1", 2, None)
    assert steady.member_epoch == 2 and steady.assignment is None


def test_epochs_unknown_members_leave_and_timeout() -> None:
    clock = ManualClock()
    groups, removed = _groups(clock, session_timeout_ms=1000, max_size=2)
    joined = groups.heartbeat("g", "", 0, ["a"])
    mid = joined.member_id
    assert mid
    assert groups.heartbeat("g", mid, 7, None).error is ErrorCode.fenced_member_epoch
    assert groups.heartbeat("g", "nobody", 1, None).error is ErrorCode.unknown_member_id
    groups.heartbeat("g", "m2", 0, ["a"])
    assert groups.heartbeat("g", "m3", 0, ["a"]).error is ErrorCode.group_max_size_reached
    assert groups.heartbeat("g", "m2", -1, None).member_epoch == -1
    assert removed == [("g", "m2", False)]
    clock.advance(1001)
    groups.expire_members()
    assert removed == [("g", "m2", False), ("g", mid, True)]
    assert not groups.is_member("g", mid)


def test_share_session_epochs() -> None:
    cache = ShareSessionCache(max_sessions=1)
    with pytest.raises(ShareSessionError) as e:
        cache.advance("g", "m", 1)
    assert e.value.code is ErrorCode.share_session_not_found
    s, old = cache.open("g", "m")
    assert old is None and s.epoch == 1
    cache.advance("g", "m", 1)
    with pytest.raises(ShareSessionError) as e:
        cache.advance("g", "m", 1)
    assert e.value.code is ErrorCode.invalid_share_session_epoch
    cache.advance("g", "m", 2)
    assert cache.advance("g", "m", -1) is s
    assert cache.advance("g", "gone", -1) is None  # a final request without a session
    with pytest.raises(ShareSessionError) as e:
        cache.open("g", "other")
    assert e.value.code is ErrorCode.share_session_limit_reached
    _, old = cache.open("g", "m")
    assert old is s


def test_a_session_kept_after_leaving_goes_after_a_session_timeout() -> None:
    from yak.share.manager import ShareConfig, ShareManager

    clock = ManualClock()
    share = ShareManager(ShareConfig(session_timeout_ms=1000), clock, None,  # type: ignore[arg-type]
                         TOPICS.get, 1)
    sp = share._share_partition("g", "a", 0)
    sp.initialize(0, 0, "earliest")
    share.groups.heartbeat("g", "m", 0, ["a"])
    share.sessions.open("g", "m")
    sp.acquire("m", [(0, 2)], 10)
    share.groups.heartbeat("g", "m", -1, None)  # leaves, keeps its session for final acks
    assert share.sessions.get("g", "m") is not None and sp.state_of(0)[2] == "m"
    clock.advance(500)
    share.sweep()
    assert share.sessions.get("g", "m") is not None
    clock.advance(501)
    share.sweep()
    assert share.sessions.get("g", "m") is None
    assert sp.state_of(0)[2] == ""  # released
