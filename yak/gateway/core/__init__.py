"""The transport-neutral gateway core (see `service.GatewayCore`).

Transports (REST in `yak.gateway.rest`, WebSocket in `yak.gateway.ws`, gRPC in
`yak.gateway.grpc_api`) import from here; nothing here imports a transport.
"""

from yak.gateway.core.errors import GatewayError, Reason, RecordDecodeError
from yak.gateway.core.formats import Encoded, Formats, RecordFormat, SchemaSpec
from yak.gateway.core.service import GatewayCore, OutRecord, PendingProduce, ProduceResult
from yak.gateway.core.sessions import ConsumerSession, SessionRegistry

__all__ = [
    "ConsumerSession", "Encoded", "Formats", "GatewayCore", "GatewayError", "OutRecord",
    "PendingProduce", "ProduceResult", "Reason", "RecordDecodeError", "RecordFormat", "SchemaSpec",
    "SessionRegistry",
]
