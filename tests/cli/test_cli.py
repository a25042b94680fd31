"""The `yak` command end to end, as a subprocess against a real broker subprocess."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

YAK = [sys.executable, "-m", "yak.cli.main"]


def yak(*args: str, stdin: str | None = None, timeout: float = 60, env: dict | None = None):
    return subprocess.run(
        [*YAK, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def ok(*args: str, **kw) -> str:
    r = yak(*args, **kw)
    assert r.returncode == 0, f"yak {' '.join(args)} failed: {r.stderr}"
    return r.stdout


def one_line_error(r: subprocess.CompletedProcess, *fragments: str) -> None:
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("yak: error: ")
    assert "Traceback" not in r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_topic_lifecycle(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    out = ok("topic", "create", "events", "-p", "3", "-c", "retention.ms=3600000", *b)
    assert "created topic events" in out
    ok("topic", "create", "other", *b)
    r = yak("topic", "create", "events", *b)
    one_line_error(r, "events", "TOPIC_ALREADY_EXISTS")
    ok("topic", "create", "events", "--if-not-exists", *b)

    listed = json.loads(ok("topic", "list", "--format", "json", *b))
    assert {"name": "events", "partitions": 3, "replication_factor": 1} in listed
    assert "other" in {t["name"] for t in listed}
    table = ok("topic", "list", *b)
    assert "events" in table and "PARTITIONS" in table

    desc = json.loads(ok("topic", "describe", "events", "--format", "json", *b))
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == 1 and p["isr"] == [1] for p in desc["partitions"])
    assert desc["configs"] == {"retention.ms": {"value": "3600000", "source": "topic"}}
    text = ok("topic", "describe", "events", *b)
    assert "retention.ms=3600000" in text and "Partitions: 3" in text

    ok(
        "topic",
        "alter-config",
        "events",
        "--set",
        "retention.ms=7200000",
        "--set",
        "cleanup.policy=compact",
        *b,
    )
    desc = json.loads(ok("topic", "describe", "events", "--format", "json", *b))
    assert desc["configs"]["retention.ms"]["value"] == "7200000"
    assert desc["configs"]["cleanup.policy"]["value"] == "compact"
    ok("topic", "alter-config", "events", "--delete", "cleanup.policy", *b)
    desc = json.loads(ok("topic", "describe", "events", "--format", "json", "--all-configs", *b))
    assert desc["configs"]["cleanup.policy"] == {"value": "delete", "source": "default"}
    r = yak("topic", "alter-config", "events", "--set", "retention.ms=soon", *b)
    one_line_error(r, "retention.ms")

    ok("topic", "add-partitions", "events", "--total", "5", *b)
    assert (
        len(json.loads(ok("topic", "describe", "events", "--format", "json", *b))["partitions"])
        == 5
    )
    one_line_error(
        yak("topic", "add-partitions", "events", "--total", "2", *b), "INVALID_PARTITIONS"
    )

    ok("topic", "delete", "events", *b)
    assert "events" not in {
        t["name"] for t in json.loads(ok("topic", "list", "--format", "json", *b))
    }
    one_line_error(yak("topic", "describe", "events", *b), "'events' does not exist")
    one_line_error(yak("topic", "delete", "events", *b), "'events' does not exist")


def test_produce_then_consume_json_with_keys_and_headers(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    ok("topic", "create", "t", "-p", "2", *b)
    lines = "k1:hello\nk2:wörld\nno-key-line\n:empty-key\n"
    r = yak(
        "produce", "t", "--key-separator", ":", "--header", "src=test", "-H", "n=1", *b, stdin=lines
    )
    assert r.returncode == 0, r.stderr
    assert "produced 4 messages" in r.stderr

    out = ok("consume", "t", "--from-beginning", "-n", "4", "--format", "json", *b, timeout=60)
    msgs = [json.loads(line) for line in out.splitlines()]
    assert len(msgs) == 4
    by_value = {m["value"]: m for m in msgs}
    assert set(by_value) == {"hello", "wörld", "no-key-line", "empty-key"}
    assert by_value["hello"]["key"] == "k1"
    assert by_value["wörld"]["key"] == "k2"
    assert by_value["no-key-line"]["key"] is None
    assert by_value["empty-key"]["key"] == ""
    for m in msgs:
        assert m["topic"] == "t"
        assert m["headers"] == [{"key": "src", "value": "test"}, {"key": "n", "value": "1"}]
        assert m["timestamp_type"] == "CreateTime" and m["timestamp"] > 0
    # Same key -> same partition (murmur2, as Java clients do); offsets per partition from 0.
    offsets: dict[int, list[int]] = {}
    for m in msgs:
        offsets.setdefault(m["partition"], []).append(m["offset"])
    assert all(sorted(o) == list(range(len(o))) for o in offsets.values())


def test_produce_to_partition_and_consume_offsets_text(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    ok("topic", "create", "p", "-p", "3", *b)
    data = "".join(f"line-{i}\n" for i in range(10))
    ok("produce", "p", "--partition", "2", "-q", *b, stdin=data)
    out = ok("consume", "p", "--partition", "2", "--offset", "7", "-n", "3", *b)
    assert out.splitlines() == ["line-7", "line-8", "line-9"]
    out = ok("consume", "p", "--partition", "2", "--from-beginning", "-n", "2", "--print-key", *b)
    assert out.splitlines() == ["\tline-0", "\tline-1"]
    # Nothing on partition 0: --idle-timeout ends the wait.
    t0 = time.monotonic()
    out = ok("consume", "p", "--partition", "0", "--from-beginning", "--idle-timeout", "1", *b)
    assert out == "" and time.monotonic() - t0 < 20
    one_line_error(yak("consume", "p", "--partition", "9", *b), "no partition 9")
    one_line_error(yak("produce", "p", "--partition", "9", *b, stdin="x\n"), "no partition 9")


def test_unknown_topic_errors(broker_factory) -> None:
    broker = broker_factory(**{"auto.create.topics.enable": "false"})
    b = ["--bootstrap", broker.bootstrap]
    one_line_error(yak("consume", "missing", "-n", "1", *b), "'missing' does not exist")
    one_line_error(yak("produce", "missing", *b, stdin="x\n"), "'missing' does not exist")
    one_line_error(
        yak("topic", "alter-config", "missing", "--set", "retention.ms=1", *b), "does not exist"
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


UNREACHABLE_COMMANDS = [
    ["topic", "list"],
    ["topic", "create", "x"],
    ["topic", "describe", "x"],
    ["topic", "delete", "x"],
    ["produce", "x"],
    ["consume", "x", "-n", "1"],
]


def _started_and_exited(env: dict[str, str]) -> float:
    """Seconds for the same six CLI processes, started at once, to start and exit with
    nothing to wait for (`--help`): the part of the test's time that is the machine's
    load, not the commands' waiting (19 s for the six under a load of 10, 2026-11-27)."""
    t0 = time.monotonic()
    procs = [subprocess.Popen([*YAK, *args, "--help"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env)
             for args in UNREACHABLE_COMMANDS]
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    return time.monotonic() - t0


def test_unreachable_broker_fails_fast_with_one_line() -> None:
    port = _closed_port()
    env = {**os.environ, "YAK_BOOTSTRAP": f"127.0.0.1:{port}"}
    baseline = _started_and_exited(env)
    t0 = time.monotonic()
    # All at once: each waits out its own 2 s timeout.
    procs = [
        subprocess.Popen(
            [*YAK, *args, "--timeout", "2"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for args in UNREACHABLE_COMMANDS
    ]
    for args, proc in zip(UNREACHABLE_COMMANDS, procs, strict=True):
        out, err = proc.communicate("x\n", timeout=30)
        r = subprocess.CompletedProcess(args, proc.returncode, out, err)
        one_line_error(r, f"127.0.0.1:{port}", "unreachable")
        assert r.returncode == 1
    elapsed = time.monotonic() - t0
    # Each waits its 2 s --timeout on top of starting (measured quiet: 6.1 s against a
    # baseline of 4.5-5.0 s); a command that hung on the broker would wait librdkafka's
    # own timeouts (60 s). The load slows both runs alike, hence the factor.
    assert elapsed < 1.5 * baseline + 4, (elapsed, baseline)


def test_bad_options_are_usage_errors() -> None:
    r = yak("topic", "list", "--no-such-option")
    one_line_error(r, "--no-such-option")
    assert r.returncode == 2
    r = yak("topic", "create", "x", "--config", "novalue", "--bootstrap", "127.0.0.1:1")
    one_line_error(r, "novalue")
    assert r.returncode == 2
    r = yak("consume", "x", "--format", "xml", "--bootstrap", "127.0.0.1:1")
    one_line_error(r, "xml")
    assert r.returncode == 2
    r = yak("produce")
    one_line_error(r, "topic")
    assert r.returncode == 2


def test_serve_rejects_bad_settings_with_exit_2(tmp_path) -> None:
    r = yak(
        "serve",
        "--data-dir",
        str(tmp_path / "d"),
        "--listen",
        "127.0.0.1:0",
        "--set",
        "num.partitions=lots",
    )
    assert r.returncode == 2
    assert "num.partitions" in r.stderr
    assert "Traceback" not in r.stderr
    cfg = tmp_path / "server.properties"
    cfg.write_text("log.retention.ms=never\n")
    r = yak("serve", "--config", str(cfg), "--data-dir", str(tmp_path / "d"))
    assert r.returncode == 2 and "log.retention.ms" in r.stderr
