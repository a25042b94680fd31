"""Listeners: where the broker accepts connections, how each is secured, what it advertises.

A pure function (`parse_listeners`) from Kafka's raw settings to `ListenerConfig`, with
Kafka's rules and messages (kafka.utils.CoreUtils.listenerListToEndPoints, KafkaConfig):

- `listeners=NAME://HOST:PORT,...`; NAME is case-insensitive (normalised to upper case); an
  empty HOST means every interface. NAME must be a security protocol or be mapped by
  `listener.security.protocol.map=NAME:PROTOCOL,...` (which, when set, replaces Kafka's
  default identity map of the four protocol names).
- Listener names are distinct; ports are distinct unless exactly one IPv4 and one IPv6
  listener share a port (port 0, "any free port", may repeat).
- `advertised.listeners` defaults to `listeners`; its names are a subset of the listeners';
  it may repeat ports, but not advertise 0.0.0.0.
- `inter.broker.listener.name` (or `security.inter.broker.protocol`, never both) names the
  listener replication uses and must be advertised.

Two Yak choices where Kafka has no single-broker story (docs/security.md):
- With neither inter-broker setting given, Kafka demands a PLAINTEXT listener; Yak takes
  the PLAINTEXT listener if there is one, else the first listener, so a one-broker SASL_SSL
  setup needs no inter-broker line. Set explicitly, Kafka's validation applies.
- An all-interfaces host (empty, 0.0.0.0, ::) in `listeners`, or an empty host in
  `advertised.listeners`, is advertised as the loopback address, as `yak serve` always has
  (Kafka would advertise the machine's canonical host name).

`listener.name.<name>.<setting>` overrides are read by `yak.security.settings.get_setting`;
here they are only checked: an override for a listener that does not exist is reported in
`warnings` (Kafka ignores it silently), and an upper-case listener in the prefix, which
Kafka would silently ignore, is an error.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from yak.security.settings import get_setting
from yak.settings import BROKER_SETTINGS, ConfigError

__all__ = [
    "Endpoint",
    "ListenerConfig",
    "SecurityProtocol",
    "parse_listeners",
]


class SecurityProtocol(Enum):
    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


_DEFAULT_MAP = {p.name: p for p in SecurityProtocol}
_URI = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")
_WILDCARD_HOSTS = (None, "0.0.0.0", "::")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener: its (upper-case) name, protocol, host (None: all interfaces) and port."""

    listener_name: str
    security_protocol: SecurityProtocol
    host: str | None
    port: int

    @property
    def bind_host(self) -> str:
        """What to pass to bind(): Kafka's null host means every interface."""
        return "0.0.0.0" if self.host is None else self.host

    @property
    def config_prefix(self) -> str:
        """Kafka's `ListenerName.configPrefix()`: `listener.name.<name lowercased>.`"""
        return f"listener.name.{self.listener_name.lower()}."

    def __str__(self) -> str:
        host = "" if self.host is None else (f"[{self.host}]" if ":" in self.host else self.host)
        return f"{self.listener_name}://{host}:{self.port}"


@dataclass(frozen=True)
class ListenerConfig:
    listeners: tuple[Endpoint, ...]
    advertised: tuple[Endpoint, ...]
    protocol_map: Mapping[str, SecurityProtocol]
    inter_broker_listener_name: str
    inter_broker_security_protocol: SecurityProtocol
    warnings: tuple[str, ...] = ()

    def listener(self, name: str) -> Endpoint:
        for ep in self.listeners:
            if ep.listener_name == name.upper():
                return ep
        raise KeyError(name)

    def advertised_for(self, listener_name: str) -> Endpoint | None:
        """The endpoint Metadata/FindCoordinator answer on `listener_name` (None: that
        listener is not advertised, so clients on it learn no broker address)."""
        for ep in self.advertised:
            if ep.listener_name == listener_name.upper():
                return ep
        return None


def _raw(settings: Mapping[str, str], key: str) -> str | None:
    if key in settings:
        return settings[key]
    decl = BROKER_SETTINGS.get(key)
    return decl.default if decl is not None else None


def _parse_map(value: str | None) -> dict[str, SecurityProtocol]:
    key = "listener.security.protocol.map"
    if value is None or not value.strip():
        return dict(_DEFAULT_MAP)
    out: dict[str, SecurityProtocol] = {}
    for item in re.split(r"\s*,\s*", value.strip()):
        if not item:
            continue
        name, sep, proto = item.rpartition(":")
        name, proto = name.strip(), proto.strip()
        if not sep or not name or not proto:
            raise ConfigError(
                f"invalid value {value!r} for {key}: expected LISTENER:PROTOCOL pairs separated "
                "by commas"
            )
        try:
            sp = SecurityProtocol[proto.upper()]
        except KeyError:
            raise ConfigError(f"Invalid security protocol `{proto}` defined in {key}") from None
        name = name.upper()
        if name in out:
            raise ConfigError(f"invalid value {value!r} for {key}: listener {name} appears twice")
        out[name] = sp
    return out


def _parse_endpoints(
    key: str, value: str, protocol_map: Mapping[str, SecurityProtocol]
) -> list[Endpoint]:
    eps: list[Endpoint] = []
    for entry in re.split(r"\s*,\s*", value.strip()):
        if not entry:
            continue
        m = _URI.match(entry)
        if m is None:
            raise ConfigError(
                f"invalid value {value!r} for {key}: Unable to parse {entry} to a broker endpoint"
            )
        name = m.group(1).upper()
        host = m.group(2) or None
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"invalid value {value!r} for {key}: port {port} out of range")
        sp = protocol_map.get(name)
        if sp is None:
            raise ConfigError(
                f"invalid value {value!r} for {key}: No security protocol defined for listener "
                f"{name} (map it in listener.security.protocol.map)"
            )
        eps.append(Endpoint(name, sp, host, port))
    if not eps:
        raise ConfigError(f"invalid value {value!r} for {key}: no listener given")
    names = [e.listener_name for e in eps]
    if len(set(names)) != len(names):
        raise ConfigError(f"Each listener must have a different name, {key}: {value}")
    return eps


def _ip_version(host: str | None) -> int | None:
    if host is None:
        return None
    try:
        return ipaddress.ip_address(host.split("%")[0]).version
    except ValueError:
        return None


def _check_ports(key: str, value: str, eps: list[Endpoint]) -> None:
    by_port: dict[int, list[Endpoint]] = {}
    for e in eps:
        if e.port != 0:
            by_port.setdefault(e.port, []).append(e)
    for port, group in by_port.items():
        if len(group) < 2:
            continue
        versions = sorted(str(_ip_version(e.host)) for e in group)
        if len(group) == 2 and versions == ["4", "6"]:
            continue
        raise ConfigError(
            f"Each listener must have a different port unless exactly one listener has an IPv4 "
            f"address and the other IPv6 address, {key}: {value}, port: {port}"
        )


def _routable(e: Endpoint) -> Endpoint:
    """An all-interfaces host is advertised as loopback (Yak's rule for one-broker setups;
    Kafka would advertise the machine's canonical host name)."""
    if e.host not in _WILDCARD_HOSTS:
        return e
    return Endpoint(
        e.listener_name, e.security_protocol, "::1" if e.host == "::" else "127.0.0.1", e.port
    )


def _check_overrides(settings: Mapping[str, str], names: set[str]) -> list[str]:
    warnings: list[str] = []
    for k in settings:
        if not k.startswith("listener.name."):
            continue
        rest = k[len("listener.name.") :]
        lname, dot, setting = rest.partition(".")
        if not dot or not setting:
            raise ConfigError(f"invalid setting {k}: expected listener.name.<listener>.<setting>")
        if lname != lname.lower():
            raise ConfigError(
                f"invalid setting {k}: the listener name in a listener.name. prefix is "
                f"lower case (listener.name.{lname.lower()}.{setting})"
            )
        if lname.upper() not in names:
            warnings.append(f"{k} is set for listener {lname.upper()}, which is not in listeners")
    return warnings


def parse_listeners(settings: Mapping[str, str]) -> ListenerConfig:
    """Kafka's listener settings -> `ListenerConfig`; raises ConfigError (one line, naming
    the key) for anything Kafka would refuse to start with."""
    protocol_map = _parse_map(settings.get("listener.security.protocol.map"))
    lval = _raw(settings, "listeners") or ""
    listeners = _parse_endpoints("listeners", lval, protocol_map)
    _check_ports("listeners", lval, listeners)
    names = {e.listener_name for e in listeners}

    aval = settings.get("advertised.listeners")
    if aval is not None and aval.strip():
        advertised = _parse_endpoints("advertised.listeners", aval, protocol_map)
        extra = sorted({e.listener_name for e in advertised} - names)
        if extra:
            raise ConfigError(
                "advertised.listeners listener names must be equal to or a subset of the ones "
                f"defined in listeners. Found {','.join(e.listener_name for e in advertised)}. "
                f"The valid options based on the current configuration are {','.join(sorted(names))}"
            )
        for e in advertised:
            if e.host == "0.0.0.0":
                raise ConfigError(
                    "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. "
                    "Use a routable IP address."
                )
        advertised = [_routable(e) for e in advertised]
    else:
        advertised = [_routable(e) for e in listeners]
    adv_names = [e.listener_name for e in advertised]

    ibl = settings.get("inter.broker.listener.name")
    ibp_set = "security.inter.broker.protocol" in settings
    if ibl is not None and ibp_set:
        raise ConfigError(
            "Only one of inter.broker.listener.name and security.inter.broker.protocol "
            "should be set."
        )
    if ibl is not None:
        ib_name = ibl.strip().upper()
        if ib_name not in protocol_map:
            raise ConfigError(
                f"Listener with name {ib_name} defined in inter.broker.listener.name not found "
                "in listener.security.protocol.map."
            )
        ib_proto = protocol_map[ib_name]
        explicit = True
    elif ibp_set:
        ib_proto = SecurityProtocol[get_setting(settings, "security.inter.broker.protocol")]
        ib_name = ib_proto.name
        explicit = True
    else:
        plain = [e for e in listeners if e.listener_name == "PLAINTEXT"]
        chosen = plain[0] if plain else listeners[0]
        ib_name, ib_proto = chosen.listener_name, chosen.security_protocol
        explicit = False
    if explicit and ib_name not in adv_names:
        raise ConfigError(
            "inter.broker.listener.name must be a listener name defined in advertised.listeners. "
            f"The valid options based on currently configured listeners are {','.join(adv_names)}"
        )

    return ListenerConfig(
        listeners=tuple(listeners),
        advertised=tuple(advertised),
        protocol_map=protocol_map,
        inter_broker_listener_name=ib_name,
        inter_broker_security_protocol=ib_proto,
        warnings=tuple(_check_overrides(settings, names)),
    )
