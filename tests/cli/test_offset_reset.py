"""The reset rule shared by `yak group reset-offsets` and `yak share-group reset-offsets`
(yak/cli/offset_reset.py): the wire behaviour is in tests/cli/test_group_cli*.py and the
share-group CLI tests; these pin the clamping and the time rule."""

from __future__ import annotations

import pytest

from yak.cli.offset_reset import reset_targets

A, B = ("t", 0), ("t", 1)
STARTS = {A: 10, B: 0}
ENDS = {A: 100, B: 5}


def test_earliest_and_latest() -> None:
    assert reset_targets(STARTS, ENDS, to_earliest=True) == {A: 10, B: 0}
    assert reset_targets(STARTS, ENDS, to_latest=True) == {A: 100, B: 5}


def test_an_offset_is_clamped_to_the_log() -> None:
    assert reset_targets(STARTS, ENDS, to_offset=3) == {A: 10, B: 3}
    assert reset_targets(STARTS, ENDS, to_offset=50) == {A: 50, B: 5}


def test_a_shift_moves_from_the_committed_offset_and_is_clamped() -> None:
    assert reset_targets(STARTS, ENDS, shift_by=-20, current={A: 25, B: 4}) == {A: 10, B: 0}
    assert reset_targets(STARTS, ENDS, shift_by=3, current={A: 25, B: 4}) == {A: 28, B: 5}
    with pytest.raises(KeyError):
        reset_targets(STARTS, ENDS, shift_by=1, current={A: 25})


def test_a_time_with_no_record_after_it_is_the_log_end() -> None:
    asked: list[bool] = []

    def by_time() -> dict[tuple[str, int], int]:
        asked.append(True)
        return {A: 42, B: -1}
    assert reset_targets(STARTS, ENDS, to_offset=1, by_time=by_time) == {A: 10, B: 1}
    assert asked == []  # looked up only when the time is the option chosen
    assert reset_targets(STARTS, ENDS, by_time=by_time) == {A: 42, B: 5}
    with pytest.raises(ValueError):
        reset_targets(STARTS, ENDS)
