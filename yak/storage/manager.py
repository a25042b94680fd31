"""LogManager: every partition log of one data directory, its checkpoints and its background work.

Start-up is where durability is decided: with the clean-shutdown marker present nothing is
scanned (start-up time does not grow with data size); without it, each log recovers from its
recovery point (see yak.storage.loader). The marker is removed as soon as the logs are
loaded, so a crash at any later moment is detected as unclean.

The recovery point moves when a segment rolls: the log hands the rolled segment to this
manager's flusher thread (`RollFlusher`), which fsyncs it with its indexes off the append path
and rewrites `recovery-point-offset-checkpoint`, so an unclean restart scans only what was
written since the last roll.

Logs load in parallel, as Kafka's `num.recovery.threads.per.data.dir`: a pool of
`recovery_threads` threads opens (and after a crash recovers) one partition log each, since
recovery waits on the disk more than on the interpreter and one slow log (a long unflushed
tail, a contended disk) must not hold up the others. Each log touches only its own
directory; the manager adopts the results on the calling thread. The broker runs `startup`
off its event loop. A log that fails to load fails the start-up as before: every loaded log
is closed and the error of the first failed directory (in name order) is raised, the others
logged.

The directory is this manager's alone while it runs: `startup` takes an exclusive `flock`
on `<data dir>/.lock` (Kafka's `.lock` file in each log dir) and `shutdown`/`crash` release
it; a process that dies releases it with its descriptors. A second broker, or a second
LogManager in the same process, would otherwise append to and recover the same segment
files behind the first one's back.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from yak.errors import InvalidTopicError, KafkaStorageError
from yak.storage import checkpoint
from yak.storage.config import LogConfig
from yak.storage.log import PartitionLog, now_ms

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_MS = 5000
CLEANER_BACKOFF_S = 1.0
LOCK_FILE = ".lock"


class LogDirInUseError(Exception):
    """Another LogManager (in this or another process) holds the data directory's lock."""


class DataDirLock:
    """An exclusive, non-blocking `flock` on `<dir>/.lock`, held from `acquire` to `release`.

    flock (not fcntl's POSIX locks) because its lock belongs to the open file, so two
    managers in one process exclude each other too. The holder's pid is written into the
    file only so the refusal can name it; the file is never removed (unlinking a lock file
    races with the next process opening it).
    """

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LOCK_FILE)
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            by = f" (pid {holder})" if holder.isdigit() else ""
            raise LogDirInUseError(
                f"data directory {os.path.dirname(self.path)} is in use by another broker"
                f"{by}: cannot lock {self.path}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor of the open file unlocks it
            self._fd = None


class RollFlusher:
    """One thread that flushes rolled segments (Kafka's `flush-log` task scheduled by
    Log.roll), then writes the checkpoints once for everything it flushed.

    Rolls only enqueue (log, offset); several rolls of one log before the thread gets to it
    coalesce into one `flush_upto` of the highest offset. Errors are logged and left for
    `maintenance` to retry (the segments stay marked unflushed).
    """

    def __init__(self, after_batch: Callable[[], None]) -> None:
        self._after_batch = after_batch
        self._cond = threading.Condition()
        self._pending: dict[PartitionLog, int] = {}
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="yak-log-flusher", daemon=True)
        self._thread.start()

    def submit(self, plog: PartitionLog, offset: int) -> None:
        with self._cond:
            if self._thread is None or self._stopping:
                return  # not running: maintenance flushes rolled segments instead
            if offset > self._pending.get(plog, -1):
                self._pending[plog] = offset
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Until every submitted flush is done (tests, benchmarks); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def stop(self) -> None:
        """Drop what is queued (a crash would; a clean close flushes everything itself) and
        wait for a flush in progress, so no fsync runs on a closed descriptor."""
        with self._cond:
            self._stopping = True
            self._pending.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._stopping)
                if self._stopping:
                    self._cond.notify_all()
                    return
                work, self._pending = self._pending, {}
                self._busy = True
            try:
                for plog, offset in work.items():
                    try:
                        plog.flush_upto(offset)
                    except Exception as e:
                        if plog.deleted:
                            continue
                        log.error("flush of rolled segments of %s-%d up to %d failed: %s",
                                  plog.topic, plog.partition, offset, e)
                try:
                    self._after_batch()
                except Exception:
                    log.exception("writing checkpoints after a roll flush failed")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


def parse_log_dir_name(name: str) -> tuple[str, int] | None:
    """`<topic>-<partition>`, split at the last '-' (topic names may contain '-')."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


class LogManager:
    def __init__(
        self,
        data_dir: str,
        default_config: LogConfig | None = None,
        *,
        start_cleaner: bool = True,
        recovery_threads: int = 1,
    ) -> None:
        self.data_dir = os.path.abspath(data_dir)
        # Kafka's num.recovery.threads.per.data.dir (the broker passes the setting; 1: the
        # logs load one after another on the calling thread).
        self.recovery_threads = max(1, recovery_threads)
        self.default_config = default_config or LogConfig()
        self.start_cleaner = start_cleaner
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._lock = threading.RLock()
        self._last_checkpoint_ms = 0
        self._last_expiry_ms = 0
        self._written_checkpoints: dict[str, dict[tuple[str, int], int]] = {}
        self._checkpoint_lock = threading.Lock()
        self.flusher = RollFlusher(self.checkpoint)
        self._cleaner_stop = threading.Event()
        self._cleaner_thread: threading.Thread | None = None
        self.cleaner_stats: list = []  # recent CleanStats, newest last (bounded)
        self.was_clean_shutdown = False
        self.load_seconds = 0.0  # how long the last startup took to load every log
        self.started = False
        self._dir_lock = DataDirLock(self.data_dir)

    # --- life cycle -------------------------------------------------------------------------

    def startup(self, configs: dict[str, LogConfig] | None = None) -> None:
        """Load every log. `configs` maps topic -> its config (topic configs live in the
        cluster metadata, not in the log directory). LogDirInUseError if another manager
        holds the directory."""
        os.makedirs(self.data_dir, exist_ok=True)
        self._dir_lock.acquire()
        try:
            self._load(configs or {})
        except BaseException:
            self._stop_cleaner()
            self.flusher.stop()
            for plog in self._logs.values():
                plog.close_without_flush()
            self._logs.clear()
            self._dir_lock.release()
            raise

    def _load(self, configs: dict[str, LogConfig]) -> None:
        t0 = time.monotonic()
        marker = os.path.join(self.data_dir, checkpoint.CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        self.was_clean_shutdown = clean
        rp = checkpoint.read_offsets(self._path(checkpoint.RECOVERY_POINT_FILE))
        hw = checkpoint.read_offsets(self._path(checkpoint.REPLICATION_OFFSET_FILE))
        ls = checkpoint.read_offsets(self._path(checkpoint.LOG_START_OFFSET_FILE))
        cl = checkpoint.read_offsets(self._path(checkpoint.CLEANER_OFFSET_FILE))
        found: list[tuple[str, tuple[str, int]]] = []
        for name in sorted(os.listdir(self.data_dir)):
            path = os.path.join(self.data_dir, name)
            if not os.path.isdir(path):
                continue
            if name.endswith("-delete"):
                shutil.rmtree(path, ignore_errors=True)
                continue
            parsed = parse_log_dir_name(name)
            if parsed is None:
                continue
            found.append((path, parsed))

        def open_log(path: str, parsed: tuple[str, int]) -> PartitionLog:
            topic, part = parsed
            plog = PartitionLog(
                path,
                topic,
                part,
                configs.get(topic, self.default_config),
                recovery_point=rp.get(parsed, 0),
                log_start_offset=ls.get(parsed, 0),
                high_watermark=hw.get(parsed, 0),
                clean=clean,
                on_roll=self.flusher.submit,
                on_truncate=self._after_truncation,
            )
            plog.first_dirty_offset = cl.get(parsed, -1)
            return plog

        self._load_all(found, open_log)
        self.load_seconds = time.monotonic() - t0
        if clean:
            os.remove(marker)
            checkpoint.fsync_dir(self.data_dir)
        elif self._logs:
            stats = [p.recovery_stats for p in self._logs.values()]
            log.info(
                "unclean shutdown: recovered %d logs in %.2f s (%d recovery threads), "
                "scanned %d of %d segments (%d bytes), truncated %d bytes",
                len(stats),
                self.load_seconds,
                min(self.recovery_threads, len(stats)),
                sum(len(s.scanned) for s in stats),
                sum(s.segments for s in stats),
                sum(s.bytes_scanned for s in stats),
                sum(s.bytes_truncated for s in stats),
            )
        self.checkpoint()
        self.flusher.start()
        for plog in self._logs.values():  # a recovered tail: fsynced off the start-up path
            if plog.recovered_upto is not None:
                self.flusher.submit(plog, plog.recovered_upto)
        self.started = True
        if self.start_cleaner:
            self._cleaner_stop.clear()
            self._cleaner_thread = threading.Thread(
                target=self._cleaner_loop, name="yak-log-cleaner", daemon=True
            )
            self._cleaner_thread.start()

    def _load_all(
        self,
        found: list[tuple[str, tuple[str, int]]],
        open_log: Callable[[str, tuple[str, int]], PartitionLog],
    ) -> None:
        """Open every found log, `recovery_threads` at a time, into `self._logs` (in name
        order, whatever order they finish in). On failures every log that did load is
        adopted anyway (so `startup` closes it), the failures are logged, and the first
        failed directory's error is raised; queued logs are not started after one failed,
        as the sequential loop stopped at the first error."""
        workers = min(self.recovery_threads, len(found))
        if workers <= 1:
            for path, parsed in found:
                self._logs[parsed] = open_log(path, parsed)
            return
        with ThreadPoolExecutor(workers, thread_name_prefix="yak-log-recovery") as pool:
            futures = [(parsed, pool.submit(open_log, path, parsed)) for path, parsed in found]
            for _parsed, fut in futures:
                if fut.exception() is not None:
                    pool.shutdown(wait=True, cancel_futures=True)
                    break
        first: BaseException | None = None
        for parsed, fut in futures:
            if fut.cancelled():
                continue
            error = fut.exception()
            if error is None:
                self._logs[parsed] = fut.result()
                continue
            if first is None:
                first = error
            else:
                log.error("loading log %s-%d failed too: %s", parsed[0], parsed[1], error)
        if first is not None:
            raise first

    def shutdown(self) -> None:
        """Flush, checkpoint, snapshot, then the clean-shutdown marker (last, after fsyncs)."""
        self._stop_cleaner()
        self.flusher.stop()
        with self._lock:
            for plog in self._logs.values():
                plog.close()
            self.checkpoint()
            checkpoint.write_atomic(
                os.path.join(self.data_dir, checkpoint.CLEAN_SHUTDOWN_FILE), b""
            )
            self._logs.clear()
            self.started = False
            self._dir_lock.release()

    def crash(self) -> None:
        """For tests: stop like a SIGKILL would (no flush, no checkpoints, no marker; the
        directory's lock goes, as it does with a dead process's descriptors)."""
        self._stop_cleaner()
        self.flusher.stop()
        with self._lock:
            for plog in self._logs.values():
                plog.close_without_flush()
            self._logs.clear()
            self.started = False
            self._dir_lock.release()

    def _stop_cleaner(self) -> None:
        self._cleaner_stop.set()
        if self._cleaner_thread is not None:
            self._cleaner_thread.join()
            self._cleaner_thread = None

    # --- logs -------------------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return os.path.join(self.data_dir, name)

    def create(self, topic: str, partition: int, config: LogConfig | None = None) -> PartitionLog:
        """The log of (topic, partition), created if missing. For an existing log a given
        `config` is applied (the broker re-creates its topics' logs at start-up)."""
        if not topic or "/" in topic or topic in (".", "..") or partition < 0:
            raise InvalidTopicError(f"invalid topic partition {topic!r}-{partition}")
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None:
                if config is not None and config != existing.config:
                    existing.update_config(config)
                return existing
            path = os.path.join(self.data_dir, f"{topic}-{partition}")
            try:
                plog = PartitionLog(
                    path,
                    topic,
                    partition,
                    config or self.default_config,
                    clean=True,
                    on_roll=self.flusher.submit,
                    on_truncate=self._after_truncation,
                )
            except OSError as e:
                raise KafkaStorageError(f"cannot create log {path}: {e}") from e
            self._logs[(topic, partition)] = plog
            return plog

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def delete(self, topic: str, partition: int) -> None:
        """Rename the directory aside (Kafka's `-delete` suffix), then remove it."""
        with self._lock:
            plog = self._logs.pop((topic, partition), None)
        if plog is None:
            return
        with plog.lock:
            plog.deleted = True
            for seg in plog.segments:
                seg.close()
            plog.delete_retired(force=True)
        aside = f"{plog.directory}.{uuid.uuid4().hex}-delete"
        try:
            os.replace(plog.directory, aside)
            shutil.rmtree(aside, ignore_errors=True)
        except OSError as e:
            raise KafkaStorageError(f"cannot delete {plog.directory}: {e}") from e

    # --- periodic work ----------------------------------------------------------------------

    def maintenance(self, now: int | None = None) -> None:
        """Time-based roll, retention, `flush.ms`, deferred deletes, checkpoints.

        Cheap when there is nothing to do, so the broker can call it every second.
        """
        now = now_ms() if now is None else now
        for plog in self.logs():
            try:
                plog.maybe_roll_by_time(now)
                plog.apply_retention(now)
                plog.flush_if_due(now)
                plog.delete_retired()
                if now - self._last_expiry_ms >= 60_000:
                    plog.expire_producers(now)
            except Exception:  # one bad log must not stop maintenance of the others
                log.exception("maintenance of %s-%s failed", plog.topic, plog.partition)
        if now - self._last_expiry_ms >= 60_000:
            self._last_expiry_ms = now
        if now - self._last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS:
            self.checkpoint()
            self._last_checkpoint_ms = now

    def _after_truncation(self, plog: PartitionLog) -> None:
        """A truncation lowered the log's recovery point: checkpoint it before anything is
        written again, or a crash would trust the stale, higher point."""
        self.checkpoint()

    def wait_for_flushes(self, timeout: float = 30.0) -> bool:
        """Block until the flusher has synced every rolled segment handed to it so far."""
        return self.flusher.wait_idle(timeout)

    def checkpoint(self) -> None:
        """Rewrite the data dir's checkpoint files whose content changed (each write fsyncs).
        Called by maintenance, the roll flusher and shutdown: serialized."""
        with self._checkpoint_lock:
            self._write_checkpoints()

    def _write_checkpoints(self) -> None:
        logs = self.logs()
        files = {
            checkpoint.RECOVERY_POINT_FILE: {
                (p.topic, p.partition): p.recovery_point for p in logs
            },
            checkpoint.REPLICATION_OFFSET_FILE: {
                (p.topic, p.partition): p.high_watermark for p in logs
            },
            checkpoint.LOG_START_OFFSET_FILE: {
                (p.topic, p.partition): p.log_start_offset for p in logs
            },
            checkpoint.CLEANER_OFFSET_FILE: {
                (p.topic, p.partition): p.first_dirty_offset for p in logs if p.config.compact
            },
        }
        for name, offsets in files.items():
            if self._written_checkpoints.get(name) != offsets:
                checkpoint.write_offsets(self._path(name), offsets)
                self._written_checkpoints[name] = offsets

    # --- cleaner ----------------------------------------------------------------------------

    def _cleaner_loop(self) -> None:
        while not self._cleaner_stop.wait(CLEANER_BACKOFF_S):
            self.run_cleaner_once(stop=self._cleaner_stop.is_set)

    def run_cleaner_once(
        self, now: int | None = None, stop: Callable[[], bool] | None = None
    ) -> int:
        """Clean every compacted log that is dirty enough; returns how many were cleaned."""
        from yak.storage.cleaner import clean_log

        done = 0
        for plog in self.logs():
            if stop is not None and stop():
                break
            if not plog.config.compact:
                continue
            try:
                stats = clean_log(plog, now_ms() if now is None else now)
            except Exception:
                log.exception("cleaning %s-%s failed", plog.topic, plog.partition)
                continue
            if stats is not None:
                done += 1
                self.cleaner_stats.append(stats)
                del self.cleaner_stats[:-100]
        return done


__all__ = ["LOCK_FILE", "DataDirLock", "LogDirInUseError", "LogManager", "parse_log_dir_name"]
