"""Network faults in Linux network namespaces (needs root): each broker gets its own
namespace and address on a bridge, so links between chosen brokers can be cut.

Topology for a run tagged T (names fit the kernel's 15-character limit):

    root namespace: bridge ykT (10.A.B.254 = the workload's clients, 10.A.B.253 = etcd)
    namespace ykT-b1: eth0 10.A.B.1 (broker 1) ... ykT-b5: 10.A.B.5

Partitions are `nft` rules (or `iptables` when nft is missing) inside the brokers'
namespaces that drop packets to and from the other side's addresses: a silent partition,
as in Jepsen, where peers see timeouts rather than resets. Cutting a broker from etcd drops
10.A.B.253 only, so clients still reach it. Latency needs `tc netem`; kernels without the
netem module (this machine's: "Specified qdisc kind is unknown") get no latency fault,
and the reason is reported. `isolate()` without any packet filter falls back to
`tc qdisc add dev eth0 root pfifo limit 0`, which drops everything the broker sends.

Everything is removed by `teardown()` (also at interpreter exit); `cleanup_stale(tag)`
removes what a killed run left behind.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import random
import shutil
import subprocess
from collections.abc import Iterable, Sequence

__all__ = ["NetnsTopology", "NetnsUnavailable", "netns_unavailable_reason", "netem_available"]

CLIENTS = "clients"
ETCD = "etcd"
TABLE = "yakchaos"


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be used here; str(e) says why in one line."""


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise NetnsUnavailable(f"`{' '.join(argv)}` failed: {(r.stderr or r.stdout).strip()}")
    return r


def netns_unavailable_reason() -> str | None:
    """None when this process can build the topology, else the reason (one line)."""
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, or faults go through TCP proxies)"
    if shutil.which("ip") is None:
        return "the `ip` command (Debian package iproute2) is missing"
    if _filter_tool() is None and shutil.which("tc") is None:
        return "neither nft, iptables nor tc is installed (Debian: nftables)"
    return None


def _filter_tool() -> str | None:
    if shutil.which("nft"):
        return "nft"
    if shutil.which("iptables"):
        return "iptables"
    return None


def netem_available() -> str | None:
    """None if `tc netem` works here, else the kernel's answer (tested on a dummy link in
    a throwaway namespace)."""
    if os.geteuid() != 0 or shutil.which("tc") is None:
        return "tc netem needs root and tc (iproute2)"
    ns = f"yknetem{os.getpid() % 100000}"
    try:
        _run(["ip", "netns", "add", ns])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        r = _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root",
                  "netem", "delay", "1ms"], check=False)
        if r.returncode != 0:
            return f"tc netem is not available in this kernel: {(r.stderr or '').strip()}"
        return None
    except NetnsUnavailable as e:
        return str(e)
    finally:
        _run(["ip", "netns", "del", ns], check=False)


def cleanup_stale(tag: str) -> None:
    """Remove namespaces and the bridge of a run tagged `tag` (a killed earlier run)."""
    r = _run(["ip", "netns", "list"], check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(f"yk{tag}-"):
            _run(["ip", "netns", "del", name], check=False)
    _run(["ip", "link", "del", f"yk{tag}"], check=False)


class NetnsTopology:
    """The namespaces and bridge of one run. `nodes` are the brokers' names, e.g. "b1"."""

    def __init__(self, nodes: Sequence[str], tag: str | None = None,
                 subnet: str | None = None) -> None:
        reason = netns_unavailable_reason()
        if reason:
            raise NetnsUnavailable(reason)
        self.tag = tag or f"{random.randrange(16**4):04x}"
        self.bridge = f"yk{self.tag}"
        self.nodes = list(nodes)
        net = ipaddress.ip_network(subnet or self._pick_subnet())
        hosts = list(net.hosts())
        self.prefix = net.prefixlen
        self.addr = {n: str(hosts[i]) for i, n in enumerate(self.nodes)}
        self.addr[CLIENTS] = str(hosts[253])
        self.addr[ETCD] = str(hosts[252])
        self.filter = _filter_tool()
        self._up = False
        self._cut: set[tuple[str, str]] = set()
        self._isolated: set[str] = set()
        self._delayed: set[str] = set()

    @staticmethod
    def _pick_subnet() -> str:
        used = _run(["ip", "-4", "route"], check=False).stdout
        for _ in range(200):
            cand = f"10.213.{random.randrange(256)}.0/24"
            if cand.rsplit(".", 1)[0] + "." not in used:
                return cand
        raise NetnsUnavailable("no free 10.213.x.0/24 subnet for the chaos bridge")

    def ns(self, node: str) -> str:
        return f"yk{self.tag}-{node}"

    # ------------------------------------------------------------------ lifecycle

    def setup(self) -> NetnsTopology:
        cleanup_stale(self.tag)
        atexit.register(self.teardown)
        self._up = True
        br = self.bridge
        _run(["ip", "link", "add", br, "type", "bridge"])
        _run(["ip", "addr", "add", f"{self.addr[CLIENTS]}/{self.prefix}", "dev", br])
        _run(["ip", "addr", "add", f"{self.addr[ETCD]}/{self.prefix}", "dev", br])
        _run(["ip", "link", "set", br, "up"])
        for i, node in enumerate(self.nodes):
            ns = self.ns(node)
            host_end = f"{br}h{i}"
            _run(["ip", "netns", "add", ns])
            _run(["ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0",
                  "netns", ns])
            _run(["ip", "link", "set", host_end, "master", br])
            _run(["ip", "link", "set", host_end, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.addr[node]}/{self.prefix}", "dev",
                  "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            if self.filter == "nft":
                self._exec(node, ["nft", "add", "table", "inet", TABLE])
                for chain, hook in (("in", "input"), ("out", "output")):
                    self._exec(node, ["nft", "add", "chain", "inet", TABLE, chain,
                                      f"{{ type filter hook {hook} priority 0; policy accept; }}"])
        return self

    def teardown(self) -> None:
        if not self._up:
            return
        self._up = False
        for node in self.nodes:
            _run(["ip", "netns", "del", self.ns(node)], check=False)
        _run(["ip", "link", "del", self.bridge], check=False)
        with contextlib.suppress(Exception):
            atexit.unregister(self.teardown)

    def wrap(self, node: str, argv: Sequence[str]) -> list[str]:
        """The command line that runs `argv` inside `node`'s namespace (`ip netns exec`
        execs in place, so the pid is the program's own and signals reach it)."""
        return ["ip", "netns", "exec", self.ns(node), *argv]

    def _exec(self, node: str, argv: Sequence[str], check: bool = True) -> None:
        _run(["ip", "netns", "exec", self.ns(node), *argv], check=check)

    # ------------------------------------------------------------------ faults

    def partition(self, groups: Iterable[Iterable[str]]) -> list[tuple[str, str]]:
        """Cut every link between members of different groups. Members are broker names,
        `etcd` or `clients`; nodes in no group keep all their links. Returns the cut
        (broker, peer) pairs."""
        groups = [set(g) for g in groups]
        where = {m: i for i, g in enumerate(groups) for m in g}
        pairs = []
        for a in self.nodes:
            if a not in where:
                continue
            for b, gb in where.items():
                if b != a and gb != where[a]:
                    pairs.append((a, b))
        for a, b in pairs:
            self.cut(a, b)
        return pairs

    def cut(self, node: str, peer: str) -> None:
        """Drop everything between broker `node` and `peer` (a broker, etcd or clients),
        by rules in `node`'s namespace (one side is enough: both directions are dropped)."""
        if (node, peer) in self._cut:
            return
        addr = self.addr[peer]
        if self.filter == "nft":
            self._exec(node, ["nft", "add", "rule", "inet", TABLE, "in", "ip", "saddr", addr,
                              "drop"])
            self._exec(node, ["nft", "add", "rule", "inet", TABLE, "out", "ip", "daddr", addr,
                              "drop"])
        elif self.filter == "iptables":
            self._exec(node, ["iptables", "-A", "INPUT", "-s", addr, "-j", "DROP"])
            self._exec(node, ["iptables", "-A", "OUTPUT", "-d", addr, "-j", "DROP"])
        else:
            raise NetnsUnavailable("no packet filter (nft or iptables) for a selective cut;"
                                   " only isolate() works")
        self._cut.add((node, peer))

    def isolate(self, node: str) -> None:
        """Drop everything the broker sends (clients too): `tc qdisc pfifo limit 0`."""
        self._exec(node, ["tc", "qdisc", "replace", "dev", "eth0", "root", "pfifo", "limit",
                          "0"])
        self._isolated.add(node)

    def delay(self, node: str, ms: int) -> None:
        reason = netem_available()
        if reason:
            raise NetnsUnavailable(reason)
        self._exec(node, ["tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay",
                          f"{ms}ms"])
        self._delayed.add(node)

    def heal(self) -> None:
        """Every link back: rules flushed, qdiscs removed."""
        for node in {a for a, _ in self._cut}:
            if self.filter == "nft":
                for chain in ("in", "out"):
                    self._exec(node, ["nft", "flush", "chain", "inet", TABLE, chain],
                               check=False)
            else:
                self._exec(node, ["iptables", "-F"], check=False)
        for node in self._isolated | self._delayed:
            self._exec(node, ["tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
        self._cut.clear()
        self._isolated.clear()
        self._delayed.clear()
