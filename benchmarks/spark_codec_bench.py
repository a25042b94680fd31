"""The Spark connector's record codecs alone, this tree against a git revision, in one process.

    .venv/bin/python benchmarks/spark_codec_bench.py --baseline HEAD~1 --rounds 6

Loads `yak/spark/record_encoder.py` and `record_decoder.py` as they are at `--baseline`
(`git show`) next to the working tree's, then encodes and decodes the same rows with each,
alternating which goes first every round, and prints CPU time per record (median and best of
the rounds): the machine is shared, so only ratios within one run mean anything. Batch sizes
go from 1 MiB (Spark's default) down to ~5 records per batch, where per-batch work shows.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from yak.spark import record_decoder, record_encoder  # noqa: E402

CASES = [  # name, rows, value bytes, max batch bytes, repetitions per round
    ("100 B values, 1 MiB batches", 200_000, 100, 1 << 20, 3),
    ("100 B values, 2 KiB batches (~15 per batch)", 100_000, 100, 2048, 3),
    ("20 B values, 256 B batches (~5 per batch)", 100_000, 20, 256, 2),
]


def _load(rev: str, name: str, tmp: Path) -> ModuleType:
    src = subprocess.run(["git", "show", f"{rev}:yak/spark/{name}.py"], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    path = tmp / f"baseline_{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"baseline_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _rows(n: int, size: int) -> tuple[pa.Array, pa.Array]:
    rng = np.random.default_rng(1)
    values = pa.array([bytes(rng.integers(65, 90, size, dtype=np.uint8)) for _ in range(n)],
                      pa.binary())
    keys = pa.array([b"k%d" % (i % 1000) for i in range(n)], pa.binary())
    return keys, values


def _with_offsets(batches: list) -> bytes:
    """The encoder leaves base offsets at 0 (the broker assigns them): assign them here."""
    out = bytearray(b"".join(b.data for b in batches))
    pos = offset = 0
    for b in batches:
        out[pos : pos + 8] = offset.to_bytes(8, "big")
        offset += b.records
        pos += len(b.data)
    return bytes(out)


def _one(enc: ModuleType, dec: ModuleType, keys: pa.Array, values: pa.Array, max_bytes: int,
         reps: int) -> tuple[float, float]:
    t_enc = t_dec = 0.0
    for _ in range(reps):
        c0 = time.process_time()
        batches = enc.encode_batches(keys, values, max_batch_bytes=max_bytes)
        t_enc += time.process_time() - c0
        buf = _with_offsets(batches)
        c0 = time.process_time()
        cols = dec.decode(buf)
        t_dec += time.process_time() - c0
        assert len(cols) == len(values)
    n = len(values) * reps
    return t_enc / n * 1e9, t_dec / n * 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="HEAD", help="git revision to compare against")
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = (_load(a.baseline, "record_encoder", Path(tmp)),
                _load(a.baseline, "record_decoder", Path(tmp)))
    tree = (record_encoder, record_decoder)
    print(f"CPU ns per record, median (best) of {a.rounds} alternating rounds; "
          f"baseline {a.baseline}")
    for name, n, size, max_bytes, reps in CASES:
        keys, values = _rows(n, size)
        got: dict[str, list[tuple[float, float]]] = {"baseline": [], "tree": []}
        for r in range(a.rounds):
            order = [("baseline", base), ("tree", tree)]
            for label, (enc, dec) in order if r % 2 == 0 else order[::-1]:
                got[label].append(_one(enc, dec, keys, values, max_bytes, reps))
        for label, res in got.items():
            e = [x[0] for x in res]
            d = [x[1] for x in res]
            print(f"  {name:45s} {label:8s} encode {statistics.median(e):6.0f} ({min(e):4.0f})"
                  f"  decode {statistics.median(d):6.0f} ({min(d):4.0f})")


if __name__ == "__main__":
    main()
