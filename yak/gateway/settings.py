"""Gateway settings, importable without FastAPI (`yak serve` reads them at start-up)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_INSTANCE_TIMEOUT_S = 300.0


@dataclass
class GatewaySettings:
    bootstrap: str
    embedded: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    consumer_instance_timeout_s: float = DEFAULT_INSTANCE_TIMEOUT_S
    metrics_interval_s: float = 5.0
    request_timeout_s: float = 10.0
