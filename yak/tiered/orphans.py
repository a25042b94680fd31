"""Orphan objects: segment files in a partition's directory of the bucket that no manifest
version names (KIP-405's "dangling" segments). A leader that crashed after an upload and
before its manifest commit, an upload that landed after a new leader swept its
COPY_SEGMENT_STARTED entry, or a deletion cut short leave them; nothing would ever read or
delete them, and they would cost storage for ever.

The partition's leader sweeps them when its leadership starts (a broker start is one):
it lists the directory, then reads the newest manifest, and deletes the segment files
whose segment id the manifest does not name and that are older than
`remote.log.manager.orphan.grace.ms`. Why the grace period: the previous leader may still
be uploading (it committed the segment COPY_SEGMENT_STARTED before its upload began, so a
manifest read now names it; but the new leader may have swept that entry, or read the
manifest before the commit). An object older than the grace period was written after a
commit that is at least that old, so a manifest read after the listing names it unless
its entry was dropped: it is an orphan for sure. Younger unnamed objects are looked at
again once they are old enough, and the directory again a grace period after the leader
itself dropped entries whose uploads may still land (`RemoteLogManager._recheck_orphans`). Files whose names are not Yak's segment files, and the
manifests, are never touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from yak.tiered.metadata import FILE_KINDS, Manifest

__all__ = ["find_orphans", "segment_id_of"]

_NAME = re.compile(r"^\d{20}-([0-9a-f]{32})\.([a-z-]+)$")


def segment_id_of(name: str) -> str | None:
    """The segment id in a segment file's name (`<base, 20 digits>-<id>.<kind>`), None for
    any other name."""
    m = _NAME.match(name)
    if m is None or m.group(2) not in FILE_KINDS:
        return None
    return m.group(1)


def find_orphans(listing: Iterable[tuple[str, int, int]], part_dir: str, manifest: Manifest,
                 now_ms: int, grace_ms: int) -> tuple[list[str], int | None]:
    """Of `listing` ((key, size, last modified ms) under `part_dir`): the segment files no
    entry of `manifest` names that are at least `grace_ms` old, and when the youngest
    other unnamed file will be (None if there is none)."""
    known = {s.segment_id for s in manifest.segments}
    head = f"{part_dir}/"
    old: list[str] = []
    due: int | None = None
    for key, _size, modified in listing:
        if not key.startswith(head):
            continue
        sid = segment_id_of(key[len(head):])  # None for manifest/... and foreign names
        if sid is None or sid in known:
            continue
        if now_ms - modified >= grace_ms:
            old.append(key)
        else:
            ready = modified + grace_ms
            due = ready if due is None else min(due, ready)
    return old, due
