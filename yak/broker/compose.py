"""The broker, built from its parts: the one place that knows what a broker is made of.

`build_broker(config)` constructs each part by name, in dependency order, and returns a
`Broker` that starts them in the same order (and stops them in reverse):

    storage             LogManager: the partition logs in the data directory
    metadata store      LocalMetadataStore (the etcd backend replaces it in a cluster)
    replica manager     ReplicaManager: every hosted partition, purgatories, disk threads
    topic manager       TopicManager: topic lifecycle; on one broker, the controller
    producer ids        ProducerIdManager: id blocks from the metadata store
    group coordinator   GroupCoordinator on `__consumer_offsets` (TopicOffsetsLog adapter)
    transaction coordinator
                        TransactionCoordinator on `__transaction_state` (TopicTransactionLog
                        adapter), its markers through the partition layer
                        (PartitionMarkerWriter), producer ids from the id manager;
                        TransactionStateHost loads the partitions this broker leads
    metrics             BrokerMetrics, handed to whoever exports them (the CLI's gateway)
    security            SecurityConfig: the listeners, their TLS contexts and SASL configs
    credential store    SCRAM credentials (FileCredentialStore in the data directory)
    authorizer          StandardAuthorizer over a FileAclStore, when authorizer.class.name
                        is set (applied by the handlers, per API, through the request context)
    client quotas       ClientQuotas over a FileQuotaStore (applied in request dispatch)

Slots the later issues fill: the controller (issue 11: the etcd controller's watch drives
`ReplicaManager.apply_partition_state` and the leadership changes of `__consumer_offsets`
and `__transaction_state`; the marker writer's `remote` sender; the etcd backends of the
ACL, credential and quota stores).

Nothing is imported by a guessed name and nothing is optional: a part that cannot be
built raises `StartupError` naming it (exit 2 and the key for bad configuration), and a
part that cannot start stops the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from yak.broker.broker import Broker, Part, StartupError, one_line
from yak.broker.metrics import BrokerMetrics
from yak.cluster.metadata import METADATA_FILE, LocalMetadataStore
from yak.cluster.producer_ids import ProducerIdManager
from yak.cluster.topics import TopicManager
from yak.config import BrokerConfig
from yak.group.coordinator import GroupConfig, GroupCoordinator
from yak.group.offsets_topic import TopicOffsetsLog, offsets_topic_configs
from yak.partition import ReplicaManager
from yak.security.authorizer import FileAclStore, StandardAuthorizer
from yak.security.channel import ChannelBuilder
from yak.security.quota import ClientQuotas, FileQuotaStore
from yak.security.sasl import FailedAuthenticationDelay, new_broker_secret
from yak.security.scram import FileCredentialStore, ScramCredentialManager
from yak.security.security_config import SecurityConfig
from yak.settings import ConfigError
from yak.storage import LogManager
from yak.txn.coordinator import TransactionCoordinator, TxnConfig
from yak.txn.markers import PartitionMarkerWriter
from yak.txn.state_topic import (
    TopicTransactionLog,
    TransactionStateHost,
    transaction_topic_configs,
)

__all__ = ["ACLS_FILE", "CREDENTIALS_FILE", "QUOTAS_FILE", "build_broker", "group_config",
           "txn_config"]

# The security stores of a single broker, in its data directory (etcd in a cluster).
ACLS_FILE = "__acls.json"
CREDENTIALS_FILE = "__scram_credentials.json"
QUOTAS_FILE = "__client_quotas.json"

T = TypeVar("T")


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
    logs = _construct("storage", lambda: LogManager(str(config.data_dir), config.log_defaults))

    # metadata store (issue 11: `--metadata etcd://...` selects the etcd backend here)
    def make_metadata() -> LocalMetadataStore:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        return LocalMetadataStore(config.data_dir / METADATA_FILE, config.node_id)

    metadata = _construct("metadata store", make_metadata)

    # partition layer
    replica_manager = _construct("replica manager",
                                 lambda: ReplicaManager(config.node_id, logs))

    # topics and leadership: on one broker, this broker is the controller
    topics = _construct("topic manager", lambda: TopicManager(metadata, replica_manager, config))

    # controller: issue 11 composes the etcd controller here.

    producer_ids = _construct("producer id manager", lambda: ProducerIdManager(metadata))

    # group coordinator, on __consumer_offsets through the partition layer
    def topic_partitions(name: str) -> int | None:
        info = topics.get(name)
        return None if info is None else info.partitions

    def make_group() -> GroupCoordinator:
        offsets_log = TopicOffsetsLog(
            replica_manager,
            topic_partitions=topic_partitions,
            create_topic=lambda name, n, configs: topics.create(name, n, configs),
            default_partitions=config.offsets_topic_num_partitions,
            topic_configs=offsets_topic_configs(config.offsets_topic_segment_bytes),
            commit_timeout_ms=config.offsets_commit_timeout_ms,
        )

        def resolve(name: str) -> tuple[object, int] | None:
            info = topics.get(name)
            return None if info is None else (info.topic_id, info.partitions)

        return GroupCoordinator(
            offsets_log,
            group_config(config),
            topic_resolver=resolve,
            topic_lister=lambda: [t.name for t in topics.topics()],
        )

    group_coordinator = _construct("group coordinator", make_group)

    # transaction coordinator, on __transaction_state through the partition layer
    def partition_exists(tp: tuple[str, int]) -> bool:
        info = topics.get(tp[0])
        return info is not None and 0 <= tp[1] < info.partitions

    def make_txn() -> tuple[TransactionCoordinator, TransactionStateHost, PartitionMarkerWriter]:
        txn_log = TopicTransactionLog(
            replica_manager,
            topic_partitions=topic_partitions,
            create_topic=lambda name, n, configs: topics.create(name, n, configs),
            default_partitions=config.transaction_state_log_num_partitions,
            # min.insync.replicas can be no more than the replicas the topic gets
            topic_configs=transaction_topic_configs(
                config.transaction_state_log_segment_bytes,
                min(config.transaction_state_log_min_isr, config.default_replication_factor),
            ),
        )
        markers = PartitionMarkerWriter(
            replica_manager, partition_exists,
            on_offsets_marker=group_coordinator.complete_txn_offsets,
        )

        async def new_producer_id() -> int:
            # Reserving a block of ids writes the metadata store: off the event loop.
            return await asyncio.get_running_loop().run_in_executor(
                None, producer_ids.generate_producer_id)

        coordinator = TransactionCoordinator(
            txn_log, markers, new_producer_id, txn_config(config),
            partition_exists=partition_exists,
        )
        return coordinator, TransactionStateHost(coordinator, txn_log), markers

    txn_coordinator, txn_state, txn_markers = _construct("transaction coordinator", make_txn)

    metrics = _construct("metrics", BrokerMetrics)
    metrics.bind_transactions(txn_coordinator)  # yak_transactions_* read at scrape time
    metrics.bind_replication(replica_manager)  # ISR, delayed produces, replica lag

    # security: listeners (TLS contexts, SASL configs), credentials, ACLs, quotas
    security = _construct("security", lambda: SecurityConfig.from_settings(_listener_settings(config)))
    credentials = _construct(
        "credential store", lambda: FileCredentialStore(config.data_dir / CREDENTIALS_FILE)
    )
    scram_credentials = ScramCredentialManager(credentials)
    authorizer = (
        _construct("authorizer", lambda: StandardAuthorizer.from_settings(
            config.raw, FileAclStore(config.data_dir / ACLS_FILE)))
        if security.authorizer_enabled else None
    )
    quotas = _construct("client quotas", lambda: ClientQuotas.from_settings(
        config.raw, FileQuotaStore(config.data_dir / QUOTAS_FILE)))
    failed_delay = FailedAuthenticationDelay(security.failed_authentication_delay_ms)
    secret = new_broker_secret()
    channel_builders = {
        name: ChannelBuilder(ls, credentials, failed_delay, secret)
        for name, ls in security.by_listener.items()
    }
    quota_task: list[asyncio.Task[None]] = []

    async def start_quotas() -> None:
        await loop_io(quotas.load)
        quota_task.append(asyncio.get_running_loop().create_task(_quota_maintenance(quotas)))

    async def stop_quotas() -> None:
        for t in quota_task:
            t.cancel()

    async def start_storage() -> None:
        # Topic configs live in the metadata, so storage needs them to load the logs.
        await loop_io(logs.startup, topics.log_configs())

    async def stop_storage() -> None:
        await loop_io(logs.shutdown)

    async def start_topics() -> None:
        await loop_io(topics.startup)

    parts = [
        Part("storage", start_storage, stop_storage),
        Part("metadata store"),
        Part("topic manager", start_topics),
        Part("replica manager", replica_manager.start, replica_manager.stop),
        Part("producer id manager"),
        Part("group coordinator", group_coordinator.start, group_coordinator.stop),
        Part("transaction coordinator", txn_state.start, txn_state.stop),
        Part("metrics"),
        Part("security"),
        Part("credential store", lambda: loop_io(credentials.load)),
    ]
    if authorizer is not None:
        parts.append(Part("authorizer", authorizer.start))
    parts.append(Part("client quotas", start_quotas, stop_quotas))
    return Broker(
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
        txn_state=txn_state,
        txn_markers=txn_markers,
    )


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
