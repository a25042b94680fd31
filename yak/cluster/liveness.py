"""The active controller's liveness probe: fence a broker whose process is gone, at once.

Without it, a killed broker is noticed only when its session lease expires
(`broker.session.timeout.ms`, 9 s by default, plus etcd's up to 0.5 s check); that is
most of a dead leader's failover (docs/reliability.md, "Where failover time goes"). A
kill -9 is visible much sooner on the network: the kernel closes the process's sockets,
and its listening port refuses new connections.

So while this broker is the controller it keeps one idle TCP connection to each other
registered broker's inter-broker listener (it sends nothing on it; for the pings a frozen
broker needs, below). When that connection is closed or reset, it tries to connect again,
`refusals` times over `window_s`:

- a connect that succeeds means the broker is alive (it merely closed an idle connection,
  or restarted): keep the new connection and go on;
- a timeout means a slow or partitioned network, or a paused host: judge nothing, leave it
  to the session lease (so does a TLS handshake that times out: the kernel completed the
  connection, nobody answered it);
- only when every try is refused (ECONNREFUSED: the host answered, no process listens)
  is the process gone. A SIGSTOPped process still has its listening socket, and the
  kernel still completes connections to it, so a pause never gets here.

Then the controller revokes the broker's registration lease (`KVClient.lease_revoke`),
after checking that the registration is still the one it probed (same create_revision,
the broker epoch), so a broker that has meanwhile registered anew is never touched. The
revoke deletes the registration exactly as an expiry would, and the controller's usual
path follows: the broker leaves every ISR and its partitions get leaders from the ISR
(never unclean). A restarted broker registers anew as today. A broker in controlled
shutdown is left alone: it is leaving by its own path and deregisters itself.

Every other broker runs the same probe on the active controller (issue 27: a killed
controller used to cost its whole session, since the probe was the controller's alone).
Its verdict leads to the same revoke, of the controller's registration lease after the
same checks; the controller key (`ControllerElection` puts it on that same session lease)
goes with it, as after an expiry, so the brokers' campaigns through etcd elect the next
controller. Should the key be on another lease, it is revoked too, but only while the key
still names that broker with the controller epoch that was probed. Leadership stays fenced
by etcd alone: a new controller is elected only by etcd's compare-and-set on the key,
and every write of the old one compares on the key's create revision, so even a wrong
verdict could only cost the old controller its term, never give two brokers one. Several
brokers may reach the same verdict at once: a second revoke finds the lease gone.

A controller that loses its term stops probing the others at once (it goes on probing the
next controller, as every broker does).

**On an SSL or SASL_SSL inter-broker listener** the probe's connection is a TLS one, made
with the broker's own inter-broker client TLS context (`tls`, handed in by the composition:
the one the replica fetchers use, `ClientSecurity.for_inter_broker`: the truststore, and
the keystore's certificate where the listener asks for client certificates). The TCP
connect decides the kill verdict's evidence as above (a refusal is evidence, a timeout is
not); the handshake that follows is bounded by `HANDSHAKE_TIMEOUT_S`, and a handshake that
times out or is cut off judges nothing, like a connect timeout. It sends no SASL login:
ApiVersions is served before authentication. A handshake the broker *answered* but that
failed (a certificate the trust store does not accept, a protocol or cipher mismatch), or
a TLS connection the broker closed before it answered any ping (TLS 1.3 refuses a client
certificate only after the client's side of the handshake), is a configuration problem, not a dead or frozen broker: it is
logged once per probed registration, as a warning that names the broker, the address and
the TLS error, and the probe falls back to a plain idle connection on that listener, which
keeps the kill verdict (a closed connection, then refusals) and gives up the frozen one;
the session lease bounds a pause there, as before. Without a TLS context (a broker built
in code, a PLAINTEXT inter-broker listener of its own), a TLS endpoint gets that idle
connection too.

**A frozen broker** (SIGSTOP, a long GC pause; issue 27) keeps its connection and its port,
so the probe also pings on that connection (ApiVersions, one in flight, every 250 ms;
liveness_pings.py) and fences a broker that has answered nothing for
`broker.liveness.unresponsive.ms` (2000 ms; 0 turns it off), through the same checked
revoke, unless this prober's own loop was late in the window. The kill verdict's trigger
(the kernel's refusal, repeated) cannot fence a live broker; this one can fence a live but
stalled one. What that costs (availability only: it registers again) and why it can never
cost an acknowledged write is in liveness_pings.py's docstring.

Silence alone is no verdict, because a prober cut off from the network hears silence too
(run F: a cut-off controller fenced both healthy brokers). A silent broker is judged only
when a majority of the registered brokers stands behind it (liveness_quorum.py): in the
controller's term, this prober and the other probed brokers that answered within half the
bound (a controller that hears none of them judges none); a broker probing only the
controller records its suspicion in etcd and judges once a majority of the brokers
suspect the same registration. Until then it goes on pinging, and an answer withdraws the
suspicion.

A silence is also no verdict while the suspect is seen replicating (liveness_witness.py,
run G's two false positives): before judging, the prober asks `last_fetch_ms`, injected by
the composition, when a fetch from the suspect last arrived at a partition this broker
leads; one that arrived within the bound withholds the verdict (logged once per suspicion,
counted in `withheld`), and a broker probing the controller then neither records nor keeps
its suspicion in etcd. No such fetch (or nothing of the suspect's led here): judged as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable

from yak.cluster.etcd import EtcdError, LeaseNotFoundError
from yak.cluster.etcd_store import EtcdMetadataStore, MetadataDelta
from yak.cluster.kv import KVClient
from yak.cluster.layout import ClusterKeys
from yak.cluster.liveness_pings import PINGABLE_PROTOCOLS, TLS_PROTOCOLS, FreezeJudge, watch
from yak.cluster.liveness_quorum import Hearing, Suspicions, peers_agree
from yak.cluster.liveness_witness import fetched_within

__all__ = ["BrokerLiveness"]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 1.0  # a connect slower than this is a slow network, not a refusal
# A TLS handshake slower than this judges nothing (a full handshake is a few ms; a loaded
# 2-core host has taken a few hundred).
HANDSHAKE_TIMEOUT_S = 2.0

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class TlsRefused(Exception):
    """A TLS handshake the peer answered but that failed (`ssl.SSLError`, not a cut-off
    connection): configuration, not liveness evidence."""


async def connect(host: str, port: int, tls: ssl.SSLContext | None = None) -> Streams | str:
    """The probe's connection to `host:port`, over TLS when `tls` is given; or why not:
    "refused" (nothing listens: the kill verdict's evidence) or "other" (a timeout, of the
    connect or of the handshake, or a connection cut off: judge nothing). Raises
    `TlsRefused` for a handshake that failed on its merits."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                CONNECT_TIMEOUT_S)
    except ConnectionRefusedError:
        return "refused"
    except (OSError, TimeoutError):
        return "other"
    if tls is None:
        return reader, writer
    try:
        # The event loop's own handshake timeout, and ours around it (the one to count on).
        await asyncio.wait_for(writer.start_tls(
            tls, server_hostname=host, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S),
            HANDSHAKE_TIMEOUT_S + 0.5)
    except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
        writer.close()
        return "other"  # the peer closed mid-handshake: nothing learned
    except ssl.SSLError as e:
        writer.close()
        raise TlsRefused(f"{type(e).__name__}: {e}") from None
    except (OSError, TimeoutError):
        writer.close()
        return "other"
    except BaseException:  # cancelled (the probe ended): no half-open socket left behind
        writer.close()
        raise
    return reader, writer
RETRY_IDLE_S = 0.5  # between connects to a broker that has never been reached


class BrokerLiveness:
    """Probes every other registered broker while `start()`ed (the controller's term), and
    the active controller from `open()` to `aclose()` (every broker, all the time).

    `resolve(node_id)` gives the broker's inter-broker (host, port); `tls` is this broker's
    inter-broker client TLS context (None: SSL and SASL_SSL endpoints get an idle plain
    connection, kill verdict only). `fenced` counts the brokers (and controllers) this
    broker fenced as gone, `frozen` those it fenced as unresponsive for `unresponsive_ms`
    (metrics; 0 ms: never judged frozen). `last_fetch_ms(node_id)` (set by the composition;
    None: no witness) says when that broker's fetch last arrived at a partition this broker
    leads (time.monotonic ms, liveness_witness.py); `withheld` counts the suspicions it
    withheld.
    """

    def __init__(self, store: EtcdMetadataStore, client: KVClient, keys: ClusterKeys,
                 node_id: int, resolve: Callable[[int], tuple[str, int] | None], *,
                 refusals: int = 3, window_s: float = 0.3, unresponsive_ms: int = 0,
                 tls: ssl.SSLContext | None = None) -> None:
        self.store = store
        self.client = client
        self.keys = keys
        self.node_id = node_id
        self.resolve = resolve
        self.refusals = max(1, refusals)
        self.window_s = window_s
        self.fenced = 0
        self.frozen = 0
        self.unresponsive_s = max(0, unresponsive_ms) / 1000
        self.tls = tls
        self.tls_refused = 0  # probes that fell back to an idle connection (bad TLS setup)
        # The local witness of life (liveness_witness.py): a fetch from the suspect that
        # arrived here within the bound withholds the frozen verdict.
        self.last_fetch_ms: Callable[[int], int | None] | None = None
        self.withheld = 0  # suspicions withheld because the suspect fetched within the bound
        # The frozen verdict's second source (liveness_quorum.py): whom this prober heard
        # lately (in the controller's term), and its suspicions in etcd (otherwise).
        self.hearing = Hearing()
        self.suspicions = Suspicions(client, keys, node_id, self.unresponsive_s)
        self._running = False  # open(): probe the controller (every broker)
        self._active = False  # start(): probe every broker (the controller's term)
        self._probes: dict[int, tuple[int, asyncio.Task[None]]] = {}  # node -> (epoch, task)
        # Nodes being fenced: the revoke's own watch event must not cancel the probe that
        # sent it before it has counted and logged it.
        self._fencing: set[int] = set()
        store.add_listener(self._on_delta)

    # ------------------------------------------------------------------ term

    def open(self) -> None:
        """This broker is registered: probe the active controller from now on."""
        self._running = True
        self._sync()

    def start(self) -> None:
        """This broker became the controller: probe every other broker."""
        self._running = self._active = True
        self._sync()

    def stop(self) -> None:
        """The term ended: stop probing the others (no await; the tasks end on
        cancellation); the next controller is probed once it is known."""
        self._active = False
        self._sync()

    async def aclose(self) -> None:
        tasks = [t for _e, t in self._probes.values()]
        self._running = self._active = False
        self._sync()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    def _on_delta(self, delta: MetadataDelta) -> None:
        if self._running and (delta.brokers or delta.snapshot or delta.controller):
            self._sync()

    def _targets(self) -> set[int]:
        """Whom to probe: every other broker in the controller's term, else the
        controller (when it is another broker), else nobody."""
        if not self._running:
            return set()
        if self._active:
            return set(self.store.brokers()) - {self.node_id}
        controller = self.store.controller
        if controller is None or controller[0] == self.node_id:
            return set()
        return {controller[0]}

    def _sync(self) -> None:
        """One probe per target broker and epoch; a new epoch replaces the old probe."""
        brokers = self.store.brokers()
        targets = self._targets()
        for node, (epoch, task) in list(self._probes.items()):
            b = brokers.get(node)
            if node in self._fencing and not task.done():
                continue
            if node not in targets or b is None or b.epoch != epoch or task.done():
                task.cancel()
                del self._probes[node]
        if not targets:
            return
        loop = asyncio.get_running_loop()
        for node in sorted(targets):
            b = brokers.get(node)
            if b is None or node in self._probes:
                continue
            task = loop.create_task(self._probe(node, b.epoch), name=f"liveness-{node}")
            self._probes[node] = (b.epoch, task)

    # ------------------------------------------------------------------ the probe

    async def _connect(self, node: int, probe: _ProbeTls | None = None) -> Streams | str:
        """A connection, or why not: "refused" (nothing listens) or "other". Over TLS when
        the endpoint speaks it and `probe` has not given TLS up (a failed handshake gives
        it up, logged once, and a plain connection is made instead)."""
        addr = self.resolve(node)
        if addr is None:
            return "other"
        tls = self._tls_for(node, addr) if probe is not None and probe.tls_ok else None
        if probe is not None:
            probe.secured = tls is not None
        try:
            return await connect(*addr, tls)
        except TlsRefused as e:
            assert probe is not None
            self._give_up_tls(node, probe, f"the TLS handshake failed: {e}")
            return await connect(*addr)

    def _give_up_tls(self, node: int, probe: _ProbeTls, why: str) -> None:
        """TLS does not work with this broker, for a reason of configuration: log it (once
        per probe: it gives TLS up) and go on with plain idle connections."""
        probe.tls_ok = probe.secured = False
        self.tls_refused += 1
        addr = self.resolve(node) or ("?", 0)
        log.warning("liveness: broker %d's inter-broker listener %s:%d over TLS: %s. A"
                    " configuration problem (trust store, client certificate, protocols),"
                    " not a dead broker: it is probed on a plain idle connection from now on"
                    " (a dead process is still fenced at once; a frozen one only at its"
                    " session's expiry)", node, addr[0], addr[1], why)

    def _tls_for(self, node: int, addr: tuple[str, int]) -> ssl.SSLContext | None:
        """This broker's TLS context when the probed endpoint is SSL or SASL_SSL and the
        connection is to be pinged (an idle one needs no TLS)."""
        b = self.store.brokers().get(node)
        if self.tls is None or b is None or not self.unresponsive_s:
            return None
        tls = any((ep.host, ep.port) == addr and ep.security_protocol in TLS_PROTOCOLS
                  for ep in b.record.end_points)
        return self.tls if tls else None

    async def _probe(self, node: int, epoch: int) -> None:
        writer: asyncio.StreamWriter | None = None
        tls = _ProbeTls()  # this probe's TLS state: one failed handshake gives it up
        try:
            while True:
                got = await self._connect(node, tls)
                if isinstance(got, str):
                    # Never reached yet (starting, or a slow network): nothing to judge.
                    await asyncio.sleep(RETRY_IDLE_S)
                    continue
                reader, writer = got
                pings = self._pingable(node, tls.secured)
                _log_probing(node, epoch, pings, tls.secured)
                while True:
                    answered = False
                    if pings:
                        second = _Second(self, node, epoch)
                        judge = await watch(reader, writer, self.unresponsive_s,
                                            second=second)
                        if judge is not None:  # answered nothing for the bound: frozen
                            writer.close()
                            writer = None
                            await self._fence(node, epoch, judge.evidence(judge.judged_at)
                                              + "; " + second.evidence)
                            return
                        answered = second.answered
                    else:
                        with contextlib.suppress(OSError):
                            while await reader.read(4096):
                                pass  # a broker never writes unasked; drain whatever comes
                    if tls.secured and not answered:
                        # TLS 1.3: a client certificate the broker refuses ends the
                        # connection after the client's handshake, before any answer.
                        # Reconnecting over TLS would only repeat it, at once.
                        self._give_up_tls(node, tls, "the broker closed the TLS connection"
                                          " before answering any ping (a client"
                                          " certificate it does not accept?)")
                    writer.close()
                    writer = None
                    verdict = await self._reconnect(node, tls)
                    if verdict is None:
                        break  # not refused every time: back to the outer loop
                    if isinstance(verdict, tuple):
                        reader, writer = verdict
                        was, pings = pings, self._pingable(node, tls.secured)
                        if pings != was:  # TLS given up: say so
                            _log_probing(node, epoch, pings, tls.secured)
                        continue
                    await self._fence(node, epoch, None)
                    return
        finally:
            self.hearing.forget(node)
            if writer is not None:
                writer.close()

    def fetch_witness(self, node: int, now: float) -> str | None:
        """The evidence that `node` fetched from this broker within the bound before `now`
        (time.monotonic s), or None (no witness wired, nothing of it led here, or its last
        fetch arrived earlier)."""
        if self.last_fetch_ms is None:
            return None
        return fetched_within(self.last_fetch_ms(node), now, self.unresponsive_s)

    def _pingable(self, node: int, secured: bool = False) -> bool:
        """Ping only where Kafka framing is spoken on this connection: the endpoint probed
        is PLAINTEXT or SASL_PLAINTEXT, or SSL or SASL_SSL and the connection is a TLS one
        (`secured`); ApiVersions comes before authentication."""
        b = self.store.brokers().get(node)
        addr = self.resolve(node)
        if not self.unresponsive_s or b is None or addr is None:
            return False
        speaks = PINGABLE_PROTOCOLS | (TLS_PROTOCOLS if secured else frozenset())
        return any((ep.host, ep.port) == addr and ep.security_protocol in speaks
                   for ep in b.record.end_points)

    async def _reconnect(self, node: int, probe: _ProbeTls | None = None
                         ) -> Streams | bool | None:
        """After a close: a new connection (alive), True (refused every time: gone), or
        None (a timeout or another error: judge nothing)."""
        pause = self.window_s / max(1, self.refusals - 1)
        for i in range(self.refusals):
            if i:
                await asyncio.sleep(pause)
            got = await self._connect(node, probe)
            if not isinstance(got, str):
                return got
            if got != "refused":
                return None
        return True

    async def _fence(self, node: int, epoch: int, frozen: str | None) -> None:
        """Revoke the probed registration; `frozen` is the freeze verdict's evidence, None
        for the kill verdict."""
        self._fencing.add(node)
        try:
            await self._revoke(node, epoch, frozen)
        finally:
            self._fencing.discard(node)
            if self._running:  # once this probe has ended: a probe of whoever comes next
                asyncio.get_running_loop().call_soon(self._sync)

    async def _revoke(self, node: int, epoch: int, frozen: str | None) -> None:
        b = self.store.brokers().get(node)
        if b is None or b.epoch != epoch:
            return  # gone or registered anew meanwhile
        # Judged as the controller (or the controller's probe by a standby): the term the
        # verdict is about, read before the revoke removes it.
        controller = self.store.controller
        as_controller = not self._active
        if as_controller and (controller is None or controller[0] != node):
            return  # it stopped being the controller meanwhile: its successor probes it
        if b.in_controlled_shutdown:
            log.info("liveness: broker %d closed its listener in controlled shutdown;"
                     " it deregisters itself", node)
            return
        try:
            kv = await self.client.get(self.keys.broker(node))
            if kv is None or kv.create_revision != epoch or not kv.lease:
                return
            await self.client.lease_revoke(kv.lease)
        except LeaseNotFoundError:
            return  # expired meanwhile: the usual path has it
        except EtcdError as e:
            log.warning("liveness: could not fence broker %d (epoch %d): %s; its session"
                        " expiry will", node, epoch, e)
            return
        # Several brokers may fence one dead controller at once (etcd's revoke of a lease
        # already gone is no error): each logs and counts its own.
        role = (f"controller {node} (broker epoch {epoch}, controller epoch {controller[1]})"
                if as_controller and controller is not None else f"broker {node} (epoch {epoch})")
        if frozen is None:
            self.fenced += 1
            log.warning("liveness: %s refused %d connections in %.1f s after its connection"
                        " closed: its process is gone; fenced (lease %x revoked)",
                        role, self.refusals, self.window_s, kv.lease)
        else:
            self.frozen += 1
            log.warning("liveness: %s %s: frozen; fenced (lease %x revoked)",
                        role, frozen, kv.lease)
        if as_controller and controller is not None:
            await self._revoke_controller_key(node, controller[1], kv.lease)

    async def _revoke_controller_key(self, node: int, controller_epoch: int,
                                     revoked: int) -> None:
        """The controller key, should it be on a lease other than the registration's
        (`ControllerElection` puts it on the same one): revoked only while it still names
        `node` with the probed controller epoch."""
        try:
            kv = await self.client.get(self.keys.controller)
            if kv is None or not kv.lease or kv.lease == revoked \
                    or kv.create_revision != controller_epoch \
                    or int(kv.json()["brokerId"]) != node:
                return
            await self.client.lease_revoke(kv.lease)
        except LeaseNotFoundError:
            return
        except (EtcdError, ValueError, KeyError) as e:
            log.warning("liveness: could not revoke the controller key's lease of broker"
                        " %d: %s; its session expiry will", node, e)


def _log_probing(node: int, epoch: int, pings: bool, secured: bool) -> None:
    log.info("liveness: probing broker %d (epoch %d) on %s%s connection", node, epoch,
             "a pinged" if pings else "an idle", " TLS" if secured else "")


class _ProbeTls:
    """One probe's TLS state: `tls_ok` until a handshake fails on its merits (then plain
    idle connections for the rest of the probe); `secured`: the current connection is a
    TLS one."""

    __slots__ = ("secured", "tls_ok")

    def __init__(self) -> None:
        self.tls_ok = True
        self.secured = False


class _Second:
    """The second source of one probe's frozen verdict on `node` at broker `epoch`
    (liveness_quorum.py): in the controller's term, the other probed brokers' answers;
    otherwise (a lone probe of the controller), the other brokers' suspicions in etcd."""

    def __init__(self, liveness: BrokerLiveness, node: int, epoch: int) -> None:
        self.liveness = liveness
        self.node = node
        self.epoch = epoch
        self.evidence = ""
        self.answered = False  # the broker answered at least once on this connection
        self._told = False  # the first refusal of this suspicion is logged, not every tick
        self._witnessed = False  # this suspicion was withheld by a fetch (logged, counted)

    def heard(self, now: float) -> None:
        self.answered = True
        self.liveness.hearing.heard(self.node, now)

    async def agrees(self, judge: FreezeJudge, now: float) -> bool:
        lv = self.liveness
        seen = lv.fetch_witness(self.node, now)
        if seen is not None:  # it replicates: alive, whatever its pings say
            self.evidence = seen
            if not self._witnessed:
                self._witnessed = True
                lv.withheld += 1
                log.info("liveness: broker %d (epoch %d) %s; %s", self.node, self.epoch,
                         judge.evidence(now), seen)
            if not lv._active:  # no suspicion of a live controller is recorded or kept
                await lv.suspicions.withdraw(self.node)
            return False
        registered = set(lv.store.brokers())
        if lv.node_id not in registered:
            ok, self.evidence = False, "this prober is not registered itself; not judged"
        elif lv._active:
            ok, self.evidence = peers_agree(lv.hearing, self.node, list(lv._probes),
                                            len(registered), now, lv.unresponsive_s / 2)
        else:
            ok, self.evidence = await lv.suspicions.agree(self.node, self.epoch, registered,
                                                          now)
        if not ok and not self._told:
            self._told = True
            log.info("liveness: broker %d (epoch %d) %s; %s", self.node, self.epoch,
                     judge.evidence(now), self.evidence)
        return ok

    async def withdraw(self, answered: bool) -> None:
        if self._told:
            why = ("answered again" if answered
                   else "silence no longer counted (the window restarted or the probe ended)")
            log.info("liveness: broker %d (epoch %d) %s; suspicion withdrawn", self.node,
                     self.epoch, why)
        self._told = self._witnessed = False
        await self.liveness.suspicions.withdraw(self.node)
