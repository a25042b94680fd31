"""The console's schema pages and registry-aware message browser, in headless Chromium.

Subjects list, versions, a diff between versions, the compatibility setting saved through
the registry, and an Avro message shown decoded as JSON; a value whose schema id is unknown
shows an error naming the id instead of breaking the page.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from gateway.conftest import start_embedded  # tests/ is on sys.path

from .test_console import ARTIFACTS, browser_context, pytestmark, shot  # noqa: F401

V1 = {"type": "record", "name": "Pay", "namespace": "acme",
      "fields": [{"name": "user", "type": "string"}, {"name": "cents", "type": "long"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "currency", "type": "string", "default": "EUR"}]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    gw = start_embedded(tmp_path_factory.mktemp("yak-console-registry"))
    yield gw
    gw.stop()


def test_schemas_pages_and_decoded_avro_messages(browser_context: Any,  # noqa: F811
                                                 served: Any) -> None:
    sr = SchemaRegistryClient({"url": served.url, "timeout": 30})
    sr.register_schema("payments-value", Schema(json.dumps(V1), "AVRO"))
    ctx = SerializationContext("payments", MessageField.VALUE)
    p = Producer({"bootstrap.servers": served.bootstrap})
    p.produce("payments", value=AvroSerializer(sr, json.dumps(V2))(
        {"user": "ann", "cents": 1250, "currency": "NOK"}, ctx))
    p.produce("payments", value=struct.pack(">bI", 0, 4242) + b"\x06abc")
    assert p.flush(20) == 0

    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(served.url + "/#/schemas")
    row = page.wait_for_selector("tr[data-subject='payments-value']")
    assert "AVRO" in row.inner_text() and "BACKWARD" in row.inner_text()
    shot(page, "20-schemas")

    page.click("a[href='#/subject/payments-value']")
    page.wait_for_selector("#versions-table")
    assert page.locator("#versions-table tbody tr").count() == 2
    page.wait_for_selector("#schema-diff .diff-add")
    added = [el.inner_text() for el in page.query_selector_all("#schema-diff .diff-add")]
    assert any('"currency"' in line for line in added), added
    assert not page.query_selector_all("#schema-diff .diff-del")  # v2 only adds a field
    shot(page, "21-subject-diff")

    page.select_option("#compat select[name=level]", "FULL")
    page.click("#compat button[type=submit]")
    page.wait_for_selector("#compat-status:text-is('Saved FULL')")
    assert sr.get_compatibility("payments-value") == "FULL"

    page.goto(served.url + "/#/topic/payments")
    page.wait_for_selector("#partitions-table")
    page.click("#browse button[type=submit]")
    table = page.wait_for_selector("#messages-table")
    text = table.inner_text()
    assert '"user": "ann"' in text and '"cents": 1250' in text and "AVRO · schema" in text
    assert "schema id 4242 is not in the registry" in text
    shot(page, "22-decoded-avro")
    assert errors == []
