"""The Transactions page's API: open transactions with their age, and every partition
whose last stable offset lags its high watermark."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import Request

from yak.gateway.console_api.common import ERRORS, cluster_of, page_router

router = page_router()


@router.get("/transactions", responses=ERRORS)
async def transactions(request: Request) -> Any:
    """Open transactions with their age and the LSO lag (high watermark - last stable
    offset) of each partition they hold, and every partition whose LSO lags its HW (what
    read_committed consumers cannot read yet)."""
    cluster = cluster_of(request)
    txns, md = await asyncio.gather(cluster.transactions(), cluster.metadata())
    tps = [(t, p) for t, tm in md.topics.items() for p in tm.partitions]
    marks = await cluster.watermarks(tps)
    now = int(time.time() * 1000)

    def lag(t: str, p: int) -> dict[str, Any]:
        m = marks.get((t, p))
        hw, lso = (m.high_watermark, m.last_stable_offset) if m else (-1, -1)
        return {"topic": t, "partition": p, "high_watermark": hw, "last_stable_offset": lso,
                "lso_lag": max(hw - lso, 0) if hw >= 0 and lso >= 0 else None}

    open_rows = []
    for row in txns:
        if "start_time_ms" not in row:
            continue
        start = row["start_time_ms"]
        row["age_ms"] = now - start if start >= 0 else None
        row["partitions"] = [lag(t, p) for t, p in row["partitions"]]
        open_rows.append(row)
    held = [lag(t, p) for t, p in sorted(tps)]
    return {
        "open": sorted(open_rows, key=lambda r: -(r["age_ms"] or 0)),
        "total": len(txns),
        "lagging_partitions": [r for r in held if r["lso_lag"]],
        "time": now / 1000,
    }
