"""Dynamic broker configs (issue 23): Kafka's DynamicBrokerConfig over the metadata store.

Why: operators change retention defaults, `message.max.bytes` or replication throttles
with `kafka-configs --alter --entity-type brokers` and expect them to hold at once, on
every broker, and after restarts, without a rolling restart of the cluster.

What: two layers over the static settings, in Kafka's precedence (per broker > cluster
default > `server.properties`/`--set` > built-in default):

- the cluster-wide default (the BROKER resource with the empty name), one document of
  the metadata store, `broker_configs/<default>` (Kafka's own name for it in ZooKeeper);
- one broker's own (resource name = its node id), `broker_configs/<id>`.

They are documents of the one metadata path (`KVClient`: etcd in a cluster, the data
dir's local KV for a single broker), so they survive restarts and reach every broker
through the image's watch; each broker applies the default and its own document as they
change (`BrokerConfig.reconfigure`), then makes the change take effect: a new topic
default (`log.*`, `message.max.bytes`, `min.insync.replicas`, ...) is re-applied to every
hosted log of a topic without its own value, `num.partitions` is read by the next
CreateTopics, `auto.leader.rebalance.enable` switches the controller's preferred-leader
balancing. The replication throttle rates are read live by
`cluster/replication_throttle.py`, which slows only the out-of-sync replicas a topic's
`*.replication.throttled.replicas` names (KIP-73).

Only keys the settings table marks `dynamic` may be set (a read-only one is
INVALID_REQUEST naming it, as Kafka answers); values are checked against the table and
the whole result is built as a start-up would build it before anything is written
(INVALID_CONFIG, one line). Writes are compare-and-set on the document's revision and
retried when another broker wrote it first, so concurrent changes are all kept.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from yak.cluster.etcd_store import ConcurrentChangeError
from yak.errors import InvalidConfigurationError, InvalidRequestError
from yak.settings import (
    BROKER_SETTINGS,
    LISTENER_PREFIX,
    PER_LISTENER_DYNAMIC,
    ConfigError,
    dynamic_setting,
    topic_config_for_broker_key,
)

if TYPE_CHECKING:
    from yak.cluster.cluster_topics import ClusterTopicManager
    from yak.cluster.quorum_controller import QuorumController
    from yak.config import BrokerConfig

__all__ = ["DEFAULT_RESOURCE", "DynamicBrokerConfigs", "document_name"]

log = logging.getLogger(__name__)

DEFAULT_RESOURCE = "<default>"
MAX_ATTEMPTS = 20


def document_name(resource_name: str) -> str:
    """The metadata document of a BROKER resource ("" is the cluster-wide default)."""
    return f"broker_configs/{resource_name or DEFAULT_RESOURCE}"


class DocumentStore(Protocol):
    """What the metadata store offers (`EtcdMetadataStore`'s documents)."""

    def document(self, name: str) -> tuple[bytes | None, int]: ...

    def watch_document(self, name: str, callback: Callable[[bytes | None], None]) -> None: ...

    async def put_document(self, name: str, value: bytes, mod_revision: int) -> bool: ...


def _decode(value: bytes | None) -> dict[str, str]:
    if value is None:
        return {}
    data = json.loads(value)
    configs = data.get("configs", {}) if isinstance(data, dict) else None
    if not isinstance(configs, dict):
        raise ValueError("not a broker configs document")
    return {str(k): str(v) for k, v in configs.items()}


def _encode(configs: Mapping[str, str]) -> bytes:
    return json.dumps({"configs": dict(sorted(configs.items()))}).encode()


class DynamicBrokerConfigs:
    """This broker's view of the two dynamic layers, and the writes of any BROKER
    resource's configs (see module docstring)."""

    def __init__(self, store: DocumentStore, config: BrokerConfig,
                 topics: ClusterTopicManager, controller: QuorumController | None) -> None:
        self.store = store
        self.config = config
        self.node_id = config.node_id
        self.topics = topics
        self.controller = controller
        self._started = False
        # What the layers above the cluster make of a change (the composition adds them:
        # the listeners' keystores): `check(settings, keys)` raises ConfigError before a
        # write, `on_change(keys)` runs after each change is applied.
        self.checks: list[Callable[[Mapping[str, str], set[str]], None]] = []
        self.on_change: list[Callable[[set[str]], None]] = []

    # ------------------------------------------------------------------ reads

    def stored(self, resource_name: str) -> dict[str, str]:
        """The dynamic configs stored for a resource (no I/O: the metadata image)."""
        try:
            return _decode(self.store.document(document_name(resource_name))[0])
        except ValueError as e:
            log.error("%s: %s", document_name(resource_name), e)
            return {}

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        """Apply the stored layers (before storage loads the logs, so they open with the
        dynamic topic defaults) and follow both documents."""
        self._apply(log_changes=False)
        for name in ("", str(self.node_id)):
            self.store.watch_document(document_name(name), lambda _v: self._apply())
        self._started = True

    def _apply(self, log_changes: bool = True) -> None:
        default, own = self.stored(""), self.stored(str(self.node_id))
        if not (default or own or self.config.dynamic_default or self.config.dynamic_broker):
            return
        try:
            changed = self.config.reconfigure(default, own)
        except ConfigError as e:  # stored by a broker of another version, or edited
            log.error("dynamic broker configs not applied: %s", e)
            return
        if not changed:
            return
        if log_changes:
            log.info("dynamic broker configs changed: %s", ", ".join(
                f"{k}={self.config.effective_values().get(k)}" for k in sorted(changed)))
        self._take_effect(changed)

    def _take_effect(self, changed: set[str]) -> None:
        if any(topic_config_for_broker_key(k) is not None for k in changed):
            replicas = self.topics.replicas
            replicas.logs.default_config = self.config.log_defaults
            if self._started:
                for info in self.topics.topics():
                    try:
                        replicas.update_config(info.name, self.topics.log_config(info))
                    except Exception:
                        log.exception("applying the new defaults to %s", info.name)
        if "auto.leader.rebalance.enable" in changed and self.controller is not None:
            self.controller.auto_rebalance = self.config.auto_leader_rebalance_enable
        for on_change in self.on_change:
            try:
                on_change(changed)
            except Exception:
                log.exception("applying dynamic broker configs %s", sorted(changed))

    # ------------------------------------------------------------------ writes

    def check(self, resource_name: str, configs: Mapping[str, str]) -> None:
        """Refuse what may not be stored for this resource: a read-only key
        (INVALID_REQUEST naming it, Kafka's message), an unknown one or a bad value
        (INVALID_CONFIG, one line), or a result that would not start."""
        read_only = sorted(k for k in configs if dynamic_setting(k) is None and (
            k in BROKER_SETTINGS or k.startswith(LISTENER_PREFIX)))
        if read_only:
            raise InvalidRequestError(
                f"Cannot update these configs dynamically: {', '.join(read_only)} (read-only"
                " broker configs: set them in the config file or with --set and restart)")
        unknown = sorted(k for k in configs if dynamic_setting(k) is None)
        if unknown:
            raise InvalidConfigurationError(f"Unknown broker config: {', '.join(unknown)}")
        # Keystores are per listener and per broker, as in Kafka.
        bare = sorted(k for k in configs if k.startswith(PER_LISTENER_DYNAMIC))
        if bare:
            raise InvalidRequestError(
                f"Cannot update these configs dynamically: {', '.join(bare)} (set them per"
                f" listener: {LISTENER_PREFIX}<listener>.{bare[0]})")
        if resource_name == "" and any(k.startswith(LISTENER_PREFIX) for k in configs):
            raise InvalidRequestError("Listener keystores are set per broker, not as the"
                                      " cluster-wide default")
        default = dict(configs) if resource_name == "" else self.stored("")
        own = (dict(configs) if resource_name == str(self.node_id)
               else self.stored(str(self.node_id)))
        try:
            self.config.reconfigured(default, own)
            changed = {k for k in set(configs) | set(self.stored(resource_name))
                       if configs.get(k) != self.stored(resource_name).get(k)}
            settings = {**self.config.raw, **default, **own}
            for check in self.checks:
                check(settings, changed)
        except ConfigError as e:
            raise InvalidConfigurationError(str(e)) from None

    async def replace(self, resource_name: str,
                      change: Callable[[dict[str, str]], dict[str, str]],
                      validate_only: bool = False) -> None:
        """Store `change(current)` as the resource's dynamic configs, checked first;
        compare-and-set, re-read and re-applied if another broker wrote in between.
        Returns once this broker's image (and so its config) has the write."""
        name = document_name(resource_name)
        for _ in range(MAX_ATTEMPTS):
            value, revision = self.store.document(name)
            try:
                current = _decode(value)
            except ValueError:
                current = {}
            new = change(dict(current))
            self.check(resource_name, new)
            if validate_only or new == current:
                return
            if await self.store.put_document(name, _encode(new), revision):
                return
        raise ConcurrentChangeError(f"{name} changed by others {MAX_ATTEMPTS} times in a row; try again")
