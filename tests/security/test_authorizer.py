"""The authorizer: Kafka's StandardAuthorizer rules, ACL API semantics, the file store.

Property tests compare the indexed authorizer with a brute-force reading of Kafka's rules
over every stored ACL, and check that a DENY which applies always wins.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yak.errors import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
)
from yak.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from yak.security.authorizer import (
    FileAclStore,
    MemoryAclStore,
    StandardAuthorizer,
    authorization_error,
)
from yak.security.principal import KafkaPrincipal

T, G, C, X = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")


def acl(rt, name, pt, principal, op, perm, host="*") -> AclBinding:
    return AclBinding(ResourcePattern(rt, name, pt), AccessControlEntry(principal, host, op, perm))


def authz(*bindings: AclBinding, **kw) -> StandardAuthorizer:
    a = StandardAuthorizer(MemoryAclStore(bindings), **kw)
    a.load()
    return a


def test_no_acls_denies_by_default_and_allow_everyone_allows():
    assert not authz().authorize(ALICE, "127.0.0.1", Op.READ, T, "orders")
    assert authz(allow_everyone_if_no_acl_found=True).authorize(ALICE, "1.2.3.4", Op.READ, T, "x")


def test_allow_everyone_only_applies_when_the_resource_has_no_acls_at_all():
    a = authz(
        acl(T, "orders", LIT, "User:bob", Op.READ, ALLOW), allow_everyone_if_no_acl_found=True
    )
    assert not a.authorize(ALICE, "h", Op.READ, T, "orders")  # orders has an ACL (for bob)
    assert a.authorize(ALICE, "h", Op.READ, T, "payments")  # payments has none


def test_literal_prefixed_and_wildcard_resources():
    a = authz(
        acl(T, "orders", LIT, "User:alice", Op.READ, ALLOW),
        acl(T, "pay-", PRE, "User:alice", Op.WRITE, ALLOW),
        acl(G, "*", LIT, "User:alice", Op.READ, ALLOW),
    )
    assert a.authorize(ALICE, "h", Op.READ, T, "orders")
    assert not a.authorize(ALICE, "h", Op.READ, T, "orders2")  # literal is exact
    assert a.authorize(ALICE, "h", Op.WRITE, T, "pay-eu")
    assert a.authorize(ALICE, "h", Op.WRITE, T, "pay-")
    assert not a.authorize(ALICE, "h", Op.WRITE, T, "pay")
    assert not a.authorize(ALICE, "h", Op.WRITE, T, "xpay-eu")
    assert a.authorize(ALICE, "h", Op.READ, G, "any-group")
    assert not a.authorize(BOB, "h", Op.READ, G, "any-group")


def test_deny_beats_allow_at_any_pattern():
    a = authz(
        acl(T, "*", LIT, "User:*", Op.ALL, ALLOW),
        acl(T, "secret-", PRE, "User:alice", Op.READ, DENY),
    )
    assert a.authorize(ALICE, "h", Op.READ, T, "public")
    assert not a.authorize(ALICE, "h", Op.READ, T, "secret-plans")
    assert a.authorize(ALICE, "h", Op.WRITE, T, "secret-plans")  # deny is for READ only
    assert a.authorize(BOB, "h", Op.READ, T, "secret-plans")


def test_implied_operations_only_for_allow():
    a = authz(
        acl(T, "t", LIT, "User:alice", Op.WRITE, ALLOW),
        acl(T, "c", LIT, "User:alice", Op.ALTER_CONFIGS, ALLOW),
        acl(T, "d", LIT, "User:alice", Op.DESCRIBE, ALLOW),
        acl(T, "d", LIT, "User:alice", Op.READ, DENY),
    )
    assert a.authorize(ALICE, "h", Op.DESCRIBE, T, "t")  # WRITE implies DESCRIBE
    assert not a.authorize(ALICE, "h", Op.READ, T, "t")
    assert a.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, T, "c")
    assert not a.authorize(ALICE, "h", Op.DESCRIBE, T, "c")  # ALTER_CONFIGS does not
    # a DENY READ does not deny DESCRIBE (implication is for ALLOW ACLs only)
    assert a.authorize(ALICE, "h", Op.DESCRIBE, T, "d")
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        b = authz(acl(G, "g", LIT, "User:alice", op, ALLOW))
        assert b.authorize(ALICE, "h", Op.DESCRIBE, G, "g"), op


def test_all_operation_and_host_matching():
    a = authz(
        acl(C, "kafka-cluster", LIT, "User:alice", Op.ALL, ALLOW, host="10.0.0.1"),
    )
    assert a.authorize(ALICE, "10.0.0.1", Op.CREATE, C, "kafka-cluster")
    assert a.authorize(ALICE, "10.0.0.1", Op.IDEMPOTENT_WRITE, C, "kafka-cluster")
    assert not a.authorize(ALICE, "10.0.0.2", Op.CREATE, C, "kafka-cluster")


def test_super_users_bypass_deny():
    a = authz(acl(T, "*", LIT, "User:*", Op.ALL, DENY), super_users={"User:admin"})
    assert a.authorize(KafkaPrincipal("User", "admin"), "h", Op.DELETE, T, "anything")
    assert not a.authorize(ALICE, "h", Op.READ, T, "anything")


def test_principal_type_must_match():
    a = authz(acl(T, "t", LIT, "Group:alice", Op.READ, ALLOW))
    assert not a.authorize(ALICE, "h", Op.READ, T, "t")


def test_authorization_error_codes():
    assert authorization_error(T).code == ErrorCode.topic_authorization_failed == 29
    assert authorization_error(G).code == 30
    assert authorization_error(C).code == 31
    assert authorization_error(X).code == 53
    assert isinstance(authorization_error(T), TopicAuthorizationFailedError)
    assert isinstance(authorization_error(G), GroupAuthorizationFailedError)
    assert isinstance(authorization_error(C), ClusterAuthorizationFailedError)
    assert isinstance(authorization_error(X), TransactionalIdAuthorizationFailedError)


def test_authorize_by_resource_type():
    host = "h"
    assert authz(acl(T, "a", LIT, "User:alice", Op.WRITE, ALLOW)).authorize_by_resource_type(
        ALICE, host, Op.WRITE, T
    )
    # the only allowed topic is also denied literally
    a = authz(
        acl(T, "a", LIT, "User:alice", Op.WRITE, ALLOW),
        acl(T, "a", LIT, "User:alice", Op.WRITE, DENY),
    )
    assert not a.authorize_by_resource_type(ALICE, host, Op.WRITE, T)
    # a prefix deny dominates every literal/prefix allow under it
    a = authz(
        acl(T, "app-x", LIT, "User:alice", Op.WRITE, ALLOW),
        acl(T, "app-y", PRE, "User:alice", Op.WRITE, ALLOW),
        acl(T, "app-", PRE, "User:*", Op.WRITE, DENY),
    )
    assert not a.authorize_by_resource_type(ALICE, host, Op.WRITE, T)
    a = authz(
        acl(T, "app-x", LIT, "User:alice", Op.WRITE, ALLOW),
        acl(T, "other", PRE, "User:*", Op.WRITE, DENY),
    )
    assert a.authorize_by_resource_type(ALICE, host, Op.WRITE, T)
    assert not authz().authorize_by_resource_type(ALICE, host, Op.WRITE, T)
    assert authz(super_users={"User:alice"}).authorize_by_resource_type(ALICE, host, Op.WRITE, T)
    assert not authz(
        acl(T, "*", LIT, "User:alice", Op.WRITE, DENY),
        acl(T, "a", LIT, "User:alice", Op.WRITE, ALLOW),
    ).authorize_by_resource_type(ALICE, host, Op.WRITE, T)


# --------------------------------------------------------------------------- ACL APIs


def run(coro):
    return asyncio.run(coro)


def test_create_validates_each_binding_and_is_idempotent():
    a = authz()
    good = acl(T, "t", LIT, "User:alice", Op.READ, ALLOW)
    results = run(
        a.create_acls(
            [
                good,
                acl(C, "not-kafka-cluster", LIT, "User:alice", Op.ALTER, ALLOW),
                acl(T, "", LIT, "User:alice", Op.READ, ALLOW),
                acl(T, "t", PatternType.MATCH, "User:alice", Op.READ, ALLOW),
                acl(T, "t", LIT, "alice", Op.READ, ALLOW),
                acl(T, "t", LIT, "User:alice", Op.ANY, ALLOW),
                acl(T, "t", LIT, "User:alice", Op.READ, AclPermissionType.ANY),
                acl(ResourceType.ANY, "t", LIT, "User:alice", Op.READ, ALLOW),
                good,
            ]
        )
    )
    assert results[0] is None and results[-1] is None
    assert all(isinstance(r, InvalidRequestError) for r in results[1:-1])
    assert "kafka-cluster" in results[1].message
    assert "empty resource name" in results[2].message
    assert "no colon" in results[4].message
    assert a.acls(
        AclBindingFilter(
            ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
            AccessControlEntryFilter(None, None, Op.ANY, AclPermissionType.ANY),
        )
    ) == [good]
    assert run(a.create_acls([good])) == [None]
    assert a.authorize(ALICE, "h", Op.READ, T, "t")
    v0 = run(a.create_acls([acl(T, "p", PRE, "User:alice", Op.READ, ALLOW)], api_version=0))
    assert isinstance(v0[0], UnsupportedVersionError)


def _f(
    rt=ResourceType.ANY,
    name=None,
    pt=PatternType.ANY,
    principal=None,
    host=None,
    op=Op.ANY,
    perm=AclPermissionType.ANY,
) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(rt, name, pt), AccessControlEntryFilter(principal, host, op, perm)
    )


STORE = [
    acl(T, "orders", LIT, "User:alice", Op.READ, ALLOW),
    acl(T, "ord", PRE, "User:bob", Op.WRITE, ALLOW),
    acl(T, "*", LIT, "User:carol", Op.DESCRIBE, ALLOW),
    acl(T, "orders", PRE, "User:dave", Op.READ, DENY, host="10.1.1.1"),
    acl(G, "orders", LIT, "User:alice", Op.READ, ALLOW),
]


def test_describe_filter_semantics():
    a = authz(*STORE)
    # MATCH: everything that applies to the literal topic "orders"
    assert set(a.describe_acls(_f(T, "orders", PatternType.MATCH))) == set(STORE[:4])
    # ANY: exact name, any pattern type
    assert set(a.describe_acls(_f(T, "orders", PatternType.ANY))) == {STORE[0], STORE[3]}
    # a specific pattern type: exact name and type
    assert a.describe_acls(_f(T, "orders", PRE)) == [STORE[3]]
    assert a.describe_acls(_f(T, "ord", LIT)) == []
    # no name: all of that pattern type
    assert set(a.describe_acls(_f(T, None, LIT))) == {STORE[0], STORE[2]}
    # entry filters
    assert a.describe_acls(_f(principal="User:bob")) == [STORE[1]]
    assert a.describe_acls(_f(host="10.1.1.1")) == [STORE[3]]
    assert set(a.describe_acls(_f(perm=DENY))) == {STORE[3]}
    assert set(a.describe_acls(_f(rt=G))) == {STORE[4]}
    with pytest.raises(InvalidRequestError):
        a.describe_acls(_f(rt=ResourceType.UNKNOWN))
    with pytest.raises(InvalidRequestError):
        a.describe_acls(_f(op=Op.UNKNOWN))
    with pytest.raises(UnsupportedVersionError):
        a.describe_acls(_f(pt=PatternType.ANY), api_version=0)


def test_delete_filters_and_revocation_takes_effect():
    a = authz(*STORE)
    assert a.authorize(ALICE, "h", Op.READ, T, "orders")
    res = run(
        a.delete_acls(
            [
                _f(T, "orders", PatternType.MATCH, principal="User:alice"),
                _f(rt=ResourceType.UNKNOWN),
                _f(rt=G),
            ]
        )
    )
    assert res[0] == [STORE[0]]
    assert isinstance(res[1], InvalidRequestError)
    assert res[2] == [STORE[4]]
    assert not a.authorize(ALICE, "h", Op.READ, T, "orders")  # revoked immediately
    assert set(a.describe_acls(_f())) == set(STORE[1:4])


def test_file_store_persists_and_survives_reload(tmp_path):
    path = tmp_path / "__acls.json"
    a = StandardAuthorizer(FileAclStore(path))
    a.load()
    assert run(a.create_acls(STORE)) == [None] * len(STORE)
    run(a.delete_acls([_f(rt=G)]))
    doc = json.loads(path.read_text())
    assert doc["version"] == 1 and len(doc["acls"]) == 4
    assert doc["acls"][0]["resource_type"] == "TOPIC"
    b = StandardAuthorizer(FileAclStore(path))
    b.load()
    assert set(b.describe_acls(_f())) == set(STORE[:4])
    assert b.authorize(ALICE, "h", Op.READ, T, "orders")
    assert not list(tmp_path.glob("*.tmp"))


def test_failed_store_write_enforces_nothing():
    class Broken(MemoryAclStore):
        def apply(self, add, remove):
            raise OSError("disk full")

    a = StandardAuthorizer(Broken())
    a.load()
    res = run(a.create_acls([acl(T, "t", LIT, "User:alice", Op.READ, ALLOW)]))
    assert res[0] is not None and res[0].code == ErrorCode.unknown_server_error
    assert "disk full" in res[0].message
    assert not a.authorize(ALICE, "h", Op.READ, T, "t")


def test_corrupt_acl_file_is_one_clear_error(tmp_path):
    path = tmp_path / "__acls.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read ACL file"):
        StandardAuthorizer(FileAclStore(path)).load()


# --------------------------------------------------------------------------- properties

NAMES = st.text(alphabet="ab-*", min_size=1, max_size=4)
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*"])
HOSTS = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])
OPS = st.sampled_from(
    [
        Op.ALL,
        Op.READ,
        Op.WRITE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.CREATE,
    ]
)
ACLS = st.builds(
    acl,
    st.sampled_from([T, G]),
    NAMES,
    st.sampled_from([LIT, PRE]),
    PRINCIPALS,
    OPS,
    st.sampled_from([ALLOW, DENY]),
    HOSTS,
)
REQUEST_OPS = st.sampled_from(
    [
        Op.READ,
        Op.WRITE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.CREATE,
    ]
)


def _resource_applies(b: AclBinding, rt: ResourceType, name: str) -> bool:
    p = b.pattern
    if p.resource_type != rt:
        return False
    if p.pattern_type == LIT:
        return p.name == name or p.name == "*"
    return name.startswith(p.name)


def _entry_applies(b: AclBinding, principal: str, host: str, op: AclOperation) -> bool:
    e = b.entry
    if e.principal not in (principal, "User:*") or e.host not in ("*", host):
        return False
    if e.operation == Op.ALL or e.operation == op:
        return True
    if e.permission_type != ALLOW:
        return False
    if op == Op.DESCRIBE:
        return e.operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER)
    if op == Op.DESCRIBE_CONFIGS:
        return e.operation == Op.ALTER_CONFIGS
    return False


def _reference(bindings, principal, host, op, rt, name, allow_everyone) -> bool:
    on_resource = [b for b in bindings if _resource_applies(b, rt, name)]
    applying = [b for b in on_resource if _entry_applies(b, principal, host, op)]
    if any(b.entry.permission_type == DENY for b in applying):
        return False
    if any(b.entry.permission_type == ALLOW for b in applying):
        return True
    return allow_everyone if not on_resource else False


@settings(max_examples=150, deadline=None)
@given(
    bindings=st.lists(ACLS, max_size=12, unique=True),
    principal=st.sampled_from(["alice", "bob", "carol"]),
    host=st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    op=REQUEST_OPS,
    rt=st.sampled_from([T, G]),
    name=NAMES,
    allow_everyone=st.booleans(),
)
def test_property_index_agrees_with_the_rules(
    bindings, principal, host, op, rt, name, allow_everyone
):
    a = authz(*bindings, allow_everyone_if_no_acl_found=allow_everyone)
    got = a.authorize(KafkaPrincipal("User", principal), host, op, rt, name)
    assert got == _reference(bindings, f"User:{principal}", host, op, rt, name, allow_everyone)


@settings(max_examples=150, deadline=None)
@given(
    bindings=st.lists(ACLS, max_size=10, unique=True),
    deny=ACLS.filter(lambda b: b.entry.permission_type == DENY),
    principal=st.sampled_from(["alice", "bob"]),
    host=st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    op=REQUEST_OPS,
    name=NAMES,
    allow_everyone=st.booleans(),
)
def test_property_an_applying_deny_always_wins(
    bindings, deny, principal, host, op, name, allow_everyone
):
    """Whatever else is stored (ALLOW ALL for User:* on `*` included), a DENY that applies to
    the request makes it denied; one that does not apply changes nothing."""
    everything = [*bindings, acl(T, "*", LIT, "User:*", Op.ALL, ALLOW)]
    a = authz(*everything, deny, allow_everyone_if_no_acl_found=allow_everyone)
    before = authz(*everything, allow_everyone_if_no_acl_found=allow_everyone)
    p = KafkaPrincipal("User", principal)
    got = a.authorize(p, host, op, T, name)
    applies = _resource_applies(deny, T, name) and _entry_applies(deny, str(p), host, op)
    if applies:
        assert got is False
    elif deny not in everything:
        assert got == before.authorize(p, host, op, T, name)


@settings(max_examples=100, deadline=None)
@given(bindings=st.lists(ACLS, max_size=12, unique=True), name=NAMES, rt=st.sampled_from([T, G]))
def test_property_match_filter_is_what_applies_to_the_name(bindings, name, rt):
    """DescribeAcls with pattern type MATCH returns exactly the ACLs whose resource pattern
    applies to the literal name: same name, the `*` wildcard, or a prefix of it."""
    a = authz(*bindings)
    got = set(a.describe_acls(_f(rt, name, PatternType.MATCH)))
    assert got == {b for b in bindings if _resource_applies(b, rt, name)}
    prefixed = set(a.describe_acls(_f(rt, None, PRE)))
    assert prefixed == {
        b for b in bindings if b.pattern.resource_type == rt and b.pattern.pattern_type == PRE
    }
