"""SASL: JAAS parsing, PLAIN, SCRAM against scramp's client (the real other side), the
per-connection authenticator state machine, the failed-login delay, KIP-554 credentials."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import stat

import pytest
import scramp

from yak.config import ConfigError
from yak.errors import ErrorCode, SaslAuthenticationError
from yak.security.jaas import parse_jaas_config, plain_users
from yak.security.plain import PlainServer
from yak.security.principal import KafkaPrincipal
from yak.security.sasl import (
    API_VERSIONS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    FailedAuthenticationDelay,
    GateAction,
    SaslAuthenticator,
    SaslListenerConfig,
)
from yak.security.scram import (
    FileCredentialStore,
    MemoryCredentialStore,
    ScramCredentialManager,
    ScramUpsertion,
    derive_credential,
    salted_password,
)
from yak.security.scram_server import ScramServer

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
    '    username="admin" password="admin-secret"\n'
    '    user_admin="admin-secret"\n'
    '    user_alice="al;ice \\"quoted\\""; // trailing comment'
)


# --------------------------------------------------------------------------- JAAS


def test_jaas_plain_users_and_quoting():
    [entry] = parse_jaas_config(PLAIN_JAAS)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.control_flag == "required"
    assert plain_users(entry) == {"admin": "admin-secret", "alice": 'al;ice "quoted"'}
    assert "admin-secret" not in repr(entry)


def test_jaas_scram_module_comments_and_bare_values():
    entries = parse_jaas_config(
        "/* c */ org.apache.kafka.common.security.scram.ScramLoginModule REQUIRED;"
        " x.Y sufficient a=b c='d e';"
    )
    assert [e.control_flag for e in entries] == ["required", "sufficient"]
    assert entries[1].options == {"a": "b", "c": "d e"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Login module not specified"),
        ("a.B", "control flag not specified"),
        ("a.B mandatory;", "Invalid login module control flag 'mandatory'"),
        ('a.B required user_x="pw"', "not terminated by semi-colon"),
        ("a.B required user_x=;", "Value not specified for key 'user_x'"),
        ('a.B required user_x="secret-pw', "unterminated quoted value"),
    ],
)
def test_jaas_errors_name_the_key_and_hide_the_value(text, message):
    with pytest.raises(ConfigError) as exc:
        parse_jaas_config(text, "listener.name.sasl_ssl.plain.sasl.jaas.config")
    msg = str(exc.value)
    assert message in msg and "listener.name.sasl_ssl.plain.sasl.jaas.config" in msg
    assert "secret-pw" not in msg and "\n" not in msg


# --------------------------------------------------------------------------- listener config


def _settings(mechs="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", **extra):
    s = {
        "sasl.enabled.mechanisms": mechs,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    }
    s.update(extra)
    return s


def test_listener_config_from_kafka_settings():
    cfg = SaslListenerConfig.from_settings(_settings(), "SASL_SSL")
    assert cfg.enabled_mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert set(cfg.plain_users) == {"admin", "alice"}
    assert cfg.max_receive_size == 524288 and cfg.connections_max_reauth_ms == 0
    assert "admin-secret" not in repr(cfg)
    cfg = SaslListenerConfig.from_settings(
        _settings(
            **{
                "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.sasl_ssl.connections.max.reauth.ms": "60000",
            }
        ),
        "SASL_SSL",
    )
    assert cfg.enabled_mechanisms == ("SCRAM-SHA-512",)
    assert cfg.connections_max_reauth_ms == 60000


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "GSSAPI is not supported by Yak"),  # Kafka's default mechanism
        (
            {"sasl.enabled.mechanisms": "PLAIN"},
            "listener.name.sasl_ssl.plain.sasl.jaas.config is required",
        ),
        ({"sasl.enabled.mechanisms": "SCRAM-SHA-1"}, "SCRAM-SHA-1 is not supported"),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            },
            "expected login module org.apache.kafka.common.security.plain.PlainLoginModule",
        ),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS + "\n a.B required;",
            },
            "contains 2 login modules",
        ),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required;",
            },
            "no user_<name>",
        ),
        (
            {
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.server.max.receive.size": "0",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            },
            "sasl.server.max.receive.size",
        ),
    ],
)
def test_listener_config_errors(settings, message):
    with pytest.raises(ConfigError) as exc:
        SaslListenerConfig.from_settings(settings, "SASL_SSL")
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert "admin-secret" not in str(exc.value)


# --------------------------------------------------------------------------- PLAIN


def test_plain_accepts_jaas_users_only():
    users = {"alice": "alice-secret"}
    s = PlainServer(users)
    assert s.evaluate(b"\x00alice\x00alice-secret") == b"" and s.complete
    assert s.authorization_id == "alice"
    assert PlainServer(users).evaluate(b"alice\x00alice\x00alice-secret") == b""
    for token, msg in [
        (b"\x00alice\x00wrong", "Invalid username or password"),
        (b"\x00mallory\x00alice-secret", "Invalid username or password"),
        (b"\x00\x00pw", "username not specified"),
        (b"\x00alice\x00", "password not specified"),
        (b"alice-secret", "expected 3 tokens, got 1"),
        (b"bob\x00alice\x00alice-secret", "authorization id that is different"),
        (b"\xff\x00a\x00b", "not UTF-8"),
    ]:
        with pytest.raises(SaslAuthenticationError, match=msg):
            PlainServer(users).evaluate(token)


# --------------------------------------------------------------------------- SCRAM


SECRET = b"k" * 32


def _scram_login(mech, store, user, password, first_hook=None):
    """Run a full exchange with scramp's client against our server; returns (server, ok)."""
    client = scramp.ScramClient([mech], user, password)
    server = ScramServer(mech, lambda u: store.get(u, mech), SECRET)
    first = client.get_client_first()
    if first_hook:
        first = first_hook(first)
    server_first = server.evaluate(first.encode()).decode()
    client.set_server_first(server_first)
    final = server.evaluate(client.get_client_final().encode()).decode()
    client.set_server_final(final)  # verifies the server signature
    return server


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_login_with_scramp_client(mech):
    store = MemoryCredentialStore(
        {("alice", mech): derive_credential(mech, "pw-ä", iterations=4096)}
    )
    server = _scram_login(mech, store, "alice", "pw-ä")
    assert server.complete and server.authorization_id == "alice"


def _final_with_nonce(mech, password, cred, client_first_bare, server_first, nonce):
    """A client-final message with the given nonce and the proof computed over it."""
    import base64
    import hashlib
    import hmac

    h = hashlib.sha256 if mech == "SCRAM-SHA-256" else hashlib.sha512
    salted = hashlib.pbkdf2_hmac(h().name, password.encode(), cred.salt, cred.iterations)
    client_key = hmac.new(salted, b"Client Key", h).digest()
    without_proof = f"c=biws,r={nonce}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(h(client_key).digest(), auth, h).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_final_nonce_need_only_end_with_the_servers_like_kafka(mech):
    """librdkafka < 2.1 (kcat 1.7) sends its nonce twice in the final message; Kafka checks
    `endsWith`, so Yak does too, with the proof over the message as sent."""
    cred = derive_credential(mech, "pw")
    for doubled, ok in [(True, True), (False, False)]:
        server = ScramServer(mech, lambda u, c=cred: c if u == "alice" else None, SECRET)
        server_first = server.evaluate(b"n,,n=alice,r=cnonce").decode()
        r = server_first.split(",")[0][2:]
        nonce = ("cnonce" + r) if doubled else (r + "x")
        final = _final_with_nonce(mech, "pw", cred, "n=alice,r=cnonce", server_first, nonce)
        if ok:
            assert server.evaluate(final).startswith(b"v=") and server.complete
        else:
            with pytest.raises(SaslAuthenticationError):
                server.evaluate(final)


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_and_unknown_user_fail_the_same_way(mech):
    store = MemoryCredentialStore({("alice", mech): derive_credential(mech, "right")})
    msgs = []
    for user, pw in [("alice", "wrong"), ("nobody", "whatever")]:
        with pytest.raises(SaslAuthenticationError) as exc:
            _scram_login(mech, store, user, pw)
        msgs.append(exc.value.message)
    assert (
        msgs[0]
        == msgs[1]
        == (
            "Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mech}"
        )
    )


def test_scram_unknown_user_gets_a_stable_made_up_salt():
    store = MemoryCredentialStore()

    def salt_of(user):
        s = ScramServer("SCRAM-SHA-256", lambda u: None, SECRET)
        first = s.evaluate(f"n,,n={user},r=abcdefgh".encode()).decode()
        return dict(p.split("=", 1) for p in first.split(","))["s"]

    assert salt_of("ghost") == salt_of("ghost") != salt_of("other")
    assert store.get("ghost", "SCRAM-SHA-256") is None


def test_scram_tokenauth_extension_is_refused_and_others_are_kept_in_the_auth_message():
    mech = "SCRAM-SHA-256"
    store = MemoryCredentialStore({("alice", mech): derive_credential(mech, "pw")})
    with pytest.raises(SaslAuthenticationError, match="delegation tokens are not supported"):
        _scram_login(mech, store, "alice", "pw", lambda f: f + ",tokenauth=true")

    # A client that sends an extension computes its proof over the client-first-bare
    # *with* the extension: the server must verify over the same bytes.
    cred = store.get("alice", mech)
    server = ScramServer(mech, lambda u: store.get(u, mech), SECRET)
    bare = "n=alice,r=clientnonce123,ext=value"
    server_first = server.evaluate(("n,," + bare).encode()).decode()
    attrs = dict(p.split("=", 1) for p in server_first.split(","))
    salted = salted_password(mech, "pw", base64.b64decode(attrs["s"]), int(attrs["i"]))
    assert base64.b64decode(attrs["s"]) == cred.salt
    without_proof = f"c=biws,r={attrs['r']}"
    auth_msg = f"{bare},{server_first},{without_proof}".encode()
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    sig = hmac.new(hashlib.sha256(client_key).digest(), auth_msg, hashlib.sha256).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig, strict=True))).decode()
    final = server.evaluate(f"{without_proof},p={proof}".encode()).decode()
    assert final.startswith("v=") and server.complete


def test_scram_saslname_escapes_authzid_and_malformed_messages():
    mech = "SCRAM-SHA-512"
    store = MemoryCredentialStore({("a,b=c", mech): derive_credential(mech, "pw")})
    assert _scram_login(mech, store, "a,b=c", "pw").authorization_id == "a,b=c"
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        ScramServer(mech, store.get, SECRET).evaluate(b"n,a=bob,n=alice,r=xyz")
    for bad in [
        b"garbage",
        b"n,,r=x,n=y",
        b"p=tls-unique,,n=a,r=b",
        b"n,,n=a=ZZ,r=b",
        b"n,,n=a,r=b,=x",
    ]:
        with pytest.raises(SaslAuthenticationError):
            ScramServer(mech, store.get, SECRET).evaluate(bad)


# --------------------------------------------------------------------------- authenticator


def _auth(mechs="PLAIN,SCRAM-SHA-256", reauth_ms=0, delay=None, store=None):
    cfg = SaslListenerConfig.from_settings(
        _settings(mechs, **{"connections.max.reauth.ms": str(reauth_ms)}), "SASL_SSL"
    )
    return SaslAuthenticator(
        cfg,
        credentials=store or MemoryCredentialStore(),
        client_ip="10.0.0.7",
        failed_delay=delay or FailedAuthenticationDelay(100),
        secret=SECRET,
    )


def test_gate_before_login_serves_only_api_versions_and_sasl():
    a = _auth()
    assert a.gate(API_VERSIONS, 0) is GateAction.SERVE
    assert a.gate(3, 0) is GateAction.CLOSE  # Metadata before login: closed unanswered
    assert a.gate(SASL_HANDSHAKE, 0) is GateAction.SASL
    hs = a.handshake("PLAIN", 1)
    assert hs.error_code == ErrorCode.none and not hs.close
    assert hs.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert a.gate(0, 0) is GateAction.CLOSE  # Produce mid-authentication
    assert a.gate(SASL_AUTHENTICATE, 0) is GateAction.SASL
    r = a.authenticate(b'\x00alice\x00al;ice "quoted"', 5)
    assert r.error_code == ErrorCode.none and r.complete and r.session_lifetime_ms == 0
    assert a.authenticated and a.principal == KafkaPrincipal("User", "alice")
    assert a.gate(0, 10) is GateAction.SERVE
    assert a.gate(SASL_AUTHENTICATE, 10) is GateAction.ILLEGAL_STATE


def test_unknown_mechanism_lists_enabled_ones_and_closes():
    a = _auth()
    hs = a.handshake("GSSAPI", 1)
    assert hs.error_code == ErrorCode.unsupported_sasl_mechanism == 33
    assert hs.mechanisms == ("PLAIN", "SCRAM-SHA-256") and hs.close
    assert a.gate(API_VERSIONS, 0) is GateAction.CLOSE


def test_out_of_order_requests_are_illegal_sasl_state():
    a = _auth()
    assert a.gate(SASL_AUTHENTICATE, 0) is GateAction.ILLEGAL_STATE  # before handshake
    assert a.gate(SASL_HANDSHAKE, 0) is GateAction.CLOSE  # and the connection is done
    b = _auth()
    b.handshake("PLAIN", 1)
    assert b.gate(SASL_HANDSHAKE, 0) is GateAction.ILLEGAL_STATE  # second handshake
    c = _auth()
    r = c.authenticate(b"x", 0)
    assert r.error_code == ErrorCode.illegal_sasl_state == 34 and r.close


def test_failed_login_is_answered_after_a_growing_per_ip_delay():
    delay = FailedAuthenticationDelay(100, cap_ms=1000, window_ms=60000)
    delays = []
    for i in range(6):
        a = _auth(delay=delay)
        a.handshake("PLAIN", 1)
        r = a.authenticate(b"\x00alice\x00wrong", 1000 + i)
        assert r.error_code == ErrorCode.sasl_authentication_failed == 58 and r.close
        assert r.error_message == "Authentication failed: Invalid username or password"
        delays.append(r.delay_ms)
        assert a.gate(API_VERSIONS, 0) is GateAction.CLOSE
    assert delays == [100, 200, 400, 800, 1000, 1000]
    assert delay.failed("10.0.0.8", 2000) == 100  # other IPs unaffected
    assert delay.failed("10.0.0.7", 1000 + 5 + 60001) == 100  # window passed
    ok = _auth(delay=delay)
    ok.handshake("PLAIN", 1)
    assert ok.authenticate(b"\x00admin\x00admin-secret", 0).complete
    assert delay.failed("10.0.0.7", 200000) == 100  # success reset it


def test_failed_delay_bounds_its_memory():
    d = FailedAuthenticationDelay(100, max_ips=10)
    for i in range(100):
        d.failed(f"10.0.{i}.1", i)
    assert len(d._fails) <= 10


def test_oversized_token_fails():
    a = _auth()
    a.handshake("PLAIN", 1)
    r = a.authenticate(b"x" * 600000, 0)
    assert (
        r.error_code == ErrorCode.sasl_authentication_failed and "receive size" in r.error_message
    )


def test_scram_through_the_authenticator_and_reauthentication():
    mech = "SCRAM-SHA-256"
    store = MemoryCredentialStore(
        {
            ("alice", mech): derive_credential(mech, "pw"),
            ("bob", mech): derive_credential(mech, "pw"),
        }
    )
    a = _auth(reauth_ms=60000, store=store)

    def login(user, now):
        client = scramp.ScramClient([mech], user, "pw")
        r1 = a.authenticate(client.get_client_first().encode(), now)
        assert r1.error_code == 0 and not r1.complete and r1.session_lifetime_ms == 0
        client.set_server_first(r1.auth_bytes.decode())
        r2 = a.authenticate(client.get_client_final().encode(), now)
        if r2.error_code == 0:
            client.set_server_final(r2.auth_bytes.decode())
        return r2

    assert a.handshake(mech, 1).error_code == 0
    r = login("alice", 1000)
    assert r.complete and r.session_lifetime_ms == 60000 and a.session_expiry_ms == 61000
    assert a.gate(0, 60999) is GateAction.SERVE
    assert a.gate(0, 61000) is GateAction.CLOSE  # expired without re-authenticating
    # re-authenticate in time: same mechanism, same principal
    assert a.gate(SASL_HANDSHAKE, 50000) is GateAction.SASL
    assert a.handshake(mech, 1).error_code == 0
    assert a.authenticated and a.gate(0, 50001) is GateAction.SERVE  # old session still valid
    assert login("alice", 50002).complete and a.session_expiry_ms == 110002
    # re-authenticating as someone else fails
    a.handshake(mech, 1)
    r = login("bob", 60000)
    assert r.error_code == ErrorCode.sasl_authentication_failed
    assert "Cannot change principals during re-authentication" in r.error_message
    # and a mechanism change is refused at the SaslAuthenticate that follows
    b = _auth(store=store)
    b.handshake("PLAIN", 1)
    assert b.authenticate(b'\x00alice\x00al;ice "quoted"', 0).complete
    assert b.handshake("SCRAM-SHA-256", 1).error_code == 0
    r = b.authenticate(b"n,,n=alice,r=x", 0)
    assert r.error_code == ErrorCode.sasl_authentication_failed
    assert "not supported for re-authentication of mechanism 'PLAIN'" in r.error_message


def test_handshake_v0_means_raw_tokens():
    a = _auth()
    a.handshake("PLAIN", 0)
    assert a.raw_tokens
    assert a.authenticate(b"\x00admin\x00admin-secret", 0).complete


# --------------------------------------------------------------------------- credentials


def _run(c):
    return asyncio.run(c)


def test_derived_credentials_match_scramp_and_kafka_rules():
    salt = os.urandom(16)
    ours = derive_credential("SCRAM-SHA-512", "pw", iterations=8192, salt=salt)
    s, stored, server, i = scramp.ScramMechanism("SCRAM-SHA-512").make_auth_info(
        "pw", iteration_count=8192, salt=salt
    )
    assert (ours.salt, ours.stored_key, ours.server_key, ours.iterations) == (s, stored, server, i)
    for bad in (4095, 16385):
        with pytest.raises(ValueError):
            derive_credential("SCRAM-SHA-256", "pw", iterations=bad)
    assert "stored" not in repr(ours).replace("keys hidden", "")


def test_file_credential_store_is_private_and_survives_reload(tmp_path):
    path = tmp_path / "__scram_credentials.json"
    st1 = FileCredentialStore(path)
    st1.load()
    cred = derive_credential("SCRAM-SHA-256", "pw")
    st1.apply({("alice", "SCRAM-SHA-256"): cred}, [])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert "pw" not in json.loads(text)["users"]["alice"]["SCRAM-SHA-256"].values()
    st2 = FileCredentialStore(path)
    st2.load()
    assert st2.get("alice", "SCRAM-SHA-256") == cred
    st2.apply({}, [("alice", "SCRAM-SHA-256")])
    st3 = FileCredentialStore(path)
    st3.load()
    assert st3.all() == {}


def _up(name, mech=1, iterations=4096, pw="pw"):
    salt = os.urandom(16)
    m = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}.get(mech, "SCRAM-SHA-256")
    return ScramUpsertion(name, mech, iterations, salt, salted_password(m, pw, salt, iterations))


def test_kip554_alter_and_describe():
    store = MemoryCredentialStore()
    mgr = ScramCredentialManager(store)
    res = _run(mgr.alter([], [_up("alice"), _up("bob", 2, 8192)]))
    assert {(r.user, r.error_code) for r in res} == {("alice", 0), ("bob", 0)}
    # the stored credential logs alice in with her password, through scramp's client
    assert _scram_login("SCRAM-SHA-256", store, "alice", "pw").complete
    d = {r.user: r for r in mgr.describe(None)}
    assert d["alice"].credentials == ((1, 4096),) and d["bob"].credentials == ((2, 8192),)
    d = mgr.describe(["alice", "nobody", "bob", "bob"])
    by = {r.user: r for r in d}
    assert by["alice"].error_code == 0
    assert by["nobody"].error_code == ErrorCode.resource_not_found == 91
    assert by["bob"].error_code == ErrorCode.duplicate_resource == 92

    res = {
        r.user: r
        for r in _run(
            mgr.alter(
                [("alice", 1), ("ghost", 1), ("bob", 2)],
                [
                    _up("bob"),
                    _up("dave", iterations=4095),
                    _up("erin", iterations=16385),
                    _up("", 1),
                    _up("frank", 9),
                    _up("gina"),
                    _up("gina", 2),
                ],
            )
        )
    }
    assert res["alice"].error_code == 0
    assert res["ghost"].error_code == 91
    assert res["bob"].error_code == 92  # deleted and upserted in one request
    assert (res["dave"].error_code, res["dave"].error_message) == (93, "Too few iterations")
    assert (res["erin"].error_code, res["erin"].error_message) == (93, "Too many iterations")
    assert res[""].error_code == 93
    assert res["frank"].error_code == ErrorCode.unsupported_sasl_mechanism
    assert res["gina"].error_code == 92  # same user twice
    assert set(store.all()) == {("bob", "SCRAM-SHA-512")}


def test_kip554_failed_store_write_changes_nothing():
    class Broken(MemoryCredentialStore):
        def apply(self, upserts, deletes):
            raise OSError("read-only file system")

    res = _run(ScramCredentialManager(Broken()).alter([], [_up("alice")]))
    assert res[0].error_code == ErrorCode.unknown_server_error
    assert "read-only" in res[0].error_message
