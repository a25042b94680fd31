"""Listener settings: Kafka's parsing rules and one-line errors naming the key."""

from __future__ import annotations

import pytest

from yak.config import ConfigError
from yak.security.listeners import Endpoint, SecurityProtocol, parse_listeners
from yak.security.settings import get_setting

SP = SecurityProtocol


def test_default_is_one_plaintext_listener():
    cfg = parse_listeners({})
    assert [e.security_protocol for e in cfg.listeners] == [SP.PLAINTEXT]
    assert cfg.inter_broker_listener_name == "PLAINTEXT"
    assert cfg.advertised == cfg.listeners


def test_four_protocols_by_name_and_advertised_repeating_listeners():
    value = (
        "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,"
        "sasl_ssl://127.0.0.1:9094, SASL_PLAINTEXT://127.0.0.1:9095"
    )
    cfg = parse_listeners({"listeners": value, "advertised.listeners": value})
    assert [(e.listener_name, e.security_protocol, e.port) for e in cfg.listeners] == [
        ("PLAINTEXT", SP.PLAINTEXT, 9092),
        ("SSL", SP.SSL, 9093),
        ("SASL_SSL", SP.SASL_SSL, 9094),
        ("SASL_PLAINTEXT", SP.SASL_PLAINTEXT, 9095),
    ]
    assert cfg.advertised_for("sasl_ssl") == Endpoint("SASL_SSL", SP.SASL_SSL, "127.0.0.1", 9094)
    assert SP.SASL_SSL.uses_tls and SP.SASL_SSL.uses_sasl and not SP.SSL.uses_sasl


def test_named_listeners_with_protocol_map_and_advertised_hosts():
    cfg = parse_listeners(
        {
            "listeners": "INTERNAL://:9092,EXTERNAL://0.0.0.0:9093,V6://[::1]:9094",
            "advertised.listeners": "INTERNAL://broker1.internal:9092,EXTERNAL://kafka.example.com:443",
            "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT, EXTERNAL:SASL_SSL,V6:SSL",
            "inter.broker.listener.name": "internal",
        }
    )
    assert cfg.listener("internal").host is None and cfg.listener("internal").bind_host == "0.0.0.0"
    assert cfg.listener("V6").host == "::1" and str(cfg.listener("V6")) == "V6://[::1]:9094"
    assert cfg.advertised_for("EXTERNAL").host == "kafka.example.com"
    assert cfg.advertised_for("EXTERNAL").port == 443
    assert cfg.advertised_for("V6") is None  # not advertised
    assert cfg.inter_broker_listener_name == "INTERNAL"
    assert cfg.inter_broker_security_protocol == SP.SASL_PLAINTEXT
    assert cfg.listener("EXTERNAL").config_prefix == "listener.name.external."


def test_wildcard_listener_is_advertised_as_loopback():
    cfg = parse_listeners({"listeners": "SSL://0.0.0.0:9093,PLAINTEXT://:9092"})
    assert [e.host for e in cfg.advertised] == ["127.0.0.1", "127.0.0.1"]


def test_inter_broker_defaults_and_security_inter_broker_protocol():
    assert parse_listeners({"listeners": "SASL_SSL://h:1"}).inter_broker_listener_name == "SASL_SSL"
    cfg = parse_listeners({"listeners": "SSL://h:1,PLAINTEXT://h:2"})
    assert cfg.inter_broker_listener_name == "PLAINTEXT"
    cfg = parse_listeners(
        {"listeners": "SSL://h:1,PLAINTEXT://h:2", "security.inter.broker.protocol": "SSL"}
    )
    assert cfg.inter_broker_listener_name == "SSL"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"listeners": "PLAINTEXT://127.0.0.1"}, "Unable to parse PLAINTEXT://127.0.0.1"),
        ({"listeners": "FOO://h:1"}, "No security protocol defined for listener FOO"),
        ({"listeners": "PLAINTEXT://h:1,plaintext://h:2"}, "different name"),
        ({"listeners": "PLAINTEXT://h:1,SSL://h:1"}, "different port"),
        ({"listeners": "PLAINTEXT://10.0.0.1:1,SSL://10.0.0.2:1"}, "different port"),
        ({"listeners": "PLAINTEXT://h:70000"}, "out of range"),
        (
            {"listeners": "A://h:1", "listener.security.protocol.map": "A:TLS"},
            "Invalid security protocol `TLS` defined in listener.security.protocol.map",
        ),
        (
            {"listeners": "A://h:1", "listener.security.protocol.map": "A"},
            "listener.security.protocol.map",
        ),
        (
            {"listeners": "A://h:1", "listener.security.protocol.map": "A:SSL,a:PLAINTEXT"},
            "appears twice",
        ),
        # an explicit map replaces the default one (Kafka)
        (
            {"listeners": "PLAINTEXT://h:1", "listener.security.protocol.map": "A:SSL"},
            "No security protocol defined for listener PLAINTEXT",
        ),
        (
            {"listeners": "SSL://h:1", "advertised.listeners": "PLAINTEXT://h:1"},
            "advertised.listeners listener names must be equal to or a subset",
        ),
        (
            {"listeners": "SSL://h:1", "advertised.listeners": "SSL://0.0.0.0:1"},
            "nonroutable meta-address 0.0.0.0",
        ),
        (
            {
                "listeners": "SSL://h:1",
                "inter.broker.listener.name": "SSL",
                "security.inter.broker.protocol": "SSL",
            },
            "Only one of inter.broker.listener.name",
        ),
        (
            {"listeners": "SSL://h:1", "inter.broker.listener.name": "NOPE"},
            "Listener with name NOPE defined in inter.broker.listener.name not found",
        ),
        (
            {"listeners": "SSL://h:1", "security.inter.broker.protocol": "PLAINTEXT"},
            "inter.broker.listener.name must be a listener name defined in advertised.listeners",
        ),
        (
            {"listeners": "SSL://h:1", "security.inter.broker.protocol": "TLS"},
            "security.inter.broker.protocol",
        ),
        (
            {"listeners": "SSL://h:1", "listener.name.SSL.ssl.client.auth": "required"},
            "listener.name.ssl.ssl.client.auth",
        ),
    ],
)
def test_bad_listener_settings_are_one_line_errors(settings, message):
    with pytest.raises(ConfigError) as exc:
        parse_listeners(settings)
    text = str(exc.value)
    assert message in text
    assert "\n" not in text


def test_ipv4_and_ipv6_may_share_a_port_and_port_zero_may_repeat():
    cfg = parse_listeners(
        {
            "listeners": "A://127.0.0.1:9092,B://[::1]:9092,C://h:0,D://h:0",
            "listener.security.protocol.map": "A:SSL,B:SSL,C:PLAINTEXT,D:SSL",
        }
    )
    assert len(cfg.listeners) == 4


def test_advertised_listeners_may_share_ports():
    cfg = parse_listeners(
        {
            "listeners": "A://h:1,B://h:2",
            "advertised.listeners": "A://lb:443,B://lb:443",
            "listener.security.protocol.map": "A:SSL,B:SASL_SSL",
        }
    )
    assert {e.port for e in cfg.advertised} == {443}


def test_override_for_unknown_listener_is_a_warning():
    cfg = parse_listeners({"listeners": "SSL://h:1", "listener.name.other.ssl.client.auth": "x"})
    assert cfg.warnings == (
        "listener.name.other.ssl.client.auth is set for listener OTHER, which is not in listeners",
    )


def test_per_listener_override_lookup():
    s = {
        "ssl.client.auth": "requested",
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.external.plain.sasl.jaas.config": "X",
    }
    assert get_setting(s, "ssl.client.auth") == "requested"
    assert get_setting(s, "ssl.client.auth", listener="INTERNAL") == "required"
    assert get_setting(s, "ssl.client.auth", listener="EXTERNAL") == "requested"
    assert get_setting({}, "ssl.client.auth", listener="EXTERNAL") == "none"
    assert get_setting(s, "sasl.jaas.config", listener="EXTERNAL", mechanism="PLAIN") == "X"
    assert (
        get_setting(s, "sasl.jaas.config", listener="EXTERNAL", mechanism="SCRAM-SHA-256") is None
    )
    with pytest.raises(ConfigError, match="listener.name.internal.ssl.client.auth"):
        get_setting(
            {"listener.name.internal.ssl.client.auth": "maybe"},
            "ssl.client.auth",
            listener="INTERNAL",
        )
