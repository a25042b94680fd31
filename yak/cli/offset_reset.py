"""The new offsets a reset moves a group to, for `yak group reset-offsets` and
`yak share-group reset-offsets` (kafka-consumer-groups.sh / kafka-share-groups.sh
--reset-offsets): one rule for both, so a classic and a share group given the same
option land on the same offsets.

Pure: the callers read the log start and end offsets (and, for a time, the offsets by
timestamp) through their own clients and pass them in. Keys are (topic, partition).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

__all__ = ["reset_targets"]

K = TypeVar("K")


def reset_targets(
    starts: Mapping[K, int],
    ends: Mapping[K, int],
    *,
    to_earliest: bool = False,
    to_latest: bool = False,
    to_offset: int | None = None,
    shift_by: int | None = None,
    current: Mapping[K, int] | None = None,
    by_time: Callable[[], Mapping[K, int]] | None = None,
) -> dict[K, int]:
    """The target of each partition in `ends`, by the one option chosen (the caller has
    checked that exactly one is): an offset or a shift is clamped to [log start, log end],
    as Kafka's tools do; a time with no record at or after it maps to the log end.
    `shift_by` needs a committed offset in `current` for every partition (KeyError
    otherwise: the caller says which one lacks it); `by_time` is asked only when no other
    option is chosen."""
    if to_earliest:
        return {k: starts[k] for k in ends}
    if to_latest:
        return dict(ends)
    if to_offset is not None:
        return {k: min(max(to_offset, starts[k]), ends[k]) for k in ends}
    if shift_by is not None:
        have = current or {}
        return {k: min(max(have[k] + shift_by, starts[k]), ends[k]) for k in ends}
    if by_time is None:
        raise ValueError("no reset option chosen")
    found = by_time()
    return {k: (v if v >= 0 else ends[k]) for k, v in found.items()}
