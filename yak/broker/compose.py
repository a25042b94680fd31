"""The broker, built from its parts: the one place that knows what a broker is made of.

`build_broker(config)` constructs each part by name, in dependency order, and returns a
`Broker` that starts them in the same order (and stops them in reverse):

    storage             LogManager: the partition logs in the data directory
    replica manager     ReplicaManager: every hosted partition, purgatories, disk threads
    metadata store      ClusterNode: the metadata image over the KV store `metadata.store`
                        names (local: LocalKV in the data dir; etcd://...), registration,
                        the controller, the publisher; replica fetchers beside it
    topic manager       ClusterTopicManager: topic changes written to the metadata store
    producer ids        ProducerIdManager: id blocks from the metadata store
    group coordinator   GroupCoordinator on `__consumer_offsets` (a coordinator runtime with
                        its partition writer and loader on the replica manager)
    transaction coordinator
                        TransactionCoordinator on `__transaction_state` (a coordinator
                        runtime with its partition writer and loader), its markers
                        through the partition layer (PartitionMarkerWriter), producer ids
                        from the id manager
    share coordinator   ShareCoordinator on `__share_group_state` (a coordinator runtime
                        with its partition writer and loader); the share groups reach it
                        through a CoordinatorPersister (here, or the state RPCs)
    metrics             BrokerMetrics, handed to whoever exports them (the CLI's gateway)
    broker load reports LoadPublisher: this broker's load in the metadata store (issue 23)
    security            SecurityConfig: the listeners, their TLS contexts and SASL configs
    credential store    SCRAM credentials: ClusterCredentialStore, one document of the
                        metadata store for all brokers
    authorizer          StandardAuthorizer over a ClusterAclStore, when
                        authorizer.class.name is set (applied by the handlers, per API,
                        through the request context)
    client quotas       ClientQuotas over a ClusterQuotaStore, applied in request dispatch
    dynamic configs     DynamicBrokerConfigs: BROKER resources' configs, documents of the
                        metadata store, applied to the BrokerConfig every part reads

One path for one broker and many (issue 22): a single broker is a one-node cluster whose
KV store is local; only the backend `metadata.store` names differs. The image's watch
drives `ReplicaManager.apply_partition_state` and the leadership changes of
`__consumer_offsets` and `__transaction_state`, replica fetchers copy the logs, and the
marker writer has a `remote` sender for partitions led elsewhere.

Nothing is imported by a guessed name and nothing is optional: a part that cannot be
built raises `StartupError` naming it (exit 2 and the key for bad configuration), and a
part that cannot start stops the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from uuid import UUID

from yak.broker.broker import Broker, Part, StartupError, one_line
from yak.broker.dynamic_tls import ListenerKeystores
from yak.broker.metrics import BrokerMetrics
from yak.broker.reassignment_metrics import ReassignmentTraffic
from yak.clock import MonotonicClock
from yak.cluster.alter_partition import StoreAlterPartitionManager
from yak.cluster.autobalancer import AutoBalancer
from yak.cluster.broker_load import LoadPublisher
from yak.cluster.cluster_topics import ClusterTopicManager
from yak.cluster.coordinators import CoordinatorLocator
from yak.cluster.dynamic_config import DynamicBrokerConfigs
from yak.cluster.identity import DataDirMismatchError
from yak.cluster.inter_broker import InterBrokerClient, RemoteMarkerSender
from yak.cluster.liveness_witness import LeaderFetches
from yak.cluster.node import ClusterNode, EndpointSpec
from yak.cluster.producer_ids import ProducerIdManager
from yak.cluster.remote_log_metadata import KVRemoteLogMetadata
from yak.cluster.replica_fetcher import FetcherConfig, ReplicaFetcherManager
from yak.cluster.replica_selector import replica_selector
from yak.cluster.replication_throttle import ReplicationThrottle
from yak.config import BrokerConfig
from yak.coordinator.loader import ReplicaLoader
from yak.coordinator.partition_writer import ReplicaPartitionWriter
from yak.group.coordinator import GroupConfig, GroupCoordinator
from yak.group.records import OFFSETS_TOPIC, offsets_topic_configs
from yak.partition import ReplicaManager
from yak.security.authorizer import StandardAuthorizer
from yak.security.channel import ChannelBuilder
from yak.security.cluster_stores import (
    ClusterAclStore,
    ClusterCredentialStore,
    ClusterQuotaStore,
)
from yak.security.quota import ClientQuotas
from yak.security.sasl import FailedAuthenticationDelay, new_broker_secret
from yak.security.scram import ScramCredentialManager
from yak.security.security_config import SecurityConfig
from yak.settings import BROKER_SETTINGS, ConfigError
from yak.share.coordinator import ShareCoordinator, share_state_topic_configs
from yak.share.group_configs import GroupConfigStore
from yak.share.manager import ShareConfig, ShareManager
from yak.share.metrics import ShareMetricsCollector
from yak.share.persister import CoordinatorPersister
from yak.share.records import SHARE_STATE_TOPIC
from yak.storage import LogManager
from yak.tiered import HostedPartition, RemoteLogManager, RemoteStorageError, TieredConfig
from yak.tiered.metrics import TieredCollector
from yak.txn.coordinator import TransactionCoordinator, TxnConfig
from yak.txn.markers import PartitionMarkerWriter
from yak.txn.records import TRANSACTION_STATE_TOPIC, transaction_topic_configs
from yak.wire import Dialer

__all__ = ["build_broker", "group_config", "txn_config"]

T = TypeVar("T")

# Kafka bounds a `__transaction_state` append by the broker's request timeout (30 s).
TXN_APPEND_TIMEOUT_MS = 30_000


def _construct(name: str, make: Callable[[], T]) -> T:
    """Build one part; bad configuration is exit 2 with the key, anything else exit 1."""
    try:
        return make()
    except ConfigError as e:
        raise StartupError(f"{name}: {e}", exit_code=2) from e
    except Exception as e:
        raise StartupError(f"cannot build {name}: {one_line(e)}") from e


def group_config(config: BrokerConfig) -> GroupConfig:
    """The group coordinator's settings, from the broker's `group.*`/`offsets.*` settings."""
    return GroupConfig(
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        min_session_timeout_ms=config.group_min_session_timeout_ms,
        max_session_timeout_ms=config.group_max_session_timeout_ms,
        max_group_size=config.group_max_size,
        offsets_retention_ms=config.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
        offset_metadata_max_bytes=config.offset_metadata_max_bytes,
        consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
        consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
    )


def txn_config(config: BrokerConfig) -> TxnConfig:
    """The transaction coordinator's settings, from the broker's `transaction.*` settings."""
    return TxnConfig(
        transaction_max_timeout_ms=config.transaction_max_timeout_ms,
        transactional_id_expiration_ms=config.transactional_id_expiration_ms,
        abort_timed_out_interval_ms=(
            config.transaction_abort_timed_out_transaction_cleanup_interval_ms),
        remove_expired_interval_ms=(
            config.transaction_remove_expired_transaction_cleanup_interval_ms),
        offsets_topic_num_partitions=config.offsets_topic_num_partitions,
    )


def build_broker(config: BrokerConfig) -> Broker:
    """Construct every part of a broker (nothing is started, no socket is opened)."""
    loop_io = _in_thread

    # storage
    logs = _construct("storage", lambda: LogManager(
        str(config.data_dir), config.log_defaults,
        recovery_threads=config.num_recovery_threads_per_data_dir))

    # listeners (TLS contexts, SASL configs): also how this broker reaches the others
    security = _construct("security", lambda: SecurityConfig.from_settings(_listener_settings(config)))

    # One metadata path (issue 22): every broker is a member of a cluster, a single broker
    # a cluster of one. The partition layer, then this broker's membership (metadata
    # image, registration, controller, publisher) over the KV store `metadata.store`
    # names (`local`: the data dir's LocalKV; `etcd://...`: etcd), then the topic manager.
    replica_manager = _construct("replica manager", lambda: ReplicaManager(
        config.node_id, logs, replica_lag_time_max_ms=config.replica_lag_time_max_ms,
        replica_fetch_dead_ms=config.replica_fetch_dead_ms))
    node = _construct("metadata store", lambda: _cluster_node(config, replica_manager))
    # ISR changes: compare-and-set on the partition record, fenced by this broker's
    # registration; a broker whose session is not known valid acks nothing.
    replica_manager.alter_partition = StoreAlterPartitionManager(
        node.store, config.node_id, lambda: node.broker_epoch)
    replica_manager.session_valid = node.may_acknowledge
    # Other brokers are reached on their inter-broker listener, with its TLS and this
    # broker's own SASL login when it has them (Kafka's inter.broker.listener.name). A
    # one-node cluster (the local store, which no other broker can join) never dials one,
    # so it needs no credentials of its own, as the single broker never did.
    inter_broker_connect = _construct(
        "inter-broker security",
        lambda: None if node.single_node else _inter_broker_connect(config, security))
    if node.liveness is not None and inter_broker_connect is not None:
        # The liveness probe pings SSL/SASL_SSL listeners over the same TLS (no login).
        node.liveness.tls = inter_broker_connect.ssl
    if node.liveness is not None:
        # A suspect seen fetching from this broker's leaders is alive: no frozen verdict.
        node.liveness.last_fetch_ms = LeaderFetches(replica_manager)
    # KIP-73's throttles: live broker rates, the topics' replica lists from the image.
    throttle = ReplicationThrottle.side("follower", config, node.store.get)
    replica_manager.leader_throttle = ReplicationThrottle.side("leader", config, node.store.get)
    # KIP-392: the replica a consumer with client.rack reads from (replica.selector.class).
    replica_manager.replica_selector = replica_selector(config.replica_selector_class,
                                                        node.store.broker)
    fetchers = _construct("replica fetchers", lambda: ReplicaFetcherManager(
        replica_manager, node.resolve, FetcherConfig.from_broker_config(
            config, broker_epoch=lambda: node.broker_epoch), dialer=inter_broker_connect,
        throttle=throttle))
    metadata = node.store
    topics = _construct("topic manager",
                        lambda: ClusterTopicManager(node.store, replica_manager, config))
    producer_ids = _construct("producer id manager", lambda: ProducerIdManager(
        node.store, allocate=lambda size: node.store.allocate_producer_ids(
            size, node.broker_epoch)))

    # group coordinator, on __consumer_offsets through the partition layer
    def topic_partitions(name: str) -> int | None:
        info = topics.get(name)
        return None if info is None else info.partitions

    def make_group() -> tuple[GroupCoordinator, ReplicaPartitionWriter]:
        writer = ReplicaPartitionWriter(
            replica_manager,
            OFFSETS_TOPIC,
            topic_partitions=topic_partitions,
            create_topic=lambda name, n, configs: topics.create(
                name, n, configs, replication_factor=topics.internal_replication_factor(
                    config.offsets_topic_replication_factor,
                    "offsets.topic.replication.factor")),
            default_partitions=config.offsets_topic_num_partitions,
            topic_configs=offsets_topic_configs(config.offsets_topic_segment_bytes),
            timeout_ms=config.offsets_commit_timeout_ms,
        )

        def resolve(name: str) -> tuple[object, int] | None:
            info = topics.get(name)
            return None if info is None else (info.topic_id, info.partitions)

        coordinator = GroupCoordinator(
            writer,
            ReplicaLoader(replica_manager, OFFSETS_TOPIC),
            group_config(config),
            topic_resolver=resolve,
            topic_lister=lambda: [t.name for t in topics.topics()],
        )
        if not node.single_node:
            # Owned as this broker leads their partitions. In a one-node cluster it owns
            # every partition and creates the topic on first use, so a group request
            # before any FindCoordinator works, as clients of a single broker rely on.
            coordinator.manage_partitions()
        return coordinator, writer

    group_coordinator, offsets_writer = _construct("group coordinator", make_group)

    # transaction coordinator, on __transaction_state through the partition layer
    def partition_exists(tp: tuple[str, int]) -> bool:
        info = topics.get(tp[0])
        return info is not None and 0 <= tp[1] < info.partitions

    def make_txn() -> tuple[TransactionCoordinator, PartitionMarkerWriter,
                            ReplicaPartitionWriter]:
        async def create_txn_topic(name: str, n: int, configs: Mapping[str, str]) -> object:
            rf = topics.internal_replication_factor(
                config.transaction_state_log_replication_factor,
                "transaction.state.log.replication.factor")
            # min.insync.replicas can be no more than the replicas the topic gets
            configs = dict(configs, **{"min.insync.replicas": str(
                min(config.transaction_state_log_min_isr, rf))})
            return await topics.create(name, n, configs, replication_factor=rf)

        txn_writer = ReplicaPartitionWriter(
            replica_manager,
            TRANSACTION_STATE_TOPIC,
            topic_partitions=topic_partitions,
            create_topic=create_txn_topic,
            default_partitions=config.transaction_state_log_num_partitions,
            topic_configs=transaction_topic_configs(
                config.transaction_state_log_segment_bytes,
                config.transaction_state_log_min_isr,
            ),
            timeout_ms=TXN_APPEND_TIMEOUT_MS,
        )
        markers = PartitionMarkerWriter(
            replica_manager, partition_exists,
            on_offsets_marker=group_coordinator.complete_txn_offsets,
        )

        async def new_producer_id() -> int:
            return await producer_ids.new_producer_id()

        coordinator = TransactionCoordinator(
            txn_writer, ReplicaLoader(replica_manager, TRANSACTION_STATE_TOPIC), markers,
            new_producer_id, txn_config(config),
            partition_exists=partition_exists,
        )
        if not node.single_node:
            coordinator.manage_partitions()  # another broker may lead a partition between
        return coordinator, markers, txn_writer

    txn_coordinator, txn_markers, txn_writer = _construct("transaction coordinator", make_txn)
    coordinators = CoordinatorLocator(config.node_id, topics, group_coordinator, offsets_writer,
                                      txn_coordinator, txn_coordinator, txn_writer,
                                      cluster=not node.single_node)
    # KIP-890 part 1: the partition layer asks the transaction coordinator (here or on
    # another broker) before a transactional batch starts a transaction in a partition.
    replica_manager.txn_verifier = coordinators.verify_transaction
    node.hooks.append(coordinators.partition_changed)
    # Transactions across brokers: markers to partitions led elsewhere, and Produce's
    # KIP-890 check with a coordinator on another broker.
    inter_broker = InterBrokerClient(config.node_id, node.resolve,
                                     dialer=inter_broker_connect)
    txn_markers.remote = RemoteMarkerSender(inter_broker, coordinators.leader_of)
    coordinators.inter_broker = inter_broker

    metrics = _construct("metrics", BrokerMetrics)
    metrics.bind_transactions(txn_coordinator)  # yak_transactions_* read at scrape time
    metrics.bind_replication(replica_manager)  # ISR, delayed produces, replica lag
    metrics.bind_cluster(node)  # controller, elections, offline partitions, leaders
    # Reassignment bytes and throttles (issue 23), Kafka's names: the Fetch handler and the
    # replica fetchers count the bytes of adding replicas.
    traffic = ReassignmentTraffic(config.node_id, node.store)
    metrics.bind_reassignment(traffic, replica_manager.leader_throttle, throttle)
    fetchers.copied = traffic.copied
    load = LoadPublisher.of(node, config.broker_load_report_interval_ms, metrics.totals)

    # security: listeners (TLS contexts, SASL configs), credentials, ACLs, quotas
    # The three stores are documents of the metadata image, the same on every broker (a
    # single broker's files of before are migrated into it: local_migration.py).
    credentials = cluster_credentials = ClusterCredentialStore(node.store)
    acl_store = cluster_acls = ClusterAclStore(node.store)
    quota_store = cluster_quotas = ClusterQuotaStore(node.store)
    scram_credentials = ScramCredentialManager(credentials)
    authorizer = (
        _construct("authorizer", lambda: StandardAuthorizer.from_settings(config.raw, acl_store))
        if security.authorizer_enabled else None
    )
    quotas = _construct("client quotas", lambda: ClientQuotas.from_settings(
        config.raw, quota_store))
    if authorizer is not None:
        cluster_acls.subscribe(authorizer.on_store_change)  # ACLs changed via other brokers
    cluster_quotas.subscribe(quotas.on_store_change)
    failed_delay = FailedAuthenticationDelay(security.failed_authentication_delay_ms)
    secret = new_broker_secret()
    channel_builders = {
        name: ChannelBuilder(ls, credentials, failed_delay, secret)
        for name, ls in security.by_listener.items()
    }
    quota_task: list[asyncio.Task[None]] = []

    # The credential and quota loads decode one document of the metadata image already in
    # memory (no I/O), so they run on the loop: a hop through the thread pool waits behind
    # the pool's other work (issue 27: a restart in a chaos run at load 19 spent 2 s in the
    # credential store's start).
    async def start_quotas() -> None:
        await cluster_quotas.start()
        quotas.load()
        quota_task.append(asyncio.get_running_loop().create_task(_quota_maintenance(quotas)))

    async def stop_quotas() -> None:
        for t in quota_task:
            t.cancel()

    async def start_credentials() -> None:
        await cluster_credentials.start()
        credentials.load()

    async def start_authorizer() -> None:
        assert authorizer is not None
        await cluster_acls.start()
        await authorizer.start()

    async def start_storage() -> None:
        # Topic configs live in the metadata, so storage needs them to load the logs.
        await loop_io(logs.startup, topics.log_configs())

    async def stop_storage() -> None:
        await loop_io(logs.shutdown)

    async def start_metadata() -> None:
        try:
            await node.start_metadata()
        except DataDirMismatchError as e:
            raise StartupError(str(e), exit_code=2) from e
        broker.cluster_id = node.store.cluster_id

    share_coordinator = _construct("share coordinator", lambda: make_share_coordinator(
        config, replica_manager, topics, topic_partitions, single_node=node.single_node))
    node.hooks.append(share_coordinator.partition_changed)
    share = make_share(config, replica_manager, topics, CoordinatorPersister(
        share_coordinator, lambda p: coordinators.leader_of(SHARE_STATE_TOPIC, p),
        inter_broker.request, config.node_id), GroupConfigStore(node.store),
        coordinators.leader_of, inter_broker.request)
    metrics.registry.register(ShareMetricsCollector(share))  # yak_share_*, at scrape time
    # KIP-848 groups' own consumer.* configs (GROUP resource, issue 24) from the same store
    group_coordinator.membership.consumer.group_configs = share.group_config
    # share groups' membership as records of __consumer_offsets (issue 24, share/group.py)
    share.groups.store = group_coordinator
    group_coordinator.shards.on_share_loaded = share.groups.load_partition
    group_coordinator.shards.on_share_unloaded = share.groups.unload_partition
    # Dynamic broker configs (issue 23): applied once the image is read, before storage
    # opens the logs (they open with the dynamic topic defaults), then live.
    dynamic_configs = DynamicBrokerConfigs(node.store, config, topics, node.controller)
    keystores = ListenerKeystores(config, security)  # listener.name.<l>.ssl.keystore.*
    dynamic_configs.checks.append(keystores.check)
    dynamic_configs.on_change.append(keystores.apply)
    # Partition balancing (issue 23): the controller runs it during its terms.
    node.controller.autobalancer = AutoBalancer(
        node.store, topics, lambda: config.partition_autobalancing_mode,
        lambda: config.partition_autobalancing_tick_interval_ms, node.controller,
        disk_threshold=lambda: config.partition_autobalancing_disk_imbalance_threshold_percent,
        request=inter_broker.request)

    # The image first: storage needs the topic configs, and a data dir of another
    # cluster must be refused before storage opens it. The publisher hosts what the image
    # assigns here once storage has loaded the logs. The replica fetchers come after the
    # replica manager, so they stop first (before storage shuts down).
    parts = [
        Part("metadata store", start_metadata, node.stop),
        Part("dynamic broker configs", dynamic_configs.start),
        Part("storage", start_storage, stop_storage),
        Part("topic manager", node.start_hosting),
        Part("replica manager", replica_manager.start, replica_manager.stop),
        Part("replica fetchers", fetchers.start, fetchers.stop),
        Part("inter-broker client", None, inter_broker.close),
        Part("producer id manager"),
        Part("group coordinator", group_coordinator.start, group_coordinator.stop),
        Part("transaction coordinator", txn_coordinator.start, txn_coordinator.stop),
        Part("share coordinator", share_coordinator.start, share_coordinator.stop),
        Part("share groups", share.start, share.stop),
        Part("metrics"),
        Part("broker load reports", load.start, load.stop),
        Part("security"),
        Part("credential store", start_credentials),
    ]
    if authorizer is not None:
        parts.append(Part("authorizer", start_authorizer))
    parts.append(Part("client quotas", start_quotas, stop_quotas))
    tiered = make_tiered(config, replica_manager, KVRemoteLogMetadata(node.client, node.keys))
    if tiered is not None:
        parts.append(tiered)  # started last (partitions hosted), stopped first
        metrics.registry.register(TieredCollector(replica_manager.remote_log))  # at scrape
    broker = Broker(
        config,
        cluster_id=metadata.cluster_id,
        topics=topics,
        replica_manager=replica_manager,
        producer_ids=producer_ids,
        group_coordinator=group_coordinator,
        metrics=metrics,
        parts=parts,
        security=security,
        channel_builders=channel_builders,
        scram_credentials=scram_credentials,
        quotas=quotas,
        authorizer=authorizer,
        txn_coordinator=txn_coordinator,
        txn_state=txn_coordinator,
        txn_markers=txn_markers,
        cluster=node,
        coordinators=coordinators,
    )
    broker.share = share
    broker.dynamic_configs = dynamic_configs
    _join_cluster(broker, node, topics, fetchers)
    return broker


def make_share_coordinator(config: BrokerConfig, replica_manager: ReplicaManager,
                           topics: ClusterTopicManager,
                           topic_partitions: Callable[[str], int | None],
                           *, single_node: bool) -> ShareCoordinator:
    """The share coordinator (KIP-932) on `__share_group_state`: a coordinator runtime
    with its partition writer and loader, from the `share.coordinator.*` settings."""
    def setting(name: str) -> int:
        spec = BROKER_SETTINGS[name]
        raw = config.raw.get(name)
        return int(spec.parse_default() if raw is None else spec.parse(raw))

    async def create(name: str, n: int, configs: Mapping[str, str]) -> object:
        rf = topics.internal_replication_factor(
            setting("share.coordinator.state.topic.replication.factor"),
            "share.coordinator.state.topic.replication.factor")
        configs = dict(configs, **{"min.insync.replicas": str(
            min(setting("share.coordinator.state.topic.min.isr"), rf))})
        return await topics.create(name, n, configs, replication_factor=rf)

    writer = ReplicaPartitionWriter(
        replica_manager, SHARE_STATE_TOPIC, topic_partitions=topic_partitions,
        create_topic=create,
        default_partitions=setting("share.coordinator.state.topic.num.partitions"),
        topic_configs=share_state_topic_configs(
            setting("share.coordinator.state.topic.min.isr")),
        timeout_ms=setting("share.coordinator.write.timeout.ms"))
    def log_end(partition: int) -> int:
        p = replica_manager.get_partition(SHARE_STATE_TOPIC, partition)
        return -1 if p is None else p.log_end_offset

    coordinator = ShareCoordinator(
        writer, ReplicaLoader(replica_manager, SHARE_STATE_TOPIC), MonotonicClock(),
        snapshot_every=setting("share.coordinator.snapshot.update.records.per.snapshot"),
        log_end=log_end,
        prune=lambda p, offset: replica_manager.delete_records(SHARE_STATE_TOPIC, p, offset),
        prune_interval_ms=setting("share.coordinator.state.topic.prune.interval.ms"))
    if not single_node:
        coordinator.manage_partitions()
    return coordinator


def make_share(config: BrokerConfig, replica_manager: ReplicaManager,
               topics: ClusterTopicManager, persister: CoordinatorPersister,
               config_store: GroupConfigStore, leader_of: Callable[[str, int], int],
               send: Callable[[int, Any], Awaitable[Any]]) -> ShareManager:
    """Share groups (KIP-932, docs/share-groups.md) on the partition layer's logs, their
    share-partition state durable through the share coordinator (`persister`), their
    group configs documents of the metadata store (`config_store`); the bounds are the
    broker's `group.share.*` settings."""
    def topic(name: str) -> tuple[UUID, int] | None:
        info = topics.get(name)
        return None if info is None else (info.topic_id, info.partitions)

    return ShareManager(ShareConfig(
        record_lock_duration_ms=config.group_share_record_lock_duration_ms,
        min_record_lock_duration_ms=config.group_share_min_record_lock_duration_ms,
        max_record_lock_duration_ms=config.group_share_max_record_lock_duration_ms,
        delivery_count_limit=config.group_share_delivery_count_limit,
        min_delivery_count_limit=config.group_share_min_delivery_count_limit,
        max_delivery_count_limit=config.group_share_max_delivery_count_limit,
        partition_max_record_locks=config.group_share_partition_max_record_locks,
        session_timeout_ms=config.group_share_session_timeout_ms,
        heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
        max_size=config.group_share_max_size,
        max_share_sessions=config.group_share_max_share_sessions,
    ), MonotonicClock(), replica_manager, topic, config.node_id, persister, config_store,
        leader_of, send)  # leader_of, send: dead-letter copies led elsewhere


def make_tiered(config: BrokerConfig, replica_manager: ReplicaManager,
                metadata: KVRemoteLogMetadata | None = None) -> Part | None:
    """Tiered storage (issue 25, docs/tiered.md): with `remote.log.storage.system.enable`,
    the remote log manager over the replica manager's hosted partitions, plugged into its
    fetch path, committing its remote log metadata in the metadata store (`metadata`). A
    bad URI, or a store that does not answer at start-up, is one line and exit 2."""
    tiered_config = _construct("remote log manager",
                               lambda: TieredConfig.from_settings(config.raw))
    if not tiered_config.enabled:
        return None

    def hosted() -> list[HostedPartition]:
        return [HostedPartition(p.topic, p.index, str(p.topic_id), p.log, p.leader_epoch,
                                p.is_leader) for p in replica_manager.partitions()]

    rlm = _construct("remote log manager",
                     lambda: RemoteLogManager(tiered_config, config.node_id, hosted,
                                              metadata=metadata))
    replica_manager.remote_log = rlm

    async def start() -> None:
        try:
            await rlm.start()
        except RemoteStorageError as e:
            raise StartupError(f"remote.storage.uri {tiered_config.uri}: {e}",
                               exit_code=2) from e

    return Part("remote log manager", start, rlm.stop)


def _inter_broker_connect(config: BrokerConfig, security: SecurityConfig) -> Dialer | None:
    """How this broker reaches another one's inter-broker listener (a `yak.wire.Dialer`):
    None (plain TCP) on a PLAINTEXT listener; else TLS as the listener's settings say
    (truststore, keystore for mTLS) and a SASL login with the broker's own credentials from
    that listener's JAAS config (`ClientSecurity.for_inter_broker`). Missing credentials
    are bad configuration: the broker does not start rather than never replicate."""
    listeners = security.listeners
    if listeners.inter_broker_security_protocol.name == "PLAINTEXT":
        return None
    # Imported here: a PLAINTEXT broker never loads the SASL/TLS client side (scramp).
    from yak.security.client import ClientSecurity
    from yak.security.connect import dialer

    try:
        client = ClientSecurity.for_inter_broker(config.raw, listeners)
    except ValueError as e:
        raise ConfigError(f"inter.broker.listener.name: {e}") from None
    return dialer(client)


def _cluster_node(config: BrokerConfig, replica_manager: ReplicaManager) -> ClusterNode:
    return ClusterNode(
        replica_manager,
        node_id=config.node_id,
        metadata_url=config.metadata_store,
        data_dir=config.data_dir,
        session_timeout_ms=config.broker_session_timeout_ms,
        heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
        rack=config.broker_rack,
        auto_rebalance=config.auto_leader_rebalance_enable,
        imbalance_check_interval_s=float(config.leader_imbalance_check_interval_seconds),
        imbalance_percentage=config.leader_imbalance_per_broker_percentage,
        controlled_shutdown=config.controlled_shutdown_enable,
        liveness_probe=config.broker_liveness_probe_enable,
        liveness_unresponsive_ms=config.broker_liveness_unresponsive_ms,
    )


def _join_cluster(broker: Broker, node: ClusterNode, topics: ClusterTopicManager,
                  fetchers: ReplicaFetcherManager) -> None:
    """Wire a cluster broker: registration once its listeners are bound (with the bound
    ports), controlled shutdown before they close."""
    listeners = broker.security.listeners
    node.inter_broker_listener = listeners.inter_broker_listener_name

    def endpoints() -> list[EndpointSpec]:
        out = []
        for ep in listeners.advertised:
            host, port = broker.advertised.get(ep.listener_name, (ep.host, ep.port))
            out.append(EndpointSpec(ep.listener_name, host or "127.0.0.1", port,
                                    ep.security_protocol.value))
        return out

    node.bind(topics, fetchers=fetchers, endpoints=endpoints)

    def fence(fenced: bool) -> None:
        if fenced:
            broker.replica_manager.fence("the broker's session (registration) is gone")
        else:
            broker.replica_manager.unfence()

    node.on_fence.append(fence)
    broker.on_listening.append(node.register)
    broker.before_stop.append(node.controlled_shutdown)


def _listener_settings(config: BrokerConfig) -> dict[str, str]:
    """The raw settings, with the listener of a `BrokerConfig` built in code (no
    `listeners` setting) spelled as the PLAINTEXT listener it is."""
    raw = dict(config.raw)
    if "listeners" not in raw:
        raw["listeners"] = f"PLAINTEXT://{config.listen}"
        if config.advertised != config.listen:
            raw.setdefault("advertised.listeners", f"PLAINTEXT://{config.advertised}")
    return raw


async def _quota_maintenance(quotas: ClientQuotas, every_s: float = 30.0) -> None:
    """Forget the measured rates of clients idle for an hour (bounded memory)."""
    from yak.security.quota import wall_clock_ms

    while True:
        await asyncio.sleep(every_s)
        quotas.maintenance(wall_clock_ms())


async def _in_thread(fn: Callable[..., object], *args: object) -> None:
    """Disk-bound start-up and shutdown work runs in a thread, off the event loop."""
    await asyncio.get_running_loop().run_in_executor(None, fn, *args)
