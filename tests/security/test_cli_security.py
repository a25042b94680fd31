"""`yak` against a secured broker: `--command-config` / `-X` on the client commands, and
`yak user`, `yak acl`, `yak quota` (all subprocesses against a real broker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from security.conftest import JAAS_SCRAM, Certs, SecuredBroker, plain_users, start_secured

YAK = [sys.executable, "-m", "yak.cli.main"]


def yak(*args: str, stdin: str | None = None, timeout: float = 60):
    return subprocess.run([*YAK, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


def ok(*args: str, **kw) -> str:
    r = yak(*args, **kw)
    assert r.returncode == 0, f"yak {' '.join(args)} failed: {r.stderr}"
    return r.stdout


def one_line_error(r: subprocess.CompletedProcess, code: int, *fragments: str) -> None:
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("yak: error: ") and "Traceback" not in r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> SecuredBroker:
    d = tmp_path_factory.mktemp("cli") / "data"
    d.mkdir()
    broker = start_secured(
        d, ["SASL_SSL", "PLAINTEXT"], certs,
        **{
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_users(admin="admin-secret"),
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": JAAS_SCRAM,
            "authorizer.class.name": "yak.StandardAuthorizer",
            "super.users": "User:admin",
        },
    )
    yield broker
    broker.stop(10)


@pytest.fixture(scope="module")
def admin_props(tmp_path_factory, certs) -> Path:
    p = tmp_path_factory.mktemp("props") / "admin.properties"
    # Kafka's own client settings, as a Kafka tool's --command-config file holds them.
    p.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="admin" password="admin-secret";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certs.ca}\n"
    )
    return p


def _alice(certs: Certs, password: str = "alice-pw") -> list[str]:
    # librdkafka's names, as kcat -X takes them.
    return ["-X", "security.protocol=sasl_ssl", "-X", "sasl.mechanism=SCRAM-SHA-512",
            "-X", "sasl.username=alice", "-X", f"sasl.password={password}",
            "-X", f"ssl.ca.location={certs.ca}"]


@pytest.mark.slow  # 21-39 s of CLI processes; CI keeps under 30 min (make test-slow runs it)
def test_users_acls_and_clients_through_the_cli(b, certs, admin_props):
    adm = ["--bootstrap", b.addr("SASL_SSL"), "--command-config", str(admin_props)]
    alice = ["--bootstrap", b.addr("SASL_SSL"), *_alice(certs)]
    ok("topic", "create", "cli-orders", "-p", "1", *adm)
    assert "user alice" in ok("user", "create", "alice", "--password", "alice-pw",
                              "--mechanism", "SCRAM-SHA-512", *adm)
    users = json.loads(ok("user", "list", "--format", "json", *adm))
    assert {"user": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 8192} in users

    # alice logs in but may not even see the topic yet.
    r = yak("produce", "cli-orders", *alice, "--timeout", "5", stdin="nope\n")
    one_line_error(r, 1, "'cli-orders' does not exist or this principal may not describe it")

    ok("acl", "add", "--allow-principal", "User:alice", "--operation", "write",
       "--operation", "read", "--topic", "cli-", "--resource-pattern-type", "prefixed", *adm)
    ok("acl", "add", "--allow-principal", "User:alice", "--operation", "read",
       "--group", "*", *adm)
    listed = json.loads(ok("acl", "list", "--principal", "User:alice", "--format", "json",
                           *adm))
    assert {(a["resource_type"], a["name"], a["pattern_type"], a["operation"])
            for a in listed} == {("TOPIC", "cli-", "PREFIXED", "WRITE"),
                                 ("TOPIC", "cli-", "PREFIXED", "READ"),
                                 ("GROUP", "*", "LITERAL", "READ")}
    ok("produce", "cli-orders", *alice, stdin="hello\nworld\n")
    out = ok("consume", "cli-orders", "--from-beginning", "-n", "2", *alice)
    assert out.split() == ["hello", "world"]
    # Topics alice may not describe are hidden from her.
    ok("topic", "create", "private", *adm)
    names = {t["name"] for t in json.loads(ok("topic", "list", "--format", "json", *alice))}
    assert "cli-orders" in names and "private" not in names

    # Revoke, and she is refused again.
    assert "removed 2 ACL(s)" in ok("acl", "remove", "--principal", "User:alice",
                                    "--topic", "cli-", "--resource-pattern-type", "prefixed",
                                    *adm)
    one_line_error(yak("produce", "cli-orders", *alice, "--timeout", "5", stdin="x\n"), 1,
                   "may not describe it")
    # A wrong password is one line, exit 1.
    r = yak("topic", "list", "--bootstrap", b.addr("SASL_SSL"), *_alice(certs, "wrong"),
            "--timeout", "5")
    one_line_error(r, 1, "uthentication")
    # Listing users needs DESCRIBE on the cluster: refused in one line (librdkafka would
    # crash the process on the API's refusal, so the CLI asks the cluster first).
    one_line_error(yak("user", "list", *alice), 1, "CLUSTER_AUTHORIZATION_FAILED")
    ok("user", "delete", "alice", *adm)
    assert json.loads(ok("user", "list", "--format", "json", *adm)) == []


@pytest.mark.slow
def test_quotas_through_the_cli(b, admin_props):
    adm = ["--bootstrap", b.addr("SASL_SSL"), "--command-config", str(admin_props)]
    ok("quota", "set", "--user", "alice", "producer_byte_rate=1048576",
       "consumer_byte_rate=2097152", *adm)
    ok("quota", "set", "--default-user", "--client-id", "etl", "request_percentage=25", *adm)
    listed = json.loads(ok("quota", "list", "--format", "json", *adm))
    assert {"entity": {"user": "alice"},
            "quotas": {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0}} \
        in listed
    assert {"entity": {"user": None, "client-id": "etl"},
            "quotas": {"request_percentage": 25.0}} in listed
    ok("quota", "set", "--user", "alice", "--delete", "consumer_byte_rate", *adm)
    assert "producer_byte_rate=1048576" in ok("quota", "list", "--user", "alice", *adm)
    one_line_error(yak("quota", "set", "--user", "alice", "producer_byte_rate=1.5", *adm), 1,
                   "INVALID_REQUEST", "fractional")
    one_line_error(yak("quota", "set", "--user", "alice", "bogus=1", *adm), 2, "bogus")
    # Not allowed for a principal without ALTER_CONFIGS on the cluster (ANONYMOUS here).
    one_line_error(yak("quota", "set", "--user", "x", "producer_byte_rate=1",
                       "--bootstrap", b.addr("PLAINTEXT")), 1, "CLUSTER_AUTHORIZATION_FAILED")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["-X", "security.protocol=TELEPATHY"], "security.protocol"),
        (["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=GSSAPI",
          "-X", "sasl.username=a", "-X", "sasl.password=b"], "sasl.mechanism"),
        (["-X", "security.protocol=SASL_PLAINTEXT"], "sasl.username"),
        (["-X", "ssl.ca.location=/nonexistent/ca.pem", "-X", "security.protocol=SSL"],
         "ssl.ca.location"),
        (["--command-config", "/nonexistent/client.properties"], "client.properties"),
        (["-X", "novalue"], "novalue"),
        # Credentials with a plaintext protocol would be silently unused: refused instead.
        (["-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=a", "-X", "sasl.password=b"],
         "security.protocol is PLAINTEXT"),
    ],
)
def test_bad_client_security_settings_are_usage_errors(args, fragment):
    r = yak("topic", "list", "--bootstrap", "127.0.0.1:1", *args)
    one_line_error(r, 2, fragment)
