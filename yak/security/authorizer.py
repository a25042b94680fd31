"""The authorizer: Kafka's StandardAuthorizer semantics over an `AclStore`.

Why these rules, in Kafka's words and order:
1. A principal listed in `super.users` may do anything (even against DENY ACLs).
2. The ACLs that apply to a resource are the LITERAL ones with its exact name, the PREFIXED
   ones whose name starts the resource's name, and the LITERAL `*` wildcard, all of the
   resource's type. Among those, an ACL applies to the request when its principal is the
   caller's or `User:*`, its host is the caller's IP or `*`, and its operation is the
   requested one or ALL -- or, for ALLOW ACLs only, an operation that implies it (READ,
   WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS).
3. Any applying DENY wins; else any applying ALLOW allows; else, if the resource has no ACLs
   at all (for anyone), `allow.everyone.if.no.acl.found` decides (default false); else deny.

`authorize()` is on the request path: it only reads an in-memory index (exact-name dict,
prefix dict probed at the lengths that exist, wildcard list), never the store. Changes go
to the store first (off the event loop) and reach the index once durable, so an ACL that
was acknowledged is enforced from the next request on, and one that could not be written
was never enforced.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from yak.errors import (
    ClusterAuthorizationFailedError,
    DelegationTokenAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from yak.security._files import atomic_write
from yak.security.acl import (
    WILDCARD_HOST,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    validate_filter,
    validate_new_acl,
)
from yak.security.principal import KafkaPrincipal, parse_super_users

__all__ = [
    "AUTHORIZER_CLASS_NAMES",
    "AclStore",
    "FileAclStore",
    "MemoryAclStore",
    "StandardAuthorizer",
    "authorization_error",
]

log = logging.getLogger("yak.security.authorizer")
audit = logging.getLogger("yak.security.authorizer.audit")

# `authorizer.class.name` values that select this authorizer: Kafka's KRaft class (what a
# Kafka server.properties says), its ZooKeeper-era predecessor, and Yak's short name.
AUTHORIZER_CLASS_NAMES = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
        "yak.StandardAuthorizer",
        "standard",
    }
)

_IMPLIES_DESCRIBE = frozenset(
    {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    }
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

_AUTHZ_ERRORS: dict[ResourceType, type[KafkaError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailedError,
    ResourceType.GROUP: GroupAuthorizationFailedError,
    ResourceType.CLUSTER: ClusterAuthorizationFailedError,
    ResourceType.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailedError,
    ResourceType.DELEGATION_TOKEN: DelegationTokenAuthorizationFailedError,
}


def authorization_error(resource_type: ResourceType, message: str = "") -> KafkaError:
    """The error Kafka answers when an operation on a resource of this type is denied
    (TOPIC 29, GROUP 30, CLUSTER 31, TRANSACTIONAL_ID 53, DELEGATION_TOKEN 65)."""
    cls = _AUTHZ_ERRORS.get(resource_type, ClusterAuthorizationFailedError)
    return cls(message)


# --------------------------------------------------------------------------- stores


class AclStore(Protocol):
    """Where ACLs live. Local file now; the cluster issue adds an etcd backend with the same
    two calls (and calls `StandardAuthorizer.on_store_change` from its watch)."""

    def load(self) -> list[AclBinding]:
        """Every stored binding (called once at start-up, blocking I/O allowed)."""
        ...

    def apply(self, add: Sequence[AclBinding], remove: Sequence[AclBinding]) -> None:
        """Make `add` present and `remove` absent, atomically and durably (blocking)."""
        ...


class MemoryAclStore:
    """A store that keeps nothing across restarts (tests, `allow-all` development brokers)."""

    def __init__(self, initial: Iterable[AclBinding] = ()) -> None:
        self._acls: set[AclBinding] = set(initial)

    def load(self) -> list[AclBinding]:
        return sorted(self._acls, key=_sort_key)

    def apply(self, add: Sequence[AclBinding], remove: Sequence[AclBinding]) -> None:
        self._acls.difference_update(remove)
        self._acls.update(add)


class FileAclStore:
    """ACLs in one JSON file (`<data dir>/__acls.json`), replaced atomically on each change:
    write a temporary file, fsync it, rename over the old one, fsync the directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._acls: set[AclBinding] | None = None

    def load(self) -> list[AclBinding]:
        if not self.path.exists():
            self._acls = set()
            return []
        try:
            acls = decode_acls(self.path.read_bytes())
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read ACL file {self.path}: {e}") from None
        self._acls = acls
        return sorted(acls, key=_sort_key)

    def apply(self, add: Sequence[AclBinding], remove: Sequence[AclBinding]) -> None:
        if self._acls is None:
            self.load()
        assert self._acls is not None
        new = (self._acls - set(remove)) | set(add)
        atomic_write(self.path, encode_acls(new))
        self._acls = new


def encode_acls(acls: Iterable[AclBinding]) -> bytes:
    """The stored form of a set of ACLs (the file's, and the cluster document's)."""
    doc = {"version": 1, "acls": [b.to_json() for b in sorted(acls, key=_sort_key)]}
    return json.dumps(doc, indent=1).encode()


def decode_acls(data: bytes) -> set[AclBinding]:
    """ValueError (one line) if `data` is not what `encode_acls` writes."""
    try:
        return {AclBinding.from_json(d) for d in json.loads(data)["acls"]}
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"not an ACL document: {e}") from None


def _sort_key(b: AclBinding) -> tuple:
    p, e = b.pattern, b.entry
    return (
        p.resource_type,
        p.name,
        p.pattern_type,
        e.principal,
        e.host,
        e.operation,
        e.permission_type,
    )


# --------------------------------------------------------------------------- index


@dataclass
class _Section:
    """The ACLs of one resource type, indexed for `authorize`."""

    literal: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefixed: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefix_lengths: list[int] = field(default_factory=list)  # sorted, distinct

    def add(self, b: AclBinding) -> None:
        table = self.literal if b.pattern.pattern_type == PatternType.LITERAL else self.prefixed
        table.setdefault(b.pattern.name, []).append(b)
        if b.pattern.pattern_type == PatternType.PREFIXED:
            self._relength()

    def remove(self, b: AclBinding) -> None:
        table = self.literal if b.pattern.pattern_type == PatternType.LITERAL else self.prefixed
        lst = table.get(b.pattern.name)
        if lst is None:
            return
        try:
            lst.remove(b)
        except ValueError:
            return
        if not lst:
            del table[b.pattern.name]
            if b.pattern.pattern_type == PatternType.PREFIXED:
                self._relength()

    def _relength(self) -> None:
        self.prefix_lengths = sorted({len(n) for n in self.prefixed})

    def candidates(self, name: str) -> list[list[AclBinding]]:
        """The ACL lists that apply to the literal resource `name`, by pattern."""
        out: list[list[AclBinding]] = []
        lst = self.literal.get(name)
        if lst:
            out.append(lst)
        n = len(name)
        for length in self.prefix_lengths:
            if length > n:
                break
            lst = self.prefixed.get(name[:length])
            if lst:
                out.append(lst)
        if name != WILDCARD_RESOURCE:
            lst = self.literal.get(WILDCARD_RESOURCE)
            if lst:
                out.append(lst)
        return out


def _acl_result(
    acl: AclBinding, principals: tuple[str, str], host: str, op: AclOperation
) -> AclPermissionType | None:
    """Kafka's `findResult`: does this ACL (whose resource already matches) apply, and how?"""
    e = acl.entry
    if e.principal != principals[0] and e.principal != principals[1]:
        return None
    if e.host != WILDCARD_HOST and e.host != host:
        return None
    if e.operation != AclOperation.ALL:
        if e.permission_type == AclPermissionType.ALLOW:
            if op == AclOperation.DESCRIBE:
                if e.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif op == AclOperation.DESCRIBE_CONFIGS:
                if e.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif e.operation != op:
                return None
        elif e.operation != op:
            return None
    return e.permission_type


_WILDCARD_PRINCIPAL_STR = "User:*"


class StandardAuthorizer:
    """Kafka's StandardAuthorizer: ACL checks, super users, and the CreateAcls/DescribeAcls/
    DeleteAcls semantics, with the ACLs kept in an `AclStore`."""

    def __init__(
        self,
        store: AclStore,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._sections: dict[ResourceType, _Section] = {}
        self._all: set[AclBinding] = set()
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(cls, settings: dict[str, str], store: AclStore) -> StandardAuthorizer:
        """Build from Kafka's settings (`super.users`, `allow.everyone.if.no.acl.found`);
        raises ValueError naming the key for a bad value."""
        from yak.security.settings import get_setting

        return cls(
            store,
            super_users=parse_super_users(get_setting(settings, "super.users")),
            allow_everyone_if_no_acl_found=get_setting(settings, "allow.everyone.if.no.acl.found"),
        )

    # ------------------------------------------------------------------ lifecycle

    def load(self) -> None:
        """Read every ACL from the store (blocking; call at start-up, before serving)."""
        self._sections.clear()
        self._all.clear()
        self.on_store_change(self.store.load(), ())

    async def start(self) -> None:
        await asyncio.to_thread(self.store.load)  # warm any store cache off the loop
        self.load()

    def on_store_change(self, added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> None:
        """Apply a change the store already made durable (also the etcd watch's entry point)."""
        for b in removed:
            if b in self._all:
                self._all.discard(b)
                self._sections[b.pattern.resource_type].remove(b)
        for b in added:
            if b not in self._all:
                self._all.add(b)
                self._sections.setdefault(b.pattern.resource_type, _Section()).add(b)

    # ------------------------------------------------------------------ checks

    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return str(principal) in self.super_users

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        log_if_denied: bool = True,
    ) -> bool:
        """May `principal` connecting from IP `host` do `operation` on the named resource?"""
        pstr = str(principal)
        if pstr in self.super_users:
            return True
        section = self._sections.get(resource_type)
        if section is None:
            allowed = self.allow_everyone_if_no_acl_found
            if not allowed and log_if_denied:
                self._audit(pstr, host, operation, resource_type, name, "no ACLs")
            return allowed
        principals = (pstr, _WILDCARD_PRINCIPAL_STR)
        found_allow = False
        has_acls = False
        for lst in section.candidates(name):
            has_acls = True
            for acl in lst:
                r = _acl_result(acl, principals, host, operation)
                if r is AclPermissionType.DENY:
                    if log_if_denied:
                        self._audit(pstr, host, operation, resource_type, name, f"DENY {acl}")
                    return False
                if r is AclPermissionType.ALLOW:
                    found_allow = True
        if found_allow:
            return True
        if not has_acls:
            allowed = self.allow_everyone_if_no_acl_found
            if not allowed and log_if_denied:
                self._audit(pstr, host, operation, resource_type, name, "no ACLs")
            return allowed
        if log_if_denied:
            self._audit(pstr, host, operation, resource_type, name, "no matching ALLOW")
        return False

    def authorize_by_resource_type(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """Kafka's `authorizeByResourceType`: may the principal do `operation` on at least one
        resource of this type? (InitProducerId without a transactional id asks this for
        WRITE on any TOPIC.) An ALLOW counts unless a DENY covers everything it allows."""
        if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(f"unknown resource type {resource_type.name}")
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError(f"unknown operation {operation.name}")
        # Super users, and allow.everyone when the type has no ACLs, through the normal path.
        if self.authorize(
            principal, host, operation, resource_type, "hardcode", log_if_denied=False
        ):
            return True
        pstr = str(principal)
        deny: dict[PatternType, set[str]] = {
            PatternType.LITERAL: set(),
            PatternType.PREFIXED: set(),
        }
        allow: dict[PatternType, set[str]] = {
            PatternType.LITERAL: set(),
            PatternType.PREFIXED: set(),
        }
        section = self._sections.get(resource_type)
        if section is None:
            return False
        for table in (section.literal, section.prefixed):
            for lst in table.values():
                for b in lst:
                    e = b.entry
                    if e.host != host and e.host != WILDCARD_HOST:
                        continue
                    if e.principal != pstr and e.principal != _WILDCARD_PRINCIPAL_STR:
                        continue
                    if e.operation != operation and e.operation != AclOperation.ALL:
                        continue
                    pt, n = b.pattern.pattern_type, b.pattern.name
                    if e.permission_type == AclPermissionType.DENY:
                        if pt == PatternType.LITERAL and n == WILDCARD_RESOURCE:
                            return False
                        deny[pt].add(n)
                    elif e.permission_type == AclPermissionType.ALLOW:
                        if pt == PatternType.LITERAL and n == WILDCARD_RESOURCE:
                            return True
                        allow[pt].add(n)
        for pt, names in allow.items():
            for n in names:
                if pt == PatternType.LITERAL and n in deny[PatternType.LITERAL]:
                    continue
                if any(n[:i] in deny[PatternType.PREFIXED] for i in range(1, len(n) + 1)):
                    continue
                return True
        return False

    def _audit(
        self, p: str, host: str, op: AclOperation, rt: ResourceType, name: str, rule: str
    ) -> None:
        if audit.isEnabledFor(logging.INFO):
            audit.info(
                "Principal = %s is Denied operation = %s from host = %s on resource = "
                "%s:LITERAL:%s based on rule %s",
                p,
                op.name,
                host,
                rt.name,
                name,
                rule,
            )

    # ------------------------------------------------------------------ ACL APIs

    def acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        """Every stored binding the filter matches (DescribeAcls; the filter is validated
        with `describe_acls`)."""
        return sorted((b for b in self._all if flt.matches(b)), key=_sort_key)

    def describe_acls(
        self, flt: AclBindingFilter, api_version: int | None = None
    ) -> list[AclBinding]:
        """DescribeAcls: raises InvalidRequestError/UnsupportedVersionError for a bad filter."""
        validate_filter(flt, api_version)
        return self.acls(flt)

    async def create_acls(
        self, bindings: Sequence[AclBinding], api_version: int | None = None
    ) -> list[KafkaError | None]:
        """CreateAcls: one result per binding (None = created or already present). Valid
        bindings are stored in one atomic write; if that write fails, each of them gets
        UNKNOWN_SERVER_ERROR and nothing is enforced."""
        results: list[KafkaError | None] = []
        new: list[AclBinding] = []
        for b in bindings:
            try:
                validate_new_acl(b, api_version)
            except KafkaError as e:
                results.append(e)
                continue
            results.append(None)
            if b not in self._all and b not in new:
                new.append(b)
        if not new:
            return results
        async with self._lock:
            new = [b for b in new if b not in self._all]
            try:
                await asyncio.to_thread(self.store.apply, new, ())
            except Exception as e:  # noqa: BLE001 - reported per binding, never enforced
                log.error("cannot store ACLs: %s", e)
                failed = set(new)
                err = KafkaError(f"cannot store ACLs: {e}")
                return [
                    err if (r is None and b in failed) else r
                    for b, r in zip(bindings, results, strict=True)
                ]
            self.on_store_change(new, ())
        return results

    async def delete_acls(
        self, filters: Sequence[AclBindingFilter], api_version: int | None = None
    ) -> list[list[AclBinding] | KafkaError]:
        """DeleteAcls: for each filter, the bindings it removed (or its error). All removals
        are one atomic store write."""
        async with self._lock:
            out: list[list[AclBinding] | KafkaError] = []
            doomed: set[AclBinding] = set()
            for f in filters:
                try:
                    validate_filter(f, api_version)
                except KafkaError as e:
                    out.append(e)
                    continue
                matched = self.acls(f)
                doomed.update(matched)
                out.append(matched)
            if doomed:
                try:
                    await asyncio.to_thread(self.store.apply, (), sorted(doomed, key=_sort_key))
                except Exception as e:  # noqa: BLE001
                    log.error("cannot store ACL deletion: %s", e)
                    err = KafkaError(f"cannot store ACL deletion: {e}")
                    return [err if isinstance(r, list) else r for r in out]
                self.on_store_change((), doomed)
            return out
