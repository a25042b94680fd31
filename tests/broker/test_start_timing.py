"""A broker says, once ready, how long its start took and where the time went (issue 27):
one line naming the time before the parts (imports and building, then the handlers'
imports), each part that took 5 ms or more, and the listeners and registration, so a slow
restart in a chaos run names what it waited on."""

from __future__ import annotations

import re
import time

from yak.broker.broker import _process_age_s

READY = re.compile(r"broker (\d+) ready in (\d+\.\d\d) s since process start: (.*)$",
                   re.MULTILINE)


def _ready(log: str) -> tuple[float, dict[str, float]]:
    found = READY.findall(log)
    assert found, log[-3000:]
    _node, total, items = found[-1]
    parts = {}
    for item in items.split(", "):
        name, seconds, unit = item.rsplit(" ", 2)
        assert unit == "s", item
        parts[name] = float(seconds)
    return float(total), parts


def test_the_ready_line_names_the_parts_and_adds_up(broker_factory) -> None:
    b = broker_factory()
    total, parts = _ready(b.log())
    before = parts.pop("imports and building")
    # Python's start and the imports of a whole broker take some time on any machine.
    assert before > 0.05, parts
    # Then `yak serve` imports the handlers and starts the loop before the first part.
    assert list(parts)[0] == "built to start (handler imports)", parts
    # A part under 5 ms is summed into "other parts" (a fresh broker's metadata store
    # and storage were, on a quiet machine in the full suite).
    for name in ("metadata store", "storage"):
        assert name in parts or "other parts" in parts, parts
    assert list(parts)[-1] == "listeners and registration"
    # The items are the whole start, each rounded to 10 ms.
    assert abs(before + sum(parts.values()) - total) <= 0.01 * (len(parts) + 2), (total, parts)

    # A restart (clean this time) logs a second line of its own.
    b.stop()
    b.start()
    assert len(READY.findall(b.log())) == 2


def test_process_age_is_this_process_age() -> None:
    age = _process_age_s(time.monotonic())
    assert age is not None
    # pytest has been running for a while, and for less than a day.
    assert 0.1 < age < 86_400
    later = _process_age_s(time.monotonic() - 1.0)
    assert later is not None and abs((age - later) - 1.0) < 0.05
