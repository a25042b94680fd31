"""Just enough of the "consumer" embedded protocol to read subscriptions and assignments.

The coordinator treats member metadata as opaque bytes, except where Kafka looks
inside: OffsetDelete must refuse topics the group is subscribed to, and
`yak group describe` shows each member's assigned partitions. Both only need the
leading fields, which every version of ConsumerProtocolSubscription/Assignment shares.
Malformed bytes (another client's protocol) yield empty results, never an exception.
"""

from __future__ import annotations

import struct

__all__ = ["subscribed_topics", "assigned_partitions", "encode_assignment", "encode_subscription"]


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", buf, pos)
    pos += 2
    if n < 0 or pos + n > len(buf):
        raise ValueError("bad string")
    return buf[pos : pos + n].decode(), pos + n


def subscribed_topics(metadata: bytes) -> set[str]:
    try:
        pos = 2  # version
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        if count < 0 or count > len(metadata):
            return set()
        topics = set()
        for _ in range(count):
            topic, pos = _read_str(metadata, pos)
            topics.add(topic)
        return topics
    except (struct.error, ValueError, UnicodeDecodeError):
        return set()


def assigned_partitions(assignment: bytes) -> dict[str, list[int]]:
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", assignment, pos)
        pos += 4
        if count < 0 or count > len(assignment):
            return {}
        out: dict[str, list[int]] = {}
        for _ in range(count):
            topic, pos = _read_str(assignment, pos)
            (n,) = struct.unpack_from(">i", assignment, pos)
            pos += 4
            if n < 0 or pos + 4 * n > len(assignment):
                return {}
            out[topic] = list(struct.unpack_from(f">{n}i", assignment, pos))
            pos += 4 * n
        return out
    except (struct.error, ValueError, UnicodeDecodeError):
        return {}


def _s(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def encode_subscription(topics: list[str], version: int = 0) -> bytes:
    """ConsumerProtocolSubscription v0 (used by tests and the bench to act as clients)."""
    return (
        struct.pack(">hi", version, len(topics))
        + b"".join(_s(t) for t in topics)
        + struct.pack(">i", -1)
    )


def encode_assignment(partitions: dict[str, list[int]], version: int = 0) -> bytes:
    out = [struct.pack(">hi", version, len(partitions))]
    for topic, parts in partitions.items():
        out.append(_s(topic) + struct.pack(f">i{len(parts)}i", len(parts), *parts))
    out.append(struct.pack(">i", -1))
    return b"".join(out)
