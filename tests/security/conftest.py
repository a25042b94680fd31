"""Certificates made at test time (trustme) and real brokers with secured listeners.

    certs                  CA, broker PEM keystore (key, certificate, CA in one file, as
                           Kafka's PEM keystore), client certificates for mTLS
    secured_broker(...)    a `yak serve` subprocess with the listeners asked for, each on
                           its own free port; `.listener_port["SASL_SSL"]`, `.addr(name)`
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from conftest import YakBroker, free_port

JAAS_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
JAAS_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@dataclass(frozen=True)
class Certs:
    dir: Path
    ca: Path  # the CA certificate (clients' truststore)
    broker: Path  # key + certificate + CA, one PEM file (Kafka's PEM keystore)
    alice_cert: Path  # client certificate CN=alice,O=acme (and its key in alice_key)
    alice_key: Path
    alice_pem: Path  # key + certificate in one file (Java's PEM keystore)
    stranger_cert: Path  # CN=stranger, no O: matches no O=acme mapping rule
    stranger_key: Path


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def make_certs(d: Path) -> Certs:
    ca = trustme.CA(organization_name="Yak Test CA")
    server = ca.issue_cert("localhost", "127.0.0.1")
    (d / "ca.pem").write_bytes(ca.cert_pem.bytes())
    (d / "broker.pem").write_bytes(
        server.private_key_pem.bytes()
        + b"".join(b.bytes() for b in server.cert_chain_pems)
        + ca.cert_pem.bytes()
    )
    alice = ca.issue_cert("alice@example.com", common_name="alice", organization_name="acme")
    (d / "alice.crt").write_bytes(b"".join(b.bytes() for b in alice.cert_chain_pems))
    (d / "alice.key").write_bytes(alice.private_key_pem.bytes())
    (d / "alice.pem").write_bytes(
        alice.private_key_pem.bytes() + b"".join(b.bytes() for b in alice.cert_chain_pems))
    stranger = ca.issue_cert("stranger@example.com", common_name="stranger")
    (d / "stranger.crt").write_bytes(b"".join(b.bytes() for b in stranger.cert_chain_pems))
    (d / "stranger.key").write_bytes(stranger.private_key_pem.bytes())
    return Certs(d, d / "ca.pem", d / "broker.pem", d / "alice.crt", d / "alice.key",
                 d / "alice.pem", d / "stranger.crt", d / "stranger.key")


class SecuredBroker(YakBroker):
    """A broker whose listeners are named; `.bootstrap` is the first listener's address."""

    listener_port: dict[str, int]

    def addr(self, listener: str) -> str:
        return f"127.0.0.1:{self.listener_port[listener.upper()]}"


def secured_settings(listeners: list[str], certs: Certs, **extra: str) -> tuple[
        dict[str, int], dict[str, str]]:
    ports = {name.upper(): free_port() for name in listeners}
    settings = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.broker),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
    }
    settings.update(extra)
    return ports, settings


def start_secured(data_dir: Path, listeners: list[str], certs: Certs, http: str | None = None,
                  args: list[str] | None = None, **extra: str) -> SecuredBroker:
    """`http="127.0.0.1:PORT"` also starts the embedded gateway; `args`: more `yak serve`
    options (`--http-auth basic`, `--grpc ...`)."""
    ports, settings = secured_settings(listeners, certs, **extra)
    b = SecuredBroker(data_dir, settings, port=next(iter(ports.values())), http=http)
    b.listener_port = ports
    b.args = list(args or [])
    return b.start()  # type: ignore[return-value]


@pytest.fixture
def secured_broker(tmp_path: Path, certs: Certs) -> Iterator[Callable[..., SecuredBroker]]:
    started: list[SecuredBroker] = []

    def make(listeners: list[str], http: str | None = None, args: list[str] | None = None,
             **extra: str) -> SecuredBroker:
        d = tmp_path / f"secured-{len(started)}"
        d.mkdir()
        b = start_secured(d, listeners, certs, http=http, args=args, **extra)
        started.append(b)
        return b

    yield make
    for b in started:
        with contextlib.suppress(Exception):
            b.stop(10)
        b.kill()


def plain_users(**users: str) -> str:
    return JAAS_PLAIN.format(users=" ".join(f'user_{u}="{p}"' for u, p in users.items()))
