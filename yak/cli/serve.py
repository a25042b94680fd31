"""`yak serve`: run one broker in the foreground (`yak.broker.server.serve`)."""

from __future__ import annotations

from typing import Annotated

import typer


def serve(
    data_dir: Annotated[
        str | None,
        typer.Option("--data-dir", help="Data directory (log.dirs). [default: ./yak-data]"),
    ] = None,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen", help="HOST:PORT to accept on (listeners). [default: 127.0.0.1:9092]"
        ),
    ] = None,
    advertised_listener: Annotated[
        str | None,
        typer.Option(
            "--advertised-listener",
            help="HOST:PORT clients are told to use (advertised.listeners). [default: --listen]",
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option("--config", help="Kafka-style .properties or .toml settings file."),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Setting KEY=VALUE with Kafka's names; repeatable; wins."),
    ] = None,
    http: Annotated[
        str,
        typer.Option("--http", help="HOST:PORT for REST, WebSocket, console, /metrics; 'none' = off."),
    ] = "127.0.0.1:8080",
) -> None:
    """Run a Yak broker until SIGTERM/SIGINT."""
    from yak.broker.server import serve as run

    # Left unset, a flag does not override the config file; BrokerConfig has the defaults.
    code = run(
        data_dir=data_dir,
        listen=listen,
        advertised_listener=advertised_listener,
        config_file=config,
        overrides=tuple(set_ or ()),
        http=None if http.lower() in ("", "none", "off") else http,
    )
    if code:  # serve() already printed the one-line reason
        raise typer.Exit(code)
