"""Group configs (the GROUP config resource, share and KIP-848 consumer groups alike):
which keys there are (`GROUP_KEYS`: type, documentation, the broker setting each defaults
to and the settings bounding it), their checks (`check_group_config` one key,
`validate_group_configs` a group's whole set, Kafka's GroupConfig.validate), what
`share.auto.offset.reset=by_duration:` means (`by_duration_ms`, `reset_end`), and where
they live, durable and cluster-wide: one document per group in the metadata store
(`group_configs/<group id>`), as Kafka keeps a GROUP resource's configs in its metadata
log.

Why: a group's `share.auto.offset.reset`, delivery limit, lock duration, dead-letter
topic and redelivery delay must hold on every broker (the leaders of the group's
partitions are anywhere in the cluster) and after restarts. The store is the one
metadata path's (`KVClient`: etcd in a cluster, the data dir's local KV for a single
broker), handed in by the composition (this layer never imports the cluster). Reads are
of the local image (no I/O), decoded once per revision; a write is compare-and-set on
the document's revision, retried when another broker wrote first, and returns once this
broker's image has it.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from yak.errors import KafkaError
from yak.partition.partition import FetchIsolation, Partition
from yak.settings import BROKER_SETTINGS

__all__ = [
    "DLQ_TOPIC",
    "DYNAMIC_GROUP_CONFIG",
    "GROUP_CONFIG_KEYS",
    "GROUP_KEYS",
    "DocumentStore",
    "GroupConfigStore",
    "GroupKey",
    "InvalidGroupConfig",
    "by_duration_ms",
    "check_group_config",
    "document_name",
    "reset_end",
    "validate_group_configs",
]

DLQ_TOPIC = "errors.deadletterqueue.topic.name"
MAX_REDELIVERY_DELAY_MS = 3_600_000
INT_MAX = 2**31 - 1
DYNAMIC_GROUP_CONFIG = 8  # DescribeConfigs' ConfigSource of a group's own value


@dataclass(frozen=True)
class GroupKey:
    """One group config as Kafka's GroupConfig defines it. A group without its own value
    runs with the broker setting `"group." + name` when there is one (Kafka's synonym),
    else with `default`; `lo`/`hi` name the broker settings bounding an int key (or are
    fixed numbers)."""

    name: str
    type: str  # "int" or "string"
    default: str | None
    doc: str
    lo: str | int | None = None
    hi: str | int | None = None

    @property
    def broker_key(self) -> str | None:
        name = "group." + self.name
        return name if name in BROKER_SETTINGS else None


GROUP_KEYS: dict[str, GroupKey] = {k.name: k for k in (
    GroupKey("consumer.session.timeout.ms", "int", None,
             "The timeout to detect client failures when using the consumer group protocol.",
             "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    GroupKey("consumer.heartbeat.interval.ms", "int", None,
             "The heartbeat interval given to the members of a consumer group.",
             "group.consumer.min.heartbeat.interval.ms",
             "group.consumer.max.heartbeat.interval.ms"),
    GroupKey("share.session.timeout.ms", "int", None,
             "The timeout to detect client failures when using the share group protocol.",
             "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    GroupKey("share.heartbeat.interval.ms", "int", None,
             "The heartbeat interval given to the members of a share group.",
             "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    GroupKey("share.record.lock.duration.ms", "int", None,
             "The record acquisition lock duration in milliseconds for share groups.",
             "group.share.min.record.lock.duration.ms",
             "group.share.max.record.lock.duration.ms"),
    GroupKey("share.delivery.count.limit", "int", None,
             "The maximum number of delivery attempts for a record delivered to a share"
             " group.", "group.share.min.delivery.count.limit",
             "group.share.max.delivery.count.limit"),
    GroupKey("share.auto.offset.reset", "string", "latest",
             "The strategy to initialize the share-partition start offset: latest, earliest"
             " or by_duration:<ISO-8601 duration> (the first record at most that old)."),
    GroupKey("share.isolation.level", "string", "read_uncommitted",
             "read_committed: share consumers get only committed transactional records."),
    # ahead of Kafka (issue 24): KIP-1191's dead-letter topic, and a delay before a
    # released or expired record is handed out again
    GroupKey(DLQ_TOPIC, "string", None,
             "Yak's (KIP-1191): the topic archived and rejected records are copied to."),
    GroupKey("share.record.redelivery.delay.ms", "int", "0",
             "Yak's: how long a released or expired record waits before it is handed out"
             " again.", 0, MAX_REDELIVERY_DELAY_MS),
)}
GROUP_CONFIG_KEYS = tuple(GROUP_KEYS)
# (session key, heartbeat key): a group's session must outlast its heartbeat interval
_SESSION_PAIRS = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                  ("share.session.timeout.ms", "share.heartbeat.interval.ms"))


class InvalidGroupConfig(Exception):
    """A group config outside the broker's bounds (INVALID_CONFIG)."""


_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def by_duration_ms(value: str) -> int | None:
    """`by_duration:<ISO-8601 duration>` (Java's Duration.parse: PnDTnHnMn.nS) -> its
    milliseconds; None for any other value. InvalidGroupConfig for a bad or negative
    duration, as Kafka refuses it."""
    if not value.startswith("by_duration:"):
        return None
    text = value[len("by_duration:"):]
    m = _DURATION.fullmatch(text)
    if m is None or text.upper().endswith("T") or m.groups()[1:5] == (None,) * 4:
        raise InvalidGroupConfig(
            f"share.auto.offset.reset={value}: not an ISO-8601 duration (e.g. by_duration:PT1H)")
    sign, d, h, mi, sec, frac = m.groups()
    ms = ((int(d or 0) * 24 + int(h or 0)) * 60 + int(mi or 0)) * 60_000 + int(sec or 0) * 1000
    if frac:
        ms += int((frac + "000")[:3]) * (-1 if (sec or "").startswith("-") else 1)
    if sign == "-":
        ms = -ms
    if ms < 0:
        raise InvalidGroupConfig(f"share.auto.offset.reset={value}: the duration is negative")
    return ms


def check_group_config(bounds: Any, topics: Callable[[str], tuple[uuid.UUID, int] | None],
                       key: str, value: str | None) -> None:
    """InvalidGroupConfig unless `key` is a group config and `value` (None: a delete) reads
    as one and is within the share-partition bounds (`bounds`: the ShareConfig of the
    broker's `group.share.*` settings); a dead-letter topic must exist. The bounds of the
    session and heartbeat keys, and their pairing, are `validate_group_configs`'."""
    if key not in GROUP_KEYS:
        raise InvalidGroupConfig(f"Unknown group config name: {key}")
    if value is None:
        return
    c = bounds
    if key == "share.auto.offset.reset":
        if value not in ("latest", "earliest") and by_duration_ms(value) is None:
            raise InvalidGroupConfig(
                f"{key}={value}: latest, earliest or by_duration:<ISO-8601 duration>")
        return
    if key == "share.isolation.level":
        if value not in ("read_uncommitted", "read_committed"):
            raise InvalidGroupConfig(f"{key}={value}: read_uncommitted or read_committed")
        return
    if key == DLQ_TOPIC:
        if value.startswith("__") or topics(value) is None:
            raise InvalidGroupConfig(f"{key}={value}: no such topic (create it first)")
        return
    lo, hi = {
        "share.record.lock.duration.ms": (c.min_record_lock_duration_ms,
                                          c.max_record_lock_duration_ms),
        "share.delivery.count.limit": (c.min_delivery_count_limit,
                                       c.max_delivery_count_limit),
        "share.record.redelivery.delay.ms": (0, MAX_REDELIVERY_DELAY_MS),
    }.get(key, (1, INT_MAX))
    n = _int(key, value)
    if not lo <= n <= hi:
        raise InvalidGroupConfig(f"{key}={value} is outside [{lo}, {hi}]")


def _int(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidGroupConfig(f"{key}={value} is not a number") from None


def validate_group_configs(setting: Callable[[str], str | None],
                           topics: Callable[[str], tuple[uuid.UUID, int] | None],
                           configs: Mapping[str, str]) -> None:
    """Kafka's GroupConfig.validate on a group's whole new set of configs: every key
    known and well formed, each int key within the broker settings that bound it
    (`setting(name)`: the broker's effective value of a setting), and each session
    timeout above its heartbeat interval, a key the group does not set counting at the
    broker's value. InvalidGroupConfig naming the key and its bounds."""
    for key, value in configs.items():
        spec = GROUP_KEYS.get(key)
        if spec is None:
            raise InvalidGroupConfig(f"Unknown group config name: {key}")
        if spec.type != "int":
            check_group_config(None, topics, key, value)
            continue
        n = _int(key, value)
        lo, hi = (_bound(setting, b) for b in (spec.lo, spec.hi))
        if not lo <= n <= hi:
            names = (f" ({spec.lo}, {spec.hi})" if isinstance(spec.lo, str) else "")
            raise InvalidGroupConfig(f"{key}={value} is outside [{lo}, {hi}]{names}")
    for session, heartbeat in _SESSION_PAIRS:
        s, h = (int(configs.get(k) or group_default(setting, k) or 0)
                for k in (session, heartbeat))
        if s <= h:
            raise InvalidGroupConfig(
                f"{session} ({s}) must be greater than {heartbeat} ({h})")


def _bound(setting: Callable[[str], str | None], bound: str | int | None) -> int:
    if bound is None:
        return 1
    if isinstance(bound, int):
        return bound
    return int(setting(bound) or BROKER_SETTINGS[bound].default or 1)


def group_default(setting: Callable[[str], str | None], key: str) -> str | None:
    """What a group without its own `key` runs with: the broker setting it defaults to
    (its effective value), else Kafka's default of the group config."""
    spec = GROUP_KEYS[key]
    broker_key = spec.broker_key
    return setting(broker_key) if broker_key is not None else spec.default


def reset_end(p: Partition, reset: str, now_ms: int | None = None) -> int:
    """Where a new share partition's window starts for `latest` (the high watermark) and
    for `by_duration:<d>`: the first offset whose timestamp is at least now - d, by the
    partition's time index (ListOffsets by time), the high watermark when no record is
    that recent (Kafka's fallback to latest). `earliest` is the log start, not this.
    The time-index lookup runs on the event loop, as ListOffsets' does, once per share
    partition initialized."""
    try:
        ms = by_duration_ms(reset)
    except InvalidGroupConfig:
        ms = None
    if ms is None:
        return p.high_watermark
    now = int(time.time() * 1000) if now_ms is None else now_ms
    try:
        offset, _ts, _epoch = p.fetch_offset_for_timestamp(max(0, now - ms),
                                                           FetchIsolation.HIGH_WATERMARK)
    except KafkaError:
        return p.high_watermark
    return offset if offset >= 0 else p.high_watermark

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 20


class DocumentStore(Protocol):
    """What the metadata store offers (its documents)."""

    def document(self, name: str) -> tuple[bytes | None, int]: ...

    async def put_document(self, name: str, value: bytes, mod_revision: int) -> bool: ...


def document_name(group_id: str) -> str:
    return f"group_configs/{group_id}"


class GroupConfigStore:
    def __init__(self, store: DocumentStore) -> None:
        self.store = store
        self._cache: dict[str, tuple[int, dict[str, str]]] = {}

    def get(self, group_id: str) -> dict[str, str]:
        """The group's stored configs (the image: no I/O; do not mutate the result)."""
        value, revision = self.store.document(document_name(group_id))
        cached = self._cache.get(group_id)
        if cached is not None and cached[0] == revision:
            return cached[1]
        configs = _decode(group_id, value)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[group_id] = (revision, configs)
        return configs

    async def apply(self, group_id: str, changes: Sequence[tuple[str, str | None]]) -> None:
        """Set (None: delete) each key, in one write."""
        def change(current: dict[str, str]) -> dict[str, str]:
            for key, value in changes:
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            return current

        await self.replace(group_id, change)

    async def replace(self, group_id: str,
                      change: Callable[[dict[str, str]], dict[str, str]]) -> None:
        """Store `change(current)`; re-read and re-applied if another broker wrote first."""
        name = document_name(group_id)
        for _ in range(MAX_ATTEMPTS):
            value, revision = self.store.document(name)
            current = _decode(group_id, value)
            new = change(dict(current))
            if new == current:
                return
            data = json.dumps({"configs": dict(sorted(new.items()))}).encode()
            if await self.store.put_document(name, data, revision):
                return
        raise RuntimeError(f"{name} changed by others {MAX_ATTEMPTS} times in a row")


def _decode(group_id: str, value: bytes | None) -> dict[str, str]:
    if value is None:
        return {}
    try:
        data = json.loads(value)
        configs = data["configs"]
        return {str(k): str(v) for k, v in configs.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        log.error("%s: unreadable group configs document: %s", document_name(group_id), e)
        return {}
