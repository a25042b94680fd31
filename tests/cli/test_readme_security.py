"""The README's "A secured broker" example runs as written on a fresh broker (issue 26).

Its blocks are taken from README.md (the openssl block, server.properties, the commands)
and run by bash in an empty directory. The only changes: the ports 9092 and 9094 become
free ones, and `yak serve` gets `--http none` (the default 127.0.0.1:8080 may be taken).
kcat is Debian's if installed, else a stand-in written here with confluent-kafka that
takes the same -b/-X/-P/-C/-t/-e/-q options the example uses (-C with aiokafka: no
group, as kcat -C).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port

KCAT_STAND_IN = '''#!{python}
"""kcat's -P/-C as the README uses them, with the same -X settings."""
import sys
from confluent_kafka import Producer

args = sys.argv[1:]
conf, mode, topic, i = {{"log_level": 0}}, None, None, 0
while i < len(args):
    a = args[i]
    if a == "-b": conf["bootstrap.servers"] = args[i + 1]; i += 1
    elif a == "-X": k, _, v = args[i + 1].partition("="); conf[k] = v; i += 1
    elif a == "-t": topic = args[i + 1]; i += 1
    elif a in ("-P", "-C"): mode = a
    elif a not in ("-e", "-q"): sys.exit(f"kcat stand-in: unsupported option {{a}}")
    i += 1
if mode == "-P":
    p = Producer(conf)
    for line in sys.stdin.read().splitlines():
        p.produce(topic, line.encode())
    sys.exit(1 if p.flush(30) else 0)
# No group (librdkafka's consumer needs one, and under ACLs a group needs its own ACL).
import asyncio
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as TP
from yak.security.client import ClientSecurity

security = ClientSecurity.from_args(None, [f"{{k}}={{v}}" for k, v in conf.items()
                                           if k.startswith(("security.", "sasl.", "ssl."))])


parts = Producer(conf).list_topics(topic, timeout=10).topics[topic].partitions


async def main():
    c = AIOKafkaConsumer(bootstrap_servers=conf["bootstrap.servers"], group_id=None,
                         **security.aiokafka())
    await c.start()
    try:
        tps = [TP(topic, p) for p in sorted(parts)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        ends = await c.end_offsets(tps)
        while [tp for tp in tps if await c.position(tp) < ends[tp]]:
            for records in (await c.getmany(*tps, timeout_ms=1000)).values():
                for r in records:
                    print(r.value.decode())
    finally:
        await c.stop()

asyncio.run(main())
'''


def readme_blocks() -> tuple[str, str, str]:
    """(openssl block, server.properties, commands) of the README's security section."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## A secured broker"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    kinds = [k for k, _ in blocks]
    assert kinds == ["bash", "properties", "bash"], kinds
    return blocks[0][1], blocks[1][1], blocks[2][1]


@pytest.mark.skipif(not shutil.which("openssl"), reason="openssl is not installed")
def test_readme_security_example_runs_as_written(tmp_path: Path) -> None:
    certs, props, commands = readme_blocks()
    kafka, sasl = free_port(), free_port()

    def ports(s: str) -> str:
        return s.replace(":9092", f":{kafka}").replace(":9094", f":{sasl}")

    (tmp_path / "server.properties").write_text(ports(props))
    commands = ports(commands).replace("yak serve --config server.properties",
                                       "yak serve --config server.properties --http none")
    assert "--http none" in commands
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if not shutil.which("kcat"):
        kcat = bin_dir / "kcat"
        kcat.write_text(KCAT_STAND_IN.format(python=sys.executable))
        kcat.chmod(0o755)
    script = tmp_path / "example.sh"
    script.write_text("set -euo pipefail\n" + certs + commands)
    env = {**os.environ,
           "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # its own group: the broker goes with it
    try:
        out, err = proc.communicate(timeout=180)
        log = (tmp_path / "broker.log").read_text() if (tmp_path / "broker.log").exists() else ""
        assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}\nbroker log:\n{log[-3000:]}"
        # kcat -C and yak consume each print alice's message.
        assert out.splitlines()[-2:] == ["hello", "hello"], out
        assert "created topic orders" in out
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(Exception):
            proc.wait(10)
