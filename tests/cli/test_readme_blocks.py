"""The README's quick start, kcat, Python and gateway blocks run as written (issue 26).

The blocks are taken from README.md ("Quick start" and "The gateway" sections) and run in
order by one bash script in an empty directory against the broker the quick start starts
(the security blocks have their own test, tests/cli/test_readme_security.py). The only
changes: the ports 9092, 8080 and 9095 become free ones; `make install` is left out (the
test runs in the installed venv); `yak serve` gets `--http` with the free port (its default
is 127.0.0.1:8080) and its output goes to broker.log, and the script waits for "Yak broker
ready" before the next command, as a reader waits for that line; $YAK_BOOTSTRAP stands for
the yak commands' default 127.0.0.1:9092;
Python blocks run with this interpreter through a heredoc. Each block's visible result is
checked: the consumed lines, the REST, WebSocket and gRPC answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port

pytestmark = pytest.mark.slow


def section_blocks(title: str) -> list[tuple[str, str]]:
    """(language, text) of every fenced block of the README section `## {title}`."""
    text = (REPO / "README.md").read_text()
    section = text[text.index(f"\n## {title}"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def script_for(blocks: list[tuple[str, str]], names: list[str]) -> str:
    parts = []
    for name, (lang, body) in zip(names, blocks, strict=True):
        parts.append(f"echo '=== {name}'")
        if lang == "python":
            parts.append(f"python - <<'README_PY'\n{body}README_PY")
        else:
            assert lang == "bash", lang
            parts.append(body)
    return "\n".join(parts) + "\n"


def split_output(out: str) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("=== "):
            current = line[4:]
            result[current] = []
        elif current is not None:
            result[current].append(line)
    return result


@pytest.mark.skipif(not shutil.which("curl"), reason="curl is not installed")
@pytest.mark.skipif(not shutil.which("kcat"), reason="kcat is not installed")
def test_readme_quick_start_and_gateway_blocks_run_as_written(tmp_path: Path) -> None:
    quick = section_blocks("Quick start")
    gateway = section_blocks("The gateway")
    assert [k for k, _ in quick] == ["bash", "bash", "python"], quick
    assert [k for k, _ in gateway] == ["bash", "python", "python"], gateway
    names = ["quick start", "kcat", "python", "rest", "websocket", "grpc"]
    script = script_for(quick + gateway, names)

    kafka, http, grpc_port = free_port(), free_port(), free_port()
    script = (script.replace(":9092", f":{kafka}").replace(":8080", f":{http}")
              .replace(":9095", f":{grpc_port}"))
    lines = script.splitlines()
    assert lines[1].startswith("make install"), lines[1]
    del lines[1]
    serve = next(i for i, line in enumerate(lines) if line.startswith("yak serve "))
    assert lines[serve].endswith(" &"), lines[serve]
    lines[serve] = lines[serve][:-2] + f" --http 127.0.0.1:{http} > broker.log 2>&1 &"
    lines.insert(serve + 1, 'until grep -qs "Yak broker ready" broker.log; do sleep 0.2; done')
    (tmp_path / "readme.sh").write_text("set -euo pipefail\n" + "\n".join(lines) + "\n")

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    env["YAK_BOOTSTRAP"] = f"127.0.0.1:{kafka}"  # the yak commands' default, 127.0.0.1:9092
    proc = subprocess.Popen(["bash", "readme.sh"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # its own group: the broker goes with it
    try:
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            out, err = proc.communicate(timeout=10)
        log = (tmp_path / "broker.log").read_text() if (tmp_path / "broker.log").exists() else ""
        context = f"stdout:\n{out}\nstderr:\n{err}\nbroker log:\n{log[-3000:]}"
        assert proc.returncode == 0, context
        got = split_output(out)
        assert list(got) == names, context

        # Quick start: the two lines, with their keys and header, come back as JSON.
        consumed = [json.loads(line) for line in got["quick start"] if line.startswith("{")]
        assert sorted((m["key"], m["value"]) for m in consumed) == [
            ("alice", "hello"), ("bob", "hi")], context
        assert all(m["topic"] == "greetings" for m in consumed), context
        assert "source" in json.dumps([m["headers"] for m in consumed]), context
        assert "created topic greetings" in got["quick start"], context
        described = "\n".join(got["quick start"])
        assert "Topic: greetings  Partitions: 3" in described, context
        assert "retention.ms=86400000" in described, context

        # kcat: the metadata lists the topic; -C reads the quick start's lines and kcat's.
        assert any('topic "greetings" with 3 partitions' in line for line in got["kcat"]), context
        for expected in ("alice hello", "bob hi", " one", " two"):  # -f '%k %s': no key
            assert expected in got["kcat"], context

        # Python: the consumer in group billing gets the produced order.
        assert got["python"] == ["b'order-1' b'{\"total\": 12}'"], context

        # REST: one record written, then the topics listed.
        written, topics = got["rest"]
        offsets = json.loads(written)["offsets"]
        assert len(offsets) == 1 and offsets[0]["error_code"] is None, context
        assert {"greetings", "orders"} <= set(json.loads(topics)), context

        # WebSocket: the produce is acknowledged, the subscription reads it back.
        produced = got["websocket"][0]
        assert produced.startswith("{'type': 'produced', 'id': 1, 'topic': 'greetings', "), context
        messages = got["websocket"][1:]
        assert messages[-1].endswith(" dave hello"), context
        assert any(m.endswith(" alice hello") for m in messages), context

        # gRPC: the record is written (error code 0) and the topics listed.
        result, listed = got["grpc"]
        assert re.fullmatch(r"\[\(\d, \d+, 0\)\]", result), context
        assert "'greetings': 3" in listed and "'orders': 3" in listed, context
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(Exception):
            proc.wait(10)
