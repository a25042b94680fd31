"""The console's ACL and user pages in headless Chromium, on a secured broker with
`--http-auth basic`: a super user sees them and adds/removes ACLs and creates/deletes
SCRAM users through them; a user without DESCRIBE on the cluster is not offered them
and is refused by the cluster if it goes there anyway. Screenshots in
test-artifacts/console/.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from conftest import free_port
from security.conftest import JAAS_SCRAM, make_certs, start_secured
from security.wire import rdkafka

from console import test_console as base  # tests/ is on sys.path

pytestmark = base.pytestmark
shot = base.shot
ADMIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              'username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    certs = make_certs(tmp_path_factory.mktemp("console-certs"))
    d = tmp_path_factory.mktemp("console-security") / "data"
    d.mkdir()
    http = free_port()
    b = start_secured(
        d, ["SASL_SSL"], certs, http=f"127.0.0.1:{http}", args=["--http-auth", "basic"],
        **{
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": ADMIN_JAAS,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": JAAS_SCRAM,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        })
    admin = AdminClient(rdkafka(b.addr("SASL_SSL"), "SASL_SSL", certs, "PLAIN", "admin",
                                "admin-secret"))
    ups = [UserScramCredentialUpsertion(u, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512,
                                                               4096), pw.encode())
           for u, pw in (("alice", "alice-secret"), ("admin", "admin-secret"))]
    for f in admin.alter_user_scram_credentials(ups).values():
        f.result(15)
    acl = AclBinding(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, "User:alice",
                     "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin.create_acls([acl]).values():
        f.result(15)
    b.url = f"http://127.0.0.1:{http}"
    yield b
    b.stop(15)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    base.ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=base.CHROMIUM, headless=True,
                                     args=base.ARGS)
        yield browser
        browser.close()


def _page(chromium: Any, user: str, password: str) -> Any:
    ctx = chromium.new_context(http_credentials={"username": user, "password": password},
                               viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(30_000)
    page = ctx.new_page()
    page.on("dialog", lambda d: d.accept())
    return page


def test_super_user_manages_acls_and_users(chromium: Any, secured: Any) -> None:
    page = _page(chromium, "admin", "admin-secret")
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(secured.url + "/")
    page.wait_for_selector("a[data-nav=acls]:not([hidden])")
    assert page.inner_text("#whoami") == "User:admin"
    # ACLs: the existing one, then one added and removed through the form.
    page.click("a[data-nav=acls]")
    row = page.wait_for_selector("#acls-table tr[data-acl*='User:alice']")
    assert "PREFIXED" in row.inner_text() and "orders-" in row.inner_text()
    page.fill("#acl-add input[name=principal]", "User:carol")
    page.select_option("#acl-add select[name=operation]", "READ")
    page.select_option("#acl-add select[name=resource_type]", "GROUP")
    page.fill("#acl-add input[name=resource_name]", "billing")
    page.click("#acl-add button[type=submit]")
    carol = "#acls-table tr[data-acl='User:carol ALLOW READ GROUP:billing']"
    page.wait_for_selector(carol)
    shot(page, "30-acls")
    page.click(f"{carol} button[data-remove]")
    page.wait_for_selector(carol, state="detached")
    # Users: create one, who can then log in to the gateway; delete it.
    page.click("a[data-nav=users]")
    page.wait_for_selector("#users-table tr[data-user=alice]")
    page.fill("#user-add input[name=name]", "dave")
    page.fill("#user-add input[name=password]", "dave-secret")
    page.click("#user-add button[type=submit]")
    dave = page.wait_for_selector("#users-table tr[data-user=dave]")
    assert "SCRAM-SHA-512 (8192 iterations)" in dave.inner_text()
    assert "dave-secret" not in page.content()  # passwords never come back
    shot(page, "31-users")
    r = httpx.get(secured.url + "/api/whoami", auth=("dave", "dave-secret"), timeout=30)
    assert r.status_code == 200 and r.json()["principal"] == "User:dave", r.text
    assert r.json()["security_visible"] is False
    page.click("#users-table tr[data-user=dave] button[data-delete-user]")
    page.wait_for_selector("#users-table tr[data-user=dave]", state="detached")
    page.context.close()
    assert errors == []


def test_other_users_are_not_shown_acls_or_users(chromium: Any, secured: Any) -> None:
    page = _page(chromium, "alice", "alice-secret")
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(secured.url + "/")
    page.wait_for_function("document.getElementById('whoami').textContent === 'User:alice'")
    assert page.is_hidden("a[data-nav=acls]") and page.is_hidden("a[data-nav=users]")
    page.goto(secured.url + "/#/acls")  # typed by hand: the cluster refuses her
    banner = page.wait_for_selector("#banner:not([hidden])")
    assert "CLUSTER_AUTHORIZATION_FAILED" in banner.inner_text()
    assert page.query_selector("#acls-table") is None
    shot(page, "32-acls-refused")
    r = httpx.get(secured.url + "/api/users", auth=("alice", "alice-secret"), timeout=30)
    assert r.status_code == 403 and "CLUSTER_AUTHORIZATION_FAILED" in r.json()["message"]
    # Without credentials the browser gets the Basic challenge, not the console.
    r = httpx.get(secured.url + "/", timeout=30)
    assert r.status_code == 401 and "basic" in r.headers["www-authenticate"].lower()
    page.context.close()
    assert errors == []
