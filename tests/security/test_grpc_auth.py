"""gRPC callers as Kafka principals (issue 13/14): `authorization: Basic` call metadata
(`yak serve --grpc-auth basic`: each user logged in to the cluster as itself) and the
mTLS client certificate (`yak gateway --grpc-auth mtls`: the certificate's principal,
for which the gateway acts after checking the cluster's ACLs). UNAUTHENTICATED for no
or refused credentials, PERMISSION_DENIED with Kafka's error name for what the ACLs
refuse. One real broker (SASL_SSL, StandardAuthorizer); grpcio's generated stubs.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator

import grpc
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from conftest import free_port

from security.conftest import JAAS_SCRAM, Certs, SecuredBroker, start_secured
from security.test_grpc_tls import _start
from security.wire import rdkafka
from yak.gateway.grpc_api import gateway_pb2 as pb
from yak.gateway.grpc_api import gateway_pb2_grpc as pb_grpc

ADMIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              'username="admin" password="admin-secret" user_admin="admin-secret";')
MAPPING = "RULE:^CN=([^,]+),OU=[^,]*,O=acme$/$1/"
Code = grpc.StatusCode


def _acl(rtype: ResourceType, name: str, principal: str, op: AclOperation) -> AclBinding:
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, principal, "*", op,
                      AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[SecuredBroker]:
    d = tmp_path_factory.mktemp("grpcauth") / "data"
    d.mkdir()
    gport = free_port()
    broker = start_secured(
        d, ["SASL_SSL"], certs,
        args=["--grpc", f"127.0.0.1:{gport}", "--grpc-tls", "--grpc-auth", "basic"],
        **{
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": ADMIN_JAAS,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": JAAS_SCRAM,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        })
    broker.grpc_port = gport  # type: ignore[attr-defined]
    admin = AdminClient(_admin_conf(broker, certs))
    ups = [UserScramCredentialUpsertion("alice", ScramCredentialInfo(
        ScramMechanism.SCRAM_SHA_512, 4096), b"alice-secret")]
    for f in admin.alter_user_scram_credentials(ups).values():
        f.result(15)
    for f in admin.create_topics([NewTopic(t, 1) for t in
                                  ("alice-topic", "other-topic", "read-only")]).values():
        f.result(15)
    acls = [_acl(ResourceType.TOPIC, "alice-topic", "User:alice", op)
            for op in (AclOperation.WRITE, AclOperation.READ)]
    acls += [_acl(ResourceType.TOPIC, "read-only", "User:alice", AclOperation.READ),
             _acl(ResourceType.GROUP, "alice-group", "User:alice", AclOperation.READ)]
    for f in admin.create_acls(acls).values():
        f.result(15)
    yield broker
    broker.stop(15)


def _admin_conf(b: SecuredBroker, certs: Certs) -> dict:
    return rdkafka(b.addr("SASL_SSL"), "SASL_SSL", certs, "PLAIN", "admin", "admin-secret")


def _basic(user: str, password: str) -> list[tuple[str, str]]:
    return [("authorization",
             "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())]


def _produce(stub: pb_grpc.GatewayStub, topic: str, md: list | None = None) -> pb.ProduceResponse:
    return stub.Produce(pb.ProduceRequest(topic=topic, records=[pb.Record(value=b"v")]),
                        metadata=md, timeout=30)


def _code(call) -> grpc.StatusCode:  # noqa: ANN001
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code(), e.value.details()


def test_basic_metadata_logs_the_user_in(b, certs):
    creds = grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
    alice = _basic("alice", "alice-secret")
    with grpc.secure_channel(f"127.0.0.1:{b.grpc_port}", creds) as ch:
        stub = pb_grpc.GatewayStub(ch)
        code, _ = _code(lambda: stub.ListTopics(pb.ListTopicsRequest(), timeout=15))
        assert code is Code.UNAUTHENTICATED
        code, msg = _code(lambda: _produce(stub, "alice-topic", _basic("alice", "wrong")))
        assert code is Code.UNAUTHENTICATED and "SASL_AUTHENTICATION_FAILED" in msg
        names = [t.name for t in stub.ListTopics(pb.ListTopicsRequest(), metadata=alice,
                                                 timeout=15).topics]
        assert "alice-topic" in names and "other-topic" not in names
        r = _produce(stub, "alice-topic", alice)
        assert r.results[0].error_code == 0 and r.results[0].offset == 0
        code, msg = _code(lambda: _produce(stub, "read-only", alice))
        assert code is Code.PERMISSION_DENIED and "TOPIC_AUTHORIZATION_FAILED" in msg
        code, msg = _code(lambda: _produce(stub, "other-topic", alice))
        assert code is Code.PERMISSION_DENIED and "TOPIC_AUTHORIZATION_FAILED" in msg
        # ProduceStream: the refused request's status travels in its response.
        reqs = [pb.ProduceRequest(request_id=1, topic="alice-topic",
                                  records=[pb.Record(value=b"s")]),
                pb.ProduceRequest(request_id=2, topic="read-only",
                                  records=[pb.Record(value=b"s")])]
        got = {r.request_id: r for r in stub.ProduceStream(iter(reqs), metadata=alice,
                                                            timeout=30)}
        assert got[1].results[0].error_code == 0
        assert got[2].status_code == Code.PERMISSION_DENIED.value[0]
        assert "TOPIC_AUTHORIZATION_FAILED" in got[2].status_message
        # Consume in a group alice may use: her records; in another group: refused.
        stream = stub.Consume(pb.ConsumeRequest(group_id="alice-group", topics=["alice-topic"],
                                                auto_offset_reset="earliest"),
                              metadata=alice, timeout=60)
        first = next(stream)
        assert first.session_id
        values: list[bytes] = []
        for resp in stream:
            values += [r.value for r in resp.records]
            if len(values) >= 2:
                break
        assert values[:2] == [b"v", b"s"]
        done = stub.Commit(pb.CommitRequest(session_id=first.session_id), metadata=alice,
                           timeout=30)
        assert [(o.topic, o.offset) for o in done.offsets] == [("alice-topic", 2)]
        # Another caller (here: no credentials) cannot use alice's session.
        code, _ = _code(lambda: stub.Commit(pb.CommitRequest(session_id=first.session_id),
                                            timeout=15))
        assert code is Code.UNAUTHENTICATED
        stream.cancel()
        # A group she may not use: the stream starts, then the cluster refuses the join.
        code, msg = _code(lambda: list(stub.Consume(
            pb.ConsumeRequest(group_id="not-hers", topics=["alice-topic"],
                              auto_offset_reset="earliest"), metadata=alice, timeout=30)))
        assert code is Code.PERMISSION_DENIED and "GROUP_AUTHORIZATION_FAILED" in msg, msg


def test_mtls_certificate_principal_with_the_clusters_acls(b, certs, tmp_path):
    props = tmp_path / "grpc-tls.properties"
    props.write_text(f"ssl.keystore.type=PEM\nssl.keystore.location={certs.broker}\n"
                     f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
                     f"ssl.client.auth=required\nssl.principal.mapping.rules={MAPPING}\n")
    gport = free_port()
    proc = _start(["gateway", "--bootstrap", b.addr("SASL_SSL"), "--http", "none",
                   "--grpc", f"127.0.0.1:{gport}", "--grpc-tls", str(props),
                   "--grpc-auth", "mtls", "-X", "security.protocol=SASL_SSL",
                   "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=admin",
                   "-X", "sasl.password=admin-secret", "-X", f"ssl.ca.location={certs.ca}"],
                  tmp_path / "out", "ready")
    try:
        ca = certs.ca.read_bytes()
        alice = grpc.ssl_channel_credentials(ca, certs.alice_key.read_bytes(),
                                             certs.alice_cert.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{gport}", alice) as ch:
            stub = pb_grpc.GatewayStub(ch)
            names = [t.name for t in stub.ListTopics(pb.ListTopicsRequest(), timeout=15).topics]
            assert "alice-topic" in names and "other-topic" not in names
            assert _produce(stub, "alice-topic").results[0].error_code == 0
            code, msg = _code(lambda: _produce(stub, "read-only"))
            assert code is Code.PERMISSION_DENIED and "TOPIC_AUTHORIZATION_FAILED" in msg
            code, msg = _code(lambda: next(stub.Consume(pb.ConsumeRequest(
                group_id="not-hers", topics=["alice-topic"]), timeout=30)))
            assert code is Code.PERMISSION_DENIED and "GROUP_AUTHORIZATION_FAILED" in msg
            code, msg = _code(lambda: _produce(stub, "brand-new-topic"))  # no CREATE
            assert code is Code.PERMISSION_DENIED, msg
            # Revoking the ACL takes effect within about a second.
            admin = AdminClient(_admin_conf(b, certs))
            flt = AclBindingFilter(ResourceType.TOPIC, "alice-topic",
                                   ResourcePatternType.LITERAL, "User:alice", "*",
                                   AclOperation.WRITE, AclPermissionType.ALLOW)
            for f in admin.delete_acls([flt]).values():
                assert len(f.result(15)) == 1
            deadline = time.monotonic() + 10
            while True:
                try:
                    _produce(stub, "alice-topic")
                except grpc.RpcError as e:
                    assert e.code() is Code.PERMISSION_DENIED
                    break
                assert time.monotonic() < deadline, "revoked ACL still honoured"
                time.sleep(0.2)  # back-off of this wait-for-revocation loop
            for f in admin.create_acls([_acl(ResourceType.TOPIC, "alice-topic", "User:alice",
                                             AclOperation.WRITE)]).values():
                f.result(15)
        # A certificate no mapping rule matches: not a principal.
        stranger = grpc.ssl_channel_credentials(ca, certs.stranger_key.read_bytes(),
                                                certs.stranger_cert.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{gport}", stranger) as ch:
            code, _ = _code(lambda: pb_grpc.GatewayStub(ch).ListTopics(
                pb.ListTopicsRequest(), timeout=15))
            assert code is Code.UNAUTHENTICATED
    finally:
        proc.terminate()
        proc.wait(20)


def test_grpc_auth_mtls_without_client_certificates_is_a_usage_error(b, tmp_path, certs):
    import subprocess
    import sys

    props = tmp_path / "no-mtls.properties"
    props.write_text(f"ssl.keystore.type=PEM\nssl.keystore.location={certs.broker}\n")
    r = subprocess.run([sys.executable, "-m", "yak.cli.main", "gateway", "--bootstrap",
                        b.addr("SASL_SSL"), "--http", "none", "--grpc", "127.0.0.1:0",
                        "--grpc-tls", str(props), "--grpc-auth", "mtls"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "ssl.client.auth=required" in r.stderr and len(r.stderr.strip().splitlines()) == 1
