"""The object store the remote log lives in, over `obstore` (one async client for S3 and
`file://`): the few operations the remote log manager needs, each a coroutine that never
blocks the event loop (obstore runs the I/O on its own Rust runtime).

Why these and no more: segments are written once (`put_file`, multipart for big ones) and
read by ranges (`get_range`); manifests are written with `create_only` (S3's conditional
`If-None-Match: *`, a hard link on a local disk), which is what keeps two leaders from both
committing the same manifest version. Every failure of the store is `RemoteStorageError`
(Kafka's RemoteStorageException), so callers handle one type.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, NotFoundError, PreconditionError
from obstore.store import LocalStore, S3Store

__all__ = ["ObjectNotFoundError", "PresignUnsupportedError", "RemoteStorageError", "RemoteStore",
           "StoreUri", "parse_uri"]


class RemoteStorageError(Exception):
    """The store failed or is unreachable (retriable: uploads back off, fetches answer
    KAFKA_STORAGE_ERROR)."""


class ObjectNotFoundError(RemoteStorageError):
    """An object the manifest names is missing."""


class PresignUnsupportedError(RemoteStorageError):
    """The store cannot hand out presigned URLs (a `file://` store: there is no URL a
    reader elsewhere could use). Not retriable."""


@dataclass(frozen=True)
class StoreUri:
    """`remote.storage.uri`, parsed: scheme `s3` or `file`, bucket (s3), key prefix,
    endpoint and region (s3 query parameters)."""

    scheme: str
    bucket: str
    prefix: str
    endpoint: str | None = None
    region: str | None = None
    path: str = ""  # file:// root


def parse_uri(uri: str) -> StoreUri:
    """Raise ValueError (one line) for anything but `s3://BUCKET[/PREFIX][?...]` or
    `file:///PATH`."""
    parts = urlsplit(uri.strip())
    if parts.scheme == "file":
        if parts.netloc or not parts.path.startswith("/"):
            raise ValueError(f"remote.storage.uri {uri!r}: expected file:///ABSOLUTE/PATH")
        return StoreUri("file", "", "", path=parts.path.rstrip("/") or "/")
    if parts.scheme == "s3" and parts.netloc:
        q = parse_qs(parts.query)
        unknown = set(q) - {"endpoint", "region"}
        if unknown:
            raise ValueError(f"remote.storage.uri {uri!r}: unknown parameter"
                             f" {sorted(unknown)[0]!r} (endpoint, region)")
        return StoreUri("s3", parts.netloc, parts.path.strip("/"),
                        endpoint=q.get("endpoint", [None])[0],
                        region=q.get("region", [None])[0])
    raise ValueError(f"remote.storage.uri {uri!r}: expected s3://BUCKET[/PREFIX]"
                     "[?endpoint=URL&region=R] or file:///PATH")


EXIT_GRACE_S = 0.1
_exit_grace_registered = False


def _exit_grace_once() -> None:
    """At interpreter exit, wait `EXIT_GRACE_S` before finalization begins, once per
    process that made a store.

    Why: obstore completes a Python future from a tokio worker thread, through the
    asyncio loop's `call_soon_threadsafe`, whose self-pipe write releases the GIL. The
    result is queued before that write, so the main thread can see it, finish and start
    finalizing while the worker is still in the write; the worker then takes the GIL of a
    finalizing interpreter, CPython 3.11 ends the thread with `pthread_exit`, and the
    forced unwind through Rust frames aborts the process (SIGABRT after `yak tiered
    status` printed its answer: about 1 run in 20 on this machine, gdb showed the
    worker in `take_gil` under `sock_send`). An atexit handler runs before finalization,
    with the GIL released while it sleeps, so the worker finishes its write first: 0
    aborts in 200 runs with it."""
    global _exit_grace_registered
    if not _exit_grace_registered:
        _exit_grace_registered = True
        atexit.register(time.sleep, EXIT_GRACE_S)


class RemoteStore:
    """One bucket (or directory) and key prefix. Keys given to the methods are relative
    to the prefix."""

    def __init__(self, uri: StoreUri, credentials: Mapping[str, str | None] | None = None,
                 request_timeout_s: float = 10.0) -> None:
        _exit_grace_once()
        self.uri = uri
        self.prefix = uri.prefix
        self._store: Any
        if uri.scheme == "file":
            os.makedirs(uri.path, exist_ok=True)
            self._store = LocalStore(uri.path, mkdir=True)
            self.describe = f"file://{uri.path}"
            return
        creds = dict(credentials or {})
        key_id = creds.get("access_key_id") or os.environ.get("AWS_ACCESS_KEY_ID")
        secret = creds.get("secret_access_key") or os.environ.get("AWS_SECRET_ACCESS_KEY")
        kwargs: dict[str, Any] = {}
        if key_id and secret:
            kwargs.update(access_key_id=key_id, secret_access_key=secret)
            token = creds.get("session_token") or os.environ.get("AWS_SESSION_TOKEN")
            if token:
                kwargs["session_token"] = token
        region = uri.region or os.environ.get("AWS_REGION") or os.environ.get(
            "AWS_DEFAULT_REGION") or "us-east-1"
        client: dict[str, Any] = {"timeout": timedelta(seconds=request_timeout_s),
                                  "connect_timeout": timedelta(seconds=2)}
        # No SHA-256 of every uploaded byte for the request signature (S3's UNSIGNED-PAYLOAD):
        # it cost the broker's two cores more than the upload itself, and the data is
        # checked end to end anyway (every batch's CRC32C, every index's CRC32C in the
        # manifest, read back before anything is served); on AWS the channel is TLS.
        kwargs["unsigned_payload"] = True
        if uri.endpoint:
            kwargs["endpoint"] = uri.endpoint
            kwargs["virtual_hosted_style_request"] = False
            if uri.endpoint.startswith("http://"):
                client["allow_http"] = True
        # Few, short retries: the remote log manager has its own backoff, and a Fetch must
        # answer within remote.fetch.max.wait.ms.
        retry = {"max_retries": 2, "retry_timeout": timedelta(seconds=request_timeout_s),
                 "backoff": {"init_backoff": timedelta(milliseconds=50),
                             "max_backoff": timedelta(seconds=1), "base": 2.0}}
        self._store = S3Store(uri.bucket, region=region, client_options=client,
                              retry_config=retry, **kwargs)
        self.describe = f"s3://{uri.bucket}/{uri.prefix}"

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    async def put_file(self, rel: str, path: str) -> None:
        """Upload a local file (multipart when large)."""
        try:
            await obstore.put_async(self._store, self.key(rel), Path(path),
                                    chunk_size=8 * 1024 * 1024, max_concurrency=4)
        except (BaseError, OSError) as e:
            raise RemoteStorageError(f"upload of {rel} failed: {_line(e)}") from e

    async def put_bytes(self, rel: str, data: bytes) -> None:
        try:
            await obstore.put_async(self._store, self.key(rel), data)
        except (BaseError, OSError) as e:
            raise RemoteStorageError(f"write of {rel} failed: {_line(e)}") from e

    async def create_only(self, rel: str, data: bytes) -> bool:
        """Write `rel` only if no object has that key; False if one does (someone else
        committed that manifest version first)."""
        try:
            await obstore.put_async(self._store, self.key(rel), data, mode="create")
        except (AlreadyExistsError, PreconditionError, FileExistsError):
            return False
        except (BaseError, OSError) as e:
            raise RemoteStorageError(f"conditional write of {rel} failed: {_line(e)}") from e
        return True

    async def get(self, rel: str) -> bytes:
        try:
            result = await obstore.get_async(self._store, self.key(rel))
            return bytes(await result.bytes_async())
        except (NotFoundError, FileNotFoundError) as e:
            raise ObjectNotFoundError(f"{rel} is missing from {self.describe}") from e
        except (BaseError, OSError) as e:
            raise RemoteStorageError(f"read of {rel} failed: {_line(e)}") from e

    async def get_range(self, rel: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of an object."""
        try:
            return bytes(await obstore.get_range_async(self._store, self.key(rel),
                                                       start=start, end=end))
        except (NotFoundError, FileNotFoundError) as e:
            raise ObjectNotFoundError(f"{rel} is missing from {self.describe}") from e
        except (BaseError, OSError) as e:
            raise RemoteStorageError(f"ranged read of {rel} failed: {_line(e)}") from e

    async def list(self, rel_prefix: str) -> list[tuple[str, int]]:
        """(relative key, size) of every object under `rel_prefix`."""
        full = self.key(rel_prefix)
        cut = len(self.prefix) + 1 if self.prefix else 0
        out: list[tuple[str, int]] = []
        try:
            async for chunk in obstore.list(self._store, full):
                out += [(m["path"][cut:], int(m["size"])) for m in chunk]
        except (BaseError, OSError) as e:
            raise RemoteStorageError(f"listing {rel_prefix} failed: {_line(e)}") from e
        return out

    async def list_objects(self, rel_prefix: str) -> list[tuple[str, int, int]]:
        """(relative key, size, last modified in epoch ms) of every object under
        `rel_prefix`: the orphan sweep keeps objects younger than its grace period."""
        full = self.key(rel_prefix)
        cut = len(self.prefix) + 1 if self.prefix else 0
        out: list[tuple[str, int, int]] = []
        try:
            async for chunk in obstore.list(self._store, full):
                out += [(m["path"][cut:], int(m["size"]),
                         int(m["last_modified"].timestamp() * 1000)) for m in chunk]
        except (BaseError, OSError) as e:
            raise RemoteStorageError(f"listing {rel_prefix} failed: {_line(e)}") from e
        return out

    async def list_dirs(self, rel_prefix: str = "") -> list[str]:
        """The "directories" right under `rel_prefix` (relative keys, no trailing slash):
        how a reader without a broker (Spark's direct read) finds `<topic>-<topic id>`
        without listing every segment object."""
        rel = rel_prefix.strip("/")
        full = self.key(rel) if rel else (self.prefix or None)
        cut = len(self.prefix) + 1 if self.prefix else 0
        try:
            res = await obstore.list_with_delimiter_async(self._store, full)
        except (BaseError, OSError) as e:
            raise RemoteStorageError(f"listing {rel_prefix or '/'} failed: {_line(e)}") from e
        return [str(p)[cut:].rstrip("/") for p in res["common_prefixes"]]

    async def presign(self, rel_keys: Sequence[str], expires_s: float) -> list[str]:
        """A presigned GET URL for each key (S3's query-string SigV4), valid `expires_s`
        seconds: who holds one reads that object, ranged GETs included, without the
        store's keys (Spark's `tiered.presign`, docs/tiered.md). All keys in one call:
        signing is local HMAC work (no request to the store with static keys).
        `PresignUnsupportedError` for a `file://` store."""
        if self.uri.scheme != "s3":
            raise PresignUnsupportedError(
                f"{self.describe} cannot be presigned: presigned URLs need an S3 store")
        if not rel_keys:
            return []
        try:
            urls = await obstore.sign_async(self._store, "GET",
                                            [self.key(r) for r in rel_keys],
                                            timedelta(seconds=expires_s))
        except (BaseError, OSError, ValueError) as e:
            raise RemoteStorageError(f"presigning {rel_keys[0]} failed: {_line(e)}") from e
        return list(urls)

    async def delete(self, rels: list[str]) -> None:
        """Delete objects; one already gone is not an error (deletes are retried)."""
        async def one(rel: str) -> None:
            try:
                await obstore.delete_async(self._store, self.key(rel))
            except (NotFoundError, FileNotFoundError):
                return
            except (BaseError, OSError) as e:
                raise RemoteStorageError(f"delete of {rel} failed: {_line(e)}") from e
        for i in range(0, len(rels), 16):
            await asyncio.gather(*(one(r) for r in rels[i:i + 16]))

    async def check(self) -> None:
        """Start-up check: list the prefix and write, read and delete a probe object, so
        a wrong bucket, endpoint or credentials is one line at start-up, not at the first
        upload."""
        await self.list("")
        probe = f".yak-probe-{os.getpid()}"
        await self.put_bytes(probe, b"yak")
        if await self.get(probe) != b"yak":
            raise RemoteStorageError(f"{self.describe} returned other bytes than written")
        await self.delete([probe])


def _line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"
