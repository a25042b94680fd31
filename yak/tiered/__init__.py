"""Tiered storage (KIP-405): rolled segments of topics with `remote.storage.enable=true`
copied to an object store (S3 or a directory), read back for fetches below the local log
start, deleted by remote retention. A layer between `storage/` (which it reads and whose
local retention it bounds through `PartitionLog.tiered_upto`) and `partition/` (whose
fetch path calls `RemoteLogManager.read`). See docs/tiered.md.
"""

from yak.tiered.config import TieredConfig
from yak.tiered.manager import HostedPartition, RemoteLogManager
from yak.tiered.metadata import Manifest, ManifestStore, RemoteLogSegmentMetadata, SegmentState
from yak.tiered.store import RemoteStorageError, RemoteStore, parse_uri

__all__ = [
    "HostedPartition",
    "Manifest",
    "ManifestStore",
    "RemoteLogManager",
    "RemoteLogSegmentMetadata",
    "RemoteStorageError",
    "RemoteStore",
    "SegmentState",
    "TieredConfig",
    "parse_uri",
]
