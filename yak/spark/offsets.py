"""Driver-side offset planning: which partitions, from where, to where, in how many tasks.

Offsets travel as Spark's Kafka source writes them to checkpoints,
`{"topic": {"0": next_offset}}`, so a checkpoint reads the same to a human either way.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from yak.client import EARLIEST, LATEST, KafkaClient
from yak.errors import UnknownTopicOrPartitionError
from yak.spark.options import SourceOptions, YakOptionError

TP = tuple[str, int]


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deletion): see failOnDataLoss."""


def to_json(offsets: dict[TP, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def from_json(obj: dict) -> dict[TP, int]:
    return {(t, int(p)): int(o) for t, parts in obj.items() for p, o in parts.items()}


def discover(client: KafkaClient, opts: SourceOptions) -> list[TP]:
    """The partitions the query reads now (new partitions and topics show up here)."""
    if opts.assign is not None:
        md = client.metadata(list(opts.assign))
        out = []
        for t, parts in opts.assign.items():
            have = {p.partition for p in md.get(t, [])}
            for p in parts:
                if p not in have:
                    raise UnknownTopicOrPartitionError(
                        f"option assign: partition {t}-{p} does not exist"
                    )
                out.append((t, p))
        return sorted(out)
    if opts.subscribe is not None:
        md = client.metadata(opts.subscribe)
        missing = [t for t in opts.subscribe if t not in md]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"option subscribe: topic(s) {', '.join(missing)} do not exist"
            )
        return sorted((t, p.partition) for t in opts.subscribe for p in md[t])
    rx = re.compile(opts.pattern or "")
    md = client.metadata(None)
    return sorted(
        (t, p.partition)
        for t, ps in md.items()
        if rx.fullmatch(t) and not t.startswith("__")
        for p in ps
    )


def _by_timestamp(
    client: KafkaClient, stamps: dict[TP, int], strategy: str, option: str
) -> dict[TP, int]:
    found = client.list_offsets(stamps)
    latest = client.list_offsets(dict.fromkeys(stamps, LATEST))
    out = {}
    for tp, off in found.items():
        if off < 0:  # no record at or after the timestamp
            if strategy == "error":
                raise YakOptionError(
                    f"option {option}: no offset for {tp[0]}-{tp[1]} at timestamp {stamps[tp]} "
                    "(set startingOffsetsByTimestampStrategy=latest to start at the end)"
                )
            off = latest[tp]
        out[tp] = off
    return out


def _spec(
    client: KafkaClient,
    tps: list[TP],
    named: str | dict[str, dict[int, int]],
    ts_all: int | None,
    ts_by: dict[str, dict[int, int]] | None,
    strategy: str,
    what: str,
) -> dict[TP, int]:
    """Resolve one of starting/ending offsets; timestamp options win as in Spark."""
    if ts_by is not None:
        stamps = {tp: ts_by[tp[0]][tp[1]] for tp in tps if tp[0] in ts_by and tp[1] in ts_by[tp[0]]}
        if len(stamps) != len(tps):
            miss = [f"{t}-{p}" for t, p in tps if (t, p) not in stamps]
            raise YakOptionError(
                f"option {what}OffsetsByTimestamp: no timestamp for {', '.join(miss)}"
            )
        return _by_timestamp(client, stamps, strategy, f"{what}OffsetsByTimestamp")
    if ts_all is not None:
        return _by_timestamp(client, dict.fromkeys(tps, ts_all), strategy, f"{what}Timestamp")
    if isinstance(named, str):
        return client.list_offsets(dict.fromkeys(tps, EARLIEST if named == "earliest" else LATEST))
    wanted = {}
    for tp in tps:
        if tp[0] not in named or tp[1] not in named[tp[0]]:
            raise YakOptionError(f"option {what}Offsets: no offset given for {tp[0]}-{tp[1]}")
        wanted[tp] = named[tp[0]][tp[1]]
    extra = [f"{t}-{p}" for t, ps in named.items() for p in ps if (t, p) not in wanted]
    if extra:
        raise YakOptionError(f"option {what}Offsets: {', '.join(extra)} not in the subscription")
    special = {tp: o for tp, o in wanted.items() if o in (EARLIEST, LATEST)}
    if special:
        wanted.update(client.list_offsets(special))
    return wanted


def starting_offsets(client: KafkaClient, opts: SourceOptions, tps: list[TP]) -> dict[TP, int]:
    return _spec(
        client,
        tps,
        opts.starting,
        opts.starting_timestamp,
        opts.starting_by_timestamp,
        opts.by_timestamp_strategy,
        "starting",
    )


def ending_offsets(client: KafkaClient, opts: SourceOptions, tps: list[TP]) -> dict[TP, int]:
    return _spec(
        client,
        tps,
        opts.ending,
        opts.ending_timestamp,
        opts.ending_by_timestamp,
        opts.by_timestamp_strategy,
        "ending",
    )


def check_data_loss(
    client: KafkaClient, start: dict[TP, int], fail: bool, known: set[TP] | None = None
) -> dict[TP, int]:
    """Move starts below the log start offset forward, or fail (failOnDataLoss=true)."""
    if not start:
        return start
    earliest = client.list_offsets(dict.fromkeys(start, EARLIEST))
    out = dict(start)
    for tp, off in start.items():
        if off < earliest[tp]:
            if fail:
                raise DataLossError(
                    f"offsets {off}..{earliest[tp] - 1} of {tp[0]}-{tp[1]} were removed "
                    "(retention or deletion) before they were read; set failOnDataLoss=false "
                    "to skip them"
                )
            out[tp] = earliest[tp]
    return out


def rate_limit(start: dict[TP, int], latest: dict[TP, int], limit: int) -> dict[TP, int]:
    """Cap the total rows at `limit`, split across partitions in proportion to their lag."""
    lag = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(lag.values())
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        share = limit * lag[tp] / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin + step)
    # rounding up for tiny shares may overshoot by a few rows: trim the largest partitions
    over = sum(out[tp] - start.get(tp, out[tp]) for tp in out) - limit
    for tp in sorted(out, key=lambda t: out[t] - start.get(t, out[t]), reverse=True):
        if over <= 0:
            break
        take = min(over, out[tp] - start.get(tp, out[tp]))
        out[tp] -= take
        over -= take
    return out


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Spark's rule: split big ranges so that there are at least `minPartitions` tasks."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out = []
    for r in ranges:
        parts = max(1, round(r.size / total * min_partitions))
        step = r.size / parts
        for i in range(parts):
            s = r.start + round(i * step)
            e = r.start + round((i + 1) * step)
            if e > s:
                out.append(OffsetRange(r.topic, r.partition, s, e))
    return out
