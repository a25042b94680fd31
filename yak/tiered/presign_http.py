"""Remote segment objects read through presigned URLs (Spark's `tiered.presign`): plain
HTTP GETs with Range headers, no store keys.

`PresignedObjects` offers the two read calls of `RemoteStore` that the segment readers use
(`get`, `get_range`, keyed by the same relative object keys), so `RemoteSegmentReader`
(`.index`, `.txnindex`) and Spark's executor-side reader (`yak/spark/tiered_read.py`) run
unchanged over either: the bytes, their checks (every batch's CRC32C, every index's CRC32C
from the manifest) and the decoding are the same as with credentials.

What the store answers is mapped as `RemoteStore` maps its failures: 404 is
`ObjectNotFoundError` (the segment was deleted after planning: failOnDataLoss decides),
403 is `PresignedUrlRefusedError` with the store's reason, anything else
`RemoteStorageError`.

A 403 (on S3 and SeaweedFS: AccessDenied, "Request has expired", once a URL is past its
expiry; or a URL signed with keys the store no longer takes) is answered by asking for
fresh URLs once, when the reader was given a way to (`reask`: Spark's executors ask the
gateway again, yak/spark/tiered_read.py), and the GET is retried with the fresh URL. Only a
second refusal, or a re-ask that fails, fails the read, in one line. The re-ask goes to the
same gateway, as the same user, so what a task reads is authorized again, never widened.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping

import httpx

from yak.tiered.store import ObjectNotFoundError, RemoteStorageError

__all__ = ["PresignedObjects", "PresignedUrlRefusedError"]

_S3_ERROR = re.compile(r"<Code>([^<]*)</Code>(?:.*?<Message>([^<]*)</Message>)?", re.S)


class PresignedUrlRefusedError(RemoteStorageError):
    """The store refused a presigned URL (403): expired, or signed with keys it no longer
    takes. Not retriable with the same URL."""


# Fresh URLs for the objects of the segment that holds a key: key -> URL, the key among
# them unless its segment is gone (then `ObjectNotFoundError`, or the key left out).
Reask = Callable[[str], Awaitable[Mapping[str, str]]]


class PresignedObjects:
    """Objects by relative key, each read through its presigned GET URL; a refused URL is
    re-asked once through `reask` (when given) and the GET retried."""

    def __init__(self, urls: Mapping[str, str], timeout_s: float = 30.0,
                 reask: Reask | None = None) -> None:
        self.urls = dict(urls)
        self._reask = reask
        # One re-ask at a time: reads in flight on the same segment (a range ahead, its
        # `.index`) all expire together, and the first re-ask renews them all.
        self._reask_lock: asyncio.Lock | None = None
        self.describe = "presigned URLs"
        # Made on first use, on the loop that uses it (an AsyncClient belongs to one loop).
        self._client: httpx.AsyncClient | None = None
        self._timeout_s = timeout_s

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self._timeout_s, connect=5.0), follow_redirects=False,
                limits=httpx.Limits(max_connections=8, max_keepalive_connections=8))
        return self._client

    async def get(self, rel: str) -> bytes:
        return await self._get(rel, None)

    async def get_range(self, rel: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of an object."""
        if end <= start:
            return b""
        return await self._get(rel, (start, end))

    async def _get(self, rel: str, span: tuple[int, int] | None) -> bytes:
        url = self.urls.get(rel)
        if url is None:
            raise RemoteStorageError(f"no presigned URL for {rel} in this task's plan")
        try:
            return await self._get_url(rel, url, span)
        except PresignedUrlRefusedError as first:
            if self._reask is None:
                raise
            fresh = await self._renewed(rel, url, first)
        try:
            return await self._get_url(rel, fresh, span)
        except PresignedUrlRefusedError as again:
            raise PresignedUrlRefusedError(f"{again} (again with a fresh URL from the"
                                           " gateway)") from None

    async def _renewed(self, rel: str, stale: str, refusal: PresignedUrlRefusedError) -> str:
        """A fresh URL for `rel`: asked through `reask`, unless another read renewed it
        while this one waited. ObjectNotFoundError when its segment is gone."""
        assert self._reask is not None
        if self._reask_lock is None:
            self._reask_lock = asyncio.Lock()
        async with self._reask_lock:
            if self.urls.get(rel) == stale:
                try:
                    got = await self._reask(rel)
                except ObjectNotFoundError:
                    raise
                except RemoteStorageError as e:
                    raise PresignedUrlRefusedError(f"{refusal}; fresh URLs could not be"
                                                   f" asked: {e}") from None
                self.urls.update(got)
                if rel not in got:
                    self.urls.pop(rel, None)
            url = self.urls.get(rel)
        if url is None:
            raise ObjectNotFoundError(f"{rel} is no longer in the remote log (the gateway's"
                                      " fresh answer does not list its segment)")
        return url

    async def _get_url(self, rel: str, url: str, span: tuple[int, int] | None) -> bytes:
        headers = {"Range": f"bytes={span[0]}-{span[1] - 1}"} if span else None
        try:
            r = await self._http().get(url, headers=headers)
        except httpx.HTTPError as e:
            raise RemoteStorageError(f"read of {rel} through its presigned URL failed:"
                                     f" {type(e).__name__}: {e}") from e
        if r.status_code == 206 or (r.status_code == 200 and span is None):
            return r.content
        if r.status_code == 200:
            raise RemoteStorageError(f"read of {rel}: the store ignored the Range header")
        code, message = _reason(r)
        if r.status_code == 404:
            raise ObjectNotFoundError(f"{rel} is missing from the bucket ({code})")
        if r.status_code == 403:
            hint = (" (URLs are valid tiered.presign.expires from when they were asked:"
                    " raise tiered.presign.expires up to 7d)"
                    if "expired" in message.lower() else "")
            raise PresignedUrlRefusedError(f"{rel}: the store refused its presigned URL"
                                           f" (403 {code}: {message}){hint}")
        raise RemoteStorageError(f"read of {rel} through its presigned URL: HTTP"
                                 f" {r.status_code} {code}: {message}")

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _reason(r: httpx.Response) -> tuple[str, str]:
    """(S3 error code, message) of an error answer, else the HTTP reason."""
    m = _S3_ERROR.search(r.text[:4096])
    if m:
        return m.group(1), (m.group(2) or "").strip()
    return r.reason_phrase or str(r.status_code), ""
