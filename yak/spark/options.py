"""Options of the `yak` data source, named and validated like Spark's Kafka connector.

Validation happens when the DataFrame is defined, on the driver, so a typo fails fast with
the option's name instead of surfacing as an executor stack trace minutes later.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from yak.errors import KafkaError
from yak.security.client import CLIENT_SECURITY_KEYS, ClientSecurity


class YakOptionError(KafkaError, ValueError):
    """A bad or missing option; the message names it."""


# Spark's Kafka source options (lower-cased: Spark hands options over case-insensitively).
_SOURCE = {
    "kafka.bootstrap.servers",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "failondataloss",
    "minpartitions",
    "includeheaders",
    "groupidprefix",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "kafkaconsumer.polltimeoutms",
    "valueformat",
    "schema.registry.url",
    "valueschemasubject",
    # direct reads of tiered segments from the bucket (yak/spark/tiered_plan.py)
    "tiered.direct",
    "remote.storage.uri",
    "remote.storage.access.key.id",
    "remote.storage.secret.access.key",
    "remote.storage.session.token",
    # ... through presigned URLs the brokers' gateway hands out (yak/gateway/rest_tiered.py)
    "tiered.presign",
    "tiered.presign.expires",
    "tiered.gatewayurl",
    "tiered.gateway.username",
    "tiered.gateway.password",
}
_SINK = {"kafka.bootstrap.servers", "topic", "includeheaders", "exactlyonce", "sinkstatetopic",
         "valueformat", "schema.registry.url", "exactlyoncemode", "transactionalidprefix",
         "kafka.transaction.timeout.ms", "partitioner"}
EXACTLY_ONCE_MODES = ("auto", "transactions", "markers")
# Keyless rows: the sticky spread by row index, or yak.client.load_aware (issue 23).
SINK_PARTITIONERS = ("default", "load_aware")
# Options Spark itself may add to a data source's options.
_SPARK_ADDED = {"path", "checkpointlocation", "queryname"}
# `kafka.`-prefixed client settings this client understands (Java client names).
CLIENT_OPTIONS = {
    "kafka.bootstrap.servers",
    "kafka.client.id",
    "kafka.request.timeout.ms",
    "kafka.default.api.timeout.ms",
    "kafka.retries",
    "kafka.retry.backoff.ms",
    "kafka.fetch.max.bytes",
    "kafka.max.partition.fetch.bytes",
    "kafka.fetch.max.wait.ms",
    "kafka.isolation.level",
    "kafka.acks",
    "kafka.batch.size",
    "kafka.compression.type",
    "kafka.enable.idempotence",
    "kafka.group.id",
} | {f"kafka.{k}" for k in CLIENT_SECURITY_KEYS}  # security.protocol, sasl.*, ssl.*

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$")


def _duration_ms(name: str, text: str) -> int:
    m = _DURATION.match(text)
    if not m:
        raise YakOptionError(f"option {name}: {text!r} is not a duration like '15m' or '30s'")
    n = int(m.group(1))
    unit = m.group(2) or "ms"
    mult = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}[unit]
    return n * mult


def _int(opts: Mapping[str, str], name: str, default: int | None, minimum: int = 0) -> int | None:
    raw = opts.get(name)
    if raw is None:
        return default
    try:
        v = int(str(raw))
    except ValueError:
        raise YakOptionError(f"option {name}: {raw!r} is not an integer") from None
    if v < minimum:
        raise YakOptionError(f"option {name}: must be >= {minimum}, got {v}")
    return v


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    s = str(raw).strip().lower()
    if s not in ("true", "false"):
        raise YakOptionError(f"option {name}: {raw!r} is not true or false")
    return s == "true"


def _json_offsets(name: str, raw: str) -> dict[str, dict[int, int]]:
    try:
        obj = json.loads(raw)
        return {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in obj.items()}
    except (ValueError, AttributeError, TypeError):
        raise YakOptionError(
            f'option {name}: {raw!r} is not "earliest", "latest" or JSON like '
            '{"topic":{"0":23,"1":-2}}'
        ) from None


@dataclass
class ClientSettings:
    bootstrap_servers: str
    client_id: str = "yak-spark"
    request_timeout_ms: int = 30_000
    retries: int = 5
    retry_backoff_ms: int = 200
    fetch_max_bytes: int = 64 << 20
    partition_fetch_max_bytes: int = 16 << 20
    fetch_max_wait_ms: int = 500
    isolation_level: int = 0
    acks: int = -1
    batch_size: int = 1 << 20
    compression: str = "none"
    security: ClientSecurity | None = None  # TLS / SASL (kafka.security.protocol, ...)

    def client(self, transactional: bool = False) -> Any:
        """A client with these settings; `transactional`: one that also speaks the
        transaction APIs (the exactly-once sink)."""
        from yak.client import KafkaClient
        from yak.client.transactions import TransactionalClient

        return (TransactionalClient if transactional else KafkaClient)(
            self.bootstrap_servers,
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            retries=self.retries,
            retry_backoff_ms=self.retry_backoff_ms,
            security=self.security,
            isolation_level=self.isolation_level,
        )


def _check_known(opts: Mapping[str, str], allowed: set[str], what: str) -> None:
    for key in opts:
        if key in allowed or key in _SPARK_ADDED:
            continue
        if key.startswith("kafka."):
            if key not in CLIENT_OPTIONS:
                raise YakOptionError(
                    f"option {key} is not supported by the yak client "
                    f"(supported: {', '.join(sorted(CLIENT_OPTIONS))})"
                )
            continue
        raise YakOptionError(
            f"unknown option {key!r} for the yak {what} "
            f"(known: {', '.join(sorted(allowed | CLIENT_OPTIONS))})"
        )


def _client_settings(opts: Mapping[str, str]) -> ClientSettings:
    servers = (opts.get("kafka.bootstrap.servers") or "").strip()
    if not servers:
        raise YakOptionError("option kafka.bootstrap.servers is required (e.g. 'localhost:9092')")
    security = _security(opts)
    iso = str(opts.get("kafka.isolation.level", "read_uncommitted")).lower()
    if iso not in ("read_uncommitted", "read_committed"):
        raise YakOptionError(f"option kafka.isolation.level: {iso!r} is not read_(un)committed")
    acks = str(opts.get("kafka.acks", "all")).lower()
    if acks not in ("all", "-1", "0", "1"):
        raise YakOptionError(f"option kafka.acks: {acks!r} is not all, 1 or 0")
    comp = str(opts.get("kafka.compression.type", "none")).lower()
    if comp not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise YakOptionError(f"option kafka.compression.type: unknown codec {comp!r}")
    return ClientSettings(
        bootstrap_servers=servers,
        client_id=opts.get("kafka.client.id", "yak-spark"),
        request_timeout_ms=_int(opts, "kafka.request.timeout.ms", 30_000, 1),  # type: ignore[arg-type]
        retries=_int(opts, "kafka.retries", 5),  # type: ignore[arg-type]
        retry_backoff_ms=_int(opts, "kafka.retry.backoff.ms", 200),  # type: ignore[arg-type]
        fetch_max_bytes=_int(opts, "kafka.fetch.max.bytes", 64 << 20, 1),  # type: ignore[arg-type]
        partition_fetch_max_bytes=_int(opts, "kafka.max.partition.fetch.bytes", 16 << 20, 1),  # type: ignore[arg-type]
        fetch_max_wait_ms=_int(opts, "kafka.fetch.max.wait.ms", 500),  # type: ignore[arg-type]
        isolation_level=1 if iso == "read_committed" else 0,
        acks=-1 if acks in ("all", "-1") else int(acks),
        batch_size=_int(opts, "kafka.batch.size", 1 << 20, 1),  # type: ignore[arg-type]
        compression=comp,
        security=security,
    )


def _security(opts: Mapping[str, str]) -> ClientSecurity:
    """`kafka.security.protocol`, `kafka.sasl.*`, `kafka.ssl.*` (Spark's Kafka connector
    options: the Java client's names after `kafka.`), checked on the driver."""
    props = {k[len("kafka."):]: v for k, v in opts.items()
             if k.startswith("kafka.") and k[len("kafka."):] in CLIENT_SECURITY_KEYS}
    try:
        return ClientSecurity.from_properties(props)
    except ValueError as e:
        # Name the keys as the Spark user wrote them (kafka.<key>), every one the line names.
        keys = "|".join(re.escape(k) for k in sorted(CLIENT_SECURITY_KEYS, key=len, reverse=True))
        msg = re.sub(rf"(?<![\w.])({keys})(?![\w])", r"kafka.\1", str(e))
        raise YakOptionError(f"option {msg}" if msg.startswith("kafka.") else msg) from None


@dataclass(frozen=True)
class TieredSettings:
    """Where the remote log lives, for `tiered.direct=true`: the broker's own
    `remote.storage.uri` and S3 credentials (else the standard AWS variables of the driver
    and executors); or, with `tiered.presign=true`, the gateway (`gateway_url`, its HTTP
    Basic user) that hands out presigned URLs valid `presign_expires_s`, and no store
    credentials at all."""

    uri: str
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    presign: bool = False
    gateway_url: str | None = None
    gateway_username: str | None = None
    gateway_password: str | None = field(default=None, repr=False)
    presign_expires_s: int = 3600

    def store(self) -> Any:
        """A `RemoteStore` on the bucket (made where it is used: it is not picklable)."""
        from yak.tiered.store import RemoteStore, parse_uri

        return RemoteStore(parse_uri(self.uri), {
            "access_key_id": self.access_key_id, "secret_access_key": self.secret_access_key,
            "session_token": self.session_token}, request_timeout_s=30.0)


# A job's URLs must outlive its longest read of tiered segments; S3 takes at most 7 days.
PRESIGN_EXPIRES_DEFAULT_MS = 3_600_000
PRESIGN_EXPIRES_MAX_MS = 7 * 86_400_000


def _tiered(opts: Mapping[str, str]) -> TieredSettings | None:
    if _bool(opts, "tiered.presign", False):
        return _presign(opts)
    for k in ("tiered.presign.expires", "tiered.gatewayurl", "tiered.gateway.username",
              "tiered.gateway.password"):
        if k in opts:
            raise YakOptionError(f"option {k} needs tiered.presign=true")
    if not _bool(opts, "tiered.direct", False):
        return None
    uri = (opts.get("remote.storage.uri") or "").strip()
    if not uri:
        raise YakOptionError("option tiered.direct=true needs remote.storage.uri (the brokers'"
                             " s3://BUCKET[/PREFIX]?endpoint=...&region=... or file:///PATH)")
    from yak.tiered.store import parse_uri

    try:
        parse_uri(uri)
    except ValueError as e:
        raise YakOptionError(f"option {e}") from None
    key, secret = opts.get("remote.storage.access.key.id"), opts.get(
        "remote.storage.secret.access.key")
    if bool(key) != bool(secret):
        raise YakOptionError("options remote.storage.access.key.id and "
                             "remote.storage.secret.access.key go together")
    return TieredSettings(uri, key, secret, opts.get("remote.storage.session.token"))


def _presign(opts: Mapping[str, str]) -> TieredSettings:
    """`tiered.presign=true`: the direct read, planned from the gateway's presigned URLs
    (yak/gateway/rest_tiered.py); the job holds no store credentials."""
    if not _bool(opts, "tiered.direct", True):
        raise YakOptionError("option tiered.presign=true reads tiered segments from the"
                             " bucket: it cannot go with tiered.direct=false")
    given = sorted(k for k in opts if k.startswith("remote.storage."))
    if given:
        raise YakOptionError(f"option {given[0]}: not used with tiered.presign=true (the"
                             " gateway signs with the brokers' keys; the job holds none)")
    url = (opts.get("tiered.gatewayurl") or "").strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise YakOptionError("option tiered.presign=true needs tiered.gatewayUrl (the"
                             " brokers' HTTP gateway, e.g. http://127.0.0.1:8080)")
    user, password = opts.get("tiered.gateway.username"), opts.get("tiered.gateway.password")
    if (user is None) != (password is None):
        raise YakOptionError("options tiered.gateway.username and tiered.gateway.password"
                             " go together")
    ms = _duration_ms("tiered.presign.expires",
                      opts.get("tiered.presign.expires", f"{PRESIGN_EXPIRES_DEFAULT_MS}ms"))
    if not 1000 <= ms <= PRESIGN_EXPIRES_MAX_MS:
        raise YakOptionError(f"option tiered.presign.expires: {opts['tiered.presign.expires']!r}"
                             " is not between 1s and 7d (S3's limit)")
    return TieredSettings("", presign=True, gateway_url=url, gateway_username=user,
                          gateway_password=password, presign_expires_s=ms // 1000)


@dataclass
class SourceOptions:
    client: ClientSettings
    subscribe: list[str] | None = None
    pattern: str | None = None
    assign: dict[str, list[int]] | None = None
    starting: str | dict[str, dict[int, int]] = "latest"
    ending: str | dict[str, dict[int, int]] = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    starting_by_timestamp: dict[str, dict[int, int]] | None = None
    ending_by_timestamp: dict[str, dict[int, int]] | None = None
    by_timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    include_headers: bool = False
    value_format: str | None = None  # avro | jsonschema | protobuf, through the registry
    registry_url: str | None = None
    value_subject: str | None = None
    value_type: Any = None  # the value column's Arrow type (set when the reader is made)
    tiered: TieredSettings | None = None  # tiered.direct=true: remote segments from the bucket
    extra: dict[str, Any] = field(default_factory=dict)


def parse_source_options(raw: Mapping[str, str], streaming: bool) -> SourceOptions:
    opts = {str(k).lower(): str(v) for k, v in raw.items()}
    _check_known(opts, _SOURCE, "source")
    client = _client_settings(opts)
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(chosen) != 1:
        raise YakOptionError(
            "exactly one of the options subscribe, subscribePattern, assign must be set"
            + (f" (got {', '.join(chosen)})" if chosen else "")
        )
    o = SourceOptions(client=client)
    if "subscribe" in opts:
        o.subscribe = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
        if not o.subscribe:
            raise YakOptionError("option subscribe: no topic named")
    elif "subscribepattern" in opts:
        try:
            re.compile(opts["subscribepattern"])
        except re.error as exc:
            raise YakOptionError(f"option subscribePattern: bad regex: {exc}") from None
        o.pattern = opts["subscribepattern"]
    else:
        try:
            a = json.loads(opts["assign"])
            o.assign = {str(t): [int(p) for p in ps] for t, ps in a.items()}
        except (ValueError, AttributeError, TypeError):
            raise YakOptionError(
                f'option assign: {opts["assign"]!r} is not JSON like {{"topicA":[0,1]}}'
            ) from None
    o.starting = "latest" if streaming else "earliest"
    if "startingoffsets" in opts:
        s = opts["startingoffsets"].strip().lower()
        o.starting = (
            s
            if s in ("earliest", "latest")
            else _json_offsets("startingOffsets", opts["startingoffsets"])
        )
        if not streaming and o.starting == "latest":
            raise YakOptionError("option startingOffsets: 'latest' is not valid for batch queries")
    if "endingoffsets" in opts:
        if streaming:
            raise YakOptionError("option endingOffsets is only valid for batch queries")
        s = opts["endingoffsets"].strip().lower()
        o.ending = (
            s
            if s in ("earliest", "latest")
            else _json_offsets("endingOffsets", opts["endingoffsets"])
        )
        if o.ending == "earliest":
            raise YakOptionError("option endingOffsets: 'earliest' is not valid")
    o.starting_timestamp = _int(opts, "startingtimestamp", None)
    o.ending_timestamp = _int(opts, "endingtimestamp", None)
    if "startingoffsetsbytimestamp" in opts:
        o.starting_by_timestamp = _json_offsets(
            "startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"]
        )
    if "endingoffsetsbytimestamp" in opts:
        o.ending_by_timestamp = _json_offsets(
            "endingOffsetsByTimestamp", opts["endingoffsetsbytimestamp"]
        )
    if streaming and (o.ending_timestamp is not None or o.ending_by_timestamp is not None):
        raise YakOptionError("options endingTimestamp/endingOffsetsByTimestamp are batch-only")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise YakOptionError("option startingOffsetsByTimestampStrategy: must be error or latest")
    o.by_timestamp_strategy = strategy
    o.max_offsets_per_trigger = _int(opts, "maxoffsetspertrigger", None, 1)
    o.min_offsets_per_trigger = _int(opts, "minoffsetspertrigger", None, 1)
    if "maxtriggerdelay" in opts:
        o.max_trigger_delay_ms = _duration_ms("maxTriggerDelay", opts["maxtriggerdelay"])
    if (
        o.max_offsets_per_trigger is not None
        and o.min_offsets_per_trigger is not None
        and o.min_offsets_per_trigger > o.max_offsets_per_trigger
    ):
        raise YakOptionError("option minOffsetsPerTrigger must not exceed maxOffsetsPerTrigger")
    if not streaming:
        for k in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"):
            if k in opts:
                raise YakOptionError(f"option {k} is only valid for streaming queries")
    o.fail_on_data_loss = _bool(opts, "failondataloss", True)
    o.min_partitions = _int(opts, "minpartitions", None, 1)
    o.include_headers = _bool(opts, "includeheaders", False)
    o.value_format, o.registry_url = _value_format(opts)
    o.tiered = _tiered(opts)
    if o.value_format is not None:
        o.value_subject = opts.get("valueschemasubject")
        if o.value_subject is None:
            if not o.subscribe or len(o.subscribe) != 1:
                raise YakOptionError("option valueSchemaSubject is required with valueFormat "
                                     "unless subscribe names exactly one topic")
            o.value_subject = f"{o.subscribe[0]}-value"
    return o


def _value_format(opts: Mapping[str, str]) -> tuple[str | None, str | None]:
    fmt = opts.get("valueformat")
    if fmt is None:
        if "schema.registry.url" in opts:
            raise YakOptionError("option schema.registry.url needs valueFormat")
        return None, None
    fmt = fmt.strip().lower()
    if fmt not in ("avro", "jsonschema", "protobuf"):
        raise YakOptionError(f"option valueFormat: {fmt!r} is not avro, jsonschema or protobuf")
    url = (opts.get("schema.registry.url") or "").strip()
    if not url.startswith(("http://", "https://")):
        raise YakOptionError("option schema.registry.url is required with valueFormat "
                             "(e.g. http://127.0.0.1:8080)")
    return fmt, url


@dataclass
class SinkOptions:
    client: ClientSettings
    topic: str | None
    exactly_once: bool = True
    state_topic: str = "__yak_spark_sink_state"
    value_format: str | None = None
    registry_url: str | None = None
    # How streaming writes are made exactly once: broker transactions ("transactions"),
    # the state-topic markers ("markers", for clusters without transactions), or
    # transactions when the cluster has them ("auto").
    exactly_once_mode: str = "auto"
    transactional_id_prefix: str = "yak-spark"
    transaction_timeout_ms: int = 60_000
    partitioner: str = "default"  # keyless rows: SINK_PARTITIONERS


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    opts = {str(k).lower(): str(v) for k, v in raw.items()}
    _check_known(opts, _SINK, "sink")
    client = _client_settings(opts)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise YakOptionError("option topic: empty topic name")
    fmt, url = _value_format(opts)
    if fmt is not None and fmt != "avro":
        raise YakOptionError(f"option valueFormat: the sink writes avro only, not {fmt!r}")
    if fmt is not None and topic is None:
        raise YakOptionError("option topic is required with valueFormat (the schema is "
                             "registered as <topic>-value)")
    mode = opts.get("exactlyoncemode", "auto").strip().lower()
    if mode not in EXACTLY_ONCE_MODES:
        raise YakOptionError(f"option exactlyOnceMode: {mode!r} is not one of "
                             + ", ".join(EXACTLY_ONCE_MODES))
    partitioner = opts.get("partitioner", "default").strip().lower()
    if partitioner not in SINK_PARTITIONERS:
        raise YakOptionError(f"option partitioner: {partitioner!r} is not one of "
                             + ", ".join(SINK_PARTITIONERS))
    if partitioner == "load_aware" and mode == "markers":
        raise YakOptionError("option partitioner: load_aware places rows where they are"
                             " acknowledged soonest, which a replay with"
                             " exactlyOnceMode=markers cannot repeat; use transactions")
    prefix = opts.get("transactionalidprefix", "yak-spark").strip()
    if not prefix:
        raise YakOptionError("option transactionalIdPrefix: empty prefix")
    return SinkOptions(
        client=client,
        topic=topic,
        exactly_once=_bool(opts, "exactlyonce", True),
        state_topic=opts.get("sinkstatetopic", "__yak_spark_sink_state"),
        value_format=fmt,
        registry_url=url,
        exactly_once_mode=mode,
        transactional_id_prefix=prefix,
        transaction_timeout_ms=_int(opts, "kafka.transaction.timeout.ms", 60_000, 1000),  # type: ignore[arg-type]
        partitioner=partitioner,
    )
