"""What a handler knows about the request it is answering.

Handlers get the broker (for logs, metadata, coordinators) and the request header
fields, never the connection object itself: they answer a request, they do not
drive a socket. That keeps them testable and keeps framing/ordering in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from yak.broker.broker import Broker


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    connection: tuple[str, int] | None
    """Peer address (host, port) of the client connection."""
    header_size: int = 0
    """Bytes of request header before the body (used by the zero-copy decoders)."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Per-connection state a handler may need to keep (e.g. SASL); shared across requests
    of one connection."""


@dataclass(slots=True)
class RawResponse:
    """A response body already encoded as a list of buffers (the Fetch hot path).

    The connection writes the frame size and response header, then these buffers with
    `transport.writelines`, so record data read from storage is never concatenated.
    """

    buffers: list[Any]
    size: int
    """Total bytes in `buffers`."""
    flexible_header: bool = False
    """Response header v1 (one empty tagged-field byte after the correlation id)."""
