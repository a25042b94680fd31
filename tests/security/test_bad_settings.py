"""A bad security setting stops `yak serve`: exit 2, one line naming the key, no secret.

The security part of the settings table, with the values core's every-setting test
(tests/cli/test_bad_settings.py) leaves to this part: paths, JAAS configs, principals,
listener combinations. Tried through `configure()` (what `yak serve` runs before it opens
a socket) and, for a subset, through the `yak serve` command itself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from security.conftest import Certs
from yak.broker.broker import StartupError
from yak.broker.server import configure

JAAS_BAD = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'user_admin="hunter2"')  # no closing ';'


def cases(certs: Certs) -> list[tuple[dict[str, str], str]]:
    ssl_ok = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
              "ssl.keystore.location": str(certs.broker)}
    sasl = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"}
    return [
        ({"listeners": "SASL_SSL://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-256"},
         "ssl.keystore.location"),
        ({**ssl_ok, "ssl.keystore.location": "/nonexistent/broker.pem"},
         "ssl.keystore.location"),
        ({**ssl_ok, "ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
        ({**ssl_ok, "ssl.client.auth": "sometimes"}, "ssl.client.auth"),
        ({**ssl_ok, "ssl.client.auth": "required"}, "ssl.client.auth"),  # no truststore
        ({**ssl_ok, "ssl.enabled.protocols": "TLSv1"}, "ssl.enabled.protocols"),
        ({**ssl_ok, "ssl.cipher.suites": "TLS_NOT_A_CIPHER"}, "ssl.cipher.suites"),
        ({**ssl_ok, "ssl.principal.mapping.rules": "RULE:^(.*$/$1/"},
         "ssl.principal.mapping.rules"),
        ({**ssl_ok, "ssl.keystore.password": "pw"}, "ssl.keystore.password"),
        ({**sasl, "sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
        (sasl, "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
        ({**sasl, "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS_BAD},
         "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
        ({**sasl, "listener.name.SASL_PLAINTEXT.plain.sasl.jaas.config": "x"},
         "listener.name.SASL_PLAINTEXT"),
        ({"connections.max.reauth.ms": "-1"}, "connections.max.reauth.ms"),
        ({"sasl.server.max.receive.size": "0"}, "sasl.server.max.receive.size"),
        ({"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer"},
         "authorizer.class.name"),
        ({"super.users": "admin"}, "super.users"),
        ({"allow.everyone.if.no.acl.found": "maybe"}, "allow.everyone.if.no.acl.found"),
        ({"principal.builder.class": "com.example.Builder"}, "principal.builder.class"),
        ({"quota.window.num": "0"}, "quota.window.num"),
        ({"quota.window.size.seconds": "x"}, "quota.window.size.seconds"),
        ({"controller.quota.window.num": "0"}, "controller.quota.window.num"),
        ({"inter.broker.listener.name": "NOPE"}, "inter.broker.listener.name"),
        ({"security.inter.broker.protocol": "SSL"}, "inter.broker.listener.name"),
        ({"listeners": "PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"}, "listeners"),
        ({"listeners": "CLIENT://127.0.0.1:0"}, "listeners"),
        ({"advertised.listeners": "SSL://example.com:9093"}, "advertised.listeners"),
        ({"listener.security.protocol.map": "CLIENT:SASL_SSL,CLIENT:SSL"},
         "listener.security.protocol.map"),
        ({"sasl.mechanism.inter.broker.protocol": "PLAIN",
          "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
          "inter.broker.listener.name": "SASL_PLAINTEXT"},
         "sasl.mechanism.inter.broker.protocol"),
    ]


def test_every_bad_security_setting_is_exit_2_naming_the_key(tmp_path: Path, certs: Certs):
    for i, (settings, key) in enumerate(cases(certs)):
        with pytest.raises(StartupError) as ei:
            configure(data_dir=tmp_path / f"d{i}",
                      overrides=[f"{k}={v}" for k, v in settings.items()])
        message = str(ei.value)
        assert ei.value.exit_code == 2, (settings, message)
        assert key in message, (settings, message)
        assert "\n" not in message and "hunter2" not in message, message


@pytest.mark.parametrize("which", [0, 11, 15])
def test_yak_serve_exits_2_with_one_line(tmp_path: Path, certs: Certs, which: int):
    settings, key = cases(certs)[which]
    args = [a for k, v in settings.items() for a in ("--set", f"{k}={v}")]
    r = subprocess.run(
        [sys.executable, "-m", "yak.cli.main", "serve", "--data-dir", str(tmp_path / "d"),
         "--http", "none", *args],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("yak: ") and key in r.stderr
    assert "hunter2" not in r.stderr and "Traceback" not in r.stderr
    assert "ready" not in r.stdout
