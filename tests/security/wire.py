"""Helpers for the wire tests: client settings per listener, raw SASL exchanges."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from typing import Any

from broker.rawclient import RawClient
from confluent_kafka import Consumer, KafkaException, Producer

from yak.protocol import kio_compat


def rdkafka(addr: str, protocol: str = "PLAINTEXT", certs: Any = None, mech: str | None = None,
            user: str | None = None, password: str | None = None,
            client_cert: bool = False, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": addr, "security.protocol": protocol,
                            "log_level": 3}
    if protocol in ("SSL", "SASL_SSL"):
        conf["ssl.ca.location"] = str(certs.ca)
        if client_cert:
            conf["ssl.certificate.location"] = str(certs.alice_cert)
            conf["ssl.key.location"] = str(certs.alice_key)
    if mech is not None:
        conf.update({"sasl.mechanism": mech, "sasl.username": user, "sasl.password": password})
    conf.update(extra)
    return conf


def produce(conf: dict[str, Any], topic: str, values: list[bytes],
            timeout: float = 20.0) -> list[Any]:
    """Produce and flush; returns the delivery errors (None for each success)."""
    results: list[Any] = []
    p = Producer(conf)
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, msg: results.append(err))
    left = p.flush(timeout)
    assert left == 0, f"{left} messages not delivered within {timeout}s"
    return results


def consume(conf: dict[str, Any], topic: str, n: int, timeout: float = 20.0,
            group: str | None = None) -> list[bytes]:
    c = Consumer({**conf, "group.id": group or f"g-{topic}-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    out: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            out.append(m.value())
    finally:
        c.close()
    return out


class SaslRaw(RawClient):
    """A raw connection (TLS optional) for exact SASL sequences."""

    def __init__(self, addr: str, ca: Any = None, timeout: float = 10.0) -> None:
        super().__init__(addr, timeout)
        if ca is not None:
            ctx = ssl.create_default_context(cafile=str(ca))
            self.sock = ctx.wrap_socket(self.sock, server_hostname="127.0.0.1")

    def handshake(self, mechanism: str, version: int = 1) -> Any:
        mod = kio_compat.schema_module("sasl_handshake", version, "request")
        return self.request(mod.SaslHandshakeRequest(mechanism=mechanism))

    def authenticate(self, token: bytes, version: int = 2) -> Any:
        mod = kio_compat.schema_module("sasl_authenticate", version, "request")
        return self.request(mod.SaslAuthenticateRequest(auth_bytes=token))

    def metadata(self, topics: list[str] | None = None, version: int = 12) -> Any:
        mod = kio_compat.schema_module("metadata", version, "request")
        req = kio_compat.build(
            mod.MetadataRequest,
            topics=None if topics is None else tuple(
                kio_compat.build(mod.MetadataRequestTopic, name=t, topic_id=None)
                for t in topics),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        return self.request(req)

    def login_plain(self, user: str, password: str) -> Any:
        assert self.handshake("PLAIN").error_code == 0
        return self.authenticate(b"\0" + user.encode() + b"\0" + password.encode())


def closed_unanswered(c: RawClient, request: Any, wait: float = 5.0) -> bool:
    """Send `request`; True if the broker closes the connection without any answer."""
    c.send(request)
    c.sock.settimeout(wait)
    try:
        data = c.sock.recv(4)
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
    return data == b""


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def connect(addr: str, timeout: float = 10.0) -> socket.socket:
    host, port = addr.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)
