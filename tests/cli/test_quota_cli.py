"""`yak quota list` prints quota values as the numbers that were set (issue 26)."""

from __future__ import annotations

import json

from tests.cli.test_cli import ok


def test_quota_values_print_as_set(broker) -> None:
    b = ["--bootstrap", broker.bootstrap]
    ok("quota", "set", "--user", "alice", "producer_byte_rate=1048576",
       "consumer_byte_rate=123456789", *b)
    ok("quota", "set", "--client-id", "etl", "request_percentage=12.5", *b)
    out = ok("quota", "list", *b)
    assert "user alice: consumer_byte_rate=123456789, producer_byte_rate=1048576" in out, out
    assert "client-id etl: request_percentage=12.5" in out, out
    assert "e+" not in out
    listed = json.loads(ok("quota", "list", "--format", "json", "--user", "alice", *b))
    assert listed == [{"entity": {"user": "alice"},
                       "quotas": {"producer_byte_rate": 1048576, "consumer_byte_rate": 123456789}}]
