"""The gateway's callers pool (`yak.gateway.core.callers.Callers`) on its own: how logins
are shared, trusted for a while, replaced, refused and closed when idle. The SASL login
itself is replaced by a recording function here; with a real broker it is exercised by
tests/security/test_gateway_auth.py and test_grpc_auth.py. Cores are real (their Kafka
clients are created on first use, so none is made here)."""

from __future__ import annotations

import asyncio

import pytest

from yak.gateway.core import GatewayCore, GatewayError, Reason
from yak.gateway.core import callers as callers_mod
from yak.gateway.core.callers import Callers, UserLogin
from yak.gateway.settings import GatewaySettings
from yak.security.client import ClientSecurity

LOGIN = UserLogin("127.0.0.1:1", ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-512"),
                  verify_interval_s=60.0)


class Logins(list):
    """Every (user, password) the fake cluster was asked to log in, and its passwords."""

    def __init__(self) -> None:
        super().__init__()
        self.passwords = {"alice": "a1", "bob": "b1"}


@pytest.fixture
def logins(monkeypatch: pytest.MonkeyPatch) -> Logins:
    seen = Logins()

    async def fake_login(bootstrap: str, security: ClientSecurity, timeout_s: float) -> None:
        seen.append((security.username or "", security.password or ""))
        await asyncio.sleep(0.05)  # a login takes a while: concurrent first requests overlap
        if seen.passwords.get(security.username or "") != security.password:
            raise GatewayError(Reason.UNAUTHENTICATED, "SASL_AUTHENTICATION_FAILED: no")

    monkeypatch.setattr(callers_mod, "sasl_login", fake_login)
    return seen


def _callers() -> Callers:
    return Callers(GatewayCore(GatewaySettings(bootstrap="127.0.0.1:1")), LOGIN, idle_s=10)


def test_concurrent_first_requests_share_one_login_then_it_is_trusted(logins: Logins) -> None:
    async def run() -> None:
        c = _callers()
        got = await asyncio.gather(*(c.login("alice", "a1") for _ in range(5)))
        assert len(logins) == 1
        assert all(g is got[0] for g in got) and got[0].principal == "User:alice"
        assert got[0].core is not c.service and got[0].authenticated
        assert got[0].core.settings.security.username == "alice"
        assert got[0].core.formats is c.service.formats  # the registry's formats are shared
        assert await c.login("alice", "a1") is got[0]
        assert len(logins) == 1  # trusted within verify_interval_s
        await c.close()

    asyncio.run(run())


def test_wrong_password_is_refused_every_time_and_never_cached(logins: Logins) -> None:
    async def run() -> None:
        c = _callers()
        for _ in range(2):
            with pytest.raises(GatewayError) as e:
                await c.login("alice", "guess")
            assert e.value.reason is Reason.UNAUTHENTICATED
        assert len(logins) == 2 and len(c) == 0
        with pytest.raises(GatewayError):
            await c.login("", "x")  # no user name: refused without asking the cluster
        assert len(logins) == 2
        await c.close()

    asyncio.run(run())


def test_reverified_after_the_interval_and_a_new_password_replaces_the_clients(
        logins: Logins) -> None:
    def expire(c: Callers) -> None:  # as if verify_interval_s had passed
        c._users["alice"].verified_until = 0.0

    async def run() -> None:
        c = _callers()
        first = await c.login("alice", "a1")
        expire(c)
        assert await c.login("alice", "a1") is first  # checked again, same clients
        assert len(logins) == 2
        logins.passwords["alice"] = "a2"  # changed on the cluster
        expire(c)
        with pytest.raises(GatewayError):
            await c.login("alice", "a1")  # the old password is refused from now on
        second = await c.login("alice", "a2")
        assert second is not first and second.core.settings.security.password == "a2"
        assert len(c) == 1
        await c.close()

    asyncio.run(run())


def test_idle_cores_without_sessions_are_closed(logins: Logins) -> None:
    async def run() -> None:
        c = _callers()
        alice = await c.login("alice", "a1")
        bob = await c.login("bob", "b1")
        acting = c.acting("User:CN=carol", "127.0.0.1")
        assert acting.acls is c.acls and acting.core is not c.service
        bob.core.sessions.streams["s"] = object()  # type: ignore[assignment]  # an open stream
        closed = await c.reap(now=callers_mod.time.monotonic() + 11)
        assert closed == 2 and len(c) == 1  # alice and carol; bob holds a session
        bob.core.sessions.streams.clear()
        assert await c.login("alice", "a1") is not alice  # a new core after the close
        await c.close()
        assert len(c) == 0

    asyncio.run(run())
