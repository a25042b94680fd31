"""Gateway settings, importable without FastAPI (`yak serve` reads them at start-up)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_INSTANCE_TIMEOUT_S = 300.0


@dataclass
class GatewaySettings:
    bootstrap: str
    embedded: bool = False
    # The embedded broker's metrics object (`yak.broker.metrics.BrokerMetrics`: its own
    # registry and totals), handed over by `yak serve`; None for a standalone gateway.
    broker_metrics: Any = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    consumer_instance_timeout_s: float = DEFAULT_INSTANCE_TIMEOUT_S
    metrics_interval_s: float = 5.0
    request_timeout_s: float = 10.0
