"""A broker imports the security libraries only for the listeners it has.

`cryptography` (TLS key material, ~8 MB resident) is imported by a broker with a TLS
listener, scramp (SCRAM) on the first SCRAM login: a PLAINTEXT broker has neither. Each case
runs a real broker in a fresh interpreter (the test process has long imported both), lets a
real client (confluent-kafka) list its topics, then reports which modules are loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import REPO, free_port

from tests.security.conftest import Certs

WATCHED = ("cryptography", "yak.security.tls", "scramp")

_BROKER = """
import asyncio, json, sys
from confluent_kafka.admin import AdminClient
from yak.broker.server import configure, start_broker

async def main():
    running = await start_broker(configure(data_dir={data!r}, overrides={overrides!r}))
    try:
        admin = AdminClient({client!r})
        md = await asyncio.get_running_loop().run_in_executor(
            None, lambda: admin.list_topics(timeout=20))
        assert md.brokers, md
    finally:
        await running.stop()
    print(json.dumps({{m: m in sys.modules for m in {watched!r}}}))

asyncio.run(main())
"""


def _loaded(tmp_path: Path, overrides: list[str], client: dict[str, str]) -> dict[str, bool]:
    code = _BROKER.format(data=str(tmp_path / "data"), overrides=overrides, client=client,
                          watched=WATCHED)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_plaintext_broker_imports_no_tls_or_scram(tmp_path: Path) -> None:
    port = free_port()
    loaded = _loaded(tmp_path, [f"listeners=PLAINTEXT://127.0.0.1:{port}"],
                     {"bootstrap.servers": f"127.0.0.1:{port}"})
    assert loaded == {"cryptography": False, "yak.security.tls": False, "scramp": False}


def test_tls_listener_loads_cryptography(tmp_path: Path, certs: Certs) -> None:
    plain, tls = free_port(), free_port()
    loaded = _loaded(tmp_path, [
        f"listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={certs.broker}",
    ], {"bootstrap.servers": f"127.0.0.1:{tls}", "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca)})
    assert loaded == {"cryptography": True, "yak.security.tls": True, "scramp": False}
