"""One background process of the local cluster (etcd, a broker, the object store), with the
fault hooks the reliability tests and the chaos tool use: SIGKILL, SIGTERM with a bounded
wait, SIGSTOP / SIGCONT. It works both on a child this Python process started and on a pid
read back from `cluster.json` by a later `yak cluster` command (yak/devcluster/local.py),
guarding against pid reuse by comparing the command line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ClusterStateError", "ManagedProcess"]


class ClusterStateError(Exception):
    """The cluster directory or request is unusable; str(e) is one line."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (an exited child not yet reaped) counts as gone, but only once every thread
    # has exited: a multi-threaded process (etcd is Go) shows its main thread as a zombie
    # while the others are still exiting, and its parent cannot reap it yet.
    with contextlib.suppress(OSError, IndexError):
        if (Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
                and len(os.listdir(f"/proc/{pid}/task")) <= 1):
            return False
    return True


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


@dataclass
class ManagedProcess:
    """One background process of the cluster, with fault hooks. Works both on a child this
    Python process started and on a pid read back from cluster.json (another invocation)."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    ports: list[int] = field(default_factory=list)
    pid: int = 0
    cwd: Path | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> ManagedProcess:
        if self.is_alive():
            raise ClusterStateError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **(self.env or {}))
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=env, start_new_session=True, cwd=self.cwd)
        self.pid = self._proc.pid
        return self

    def owns_pid(self) -> bool:
        """The recorded pid still runs *this* command (guards against pid reuse)."""
        if self._proc is not None:
            return self._proc.poll() is None  # also reaps it once it has exited
        if not self.pid or not _pid_alive(self.pid):
            return False
        return _cmdline(self.pid) == self.argv

    def _gone(self) -> bool:
        """Exited for good (a zombie counts as gone). Unlike owns_pid() this does not look at
        the command line, which the kernel empties while a process is still exiting."""
        if self._proc is not None:
            return self._proc.poll() is not None
        return not self.pid or not _pid_alive(self.pid)

    def is_alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self.owns_pid()

    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def signal(self, sig: int) -> None:
        if not self.owns_pid():
            raise ClusterStateError(f"{self.name} is not running")
        os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL (kill -9): no shutdown of any kind. Waits (bounded) until it is gone."""
        if self.owns_pid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)  # a stopped process dies as well
                os.kill(self.pid, signal.SIGKILL)
        self.wait(10.0)

    def terminate(self, timeout: float = 30.0) -> bool:
        """SIGTERM and wait up to `timeout`; SIGKILL after that. True if it exited by itself."""
        if not self.owns_pid():
            return True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGTERM)
        if self.wait(timeout):
            return True
        self.kill()
        return False

    def pause(self) -> None:
        """SIGSTOP: the process freezes (sockets stay open, nothing is answered)."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def wait(self, timeout: float) -> bool:
        """Until the process has exited; False after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None:
                try:
                    self._proc.wait(max(0.0, min(0.1, deadline - time.monotonic())))
                    return True
                except subprocess.TimeoutExpired:
                    continue
            if self._gone():
                return True
            time.sleep(0.05)
        return self._gone()

    def wait_ready(self, ready: Callable[[], bool], timeout: float) -> None:
        """Poll `ready()` until it holds; raise ClusterStateError (with the log's tail) if
        the process exits or `timeout` passes first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if ready():
                    return
            if not self.is_alive():
                raise ClusterStateError(
                    f"{self.name} exited (rc={self.returncode()}) before it was ready:"
                    f" {self.log_tail(1)}")
            time.sleep(0.05)
        raise ClusterStateError(f"{self.name} not ready within {timeout:g} s:"
                                f" {self.log_tail(1)}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "argv": self.argv, "log": str(self.log_path),
                "ports": self.ports, "pid": self.pid}

    @classmethod
    def from_json(cls, d: dict[str, object]) -> ManagedProcess:
        return cls(name=str(d["name"]), argv=[str(a) for a in d["argv"]],  # type: ignore[attr-defined]
                   log_path=Path(str(d["log"])), ports=[int(p) for p in d["ports"]],  # type: ignore[attr-defined]
                   pid=int(d["pid"]))  # type: ignore[call-overload]
