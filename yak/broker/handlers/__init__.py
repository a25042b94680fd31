"""The handler registry: one module per Kafka API, discovered at import time.

Adding an API means adding a module here; no shared table needs editing, so several
engineers can add handlers at once and ApiVersions always advertises exactly what is
registered. A module exports:

    API_KEY: int
    MIN_VERSION: int
    MAX_VERSION: int
    async def handle(ctx: RequestContext, request) -> response | None

and optionally `decode_request(ctx, body: memoryview)` to replace kio's decoder (the
Produce hot path keeps records as memoryviews of the received frame).

A module that fails to import, lacks one of those names, claims an API key another module
has or supports no version kio knows stops the broker from starting (`HandlerLoadError`,
one line): an API silently missing from ApiVersions is a broken broker that looks healthy.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from yak.broker.context import RequestContext
from yak.protocol.kio_compat import known_versions

log = logging.getLogger(__name__)

Handle = Callable[[RequestContext, Any], Awaitable[Any]]


class HandlerLoadError(Exception):
    """A handler module cannot serve its API; the message is one line naming it."""


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    api_key: int
    min_version: int
    max_version: int
    handle: Handle
    decode_request: Callable[[RequestContext, memoryview], Any] | None
    module: ModuleType

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_registry: dict[int, HandlerSpec] | None = None


def _load_module(name: str) -> HandlerSpec:
    try:
        mod = importlib.import_module(f"{__name__}.{name}")
    except Exception as e:
        log.exception("handler module %s failed to import", name)
        raise HandlerLoadError(f"handler module {name} failed to import: {e!r}") from e
    try:
        api_key = int(mod.API_KEY)
        lo, hi = int(mod.MIN_VERSION), int(mod.MAX_VERSION)
        handle = mod.handle
    except AttributeError:
        raise HandlerLoadError(
            f"handler module {name} lacks API_KEY/MIN_VERSION/MAX_VERSION/handle"
        ) from None
    # Never advertise a version kio cannot decode/encode.
    kio_versions = known_versions(api_key)
    if kio_versions:
        lo = max(lo, kio_versions[0])
        hi = min(hi, kio_versions[-1])
    if lo > hi:
        raise HandlerLoadError(f"handler module {name} has no version kio supports")
    return HandlerSpec(api_key, lo, hi, handle, getattr(mod, "decode_request", None), mod)


def registry() -> dict[int, HandlerSpec]:
    """API key -> handler, loaded once; HandlerLoadError if any module cannot serve."""
    global _registry
    if _registry is None:
        found: dict[int, HandlerSpec] = {}
        for info in pkgutil.iter_modules(__path__):
            if info.name.startswith("_"):
                continue
            spec = _load_module(info.name)
            if spec.api_key in found:
                raise HandlerLoadError(
                    f"API key {spec.api_key} claimed by {found[spec.api_key].module.__name__}"
                    f" and {spec.module.__name__}"
                )
            found[spec.api_key] = spec
        _registry = found
    return _registry


def get(api_key: int) -> HandlerSpec | None:
    return registry().get(api_key)
