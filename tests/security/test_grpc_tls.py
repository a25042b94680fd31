"""TLS (and mTLS) on the gRPC gateway port, from Kafka's PEM key store settings."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from conftest import free_port

from yak.gateway.grpc_api import gateway_pb2 as pb
from yak.gateway.grpc_api import gateway_pb2_grpc as pb_grpc


def _start(args: list[str], out: Path, ready: str) -> subprocess.Popen[bytes]:
    with open(out, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "yak.cli.main", *args], stdout=f,
                                stderr=subprocess.STDOUT, env=dict(os.environ))
    deadline = time.monotonic() + 30
    while ready not in out.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, out.read_text()
        time.sleep(0.1)  # back-off of this wait-for-ready loop
    return proc


def _list_topics(channel: grpc.Channel) -> list[str]:
    stub = pb_grpc.GatewayStub(channel)
    return [t.name for t in stub.ListTopics(pb.ListTopicsRequest(), timeout=15).topics]


def test_yak_serve_grpc_over_tls_with_the_brokers_key_store(tmp_path, certs):
    port, gport = free_port(), free_port()
    proc = _start(["serve", "--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{port}",
                   "--http", "none", "--grpc", f"127.0.0.1:{gport}", "--grpc-tls",
                   "--set", "ssl.keystore.type=PEM",
                   "--set", f"ssl.keystore.location={certs.broker}"],
                  tmp_path / "out", "gRPC gateway on")
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{gport}", creds) as ch:
            assert isinstance(_list_topics(ch), list)
        with grpc.insecure_channel(f"127.0.0.1:{gport}") as ch, \
                pytest.raises(grpc.RpcError):
            _list_topics(ch)  # plaintext gRPC to a TLS port
    finally:
        proc.terminate()
        proc.wait(20)


def test_yak_gateway_grpc_mtls(tmp_path, certs, broker):
    props = tmp_path / "grpc-tls.properties"
    props.write_text(f"ssl.keystore.type=PEM\nssl.keystore.location={certs.broker}\n"
                     f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
                     "ssl.client.auth=required\n")
    gport = free_port()
    proc = _start(["gateway", "--bootstrap", broker.bootstrap, "--http", "none",
                   "--grpc", f"127.0.0.1:{gport}", "--grpc-tls", str(props)],
                  tmp_path / "out", "ready")
    try:
        ca = certs.ca.read_bytes()
        with_cert = grpc.ssl_channel_credentials(
            ca, certs.alice_key.read_bytes(), certs.alice_cert.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{gport}", with_cert) as ch:
            assert isinstance(_list_topics(ch), list)
        without = grpc.ssl_channel_credentials(ca)
        with grpc.secure_channel(f"127.0.0.1:{gport}", without) as ch, \
                pytest.raises(grpc.RpcError):
            _list_topics(ch)
    finally:
        proc.terminate()
        proc.wait(20)


def test_bad_grpc_tls_file_is_a_usage_error(tmp_path, broker):
    props = tmp_path / "bad.properties"
    props.write_text("ssl.keystore.type=PEM\nssl.keystore.location=/nonexistent.pem\n")
    r = subprocess.run([sys.executable, "-m", "yak.cli.main", "gateway", "--bootstrap",
                        broker.bootstrap, "--http", "none", "--grpc", "127.0.0.1:0",
                        "--grpc-tls", str(props)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "ssl.keystore.location" in r.stderr and "Traceback" not in r.stderr
