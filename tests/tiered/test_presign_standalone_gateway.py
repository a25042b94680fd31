"""A standalone `yak gateway` signs presigned segment URLs when given the store
(`--set remote.storage.uri=...` and keys, the broker's setting names; issue 25).

Real parts only: SeaweedFS with an identity (it checks signatures), one broker process
with tiering on and no HTTP of its own, `yak gateway` as a subprocess against it, httpx as
the only client of the route and of the URLs.

- the route answers 200 with URLs that read the segment's bytes, with no credentials;
- without `--set` it answers 409 (40911) naming the way to give it a store;
- bad `--set` (a key it does not take, keys without a URI, a bad or `file://` URI) stops
  it at start-up with exit 2 and one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import obstore
import pytest
from confluent_kafka.admin import AdminClient

from tests.conftest import YakBroker
from tests.gateway.conftest import REPO, start_standalone
from tests.tiered.seaweed import SeaweedS3
from tests.tiered.test_presign import (
    KEY,
    SECRET,
    authed_s3_fixture,
    bucket_store,
    create_topic,
    manifest,
    produce,
    segments,
    store_uri,
    tiered_settings,
    wait_tiered,
)

pytestmark = pytest.mark.timeout(300)

PREFIX = "gw"
TOPIC = "standalone-presign"


s3 = authed_s3_fixture("seaweed-presign-gw")


@pytest.fixture(scope="module")
def broker(s3: SeaweedS3, tmp_path_factory: pytest.TempPathFactory) -> Iterator[YakBroker]:
    data = tmp_path_factory.mktemp("yak-presign-gw") / "data"
    data.mkdir()
    b = YakBroker(data, tiered_settings(s3, PREFIX)).start()
    create_topic(AdminClient({"bootstrap.servers": b.bootstrap}), TOPIC, 1)
    produce({"bootstrap.servers": b.bootstrap}, TOPIC, 1, 2500)
    wait_tiered(b, s3, PREFIX, TOPIC, 1, 1000)
    yield b
    try:
        b.stop(10)
    finally:
        b.kill()


def test_a_standalone_gateway_given_the_store_hands_out_urls(broker, s3, tmp_path) -> None:
    gw = start_standalone(tmp_path / "gw", broker.bootstrap,
                          "--set", f"remote.storage.uri={store_uri(s3, PREFIX)}",
                          "--set", f"remote.storage.access.key.id={KEY}",
                          "--set", f"remote.storage.secret.access.key={SECRET}")
    try:
        r = segments(gw.url, TOPIC, 0, from_=0, to=500, expires=60)
        assert r.status_code == 200, r.text
        ans = r.json()
        m = manifest(s3, PREFIX, TOPIC, 0)
        assert m is not None and ans["topic_id"] == m.topic_id and ans["expires_s"] == 60
        seg = ans["segments"][0]
        url = seg["urls"]["log"]
        assert "X-Amz-Signature=" in url and SECRET not in r.text
        key = f"{PREFIX}/{TOPIC}-{m.topic_id}/0/" + url.split(f"/{TOPIC}-{m.topic_id}/0/", 1)[
            1].split("?", 1)[0]
        want = bytes(obstore.get(bucket_store(s3), key).bytes())
        got = httpx.get(url, timeout=30)  # no credentials: the URL is the credential
        assert got.status_code == 200 and got.content == want and len(want) == seg["size"]
        assert "Traceback" not in gw.output()
    finally:
        gw.stop()


def test_a_standalone_gateway_without_a_store_says_how_to_give_it_one(broker,
                                                                     tmp_path) -> None:
    gw = start_standalone(tmp_path / "gw", broker.bootstrap)
    try:
        r = segments(gw.url, TOPIC, 0)
        assert r.status_code == 409 and r.json()["error_code"] == 40911, r.text
        assert "yak gateway --set remote.storage.uri=" in r.json()["message"]
    finally:
        gw.stop()


@pytest.mark.parametrize(("sets", "line"), [
    (["log.retention.ms=1"], "--set log.retention.ms: yak gateway takes only"),
    (["remote.storage.uri"], "expected KEY=VALUE"),
    ([f"remote.storage.access.key.id={KEY}", f"remote.storage.secret.access.key={SECRET}"],
     "need remote.storage.uri"),
    (["remote.storage.uri=s3:///nobucket"], "--set: "),
    (["remote.storage.uri=file:///tmp/x"], "presigned URLs need an s3:// store"),
    (["remote.storage.uri=s3://bkt?endpoint=http://127.0.0.1:1&region=us-east-1",
      f"remote.storage.access.key.id={KEY}"], "go together"),
])
def test_bad_store_settings_stop_it_at_start_up(sets: list[str], line: str) -> None:
    args = [a for s in sets for a in ("--set", s)]
    r = subprocess.run([sys.executable, "-c", "from yak.cli.main import app; app()",
                        "gateway", "--bootstrap", "127.0.0.1:1", "--http", "127.0.0.1:0",
                        *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip()
    assert line in err and "\n" not in err and "Traceback" not in err, err


def test_the_help_names_the_store_settings() -> None:
    r = subprocess.run([sys.executable, "-c", "from yak.cli.main import app; app()",
                        "gateway", "--help"], cwd=REPO, capture_output=True, text=True,
                       timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "--set" in r.stdout and "s3://BUCKET[/PREFIX]" in r.stdout
