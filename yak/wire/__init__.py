"""The one Kafka client stack inside Yak: an asyncio connection to a broker (framing,
correlation ids, pipelining, timeouts, TLS and login through a `Dialer`), just above
`yak.protocol`. See `connection.py`."""

from yak.wire.connection import (
    DEFAULT_MAX_FRAME,
    PLAIN,
    BrokerConnectionError,
    Call,
    Dialer,
    KafkaConnection,
    Login,
    RequestTimeoutError,
)

__all__ = ["DEFAULT_MAX_FRAME", "PLAIN", "BrokerConnectionError", "Call", "Dialer",
           "KafkaConnection", "Login", "RequestTimeoutError"]
