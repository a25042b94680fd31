"""TLS from Kafka's settings, and the principal of a client certificate.

`build_server_context(settings, listener)` reads Kafka's PEM keystore/truststore settings
(with `listener.name.<l>.` overrides) into an `ssl.SSLContext`. Everything is checked with
`cryptography` first, so a bad file is one line naming the setting ("the private key does
not match the certificate") rather than OpenSSL's "PEM lib". Only PEM is read (as
`ssl.keystore.type=PEM`); JKS/PKCS12 stores are refused with the conversion to use.

`ssl_principal(cert_der, mapper)` (Kafka's DefaultKafkaPrincipalBuilder for SSL) lives in
`yak.security.ssl_principal`, which does not need `cryptography`, and is re-exported here.
This module imports `cryptography`: the composition imports it only for a TLS listener.
"""

from __future__ import annotations

import os
import re
import secrets
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from yak.security.settings import get_setting, lookup
from yak.security.ssl_principal import (  # the principal side, re-exported
    NoMatchingRule,
    SslPrincipalMapper,
    rfc2253_name,
    ssl_principal,
)
from yak.settings import ConfigError

__all__ = [
    "NoMatchingRule",
    "SslPrincipalMapper",
    "build_client_context",
    "build_server_context",
    "reload_keystore",
    "rfc2253_name",
    "ssl_principal",
]


# --------------------------------------------------------------------------- key material


def _where(settings: Mapping[str, str], key: str, listener: str | None) -> str:
    found = lookup(settings, key, listener)
    return found[0] if found else key


def _read(settings: Mapping[str, str], key: str, listener: str | None) -> bytes:
    path = get_setting(settings, key, listener)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(
            f"invalid value {path!r} for {_where(settings, key, listener)}: {e.strerror}"
        ) from None


def _certs(data: bytes, key: str) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise ConfigError(f"invalid value for {key}: no PEM certificate found")
    return certs


def _private_key(data: bytes, password: str | None, key: str, pw_key: str):  # noqa: ANN202
    blocks = re.findall(rb"-----BEGIN ([A-Z ]*PRIVATE KEY)-----.*?-----END \1-----", data, re.S)
    if not blocks:
        raise ConfigError(f"invalid value for {key}: no PEM private key found")
    m = re.search(rb"-----BEGIN ([A-Z ]*PRIVATE KEY)-----.*?-----END \1-----", data, re.S)
    assert m is not None
    pem = m.group(0)
    encrypted = b"ENCRYPTED" in m.group(1) or b"Proc-Type: 4,ENCRYPTED" in pem
    if encrypted and not password:
        raise ConfigError(f"invalid value for {key}: the private key is encrypted; set {pw_key}")
    try:
        return serialization.load_pem_private_key(
            pem, password.encode() if (encrypted and password) else None
        )
    except (ValueError, TypeError) as e:
        what = "wrong password or corrupt key" if encrypted else str(e).split("\n")[0]
        raise ConfigError(
            f"invalid value for {key}: cannot read the private key ({what})"
        ) from None


@dataclass
class _KeyStore:
    key: object
    chain: list[x509.Certificate]


def _load_keystore(settings: Mapping[str, str], listener: str | None) -> _KeyStore | None:
    loc = get_setting(settings, "ssl.keystore.location", listener)
    inline_key = get_setting(settings, "ssl.keystore.key", listener)
    inline_chain = get_setting(settings, "ssl.keystore.certificate.chain", listener)
    ktype = str(get_setting(settings, "ssl.keystore.type", listener)).upper()
    type_key = _where(settings, "ssl.keystore.type", listener)
    pw_key = _where(settings, "ssl.key.password", listener)
    key_password = get_setting(settings, "ssl.key.password", listener)
    if loc is None and inline_key is None and inline_chain is None:
        return None
    if ktype != "PEM":
        if inline_key is not None or inline_chain is not None:
            raise ConfigError(
                f"invalid value {ktype!r} for {type_key}: SSL private key can be specified only "
                "for PEM"
            )
        raise ConfigError(
            f"invalid value {ktype!r} for {type_key}: Yak reads PEM key stores only; set "
            "ssl.keystore.type=PEM (convert with: openssl pkcs12 -in store.p12 -nodes -out "
            "store.pem)"
        )
    if get_setting(settings, "ssl.keystore.password", listener) is not None:
        raise ConfigError(
            f"invalid setting {_where(settings, 'ssl.keystore.password', listener)}: SSL key "
            "store password cannot be specified with PEM format, only key password may be "
            "specified"
        )
    if loc is not None:
        if inline_key is not None or inline_chain is not None:
            raise ConfigError(
                f"{_where(settings, 'ssl.keystore.location', listener)} and "
                "ssl.keystore.key/ssl.keystore.certificate.chain are both set; set one"
            )
        where = _where(settings, "ssl.keystore.location", listener)
        data = _read(settings, "ssl.keystore.location", listener)
        key = _private_key(data, key_password, where, pw_key)
        chain = _certs(data, where)
    else:
        if inline_key is None or inline_chain is None:
            raise ConfigError(
                "ssl.keystore.key and ssl.keystore.certificate.chain must be set together"
            )
        key = _private_key(
            inline_key.encode(),
            key_password,
            _where(settings, "ssl.keystore.key", listener),
            pw_key,
        )
        where = _where(settings, "ssl.keystore.certificate.chain", listener)
        chain = _certs(inline_chain.encode(), where)
    pub = key.public_key().public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    leaf = (
        chain[0]
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    if pub != leaf:
        raise ConfigError(
            f"invalid value for {where}: the private key does not match the first certificate"
        )
    return _KeyStore(key, chain)


def _truststore_pem(settings: Mapping[str, str], listener: str | None) -> str | None:
    loc = get_setting(settings, "ssl.truststore.location", listener)
    inline = get_setting(settings, "ssl.truststore.certificates", listener)
    if loc is None and inline is None:
        return None
    ttype = str(get_setting(settings, "ssl.truststore.type", listener)).upper()
    if ttype != "PEM":
        raise ConfigError(
            f"invalid value {ttype!r} for {_where(settings, 'ssl.truststore.type', listener)}: "
            "Yak reads PEM trust stores only; set ssl.truststore.type=PEM"
        )
    if get_setting(settings, "ssl.truststore.password", listener) is not None:
        raise ConfigError(
            f"invalid setting {_where(settings, 'ssl.truststore.password', listener)}: trust "
            "store password cannot be specified for PEM format"
        )
    if loc is not None and inline is not None:
        raise ConfigError("ssl.truststore.location and ssl.truststore.certificates are both set")
    if loc is not None:
        data = _read(settings, "ssl.truststore.location", listener)
        where = _where(settings, "ssl.truststore.location", listener)
    else:
        data = inline.encode()
        where = _where(settings, "ssl.truststore.certificates", listener)
    certs = _certs(data, where)
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def _load_into(ctx: ssl.SSLContext, ks: _KeyStore) -> None:
    """`load_cert_chain` only reads files: write the key re-encrypted under a one-time
    password (never in clear on disk) plus the chain to a private temp file, load, delete."""
    one_time = secrets.token_urlsafe(24)
    key_pem = ks.key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(one_time.encode()),
    )
    chain_pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in ks.chain)
    fd, path = tempfile.mkstemp(prefix="yak-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem + chain_pem)
        ctx.load_cert_chain(path, password=one_time)
    finally:
        os.unlink(path)


def reload_keystore(settings: Mapping[str, str], listener: str | None,
                    ctx: ssl.SSLContext | None = None) -> None:
    """Read the listener's keystore again (a dynamic `listener.name.<l>.ssl.keystore.*`
    change, issue 23) into its live server context: new handshakes get the new key and
    chain, connections already open keep theirs. Without `ctx`, only checks that the
    keystore loads (ConfigError naming the key otherwise)."""
    ks = _load_keystore(settings, listener)
    if ks is None:
        raise ConfigError(f"listener {listener or ''} uses TLS but has no key: set"
                          " ssl.keystore.location or ssl.keystore.key and"
                          " ssl.keystore.certificate.chain")
    _load_into(ctx if ctx is not None else ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), ks)


# --------------------------------------------------------------------------- protocols, ciphers

_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_TLS13_SUITES = {"TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"}
_IANA_CIPHER = {
    "AES_128_GCM": "AES128-GCM",
    "AES_256_GCM": "AES256-GCM",
    "AES_128_CBC": "AES128",
    "AES_256_CBC": "AES256",
    "CHACHA20_POLY1305": "CHACHA20-POLY1305",
}
_IANA_KX = {
    "ECDHE_ECDSA": "ECDHE-ECDSA-",
    "ECDHE_RSA": "ECDHE-RSA-",
    "DHE_RSA": "DHE-RSA-",
    "RSA": "",
}


def _openssl_cipher_name(name: str) -> str:
    """Kafka users write IANA/Java names (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256); OpenSSL
    wants ECDHE-RSA-AES128-GCM-SHA256. OpenSSL names pass through."""
    m = re.fullmatch(r"TLS_([A-Z_]+?)_WITH_([A-Z0-9_]+?)_(SHA|SHA256|SHA384)", name)
    if not m:
        return name
    kx, cipher, mac = m.groups()
    if kx not in _IANA_KX or cipher not in _IANA_CIPHER:
        return name
    c = _IANA_CIPHER[cipher]
    if cipher == "CHACHA20_POLY1305":
        return _IANA_KX[kx] + c
    if cipher.endswith("_GCM"):
        return f"{_IANA_KX[kx]}{c}-{mac}"
    return f"{_IANA_KX[kx]}{c}-{mac}"  # CBC: AES128-SHA, ECDHE-RSA-AES128-SHA256


def _apply_protocols_and_ciphers(
    ctx: ssl.SSLContext, settings: Mapping[str, str], listener: str | None
) -> None:
    pkey = _where(settings, "ssl.enabled.protocols", listener)
    protos = get_setting(settings, "ssl.enabled.protocols", listener)
    versions = []
    for p in protos:
        if p not in _PROTOCOLS:
            raise ConfigError(
                f"invalid value {','.join(protos)!r} for {pkey}: {p} is not supported "
                "(TLSv1.2, TLSv1.3)"
            )
        versions.append(_PROTOCOLS[p])
    if not versions:
        raise ConfigError(f"invalid value for {pkey}: no protocol enabled")
    ctx.minimum_version = min(versions)
    ctx.maximum_version = max(versions)
    proto = get_setting(settings, "ssl.protocol", listener)
    if proto not in ("TLS", "TLSv1.2", "TLSv1.3"):
        raise ConfigError(
            f"invalid value {proto!r} for {_where(settings, 'ssl.protocol', listener)}: "
            "expected TLS, TLSv1.2 or TLSv1.3"
        )
    ckey = _where(settings, "ssl.cipher.suites", listener)
    suites = get_setting(settings, "ssl.cipher.suites", listener)
    if not suites:
        return
    tls13 = {s for s in suites if s in _TLS13_SUITES}
    if tls13 and tls13 != _TLS13_SUITES and ssl.TLSVersion.TLSv1_3 in versions:
        raise ConfigError(
            f"invalid value for {ckey}: Python's ssl module cannot restrict TLS 1.3 suites; "
            "list all three or none, or disable TLSv1.3 in ssl.enabled.protocols"
        )
    legacy = [_openssl_cipher_name(s) for s in suites if s not in _TLS13_SUITES]
    if not legacy:
        if ssl.TLSVersion.TLSv1_2 in versions and ssl.TLSVersion.TLSv1_3 not in versions:
            raise ConfigError(f"invalid value for {ckey}: no TLS 1.2 cipher suite listed")
        return
    known = {c["name"] for c in ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).get_ciphers()}
    for orig, name in zip([s for s in suites if s not in _TLS13_SUITES], legacy, strict=True):
        if name not in known:
            raise ConfigError(f"invalid value for {ckey}: unknown or disabled cipher suite {orig}")
    ctx.set_ciphers(":".join(legacy))


# --------------------------------------------------------------------------- contexts

_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


def build_server_context(
    settings: Mapping[str, str], listener: str | None = None
) -> ssl.SSLContext:
    """The SSLContext for an SSL or SASL_SSL listener (ConfigError for anything unusable)."""
    ks = _load_keystore(settings, listener)
    if ks is None:
        raise ConfigError(
            f"listener {listener or ''} uses TLS but has no key: set ssl.keystore.location "
            "(ssl.keystore.type=PEM) or ssl.keystore.key and ssl.keystore.certificate.chain"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.options |= ssl.OP_NO_COMPRESSION
    _apply_protocols_and_ciphers(ctx, settings, listener)
    _load_into(ctx, ks)
    auth = get_setting(settings, "ssl.client.auth", listener)
    trust = _truststore_pem(settings, listener)
    if auth != "none":
        if trust is None:
            raise ConfigError(
                f"{_where(settings, 'ssl.client.auth', listener)}={auth} needs the CAs of client "
                "certificates: set ssl.truststore.location (ssl.truststore.type=PEM) or "
                "ssl.truststore.certificates"
            )
        ctx.load_verify_locations(cadata=trust)
    ctx.verify_mode = _CLIENT_AUTH[auth]
    # Kafka: ssl.principal.mapping.rules must parse at start-up, not at the first login.
    SslPrincipalMapper.from_rules(get_setting(settings, "ssl.principal.mapping.rules", listener))
    return ctx


def server_pem_material(
    settings: Mapping[str, str], listener: str | None = None
) -> tuple[bytes, bytes, bytes | None, bool]:
    """For TLS servers that take PEM bytes rather than an SSLContext (the gRPC gateway):
    (private key as unencrypted PKCS#8 PEM, in memory only; certificate chain PEM; client
    CA PEM or None; whether client certificates are required), from the same Kafka
    settings as a listener (`ssl.keystore.*`, `ssl.truststore.*`, `ssl.client.auth`)."""
    ks = _load_keystore(settings, listener)
    if ks is None:
        raise ConfigError("TLS needs a key: set ssl.keystore.location (ssl.keystore.type=PEM)"
                          " or ssl.keystore.key and ssl.keystore.certificate.chain")
    key = ks.key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in ks.chain)
    auth = get_setting(settings, "ssl.client.auth", listener)
    trust = _truststore_pem(settings, listener)
    if auth != "none" and trust is None:
        raise ConfigError(f"ssl.client.auth={auth} needs the CAs of client certificates: set "
                          "ssl.truststore.location (ssl.truststore.type=PEM)")
    return key, chain, (trust.encode() if trust and auth != "none" else None), auth == "required"


def build_client_context(
    settings: Mapping[str, str], listener: str | None = None
) -> ssl.SSLContext:
    """A client SSLContext from the same settings (inter-broker, tools): verifies the broker
    against the truststore (system CAs if none), its host name unless
    `ssl.endpoint.identification.algorithm` is empty, and presents the keystore if any."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_protocols_and_ciphers(ctx, settings, listener)
    trust = _truststore_pem(settings, listener)
    if trust is None:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    else:
        ctx.load_verify_locations(cadata=trust)
    algo = get_setting(settings, "ssl.endpoint.identification.algorithm", listener)
    if algo not in ("", "https", "HTTPS"):
        raise ConfigError(
            f"invalid value {algo!r} for ssl.endpoint.identification.algorithm: expected "
            "https or empty"
        )
    ctx.check_hostname = bool(algo)
    ks = _load_keystore(settings, listener)
    if ks is not None:
        _load_into(ctx, ks)
    return ctx
