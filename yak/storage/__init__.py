"""yak.storage: partition logs in Kafka's on-disk layout (see docs/storage.md)."""

from yak.storage.config import BROKER_SYNONYMS, TOPIC_CONFIG_DEFAULTS, LogConfig
from yak.storage.epoch_cache import LeaderEpochCache
from yak.storage.log import AppendResult, PartitionLog, ReadResult
from yak.storage.manager import LogManager, parse_log_dir_name

__all__ = [
    "BROKER_SYNONYMS",
    "TOPIC_CONFIG_DEFAULTS",
    "AppendResult",
    "LeaderEpochCache",
    "LogConfig",
    "LogManager",
    "PartitionLog",
    "ReadResult",
    "parse_log_dir_name",
]
