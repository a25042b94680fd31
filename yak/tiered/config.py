"""The broker's tiered-storage settings (declared in `yak.settings`), typed and checked
together: the one place that turns `remote.*` settings into what the manager runs with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from yak.settings import BROKER_SETTINGS, ConfigError
from yak.tiered.store import parse_uri

__all__ = ["TieredConfig"]


@dataclass(frozen=True)
class TieredConfig:
    """The broker's tiered-storage settings (`yak.settings`), typed."""

    enabled: bool = False
    uri: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    task_interval_ms: int = 30_000
    copier_pool_size: int = 10
    copy_max_bytes_per_second: int = 2**63 - 1
    retry_backoff_ms: int = 500
    retry_backoff_max_ms: int = 30_000
    fetch_max_wait_ms: int = 500
    cache_bytes: int = 128 << 20
    orphan_grace_ms: int = 600_000
    fetch_max_bytes_per_second: int = 2**63 - 1
    copy_lag_max_bytes: int = 1 << 30

    @classmethod
    def from_settings(cls, raw: Mapping[str, str]) -> TieredConfig:
        """ConfigError (one line naming the key) for a bad or missing value."""
        def get(name: str) -> Any:
            spec = BROKER_SETTINGS[name]
            value = raw.get(name)
            return spec.parse_default() if value is None else spec.parse(value)

        cfg = cls(
            enabled=get("remote.log.storage.system.enable"),
            uri=get("remote.storage.uri"),
            access_key_id=get("remote.storage.access.key.id"),
            secret_access_key=get("remote.storage.secret.access.key"),
            task_interval_ms=get("remote.log.manager.task.interval.ms"),
            copier_pool_size=get("remote.log.manager.copier.thread.pool.size"),
            copy_max_bytes_per_second=get("remote.log.manager.copy.max.bytes.per.second"),
            retry_backoff_ms=get("remote.log.manager.task.retry.backoff.ms"),
            retry_backoff_max_ms=get("remote.log.manager.task.retry.backoff.max.ms"),
            fetch_max_wait_ms=get("remote.fetch.max.wait.ms"),
            cache_bytes=get("remote.log.reader.cache.bytes"),
            orphan_grace_ms=get("remote.log.manager.orphan.grace.ms"),
            fetch_max_bytes_per_second=get("remote.log.manager.fetch.max.bytes.per.second"),
            copy_lag_max_bytes=get("remote.log.manager.copy.lag.max.bytes"),
        )
        if cfg.enabled and not cfg.uri:
            raise ConfigError("remote.log.storage.system.enable=true needs remote.storage.uri"
                              " (s3://BUCKET[/PREFIX]?endpoint=...&region=... or"
                              " file:///PATH)")
        if cfg.uri:
            try:
                parse_uri(cfg.uri)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        return cfg
