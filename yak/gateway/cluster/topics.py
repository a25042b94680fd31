"""Topics and configs: create and delete topics, describe and alter topic configs, read
broker settings (CreateTopics, DeleteTopics, DescribeConfigs, IncrementalAlterConfigs)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from yak.gateway.cluster.metadata import MetadataCalls
from yak.gateway.cluster.model import ClusterError


class TopicCalls(MetadataCalls):
    """Topic lifecycle and configs; broker settings by DescribeConfigs."""

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Mapping[str, str] | None = None) -> None:
        nt = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                      config=dict(configs or {}))
        futs = self.admin.create_topics([nt], request_timeout=self.timeout_s)
        await self._future(futs[name])

    async def delete_topic(self, name: str) -> None:
        futs = self.admin.delete_topics([name], request_timeout=self.timeout_s)
        self._topic_cache.pop(name, None)
        await self._future(futs[name])

    async def topic_configs(self, name: str) -> list[dict[str, Any]]:
        res = ConfigResource(ResourceType.TOPIC, name)
        futs = self.admin.describe_configs([res], request_timeout=self.timeout_s)
        entries: dict[str, ConfigEntry] = await self._future(futs[res])
        return [
            {
                "name": e.name,
                "value": None if e.is_sensitive else e.value,
                "source": _source_name(e.source),
                "is_default": bool(e.is_default),
                "read_only": bool(e.is_read_only),
                "sensitive": bool(e.is_sensitive),
            }
            for e in sorted(entries.values(), key=lambda e: e.name)
        ]

    async def alter_topic_configs(self, name: str, changes: Mapping[str, str | None]) -> None:
        """Set each given config; None deletes the override (back to the broker default)."""
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            if v is not None
            else ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
            for k, v in changes.items()
        ]
        res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        futs = self.admin.incremental_alter_configs([res], request_timeout=self.timeout_s)
        await self._future(futs[res])

    async def broker_configs(self, names: Iterable[str]) -> dict[str, str | None]:
        """The values of some of a broker's settings (DescribeConfigs on a BROKER
        resource: DESCRIBE_CONFIGS on the cluster); a sensitive or unknown one is None."""
        md = await self.metadata()
        if not md.brokers:
            raise ClusterError("no broker in the cluster's metadata", -195, "_TRANSPORT")
        res = ConfigResource(ResourceType.BROKER, str(min(md.brokers)))
        futs = self.admin.describe_configs([res], request_timeout=self.timeout_s)
        entries: dict[str, ConfigEntry] = await self._future(futs[res])
        return {n: (entries[n].value if n in entries else None) for n in names}


def _source_name(source: Any) -> str:
    from confluent_kafka.admin import ConfigSource

    try:
        return ConfigSource(int(source)).name
    except (ValueError, TypeError):
        return getattr(source, "name", str(source))
