"""DescribeConfigs and IncrementalAlterConfigs for `yak config`, sent to the right broker.

Why not confluent-kafka's AdminClient, as `yak topic` uses: librdkafka refuses the empty
resource name, and the empty BROKER name is the cluster-wide default (Kafka's
`kafka-configs --entity-default`, issue 23). So these go over `yak.client`'s blocking
connection, with the command's TLS/SASL settings.

Where each request goes follows Kafka's AdminClient: a broker's own resource (its node id)
to that broker, which refuses another's id; the cluster default, topics and groups (GROUP,
issue 24: any broker answers from the cluster-wide store) to the bootstrap one. Versions are negotiated once per connection from ApiVersions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from yak.client.connection import BrokerConnectionError, Connection
from yak.protocol.kio_compat import build, schema_module
from yak.security.client import ClientSecurity

TOPIC, BROKER, GROUP = 2, 4, 32  # Kafka's ConfigResource types
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations

# Kafka's ConfigSource ids, by the names its tools print.
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
           6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG",
           8: "DYNAMIC_GROUP_CONFIG"}
# The values a change made (what `describe` shows without --all).
DYNAMIC_SOURCES = frozenset({SOURCES[1], SOURCES[2], SOURCES[3], SOURCES[8]})

# Preferred versions, newest first (api key, versions).
_APIS = {"metadata": (3, (12, 9, 5, 1)), "describe_configs": (32, (4, 3, 2, 1)),
         "incremental_alter_configs": (44, (1, 0))}


class ConfigWireError(Exception):
    """The broker answered a resource with an error: Kafka's code and message."""

    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message or "")
        self.code = code
        self.message = message


class NoSuchBroker(Exception):
    """The node id is not among the cluster's brokers (`brokers` lists those that are)."""

    def __init__(self, node_id: int, brokers: list[int]) -> None:
        super().__init__(node_id)
        self.node_id = node_id
        self.brokers = brokers


@dataclass(frozen=True)
class Entry:
    """One config as DescribeConfigs answers it (value None: sensitive or unset)."""

    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool
    synonyms: list[tuple[str, str | None, str]] = field(default_factory=list)


class _Link:
    """One connection plus the versions it negotiated."""

    def __init__(self, host: str, port: int, timeout_s: float,
                 security: ClientSecurity | None,
                 apis: dict[str, tuple[int, tuple[int, ...]]] | None = None) -> None:
        self.conn = Connection(host, port, client_id="yak-cli", timeout_s=timeout_s,
                               security=security)
        req = schema_module("api_versions", 3, "request").ApiVersionsRequest
        resp = self.conn.send(
            build(req, client_software_name="yak-cli", client_software_version="0.1"),
            schema_module("api_versions", 3, "response").ApiVersionsResponse)
        ranges = {int(k.api_key): (int(k.min_version), int(k.max_version))
                  for k in resp.api_keys}
        self.versions: dict[str, int] = {}
        for api, (key, prefs) in (apis or _APIS).items():
            lo, hi = ranges.get(key, (0, -1))
            self.versions[api] = next((v for v in prefs if lo <= v <= hi), -1)

    def send(self, api: str, payload: str, **fields: Any) -> Any:
        version = self.versions[api]
        if version < 0:
            raise BrokerConnectionError(
                f"broker {self.conn.host}:{self.conn.port} does not support {api}")
        req_mod = schema_module(api, version, "request")
        resp_mod = schema_module(api, version, "response")
        return self.conn.send(build(getattr(req_mod, payload + "Request"), **fields),
                              getattr(resp_mod, payload + "Response"))


class ConfigClient:
    """Connections to the bootstrap broker and, for one broker's resource, to that broker.

    `apis` (name -> (api key, preferred versions)) replaces the config APIs for another
    command that talks over the same connections (`yak partitions`, `reassign_wire.py`).
    """

    def __init__(self, bootstrap: str, timeout_s: float,
                 security: ClientSecurity | None,
                 apis: dict[str, tuple[int, tuple[int, ...]]] | None = None) -> None:
        self.apis = apis
        self.timeout_s = timeout_s
        self.security = security
        self.bootstrap = bootstrap
        self._links: dict[int | None, _Link] = {}

    def close(self) -> None:
        for link in self._links.values():
            link.conn.close()
        self._links.clear()

    def bootstrap_link(self) -> _Link:
        link = self._links.get(None)
        if link is not None:
            return link
        errors = []
        for host, port in [_hostport(s) for s in self.bootstrap.split(",") if s.strip()]:
            try:
                link = _Link(host, port, self.timeout_s, self.security, self.apis)
                break
            except BrokerConnectionError as exc:
                errors.append(str(exc))
        if link is None:
            raise BrokerConnectionError("; ".join(errors) or "no bootstrap address")
        self._links[None] = link
        return link

    def _broker_link(self, node_id: int) -> _Link:
        link = self._links.get(node_id)
        if link is not None:
            return link
        boot = self.bootstrap_link()
        resp = boot.send("metadata", "Metadata", topics=(),  # brokers only, no topics
                         allow_auto_topic_creation=False,
                         include_cluster_authorized_operations=False,
                         include_topic_authorized_operations=False)
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in resp.brokers}
        if node_id not in brokers:
            raise NoSuchBroker(node_id, sorted(brokers))
        link = _Link(*brokers[node_id], self.timeout_s, self.security, self.apis)
        self._links[node_id] = link
        return link

    def _link_for(self, resource_type: int, name: str) -> _Link:
        if resource_type == BROKER and name != "":
            return self._broker_link(int(name))
        return self.bootstrap_link()

    def describe(self, resource_type: int, name: str,
                 keys: list[str] | None = None) -> list[Entry]:
        """The resource's configs (only `keys` when given), with Kafka's sources."""
        link = self._link_for(resource_type, name)
        m = schema_module("describe_configs", link.versions["describe_configs"], "request")
        resp = link.send("describe_configs", "DescribeConfigs", resources=(build(
            m.DescribeConfigsResource, resource_type=resource_type, resource_name=name,
            configuration_keys=tuple(keys) if keys else None),),
            include_synonyms=True, include_documentation=False)
        (res,) = resp.results
        if res.error_code:
            raise ConfigWireError(int(res.error_code), res.error_message)
        return [Entry(c.name, c.value, SOURCES.get(int(c.config_source), "UNKNOWN"),
                      bool(c.read_only), bool(c.is_sensitive),
                      [(s.name, s.value, SOURCES.get(int(s.source), "UNKNOWN"))
                       for s in (getattr(c, "synonyms", None) or ())])
                for c in res.configs]

    def alter(self, resource_type: int, name: str,
              ops: list[tuple[str, int, str | None]], validate_only: bool = False) -> None:
        """IncrementalAlterConfigs of one resource: (key, SET/DELETE, value) each."""
        link = self._link_for(resource_type, name)
        m = schema_module("incremental_alter_configs",
                          link.versions["incremental_alter_configs"], "request")
        resp = link.send("incremental_alter_configs", "IncrementalAlterConfigs", resources=(
            build(m.AlterConfigsResource, resource_type=resource_type, resource_name=name,
                  configs=tuple(build(m.AlterableConfig, name=k, config_operation=op, value=v)
                                for k, op, v in ops)),),
            validate_only=validate_only)
        (res,) = resp.responses
        if res.error_code:
            raise ConfigWireError(int(res.error_code), res.error_message)


@contextmanager
def config_client(bootstrap: str, timeout_s: float,
                  security: ClientSecurity | None) -> Iterator[ConfigClient]:
    client = ConfigClient(bootstrap, timeout_s, security)
    try:
        yield client
    finally:
        client.close()


def _hostport(s: str) -> tuple[str, int]:
    s = s.strip().split("://", 1)[-1]
    host, _, port = s.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"invalid bootstrap address {s!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)
