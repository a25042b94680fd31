"""Start and run one broker: `serve(...)` for the CLI, `start_broker(config)` in-process.

`serve` blocks until SIGTERM/SIGINT, then stops accepting, closes client connections,
stops coordinators and shuts the logs down cleanly (flush, checkpoints, clean-shutdown
marker) so the next start skips recovery.

Also runnable as `python -m yak.broker.server --data-dir D --listen HOST:PORT`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from yak.broker.broker import Broker
from yak.broker.connection import KafkaConnection
from yak.config import BrokerConfig, ConfigError

log = logging.getLogger(__name__)


@dataclass
class RunningBroker:
    broker: Broker
    server: asyncio.AbstractServer

    @property
    def port(self) -> int:
        return self.broker.port

    @property
    def bootstrap(self) -> str:
        return f"{self.broker.host}:{self.broker.port}"

    async def stop(self) -> None:
        self.server.close()
        for conn in list(self.broker.connections):
            conn.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 2)
        await self.broker.stop_services()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.broker.logs.shutdown)
        self.broker.shutdown_io()


def _attach_optional_services(broker: Broker) -> None:
    """Let coordinators attach themselves without this module importing them by name.

    Any `yak.<pkg>.broker_plugin` module exporting `attach(broker)` is called: the group
    and transaction coordinators register their services and set
    `broker.group_coordinator` / `broker.txn_coordinator` there.
    """
    import importlib

    for pkg in ("yak.group", "yak.txn", "yak.cluster", "yak.security"):
        try:
            mod = importlib.import_module(f"{pkg}.broker_plugin")
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith(pkg):
                continue
            log.exception("%s.broker_plugin failed to import", pkg)
            continue
        except Exception:
            log.exception("%s.broker_plugin failed to import", pkg)
            continue
        try:
            mod.attach(broker)
        except Exception:
            log.exception("%s.broker_plugin.attach failed", pkg)


async def start_broker(config: BrokerConfig) -> RunningBroker:
    from yak.broker.handlers import registry
    from yak.broker.topics import TopicManager
    from yak.cluster.metadata import MetadataStore
    from yak.storage import LogManager

    config.data_dir.mkdir(parents=True, exist_ok=True)
    loop = asyncio.get_running_loop()
    logs = LogManager(str(config.data_dir), config.log_defaults)
    metadata = MetadataStore(config.data_dir / "__yak_metadata.json")
    topics = TopicManager(metadata, logs, config)
    # Topic configs live in the metadata, so storage needs them to load the logs.
    configs = {info.name: topics.log_config(info) for info in topics.topics()}
    await loop.run_in_executor(None, logs.startup, configs)
    await loop.run_in_executor(None, topics.startup)
    for plog in logs.logs():
        # One broker: the leader is the whole ISR, so everything recovered is committed.
        plog.update_high_watermark()
    broker = Broker(config, logs, metadata, topics)
    registry()  # import handlers now, not on the first request
    _attach_optional_services(broker)
    await broker.start_services()
    server = await loop.create_server(
        lambda: KafkaConnection(broker),
        host=config.listen_host,
        port=config.listen_port,
        reuse_address=True,
        backlog=1024,
    )
    bound = server.sockets[0].getsockname()[1]
    if not config.listen_port:
        config.listen_port = bound
    if not broker.port:
        broker.port = bound
    return RunningBroker(broker, server)


def _install_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _run(config: BrokerConfig, http: str | None = None) -> int:
    running = await start_broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"Yak broker ready on {running.bootstrap}", flush=True)
    http_server = None
    if http:  # the gateway (REST, WebSocket, console, /metrics) on this loop: yak.gateway
        from yak.gateway.embed import start_embedded

        http_server = await start_embedded(http, running.broker)
    await stop.wait()
    log.info("shutting down")
    if http_server is not None:
        await http_server.stop()
    await running.stop()
    return 0


def serve(
    data_dir: str | None = None,
    listen: str | None = None,
    advertised_listener: str | None = None,
    config_file: str | None = None,
    overrides: Iterable[str] = (),
    http: str | None = None,
) -> int:
    """Run a broker until SIGTERM/SIGINT; returns the process exit code."""
    try:
        config = BrokerConfig.load(
            data_dir=data_dir,
            listen=listen,
            advertised_listener=advertised_listener,
            config_file=config_file,
            overrides=tuple(overrides),
        )
    except ConfigError as e:
        print(f"yak: {e}", file=sys.stderr, flush=True)
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    _install_uvloop()
    try:
        return asyncio.run(_run(config, http))
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
    p.add_argument("--http", default="none", help="HOST:PORT for the embedded gateway")
    a = p.parse_args(argv)
    http = None if a.http.lower() in ("", "none", "off") else a.http
    return serve(a.data_dir, a.listen, a.advertised_listener, a.config, a.overrides, http)


if __name__ == "__main__":
    sys.exit(main())
