"""SASL/OAUTHBEARER: the RFC 7628 message, Kafka's unsecured validator (the default) and
JWKS validation of signed tokens (KIP-768) with keys made at test time; then a real broker
with confluent-kafka: an unsecured token's principal is the one the ACLs see, a signed
token logs in through `oauth_cb`, a token signed by another key is refused."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import jwt
import pytest
from confluent_kafka import KafkaError
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from yak.errors import SaslAuthenticationError
from yak.security.oauthbearer import VALIDATOR_CLASSES, OAuthBearerServer, OAuthBearerValidator
from yak.security.sasl import SaslListenerConfig
from yak.settings import ConfigError


def b64(d: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()


def unsecured(claims: dict) -> str:
    return f"{b64({'alg': 'none'})}.{b64(claims)}."


def message(token: str, gs2: str = "n,,") -> bytes:
    return f"{gs2}\x01auth=Bearer {token}\x01\x01".encode()


def login(validator: OAuthBearerValidator, msg: bytes, now: float | None = None
          ) -> OAuthBearerServer:
    s = OAuthBearerServer(validator, clock=(lambda: now) if now is not None else time.time)
    assert s.evaluate(msg) == b""
    return s


def keypair(tmp_path: Path, kid: str, name: str = "jwks.json") -> tuple[object, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid=kid, alg="RS256", use="sig")
    path = tmp_path / name
    path.write_text(json.dumps({"keys": [jwk]}))
    return key, path


def signed(key: object, kid: str, **claims: object) -> str:
    now = int(time.time())
    body = {"sub": "alice", "iat": now, "exp": now + 300, **claims}
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": kid})


def test_unsecured_token_names_the_principal_and_bounds_the_session() -> None:
    v = OAuthBearerValidator("SASL_PLAINTEXT")
    now = time.time()
    s = login(v, message(unsecured({"sub": "alice", "exp": now + 60})), now)
    assert s.complete and s.authorization_id == "alice"
    assert s.credential_expiry_ms == int((now + 60) * 1000)
    # an authorization id must be the token's principal
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        login(v, message(unsecured({"sub": "alice", "exp": now + 60}), "n,a=bob,"), now)


FAR_FUTURE = 4102444800  # 2100-01-01: fixed, so every xdist worker collects the same cases


@pytest.mark.parametrize("msg, why", [
    (b"\xff", "not UTF-8"),
    (b"n,,auth=Bearer x", "RFC 7628"),
    (b"n,,\x01auth=Basic abc\x01\x01", "auth=Bearer"),
    (b"n,,\x01novalue\x01\x01", "key=value"),
    (message("not-a-jwt"), "not a JWT"),
    (message(unsecured({"sub": "alice"})), "no exp"),
    (message(unsecured({"sub": "alice", "exp": 1000})), "expired"),
    (message(unsecured({"exp": FAR_FUTURE})), "'sub' claim"),
    (message(f"{b64({'alg': 'RS256'})}.{b64({'sub': 'a', 'exp': 9e9})}.c2ln"), "signed token"),
], ids=["utf8", "form", "scheme", "kv", "jwt", "no-exp", "expired", "no-sub", "signed"])
def test_bad_messages_and_tokens_are_refused_with_a_reason(msg: bytes, why: str) -> None:
    with pytest.raises(SaslAuthenticationError, match=why):
        login(OAuthBearerValidator("L"), msg)


def test_jwks_validation_of_signed_tokens(tmp_path: Path) -> None:
    key, path = keypair(tmp_path, "k1")
    other, _ = keypair(tmp_path, "k1", "other.json")
    v = OAuthBearerValidator("L", audience=("kafka",), issuer="https://idp",
                             jwks_url=f"file://{path}")
    v._load_keys()
    good = signed(key, "k1", aud="kafka", iss="https://idp")
    s = login(v, message(good))
    assert s.authorization_id == "alice"
    for token, why in [
        (signed(other, "k1", aud="kafka", iss="https://idp"), "(?i)signature"),
        (signed(key, "k2", aud="kafka", iss="https://idp"), "kid"),
        (signed(key, "k1", aud="other", iss="https://idp"), "(?i)audience"),
        (signed(key, "k1", aud="kafka", iss="https://evil"), "(?i)issuer"),
        (signed(key, "k1", aud="kafka", iss="https://idp", exp=int(time.time()) - 100),
         "(?i)expired"),
        (unsecured({"sub": "alice", "exp": time.time() + 60}), "(?i)algorithm"),
    ]:
        with pytest.raises(SaslAuthenticationError, match=why):
            login(v, message(token))


def test_listener_settings(tmp_path: Path) -> None:
    _, path = keypair(tmp_path, "k1")
    base = {"sasl.enabled.mechanisms": "OAUTHBEARER"}
    cfg = SaslListenerConfig.from_settings(base, "SASL_PLAINTEXT")
    assert cfg.oauthbearer is not None and not cfg.oauthbearer.secured
    cfg = SaslListenerConfig.from_settings({
        **base,
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
            VALIDATOR_CLASSES[0],
        "sasl.oauthbearer.jwks.endpoint.url": f"file://{path}",
        "sasl.oauthbearer.expected.audience": "kafka,other"}, "SASL_PLAINTEXT")
    assert cfg.oauthbearer.secured and cfg.oauthbearer.audience == ("kafka", "other")
    for bad, why in [
        ({"sasl.server.callback.handler.class": "com.example.Mine"}, "validates OAUTHBEARER"),
        ({"sasl.server.callback.handler.class": VALIDATOR_CLASSES[0]}, "needs"),
        ({"sasl.server.callback.handler.class": VALIDATOR_CLASSES[0],
          "sasl.oauthbearer.jwks.endpoint.url": "ftp://x"}, "file:// or https://"),
        ({"sasl.server.callback.handler.class": VALIDATOR_CLASSES[0],
          "sasl.oauthbearer.jwks.endpoint.url": f"file://{tmp_path}/missing.json"},
         "cannot read the JWKS"),
    ]:
        with pytest.raises(ConfigError, match=why):
            SaslListenerConfig.from_settings({**base, **bad}, "SASL_PLAINTEXT")


# --------------------------------------------------------------------------- the wire


def test_confluent_kafka_logs_in_with_oauthbearer(secured_broker, tmp_path: Path) -> None:  # noqa: ANN001
    from security.wire import produce

    key, path = keypair(tmp_path, "k1")
    plain_jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required'
                  ' user_admin="admin-secret";')
    b = secured_broker(
        ["SASL_PLAINTEXT", "SASL_SSL", "PLAINTEXT"],
        **{"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER",
           "listener.name.sasl_ssl.sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN",
           "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas,
           "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class":
               VALIDATOR_CLASSES[0],
           "listener.name.sasl_ssl.sasl.oauthbearer.jwks.endpoint.url": f"file://{path}",
           "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": "User:admin;User:ANONYMOUS", "auto.create.topics.enable": "true"})
    # Unsecured token (librdkafka's built-in): its principal is what the ACLs judge. No
    # ACL names alice, so she may not write; admin (a super user) may.
    def unsecured_conf(principal: str) -> dict:
        return {"bootstrap.servers": b.addr("SASL_PLAINTEXT"),
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": f"principal={principal}",
                "message.timeout.ms": 8000, "log_level": 3}

    assert produce(unsecured_conf("admin"), "oauth-t", [b"by-admin"]) == [None]
    errs = produce(unsecured_conf("alice"), "oauth-t", [b"by-alice"])
    assert errs[0] is not None and errs[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # Signed tokens over SASL_SSL, from the application's token callback.
    def signed_conf(token_key: object) -> dict:
        def oauth_cb(_config: str) -> tuple[str, float]:
            return signed(token_key, "k1", sub="admin"), time.time() + 300
        return {"bootstrap.servers": b.addr("SASL_SSL"), "security.protocol": "SASL_SSL",
                "ssl.ca.location": b.settings["ssl.truststore.location"],
                "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb,
                "message.timeout.ms": 8000, "log_level": 3}

    assert produce(signed_conf(key), "oauth-t", [b"signed"]) == [None]
    intruder, _ = keypair(tmp_path, "k1", "intruder.json")
    errs = produce(signed_conf(intruder), "oauth-t", [b"forged"], timeout=20)
    assert errs[0] is not None, "a token signed by another key must not log in"
