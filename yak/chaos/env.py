"""The cluster a chaos run attacks: etcd and Yak brokers on this machine, with fault hooks.

Built on the cluster harness (yak/devcluster/local.py): a `LocalCluster` records every process
in `<dir>/cluster.json` (so `yak cluster status --dir` sees a running chaos cluster), each
process is a `ManagedProcess` with kill -9 / SIGTERM / SIGSTOP / SIGCONT hooks.

- One broker: `yak serve` with its local metadata store (no etcd).
- 3 or 5 brokers: etcd (1 or 3 members) and `yak serve --metadata etcd://...`, node ids
  1..N, replication factor 3, min.insync.replicas 2 for the workload's topics.
- network "netns" (root): every broker in its own namespace and address
  (yak/chaos/netns.py), so partitions between chosen brokers are real packet drops; etcd
  listens on the bridge too. "loopback": everything on 127.0.0.1; with `proxied_links`,
  replication between brokers goes through one TCP proxy per link (yak/chaos/links.py,
  no root needed), which partitions and delays between brokers act on (brokers still all
  reach etcd, and clients every broker).
- disk: one broker's data directory can be a small tmpfs (root), to fill it on purpose.
- tiered (`--tiered`): the harness's S3 store (SeaweedFS, `LocalCluster.start_store`, as
  `yak cluster up --tiered` starts it) on ports +20 .. +30, every broker with tiered storage
  on it, and the queue topic tiered with small segments and a small local retention
  (yak/chaos/store.py), so the store's faults (faults.py) meet real uploads and reads.
- clock: brokers can run under libfaketime (Debian's libfaketime) reading their offset from
  a file, so a clock-jump fault moves one broker's wall clock (not its monotonic clock:
  real clocks jump, monotonic ones do not, which is also what Jepsen's clock nemesis does).

Who leads what is asked of the cluster over the wire, as a client would: Metadata for
partition leaders, DescribeCluster for the controller.
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yak.chaos.links import ReplicationLinks
from yak.chaos.netns import ETCD, NetnsTopology
from yak.chaos.store import TIERED_TOPIC_CONFIG, tiered_broker_settings
from yak.devcluster.local import (
    PORT_SPAN,
    STORE_PORT_SPAN,
    ClusterStateError,
    LocalCluster,
    LocalEtcd,
    ManagedProcess,
    PortPlan,
)

__all__ = ["ChaosCluster", "ClusterSpec", "faketime_library"]

READY = "Yak broker ready on"
BROKER_READY_TIMEOUT_S = 60.0


def faketime_library() -> str | None:
    """Path of Debian's libfaketime (package libfaketime), or None."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return found[0] if found else None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default if unread)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def pick_base_port(rng: random.Random | None = None, span: int = PORT_SPAN) -> int:
    """A base port whose whole PortPlan span is free right now, outside the ephemeral range.

    Why outside: a member restarted after a kill must bind its old ports again, and any
    outgoing connection on the machine (a broker's to etcd, a client's) may have been given
    one of them as its local port meanwhile. Run E's `etcd-kill` restart failed so
    ("bind: address already in use" on a peer port at 40902)."""
    rng = rng or random.Random()
    low, high = _ephemeral_range()
    spans = [(lo, hi) for lo, hi in ((10000, low - span), (high + 1, 65535 - span))
             if hi > lo]
    if not spans:
        raise ClusterStateError(f"the ephemeral port range {low}-{high} leaves no room for"
                                " the chaos cluster's ports")
    for _ in range(200):
        lo, hi = rng.choice(spans)
        base = rng.randrange(lo, hi)
        if all(_port_free(base + i) for i in range(span)):
            return base
    raise ClusterStateError(f"no free range of {span} ports found for the chaos cluster")


@dataclass
class ClusterSpec:
    directory: Path
    brokers: int = 3
    etcd_members: int = 1
    network: str = "loopback"  # loopback | netns
    base_port: int | None = None
    broker_settings: dict[str, str] = field(default_factory=dict)
    tmpfs_broker: int | None = None  # node id whose data dir is a small tmpfs
    tmpfs_mb: int = 256
    faketime: bool = False
    session_timeout_ms: int = 6000
    proxied_links: bool = False  # loopback: replication through per-link TCP proxies
    tiered: bool = False  # an S3 store, tiered brokers and a tiered queue topic

    def __post_init__(self) -> None:
        if self.brokers not in (1, 3, 5):
            raise ValueError(f"a chaos cluster has 1, 3 or 5 brokers, not {self.brokers}")
        if self.network not in ("loopback", "netns"):
            raise ValueError(f"network {self.network!r} (loopback or netns)")
        if self.tiered and self.network != "loopback":
            # the store listens on 127.0.0.1, which brokers in namespaces do not reach
            raise ValueError("a tiered chaos cluster runs on the loopback network")

    @property
    def replication_factor(self) -> int:
        return min(3, self.brokers)

    @property
    def min_insync_replicas(self) -> int:
        return 2 if self.brokers >= 3 else 1


class ChaosCluster:
    """Starts, inspects and breaks the cluster described by a ClusterSpec."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.dir = Path(spec.directory).resolve()
        span = PORT_SPAN + (STORE_PORT_SPAN if spec.tiered else 0)
        base = spec.base_port or pick_base_port(span=span)
        self.plan = PortPlan(base, spec.brokers, spec.etcd_members, spec.tiered)
        self.local = LocalCluster(self.dir, self.plan)
        self.etcd: LocalEtcd | None = None
        self.net: NetnsTopology | None = None
        self.links: ReplicationLinks | None = None
        self.brokers: dict[int, ManagedProcess] = {}
        self.store: ManagedProcess | None = None  # the S3 store (tiered)
        self.tiered_topics: set[str] = set()  # topics created with TIERED_TOPIC_CONFIG
        self.mounts: list[Path] = []
        self._faketime = faketime_library() if spec.faketime else None

    # ------------------------------------------------------------------ addresses

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, self.spec.brokers + 1))

    def host(self, node: int) -> str:
        return self.net.addr[f"b{node}"] if self.net else "127.0.0.1"

    def kafka_port(self, node: int) -> int:
        return self.plan.kafka[node - 1]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host(n)}:{self.kafka_port(n)}" for n in self.node_ids)

    def broker_name(self, node: int) -> str:
        return f"broker{node}"

    def data_dir(self, node: int) -> Path:
        if node == self.spec.tmpfs_broker:
            return self.disk_mount(node) / "data"
        return self.dir / f"broker{node}" / "data"

    def disk_mount(self, node: int) -> Path:
        return self.dir / f"broker{node}" / "disk"

    def faketime_file(self, node: int) -> Path:
        return self.dir / f"broker{node}" / "faketime"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ChaosCluster:
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            if self.spec.network == "netns":
                self.net = NetnsTopology([f"b{n}" for n in self.node_ids]).setup()
            elif self.spec.proxied_links and self.spec.brokers > 1:
                self.links = ReplicationLinks(self.node_ids)
            if self.spec.brokers > 1:
                self._start_etcd()
            if self.spec.tiered:
                self.store = self.local.start_store()
            for n in self.node_ids:
                self._prepare_broker(n)
                self.brokers[n] = self.local.add_process(self._broker_process(n))
            for n in self.node_ids:
                self.wait_ready(n)
            self.wait_cluster(BROKER_READY_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_etcd(self) -> None:
        etcd = LocalEtcd(self.dir, self.plan.etcd_client, self.plan.etcd_peer)
        if self.net is not None:
            # Brokers in their namespaces reach etcd on the bridge; the harness's own health
            # checks keep using 127.0.0.1, so etcd listens on both.
            ip = self.net.addr[ETCD]
            for m in etcd.members:
                port = m.ports[0]
                argv = list(m.argv)
                i = argv.index("--listen-client-urls")
                argv[i + 1] = f"http://127.0.0.1:{port},http://{ip}:{port}"
                i = argv.index("--advertise-client-urls")
                argv[i + 1] = f"http://{ip}:{port}"
                m.argv = argv
        self.etcd = etcd
        self.local.etcd = etcd
        for m in etcd.members:
            self.local.processes[m.name] = m
        self.local.save()
        etcd.start()
        self.local.save()

    def etcd_url(self) -> str:
        assert self.etcd is not None
        host = self.net.addr[ETCD] if self.net else "127.0.0.1"
        return "etcd://" + ",".join(f"{host}:{p}" for p in self.etcd.client_ports) + "/chaos"

    def _prepare_broker(self, node: int) -> None:
        (self.dir / f"broker{node}").mkdir(parents=True, exist_ok=True)
        if node == self.spec.tmpfs_broker:
            mnt = self.disk_mount(node)
            mnt.mkdir(parents=True, exist_ok=True)
            if not os.path.ismount(mnt):
                subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.spec.tmpfs_mb}m",
                                "tmpfs", str(mnt)], check=True, capture_output=True)
                self.mounts.append(mnt)
        self.data_dir(node).mkdir(parents=True, exist_ok=True)
        if self._faketime:
            self.faketime_file(node).write_text("+0\n")

    def _broker_process(self, node: int) -> ManagedProcess:
        spec = self.spec
        host, port = self.host(node), self.kafka_port(node)
        argv = [sys.executable, "-m", "yak.cli.main", "serve",
                "--data-dir", str(self.data_dir(node)), "--listen", f"{host}:{port}",
                "--http", "none", "--set", f"node.id={node}"]
        settings = {
            "num.partitions": "1",
            "default.replication.factor": str(spec.replication_factor),
            "offsets.topic.replication.factor": str(spec.replication_factor),
            "transaction.state.log.replication.factor": str(spec.replication_factor),
            "transaction.state.log.min.isr": str(spec.min_insync_replicas),
            "min.insync.replicas": str(spec.min_insync_replicas),
            # small internal topics: a chaos run is about correctness, and 50 partitions
            # of __consumer_offsets cost every failover a long election list
            "offsets.topic.num.partitions": "6",
            "transaction.state.log.num.partitions": "6",
            "group.initial.rebalance.delay.ms": "0",
            # Kafka's 30 s would outlast most faults: ISR shrinks and expansions are part
            # of what a run should exercise
            "replica.lag.time.max.ms": "5000",
        }
        if spec.brokers > 1:
            argv += ["--metadata", self.etcd_url()]
            settings["broker.session.timeout.ms"] = str(spec.session_timeout_ms)
            settings["broker.heartbeat.interval.ms"] = str(max(500, spec.session_timeout_ms // 4))
        if self.links is not None:
            settings.update(self.links.settings(node, port))
        if spec.tiered:
            assert self.local.store_uri is not None
            settings.update(tiered_broker_settings(self.local.store_uri))
        settings.update(spec.broker_settings)
        for k, v in settings.items():
            argv += ["--set", f"{k}={v}"]
        if self.net is not None:
            argv = self.net.wrap(f"b{node}", argv)
        env = {"PYTHONUNBUFFERED": "1"}
        if self._faketime:
            env.update({
                "LD_PRELOAD": self._faketime,
                "FAKETIME_TIMESTAMP_FILE": str(self.faketime_file(node)),
                # Re-read on every call (~5 us per time.time() here, measured): with the
                # cache, a jump back is not seen until the faked clock passes the time
                # the cache was filled, a day later after a -1 day jump.
                "FAKETIME_NO_CACHE": "1",
                # Only the wall clock jumps: uvloop's timers and every timeout in the broker
                # follow the monotonic clock, as on a real machine whose clock is stepped.
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            })
        return ManagedProcess(self.broker_name(node), argv,
                              self.dir / "logs" / f"broker{node}.log", env=env,
                              ports=[port])

    def wait_ready(self, node: int, timeout: float = BROKER_READY_TIMEOUT_S) -> None:
        proc = self.brokers[node]
        start_size = getattr(proc, "_chaos_log_start", 0)

        def ready() -> bool:
            with open(proc.log_path, "rb") as f:
                f.seek(start_size)
                return READY.encode() in f.read()

        proc.wait_ready(ready, timeout)

    def wait_cluster(self, timeout: float) -> None:
        """Until Metadata lists every broker (they registered and see each other)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                md = self.admin().list_topics(timeout=5)
                if len(md.brokers) >= self.spec.brokers:
                    return
                last = f"{len(md.brokers)} of {self.spec.brokers} brokers registered"
            except Exception as e:
                last = str(e)
            time.sleep(0.5)
        raise ClusterStateError(f"cluster not formed within {timeout:g} s: {last}")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.local.stop(timeout=20)
        if self.net is not None:
            self.net.teardown()
        if self.links is not None:
            self.links.close()
        for mnt in self.mounts:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)
        self.mounts.clear()

    def topic_config(self, topic: str, tiered: bool = False) -> dict[str, str]:
        """The configs of workload topic `topic`: min.insync.replicas, and with `tiered` (on
        a tiered cluster) remote storage with small segments and a small local retention
        (the topic is then listed in `tiered_topics`)."""
        config = {"min.insync.replicas": str(self.spec.min_insync_replicas)}
        if tiered and self.spec.tiered:
            config.update(TIERED_TOPIC_CONFIG)
            self.tiered_topics.add(topic)
        return config

    # ------------------------------------------------------------------ faults

    @property
    def s3_port(self) -> int:
        return self.plan.store[0]

    def kill_store(self) -> None:
        """SIGKILL the S3 store: every request to it is refused until it restarts."""
        assert self.store is not None
        self.store.kill()

    def restart_store(self) -> None:
        """Start the store again on its data and wait until its bucket takes writes."""
        assert self.store is not None
        if self.store.is_alive():
            return
        self.store = self.local.start_store()

    def start_broker(self, node: int) -> None:
        """Start a broker again on its data (after kill or SIGTERM) and wait until ready."""
        proc = self.brokers[node]
        if proc.is_alive():
            return
        proc._chaos_log_start = proc.log_path.stat().st_size if proc.log_path.exists() else 0  # type: ignore[attr-defined]
        proc.start()
        self.local.save()
        self.wait_ready(node)

    def kill(self, node: int) -> None:
        self.brokers[node].kill()

    def terminate(self, node: int, timeout: float = 40.0) -> bool:
        return self.brokers[node].terminate(timeout)

    def pause(self, node: int) -> None:
        self.brokers[node].pause()

    def resume(self, node: int) -> None:
        with contextlib.suppress(ClusterStateError, ProcessLookupError):
            self.brokers[node].resume()

    def alive(self, node: int) -> bool:
        return self.brokers[node].is_alive()

    def set_clock_offset(self, node: int, seconds: float) -> None:
        """libfaketime re-reads the file on every wall-clock read (FAKETIME_NO_CACHE)."""
        if not self._faketime:
            raise ClusterStateError("brokers were not started under libfaketime")
        path = self.faketime_file(node)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{seconds:+.0f}\n")
        os.replace(tmp, path)

    def fill_disk(self, node: int) -> int:
        """Fill the broker's tmpfs until ENOSPC; returns the bytes written."""
        ballast = self.disk_mount(node) / "ballast"
        written = 0
        chunk = b"\0" * (1 << 20)
        with contextlib.suppress(OSError), open(ballast, "ab") as f:
            while True:
                f.write(chunk)
                f.flush()
                written += len(chunk)
        return written

    def free_disk(self, node: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.disk_mount(node) / "ballast").unlink()

    # ------------------------------------------------------------------ who leads

    def admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0,
                            "socket.timeout.ms": 3000})

    def leaders(self, topic: str, timeout: float = 5.0) -> dict[int, int]:
        """partition -> leader node id (-1 none), from a Metadata request."""
        md = self.admin().list_topics(topic, timeout=timeout)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return {}
        return {p: pm.leader for p, pm in t.partitions.items()}

    def controller(self, timeout: float = 5.0) -> int | None:
        """The active controller's node id, from DescribeCluster (None if unknown)."""
        if self.spec.brokers == 1:
            return 1
        admin = self.admin()  # referenced until the future resolves (librdkafka needs it)
        try:
            desc = admin.describe_cluster(request_timeout=timeout).result(timeout)
        except Exception:
            return None
        node = getattr(desc, "controller", None)
        return None if node is None or node.id < 0 else int(node.id)

    def cut(self, groups: Sequence[Sequence[str]]) -> list[tuple[str, str]]:
        """Members are "b<n>" brokers, "etcd", "clients" (the last two in netns only)."""
        if self.net is not None:
            return self.net.partition(groups)
        if self.links is None:
            raise ClusterStateError("partitions need --network netns (root) or proxied links")
        where = {m: i for i, g in enumerate(groups) for m in g if m.startswith("b")}
        pairs = []
        for a, ga in where.items():
            for b, gb in where.items():
                if ga != gb:  # both directions come up as (a, b) and (b, a)
                    self.links.cut(int(a[1:]), int(b[1:]))
                    pairs.append((a, b))
        return pairs

    def delay(self, node: int, ms: int) -> None:
        """Latency on everything `node` sends and receives between brokers."""
        if self.net is not None:
            self.net.delay(f"b{node}", ms)
            return
        if self.links is None:
            raise ClusterStateError("latency needs --network netns or proxied links")
        for (i, j), proxy in self.links.proxies.items():
            if node in (i, j):
                proxy.delay(ms)

    def heal(self) -> None:
        if self.net is not None:
            self.net.heal()
        if self.links is not None:
            self.links.heal()
            for proxy in self.links.proxies.values():
                proxy.delay(0)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
