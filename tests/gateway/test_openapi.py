"""Schemathesis against the gateway's own OpenAPI document (/openapi.json).

Every operation gets a bounded number of generated requests (valid and invalid); the
gateway must answer each with a documented status, a documented content type and a body
matching the schema, and never a 5xx while the broker is up.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

MAX_EXAMPLES = 8


@pytest.fixture(scope="module")
def web_schema(gateway: Any) -> Any:
    return schemathesis.openapi.from_url(gateway.url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("web_schema")


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@pytest.mark.slow
def test_api_conforms_to_its_openapi_document(case: Any) -> None:
    excluded = []
    if (case.method, case.path) == ("POST", "/api/topics"):
        # Topic configs are a free-form map in the schema; the broker rejects unknown
        # names and bad values (422), which no JSON schema of that map can express.
        excluded.append(positive_data_acceptance)
    case.call_and_validate(timeout=30, excluded_checks=excluded)


def test_openapi_document_lists_the_rest_proxy_routes(gateway: Any) -> None:
    import httpx

    doc = httpx.get(gateway.url + "/openapi.json").json()
    for path in ("/topics/{topic}", "/topics/{topic}/partitions/{partition}",
                 "/consumers/{group}", "/consumers/{group}/instances/{instance}/records",
                 "/consumers/{group}/instances/{instance}/offsets",
                 "/consumers/{group}/instances/{instance}/positions/beginning"):
        assert path in doc["paths"], path
