"""Remote segment objects read through presigned URLs (Spark's `tiered.presign`): plain
HTTP GETs with Range headers, no store keys.

`PresignedObjects` offers the two read calls of `RemoteStore` that the segment readers use
(`get`, `get_range`, keyed by the same relative object keys), so `RemoteSegmentReader`
(`.index`, `.txnindex`) and Spark's executor-side reader (`yak/spark/tiered_read.py`) run
unchanged over either: the bytes, their checks (every batch's CRC32C, every index's CRC32C
from the manifest) and the decoding are the same as with credentials.

What the store answers is mapped as `RemoteStore` maps its failures: 404 is
`ObjectNotFoundError` (the segment was deleted after planning: failOnDataLoss decides),
403 is `PresignedUrlRefusedError` with the store's reason (an expired URL says so: the
task fails with one line naming the option to raise; URLs are not re-asked mid-task, so
what a task reads was authorized once, at planning), anything else `RemoteStorageError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import httpx

from yak.tiered.store import ObjectNotFoundError, RemoteStorageError

__all__ = ["PresignedObjects", "PresignedUrlRefusedError"]

_S3_ERROR = re.compile(r"<Code>([^<]*)</Code>(?:.*?<Message>([^<]*)</Message>)?", re.S)


class PresignedUrlRefusedError(RemoteStorageError):
    """The store refused a presigned URL (403): expired, or signed with keys it no longer
    takes. Not retriable with the same URL."""


class PresignedObjects:
    """Objects by relative key, each read through its presigned GET URL."""

    def __init__(self, urls: Mapping[str, str], timeout_s: float = 30.0) -> None:
        self.urls = dict(urls)
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
            hint = (" (URLs are valid tiered.presign.expires from planning: re-run the query,"
                    " or raise tiered.presign.expires up to 7d)"
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
