"""Kafka's checkpoint files: a version line, a count line, then one entry per line.

They are rewritten whole (write a temp file, fsync, rename, fsync the directory), so a crash
leaves either the old or the new file, never a torn one: recovery trusts them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_FILE = "replication-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
CLEANER_OFFSET_FILE = "cleaner-offset-checkpoint"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, sync: bool = True) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def _read_lines(path: str) -> list[str] | None:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    if len(lines) < 2 or lines[0].strip() != "0":
        raise ValueError(f"{path}: unsupported checkpoint version")
    count = int(lines[1])
    entries = [ln for ln in lines[2:] if ln.strip()]
    if len(entries) != count:
        raise ValueError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


def write_offsets(path: str, offsets: dict[tuple[str, int], int]) -> None:
    lines = ["0", str(len(offsets))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())]
    write_atomic(path, ("\n".join(lines) + "\n").encode())


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    """topic partition offset lines; a missing or unreadable file reads as empty
    (recovery then starts from offset 0, which is safe, just slower)."""
    try:
        entries = _read_lines(path)
    except (ValueError, OSError):
        return {}
    out: dict[tuple[str, int], int] = {}
    for ln in entries or []:
        topic, part, off = ln.rsplit(" ", 2)
        out[(topic, int(part))] = int(off)
    return out


def write_epochs(path: str, entries: Iterable[tuple[int, int]], sync: bool = True) -> None:
    items = list(entries)
    lines = ["0", str(len(items))] + [f"{e} {o}" for e, o in items]
    write_atomic(path, ("\n".join(lines) + "\n").encode(), sync=sync)


def read_epochs(path: str) -> list[tuple[int, int]]:
    try:
        entries = _read_lines(path)
    except (ValueError, OSError):
        return []
    out = []
    for ln in entries or []:
        e, o = ln.split()
        out.append((int(e), int(o)))
    return out


def remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
