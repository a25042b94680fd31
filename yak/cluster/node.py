"""A broker's membership of an etcd cluster: registration, controller, and the publisher
that turns the metadata image into hosted, led and followed partitions.

`ClusterNode` is what `yak/broker/compose.py` builds when `metadata.store` is an etcd URL.
Its parts, in start order:

1. `start_metadata`: the etcd client, the cluster id (created by the first broker), the
   data dir's `meta.properties` checked against it (a dir of another cluster or node
   refuses to start, one line), then the metadata image (`EtcdMetadataStore`).
2. `start_hosting` (after storage loaded the logs): the publisher hosts every partition
   the image assigns to this broker, deletes logs the image no longer assigns here, and
   from then on applies every change of the image.
3. `register` (once the listeners are bound, so the registered endpoints are the real
   ones): the broker registration on its session lease, then the controller campaign.

Leadership is only taken from a record written *after* this broker's current
registration: a broker that restarted, or lost its session and registered again, never
leads on the strength of a decision made about its previous incarnation. Such records
are applied as "no leader" until the controller, which sees the new registration, writes
a new one (with a new leader epoch). Together with etcd fencing every controller write,
this is why a broker paused past its session cannot resume as a leader.

Controlled shutdown (`controlled_shutdown`, on SIGTERM): the broker marks its registration
`inControlledShutdown`; the controller moves its leaderships to other ISR members and takes
it out of the ISRs (Kafka's rules); the broker waits (bounded) until it leads nothing,
gives up the controller key if it holds it, and deregisters, so the others see it leave at
once rather than after its session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from yak.cluster.controller import ControllerElection
from yak.cluster.etcd import EtcdError
from yak.cluster.etcd_store import EtcdMetadataStore, MetadataDelta, PartitionEntry
from yak.cluster.identity import DataDirMismatchError
from yak.cluster.kv import open_kv
from yak.cluster.layout import ClusterKeys
from yak.cluster.liveness import BrokerLiveness
from yak.cluster.local_kv import LocalKV
from yak.cluster.local_migration import migrate
from yak.cluster.membership import BrokerRegistration, RegistrationState
from yak.cluster.quorum_controller import QuorumController
from yak.cluster.records import BrokerEndpoint, RegisterBrokerRecord
from yak.cluster.view import NodeInfo
from yak.partition.state import NO_LEADER, PartitionState

if TYPE_CHECKING:
    from yak.cluster.cluster_topics import ClusterTopicManager
    from yak.partition import ReplicaManager

__all__ = ["ClusterNode", "EndpointSpec", "PartitionHook", "ReplicaFollower"]

log = logging.getLogger(__name__)

TOPIC_IDS_FILE = "__yak_topic_ids.json"
CONTROLLED_SHUTDOWN_TIMEOUT_S = 20.0


class ReplicaFollower(Protocol):
    """The replica fetchers (yak/cluster/replica_fetcher.py): follow a partition's leader
    from a given leader epoch on, or stop following it."""

    def follow(self, topic: str, partition: int, leader_id: int, leader_epoch: int) -> None: ...

    def unfollow(self, topic: str, partition: int) -> None: ...


# (topic, partition, state applied or None when no longer hosted, leads here)
PartitionHook = Callable[[str, int, PartitionState | None, bool], None]


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """A listener to register: name, advertised host and port, Kafka's protocol id."""

    name: str
    host: str
    port: int
    security_protocol: int = 0


class ClusterNode:
    def __init__(self, replica_manager: ReplicaManager, *,
                 node_id: int, metadata_url: str, data_dir: Path,
                 session_timeout_ms: int, heartbeat_interval_ms: int,
                 rack: str | None = None, inter_broker_listener: str = "PLAINTEXT",
                 auto_rebalance: bool = True, imbalance_check_interval_s: float = 300.0,
                 imbalance_percentage: int = 10, controlled_shutdown: bool = True,
                 etcd_timeout_s: float = 5.0, liveness_probe: bool = True,
                 liveness_unresponsive_ms: int = 0) -> None:
        self.client, namespace, _endpoints = open_kv(metadata_url, data_dir,
                                                     etcd_timeout_s=etcd_timeout_s)
        self.node_id = node_id
        self.data_dir = Path(data_dir)
        self.replica_manager = replica_manager
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rack = rack
        self.inter_broker_listener = inter_broker_listener
        self.controlled_shutdown_enabled = controlled_shutdown
        self.keys = ClusterKeys(namespace)
        self.store = EtcdMetadataStore(self.client, self.keys, node_id, self.data_dir)
        # A local store is a one-node cluster by construction: no other broker can join it.
        self.single_node = isinstance(self.client, LocalKV)
        if isinstance(self.client, LocalKV):
            # Read now, as the part is built (a damaged file stops `yak serve` before any
            # socket), and filled on first start from a single broker's files of before.
            self.client.open_sync()
            migrate(self.client, self.keys, self.data_dir, node_id)
        self.registration: BrokerRegistration | None = None
        self.incarnation = str(uuid.uuid4())
        self.election = ControllerElection(
            self.client, self.keys, node_id,
            lambda: self.registration.lease if self.registration is not None else None,
            on_elected=self._elected, on_resigned=self._resigned)
        self.controller = QuorumController(
            self.store, self.election, auto_rebalance=auto_rebalance,
            imbalance_check_interval_s=imbalance_check_interval_s,
            imbalance_percentage=imbalance_percentage,
            on_election=self._count_election)
        # The controller also fences a broker whose process is gone (its listener refuses
        # connections) without waiting for its session to expire (yak/cluster/liveness.py).
        self.liveness = (BrokerLiveness(self.store, self.client, self.keys, node_id,
                                        self.resolve,
                                        unresponsive_ms=liveness_unresponsive_ms)
                         if liveness_probe and not self.single_node else None)
        self.topics: ClusterTopicManager | None = None
        self.fetchers: ReplicaFollower | None = None
        self.hooks: list[PartitionHook] = []
        self.on_fence: list[Callable[[bool], None]] = []  # True: fenced, False: registered
        self.leader_elections = 0
        self.unclean_elections = 0
        self._applied: dict[tuple[str, int], tuple[str, PartitionState, bool]] = {}
        self._topic_ids: dict[str, str] = {}
        self._hosting = False
        self._led_changed = asyncio.Event()
        self._endpoints: Callable[[], Sequence[EndpointSpec]] = lambda: ()

    # ------------------------------------------------------------------ wiring

    def bind(self, topics: ClusterTopicManager, fetchers: ReplicaFollower | None = None,
             endpoints: Callable[[], Sequence[EndpointSpec]] | None = None) -> None:
        """The parts built after this node: its topic manager (reads, log configs,
        unclean election settings), the replica fetchers, the listeners to register."""
        self.topics = topics
        self.fetchers = fetchers
        if endpoints is not None:
            self._endpoints = endpoints
        self.controller.unclean_enabled = self._unclean_enabled

    def _unclean_enabled(self, topic: str) -> bool:
        info = self.store.get(topic)
        if info is None or self.topics is None:
            return False
        try:
            return bool(self.topics.log_config(info).unclean_leader_election_enable)
        except Exception:
            return False

    def _count_election(self, n: int, unclean: bool) -> None:
        self.leader_elections += n
        if unclean:
            self.unclean_elections += n

    # ------------------------------------------------------------------ parts

    async def start_metadata(self) -> None:
        try:
            await self.store.start()
        except DataDirMismatchError:
            await self.client.aclose()
            raise
        except EtcdError as e:
            await self.client.aclose()
            raise EtcdError(f"etcd at {', '.join(self.client.endpoints)} unreachable: {e}"
                            ) from e
        log.info("cluster %s (%s): metadata image at revision %d", self.keys.namespace,
                 self.store.cluster_id, self.store.revision)

    async def start_hosting(self) -> None:
        """Host what the image assigns here (storage has loaded the logs)."""
        self._topic_ids = self._read_topic_ids()
        expected: set[tuple[str, int]] = set()
        for topic_id, p, entry in list(self.store.all_partitions()):
            name = self.store.topic_name(topic_id)
            if name is not None and self.node_id in entry.record.replicas:
                expected.add((name, p))
        # Logs of a topic deleted and re-created under the same name while this broker was
        # away belong to the old topic: they must not become replicas of the new one.
        for name, old_id in list(self._topic_ids.items()):
            info = self.store.get(name)
            if info is None or str(info.topic_id) != old_id:
                for log_ in list(self.replica_manager.logs.logs()):
                    if log_.topic == name:
                        log.warning("deleting log %s-%d of an older topic %s (id %s)",
                                    name, log_.partition, name, old_id)
                        self.replica_manager.stop_partition(name, log_.partition, delete=True)
                del self._topic_ids[name]
        self.replica_manager.delete_stray_logs(expected)
        self._hosting = True
        for topic_id, p, _e in list(self.store.all_partitions()):
            # At start-up a replica that cannot be hosted (its log dir unusable) stops the
            # broker, one line naming it; later changes are logged and retried by the next.
            self._apply(topic_id, p, strict=True)
        self._write_topic_ids()
        self.store.add_listener(self._on_delta)

    async def register(self) -> None:
        """Register this broker (endpoints as bound), then campaign for controller."""
        record = RegisterBrokerRecord(
            broker_id=self.node_id, incarnation_id=self.incarnation,
            end_points=tuple(BrokerEndpoint(e.name, e.host, e.port, e.security_protocol)
                             for e in self._endpoints()),
            rack=self.rack, log_dirs=(self.store.directory_id,) if self.store.directory_id
            else ())
        self.registration = BrokerRegistration(
            self.client, self.keys, record, session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms, on_state=self._registration_state)
        await self.registration.start()
        # Its own registration in the image before anything reads the brokers from it.
        await self.store.wait_for_revision(self.registration.epoch)
        self.election.start()
        if self.liveness is not None:
            self.liveness.open()  # probe the controller (every broker; liveness.py)
        if set(self.store.brokers()) <= {self.node_id}:
            await self._await_reelection(self.session_timeout_ms / 1000)

    async def _await_reelection(self, timeout: float) -> None:
        """Alone in the image (a one-node cluster, or the first broker up): nobody else can
        lead, so wait, bounded, until the controller (this broker) is in the image and has
        rewritten every record naming it in an ISR under its new registration. Then the
        broker is ready with its partitions led, as Kafka's broker waits to be unfenced
        before it serves. The controller key matters even with no partitions: a Metadata
        answered before it names controller -1, and librdkafka's AdminClient then waits for
        a controller without asking again, so its first CreateTopics timed out unsent."""
        def elected(store: EtcdMetadataStore) -> bool:
            epoch = self.broker_epoch
            return epoch > 0 and store.controller is not None and all(
                e.mod_revision > epoch for _t, _p, e in store.all_partitions()
                if self.node_id in e.record.isr)

        if elected(self.store):
            return
        try:
            await self.store.wait_for(elected, timeout)
        except TimeoutError:
            log.warning("broker %d: not re-elected leader of its partitions within %.0f s;"
                        " serving anyway (they answer LEADER_NOT_AVAILABLE until then)",
                        self.node_id, timeout)

    async def stop(self) -> None:
        """Everything this node runs, stopped (controlled shutdown ran before)."""
        if self.liveness is not None:
            await self.liveness.aclose()
        await self.controller.stop()
        with contextlib.suppress(Exception):
            await self.election.stop()
        if self.registration is not None:
            with contextlib.suppress(Exception):
                await self.registration.stop()
        await self.store.stop()
        await self.client.aclose()

    # ------------------------------------------------------------------ registration

    @property
    def broker_epoch(self) -> int:
        reg = self.registration
        return reg.epoch if reg is not None and reg.state is RegistrationState.REGISTERED else -1

    def is_registered(self) -> bool:
        return self.registration is not None and self.registration.is_registered()

    def may_acknowledge(self) -> bool:
        """The replica manager's no-I/O check before acknowledging a write: registered,
        and the session certainly alive, or etcd unreachable from a broker that kept
        running all along (it serves what it leads with the ISR it has). A broker
        resumed after a pause longer than its session answers False until etcd says."""
        reg = self.registration
        if reg is None or reg.state is not RegistrationState.REGISTERED or reg.lease is None:
            return False
        return reg.lease.alive_without_etcd()

    def _registration_state(self, state: RegistrationState, epoch: int) -> None:
        if state is RegistrationState.LOST:
            log.warning("broker %d is fenced: its session (epoch %d) is gone; it"
                        " acknowledges nothing until it registered again", self.node_id, epoch)
            for cb in self.on_fence:
                cb(True)
        if state is RegistrationState.REGISTERED:
            if self._hosting:
                # A new epoch: what this broker led under the old one is led no more.
                for topic_id, p, _e in list(self.store.all_partitions()):
                    self._apply(topic_id, p)
            for cb in self.on_fence:
                cb(False)

    def _may_lead(self, entry: PartitionEntry) -> bool:
        epoch = self.broker_epoch
        return epoch > 0 and entry.mod_revision > epoch

    # ------------------------------------------------------------------ the controller

    def _elected(self, epoch: int) -> None:
        self.controller.on_elected(epoch)
        if self.liveness is not None:
            self.liveness.start()

    def _resigned(self, epoch: int) -> None:
        if self.liveness is not None:
            self.liveness.stop()
        self.controller.on_resigned(epoch)

    def controller_id(self) -> int:
        c = self.store.controller
        return c[0] if c is not None else -1

    # ------------------------------------------------------------------ metrics

    def cluster_stats(self) -> dict[str, float]:
        """What the broker's metrics export (yak/broker/metrics.py, read at scrape time)."""
        offline = leaders = hosted = 0
        for _t, _p, e in self.store.all_partitions():
            rec = e.record
            if rec.leader == -1:
                offline += 1
            if self.node_id in rec.replicas:
                hosted += 1
                if rec.leader == self.node_id:
                    leaders += 1
        return {
            "controller_active": 1.0 if self.controller.active else 0.0,
            "leader_elections": self.leader_elections,
            "unclean_leader_elections": self.unclean_elections,
            "offline_partitions": offline,
            "registered_brokers": len(self.store.brokers()),
            "leader_partitions": leaders,
            "partitions": hosted,
            "liveness_fenced": self.liveness.fenced if self.liveness is not None else 0,
            "liveness_frozen": self.liveness.frozen if self.liveness is not None else 0,
            "liveness_tls_refused": (self.liveness.tls_refused if self.liveness is not None
                                     else 0),
            "liveness_withheld": self.liveness.withheld if self.liveness is not None else 0,
        }

    # ------------------------------------------------------------------ the view

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(n, b.rack, b.fenced,
                         {ep.name: (ep.host, ep.port) for ep in b.record.end_points})
                for n, b in sorted(self.store.brokers().items())]

    def node(self, node_id: int) -> NodeInfo | None:
        b = self.store.broker(node_id)
        if b is None:
            return None
        return NodeInfo(node_id, b.rack, b.fenced,
                        {ep.name: (ep.host, ep.port) for ep in b.record.end_points})

    def resolve(self, node_id: int) -> tuple[str, int] | None:
        """A broker's inter-broker endpoint (for replica fetchers), None if not registered."""
        b = self.store.broker(node_id)
        if b is None:
            return None
        return b.endpoint(self.inter_broker_listener) or b.endpoint(None)

    # ------------------------------------------------------------------ the publisher

    def _on_delta(self, delta: MetadataDelta) -> None:
        for topic_id, name in delta.deleted_topics.items():
            self._remove_topic(topic_id, name)
        keys = set(delta.partitions)
        if delta.snapshot:
            keys |= {(t, p) for t, p, _ in self.store.all_partitions()}
            for (name, p), (topic_id, _s, _l) in list(self._applied.items()):
                if self.store.partition_entry(topic_id, p) is None:
                    self._remove(name, p, topic_id)
        if delta.brokers and self.node_id in delta.brokers:
            pass  # our own registration: handled by _registration_state
        for topic_id, p in sorted(keys):
            self._apply(topic_id, p)
        for name in delta.configs:
            info = self.store.get(name)
            if info is not None and self.topics is not None:
                try:
                    self.replica_manager.update_config(name, self.topics.log_config(info))
                except Exception:
                    log.exception("applying the configs of %s", name)
        if delta.brokers and self.fetchers is not None:
            # A leader that registered again may listen elsewhere now: follow afresh.
            for (name, p), (_tid, state, leads) in list(self._applied.items()):
                if not leads and state.leader in delta.brokers and state.leader != NO_LEADER:
                    self.fetchers.follow(name, p, state.leader, state.leader_epoch)

    def _apply(self, topic_id: str, p: int, strict: bool = False) -> None:
        name = self.store.topic_name(topic_id)
        entry = self.store.partition_entry(topic_id, p)
        if name is None or entry is None:
            return
        state = entry.state
        current = self._applied.get((name, p))
        if current is not None and current[0] != topic_id:
            self._remove(name, p, current[0])  # the topic was re-created under its name
            current = None
        if self.node_id not in state.replicas:
            if current is not None or self.replica_manager.get_partition(name, p) is not None:
                log.info("%s-%d: no longer a replica here", name, p)
                self._remove(name, p, topic_id)
            return
        if state.leader == self.node_id and not self._may_lead(entry):
            state = replace(state, leader=NO_LEADER)  # decided before this registration
        info = self.store.get(name)
        if info is None or self.topics is None:
            return
        try:
            cfg = self.topics.log_config(info)
            self.replica_manager.apply_partition_state(name, p, info.topic_id, state, cfg)
        except Exception:
            if strict:
                raise
            log.exception("%s-%d: applying partition state %s failed", name, p, state)
            return
        if self._topic_ids.get(name) != topic_id:
            self._topic_ids[name] = topic_id
            self._write_topic_ids()
        leads = state.leader == self.node_id
        was_leading = current is not None and current[2]
        self._applied[(name, p)] = (topic_id, state, leads)
        if self.fetchers is not None:
            if leads or state.leader == NO_LEADER:
                self.fetchers.unfollow(name, p)
            else:
                self.fetchers.follow(name, p, state.leader, state.leader_epoch)
        if leads != was_leading or current is None or current[1] != state:
            for hook in self.hooks:
                try:
                    hook(name, p, state, leads)
                except Exception:
                    log.exception("partition hook for %s-%d failed", name, p)
        if was_leading and not leads:
            self._led_changed.set()

    def _remove(self, name: str, p: int, topic_id: str) -> None:
        current = self._applied.pop((name, p), None)
        if self.fetchers is not None:
            self.fetchers.unfollow(name, p)
        for hook in self.hooks:
            try:
                hook(name, p, None, False)
            except Exception:
                log.exception("partition hook for %s-%d failed", name, p)
        hosted = self.replica_manager.get_partition(name, p)
        if hosted is None or str(hosted.topic_id) == topic_id or current is not None:
            self.replica_manager.stop_partition(name, p, delete=True)
        if current is not None and current[2]:
            self._led_changed.set()

    def _remove_topic(self, topic_id: str, name: str) -> None:
        for (n, p), (tid, _s, _l) in list(self._applied.items()):
            if n == name and tid == topic_id:
                self._remove(n, p, tid)
        if self.replica_manager.remote_log is not None:  # tiered storage: its remote log too
            self.replica_manager.remote_log.delete_topic(name, topic_id)
        if self._topic_ids.get(name) == topic_id:
            del self._topic_ids[name]
            self._write_topic_ids()

    def led_partitions(self) -> list[tuple[str, int]]:
        return [k for k, (_t, _s, leads) in self._applied.items() if leads]

    def led_in_image(self) -> list[tuple[str, int]]:
        """Partitions the image says this broker leads (what controlled shutdown waits on)."""
        out = []
        for topic_id, p, e in self.store.all_partitions():
            if e.record.leader == self.node_id:
                name = self.store.topic_name(topic_id)
                if name is not None:
                    out.append((name, p))
        return out

    # ------------------------------------------------------------------ topic ids on disk

    def _read_topic_ids(self) -> dict[str, str]:
        try:
            return {str(k): str(v) for k, v in json.loads(
                (self.data_dir / TOPIC_IDS_FILE).read_text()).items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("ignoring unreadable %s: %s", TOPIC_IDS_FILE, e)
            return {}

    def _write_topic_ids(self) -> None:
        """Which topic (by id) each local log belongs to, so a topic re-created under the
        same name while this broker was away is told apart from the old one's logs."""
        path = self.data_dir / TOPIC_IDS_FILE
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(self._topic_ids, sort_keys=True))
            os.replace(tmp, path)
        except OSError as e:
            log.warning("cannot write %s: %s", path, e)

    # ------------------------------------------------------------------ shutdown

    async def controlled_shutdown(self, timeout: float = CONTROLLED_SHUTDOWN_TIMEOUT_S) -> None:
        """Move leadership away before exiting (see module docstring); bounded."""
        reg = self.registration
        if reg is not None:
            # A stopping broker never registers again: if the controller's liveness probe
            # fences it once its listeners close, that is its deregistration, done early.
            reg.rejoin = False
        if reg is None or not self.controlled_shutdown_enabled:
            return
        deadline = time.monotonic() + timeout
        # A one-node cluster has nobody to move leadership to: its partitions stay as they
        # are and the controller re-elects this broker under its next registration (a
        # leader epoch later). (The last broker of a real cluster still marks them offline.)
        try:
            if reg.state is RegistrationState.REGISTERED and not self.single_node:
                ok = await asyncio.wait_for(
                    reg.update(replace(reg.record, in_controlled_shutdown=True)),
                    max(0.5, deadline - time.monotonic()))
                if ok:
                    await self._wait_leaderless(deadline)
        except (EtcdError, TimeoutError) as e:
            log.warning("controlled shutdown: %s; shutting down anyway", e)
        if self.controller.active:
            # Let the controller finish moving what it was moving, then hand it over.
            with contextlib.suppress(TimeoutError):
                # asyncio.timeout, not wait_for: 3.11's wait_for drops a cancel
                async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                    await self.controller.idle.wait()
        await self.controller.stop()
        with contextlib.suppress(Exception):
            await self.election.stop()
        with contextlib.suppress(Exception):
            await reg.stop()

    async def _wait_leaderless(self, deadline: float) -> None:
        while True:
            led = self.led_in_image()
            if not led:
                log.info("controlled shutdown: leadership moved away")
                return
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("controlled shutdown: still leading %d partition(s) after the"
                            " timeout: %s", len(led), led[:5])
                return
            revision = self.store.revision
            with contextlib.suppress(TimeoutError):
                await self.store.wait_for(lambda s, r=revision: s.revision > r, min(left, 1.0))

