"""`yak schema ...` against the registry of a real `yak serve --http` (subprocess CLI runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, Served


def yak(served: Served, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from yak.cli.main import app; app()", "schema", *args,
         "--registry", served.url],
        input=stdin, capture_output=True, text=True, timeout=60, cwd=REPO)


@pytest.mark.slow
def test_register_list_get_compat_delete(served: Served, tmp_path: Path) -> None:
    v1 = {"type": "record", "name": "Cli", "fields": [{"name": "a", "type": "int"}]}
    v2 = {**v1, "fields": [*v1["fields"], {"name": "b", "type": "string", "default": ""}]}
    bad = {**v1, "fields": [{"name": "c", "type": "int"}]}
    f1, f2, fb = tmp_path / "v1.avsc", tmp_path / "v2.avsc", tmp_path / "bad.avsc"
    f1.write_text(json.dumps(v1))
    f2.write_text(json.dumps(v2))
    fb.write_text(json.dumps(bad))

    r = yak(served, "register", "cli-value", str(f1))
    assert r.returncode == 0, r.stderr
    first_id = int(r.stdout.split()[1])
    r = yak(served, "register", "cli-value", "-", stdin=json.dumps(v1))
    assert r.returncode == 0 and int(r.stdout.split()[1]) == first_id  # same schema, same id
    assert yak(served, "register", "cli-value", str(f2)).returncode == 0

    r = yak(served, "list", "--format", "json", "--prefix", "cli-")
    assert json.loads(r.stdout) == [{"subject": "cli-value", "version": 2,
                                     "id": first_id + 1, "type": "AVRO"}]
    r = yak(served, "get", "cli-value", "--version", "1")
    assert r.returncode == 0 and json.loads(r.stdout) == v1
    r = yak(served, "get", "--id", str(first_id + 1))
    assert json.loads(r.stdout)["fields"][1]["name"] == "b"

    r = yak(served, "compat", "cli-value")
    assert r.stdout.strip() == "cli-value: BACKWARD"
    r = yak(served, "compat", "cli-value", "--check", str(fb))
    assert r.returncode == 1 and "READER_FIELD_MISSING_DEFAULT_VALUE" in r.stderr
    r = yak(served, "register", "cli-value", str(fb))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "(error 409)" in r.stderr
    assert yak(served, "compat", "cli-value", "--set", "none").returncode == 0
    assert yak(served, "compat", "cli-value").stdout.strip() == "cli-value: NONE"

    r = yak(served, "delete", "cli-value", "--version", "1")
    assert r.returncode == 0 and "version(s) 1" in r.stdout
    r = yak(served, "delete", "cli-value")
    assert r.returncode == 0 and "version(s) 2" in r.stdout
    r = yak(served, "get", "cli-value")
    assert r.returncode == 1 and "(error 40401)" in r.stderr


def test_usage_errors_exit_2_and_unreachable_exits_1(served: Served, tmp_path: Path) -> None:
    r = yak(served, "register", "x-value", str(tmp_path / "missing.avsc"))
    assert r.returncode == 2 and "not found" in r.stderr
    r = yak(served, "compat", "x-value", "--set", "SIDEWAYS")
    assert r.returncode == 2
    r = yak(served, "get")
    assert r.returncode == 2
    r = subprocess.run([sys.executable, "-c", "from yak.cli.main import app; app()", "schema",
                        "list", "--registry", "http://127.0.0.1:9", "--timeout", "2"],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 1 and "unreachable" in r.stderr and r.stderr.count("\n") == 1
