"""A bad value for any setting of any part stops `yak serve`: exit 2, one line naming the key.

Every setting in the one table (`yak.settings.BROKER_SETTINGS`: broker, storage, group,
transaction and cluster parts) is tried with values it must refuse, through the same
function `yak serve` runs before it opens a socket (`yak.broker.server.configure`: load the
settings, then build every part of the broker). A representative subset, including the one
that used to leave the broker running without a group coordinator, goes through the real
`yak serve` command as a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from yak.broker.broker import StartupError
from yak.broker.server import configure, serve
from yak.settings import BROKER_SETTINGS, Setting

# Settings whose values are free-form strings with a format: a value that breaks it.
_BAD_STRINGS = {
    "listeners": ["nonsense", "127.0.0.1:70000"],
    "advertised.listeners": ["nonsense"],
    "log.dirs": [""],
    "log.dir": [""],
    "process.roles": ["router"],
    "controller.quorum.voters": ["abc", "1@nohostport"],
    "controller.listener.names": ["a b"],
    "listener.security.protocol.map": ["PLAINTEXT", "PLAINTEXT:TELEPATHY"],
    "inter.broker.listener.name": ["a b"],
    "metadata.store": ["zk://127.0.0.1:2181", "etcd://", "etcd://127.0.0.1:99999",
                       "etcd://127.0.0.1:2379/a/b"],
    "broker.rack": ["", "\t"],
    "cordoned.log.dirs": ["relative/dir", "*,data"],
    "remote.storage.uri": ["s3://", "file://relative", "http://x/y", "s3://UPPER/p"],
    "remote.storage.access.key.id": ["", "a b"],
    "remote.storage.secret.access.key": ["", "a b"],
}


def bad_values(spec: Setting) -> list[str]:
    if spec.type in ("int", "short", "long"):
        out = ["abc", "1.5"]
        if spec.lo is not None:
            out.append(str(int(spec.lo) - 1))
        top = {"int": 2**31 - 1, "short": 32767, "long": 2**63 - 1}[spec.type]
        out.append(str((int(spec.hi) if spec.hi is not None else top) + 1))
        return out
    if spec.type == "boolean":
        return ["maybe", ""]
    if spec.type == "double":
        out = ["abc", "nan"]
        if spec.lo is not None:
            out.append(str(spec.lo - 1))
        if spec.hi is not None:
            out.append(str(spec.hi + 1))
        return out
    if spec.choices:
        return ["nonsense"]
    if spec.name in _BAD_STRINGS:
        return _BAD_STRINGS[spec.name]
    if spec.part == "security" and spec.type in ("string", "password", "list", "class"):
        # Paths, passwords, principal names: checked when security uses them, not here.
        return []
    raise AssertionError(
        f"setting {spec.name} accepts any string: give it a check in yak/settings.py"
        " (or a bad example here)"
    )


CASES = [(name, bad) for name, spec in sorted(BROKER_SETTINGS.items())
         for bad in bad_values(spec)]


def test_every_part_is_covered() -> None:
    parts = {BROKER_SETTINGS[name].part for name, _ in CASES}
    assert {"broker", "storage", "group", "txn", "cluster"} <= parts
    covered = {name for name, _ in CASES}
    assert {n for n, s in BROKER_SETTINGS.items() if s.part != "security"} <= covered


@pytest.mark.parametrize(("key", "value"), CASES)
def test_bad_value_stops_start_up_in_process(tmp_path: Path, key: str, value: str) -> None:
    with pytest.raises(StartupError) as ei:
        configure(data_dir=tmp_path / "d", listen="127.0.0.1:0", overrides=[f"{key}={value}"])
    message = str(ei.value)
    assert ei.value.exit_code == 2
    assert key in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        # Kafka checks these pairs when the group coordinator is built (one setting alone
        # cannot be wrong); the composition turns them into the same exit 2.
        (["group.consumer.heartbeat.interval.ms=60000"], "group.consumer.heartbeat.interval.ms"),
        (["group.min.session.timeout.ms=10000", "group.max.session.timeout.ms=9000"],
         "group.min.session.timeout.ms"),
        (["broker.id=1", "node.id=2"], "node.id"),
    ],
)
def test_inconsistent_settings_stop_start_up(tmp_path: Path, overrides: list[str],
                                             key: str) -> None:
    with pytest.raises(StartupError) as ei:
        configure(data_dir=tmp_path / "d", listen="127.0.0.1:0", overrides=overrides)
    assert ei.value.exit_code == 2
    assert key in str(ei.value) and "\n" not in str(ei.value)


def test_serve_prints_one_line_and_returns_2(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = serve(data_dir=str(tmp_path / "d"), listen="127.0.0.1:0",
                 overrides=["group.consumer.session.timeout.ms=abc"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "group.consumer.session.timeout.ms" in err


def _yak_serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "yak.cli.main", "serve", "--data-dir", str(tmp_path / "d"),
         "--listen", "127.0.0.1:0", "--http", "none", *args],
        capture_output=True, text=True, timeout=60,
    )


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("group.consumer.session.timeout.ms=abc", "group.consumer.session.timeout.ms"),
        ("group.consumer.heartbeat.interval.ms=60000", "group.consumer.heartbeat.interval.ms"),
        ("log.segment.bytes=10", "log.segment.bytes"),
        ("num.partitions=many", "num.partitions"),
    ],
)
def test_yak_serve_exits_2_with_one_line(tmp_path: Path, setting: str, key: str) -> None:
    r = _yak_serve(tmp_path, "--set", setting)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("yak: ") and key in r.stderr
    assert "Traceback" not in r.stderr and "ready" not in r.stdout


def test_a_part_that_cannot_be_built_stops_the_broker(tmp_path: Path) -> None:
    """Not configuration: a metadata file that is not JSON. One line, exit 1, no broker."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "__yak_metadata.json").write_text("{not json")
    r = _yak_serve(tmp_path)
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert "metadata store" in r.stderr and "Traceback" not in r.stderr
