"""Print the contents of segment files, like Kafka's `kafka-dump-log.sh` (DumpLogSegments).

    python -m yak.storage.dump DATA/t-0/00000000000000000000.log [--records]
    python -m yak.storage.dump DATA/t-0/00000000000000000000.index

An operator's first tool when a log looks wrong: it reads the files directly (no broker
needed) and marks every batch whose CRC does not match.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from collections.abc import Iterator

from yak.protocol.compression import CODEC_NAMES
from yak.protocol.records import HEADER_SIZE, crc_is_valid, decode_records, parse_header


def dump_log(path: str, records: bool = False) -> Iterator[str]:
    with open(path, "rb") as f:
        data = f.read()
    yield f"Dumping {path}"
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        try:
            h = parse_header(data, pos)
        except Exception as e:
            yield f"position: {pos} invalid header: {e}"
            return
        if pos + h.size > len(data):
            yield f"position: {pos} truncated batch ({h.size} bytes, {len(data) - pos} left)"
            return
        ok = crc_is_valid(data, pos, h)
        yield (
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} "
            f"isControl: {str(h.is_control).lower()} position: {pos} "
            f"{'LogAppendTime' if h.is_log_append_time else 'CreateTime'}: {h.max_timestamp} "
            f"size: {h.size} magic: {h.magic} compresscodec: {CODEC_NAMES.get(h.compression)} "
            f"crc: {h.crc} isvalid: {str(ok).lower()}"
        )
        if records and ok:
            for r in decode_records(data[pos : pos + h.size]):
                yield (
                    f"| offset: {r.offset} CreateTime: {r.timestamp} "
                    f"keySize: {-1 if r.key is None else len(r.key)} "
                    f"valueSize: {-1 if r.value is None else len(r.value)} "
                    f"headerKeys: [{','.join(k for k, _v in r.headers)}]"
                )
        pos += h.size
    if pos != len(data):
        yield f"position: {pos} {len(data) - pos} trailing bytes"


def dump_index(path: str) -> Iterator[str]:
    base = int(os.path.basename(path).split(".")[0])
    with open(path, "rb") as f:
        data = f.read()
    yield f"Dumping {path}"
    if path.endswith(".timeindex"):
        for ts, rel in struct.iter_unpack(">qi", data[: len(data) // 12 * 12]):
            yield f"timestamp: {ts} offset: {base + rel}"
    else:
        for rel, pos in struct.iter_unpack(">ii", data[: len(data) // 8 * 8]):
            yield f"offset: {base + rel} position: {pos}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--records", action="store_true", help="print each record too")
    args = ap.parse_args(argv)
    for path in args.files:
        lines = dump_log(path, args.records) if path.endswith(".log") else dump_index(path)
        for line in lines:
            print(line)
    return 0


__all__ = ["dump_index", "dump_log", "main"]

if __name__ == "__main__":
    sys.exit(main())
