"""A local cluster on one machine: etcd (1 or 3 members) and Yak brokers.

Used by the tests (tests/cluster/conftest.py) and by `yak cluster up|status|stop|purge`,
modelled on Redpanda's `rpk container`: everything lives under one directory (`--dir`), every
port is within `--base-port .. +19` (PortPlan), processes run in their own sessions so they
outlive the command that started them, and `cluster.json` in the directory records each
process (pid, command, ports) so a later `status` or `stop` finds them.

Fault hooks for the reliability scenarios: any process by name can be killed (SIGKILL),
terminated (SIGTERM, waited for), paused (SIGSTOP) and resumed (SIGCONT). Links between
processes are cut with yak/devcluster/netproxy.py.

Adding brokers (the integration phase): a broker is one more ManagedProcess, started with
`yak serve --metadata <LocalEtcd.url()> --listen 127.0.0.1:<PortPlan.kafka[i]> ...` and made
ready by its "Yak broker ready on" line; LocalCluster.add_process() records it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

__all__ = [
    "ETCD_PACKAGE",
    "ClusterStateError",
    "EtcdNotInstalledError",
    "LocalCluster",
    "LocalEtcd",
    "ManagedProcess",
    "PortPlan",
    "find_etcd",
    "free_ports",
]

ETCD_PACKAGE = "etcd-server"
STATE_FILE = "cluster.json"
PORT_SPAN = 20
MAX_BROKERS = 5
ETCD_READY_TIMEOUT_S = 30.0


class EtcdNotInstalledError(Exception):
    """etcd is missing; str(e) is the one line that says which package to install."""


class ClusterStateError(Exception):
    """The cluster directory or request is unusable; str(e) is one line."""


def find_etcd() -> str:
    """Path of the etcd binary (`$YAK_ETCD`, then PATH, then Debian's /usr/bin/etcd)."""
    override = os.environ.get("YAK_ETCD")
    if override:
        if os.access(override, os.X_OK):
            return override
        raise EtcdNotInstalledError(
            f"etcd not found: YAK_ETCD={override} is not an executable etcd (install the"
            f" Debian package {ETCD_PACKAGE}: sudo apt-get install {ETCD_PACKAGE})")
    found = shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK)
                                      else None)
    if found is None:
        raise EtcdNotInstalledError(
            f"etcd not found: install the Debian package {ETCD_PACKAGE}"
            f" (sudo apt-get install {ETCD_PACKAGE}), or set YAK_ETCD to its path")
    return found


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct ports free right now (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass(frozen=True)
class PortPlan:
    """Every port of a local cluster, within base_port .. base_port + 19:

    +0..+4 brokers' Kafka listeners, +5..+9 their HTTP (gateway/console) ports, +10..+12 etcd
    client ports, +13..+15 etcd peer ports, +16..+19 spare (e.g. fault-injection proxies).
    """

    base_port: int
    brokers: int = 1
    etcd_members: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.brokers <= MAX_BROKERS:
            raise ClusterStateError(f"a local cluster has 1 to {MAX_BROKERS} brokers, not"
                                    f" {self.brokers}")
        if self.etcd_members not in (1, 3):
            raise ClusterStateError(f"etcd members must be 1 or 3, not {self.etcd_members}")
        if not 1024 <= self.base_port <= 65535 - PORT_SPAN:
            raise ClusterStateError(f"--base-port {self.base_port} must be within 1024 .."
                                    f" {65535 - PORT_SPAN}")

    @property
    def kafka(self) -> list[int]:
        return [self.base_port + i for i in range(self.brokers)]

    @property
    def http(self) -> list[int]:
        return [self.base_port + 5 + i for i in range(self.brokers)]

    @property
    def etcd_client(self) -> list[int]:
        return [self.base_port + 10 + i for i in range(self.etcd_members)]

    @property
    def etcd_peer(self) -> list[int]:
        return [self.base_port + 13 + i for i in range(self.etcd_members)]

    @property
    def spare(self) -> list[int]:
        return [self.base_port + 16 + i for i in range(4)]

    def all_ports(self) -> list[int]:
        return self.kafka + self.http + self.etcd_client + self.etcd_peer


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (an exited child not yet reaped) counts as gone, but only once every thread
    # has exited: a multi-threaded process (etcd is Go) shows its main thread as a zombie
    # while the others are still exiting, and its parent cannot reap it yet.
    with contextlib.suppress(OSError, IndexError):
        if (Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
                and len(os.listdir(f"/proc/{pid}/task")) <= 1):
            return False
    return True


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


@dataclass
class ManagedProcess:
    """One background process of the cluster, with fault hooks. Works both on a child this
    Python process started and on a pid read back from cluster.json (another invocation)."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    ports: list[int] = field(default_factory=list)
    pid: int = 0
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> ManagedProcess:
        if self.is_alive():
            raise ClusterStateError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **(self.env or {}))
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=env, start_new_session=True)
        self.pid = self._proc.pid
        return self

    def owns_pid(self) -> bool:
        """The recorded pid still runs *this* command (guards against pid reuse)."""
        if self._proc is not None:
            return self._proc.poll() is None  # also reaps it once it has exited
        if not self.pid or not _pid_alive(self.pid):
            return False
        return _cmdline(self.pid) == self.argv

    def _gone(self) -> bool:
        """Exited for good (a zombie counts as gone). Unlike owns_pid() this does not look at
        the command line, which the kernel empties while a process is still exiting."""
        if self._proc is not None:
            return self._proc.poll() is not None
        return not self.pid or not _pid_alive(self.pid)

    def is_alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self.owns_pid()

    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def signal(self, sig: int) -> None:
        if not self.owns_pid():
            raise ClusterStateError(f"{self.name} is not running")
        os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL (kill -9): no shutdown of any kind. Waits (bounded) until it is gone."""
        if self.owns_pid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)  # a stopped process dies as well
                os.kill(self.pid, signal.SIGKILL)
        self.wait(10.0)

    def terminate(self, timeout: float = 30.0) -> bool:
        """SIGTERM and wait up to `timeout`; SIGKILL after that. True if it exited by itself."""
        if not self.owns_pid():
            return True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGTERM)
        if self.wait(timeout):
            return True
        self.kill()
        return False

    def pause(self) -> None:
        """SIGSTOP: the process freezes (sockets stay open, nothing is answered)."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def wait(self, timeout: float) -> bool:
        """Until the process has exited; False after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None:
                try:
                    self._proc.wait(max(0.0, min(0.1, deadline - time.monotonic())))
                    return True
                except subprocess.TimeoutExpired:
                    continue
            if self._gone():
                return True
            time.sleep(0.05)
        return self._gone()

    def wait_ready(self, ready: Callable[[], bool], timeout: float) -> None:
        """Poll `ready()` until it holds; raise ClusterStateError (with the log's tail) if
        the process exits or `timeout` passes first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if ready():
                    return
            if not self.is_alive():
                raise ClusterStateError(
                    f"{self.name} exited (rc={self.returncode()}) before it was ready:"
                    f" {self.log_tail(1)}")
            time.sleep(0.05)
        raise ClusterStateError(f"{self.name} not ready within {timeout:g} s:"
                                f" {self.log_tail(1)}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "argv": self.argv, "log": str(self.log_path),
                "ports": self.ports, "pid": self.pid}

    @classmethod
    def from_json(cls, d: dict[str, object]) -> ManagedProcess:
        return cls(name=str(d["name"]), argv=[str(a) for a in d["argv"]],  # type: ignore[attr-defined]
                   log_path=Path(str(d["log"])), ports=[int(p) for p in d["ports"]],  # type: ignore[attr-defined]
                   pid=int(d["pid"]))  # type: ignore[call-overload]


class LocalEtcd:
    """An etcd cluster of 1 or 3 members on 127.0.0.1, data under `base_dir/etcd/<name>`."""

    def __init__(self, base_dir: Path, client_ports: Sequence[int], peer_ports: Sequence[int],
                 *, etcd_bin: str | None = None, token: str | None = None) -> None:
        if len(client_ports) != len(peer_ports) or len(client_ports) not in (1, 3):
            raise ClusterStateError("etcd needs 1 or 3 members, each a client and a peer port")
        self.base_dir = Path(base_dir)
        self.etcd_bin = etcd_bin or find_etcd()
        self.token = token or f"yak-{uuid.uuid4().hex[:12]}"
        names = [f"etcd{i + 1}" for i in range(len(client_ports))]
        initial = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(names, peer_ports,
                                                                          strict=True))
        self.members: list[ManagedProcess] = []
        for n, cport, pport in zip(names, client_ports, peer_ports, strict=True):
            argv = [
                self.etcd_bin, "--name", n,
                "--data-dir", str(self.base_dir / "etcd" / n),
                "--listen-client-urls", f"http://127.0.0.1:{cport}",
                "--advertise-client-urls", f"http://127.0.0.1:{cport}",
                "--listen-peer-urls", f"http://127.0.0.1:{pport}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{pport}",
                "--initial-cluster", initial,
                "--initial-cluster-state", "new",
                "--initial-cluster-token", self.token,
                "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
                # Idle watch streams get a progress message well inside the client's idle
                # timeout (yak/cluster/etcd.py), so they are not re-opened needlessly.
                "--experimental-watch-progress-notify-interval", "5s",
                "--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1h",
            ]
            self.members.append(ManagedProcess(
                n, argv, self.base_dir / "logs" / f"{n}.log", ports=[cport, pport]))

    @classmethod
    def from_members(cls, base_dir: Path, members: list[ManagedProcess]) -> LocalEtcd:
        self = cls.__new__(cls)
        self.base_dir = Path(base_dir)
        self.etcd_bin = members[0].argv[0]
        self.token = ""
        self.members = members
        return self

    @property
    def client_ports(self) -> list[int]:
        return [m.ports[0] for m in self.members]

    @property
    def endpoints(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.client_ports]

    def url(self, namespace: str | None = None) -> str:
        """The `etcd://h:p,h:p[/namespace]` a broker's `--metadata` takes."""
        return "etcd://" + ",".join(self.endpoints) + (f"/{namespace}" if namespace else "")

    def member(self, name: str) -> ManagedProcess:
        for m in self.members:
            if m.name == name:
                return m
        raise ClusterStateError(f"no etcd member {name!r}")

    def start(self, timeout: float = ETCD_READY_TIMEOUT_S) -> LocalEtcd:
        for m in self.members:
            if not m.is_alive():
                m.start()
        try:
            for m in self.members:
                m.wait_ready(lambda m=m: self._healthy(m.ports[0]), timeout)
        except ClusterStateError:
            self.stop()
            raise
        return self

    def restart_member(self, name: str, timeout: float = ETCD_READY_TIMEOUT_S) -> None:
        """Start a member again (after kill/terminate) on its existing data."""
        m = self.member(name)
        m.start()
        m.wait_ready(lambda: self._healthy(m.ports[0]), timeout)

    @staticmethod
    def _healthy(port: int) -> bool:
        r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=0.5)
        return r.status_code == 200 and r.json().get("health") == "true"

    def leader(self, timeout: float = 5.0) -> ManagedProcess:
        """The member that is currently raft leader."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.members:
                if not m.is_alive():
                    continue
                with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                    r = httpx.post(f"http://127.0.0.1:{m.ports[0]}/v3/maintenance/status",
                                   json={}, timeout=0.5).json()
                    if r.get("leader") and r["leader"] == r["header"]["member_id"]:
                        return m
            time.sleep(0.1)
        raise ClusterStateError(f"no etcd leader within {timeout:g} s")

    def stop(self, timeout: float = 10.0) -> None:
        for m in self.members:
            m.terminate(timeout)

    def purge(self) -> None:
        self.stop()
        shutil.rmtree(self.base_dir / "etcd", ignore_errors=True)


class LocalCluster:
    """Everything `yak cluster up --dir D` starts, recorded in D/cluster.json."""

    def __init__(self, directory: Path, plan: PortPlan) -> None:
        self.dir = Path(directory).resolve()
        self.plan = plan
        self.etcd: LocalEtcd | None = None
        self.processes: dict[str, ManagedProcess] = {}
        self.namespace = "default"

    # -- persistence

    @property
    def state_path(self) -> Path:
        return self.dir / STATE_FILE

    def save(self) -> None:
        state = {
            "base_port": self.plan.base_port,
            "brokers": self.plan.brokers,
            "etcd_members": self.plan.etcd_members,
            "namespace": self.namespace,
            "etcd": [m.name for m in (self.etcd.members if self.etcd else [])],
            "processes": [p.to_json() for p in self.processes.values()],
        }
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, self.state_path)

    @classmethod
    def load(cls, directory: Path) -> LocalCluster:
        path = Path(directory) / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            raise ClusterStateError(f"no local cluster in {directory} ({STATE_FILE} missing)")\
                from None
        except ValueError as e:
            raise ClusterStateError(f"{path} is unreadable: {e}") from None
        self = cls(Path(directory), PortPlan(state["base_port"], state["brokers"],
                                             state["etcd_members"]))
        self.namespace = state.get("namespace", "default")
        for p in state["processes"]:
            proc = ManagedProcess.from_json(p)
            self.processes[proc.name] = proc
        etcd_names = state.get("etcd", [])
        if etcd_names:
            self.etcd = LocalEtcd.from_members(self.dir, [self.processes[n] for n in etcd_names])
        return self

    # -- lifecycle

    def start_etcd(self, timeout: float = ETCD_READY_TIMEOUT_S) -> LocalEtcd:
        """Start etcd on the plan's ports (or on its existing data when restarting)."""
        if self.state_path.exists():
            running = [p.name for p in LocalCluster.load(self.dir).processes.values()
                       if p.is_alive()]
            if running:
                raise ClusterStateError(f"a cluster in {self.dir} is already running"
                                        f" ({', '.join(running)}): stop it first")
        busy = [p for p in self.plan.all_ports() if not _port_free(p)]
        if busy:
            raise ClusterStateError(
                f"ports {', '.join(map(str, busy))} (within --base-port {self.plan.base_port}"
                f" .. +{PORT_SPAN - 1}) are in use: choose another --base-port")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.etcd = LocalEtcd(self.dir, self.plan.etcd_client, self.plan.etcd_peer)
        for m in self.etcd.members:
            self.processes[m.name] = m
        self.save()
        self.etcd.start(timeout)
        self.save()
        return self.etcd

    def add_process(self, proc: ManagedProcess) -> ManagedProcess:
        """Record (and start) one more process, e.g. a broker (the integration phase)."""
        self.processes[proc.name] = proc
        proc.start()
        self.save()
        return proc

    def process(self, name: str) -> ManagedProcess:
        try:
            return self.processes[name]
        except KeyError:
            raise ClusterStateError(f"no process {name!r} in {self.dir}") from None

    def status(self) -> list[tuple[str, int, bool, list[int]]]:
        """(name, pid, alive, ports) for each process."""
        return [(p.name, p.pid, p.is_alive(), p.ports) for p in self.processes.values()]

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every process (brokers before etcd, so they can deregister), waiting for
        each; SIGKILL what does not exit within `timeout`."""
        etcd_names = {m.name for m in self.etcd.members} if self.etcd else set()
        for p in self.processes.values():
            if p.name not in etcd_names:
                p.terminate(timeout)
        if self.etcd is not None:
            self.etcd.stop(timeout)

    def purge(self) -> None:
        """Stop everything and delete the directory's cluster data."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
