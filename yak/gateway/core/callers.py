"""Who calls the gateway, and the Kafka clients that act for them.

Without authentication every caller acts as the gateway itself: one `GatewayCore` whose
Kafka clients log in with the gateway's own credentials (the broker's inside `yak serve`,
`--command-config` / `-X` for `yak gateway`).

With authentication the gateway does not decide what a caller may do; the cluster does:

- A caller with a user name and password (HTTP Basic, gRPC `authorization` metadata) is
  checked by logging in to the cluster as that user with SASL (`UserLogin.mechanism`,
  SCRAM by default): a real SaslHandshake + SaslAuthenticate exchange, so the broker's
  own credential store, its messages and its failed-login delay apply. The caller then
  gets a `GatewayCore` of its own whose Kafka clients (producer, admin, consumers) log
  in as that user, and the cluster applies that user's ACLs and quotas to everything the
  gateway does for it (the shape of Redpanda's HTTP Proxy). A verified password is
  trusted for `UserLogin.verify_interval_s`, then checked again on the next request, so a
  deleted user or a changed password is refused from then on.
- A caller known only by its TLS client certificate (gRPC with mTLS) cannot be logged in
  as: the gateway holds no key for it. Its principal is the certificate subject, mapped
  as a broker maps it (`ssl.principal.mapping.rules`). The gateway acts for it with its
  own clients after checking the cluster's ACLs for that principal with the broker's own
  `StandardAuthorizer`, fed over the wire: the ACLs by DescribeAcls, `super.users` and
  `allow.everyone.if.no.acl.found` by DescribeConfigs (`ActingAcls`, refreshed at most
  every `ACL_REFRESH_S`). The gateway's own principal needs DESCRIBE and
  DESCRIBE_CONFIGS on the cluster for that (a super user has both).

Each principal has its own core and so its own consumer sessions: one caller can never
reach another's REST consumer instance or stream. Cores nobody used for `idle_s` and
that hold no session are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import logging
import os
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from yak.gateway.cluster import ClusterClient, ClusterError
from yak.gateway.core.errors import GatewayError, Reason, from_cluster_error
from yak.gateway.core.service import GatewayCore
from yak.security.client import MECHANISMS, ClientSecurity

log = logging.getLogger(__name__)

ACL_REFRESH_S = 1.0
REAP_EVERY_S = 30.0
DEFAULT_IDLE_S = 300.0
GATEWAY_PRINCIPAL = "gateway"  # what an unauthenticated caller acts as (the gateway's login)

# Kafka's error per resource type for a refused operation (yak.errors has the classes).
_DENIED = {
    "TOPIC": (29, "TOPIC_AUTHORIZATION_FAILED"),
    "GROUP": (30, "GROUP_AUTHORIZATION_FAILED"),
    "CLUSTER": (31, "CLUSTER_AUTHORIZATION_FAILED"),
    "TRANSACTIONAL_ID": (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
}


def denied(resource_type: str, name: str, operation: str) -> GatewayError:
    """PERMISSION_DENIED carrying Kafka's code and name for the resource type."""
    code, err = _DENIED.get(resource_type, (31, "CLUSTER_AUTHORIZATION_FAILED"))
    return GatewayError(Reason.PERMISSION_DENIED,
                        f"{err}: not authorized to {operation} {resource_type.lower()} {name!r}",
                        code, err)


@dataclass(frozen=True)
class UserLogin:
    """How callers' user names and passwords become Kafka logins: SASL `mechanism` at
    `bootstrap`, over `security`'s protocol (SASL_PLAINTEXT or SASL_SSL) and TLS trust;
    the caller's name and password replace any credentials `security` carries."""

    bootstrap: str
    security: ClientSecurity
    mechanism: str = "SCRAM-SHA-512"
    verify_interval_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.security.uses_sasl:
            raise ValueError("logging users in needs a SASL_PLAINTEXT or SASL_SSL connection "
                             f"to the cluster, not {self.security.security_protocol}")
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"invalid SASL mechanism {self.mechanism!r} for user logins: "
                             "expected one of " + ", ".join(MECHANISMS))

    def for_user(self, user: str, password: str) -> ClientSecurity:
        return dataclasses.replace(self.security, sasl_mechanism=self.mechanism,
                                   username=user, password=password)


@dataclass
class Caller:
    """One caller: its Kafka principal and the core whose clients act for it.

    `acls` is set only when the gateway acts for the caller with its own credentials
    (mTLS callers); then `require` checks the cluster's ACLs before acting. For callers
    logged in as themselves `require` does nothing: the cluster checks every request.
    """

    principal: str
    core: GatewayCore
    host: str = ""
    acls: ActingAcls | None = None
    authenticated: bool = False

    async def require(self, operation: str, resource_type: str, name: str) -> None:
        if self.acls is not None and not await self.acls.allows(
                self.principal, self.host, operation, resource_type, name):
            raise denied(resource_type, name, operation)

    async def may(self, operation: str, resource_type: str, name: str) -> bool:
        if self.acls is None:
            return True
        return await self.acls.allows(self.principal, self.host, operation, resource_type, name)

    async def topic(self, name: str, create: bool = False) -> Any:
        """`core.topic`, with Kafka's CREATE check before an acting caller's auto-create."""
        if self.acls is not None and create:
            try:
                return await self.core.topic(name)
            except GatewayError as e:
                if e.reason is not Reason.TOPIC_NOT_FOUND:
                    raise
            if not (await self.may("CREATE", "CLUSTER", "kafka-cluster")
                    or await self.may("CREATE", "TOPIC", name)):
                raise denied("TOPIC", name, "CREATE")
        return await self.core.topic(name, create=create)


@dataclass
class _Entry:
    caller: Caller
    digest: bytes = b""
    verified_until: float = 0.0
    last_used: float = 0.0


class Callers:
    """The callers of one gateway, each with its core (see the module docstring)."""

    def __init__(self, service: GatewayCore, login: UserLogin | None = None,
                 idle_s: float = DEFAULT_IDLE_S) -> None:
        self.service = service  # the gateway's own core: unauthenticated callers use it
        self.login_config = login
        self.idle_s = idle_s
        self.gateway = Caller(GATEWAY_PRINCIPAL, service)
        self.acls = ActingAcls(service.cluster)
        self._users: dict[str, _Entry] = {}
        self._acting: dict[str, _Entry] = {}
        self._pending: dict[tuple[str, bytes], asyncio.Future[Caller]] = {}
        self._key = os.urandom(32)  # passwords are compared as keyed digests, never kept
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False

    # ---------------------------------------------------------------- user logins

    async def login(self, user: str, password: str) -> Caller:
        """The caller for `user`, after the cluster accepted `password` (UNAUTHENTICATED
        otherwise, UNAVAILABLE when the cluster cannot be reached)."""
        if self.login_config is None:
            raise GatewayError(Reason.UNAUTHENTICATED, "this gateway does not log users in")
        if not user:
            raise GatewayError(Reason.UNAUTHENTICATED, "empty user name")
        digest = hmac.new(self._key, password.encode(), hashlib.sha256).digest()
        now = time.monotonic()
        entry = self._users.get(user)
        if (entry is not None and now < entry.verified_until
                and hmac.compare_digest(entry.digest, digest)):
            entry.last_used = now
            return entry.caller
        key = (user, digest)
        pending = self._pending.get(key)
        if pending is None:  # concurrent first requests of one user share one login
            pending = asyncio.ensure_future(self._verify(user, password, digest))
            self._pending[key] = pending
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        return await asyncio.shield(pending)

    async def _verify(self, user: str, password: str, digest: bytes) -> Caller:
        login = self.login_config
        assert login is not None
        security = login.for_user(user, password)
        await sasl_login(login.bootstrap, security, self.service.settings.request_timeout_s)
        now = time.monotonic()
        entry = self._users.get(user)
        if entry is not None and hmac.compare_digest(entry.digest, digest):
            entry.verified_until = now + login.verify_interval_s
            entry.last_used = now
            return entry.caller
        if entry is not None:  # a new password: the old clients would fail to reconnect
            asyncio.ensure_future(_close_quietly(entry.caller.core))
        settings = dataclasses.replace(self.service.settings, bootstrap=login.bootstrap,
                                       security=security)
        core = GatewayCore(settings, formats=self.service.formats)
        caller = Caller(f"User:{user}", core, authenticated=True)
        self._users[user] = _Entry(caller, digest, now + login.verify_interval_s, now)
        self._start_reaper()
        return caller

    # ---------------------------------------------------------------- acting callers

    def acting(self, principal: str, host: str) -> Caller:
        """A caller the gateway acts for with its own credentials (an mTLS certificate's
        principal): its own core and sessions, the cluster's ACLs checked by `require`."""
        entry = self._acting.get(principal)
        now = time.monotonic()
        if entry is None:
            core = GatewayCore(self.service.settings, formats=self.service.formats)
            entry = _Entry(Caller(principal, core, host, self.acls, True), last_used=now)
            self._acting[principal] = entry
            self._start_reaper()
        entry.last_used = now
        if entry.caller.host == host:
            return entry.caller
        return dataclasses.replace(entry.caller, host=host)

    # ---------------------------------------------------------------- lifecycle

    def _start_reaper(self) -> None:
        if self._reaper is None and not self._closed:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_loop())

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(min(REAP_EVERY_S, self.idle_s))
            try:
                await self.reap()
            except Exception:
                log.exception("closing idle gateway callers failed")

    async def reap(self, now: float | None = None) -> int:
        """Close the cores idle for `idle_s` that hold no consumer or queue session."""
        now = time.monotonic() if now is None else now
        closed = 0
        for table in (self._users, self._acting):
            for name, entry in list(table.items()):
                sessions = entry.caller.core.sessions
                queues = entry.caller.core.share_sessions
                if (now - entry.last_used > self.idle_s and not sessions.instances
                        and not sessions.streams and not queues.instances
                        and not queues.streams):
                    del table[name]
                    await _close_quietly(entry.caller.core)
                    closed += 1
        return closed

    async def close(self) -> None:
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        for table in (self._users, self._acting):
            for entry in table.values():
                await _close_quietly(entry.caller.core)
            table.clear()

    def __len__(self) -> int:
        return len(self._users) + len(self._acting)


def callers_of(core: GatewayCore) -> Callers:
    """The callers of the gateway whose own core is `core` (made on first use)."""
    if core.callers is None:
        core.callers = Callers(core, core.settings.user_login)
    return core.callers  # type: ignore[no-any-return]


async def _close_quietly(core: GatewayCore) -> None:
    try:
        await core.close()
    except Exception:
        log.exception("closing a caller's gateway core failed")


# ------------------------------------------------------------------ acting on the ACLs


class ActingAcls:
    """The cluster's ACLs, read by the gateway's own principal, evaluated with the
    broker's `StandardAuthorizer` for principals the gateway acts for.

    Read at most every `ACL_REFRESH_S` while in use (one refresh at a time): a revoked ACL
    stops an acting caller within about a second. A cluster without an authorizer
    (DescribeAcls answers SECURITY_DISABLED) allows everything, as it would.
    """

    def __init__(self, cluster: ClusterClient, refresh_s: float = ACL_REFRESH_S) -> None:
        self.cluster = cluster
        self.refresh_s = refresh_s
        self._authorizer: Any = None
        self._disabled = False
        self._read_at = -1e9
        self._lock = asyncio.Lock()

    async def allows(self, principal: str, host: str, operation: str, resource_type: str,
                     name: str) -> bool:
        from yak.security.acl import AclOperation, ResourceType
        from yak.security.principal import parse_principal

        authorizer = await self._current()
        if authorizer is None:
            return True
        return bool(authorizer.authorize(parse_principal(principal), host,
                                         AclOperation[operation], ResourceType[resource_type],
                                         name, log_if_denied=False))

    async def _current(self) -> Any:
        if time.monotonic() - self._read_at < self.refresh_s:
            return None if self._disabled else self._authorizer
        async with self._lock:
            if time.monotonic() - self._read_at >= self.refresh_s:
                await self._refresh()
        return None if self._disabled else self._authorizer

    async def _refresh(self) -> None:
        from yak.security.authorizer import MemoryAclStore, StandardAuthorizer
        from yak.security.principal import parse_super_users

        try:
            bindings = await self.cluster.describe_acls()
        except ClusterError as e:
            if e.name != "SECURITY_DISABLED":
                raise from_cluster_error(e) from None
            self._disabled, self._read_at = True, time.monotonic()
            return
        try:
            configs = await self.cluster.broker_configs(
                ("super.users", "allow.everyone.if.no.acl.found"))
        except ClusterError as e:
            raise from_cluster_error(e) from None
        authorizer = StandardAuthorizer(
            MemoryAclStore(_yak_bindings(bindings)),
            super_users=parse_super_users(configs.get("super.users")),
            allow_everyone_if_no_acl_found=(
                (configs.get("allow.everyone.if.no.acl.found") or "false").lower() == "true"),
        )
        authorizer.load()
        self._authorizer, self._disabled, self._read_at = authorizer, False, time.monotonic()


def _yak_bindings(bindings: Iterable[Any]) -> list[Any]:
    """confluent-kafka AclBindings -> yak.security.acl ones (the enums share Kafka's codes)."""
    from yak.security.acl import AccessControlEntry, AclBinding, ResourcePattern

    return [
        AclBinding(
            ResourcePattern.from_wire(int(b.restype.value), b.name, int(b.resource_pattern_type.value)),
            AccessControlEntry.from_wire(b.principal, b.host, int(b.operation.value),
                                         int(b.permission_type.value)),
        )
        for b in bindings
    ]


# ------------------------------------------------------------------ one SASL login


async def sasl_login(bootstrap: str, security: ClientSecurity, timeout_s: float) -> None:
    """Log in once as `security`'s user on the first bootstrap server that answers, then
    hang up (`yak.security.client.open_connection`: TLS, SaslHandshake, SaslAuthenticate).

    UNAUTHENTICATED with the broker's message for refused credentials (after the broker's
    failed-login delay), UNAVAILABLE when no server can be reached. Asyncio, not a thread:
    a flood of bad logins waits on the broker's delays without holding executor threads.
    """
    from yak.client.aio import open_connection
    from yak.errors import SaslAuthenticationError, UnsupportedSaslMechanismError

    last: Exception | None = None
    for host, port in _servers(bootstrap):
        try:
            _, writer = await open_connection(host, port, security, timeout_s,
                                              "yak-gateway-login")
        except SaslAuthenticationError as e:
            raise GatewayError(Reason.UNAUTHENTICATED, f"SASL_AUTHENTICATION_FAILED: {e}",
                               58, "SASL_AUTHENTICATION_FAILED") from None
        except UnsupportedSaslMechanismError as e:
            raise GatewayError(Reason.UNAUTHENTICATED, f"UNSUPPORTED_SASL_MECHANISM: {e}",
                               33, "UNSUPPORTED_SASL_MECHANISM") from None
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ssl.SSLError) as e:
            last = e
            continue
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1)
        return
    raise GatewayError(Reason.UNAVAILABLE,
                       f"Kafka cluster unreachable: cannot log in at {bootstrap}: {last!r}",
                       -195, "_TRANSPORT")


def _servers(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        if port.isdigit():
            out.append((host.strip("[]") or "127.0.0.1", int(port)))
    return out


__all__ = ["ActingAcls", "Caller", "Callers", "UserLogin", "callers_of", "denied", "sasl_login"]
