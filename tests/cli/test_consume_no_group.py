"""`yak consume` without `--group` uses no consumer group (issue 26): under ACLs a principal
with READ on the topic alone reads it, as kcat does; with `--group` it needs the group."""

from __future__ import annotations

from pathlib import Path

import pytest
from security.conftest import certs, plain_users, start_secured  # noqa: F401 (fixture)

from tests.cli.test_cli import ok, one_line_error, yak


def login(user: str, password: str) -> list[str]:
    return ["-X", "security.protocol=sasl_plaintext", "-X", "sasl.mechanism=PLAIN",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]


@pytest.fixture
def secured(tmp_path: Path, certs):  # noqa: ANN001, ANN201, F811
    d = tmp_path / "data"
    d.mkdir()
    b = start_secured(
        d, ["SASL_PLAINTEXT"], certs,
        **{"sasl.enabled.mechanisms": "PLAIN",
           "listener.name.sasl_plaintext.plain.sasl.jaas.config":
               plain_users(admin="admin-secret", alice="alice-secret",
                           bob="bob-secret"),
           "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
           "super.users": "User:admin"})
    yield b
    b.stop(10)
    b.kill()


@pytest.mark.slow
def test_consume_needs_no_group_acl(secured) -> None:  # noqa: ANN001
    bs = ["--bootstrap", secured.addr("SASL_PLAINTEXT")]
    adm = [*bs, *login("admin", "admin-secret")]
    alice = [*bs, *login("alice", "alice-secret")]
    ok("topic", "create", "reads", "-p", "2", *adm)
    ok("produce", "reads", "--partition", "1", *adm, stdin="one\ntwo\n")
    ok("acl", "add", "--allow-principal", "User:alice", "--operation", "read", "--topic",
       "reads", *adm)

    # READ on the topic is enough: no group is looked up, joined or committed to.
    out = ok("consume", "reads", "--from-beginning", "-n", "2", "--idle-timeout", "20", *alice)
    assert out.splitlines() == ["one", "two"]
    out = ok("consume", "reads", "-p", "1", "--offset", "1", "-n", "1", *alice)
    assert out.splitlines() == ["two"]
    assert "yak-cli" not in ok("group", "list", *adm)

    # DESCRIBE without READ: the fetch is refused, in one line.
    ok("acl", "add", "--allow-principal", "User:bob", "--operation", "describe", "--topic",
       "reads", *adm)
    r = yak("consume", "reads", "--from-beginning", "-n", "1", "--idle-timeout", "10", *bs,
            *login("bob", "bob-secret"))
    one_line_error(r, "TOPIC_AUTHORIZATION_FAILED")
    assert r.returncode == 1

    # --group does use the group, so it needs READ on it.
    r = yak("consume", "reads", "--group", "billing", "--from-beginning", "-n", "1",
            "--idle-timeout", "10", *alice)
    one_line_error(r, "GROUP_AUTHORIZATION_FAILED")
    ok("acl", "add", "--allow-principal", "User:alice", "--operation", "read", "--group",
       "billing", *adm)
    out = ok("consume", "reads", "--group", "billing", "--from-beginning", "-n", "2", *alice)
    assert sorted(out.splitlines()) == ["one", "two"]
