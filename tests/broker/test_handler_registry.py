"""A handler module that cannot serve its API stops the broker from starting, with one
line naming it, instead of the API silently missing from ApiVersions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from yak.broker import handlers
from yak.broker.broker import StartupError
from yak.broker.server import start_broker
from yak.config import BrokerConfig


def test_a_handler_that_fails_to_import_stops_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = handlers.importlib.import_module

    def broken(name: str) -> object:
        if name.endswith(".list_groups"):
            raise SyntaxError("half-written handler")
        return real_import(name)

    monkeypatch.setattr(handlers, "_registry", None)
    monkeypatch.setattr(handlers.importlib, "import_module", broken)

    async def run() -> None:
        cfg = BrokerConfig.load(data_dir=str(tmp_path / "d"), listen="127.0.0.1:0")
        await start_broker(cfg)

    with pytest.raises(StartupError) as ei:
        asyncio.run(run())
    assert "list_groups" in str(ei.value) and "\n" not in str(ei.value)
    assert ei.value.exit_code == 1


def test_two_modules_claiming_one_api_key_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real_load = handlers._load_module

    def load(name: str) -> handlers.HandlerSpec:
        spec = real_load(name)
        if name == "list_groups":  # pretend it also says API_KEY = 3 (Metadata)
            return handlers.HandlerSpec(3, 0, 1, spec.handle, None, spec.module)
        return spec

    monkeypatch.setattr(handlers, "_registry", None)
    monkeypatch.setattr(handlers, "_load_module", load)
    with pytest.raises(handlers.HandlerLoadError, match="API key 3 claimed by"):
        handlers.registry()
