"""TLS: contexts from Kafka's PEM settings, exercised over real TLS sockets on 127.0.0.1
(an asyncio server with our context, a client handshake), and the mTLS principal."""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from yak.config import ConfigError
from yak.security.principal import KafkaPrincipal
from yak.security.tls import (
    NoMatchingRule,
    SslPrincipalMapper,
    build_client_context,
    build_server_context,
    rfc2253_name,
    ssl_principal,
)


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture(scope="module")
def server_cert(ca):
    return ca.issue_cert("localhost", "127.0.0.1")


@pytest.fixture
def pem(tmp_path, ca, server_cert):
    """Kafka's one-file PEM keystore (PKCS#8 key, server cert, CA) and a PEM truststore."""
    ks = tmp_path / "broker.pem"
    ks.write_bytes(
        server_cert.private_key_pem.bytes()
        + b"".join(b.bytes() for b in server_cert.cert_chain_pems)
        + ca.cert_pem.bytes()
    )
    ts = tmp_path / "ca.pem"
    ts.write_bytes(ca.cert_pem.bytes())
    return {"keystore": str(ks), "truststore": str(ts)}


def _server_settings(pem, **extra):
    s = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": pem["keystore"],
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pem["truststore"],
    }
    s.update(extra)
    return s


def _client_ctx(ca, cert=None, **kw):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(ctx)
    if cert is not None:
        cert.configure_cert(ctx)
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx


async def _exchange(server_ctx, client_ctx, mapper=None, handshake_timeout=5.0):
    """Start a TLS server on a free port; the handler answers with the peer's principal."""
    mapper = mapper or SslPrincipalMapper.from_rules("DEFAULT")
    info = {}

    async def handle(reader, writer):
        obj = writer.get_extra_info("ssl_object")
        info["version"] = obj.version()
        info["cipher"] = obj.cipher()[0]
        p = ssl_principal(obj.getpeercert(binary_form=True), mapper)
        writer.write(str(p).encode() + b"\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(
        handle, "127.0.0.1", 0, ssl=server_ctx, ssl_handshake_timeout=handshake_timeout
    )
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"),
            5,
        )
        line = await asyncio.wait_for(reader.readline(), 5)
        writer.close()
        return line.decode().strip(), info
    finally:
        server.close()
        await server.wait_closed()


def test_one_pem_file_server_tls_handshake(pem, ca):
    ctx = build_server_context(_server_settings(pem))
    principal, info = asyncio.run(_exchange(ctx, _client_ctx(ca)))
    assert principal == "User:ANONYMOUS"  # ssl.client.auth=none
    assert info["version"] == "TLSv1.3"


def test_inline_pem_key_and_chain(ca, server_cert):
    settings = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.key": server_cert.private_key_pem.bytes().decode(),
        "ssl.keystore.certificate.chain": b"".join(
            b.bytes() for b in server_cert.cert_chain_pems
        ).decode(),
    }
    principal, _ = asyncio.run(_exchange(build_server_context(settings), _client_ctx(ca)))
    assert principal == "User:ANONYMOUS"


def test_encrypted_key_with_ssl_key_password(tmp_path, ca, server_cert):
    key = serialization.load_pem_private_key(server_cert.private_key_pem.bytes(), None)
    enc = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret"),
    )
    ks = tmp_path / "enc.pem"
    ks.write_bytes(enc + b"".join(b.bytes() for b in server_cert.cert_chain_pems))
    s = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(ks)}
    with pytest.raises(ConfigError, match="encrypted; set ssl.key.password"):
        build_server_context(s)
    with pytest.raises(ConfigError, match="wrong password"):
        build_server_context({**s, "ssl.key.password": "nope"})
    ctx = build_server_context({**s, "ssl.key.password": "s3cret"})
    assert asyncio.run(_exchange(ctx, _client_ctx(ca)))[0] == "User:ANONYMOUS"


def test_mtls_required_gives_the_rfc2253_principal(pem, ca):
    ctx = build_server_context(_server_settings(pem, **{"ssl.client.auth": "required"}))
    alice = ca.issue_cert(
        "alice@example.com",
        common_name="alice",
        organization_name="acme",
        organization_unit_name="eng",
    )
    principal, _ = asyncio.run(_exchange(ctx, _client_ctx(ca, alice)))
    assert principal == "User:CN=alice,OU=eng,O=acme"
    # no client certificate: the server refuses the handshake and never serves the client
    # (with TLS 1.3 the client learns it on its first read: an alert or end of stream)
    try:
        got = asyncio.run(_exchange(ctx, _client_ctx(ca)))[0]
    except (ssl.SSLError, ConnectionError):
        got = ""
    assert got == ""


def test_mtls_requested_without_certificate_is_anonymous(pem, ca):
    ctx = build_server_context(_server_settings(pem, **{"ssl.client.auth": "requested"}))
    assert asyncio.run(_exchange(ctx, _client_ctx(ca)))[0] == "User:ANONYMOUS"
    bob = ca.issue_cert("bob", common_name="bob")
    assert asyncio.run(_exchange(ctx, _client_ctx(ca, bob)))[0].startswith("User:CN=bob,OU=Testing")


def test_per_listener_client_auth_and_mapping_rules(pem, ca):
    settings = _server_settings(
        pem,
        **{
            "listener.name.internal.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/U,DEFAULT",
        },
    )
    assert build_server_context(settings, "EXTERNAL").verify_mode == ssl.CERT_NONE
    ctx = build_server_context(settings, "INTERNAL")
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    carol = ca.issue_cert(
        "carol", common_name="carol", organization_name="acme", organization_unit_name="ops"
    )
    mapper = SslPrincipalMapper.from_rules(settings["ssl.principal.mapping.rules"])
    principal, _ = asyncio.run(_exchange(ctx, _client_ctx(ca, carol), mapper))
    assert principal == "User:CAROL@OPS"


def test_enabled_protocols_and_cipher_suites_by_iana_name(pem, ca):
    ctx = build_server_context(
        _server_settings(
            pem,
            **{
                "ssl.enabled.protocols": "TLSv1.2",
                "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            },
        )
    )
    _, info = asyncio.run(_exchange(ctx, _client_ctx(ca)))
    assert info == {"version": "TLSv1.2", "cipher": "ECDHE-ECDSA-AES128-GCM-SHA256"}
    # a client that only speaks TLS 1.3 cannot connect to a TLS 1.2-only listener
    with pytest.raises((ssl.SSLError, ConnectionError)):
        asyncio.run(_exchange(ctx, _client_ctx(ca, minimum_version=ssl.TLSVersion.TLSv1_3)))


def test_plaintext_bytes_and_silent_clients_on_a_tls_port_are_closed(pem):
    """A client speaking plaintext Kafka to the TLS port is cut off; a client that never
    finishes the handshake is closed after the handshake timeout; the server keeps going."""
    ctx = build_server_context(_server_settings(pem))

    async def main():
        served = []

        async def handle(reader, writer):
            served.append(1)
            writer.close()

        server = await asyncio.start_server(
            handle, "127.0.0.1", 0, ssl=ctx, ssl_handshake_timeout=0.5
        )
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        try:
            for payload in (b"\x00\x00\x00\x0a\x00\x12\x00\x03\x00\x00\x00\x01\x00\x00", b""):
                s = socket.create_connection(("127.0.0.1", port))
                s.setblocking(False)
                if payload:
                    await loop.sock_sendall(s, payload)
                t0 = loop.time()
                data = await asyncio.wait_for(loop.sock_recv(s, 100), 5)
                while data:  # a TLS alert may come first; then EOF
                    data = await asyncio.wait_for(loop.sock_recv(s, 100), 5)
                s.close()
                if not payload:
                    assert loop.time() - t0 >= 0.4  # closed by the handshake timeout
            assert served == []
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_client_context_verifies_the_broker(pem, ca, server_cert):
    ctx = build_client_context(
        {"ssl.truststore.type": "PEM", "ssl.truststore.location": pem["truststore"]}
    )
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    server = build_server_context(_server_settings(pem))
    assert asyncio.run(_exchange(server, ctx))[0] == "User:ANONYMOUS"
    off = build_client_context(
        {
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": pem["truststore"],
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert not off.check_hostname


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"ssl.keystore.type": "JKS"}, "Yak reads PEM key stores only"),
        ({"ssl.keystore.password": "x"}, "SSL key store password cannot be specified with PEM"),
        ({"ssl.keystore.location": "/nonexistent/k.pem"}, "ssl.keystore.location"),
        ({"ssl.client.auth": "maybe"}, "ssl.client.auth"),
        ({"ssl.enabled.protocols": "TLSv1.1"}, "TLSv1.1 is not supported"),
        ({"ssl.protocol": "SSLv3"}, "ssl.protocol"),
        ({"ssl.cipher.suites": "TLS_FOO_WITH_BAR"}, "unknown or disabled cipher suite TLS_FOO"),
        ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "cannot restrict TLS 1.3 suites"),
        ({"ssl.principal.mapping.rules": "RULE:(/x/,garbage"}, "ssl.principal.mapping.rules"),
        (
            {"ssl.truststore.location": None, "ssl.client.auth": "required"},
            "needs the CAs of client certificates",
        ),
        (
            {"listener.name.ext.ssl.keystore.location": "/nope.pem"},
            "listener.name.ext.ssl.keystore.location",
        ),
    ],
)
def test_bad_tls_settings_are_one_line_errors(pem, extra, message):
    s = _server_settings(pem)
    for k, v in extra.items():
        if v is None:
            s.pop(k, None)
        else:
            s[k] = v
    with pytest.raises(ConfigError) as exc:
        build_server_context(s, "EXT")
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_mismatched_key_and_missing_key(tmp_path, ca, server_cert):
    other = ca.issue_cert("other")
    ks = tmp_path / "bad.pem"
    ks.write_bytes(other.private_key_pem.bytes() + server_cert.cert_chain_pems[0].bytes())
    with pytest.raises(ConfigError, match="does not match the first certificate"):
        build_server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(ks)})
    with pytest.raises(ConfigError, match="has no key"):
        build_server_context({}, "SSL")
    with pytest.raises(ConfigError, match="no PEM private key"):
        ks.write_bytes(server_cert.cert_chain_pems[0].bytes())
        build_server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(ks)})


# --------------------------------------------------------------------------- DN and rules


def _name_der(*rdns):
    return x509.Name([x509.RelativeDistinguishedName(r) for r in rdns]).public_bytes()


def test_rfc2253_matches_java_form():
    A = x509.NameAttribute
    der = _name_der(
        [A(NameOID.COUNTRY_NAME, "US")],
        [A(NameOID.ORGANIZATION_NAME, "Acme, Inc.")],
        [A(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng+ops")],
        [A(NameOID.EMAIL_ADDRESS, "a@b.c")],
        [A(NameOID.COMMON_NAME, " alice#")],
    )
    # most specific first; Java escapes , + and a leading space; e-mail has no RFC 2253
    # keyword, so Java prints the OID and the hex of the DER value (IA5String "a@b.c").
    assert rfc2253_name(der) == (
        "CN=\\ alice#,1.2.840.113549.1.9.1=#16056140622e63,OU=eng\\+ops,O=Acme\\, Inc.,C=US"
    )
    assert (
        rfc2253_name(
            _name_der([A(NameOID.DOMAIN_COMPONENT, "example")], [A(NameOID.USER_ID, "u1")])
        )
        == "UID=u1,DC=example"
    )


def test_principal_from_certificate_with_cryptography():
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "acme"),
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    der = cert.public_bytes(serialization.Encoding.DER)
    assert ssl_principal(der, SslPrincipalMapper.from_rules(None)) == KafkaPrincipal(
        "User", "CN=alice,O=acme"
    )
    assert ssl_principal(None, SslPrincipalMapper.from_rules(None)).name == "ANONYMOUS"


def test_principal_mapping_rules_like_kafka():
    m = SslPrincipalMapper.from_rules(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U,"
        "DEFAULT"
    )
    assert m.name("CN=kafka-server1,OU=ServiceUsers,O=Org") == "kafka-server1"
    assert m.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=x,ST=y,C=US") == "duke@javasoft"
    assert m.name("OU=x,CN=Bob.Smith,O=y") == "BOB.SMITH"
    assert SslPrincipalMapper.from_rules("RULE:^CN=(.*)$/$3-$1/").name("CN=a") == "$3-a"
    assert SslPrincipalMapper.from_rules("RULE:^CN=(.*)$/\\$1/").name("CN=a") == "$1"
    assert SslPrincipalMapper.from_rules(" DEFAULT , ").name("CN=a") == "CN=a"
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper.from_rules("RULE:^CN=x$/y/").name("CN=z")
    with pytest.raises(ConfigError, match="Invalid rule"):
        SslPrincipalMapper.from_rules("DEFAULT,FOO")
