"""SCRAM credentials as Kafka stores them, the `CredentialStore` they live in, and the
DescribeUserScramCredentials / AlterUserScramCredentials (KIP-554) semantics.

A credential is (salt, stored key, server key, iterations) per user and mechanism -- never
the password. AlterUserScramCredentials carries the client-computed *salted* password; the
broker derives the stored and server keys from it (RFC 5802) and throws it away. Like
Kafka: 4096 <= iterations <= 16384, and no SASLprep (the password's UTF-8 bytes are used
as they are, so credentials made by Kafka's tools and by Yak agree).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from yak.errors import ErrorCode
from yak.security._files import atomic_write

__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "SCRAM_MECHANISMS",
    "CredentialStore",
    "FileCredentialStore",
    "MemoryCredentialStore",
    "ScramCredential",
    "ScramCredentialManager",
    "credential_from_salted_password",
    "derive_credential",
    "mechanism_name",
]

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384

# KIP-554's ScramMechanism type codes (AlterUserScramCredentials carries the int8).
SCRAM_MECHANISMS: dict[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_HASH = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}


def mechanism_name(code: int) -> str | None:
    for name, c in SCRAM_MECHANISMS.items():
        if c == code:
            return name
    return None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations}, keys hidden)"

    def to_json(self) -> dict[str, object]:
        b64 = base64.b64encode
        return {
            "salt": b64(self.salt).decode(),
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> ScramCredential:
        b = base64.b64decode
        return cls(
            b(str(d["salt"])),
            b(str(d["stored_key"])),
            b(str(d["server_key"])),
            int(d["iterations"]),
        )  # type: ignore[arg-type]


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key")),
    ServerKey = HMAC(SaltedPassword, "Server Key")."""
    h = _HASH[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", h).digest()
    return ScramCredential(
        salt=salt,
        stored_key=h(client_key).digest(),
        server_key=hmac.new(salted_password, b"Server Key", h).digest(),
        iterations=iterations,
    )


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) = PBKDF2-HMAC; the password's UTF-8 bytes as Kafka uses them."""
    h = _HASH[mechanism]
    return hashlib.pbkdf2_hmac(h().name, password.encode("utf-8"), salt, iterations)


def derive_credential(
    mechanism: str, password: str, *, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A credential for `password` (what `yak user create` stores)."""
    if mechanism not in _HASH:
        raise ValueError(f"unknown SCRAM mechanism {mechanism}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
    salt = os.urandom(32) if salt is None else salt
    sp = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salt, sp, iterations)


# --------------------------------------------------------------------------- stores

Key = tuple[str, str]  # (user, mechanism)


class CredentialStore(Protocol):
    """Where SCRAM credentials live: a local file now, etcd in a cluster (same calls; its
    watch keeps `get` current on every broker)."""

    def load(self) -> None:
        """Read everything (blocking; at start-up)."""
        ...

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        """From memory: called during each SCRAM login."""
        ...

    def all(self) -> dict[Key, ScramCredential]: ...

    def apply(self, upserts: Mapping[Key, ScramCredential], deletes: Iterable[Key]) -> None:
        """Atomically and durably upsert/delete (blocking; call off the event loop)."""
        ...


class MemoryCredentialStore:
    def __init__(self, initial: Mapping[Key, ScramCredential] | None = None) -> None:
        self._creds: dict[Key, ScramCredential] = dict(initial or {})

    def load(self) -> None:
        pass

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._creds.get((user, mechanism))

    def all(self) -> dict[Key, ScramCredential]:
        return dict(self._creds)

    def apply(self, upserts: Mapping[Key, ScramCredential], deletes: Iterable[Key]) -> None:
        for k in deletes:
            self._creds.pop(k, None)
        self._creds.update(upserts)


class FileCredentialStore(MemoryCredentialStore):
    """Credentials in one JSON file (mode 0600), replaced atomically on every change."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)

    def load(self) -> None:
        if not self.path.exists():
            self._creds = {}
            return
        try:
            creds = decode_credentials(self.path.read_bytes())
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read SCRAM credential file {self.path}: {e}") from None
        self._creds = creds

    def apply(self, upserts: Mapping[Key, ScramCredential], deletes: Iterable[Key]) -> None:
        new = merge_credentials(self._creds, upserts, deletes)
        atomic_write(self.path, encode_credentials(new), mode=0o600)
        self._creds = new


def merge_credentials(current: Mapping[Key, ScramCredential],
                      upserts: Mapping[Key, ScramCredential],
                      deletes: Iterable[Key]) -> dict[Key, ScramCredential]:
    new = dict(current)
    for k in deletes:
        new.pop(k, None)
    new.update(upserts)
    return new


def encode_credentials(creds: Mapping[Key, ScramCredential]) -> bytes:
    """The stored form (salted keys only, never a password): the file's and the cluster
    document's."""
    users: dict[str, dict[str, object]] = {}
    for (u, m), c in sorted(creds.items()):
        users.setdefault(u, {})[m] = c.to_json()
    return json.dumps({"version": 1, "users": users}, indent=1).encode()


def decode_credentials(data: bytes) -> dict[Key, ScramCredential]:
    """ValueError (one line) if `data` is not what `encode_credentials` writes."""
    try:
        return {
            (u, m): ScramCredential.from_json(c)
            for u, mechs in json.loads(data)["users"].items()
            for m, c in mechs.items()
        }
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"not a SCRAM credential document: {e}") from None


# --------------------------------------------------------------------------- KIP-554


@dataclass(frozen=True)
class DescribeResult:
    user: str
    error_code: int
    error_message: str | None
    credentials: tuple[tuple[int, int], ...]  # (mechanism code, iterations)


@dataclass(frozen=True)
class AlterResult:
    user: str
    error_code: int
    error_message: str | None


@dataclass(frozen=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:
        return f"ScramUpsertion({self.name!r}, {self.mechanism}, {self.iterations}, hidden)"


class ScramCredentialManager:
    """The two SCRAM credential APIs over a `CredentialStore`, with Kafka's rules and
    messages (ScramControlManager / ScramImage)."""

    def __init__(self, store: CredentialStore) -> None:
        self.store = store
        self._lock = asyncio.Lock()

    def describe(self, users: Sequence[str] | None) -> list[DescribeResult]:
        """Null or empty `users`: everyone with a credential."""
        creds = self.store.all()
        counts: dict[str, int] = {}
        if not users:
            for u, _ in creds:
                counts[u] = 1
        else:
            for u in users:
                counts[u] = counts.get(u, 0) + 1
        out: list[DescribeResult] = []
        for u, n in counts.items():
            if n > 1:
                out.append(
                    DescribeResult(
                        u,
                        ErrorCode.duplicate_resource,
                        f"Cannot describe SCRAM credentials for the same user twice in a single "
                        f"request: {u}",
                        (),
                    )
                )
                continue
            infos = tuple(
                sorted(
                    (SCRAM_MECHANISMS[m], c.iterations) for (cu, m), c in creds.items() if cu == u
                )
            )
            if infos:
                out.append(DescribeResult(u, ErrorCode.none, None, infos))
            else:
                out.append(
                    DescribeResult(
                        u,
                        ErrorCode.resource_not_found,
                        f"Attempt to describe a user credential that does not exist: {u}",
                        (),
                    )
                )
        return out

    async def alter(
        self, deletions: Sequence[tuple[str, int]], upsertions: Sequence[ScramUpsertion]
    ) -> list[AlterResult]:
        """All accepted changes are one atomic store write; a failed write fails them all."""
        async with self._lock:
            errors: dict[str, tuple[int, str]] = {}
            dels: dict[str, tuple[str, int]] = {}
            ups: dict[str, ScramUpsertion] = {}
            dup = (
                ErrorCode.duplicate_resource,
                "A user credential cannot be altered twice in the same request",
            )
            existing = self.store.all()
            for name, mech in deletions:
                if name in errors:
                    continue
                if dels.pop(name, None) is not None:
                    errors[name] = dup
                    continue
                err = _check_name_mech(name, mech)
                if err is None and (name, mechanism_name(mech)) not in existing:
                    err = (
                        ErrorCode.resource_not_found,
                        "Attempt to delete a user credential that does not exist",
                    )
                if err is not None:
                    errors[name] = err
                else:
                    dels[name] = (name, mech)
            for up in upsertions:
                if up.name in errors:
                    continue
                if dels.pop(up.name, None) is not None or ups.pop(up.name, None) is not None:
                    errors[up.name] = dup
                    continue
                err = _check_name_mech(up.name, up.mechanism)
                if err is None:
                    if up.iterations < MIN_ITERATIONS:
                        err = (ErrorCode.unacceptable_credential, "Too few iterations")
                    elif up.iterations > MAX_ITERATIONS:
                        err = (ErrorCode.unacceptable_credential, "Too many iterations")
                    elif not up.salt or not up.salted_password:
                        err = (ErrorCode.unacceptable_credential, "Empty salt or salted password")
                if err is not None:
                    errors[up.name] = err
                else:
                    ups[up.name] = up
            upserts = {
                (u.name, mechanism_name(u.mechanism)): credential_from_salted_password(
                    mechanism_name(u.mechanism), u.salt, u.salted_password, u.iterations
                )
                for u in ups.values()
            }
            deletes = [(n, mechanism_name(m)) for n, m in dels.values()]
            results = [AlterResult(n, ErrorCode.none, None) for n in dels]
            results += [AlterResult(n, ErrorCode.none, None) for n in ups]
            if upserts or deletes:
                try:
                    await asyncio.to_thread(self.store.apply, upserts, deletes)  # type: ignore[arg-type]
                except Exception as e:  # noqa: BLE001 - answered, nothing changed
                    results = [
                        AlterResult(
                            r.user, ErrorCode.unknown_server_error, f"cannot store credentials: {e}"
                        )
                        for r in results
                    ]
            results += [AlterResult(n, code, msg) for n, (code, msg) in errors.items()]
            return results


def _check_name_mech(name: str, mech: int) -> tuple[int, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism_name(mech) is None:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


__all__ += ["AlterResult", "DescribeResult", "ScramUpsertion", "salted_password"]
