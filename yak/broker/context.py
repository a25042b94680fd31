"""What a handler knows about the request it is answering.

Handlers get the broker (for logs, metadata, coordinators) and the request header
fields, never the connection object itself: they answer a request, they do not
drive a socket. That keeps them testable and keeps framing/ordering in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from yak.security.acl import AclOperation, ResourceType
from yak.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from yak.broker.broker import Broker
    from yak.partition.ordering import EffectTurn
    from yak.security.channel import Session

CLUSTER_NAME = "kafka-cluster"
# `*_authorized_operations` when the client did not ask for them (Kafka's INT32 min).
OPERATIONS_NOT_REQUESTED = -(2**31)
# The operations Kafka defines on each resource type (for the authorized-operations bit
# fields of Metadata, DescribeCluster, DescribeGroups).
TOPIC_OPERATIONS = (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                    AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE,
                    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS)
GROUP_OPERATIONS = (AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE)
CLUSTER_OPERATIONS = (AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
                      AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                      AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE,
                      AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS)


@dataclass(slots=True)
class RequestContext:
    # (The connection builds one per request with positional arguments, cheaper than
    # keywords: a field added or moved must be added or moved there too.)
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    connection: tuple[str, int] | None
    """Peer address (host, port) of the client connection."""
    header_size: int = 0
    """Bytes of request header before the body (used by the zero-copy decoders)."""
    request_size: int = 0
    """Bytes of the whole request (what a producer byte-rate quota counts)."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Per-connection state a handler may need to keep; shared across requests of one
    connection."""
    session: Session | None = None
    """Who sent the request: listener, client address, principal, SASL state."""
    close_connection: bool = False
    """Set by a handler whose response must be the connection's last (a failed login)."""
    throttle_time_ms: int = 0
    """Set by a handler that applied a quota itself (Produce, Fetch): the throttle it put in
    its response; the connection then holds the connection back that long (KIP-219)."""
    turn: EffectTurn | None = None
    """A pipelined request's place in its connection's order of effects (None: a request
    handled alone, after everything before it answered). A handler that awaits before its
    effects hands it to the partition layer, which waits on it just before them; the
    connection releases it when the request ends. See yak/partition/ordering.py."""

    @property
    def principal(self) -> KafkaPrincipal:
        return ANONYMOUS if self.session is None else self.session.principal

    @property
    def listener_name(self) -> str | None:
        return None if self.session is None else self.session.listener_name

    @property
    def client_ip(self) -> str:
        if self.session is not None:
            return self.session.client_ip
        return self.connection[0] if self.connection else ""

    def authorized(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """May this request's principal do `operation` on the resource? Always true without
        an authorizer (`authorizer.class.name` unset), as in Kafka."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return True
        return authorizer.authorize(self.principal, self.client_ip, operation, resource_type,
                                    name)

    def cluster_authorized(self, operation: AclOperation) -> bool:
        return self.authorized(operation, ResourceType.CLUSTER, CLUSTER_NAME)


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
    throttle_offset: int | None = None
    """Where the body's int32 throttle_time_ms lies in `buffers[0]` (a bytearray; negative:
    from its end), so the connection can write the request quota's throttle, which is
    known only after the handler (KIP-124); None: the response has no such field."""


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str,
                          operations: tuple[AclOperation, ...]) -> int:
    """Kafka's authorized-operations bit field: bit `op` set for each operation allowed."""
    bits = 0
    for op in operations:
        authorizer = ctx.broker.authorizer
        if authorizer is None or authorizer.authorize(ctx.principal, ctx.client_ip, op,
                                                      resource_type, name, log_if_denied=False):
            bits |= 1 << int(op)
    return bits
