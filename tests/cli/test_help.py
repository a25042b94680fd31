"""Every `yak` command's `--help` renders (issue 26), names only commands that exist, and
`yak --version` prints the version."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import yak
from tests.cli.test_cli import yak as run_yak
from yak.cli.main import app

ROOT = typer.main.get_command(app)


def walk(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    if hasattr(cmd, "commands"):  # a group (typer's own click)
        for name, sub in sorted(cmd.commands.items()):
            yield from walk(sub, (*path, name))


COMMANDS = list(walk(ROOT))
NAMES = {name for path in COMMANDS for name in path}


def resolve(words: list[str]) -> bool:
    """True if `words` (after "yak") start with a command path that exists."""
    cmd: Any = ROOT
    for w in words:
        if not hasattr(cmd, "commands") or w.startswith("-") or w.isupper():
            return True  # options and placeholders follow the command
        if w not in cmd.commands:
            return False
        cmd = cmd.commands[w]
    return True


def test_the_walk_finds_every_command() -> None:
    assert len(COMMANDS) > 40
    for path in [("serve",), ("txn", "abort"), ("cluster", "up"), ("quota", "list")]:
        assert path in COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(("yak", *p)))
def test_help_renders(path: tuple[str, ...]) -> None:
    r = CliRunner().invoke(app, [*path, "--help"], prog_name="yak",
                           env={"COLUMNS": "120", "TERM": "dumb"})
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 0, r.output
    assert "Usage: yak" in r.output
    # Commands a help text points to (`yak txn abort`, `describe-producers`) exist.
    cmd = ROOT
    for name in path:
        cmd = cmd.commands[name]
    texts = [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]
    for quoted in re.findall(r"`([^`]+)`", " ".join(texts)):
        words = quoted.split()
        if words[0] == "yak":
            assert resolve(words[1:]), f"{' '.join(path)} --help names `{quoted}`"
        elif re.fullmatch(r"[a-z]+(-[a-z]+)+", quoted):
            assert quoted in NAMES, f"{' '.join(path)} --help names `{quoted}`"


def test_serve_help_as_a_user_runs_it() -> None:
    r = run_yak("serve", "--help", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "MarkupError" not in r.stderr and "Traceback" not in r.stderr
    assert "etcd://HOST:PORT[,HOST:PORT...][/NAME]" in r.stdout


def test_txn_abort_help_names_no_missing_command() -> None:
    r = run_yak("txn", "abort", "--help", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "describe-producers" not in r.stdout


def test_version() -> None:
    for flag in ("--version", "-V"):
        r = run_yak(flag)
        assert r.returncode == 0, r.stderr
        assert r.stdout == f"yak {yak.__version__}\n"
    r = run_yak("--help")
    assert "--version" in r.stdout and r.returncode == 0
