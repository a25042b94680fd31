"""The broker object handlers reach everything through.

It owns no protocol logic and builds nothing itself: `yak.broker.compose.build_broker`
constructs every part by name and hands them here. Handlers use the parts below (never a
`PartitionLog` or the metadata store directly); `start()` starts the parts in the order
they were composed and `stop()` stops them in reverse.

Start-up is timed (issue 27: a restarted broker must be ready well inside the chaos
tool's readiness bound on a loaded machine): once registered, the broker logs one line,
`broker N ready in T s since process start: imports and building a s (Python, the
modules, the settings, the parts built), built to start (handler imports) b s, <part> c s,
..., listeners and registration d s`, so a slow restart names what it waited on.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from yak.broker.connection import KafkaConnection
    from yak.broker.metrics import BrokerMetrics
    from yak.cluster.cluster_topics import ClusterTopicManager
    from yak.cluster.coordinators import CoordinatorLocator
    from yak.cluster.dynamic_config import DynamicBrokerConfigs
    from yak.cluster.producer_ids import ProducerIdManager
    from yak.cluster.view import ClusterView
    from yak.config import BrokerConfig
    from yak.group.coordinator import GroupCoordinator
    from yak.partition import ReplicaManager
    from yak.security.authorizer import StandardAuthorizer
    from yak.security.channel import ChannelBuilder
    from yak.security.quota import ClientQuotas
    from yak.security.scram import ScramCredentialManager
    from yak.security.security_config import SecurityConfig
    from yak.share.manager import ShareManager
    from yak.txn.coordinator import TransactionCoordinator
    from yak.txn.markers import PartitionMarkerWriter

__all__ = ["Broker", "Part", "StartupError", "one_line"]

log = logging.getLogger(__name__)


class StartupError(Exception):
    """A part could not be built or started. The message is one line naming the part (and,
    for configuration, the key); `exit_code` is 2 for bad configuration, 1 otherwise."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Part:
    """One named part of the broker and how to start and stop it."""

    name: str
    start: Callable[[], Awaitable[None]] | None = None
    stop: Callable[[], Awaitable[None]] | None = None


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        cluster_id: str,
        topics: ClusterTopicManager,
        replica_manager: ReplicaManager,
        producer_ids: ProducerIdManager,
        group_coordinator: GroupCoordinator,
        metrics: BrokerMetrics,
        parts: list[Part],
        security: SecurityConfig,
        channel_builders: dict[str, ChannelBuilder],
        scram_credentials: ScramCredentialManager,
        quotas: ClientQuotas,
        authorizer: StandardAuthorizer | None = None,
        txn_coordinator: TransactionCoordinator | None = None,
        txn_state: TransactionCoordinator | None = None,
        txn_markers: PartitionMarkerWriter | None = None,
        cluster: ClusterView,
        coordinators: CoordinatorLocator | None = None,
    ) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.node_id: int = config.node_id
        self.host: str = config.advertised_host
        self.port: int = config.advertised_port
        self.topics = topics
        self.replica_manager = replica_manager
        self.producer_ids = producer_ids
        self.group_coordinator = group_coordinator
        # The transaction coordinator (`txn_state.ensure_ready()` creates
        # `__transaction_state` on first use and loads the partitions led here; the same
        # object) and the marker writer the coordinator and the WriteTxnMarkers handler
        # append markers through.
        self.txn_coordinator = txn_coordinator
        self.txn_state = txn_state
        self.txn_markers = txn_markers
        self.metrics = metrics
        # Security (issue 13): the listeners and how each authenticates its connections;
        # the authorizer (None: `authorizer.class.name` unset, everyone may do anything);
        # SCRAM credentials (the same store SCRAM logins read) and client quotas.
        self.security = security
        self.channel_builders = channel_builders
        self.scram_credentials = scram_credentials
        self.quotas = quotas
        self.authorizer = authorizer
        # listener name -> (host, port) clients are told to use on that listener: the
        # advertised endpoint, with the bound port for a listener on port 0.
        self.advertised: dict[str, tuple[str, int]] = {
            ep.listener_name: (ep.host or "127.0.0.1", ep.port)
            for ep in security.listeners.advertised
        }
        self.connections: set[KafkaConnection] = set()
        # The brokers of the cluster and its controller, for Metadata, DescribeCluster and
        # FindCoordinator: the cluster node's image (a single broker is a one-node cluster).
        self.cluster = cluster
        # Who coordinates a group / transactional id (FindCoordinator).
        self.coordinators = coordinators
        # Share groups (KIP-932, yak/share/): set by the composition; None answers the
        # share APIs COORDINATOR_NOT_AVAILABLE.
        self.share: ShareManager | None = None
        # Dynamic broker configs (issue 23, yak/cluster/dynamic_config.py): set by the
        # composition; None refuses BROKER config changes.
        self.dynamic_configs: DynamicBrokerConfigs | None = None
        # Run once every listener is bound (a cluster broker registers then, with the real
        # ports), and before the listeners close on shutdown (controlled shutdown).
        self.on_listening: list[Callable[[], Awaitable[None]]] = []
        self.before_stop: list[Callable[[], Awaitable[None]]] = []
        self._parts = parts
        self._started: list[Part] = []
        # (what, seconds) of this start, in order, for the ready line (`start_timings`).
        self.start_timings: list[tuple[str, float]] = []
        self._start_began: float | None = None
        self._parts_done = 0.0
        # Built now: the ready line tells the imports and building before this from what
        # ran between here and start() (`yak serve`: the handlers' imports, the loop).
        self._built_at = time.monotonic()

    def endpoint(self, listener_name: str | None) -> tuple[str, int] | None:
        """(host, port) this broker advertises on a listener; None if that listener is not
        advertised. Metadata, FindCoordinator and DescribeCluster answer with the endpoint
        of the listener the request came in on (Kafka's rule), so a client that connected
        over SASL_SSL is never sent to the PLAINTEXT port."""
        if listener_name is None:
            return self.host, self.port
        return self.advertised.get(listener_name)

    async def listening(self) -> None:
        """The listeners are bound: run the `on_listening` hooks (StartupError if one
        fails, after stopping the parts), then log how long the start took, by part."""
        for hook in self.on_listening:
            try:
                await hook()
            except Exception as e:
                log.debug("a listening hook failed", exc_info=True)
                await self.stop()
                raise StartupError(f"cannot join the cluster: {one_line(e)}") from e
        if self._start_began is not None:
            self.start_timings.append(("listeners and registration",
                                       time.monotonic() - self._parts_done))
            log.info("%s", self.ready_line())

    def ready_line(self) -> str:
        """`broker N ready in T s since process start: imports and building a s, built to
        start b s, ...`: every part that took 5 ms or more, in start order, the rest summed as `other parts`, then
        the listeners and registration."""
        began = self._start_began if self._start_began is not None else time.monotonic()
        built = min(self._built_at, began)
        before = _process_age_s(built)
        total = time.monotonic() - built + (before or 0.0)
        *timed, last = self.start_timings or [("listeners and registration", 0.0)]
        shown = [(n, t) for n, t in timed if t >= 0.005]
        rest = sum(t for _n, t in timed if t < 0.005)
        items = ([("imports and building", before)]
                 if before is not None else [])
        items.append(("built to start (handler imports)", began - built))
        items += [*shown, *([("other parts", rest)] if rest else []), last]
        since = "since process start" if before is not None else "since it was built"
        return (f"broker {self.node_id} ready in {total:.2f} s {since}: "
                + ", ".join(f"{n} {t:.2f} s" for n, t in items))

    async def prepare_stop(self) -> None:
        """Before the listeners close: the `before_stop` hooks (controlled shutdown)."""
        for hook in self.before_stop:
            try:
                await hook()
            except Exception:
                log.exception("a shutdown hook failed")

    @property
    def part_names(self) -> list[str]:
        return [p.name for p in self._parts]

    async def start(self) -> None:
        """Start every part in order; if one fails, stop those started and raise
        StartupError naming it (the broker must not run without one of its parts). Each
        part's time is kept for the ready line."""
        self._start_began = self._parts_done = time.monotonic()
        self.start_timings = []
        for part in self._parts:
            if part.start is None:
                self._started.append(part)
                continue
            log.info("starting %s", part.name)
            began = time.monotonic()
            try:
                await part.start()
            except Exception as e:
                # The reason is the one line StartupError carries; the traceback is for
                # whoever debugs with the log level at DEBUG.
                log.debug("starting %s failed", part.name, exc_info=True)
                await self.stop()
                code = e.exit_code if isinstance(e, StartupError) else 1
                raise StartupError(f"cannot start {part.name}: {one_line(e)}",
                                   exit_code=code) from e
            self._started.append(part)
            self._parts_done = time.monotonic()
            self.start_timings.append((part.name, self._parts_done - began))

    async def stop(self) -> None:
        """Stop the started parts in reverse order; one failing does not keep the others
        (storage last of all) from shutting down cleanly."""
        while self._started:
            part = self._started.pop()
            if part.stop is None:
                continue
            try:
                await part.stop()
            except Exception:
                log.exception("stopping %s failed", part.name)


def _process_age_s(at_monotonic: float) -> float | None:
    """Seconds from this process's start to `at_monotonic` (Linux: /proc/self/stat's
    start time in clock ticks since boot, against CLOCK_BOOTTIME); None where unknown."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        # Field 22 (starttime); the command name (field 2) may hold spaces: split after it.
        start_ticks = int(stat[stat.rindex(b")") + 2:].split()[19])
        boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    age_now = boot_now - start_ticks / os.sysconf("SC_CLK_TCK")
    return max(0.0, age_now - (time.monotonic() - at_monotonic))


def one_line(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return " ".join(text.split())
