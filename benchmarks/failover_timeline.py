"""Where failover time goes after a kill -9 of a partition leader (issue 27, dead-leader half).

A 3-broker cluster on a single-member etcd, all on 127.0.0.1 (yak.chaos.env.ChaosCluster), a
topic of 3 partitions with RF 3 and min.insync.replicas 2, an idempotent acks=all
confluent-kafka producer writing `--rate` messages/s round-robin over the partitions. Each run
kills (SIGKILL) the leader of partition 0 and timestamps, on this machine's wall clock:

- kill          just before the SIGKILL
- renewal       the victim's last lease renewal, as seen by polling etcd's LeaseTimeToLive
                every 50 ms (the remaining TTL, whole seconds, jumps up; seen up to ~50 ms
                late). Only with renewal intervals over ~1 s: with shorter ones the whole
                seconds never go up, and the column stays empty
- expiry        the victim's `brokers/<id>` key deleted (etcd watch, this process)
- record        `partitions/<topic id>/0` written with a new leader epoch (etcd watch)
- ctrl_log      the controller's "timeline-0: leader A -> B (epoch E)" log line (after its
                write returned)
- apply         the new leader's "leading timeline-0 at epoch E" (a DEBUG line of
                yak.partition.replica_manager, turned on by the launcher below, no broker
                code changed)
- client_md     librdkafka's first metadata answer naming the new leader of partition 0
                (debug "metadata,broker,topic" to a file, timestamps taken when poll() serves
                the line, i.e. within ~5 ms)
- client_md_request  the last "Requesting metadata" line before client_md
- client_requery  a "broker is internal: re-query" of partition 0 after client_md: librdkafka
                moved the partition to the new leader, then, decommissioning the dead broker
                (Yak's Metadata no longer lists it), parked it on its internal broker until
                its 1 s topic scan asked again
- client_delegated  the last delegation of partition 0 to the new leader before first_ack
- first_ack     the first successful delivery report on partition 0 of a message produced
                after the kill (a response already on its way can be read just after it)
- last_ack      the last one before the kill

Before the kills, an etcd probe on the same etcd measures how late etcd deletes a key whose
lease expired: leases of 2, 3 and 9 s, each renewed once at a known time and then left to
expire (5 of each, started 0.2 s apart), lateness = delete seen - (renewal sent + TTL).

Between runs the victim is restarted and the script waits until every ISR is full again
(leadership does not go back: the preferred-leader check runs every 300 s), so each run kills
whichever broker then leads partition 0; whether that broker was also the controller is
recorded (then a controller election sits inside the "expiry -> record" stage).

Settings: Yak's defaults except the session (`--sessions`, default 9000,3000,2000) and the
renewal interval (`broker.heartbeat.interval.ms`: the default 2000 for sessions >= 8000 ms,
else session/4, at least 500, as the chaos tool does; `--heartbeat-ms` fixes one).

    .venv/bin/python benchmarks/failover_timeline.py --runs 5 --out /tmp/failover.json

Bounded: every wait has a timeout and the whole script stops starting runs after
`--max-seconds`; the cluster is stopped (and its directory removed unless `--keep`) on exit,
SIGINT and SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from yak.chaos.env import ChaosCluster, ClusterSpec  # noqa: E402
from yak.cluster.etcd import EtcdClient  # noqa: E402
from yak.devcluster.local import ManagedProcess  # noqa: E402

TOPIC = "timeline"
PARTITIONS = 3

# Runs the broker exactly as `python -m yak.cli.main serve ...` does, with one logger at DEBUG
# so the new leader's "leading <tp> at epoch E" line is written (INFO handler on the root).
LAUNCHER = ("import logging, sys; "
            "logging.getLogger('yak.partition.replica_manager').setLevel(logging.DEBUG); "
            "from yak.cli.main import app; sys.argv[0] = 'yak'; app()")

LOG_TS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_time(line: str) -> float | None:
    m = LOG_TS.match(line)
    if not m:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


class TimelineCluster(ChaosCluster):
    def _broker_process(self, node: int) -> ManagedProcess:
        proc = super()._broker_process(node)
        argv = list(proc.argv)
        i = argv.index("-m")
        assert argv[i + 1] == "yak.cli.main"
        proc.argv = argv[:i] + ["-c", LAUNCHER] + argv[i + 2:]
        return proc


# ---------------------------------------------------------------- etcd observer


class EtcdObserver:
    """A thread with its own event loop: watches the cluster's keys, polls one lease's TTL."""

    def __init__(self, endpoint: str, root: str) -> None:
        self.endpoint = endpoint
        self.root = root
        self.events: list[tuple[float, str, str, Any]] = []  # (t, PUT|DELETE, key, value)
        self.ttl_samples: list[tuple[float, int, int]] = []  # (t, lease, ttl_s)
        self.poll_lease = 0
        self.loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, name="etcd-observer", daemon=True)
        self.ready = threading.Event()

    def start(self) -> None:
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError("etcd observer did not start")

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(10)

    def get(self, key: str) -> Any:
        async def go() -> Any:
            async with EtcdClient(self.endpoint) as c:
                return await c.get(key)
        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with EtcdClient(self.endpoint) as c:
            tasks = [asyncio.create_task(self._watch(c)), asyncio.create_task(self._poll(c))]
            self.ready.set()
            await self._stop.wait()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch(self, c: EtcdClient) -> None:
        async for resp in c.watch(self.root, prefix=True):
            now = time.time()
            for e in resp.events:
                value = None
                if e.type == "PUT":
                    with contextlib.suppress(Exception):
                        value = e.kv.json()
                self.events.append((now, e.type, e.kv.key, value))

    async def _poll(self, c: EtcdClient) -> None:
        while True:
            lease = self.poll_lease
            if lease:
                with contextlib.suppress(Exception):
                    ttl = await c.lease_ttl(lease)
                    self.ttl_samples.append((time.time(), lease, ttl))
            await asyncio.sleep(0.05)


async def _expiry_probe(endpoint: str, root: str, ttl: int, delay: float) -> dict[str, Any]:
    async with EtcdClient(endpoint) as c:
        await asyncio.sleep(delay)
        lease, granted = await c.lease_grant(ttl)
        key = f"/yak-failover-probe/{ttl}-{lease:x}"  # outside the cluster's keys
        await c.put(key, "x", lease=lease)
        rev = (await c.get(key)).mod_revision  # type: ignore[union-attr]
        await asyncio.sleep(0.3)
        sent = time.time()
        await c.lease_keepalive(lease)
        answered = time.time()

        async def deleted() -> float:
            async for resp in c.watch(key, start_revision=rev + 1):
                for e in resp.events:
                    if e.type == "DELETE":
                        return time.time()
            raise RuntimeError("watch ended")

        gone = await asyncio.wait_for(deleted(), ttl + 10)
        return {"ttl_requested": ttl, "ttl_granted": granted,
                "renewal_rtt": round(answered - sent, 4),
                "late_s": round(gone - (sent + granted), 3)}


def etcd_expiry_probe(endpoint: str, root: str) -> list[dict[str, Any]]:
    async def all_probes() -> list[dict[str, Any]]:
        jobs = [_expiry_probe(endpoint, root, ttl, 0.2 * i)
                for i, ttl in enumerate([1, 2, 3, 9] * 5)]
        return list(await asyncio.gather(*jobs))
    return asyncio.run(all_probes())


# ---------------------------------------------------------------- producer


class Load:
    """Produces `rate` msg/s round-robin over the partitions; records every delivery."""

    def __init__(self, bootstrap: str, rate: float, client_log: Path) -> None:
        from confluent_kafka import Producer

        self.client_log = client_log
        logger = logging.getLogger(f"rdkafka.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        h = logging.FileHandler(client_log)
        h.setFormatter(logging.Formatter("%(created).3f %(message)s"))
        logger.addHandler(h)
        self._handler = h
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "debug": "metadata,broker,topic", "logger": logger,
        })
        self.rate = rate
        self.acks: list[tuple[float, int, bool, float]] = []  # (t, partition, ok, t_sent)
        self.sent_at: list[float] = []  # by message number (the value)
        self.errors: list[tuple[float, int, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self.n = 0

    def _cb(self, err: Any, msg: Any) -> None:
        t = time.time()
        if err is None:
            self.acks.append((t, msg.partition(), True, self.sent_at[int(msg.value())]))
        else:
            self.errors.append((t, msg.partition(), str(err)))

    def _run(self) -> None:
        period = 1.0 / self.rate
        nxt = time.monotonic()
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= nxt:
                p = self.n % PARTITIONS
                self.sent_at.append(time.time())
                try:
                    self.producer.produce(TOPIC, value=b"%d" % self.n, partition=p,
                                          on_delivery=self._cb)
                    self.n += 1
                except BufferError:
                    self.sent_at.pop()
                nxt += period
                if nxt < now - 1:
                    nxt = now
            self.producer.poll(min(0.005, max(0.0, nxt - time.monotonic())))

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        with contextlib.suppress(Exception):
            self.producer.flush(10)
        self._handler.close()

    def acked_since(self, t: float, partition: int, sent_after: float = 0.0) -> list[float]:
        return [a for a, p, ok, ts in list(self.acks)
                if ok and p == partition and a > t and ts >= sent_after]


# ---------------------------------------------------------------- one session setting


def wait_for(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if cond():
                return
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")


def metadata(cluster: ChaosCluster) -> dict[int, tuple[int, list[int], list[int]]]:
    md = cluster.admin().list_topics(TOPIC, timeout=5)
    t = md.topics.get(TOPIC)
    if t is None or t.error is not None:
        return {}
    return {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in t.partitions.items()}


def isr_full(cluster: ChaosCluster) -> bool:
    md = metadata(cluster)
    return len(md) == PARTITIONS and all(
        leader > 0 and sorted(isr) == sorted(replicas) for leader, replicas, isr in md.values())


def broker_lines(cluster: ChaosCluster, node: int, since: float) -> list[tuple[float, str]]:
    out = []
    path = cluster.brokers[node].log_path
    with contextlib.suppress(FileNotFoundError), open(path, errors="replace") as f:
        for line in f:
            t = log_time(line)
            if t is not None and t >= since - 0.01:
                out.append((t, line.rstrip("\n")))
    return out


def client_times(log: Path, since: float, new_leader: int, port: int,
                 until: float) -> dict[str, float | None]:
    """From librdkafka's debug log, after `since`: its first metadata answer naming
    `new_leader` for partition 0 ("md") and the request it answered, the last one sent before
    it ("md_request"); a later "broker is internal: re-query" of partition 0
    ("requery": the partition was parked on the internal broker, see the doc); the last
    delegation of partition 0 to the new leader before `until` ("delegated")."""
    pat_md = re.compile(rf"Topic {TOPIC} \[0\] Leader {new_leader} Epoch")
    pat_rq = f"Topic {TOPIC} [0]: broker is internal: re-query"
    pat_dg = f"{TOPIC} [0]: delegate to broker 127.0.0.1:{port}/{new_leader} "
    out: dict[str, float | None] = {"md": None, "md_request": None, "requery": None,
                                    "delegated": None}
    last_request = None
    with contextlib.suppress(FileNotFoundError), open(log, errors="replace") as f:
        for line in f:
            head, _, rest = line.partition(" ")
            try:
                t = float(head)
            except ValueError:
                continue
            if t <= since or t > until:
                continue
            if out["md"] is None and "Requesting metadata for" in rest:
                last_request = t
            if out["md"] is None and pat_md.search(rest):
                out["md"], out["md_request"] = t, last_request
            if out["md"] is not None and out["requery"] is None and pat_rq in rest:
                out["requery"] = t
            if pat_dg in rest:
                out["delegated"] = t
    return out


def one_run(cluster: ChaosCluster, obs: EtcdObserver, load: Load, topic_id: str,
            root: str, run_dir: Path) -> dict[str, Any]:
    wait_for(lambda: isr_full(cluster), 90, "every ISR full")
    t0 = time.time()
    wait_for(lambda: len(load.acked_since(t0, 0)) >= 20, 30, "steady acks on partition 0")
    md = metadata(cluster)
    victim = md[0][0]
    controller = cluster.controller()
    reg = obs.get(root + f"brokers/{victim}")
    part = obs.get(root + f"partitions/{topic_id}/0")
    old_epoch = part.json()["leaderEpoch"]
    obs.poll_lease = reg.lease
    time.sleep(3.0)  # long enough to see at least one renewal (interval <= 2 s)
    last_ack = max(load.acked_since(0, 0))
    t_kill = time.time()
    cluster.kill(victim)
    try:
        wait_for(lambda: load.acked_since(t_kill, 0, t_kill), 60,
                 "an ack on partition 0 of a message sent after the kill")
    finally:
        obs.poll_lease = 0
    time.sleep(1.0)  # let log lines and watch events arrive
    first_ack = min(load.acked_since(t_kill, 0, t_kill))
    other_first = {p: (min(load.acked_since(t_kill, p)) if load.acked_since(t_kill, p) else None)
                   for p in range(1, PARTITIONS)}
    other_gap = {}
    for p in range(1, PARTITIONS):
        ts = sorted(a for a, q, ok, _ in list(load.acks) if ok and q == p and a > t_kill - 5)
        gaps = [b - a for a, b in zip(ts, ts[1:], strict=False) if b > t_kill]
        other_gap[p] = max(gaps) if gaps else None

    # the victim's lease: the last increase of the remaining TTL (a dead process renews
    # nothing, so an increase seen just after the kill is a renewal sent just before it)
    samples = [(t, ttl) for t, lease, ttl in obs.ttl_samples if lease == reg.lease]
    renewal = None
    for (_ta, a), (tb, b) in zip(samples, samples[1:], strict=False):
        if b > a:
            renewal = tb
    max_ttl_seen = max((ttl for _, ttl in samples), default=None)
    ttl_changes = [(round(tb - t_kill, 3), b) for (_ta, a), (tb, b)
                   in zip(samples, samples[1:], strict=False) if a != b]

    expiry = next((t for t, typ, key, _ in obs.events
                   if t >= t_kill and typ == "DELETE" and key == root + f"brokers/{victim}"),
                  None)
    ctrl_gone = next((t for t, typ, key, _ in obs.events
                      if t >= t_kill and typ == "DELETE" and key == root + "controller"), None)
    record, new_leader, new_epoch = None, None, None
    for t, typ, key, value in obs.events:
        if (t >= t_kill and typ == "PUT" and key == root + f"partitions/{topic_id}/0"
                and value and value.get("leaderEpoch", 0) > old_epoch
                and value.get("leader", -1) > 0):
            record, new_leader, new_epoch = t, value["leader"], value["leaderEpoch"]
            break

    ctrl_log = apply = None
    ctrl_line = apply_line = ""
    if new_leader is not None:
        pat_c = re.compile(rf"{TOPIC}-0: leader {victim} -> {new_leader} \(epoch {new_epoch}\)")
        pat_a = f"leading {TOPIC}-0 at epoch {new_epoch}"
        for n in cluster.node_ids:
            if n == victim:
                continue
            for t, line in broker_lines(cluster, n, t_kill):
                if ctrl_log is None and pat_c.search(line):
                    ctrl_log, ctrl_line = t, f"broker{n}: {line}"
                if n == new_leader and apply is None and pat_a in line:
                    apply, apply_line = t, f"broker{n}: {line}"
    ct = (client_times(load.client_log, t_kill, new_leader, cluster.kafka_port(new_leader),
                       first_ack) if new_leader is not None else {})
    errors = sorted({e for t, p, e in load.errors if t > t_kill and p == 0})

    def rel(t: float | None) -> float | None:
        return None if t is None else round(t - t_kill, 3)

    res = {
        "victim": victim, "victim_was_controller": controller == victim,
        "controller_before": controller, "new_leader": new_leader, "new_epoch": new_epoch,
        "load_1m": os.getloadavg()[0], "max_ttl_seen_s": max_ttl_seen, "ttl_changes": ttl_changes,
        "t_kill": t_kill,
        "renewal": rel(renewal), "last_ack": rel(last_ack), "expiry": rel(expiry),
        "controller_key_deleted": rel(ctrl_gone), "record": rel(record),
        "ctrl_log": rel(ctrl_log), "apply": rel(apply), "client_md": rel(ct.get("md")),
        "client_md_request": rel(ct.get("md_request")),
        "client_requery": rel(ct.get("requery")), "client_delegated": rel(ct.get("delegated")),
        "first_ack": rel(first_ack),
        "other_partitions_first_ack": {p: rel(v) for p, v in other_first.items()},
        "other_partitions_max_gap": {p: (round(g, 3) if g is not None else None)
                                     for p, g in other_gap.items()},
        "lines": {"ctrl": ctrl_line, "apply": apply_line},
        "client_errors_p0": errors,
    }
    # bring the victim back for the next run
    cluster.start_broker(victim)
    return res


def session_runs(args: argparse.Namespace, session_ms: int, base: Path,
                 deadline: float, probes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    hb = args.heartbeat_ms or (2000 if session_ms >= 8000 else max(500, session_ms // 4))
    settings = {
        "broker.heartbeat.interval.ms": str(hb),
        "replica.lag.time.max.ms": "30000",  # the chaos tool's 5000 back to the default
        "auto.create.topics.enable": "false",
    }
    spec = ClusterSpec(base / f"s{session_ms}", brokers=3, session_timeout_ms=session_ms,
                       broker_settings=settings)
    cluster = TimelineCluster(spec)
    obs = load = None
    results: list[dict[str, Any]] = []
    try:
        cluster.start()
        from confluent_kafka.admin import NewTopic

        admin = cluster.admin()
        fs = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                           config={"min.insync.replicas": "2"})])
        for f in fs.values():
            f.result(30)
        wait_for(lambda: isr_full(cluster), 30, "the topic's leaders")
        root = "/yak/chaos/"
        assert cluster.etcd is not None
        obs = EtcdObserver(f"127.0.0.1:{cluster.etcd.client_ports[0]}", root)
        obs.start()
        if not probes and not args.no_probe:
            probes += etcd_expiry_probe(f"127.0.0.1:{cluster.etcd.client_ports[0]}", root)
            for ttl in (1, 2, 3, 9):
                late = sorted(p["late_s"] for p in probes if p["ttl_requested"] == ttl)
                granted = {p["ttl_granted"] for p in probes if p["ttl_requested"] == ttl}
                print(f"  etcd lease TTL {ttl} s (granted {sorted(granted)}): key deleted"
                      f" {late[0]:.2f} / {statistics.median(late):.2f} / {late[-1]:.2f} s"
                      " (min / median / max) after renewal + TTL", flush=True)
        topic = obs.get(root + f"topics/{TOPIC}").json()
        topic_id = topic["topicId"]
        load = Load(cluster.bootstrap, args.rate, base / f"rdkafka-s{session_ms}.log")
        load.start()
        for i in range(args.runs):
            if time.monotonic() > deadline:
                print(f"  (time limit: stopping after {i} runs)", flush=True)
                break
            try:
                r = one_run(cluster, obs, load, topic_id, root, base)
            except TimeoutError as e:
                print(f"  run {i + 1}: {e}", flush=True)
                results.append({"error": str(e)})
                continue
            r.update(session_ms=session_ms, heartbeat_ms=hb, run=i + 1)
            results.append(r)
            print(f"  s={session_ms} run {i + 1}: victim {r['victim']}"
                  f"{' (controller)' if r['victim_was_controller'] else ''}"
                  f" renewal {r['renewal']} expiry {r['expiry']} record {r['record']}"
                  f" apply {r['apply']} client_md {r['client_md']} requery {r['client_requery']}"
                  f" first_ack {r['first_ack']} load {r['load_1m']:.1f}", flush=True)
    finally:
        if load is not None:
            load.close()
        if obs is not None:
            obs.stop()
        cluster.stop()
        if args.keep:
            print(f"  kept {spec.directory}", flush=True)
    return results


STAGES = [
    ("kill -> lease expiry (registration deleted)", None, "expiry"),
    ("  of which: last renewal -> expiry", "renewal", "expiry"),
    ("lease expiry -> partition record written", "expiry", "record"),
    ("record -> new leader applies it", "record", "apply"),
    ("record -> client metadata names new leader", "record", "client_md"),
    ("  of which: record -> client's next Metadata request", "record", "client_md_request"),
    ("client metadata -> last delegation to new leader", "client_md", "client_delegated"),
    ("client's last delegation -> first ack", "client_delegated", "first_ack"),
    ("new leader applies -> first ack", "apply", "first_ack"),
    ("kill -> first ack (partition 0)", None, "first_ack"),
    ("last ack before kill -> first ack after", "last_ack", "first_ack"),
]


def stage_table(results: list[dict[str, Any]]) -> str:
    sessions = sorted({r["session_ms"] for r in results if "session_ms" in r}, reverse=True)
    out = ["| stage | " + " | ".join(f"session {s} ms: min / median / max (s)"
                                      for s in sessions) + " |",
           "|---|" + "---|" * len(sessions)]
    for label, a, b in STAGES:
        cells = []
        for s in sessions:
            vals = []
            for r in results:
                if r.get("session_ms") != s or r.get(b) is None:
                    continue
                start = 0.0 if a is None else r.get(a)
                if start is None:
                    continue
                vals.append(r[b] - start)
            cells.append(f"{min(vals):.2f} / {statistics.median(vals):.2f} / {max(vals):.2f}"
                         f" (n={len(vals)})" if vals else "-")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="9000,3000,2000",
                    help="broker.session.timeout.ms values, comma-separated")
    ap.add_argument("--runs", type=int, default=5, help="kills per session setting")
    ap.add_argument("--rate", type=float, default=200.0, help="messages/s, all partitions")
    ap.add_argument("--heartbeat-ms", type=int, default=0,
                    help="broker.heartbeat.interval.ms (default: 2000 for sessions >= 8000,"
                         " else session/4, at least 500)")
    ap.add_argument("--max-seconds", type=float, default=1500.0,
                    help="start no run after this many seconds")
    ap.add_argument("--dir", default=None, help="working directory (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the cluster directories")
    ap.add_argument("--no-probe", action="store_true", help="skip the etcd expiry probe")
    ap.add_argument("--out", default=None, help="write every run's timestamps here (JSON)")
    args = ap.parse_args()

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    base = Path(args.dir or tempfile.mkdtemp(prefix="yak-failover-"))
    base.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.max_seconds
    results: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []
    print(f"load at start: {os.getloadavg()}, {os.cpu_count()} CPUs", flush=True)
    try:
        for s in [int(x) for x in args.sessions.split(",") if x.strip()]:
            if time.monotonic() > deadline:
                break
            results += session_runs(args, s, base, deadline, probes)
    finally:
        if args.out:
            Path(args.out).write_text(json.dumps({"runs": results, "etcd_probe": probes},
                                                 indent=1))
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"load at end: {os.getloadavg()}", flush=True)
    print(stage_table([r for r in results if "error" not in r]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
