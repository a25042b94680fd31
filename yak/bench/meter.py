"""CPU accounting for benchmarks on a shared machine.

Wall-clock rates on a 2-core machine shared with other work swing by 2x from run to
run; CPU time spent by the broker process per message does not. So every run measures
three things over the same window: the broker's CPU (psutil, the process and its
children, user + system), the benchmark client's own CPU (this process and its reaped
worker processes, from getrusage), and what everyone else used (machine busy time minus
both), so a reader can tell a slow broker from a busy machine.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time

import psutil


def find_listener_pid(port: int) -> int | None:
    """The pid of a local process listening on TCP `port`, if we may see it.

    Used to measure a broker that someone else started (`yak serve`, or a peer broker):
    the bootstrap port identifies it without asking the user for a pid.
    """
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, PermissionError):
        conns = []
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return c.pid
    # Without privileges net_connections hides pids: ask our own processes one by one.
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            for c in proc.net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
                    return proc.pid
    return None


def is_local_host(host: str) -> bool:
    if host in ("localhost", "127.0.0.1", "::1", "0.0.0.0", ""):
        return True
    with contextlib.suppress(OSError):
        local = {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}
        return host in local
    return False


def bootstrap_port(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    return host.strip("[]"), int(port)


class ProcessGroup:
    """A process and its descendants (a broker started by a wrapper script forks)."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)

    @property
    def pid(self) -> int:
        return self.root.pid

    def procs(self) -> list[psutil.Process]:
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return [self.root]

    def cpu_s(self) -> float:
        total = 0.0
        for p in self.procs():
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def rss_mb(self) -> float:
        total = 0
        for p in self.procs():
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        return total / 2**20


def self_cpu_s() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def client_cpu_s() -> float:
    """This process plus every child it has reaped (workers are joined before reading)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return self_cpu_s() + kids.ru_utime + kids.ru_stime


def machine_busy_s() -> float:
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)


class Window:
    """One measured interval: start(), then stop() -> the deltas, all in CPU seconds."""

    def __init__(self, broker: ProcessGroup | None) -> None:
        self.broker = broker
        self.wall = 0.0
        self.client = 0.0
        self.broker_cpu = 0.0
        self.other = 0.0
        self.rss_start = 0.0
        self.rss_end = 0.0

    def start(self) -> Window:
        if self.broker is not None:
            self.rss_start = self.broker.rss_mb()
            self._b0 = self.broker.cpu_s()
        self._c0 = client_cpu_s()
        self._s0 = self_cpu_s()
        self._m0 = machine_busy_s()
        self._t0 = time.perf_counter()
        return self

    def stop(self, workers_cpu: float | None = None) -> Window:
        """`workers_cpu`: what worker processes spent inside the window, when they measured
        it themselves; reaped children's rusage would also count their start-up."""
        self.wall = time.perf_counter() - self._t0
        if workers_cpu is None:
            self.client = client_cpu_s() - self._c0
        else:
            self.client = self_cpu_s() - self._s0 + workers_cpu
        if self.broker is not None:
            self.broker_cpu = self.broker.cpu_s() - self._b0
            self.rss_end = self.broker.rss_mb()
        busy = machine_busy_s() - self._m0
        self.other = max(0.0, busy - self.client - self.broker_cpu)
        return self

    def other_pct(self) -> float:
        return round(100 * self.other / self.wall, 1) if self.wall > 0 else 0.0


def cpu_count() -> int:
    return os.cpu_count() or 1
