"""Every setting Yak reads, declared once: Kafka's name, type, default, bounds.

Broker settings (`server.properties`), their `log.*` synonyms and the topic configs all
live in this one module, at the bottom of the package (it imports nothing from Yak), so
the loader (`yak.config`), storage (`yak.storage.config.LogConfig`), the topic manager
and the config views (DescribeConfigs) read the same facts instead of keeping tables of
their own that drift apart.

Each setting says which part of the broker reads it (`part`) and whether Yak acts on it:
`ACTED` (it changes behaviour), `ACCEPTED` (a Kafka setting accepted so existing files
and tools keep working, with no effect in Yak) or `DEPRECATED` (accepted with a warning
in the broker log and no effect, as Kafka 3.x does for e.g. `message.format.version`).
A bad value is a `ConfigError` whose message is one line naming the key.

`dynamic` marks the broker settings that may be changed while the broker runs
(IncrementalAlterConfigs/AlterConfigs on a BROKER resource, issue 23), as Kafka's
`DynamicBrokerConfig` does: every `log.*` topic-config synonym, `message.max.bytes`,
`min.insync.replicas`, `num.partitions`, `auto.leader.rebalance.enable`, the replication
throttles and a listener's keystore file (per listener, `listener.name.<l>.ssl.keystore.*`).
The others are read-only: altering one is INVALID_REQUEST naming the key
(`yak.cluster.dynamic_config` applies and stores the dynamic ones).

Why one module of over 700 lines, above the house's ~600: it is the one table, and its
length is rows, not logic. Split by category, the synonym derivation, the `dynamic` flag and
the readers' lookups would have to join several tables again, which is the drift this
module exists to prevent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ACCEPTED",
    "ACTED",
    "BROKER_SETTINGS",
    "DEPRECATED",
    "INT_MAX",
    "LISTENER_PREFIX",
    "LONG_MAX",
    "PARTS",
    "TOPIC_CONFIGS",
    "DYNAMIC_BROKER_SETTINGS",
    "PER_LISTENER_DYNAMIC",
    "ConfigError",
    "Setting",
    "dynamic_setting",
    "resolve_topic_defaults",
    "topic_config_for_broker_key",
]

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

ACTED = "acted"
ACCEPTED = "accepted"
DEPRECATED = "deprecated"

# The parts of a broker that own settings (the composition builds one object per part).
PARTS = ("broker", "storage", "group", "txn", "cluster", "security")


class ConfigError(ValueError):
    """A setting that cannot be used; the message is one line naming the key."""


# --------------------------------------------------------------------------- value checks


def _parse_int(key: str, value: str, lo: int | None, hi: int | None) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise ConfigError(f"invalid value {value!r} for {key}: expected an integer") from None
    if lo is not None and n < lo:
        raise ConfigError(f"invalid value {value!r} for {key}: must be at least {lo}")
    if hi is not None and n > hi:
        raise ConfigError(f"invalid value {value!r} for {key}: must be at most {hi}")
    return n


def _parse_bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v == "true":
        return True
    if v == "false":
        return False
    raise ConfigError(f"invalid value {value!r} for {key}: expected true or false")


def _parse_double(key: str, value: str, lo: float | None, hi: float | None) -> float:
    try:
        x = float(value.strip())
    except ValueError:
        raise ConfigError(f"invalid value {value!r} for {key}: expected a number") from None
    if math.isnan(x) or (lo is not None and x < lo) or (hi is not None and x > hi):
        raise ConfigError(f"invalid value {value!r} for {key}: must be in [{lo}, {hi}]")
    return x


_LISTENER_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def host_port(key: str, value: str) -> tuple[str, int]:
    """`HOST:PORT`, `[v6]:PORT` or a Kafka listener `NAME://HOST:PORT` (first entry)."""
    v = value.split(",")[0].strip()
    if "://" in v:
        v = v.split("://", 1)[1]
    if v.startswith("["):
        host, sep, port = v[1:].partition("]:")
    else:
        host, sep, port = v.rpartition(":")
    if not sep or not port:
        raise ConfigError(f"invalid value {value!r} for {key}: expected HOST:PORT")
    return (host or "0.0.0.0"), _parse_int(key, port, 0, 65535)


def _check_listeners(key: str, value: str) -> None:
    """Every entry is `NAME://HOST:PORT` or `HOST:PORT` (PLAINTEXT); the full rules (names,
    protocols, ports) are Kafka's and are applied by yak.security.listeners at start-up."""
    items = _items(value)
    if not items:
        raise ConfigError(f"invalid value {value!r} for {key}: no listener given")
    for item in items:
        host_port(key, item)


def _check_path(key: str, value: str) -> None:
    if not value.split(",")[0].strip():
        raise ConfigError(f"invalid value {value!r} for {key}: empty path")


def _check_listener_name(key: str, value: str) -> None:
    if not _LISTENER_NAME.match(value.strip()):
        raise ConfigError(f"invalid value {value!r} for {key}: not a listener name")


def _items(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _check_listener_names(key: str, value: str) -> None:
    for item in _items(value):
        _check_listener_name(key, item)


def _check_metadata_store(key: str, value: str) -> None:
    v = value.strip()
    if v == "local":
        return
    if not v.startswith("etcd://"):
        raise ConfigError(f"invalid value {value!r} for {key}: expected local or"
                          " etcd://HOST:PORT[,HOST:PORT...][/NAME]")
    hosts, _, name = v[len("etcd://"):].partition("/")
    for hp in hosts.split(","):
        try:
            host_port(key, hp.strip())
        except ConfigError:
            raise ConfigError(f"invalid value {value!r} for {key}: expected"
                              " etcd://HOST:PORT[,HOST:PORT...][/NAME]") from None
    name = name.strip("/")
    if name and (("/" in name) or not name.replace("-", "").replace("_", "").replace(
            ".", "").isalnum()):
        raise ConfigError(f"invalid value {value!r} for {key}: the cluster name {name!r} must"
                          " be letters, digits, '.', '_' or '-'")


def _check_remote_uri(key: str, value: str) -> None:
    """`s3://BUCKET[/PREFIX][?endpoint=...&region=...]` or `file:///PATH` (the form; whether
    the bucket answers is checked when the broker starts)."""
    v = value.strip()
    if v.startswith("file://") and len(v) > len("file://") and v[len("file://")] == "/":
        return
    if v.startswith("s3://"):
        bucket = v[len("s3://"):].split("?", 1)[0].split("/", 1)[0]
        if re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
            return
    raise ConfigError(f"invalid value {value!r} for {key}: expected"
                      " s3://BUCKET[/PREFIX][?endpoint=URL&region=R] or file:///PATH")


def _check_credential(key: str, value: str) -> None:
    if not value or not value.isprintable() or any(c.isspace() for c in value):
        raise ConfigError(f"invalid value for {key}: a non-empty key without spaces")


def _check_rack(key: str, value: str) -> None:
    if not value.strip() or not value.isprintable():
        raise ConfigError(f"invalid value {value!r} for {key}: a rack is a non-empty,"
                          " printable name")


def _check_cordoned(key: str, value: str) -> None:
    bad = [d for d in _items(value) if d != "*" and not (d.startswith("/") and d.isprintable())]
    if bad:
        raise ConfigError(f"invalid value {value!r} for {key}: expected * or absolute log"
                          " dir paths")


def _check_roles(key: str, value: str) -> None:
    roles = _items(value)
    if not roles or any(r not in ("broker", "controller") for r in roles):
        raise ConfigError(f"invalid value {value!r} for {key}: expected broker and/or controller")


def _check_voters(key: str, value: str) -> None:
    for item in _items(value):
        node, sep, address = item.partition("@")
        if not sep or not node.strip().isdigit():
            raise ConfigError(f"invalid value {value!r} for {key}: expected ID@HOST:PORT,...")
        host_port(key, address)


def _check_protocol_map(key: str, value: str) -> None:
    for item in _items(value):
        name, sep, proto = item.partition(":")
        if not sep or not _LISTENER_NAME.match(name) or proto not in _SECURITY_PROTOCOLS:
            raise ConfigError(
                f"invalid value {value!r} for {key}: expected NAME:PROTOCOL,... with PROTOCOL one"
                " of " + ", ".join(_SECURITY_PROTOCOLS)
            )


# --------------------------------------------------------------------------- the record


@dataclass(frozen=True)
class Setting:
    """One Kafka setting: broker-level (`server.properties`) or a topic config.

    `default` is the string Kafka's DescribeConfigs shows (None: unset, Kafka's null).
    `field` names the `BrokerConfig` attribute a broker setting fills; `synonyms` (topic
    configs only) are the broker settings that set the topic default, in Kafka's
    precedence, each with the factor from its unit to the topic config's (hours -> ms).
    """

    name: str
    type: str  # Kafka's ConfigType: boolean, string, int, short, long, double, list, password
    default: str | None
    part: str = "broker"
    effect: str = ACTED
    field: str | None = None
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    check: Callable[[str, str], object] | None = None
    synonyms: tuple[tuple[str, int], ...] = ()
    doc: str = ""
    dynamic: bool = False  # a broker setting that may change while the broker runs

    def parse(self, value: str) -> Any:
        """Validate `value` (a string as written in a file) and return the typed value."""
        if self.type in ("int", "short", "long"):
            top = {"int": INT_MAX, "short": 32767, "long": LONG_MAX}[self.type]
            hi = top if self.hi is None else min(int(self.hi), top)
            lo = -top - 1 if self.lo is None else int(self.lo)
            return _parse_int(self.name, value, lo, hi)
        if self.type == "boolean":
            return _parse_bool(self.name, value)
        if self.type == "double":
            return _parse_double(self.name, value, self.lo, self.hi)
        if self.choices:
            v = ",".join(_items(value)) if self.type == "list" else value.strip()
            if v not in self.choices:
                raise ConfigError(
                    f"invalid value {value!r} for {self.name}: expected one of "
                    + ", ".join(self.choices)
                )
            return v
        if self.check is not None:
            self.check(self.name, value)
        if self.type == "list":
            return _items(value)
        return value

    def parse_default(self) -> Any:
        return None if self.default is None else self.parse(self.default)


def _b(name: str, type_: str, default: str | None, part: str, field_: str | None = None,
       *, effect: str = ACTED, lo: float | None = None, hi: float | None = None,
       choices: tuple[str, ...] = (), check: Callable[[str, str], object] | None = None,
       doc: str = "", dynamic: bool = False) -> Setting:
    return Setting(name, type_, default, part, effect, field_, lo, hi, choices, check, (), doc,
                   dynamic)


_CLEANUP = ("delete", "compact", "compact,delete", "delete,compact")
_COMPRESSION = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
_TS_TYPE = ("CreateTime", "LogAppendTime")
_LONG = str(LONG_MAX)

# --------------------------------------------------------------------------- topic configs

# Topic configs (Kafka's `TopicConfig` names). Defaults are Kafka 4.x's; the synonyms are
# the broker settings that set the default of every topic.
TOPIC_CONFIGS: dict[str, Setting] = {
    s.name: s
    for s in [
        Setting("segment.bytes", "int", "1073741824", "storage", lo=14,
                synonyms=(("log.segment.bytes", 1),)),
        Setting("segment.ms", "long", "604800000", "storage", lo=1,
                synonyms=(("log.roll.ms", 1), ("log.roll.hours", 3_600_000))),
        Setting("segment.index.bytes", "int", "10485760", "storage", lo=12,
                synonyms=(("log.index.size.max.bytes", 1),),
                doc="at least 12: one time-index entry"),
        Setting("index.interval.bytes", "int", "4096", "storage", lo=0,
                synonyms=(("log.index.interval.bytes", 1),)),
        Setting("retention.ms", "long", "604800000", "storage", lo=-1,
                synonyms=(("log.retention.ms", 1), ("log.retention.minutes", 60_000),
                          ("log.retention.hours", 3_600_000))),
        Setting("retention.bytes", "long", "-1", "storage",
                synonyms=(("log.retention.bytes", 1),)),
        Setting("max.message.bytes", "int", "1048588", "storage", lo=0,
                synonyms=(("message.max.bytes", 1),)),
        Setting("message.timestamp.type", "string", "CreateTime", "storage", choices=_TS_TYPE,
                synonyms=(("log.message.timestamp.type", 1),)),
        Setting("message.timestamp.before.max.ms", "long", _LONG, "storage", lo=0,
                synonyms=(("log.message.timestamp.before.max.ms", 1),)),
        Setting("message.timestamp.after.max.ms", "long", _LONG, "storage", lo=0,
                synonyms=(("log.message.timestamp.after.max.ms", 1),)),
        Setting("cleanup.policy", "list", "delete", "storage", choices=_CLEANUP,
                synonyms=(("log.cleanup.policy", 1),)),
        Setting("delete.retention.ms", "long", "86400000", "storage", lo=0,
                synonyms=(("log.cleaner.delete.retention.ms", 1),)),
        Setting("min.cleanable.dirty.ratio", "double", "0.5", "storage", lo=0, hi=1,
                synonyms=(("log.cleaner.min.cleanable.ratio", 1),)),
        Setting("min.compaction.lag.ms", "long", "0", "storage", lo=0,
                synonyms=(("log.cleaner.min.compaction.lag.ms", 1),)),
        Setting("max.compaction.lag.ms", "long", _LONG, "storage", lo=1,
                synonyms=(("log.cleaner.max.compaction.lag.ms", 1),)),
        Setting("flush.messages", "long", _LONG, "storage", lo=1,
                synonyms=(("log.flush.interval.messages", 1),)),
        Setting("flush.ms", "long", _LONG, "storage", lo=0,
                synonyms=(("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1))),
        Setting("file.delete.delay.ms", "long", "60000", "storage", lo=0,
                synonyms=(("log.segment.delete.delay.ms", 1),)),
        Setting("write.caching", "boolean", "true", "storage",
                doc="false: acks=all waits for the fsync (Redpanda's name)"),
        Setting("min.insync.replicas", "int", "1", "storage", lo=1,
                synonyms=(("min.insync.replicas", 1),)),
        Setting("unclean.leader.election.enable", "boolean", "false", "storage",
                synonyms=(("unclean.leader.election.enable", 1),)),
        Setting("compression.type", "string", "producer", "storage", choices=_COMPRESSION,
                synonyms=(("compression.type", 1),)),
        # Accepted so tools that always send them keep working; no effect in Yak.
        Setting("segment.jitter.ms", "long", "0", "storage", ACCEPTED, lo=0,
                synonyms=(("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000))),
        Setting("preallocate", "boolean", "false", "storage", ACCEPTED,
                synonyms=(("log.preallocate", 1),)),
        Setting("compression.gzip.level", "int", "-1", "storage", ACCEPTED, lo=-1, hi=9),
        Setting("compression.lz4.level", "int", "9", "storage", ACCEPTED, lo=1, hi=17),
        Setting("compression.zstd.level", "int", "3", "storage", ACCEPTED, lo=-131072, hi=22),
        Setting("leader.replication.throttled.replicas", "list", "", "storage", ACCEPTED),
        Setting("follower.replication.throttled.replicas", "list", "", "storage", ACCEPTED),
        # Tiered storage (KIP-405, docs/tiered.md). -2: the same as retention.ms/bytes.
        Setting("local.retention.ms", "long", "-2", "storage", lo=-2,
                synonyms=(("log.local.retention.ms", 1),),
                doc="how long a tiered topic keeps segments on the broker once uploaded"),
        Setting("local.retention.bytes", "long", "-2", "storage", lo=-2,
                synonyms=(("log.local.retention.bytes", 1),),
                doc="how much a tiered partition keeps on the broker once uploaded"),
        Setting("remote.storage.enable", "boolean", "false", "storage",
                doc="upload rolled segments to remote.storage.uri (not on compacted topics)"),
        # Removed in Kafka 4.0; Kafka 3.x accepts them with a deprecation warning.
        Setting("message.format.version", "string", "3.0-IV1", "storage", DEPRECATED),
        Setting("message.downconversion.enable", "boolean", "true", "storage", DEPRECATED),
        Setting("message.timestamp.difference.max.ms", "long", _LONG, "storage", DEPRECATED,
                lo=0),
    ]
}


def _synonym_settings() -> list[Setting]:
    """The broker-level synonyms of topic configs, derived from the topic config: same
    type, choices and bounds, scaled to the synonym's unit (a `log.retention.hours` of -1
    is still "forever")."""
    # In a chain of synonyms Kafka shows the default on the last one only
    # (log.retention.ms and .minutes are null, log.retention.hours=168).
    chain_defaults = {
        "log.roll.hours": "168", "log.retention.hours": "168", "log.roll.jitter.hours": "0",
        "log.flush.scheduler.interval.ms": _LONG,
    }
    out: list[Setting] = []
    seen: set[str] = set()
    for topic in TOPIC_CONFIGS.values():
        chain = len(topic.synonyms) > 1
        for name, factor in topic.synonyms:
            if name in seen:
                continue
            seen.add(name)
            default = chain_defaults.get(name) if chain else topic.default
            type_ = "int" if name.endswith((".hours", ".minutes")) else topic.type
            lo = topic.lo
            if lo is not None and lo > 0 and factor != 1:
                lo = math.ceil(lo / factor)
            hi = topic.hi if factor == 1 else None
            # Dynamic, as Kafka's DynamicLogConfig: a new default reaches every topic
            # without an override of its own at once.
            out.append(Setting(name, type_, default, "storage", topic.effect, None, lo, hi,
                               topic.choices, topic.check, (),
                               f"default of topic config {topic.name}", dynamic=True))
    return out


# --------------------------------------------------------------------------- security settings

# Listeners, TLS, SASL, authorization and quotas (yak/security reads them; per-listener
# overrides `listener.name.<listener>.[<mechanism>.]<key>` are resolved by
# `yak.security.settings.get_setting`, and accepted by the loader by that prefix).
_S = "security"
_SECURITY_SETTINGS: list[Setting] = [
    # listeners (`listeners` and `advertised.listeners` are with the broker's settings)
    _b("listener.security.protocol.map", "list",
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", _S,
       check=_check_protocol_map, doc="listener name -> security protocol"),
    _b("inter.broker.listener.name", "string", None, _S, check=_check_listener_name,
       doc="listener brokers use to talk to each other"),
    _b("security.inter.broker.protocol", "string", "PLAINTEXT", _S,
       choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
       doc="inter-broker security protocol when inter.broker.listener.name is unset"),
    # SASL
    _b("sasl.enabled.mechanisms", "list", "GSSAPI", _S,
       doc="SASL mechanisms offered on SASL listeners"),
    _b("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", _S,
       doc="SASL mechanism brokers log in to each other with"),
    _b("sasl.server.max.receive.size", "int", "524288", _S, lo=1,
       doc="largest SASL token accepted before authentication"),
    _b("connections.max.reauth.ms", "long", "0", _S, lo=0,
       doc="KIP-368: a session must re-authenticate within this time (0: never)"),
    _b("sasl.server.callback.handler.class", "class", None, _S,
       doc="OAUTHBEARER: Kafka's OAuthBearerValidatorCallbackHandler validates signed tokens"
       " against sasl.oauthbearer.jwks.endpoint.url; unset: the unsecured validator"),
    _b("sasl.oauthbearer.jwks.endpoint.url", "string", None, _S,
       doc="file:// or https:// JSON Web Key Set that signs OAUTHBEARER tokens"),
    _b("sasl.oauthbearer.expected.audience", "list", "", _S,
       doc="an OAUTHBEARER token's aud must name one of these (empty: not checked)"),
    _b("sasl.oauthbearer.expected.issuer", "string", None, _S,
       doc="an OAUTHBEARER token's iss must be this (unset: not checked)"),
    _b("sasl.oauthbearer.sub.claim.name", "string", "sub", _S,
       doc="the token claim that names the principal"),
    _b("sasl.oauthbearer.clock.skew.seconds", "int", "30", _S, lo=0,
       doc="leeway for exp/iat/nbf of OAUTHBEARER tokens"),
    _b("connection.failed.authentication.delay.ms", "int", "100", _S, lo=0,
       doc="delay before answering a failed login (slows password guessing)"),
    _b("principal.builder.class", "class",
       "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder", _S,
       choices=("org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",),
       doc="only Kafka's default principal builder is implemented"),
    _b("sasl.jaas.config", "password", None, _S,
       doc="JAAS login config; on a broker only as "
       "listener.name.<listener>.<mechanism>.sasl.jaas.config"),
    # TLS
    # The keystore file is dynamic per listener and per broker (Kafka's rule):
    # `listener.name.<l>.ssl.keystore.location` changed on a broker is re-read at once.
    # Secrets are not: Yak keeps no password in the metadata (Kafka needs
    # password.encoder.secret for that).
    _b("ssl.keystore.type", "string", "JKS", _S, doc="only PEM is read by Yak", dynamic=True),
    _b("ssl.keystore.location", "string", None, _S, dynamic=True,
       doc="PEM file: private key then certificate chain"),
    _b("ssl.keystore.password", "password", None, _S, doc="not used with PEM (Kafka's rule)"),
    _b("ssl.key.password", "password", None, _S, doc="password of an encrypted PEM key"),
    _b("ssl.keystore.key", "password", None, _S, doc="inline PEM private key"),
    _b("ssl.keystore.certificate.chain", "password", None, _S,
       doc="inline PEM certificate chain"),
    _b("ssl.truststore.type", "string", "JKS", _S, doc="only PEM is read by Yak"),
    _b("ssl.truststore.location", "string", None, _S, doc="PEM file of trusted CAs"),
    _b("ssl.truststore.password", "password", None, _S, doc="not used with PEM (Kafka's rule)"),
    _b("ssl.truststore.certificates", "password", None, _S, doc="inline PEM trusted CAs"),
    _b("ssl.client.auth", "string", "none", _S, choices=("none", "requested", "required"),
       doc="ask for (requested) or demand (required) client certificates"),
    _b("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", _S),
    _b("ssl.protocol", "string", "TLSv1.3", _S),
    _b("ssl.cipher.suites", "list", "", _S, doc="IANA or OpenSSL names; empty: defaults"),
    _b("ssl.principal.mapping.rules", "string", "DEFAULT", _S),
    _b("ssl.endpoint.identification.algorithm", "string", "https", _S,
       doc="client side: https verifies the broker's host name, empty does not"),
    # authorization
    _b("authorizer.class.name", "string", "", _S,
       doc="org.apache.kafka.metadata.authorizer.StandardAuthorizer enables ACLs"),
    _b("super.users", "string", None, _S, doc="principals separated by ';'"),
    _b("allow.everyone.if.no.acl.found", "boolean", "false", _S),
    # quotas
    _b("quota.window.num", "int", "11", _S, lo=1),
    _b("quota.window.size.seconds", "int", "1", _S, lo=1),
    _b("controller.quota.window.num", "int", "11", _S, lo=1),
    _b("controller.quota.window.size.seconds", "int", "1", _S, lo=1),
]

# Per-listener overrides of the settings above: `listener.name.<listener>.<key>`.
LISTENER_PREFIX = "listener.name."

# --------------------------------------------------------------------------- broker settings

BROKER_SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        # --- the broker process: identity, listeners, requests
        _b("node.id", "int", "1", "broker", "node_id", lo=0, doc="id of this broker"),
        _b("broker.id", "int", "1", "broker", "node_id", lo=0, doc="legacy synonym of node.id"),
        _b("listeners", "string", "PLAINTEXT://127.0.0.1:9092", "broker",
           check=_check_listeners, doc="NAME://HOST:PORT,... to accept on (HOST:PORT: PLAINTEXT)"),
        _b("advertised.listeners", "string", None, "broker", check=_check_listeners,
           doc="NAME://HOST:PORT,... given to clients, per listener"),
        _b("socket.request.max.bytes", "int", "104857600", "broker",
           "socket_request_max_bytes", lo=1),
        _b("num.partitions", "int", "1", "broker", "num_partitions", lo=1, dynamic=True),
        _b("default.replication.factor", "int", "1", "broker", "default_replication_factor",
           lo=1, hi=32767),
        _b("auto.create.topics.enable", "boolean", "true", "broker",
           "auto_create_topics_enable"),
        _b("delete.topic.enable", "boolean", "true", "broker", "delete_topic_enable"),
        _b("num.network.threads", "int", "3", "broker", effect=ACCEPTED, lo=1,
           doc="accepted; Yak uses one event loop", dynamic=True),
        _b("num.io.threads", "int", "8", "broker", effect=ACCEPTED, lo=1,
           doc="accepted; Yak uses one event loop", dynamic=True),
        _b("socket.send.buffer.bytes", "int", "102400", "broker", effect=ACCEPTED, lo=-1),
        _b("socket.sendfile.enable", "boolean", "true", "broker", "socket_sendfile_enable",
           doc="Yak's: Fetch records go from the segment files to plaintext sockets with"
           " sendfile (TLS listeners always copy them); false copies them everywhere"),
        _b("socket.receive.buffer.bytes", "int", "102400", "broker", effect=ACCEPTED, lo=-1),
        # --- the controller and cluster membership (issue 11; docs/cluster.md)
        _b("metadata.store", "string", "local", "cluster", "metadata_store",
           check=_check_metadata_store,
           doc="local (one broker, its own controller) or etcd://HOST:PORT[,...][/NAME]"),
        _b("broker.session.timeout.ms", "int", "9000", "cluster",
           "broker_session_timeout_ms", lo=1000,
           doc="a broker whose session lease is not renewed for this long is fenced"),
        _b("broker.heartbeat.interval.ms", "int", "2000", "cluster",
           "broker_heartbeat_interval_ms", lo=100,
           doc="how often a broker renews its session lease"),
        _b("broker.rack", "string", None, "cluster", "broker_rack", check=_check_rack,
           doc="rack of this broker, for rack-aware replica placement"),
        _b("replica.selector.class", "class", None, "cluster", "replica_selector_class",
           choices=("org.apache.kafka.common.replica.RackAwareReplicaSelector",),
           doc="KIP-392: a consumer with client.rack is sent to a replica in its rack"
           " (unset: consumers read from leaders only)"),
        _b("auto.leader.rebalance.enable", "boolean", "true", "cluster",
           "auto_leader_rebalance_enable", dynamic=True,
           doc="the controller moves leadership back to preferred replicas"),
        _b("leader.imbalance.check.interval.seconds", "long", "300", "cluster",
           "leader_imbalance_check_interval_seconds", lo=1),
        _b("leader.imbalance.per.broker.percentage", "int", "10", "cluster",
           "leader_imbalance_per_broker_percentage", lo=0, hi=100),
        _b("controlled.shutdown.enable", "boolean", "true", "cluster",
           "controlled_shutdown_enable",
           doc="on SIGTERM, move leadership away before exiting"),
        _b("broker.load.report.interval.ms", "int", "3000", "cluster",
           "broker_load_report_interval_ms", lo=0,
           doc="Yak's (issue 23): how often a broker publishes its load (CPU, event-loop"
           " busy share, bytes in/out per second, disk) in the metadata store; 0: never"),
        _b("cordoned.log.dirs", "list", "", "cluster", "cordoned_log_dirs", dynamic=True,
           check=_check_cordoned,
           doc="KIP-1066: log dirs that take no new replicas; any value (e.g. *) cordons a"
           " Yak broker, which has one log dir (set by yak cluster decommission)"),
        _b("partition.autobalancing.mode", "string", "node_add", "cluster",
           "partition_autobalancing_mode", choices=("off", "node_add", "continuous"),
           dynamic=True,
           doc="Yak's, after Redpanda's partition_autobalancing_mode (issue 23): the"
           " controller evens replicas across brokers when an empty broker joins"
           " (node_add), also every tick (continuous), or never (off)"),
        _b("partition.autobalancing.tick.interval.ms", "int", "30000", "cluster",
           "partition_autobalancing_tick_interval_ms", lo=100, dynamic=True,
           doc="Yak's, after Redpanda's partition_autobalancing_tick_interval_ms: how often"
           " continuous balancing plans"),
        _b("partition.autobalancing.disk.imbalance.threshold.percent", "int", "20",
           "cluster", "partition_autobalancing_disk_imbalance_threshold_percent", lo=0,
           hi=100, dynamic=True,
           doc="Yak's, after Redpanda's partition_autobalancing_max_disk_usage_percent:"
           " balancing also evens bytes when the brokers' partition logs differ by more"
           " than this percent of the fullest (100: never)"),
        _b("broker.liveness.probe.enable", "boolean", "true", "cluster",
           "broker_liveness_probe_enable",
           doc="Yak's (issue 27): the controller fences a broker at once when its"
           " connection to it closes and its listener then refuses connections (the"
           " process is gone), without waiting for broker.session.timeout.ms"),
        _b("broker.liveness.unresponsive.ms", "int", "2000", "cluster",
           "broker_liveness_unresponsive_ms", lo=0,
           doc="Yak's (issue 27): the probe also pings each broker on its connection"
           " (ApiVersions, every 250 ms) and fences one that answered nothing for this"
           " long (frozen: SIGSTOP, a long GC pause), unless the prober itself was late"
           " or no majority of the brokers agrees (a cut-off prober judges nobody);"
           " 0: never judged frozen, only by its session"),
        _b("process.roles", "list", "broker,controller", "cluster", effect=ACCEPTED,
           check=_check_roles),
        _b("controller.quorum.voters", "list", "", "cluster", effect=ACCEPTED,
           check=_check_voters),
        _b("controller.listener.names", "list", "", "cluster", effect=ACCEPTED,
           check=_check_listener_names),
        # --- storage (the log manager); topic-config synonyms are added below
        _b("log.dirs", "string", None, "storage", check=_check_path,
           doc="data directory (first entry used)"),
        _b("log.dir", "string", "./yak-data", "storage", check=_check_path,
           doc="data directory if log.dirs is unset"),
        _b("log.retention.check.interval.ms", "long", "300000", "storage", effect=ACCEPTED,
           lo=1, doc="accepted; maintenance runs every second"),
        _b("log.flush.offset.checkpoint.interval.ms", "int", "60000", "storage",
           effect=ACCEPTED, lo=0),
        _b("log.cleaner.enable", "boolean", "true", "storage", effect=ACCEPTED),
        _b("log.cleaner.threads", "int", "1", "storage", effect=ACCEPTED, lo=0, dynamic=True,
           doc="accepted; Yak's log manager runs one cleaner thread"),
        _b("num.recovery.threads.per.data.dir", "int", "2", "storage",
           "num_recovery_threads_per_data_dir", lo=1,
           doc="threads that load the logs at start-up, recovering them after a crash"),
        _b("producer.id.expiration.ms", "int", "86400000", "storage", effect=ACCEPTED, lo=1),
        # --- tiered storage (KIP-405; yak.tiered, docs/tiered.md)
        _b("remote.log.storage.system.enable", "boolean", "false", "storage",
           doc="run the remote log manager: topics with remote.storage.enable are tiered"),
        _b("remote.storage.uri", "string", None, "storage", check=_check_remote_uri,
           doc="Yak's: s3://BUCKET[/PREFIX][?endpoint=URL&region=R] or file:///PATH"),
        _b("remote.storage.access.key.id", "string", None, "storage", check=_check_credential,
           doc="Yak's: S3 access key (else AWS_ACCESS_KEY_ID)"),
        _b("remote.storage.secret.access.key", "password", None, "storage",
           check=_check_credential, doc="Yak's: S3 secret key (else AWS_SECRET_ACCESS_KEY)"),
        _b("remote.log.manager.task.interval.ms", "long", "30000", "storage", lo=1,
           doc="how often each partition's uploads and remote retention run"),
        _b("remote.log.manager.copier.thread.pool.size", "int", "10", "storage", lo=1,
           doc="segment uploads in flight at once, over all partitions"),
        _b("remote.log.manager.copy.max.bytes.per.second", "long", _LONG, "storage", lo=1,
           doc="copy quota: upload rate over all partitions"),
        _b("remote.log.manager.task.retry.backoff.ms", "long", "500", "storage", lo=0,
           doc="first pause after a failed upload; doubles per failure"),
        _b("remote.log.manager.task.retry.backoff.max.ms", "long", "30000", "storage", lo=0),
        _b("remote.fetch.max.wait.ms", "int", "500", "storage", lo=1,
           doc="a Fetch waits this long for a remote read, then answers without it (the read"
           " goes on and fills the cache)"),
        _b("remote.log.reader.cache.bytes", "long", "134217728", "storage", lo=0,
           doc="Yak's: in-memory LRU cache of remote segment chunks"),
        _b("remote.log.manager.orphan.grace.ms", "long", "600000", "storage", lo=0,
           doc="Yak's: a leader deletes remote segment files no manifest names once they"
           " are this old (an older leader's upload may still be landing)"),
        _b("remote.log.manager.fetch.max.bytes.per.second", "long", _LONG, "storage", lo=1,
           doc="fetch quota (KIP-956): remote reads over all partitions; a Fetch waits up"
           " to remote.fetch.max.wait.ms for it, then answers the partition empty"),
        _b("remote.log.manager.copy.lag.max.bytes", "long", "1073741824", "storage", lo=-1,
           doc="Yak's disk guard: past this many bytes of rolled segments not uploaded yet"
           " (led here), a WARNING each minute and yak_tiered_disk_guard_active=1; -1 off;"
           " produce is never refused by it"),
        # --- the group coordinator
        _b("group.initial.rebalance.delay.ms", "int", "3000", "group",
           "group_initial_rebalance_delay_ms", lo=0),
        _b("group.min.session.timeout.ms", "int", "6000", "group",
           "group_min_session_timeout_ms", lo=0),
        _b("group.max.session.timeout.ms", "int", "1800000", "group",
           "group_max_session_timeout_ms", lo=0),
        _b("group.max.size", "int", str(INT_MAX), "group", "group_max_size", lo=1),
        _b("group.consumer.session.timeout.ms", "int", "45000", "group",
           "group_consumer_session_timeout_ms", lo=1,
           doc="KIP-848 member session timeout"),
        _b("group.consumer.heartbeat.interval.ms", "int", "5000", "group",
           "group_consumer_heartbeat_interval_ms", lo=1,
           doc="KIP-848 heartbeat interval given to members"),
        # bounds of a consumer group's own consumer.* group configs (issue 24)
        _b("group.consumer.min.session.timeout.ms", "int", "45000", "group", lo=1,
           doc="lowest consumer.session.timeout.ms a group may set"),
        _b("group.consumer.max.session.timeout.ms", "int", "60000", "group", lo=1,
           doc="highest consumer.session.timeout.ms a group may set"),
        _b("group.consumer.min.heartbeat.interval.ms", "int", "5000", "group", lo=1,
           doc="lowest consumer.heartbeat.interval.ms a group may set"),
        _b("group.consumer.max.heartbeat.interval.ms", "int", "15000", "group", lo=1,
           doc="highest consumer.heartbeat.interval.ms a group may set"),
        # --- share groups (KIP-932, issue 24; docs/share-groups.md)
        _b("group.share.record.lock.duration.ms", "int", "30000", "group",
           "group_share_record_lock_duration_ms", lo=1000, hi=3600000,
           doc="acquisition lock of a share-group record, unless the group sets its own"),
        _b("group.share.min.record.lock.duration.ms", "int", "15000", "group",
           "group_share_min_record_lock_duration_ms", lo=1000, hi=3600000,
           doc="lowest share.record.lock.duration.ms a group may set"),
        _b("group.share.max.record.lock.duration.ms", "int", "60000", "group",
           "group_share_max_record_lock_duration_ms", lo=1000, hi=3600000,
           doc="highest share.record.lock.duration.ms a group may set"),
        _b("group.share.delivery.count.limit", "int", "5", "group",
           "group_share_delivery_count_limit", lo=2, hi=10,
           doc="deliveries after which a share-group record is archived"),
        _b("group.share.min.delivery.count.limit", "int", "2", "group",
           "group_share_min_delivery_count_limit", lo=2, hi=10),
        _b("group.share.max.delivery.count.limit", "int", "10", "group",
           "group_share_max_delivery_count_limit", lo=2, hi=10),
        _b("group.share.partition.max.record.locks", "int", "2000", "group",
           "group_share_partition_max_record_locks", lo=100, hi=10000,
           doc="most in-flight records of one share partition"),
        _b("group.share.session.timeout.ms", "int", "45000", "group",
           "group_share_session_timeout_ms", lo=1),
        _b("group.share.heartbeat.interval.ms", "int", "5000", "group",
           "group_share_heartbeat_interval_ms", lo=1),
        _b("group.share.min.session.timeout.ms", "int", "45000", "group", lo=1,
           doc="lowest share.session.timeout.ms a group may set"),
        _b("group.share.max.session.timeout.ms", "int", "60000", "group", lo=1,
           doc="highest share.session.timeout.ms a group may set"),
        _b("group.share.min.heartbeat.interval.ms", "int", "5000", "group", lo=1,
           doc="lowest share.heartbeat.interval.ms a group may set"),
        _b("group.share.max.heartbeat.interval.ms", "int", "15000", "group", lo=1,
           doc="highest share.heartbeat.interval.ms a group may set"),
        _b("group.share.max.size", "int", "200", "group", "group_share_max_size", lo=1,
           hi=1000),
        _b("group.share.max.share.sessions", "int", "2000", "group",
           "group_share_max_share_sessions", lo=1),
        _b("share.coordinator.state.topic.num.partitions", "int", "50", "group", lo=1,
           doc="partitions of __share_group_state (the share coordinator's durable state)"),
        _b("share.coordinator.state.topic.replication.factor", "short", "3", "group", lo=1,
           doc="replicas of __share_group_state (capped at the registered brokers)"),
        _b("share.coordinator.state.topic.min.isr", "short", "2", "group", lo=1,
           doc="min.insync.replicas of __share_group_state (at most its replicas)"),
        _b("share.coordinator.snapshot.update.records.per.snapshot", "int", "500", "group",
           lo=0, hi=500, doc="ShareUpdate records of a share partition between two of its"
           " ShareSnapshot records"),
        _b("share.coordinator.write.timeout.ms", "int", "5000", "group", lo=1,
           doc="how long a share-state write waits for its append (acks=all)"),
        _b("share.coordinator.state.topic.prune.interval.ms", "int", "300000", "group",
           lo=1, doc="how often records of __share_group_state below every share"
           " partition's latest snapshot are deleted"),
        _b("offsets.retention.minutes", "int", "10080", "group", "offsets_retention_minutes",
           lo=1),
        _b("offsets.retention.check.interval.ms", "long", "600000", "group",
           "offsets_retention_check_interval_ms", lo=1),
        _b("offset.metadata.max.bytes", "int", "4096", "group", "offset_metadata_max_bytes",
           lo=0),
        _b("offsets.topic.num.partitions", "int", "50", "group", "offsets_topic_num_partitions",
           lo=1),
        _b("offsets.topic.segment.bytes", "int", "104857600", "group",
           "offsets_topic_segment_bytes", lo=14),
        _b("offsets.topic.replication.factor", "short", "3", "group",
           "offsets_topic_replication_factor", lo=1,
           doc="replicas of __consumer_offsets (capped at the registered brokers)"),
        _b("offsets.commit.timeout.ms", "int", "5000", "group", "offsets_commit_timeout_ms",
           lo=1, doc="how long an offset commit waits for its append"),
        # --- the transaction coordinator
        _b("transaction.state.log.num.partitions", "int", "50", "txn",
           "transaction_state_log_num_partitions", lo=1),
        _b("transaction.state.log.replication.factor", "short", "3", "txn",
           "transaction_state_log_replication_factor", lo=1,
           doc="replicas of __transaction_state (capped at the registered brokers)"),
        _b("transaction.state.log.min.isr", "int", "2", "txn", "transaction_state_log_min_isr",
           lo=1, doc="min.insync.replicas of __transaction_state (at most its replicas)"),
        _b("transaction.state.log.segment.bytes", "int", "104857600", "txn",
           "transaction_state_log_segment_bytes", lo=14),
        _b("transactional.id.expiration.ms", "int", "604800000", "txn",
           "transactional_id_expiration_ms", lo=1),
        _b("transaction.max.timeout.ms", "int", "900000", "txn", "transaction_max_timeout_ms",
           lo=1),
        _b("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", "10000", "txn",
           "transaction_abort_timed_out_transaction_cleanup_interval_ms", lo=1),
        _b("transaction.remove.expired.transaction.cleanup.interval.ms", "int", "3600000", "txn",
           "transaction_remove_expired_transaction_cleanup_interval_ms", lo=1),
        # --- replication (issue 11): the followers' fetchers and the leader's ISR
        _b("replica.lag.time.max.ms", "long", "30000", "cluster", "replica_lag_time_max_ms",
           lo=1, doc="a follower that has not caught up for this long leaves the ISR"),
        _b("replica.fetch.dead.ms", "long", "1200", "cluster", "replica_fetch_dead_ms",
           lo=0, doc="a follower that fetched and then stopped (its connection closed, or"
           " frozen) for this long leaves the ISR without waiting for"
           " replica.lag.time.max.ms (Yak's, issue 27); 0: the lag bound alone"),
        _b("replica.fetch.wait.max.ms", "int", "500", "cluster", "replica_fetch_wait_max_ms",
           lo=0, doc="how long a follower's fetch waits at the leader for new data"),
        _b("replica.fetch.min.bytes", "int", "1", "cluster", "replica_fetch_min_bytes", lo=1),
        _b("replica.fetch.max.bytes", "int", "4194304", "cluster", "replica_fetch_max_bytes",
           lo=0, doc="per partition (a larger first batch is still fetched whole); Yak's"
           " default is 4 MiB, Kafka's 1 MiB: each fetch costs the leader and the follower"
           " Python work of its own; at 1 KiB records 4 MiB cut an RF=3 leader's CPU per"
           " message by 22-30% (docs/benchmarks/replication.md, section 7)"),
        _b("replica.fetch.response.max.bytes", "int", "10485760", "cluster",
           "replica_fetch_response_max_bytes", lo=0),
        _b("replica.fetch.backoff.ms", "int", "1000", "cluster", "replica_fetch_backoff_ms",
           lo=0, doc="pause after a failed fetch before the partition is fetched again"),
        _b("replica.socket.timeout.ms", "int", "30000", "cluster",
           "replica_socket_timeout_ms", lo=1,
           doc="a fetch unanswered for this long is abandoned and the connection closed"),
        _b("num.replica.fetchers", "int", "1", "cluster", "num_replica_fetchers", lo=1,
           doc="fetcher connections per source broker"),
        # KIP-73 replication throttles (bytes/s), dynamic only in Kafka's use
        # (yak/cluster/replication_throttle.py).
        _b("leader.replication.throttled.rate", "long", _LONG, "cluster",
           "leader_replication_throttled_rate", lo=1, dynamic=True,
           doc="bytes/s a leader sends to out-of-sync followers of the replicas its topics"
           " name in leader.replication.throttled.replicas"),
        _b("follower.replication.throttled.rate", "long", _LONG, "cluster",
           "follower_replication_throttled_rate", lo=1, dynamic=True,
           doc="bytes/s a follower fetches for the out-of-sync replicas its topics name in"
           " follower.replication.throttled.replicas"),
    ]
    + _SECURITY_SETTINGS
    + _synonym_settings()
}


def topic_config_for_broker_key(name: str) -> tuple[Setting, int] | None:
    """The topic config a broker setting is a synonym of, with the unit factor."""
    return _SYNONYM_OF.get(name)


_SYNONYM_OF: dict[str, tuple[Setting, int]] = {
    broker: (topic, factor)
    for topic in TOPIC_CONFIGS.values()
    for broker, factor in topic.synonyms
}


def resolve_topic_defaults(settings: Mapping[str, str]) -> dict[str, str]:
    """Topic-config defaults from the broker settings that were set, in Kafka's precedence
    (`log.retention.ms` over `.minutes` over `.hours`). Values must already be valid."""
    out: dict[str, str] = {}
    for topic in TOPIC_CONFIGS.values():
        for broker_key, factor in topic.synonyms:
            if broker_key in settings:
                value = settings[broker_key].strip()
                if factor != 1:
                    n = int(value)
                    value = str(n * factor if n >= 0 else -1)
                elif topic.type == "list":
                    value = ",".join(_items(value))
                out[topic.name] = value
                break
    return out


# The broker settings that may change while the broker runs (Kafka's dynamic ones).
DYNAMIC_BROKER_SETTINGS: frozenset[str] = frozenset(
    k for k, s in BROKER_SETTINGS.items() if s.dynamic)
# Of those, the ones set only per listener and per broker (`listener.name.<l>.<key>`).
PER_LISTENER_DYNAMIC = "ssl."


def dynamic_setting(name: str) -> Setting | None:
    """The dynamic setting `name` sets (a plain key, or a per-listener one
    `listener.name.<l>.ssl.keystore.location`), None if `name` is read-only or unknown."""
    if name.startswith(LISTENER_PREFIX):
        _listener, _, base = name[len(LISTENER_PREFIX):].partition(".")
        return BROKER_SETTINGS[base] if (base.startswith(PER_LISTENER_DYNAMIC)
                                         and base in DYNAMIC_BROKER_SETTINGS) else None
    return BROKER_SETTINGS[name] if name in DYNAMIC_BROKER_SETTINGS else None
