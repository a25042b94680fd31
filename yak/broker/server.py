"""Start and run one broker: `serve(...)` for the CLI, `start_broker(config)` in-process.

`serve` loads the settings, builds the broker from its parts (`yak.broker.compose`), starts
them, opens the Kafka listener and blocks until SIGTERM/SIGINT; then it stops accepting,
closes client connections and stops the parts in reverse (storage last: flush, checkpoints,
clean-shutdown marker, so the next start skips recovery). Whatever runs beside the broker
(the CLI's HTTP gateway) is handed in as a companion: this module imports nothing above
the broker.

Also runnable as `python -m yak.broker.server --data-dir D --listen HOST:PORT`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from yak.broker.broker import Broker, StartupError
from yak.broker.compose import build_broker
from yak.broker.connection import KafkaConnection
from yak.config import BrokerConfig, ConfigError

__all__ = ["Companion", "RunningBroker", "configure", "main", "serve", "start_broker"]

log = logging.getLogger(__name__)

# Something that runs beside a broker: started once the broker listens, it returns the
# coroutine function that stops it (or None if it chose not to run).
Companion = Callable[["RunningBroker"], Awaitable[Callable[[], Awaitable[None]] | None]]


# A TLS handshake that has not finished by then is closed (a client that connects and
# sends nothing, or plaintext bytes, must not hold a connection slot).
SSL_HANDSHAKE_TIMEOUT_S = 10.0


@dataclass
class RunningBroker:
    broker: Broker
    servers: dict[str, asyncio.AbstractServer]
    """One server per listener, by listener name."""

    @property
    def server(self) -> asyncio.AbstractServer:
        return next(iter(self.servers.values()))

    @property
    def port(self) -> int:
        return self.broker.port

    @property
    def bootstrap(self) -> str:
        """The inter-broker listener's advertised address (the PLAINTEXT one if any)."""
        return f"{self.broker.host}:{self.broker.port}"

    def listener_bootstrap(self, listener_name: str) -> str:
        host, port = self.broker.advertised[listener_name.upper()]
        return f"{host}:{port}"

    async def stop(self) -> None:
        await self.broker.prepare_stop()  # e.g. controlled shutdown, listeners still open
        for server in self.servers.values():
            server.close()
        for conn in list(self.broker.connections):
            conn.close()
        for server in self.servers.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        await self.broker.stop()


def configure(
    data_dir: str | Path | None = None,
    listen: str | None = None,
    advertised_listener: str | None = None,
    config_file: str | Path | None = None,
    overrides: Iterable[str] = (),
) -> Broker:
    """Settings -> a built (not started) broker; StartupError with the one line to print.

    This is everything `yak serve` does before it touches the network, so a bad value for
    any setting of any part stops here, with exit code 2.
    """
    try:
        config = BrokerConfig.load(
            data_dir=data_dir,
            listen=listen,
            advertised_listener=advertised_listener,
            config_file=config_file,
            overrides=tuple(overrides),
        )
    except ConfigError as e:
        raise StartupError(str(e), exit_code=2) from e
    return build_broker(config)


async def start_broker(config: BrokerConfig | Broker) -> RunningBroker:
    """Start a broker's parts, then its Kafka listener (`listen_port` 0 picks a free port)."""
    broker = config if isinstance(config, Broker) else build_broker(config)
    from yak.broker.handlers import HandlerLoadError, registry

    try:
        registry()  # import the handlers now, not on the first request
    except HandlerLoadError as e:
        raise StartupError(str(e)) from e
    await broker.start()
    cfg = broker.config
    loop = asyncio.get_running_loop()
    servers: dict[str, asyncio.AbstractServer] = {}
    try:
        for ep in broker.security.listeners.listeners:
            builder = broker.channel_builders[ep.listener_name]
            ctx = builder.listener.ssl_context
            servers[ep.listener_name] = await loop.create_server(
                lambda b=builder: KafkaConnection(broker, b),
                host=ep.bind_host,
                port=ep.port,
                reuse_address=True,
                backlog=1024,
                ssl=ctx,
                ssl_handshake_timeout=SSL_HANDSHAKE_TIMEOUT_S if ctx is not None else None,
            )
            bound = servers[ep.listener_name].sockets[0].getsockname()[1]
            host, adv_port = broker.advertised.get(ep.listener_name, (None, None))
            if host is not None and not adv_port:
                broker.advertised[ep.listener_name] = (host, bound)
            if ep is broker.security.listeners.listeners[0] and not cfg.listen_port:
                cfg.listen_port = bound
    except OSError:
        for server in servers.values():
            server.close()
        await broker.stop()
        raise
    ib = broker.security.listeners.inter_broker_listener_name
    if ib in broker.advertised:
        broker.host, broker.port = broker.advertised[ib]
    broker.metrics.bind_connections(lambda: len(broker.connections))
    try:
        await broker.listening()
    except StartupError:
        for server in servers.values():
            server.close()
        raise
    return RunningBroker(broker, servers)


def _install_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _run(broker: Broker, companions: Sequence[Companion]) -> int:
    running = await start_broker(broker)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"Yak broker ready on {running.bootstrap}", flush=True)
    if len(running.servers) > 1:
        for name, (host, port) in running.broker.advertised.items():
            print(f"Yak listener {name} on {host}:{port}", flush=True)
    for warning in running.broker.security.warnings:
        log.warning("%s", warning)
    stoppers = []
    for companion in companions:
        stopper = await companion(running)
        if stopper is not None:
            stoppers.append(stopper)
    await stop.wait()
    log.info("shutting down")
    for stopper in reversed(stoppers):
        try:
            await stopper()
        except Exception:
            log.exception("stopping a companion failed")
    await running.stop()
    return 0


def serve(
    data_dir: str | None = None,
    listen: str | None = None,
    advertised_listener: str | None = None,
    config_file: str | None = None,
    overrides: Iterable[str] = (),
    companions: Sequence[Companion] = (),
) -> int:
    """Run a broker until SIGTERM/SIGINT; returns the process exit code.

    A bad setting, or a part that cannot be built or started, prints one line and
    returns 2 (configuration) or 1.
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        # One line per etcd call (a cluster broker's keepalives) would drown the log.
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)
    try:
        broker = configure(data_dir, listen, advertised_listener, config_file, overrides)
    except StartupError as e:
        print(f"yak: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    _install_uvloop()
    try:
        return asyncio.run(_run(broker, companions))
    except StartupError as e:
        print(f"yak: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    except OSError as e:
        print(f"yak: cannot start broker: {e}", file=sys.stderr, flush=True)
        return 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m yak.broker.server")
    p.add_argument("--data-dir")
    p.add_argument("--listen")
    p.add_argument("--advertised-listener")
    p.add_argument("--config")
    p.add_argument("--set", action="append", default=[], dest="overrides")
    a = p.parse_args(argv)
    return serve(a.data_dir, a.listen, a.advertised_listener, a.config, a.overrides)


if __name__ == "__main__":
    sys.exit(main())
