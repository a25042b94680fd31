"""The share-group workload of `yak chaos run --workloads share` (KIP-932 queues, issue 24).

Beside the queue workloads and under the same faults:

- a producer (`queue.QueueProducer`: idempotent, acks=all) writes unique values to the
  share topic, logged as `send` ops like the queue workload's, so the generic checker also
  holds every acknowledged one to the final reads of the log;
- `members` share consumers (confluent-kafka's `ShareConsumer`, explicit
  acknowledgement) in one share group log every poll (`share_poll`: partition, offset,
  value, delivery count) and every acknowledgement's outcome (`share_ack`, from the
  client's acknowledgement-commit callback, which names each offset the broker answered
  for: confirmed, refused, or never answered). Each holds a batch up to `think_s` before
  acknowledging it (so faults land while records are acquired), and every
  `abandon_every_s` or so closes its client with a batch unacknowledged, as a consumer
  that crashed would (`"abandoned": true`), and starts a new one: the broker must hand
  those records out again, or archive them at the limit;
- the group's configs (IncrementalAlterConfigs on the GROUP resource) make it start at
  the earliest offset, archive at `limit` deliveries, lock records for `lock_ms` and copy
  rejected and archived records to the dead-letter topic (DLQ);
- after the producers stop, the members go on until nothing was delivered for longer
  than a lock (`share_drained`), then the DLQ is read to its end (`share_dlq`).

What a member does with a delivery is a function of the value and its delivery count
(`plan`), so a run is reproducible in what it asks: mostly ACCEPT, 5 % REJECT at once,
5 % RELEASE at every delivery (so they reach the limit and the DLQ), 10 % RELEASE at the
first delivery and ACCEPT after. The checker (`checker_share.py`) does not use the plan:
it judges by what the broker confirmed.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
import zlib
from collections import defaultdict, deque
from typing import Any

from yak.chaos.history import Recorder
from yak.chaos.queue import QueueProducer, _Client, _client_conf, partition_name

__all__ = ["ShareMember", "ShareWorkload", "plan", "read_dlq"]

log = logging.getLogger(__name__)

ACCEPT, RELEASE, REJECT = "accept", "release", "reject"
# A commit whose answer never came is not a refusal: the broker may have written it.
_UNKNOWN_OUTCOME = {"_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN", "REQUEST_TIMED_OUT",
                    "NETWORK_EXCEPTION", "_DESTROY", "_WAIT_COORD", "NOT_COORDINATOR",
                    "COORDINATOR_NOT_AVAILABLE"}


def plan(value: str, delivery_count: int) -> str:
    """What a member does with `value` at its `delivery_count`-th delivery."""
    bucket = zlib.crc32(value.encode()) % 100
    if bucket < 5:
        return REJECT
    if bucket < 10:
        return RELEASE  # every time: archived at the limit, into the DLQ
    if bucket < 20 and delivery_count <= 1:
        return RELEASE  # once, then accepted
    return ACCEPT


class ShareMember(_Client):
    """One share consumer of the group for the whole run (a new client after a fatal
    error), logging deliveries and acknowledgement outcomes."""

    def __init__(self, name: str, rec: Recorder, stop: threading.Event, *, bootstrap: str,
                 topic: str, group: str, commit_timeout_s: float = 30.0,
                 think_s: float = 0.2, abandon_every_s: float = 0.0, seed: int = 1) -> None:
        super().__init__(name, rec, stop)
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.commit_timeout_s = commit_timeout_s
        self.think_s = think_s  # records are held up to this long before their acks
        self.abandon_every_s = abandon_every_s  # 0: never
        self.rng = random.Random(seed)
        self.abandoned = 0
        self._next_abandon = abandon_every_s * (1 + self.rng.random())
        self.deliveries = 0
        self.last_delivery = 0.0  # run time of the last poll that returned records
        # (topic, partition, offset) -> what this member acknowledged there, oldest first
        self._pending: dict[tuple[str, int, int], deque[list[Any]]] = defaultdict(deque)

    def body(self) -> None:
        while not self.stop_event.is_set():
            self._incarnation()

    def _incarnation(self) -> None:
        from confluent_kafka import KafkaException, ShareConsumer

        c = ShareConsumer(_client_conf(self.bootstrap, {
            "group.id": self.group,
            "share.acknowledgement.mode": "explicit",
            "error_cb": self.count_error,
        }))
        c.set_acknowledgement_commit_callback(self._on_commit)
        try:
            c.subscribe([self.topic])
            while not self.stop_event.is_set():
                msgs = c.poll(0.5)
                got = self.rec.now()  # the receipt time the checker orders by
                if msgs and self.abandon_every_s and self.rec.now() >= self._next_abandon:
                    self._abandon(msgs)
                    return  # closed without acknowledging: the broker releases them
                if msgs:
                    time.sleep(self.rng.uniform(0, self.think_s))
                    self._handle(c, msgs, got)
                    try:
                        c.commit_sync(self.commit_timeout_s)
                    except KafkaException as e:  # outcomes come through the callback
                        self.count_error(e.args[0])
        except Exception as e:  # a fatal client error or a refused call: a new client
            self.count_error(e.args[0] if isinstance(e, KafkaException) and e.args else e)
            log.info("share member %s: %s; a new client", self.client_name, e)
            time.sleep(1.0)
        finally:
            with contextlib.suppress(Exception):
                c.close()  # commits what is pending; the callback reports it
            self._unanswered()

    def _handle(self, c: Any, msgs: Any, got: float) -> None:
        from confluent_kafka import AcknowledgeType

        types = {ACCEPT: AcknowledgeType.ACCEPT, RELEASE: AcknowledgeType.RELEASE,
                 REJECT: AcknowledgeType.REJECT}
        records = []
        refused = []
        for m in msgs:
            if m.error() is not None:
                self.count_error(m.error())
                continue
            value = m.value().decode()
            count = m.delivery_count()
            part = partition_name(m.topic(), m.partition())
            records.append([part, m.offset(), value, count])
            what = plan(value, count or 1)
            row = [part, m.offset(), value, count, what]
            try:
                c.acknowledge(m, types[what])
            except Exception as e:  # never sent: the client no longer holds it
                refused.append((row, f"{type(e).__name__}: {e}"))
                continue
            self._pending[(m.topic(), m.partition(), m.offset())].append(row)
        if records:
            self.deliveries += len(records)
            self.last_delivery = self.rec.add({"op": "share_poll", "process": self.client_name,
                                               "records": records}, at=got)["time"]
        for row, err in refused:
            self.rec.add({"op": "share_ack", "process": self.client_name, "status": "fail",
                          "error": err, "acks": [row]})

    def _abandon(self, msgs: Any) -> None:
        """Log the deliveries and acknowledge none of them: the client closes as a
        consumer that crashed mid-batch would, and a new one joins."""
        records = [[partition_name(m.topic(), m.partition()), m.offset(),
                    m.value().decode(), m.delivery_count()] for m in msgs if m.error() is None]
        self.abandoned += 1
        self._next_abandon = self.rec.now() + self.abandon_every_s * (0.5 + self.rng.random())
        if records:
            self.deliveries += len(records)
            self.last_delivery = self.rec.add({"op": "share_poll", "process": self.client_name,
                                               "abandoned": True, "records": records})["time"]

    def _on_commit(self, offsets: dict[Any, set[int]], exc: Any) -> None:
        status, error = "ok", None
        if exc is not None:
            err = exc.args[0] if exc.args else exc
            error = err.name() if hasattr(err, "name") else str(err)
            self.count_error(err)
            status = "info" if error in _UNKNOWN_OUTCOME else "fail"
        rows = []
        for tp, offs in offsets.items():
            for o in sorted(offs):
                q = self._pending.get((tp.topic, tp.partition, o))
                if q:
                    rows.append(q.popleft())
        if rows:
            op: dict[str, Any] = {"op": "share_ack", "process": self.client_name,
                                  "status": status, "acks": rows}
            if error:
                op["error"] = error
            self.rec.add(op)

    def _unanswered(self) -> None:
        """Acknowledgements the closed client never reported on: outcome unknown."""
        rows = [r for q in self._pending.values() for r in q]
        self._pending.clear()
        if rows:
            self.rec.add({"op": "share_ack", "process": self.client_name, "status": "info",
                          "error": "no answer before the client closed", "acks": rows})


class ShareWorkload:
    """The share group's producer, members, drain and DLQ read, for the runner."""

    def __init__(self, rec: Recorder, stop_producers: threading.Event, *, bootstrap: str,
                 topic: str, dlq: str, partitions: int, group: str = "chaos-share",
                 members: int = 3, rate: float = 20.0, limit: int = 3,
                 lock_ms: int = 15_000, abandon_every_s: float = 20.0, seed: int = 1) -> None:
        self.rec = rec
        self.bootstrap = bootstrap
        self.topic = topic
        self.dlq = dlq
        self.partitions = partitions
        self.group = group
        self.limit = limit
        self.lock_ms = lock_ms
        self.stop_members = threading.Event()
        self.producer = QueueProducer("s0", rec, stop_producers, bootstrap=bootstrap,
                                      topic=topic, partitions=partitions, rate=rate,
                                      seed=seed * 1000 + 500)
        self.members = [ShareMember(f"m{i}", rec, self.stop_members, bootstrap=bootstrap,
                                    topic=topic, group=group, abandon_every_s=abandon_every_s,
                                    seed=seed * 100 + i) for i in range(members)]

    def configure(self, timeout_s: float = 60.0) -> None:
        """Set the group's configs (retried: the cluster may still be settling) and log
        them as the history's `share_config`."""
        from confluent_kafka.admin import (
            AdminClient,
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        configs = {"share.auto.offset.reset": "earliest",
                   "share.delivery.count.limit": str(self.limit),
                   "share.record.lock.duration.ms": str(self.lock_ms),
                   "errors.deadletterqueue.topic.name": self.dlq}
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout_s
        while True:
            res = ConfigResource(ResourceType.GROUP, self.group, incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in configs.items()])
            try:
                admin.incremental_alter_configs([res])[res].result(15)
                break
            except Exception as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"share group configs not set: {e}") from None
                time.sleep(1.0)
        self.rec.add({"op": "share_config", "topic": self.topic, "group": self.group,
                      "partitions": [partition_name(self.topic, p)
                                     for p in range(self.partitions)],
                      "dlq": self.dlq, "limit": self.limit, "lock_ms": self.lock_ms})

    def drain(self, timeout_s: float = 180.0) -> str | None:
        """After the producers stopped: until no member got a record for a lock's
        duration and 5 s (a record still owed would have come again by then); then the
        members stop. Returns an error line, or None when drained."""
        quiet = self.lock_ms / 1000 + 5.0
        t0 = self.rec.now()
        deadline = time.monotonic() + timeout_s
        drained = False
        while time.monotonic() < deadline:
            last = max([t0, *(m.last_delivery for m in self.members)])
            if self.rec.now() - last >= quiet:
                drained = True
                break
            time.sleep(0.5)
        self.stop_members.set()
        for m in self.members:
            m.join(60)
        if not drained:
            return (f"the share group did not drain within {timeout_s:g} s (deliveries"
                    f" went on; the last at {max(m.last_delivery for m in self.members):.1f} s)")
        self.rec.add({"op": "share_drained", "process": "share", "quiet_s": quiet})
        return None

    def finish(self, errors: list[str]) -> None:
        """Drain, stop the members, read the DLQ; what went wrong goes to `errors` (a run
        with errors does not pass)."""
        if (why := self.drain()) is not None:
            errors.append(why)
        try:
            self.rec.add({"op": "share_dlq", "final": True, "topic": self.dlq,
                          "records": read_dlq(self.bootstrap, self.dlq, self.partitions)})
        except Exception as e:
            errors.append(f"reading the share group's dead-letter topic failed: {e}")

    def stats(self) -> dict[str, Any]:
        return {"members": len(self.members), "limit": self.limit, "lock_ms": self.lock_ms,
                "deliveries": sum(m.deliveries for m in self.members),
                "batches_abandoned": sum(m.abandoned for m in self.members),
                "produced_acked": self.producer.acked}


def read_dlq(bootstrap: str, topic: str, partitions: int,
             timeout_s: float = 60.0) -> list[list[Any]]:
    """Every copy in the dead-letter topic: [value, source partition, source offset,
    delivery count, reason] from its headers (docs/share-groups.md)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(_client_conf(bootstrap, {
        "group.id": "chaos-share-dlq-reader", "enable.partition.eof": True,
        "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
    out: list[list[Any]] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        pending = set(range(partitions))
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the DLQ {topic} was not read to its end in"
                                   f" {timeout_s:g} s")
            for m in c.consume(500, 1.0):
                err = m.error()
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF
                        pending.discard(m.partition())
                    continue
                h = {k: (v or b"").decode() for k, v in (m.headers() or [])}
                src = partition_name(h.get("__dlq.errors.topic", "?"),
                                     h.get("__dlq.errors.partition", "?"))
                out.append([(m.value() or b"").decode(), src, _int(h.get("__dlq.errors.offset")),
                            _int(h.get("__dlq.errors.delivery.count")),
                            h.get("__dlq.errors.reason", "")])
    finally:
        c.close()
    return out


def _int(s: str | None) -> int | None:
    try:
        return int(s) if s is not None else None
    except ValueError:
        return None
