"""BROKER_LOGGER resources: the broker's log levels, as `kafka-configs --entity-type
broker-loggers` reads and sets them (KIP-412).

Why: raising one logger to DEBUG on a live broker, and back, is how operators look into a
problem without a restart. As in Kafka, levels are per broker and not persisted: a
restart goes back to the levels the process starts with.

The resource name is the broker id; each config is a logger (`yak.cluster.node`, the root
logger as Kafka's `root`) and its value a level. IncrementalAlterConfigs SET changes a
level, DELETE unsets it (the logger inherits its parent's; the root logger cannot be
unset); APPEND/SUBTRACT and the legacy AlterConfigs are refused, as in Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from yak.broker.config_view import ConfigEntry, ConfigType
from yak.errors import InvalidConfigurationError, InvalidRequestError

__all__ = ["LOGGER_SOURCE", "ROOT_LOGGER", "alter_loggers", "logger_entries"]

ROOT_LOGGER = "root"
# DescribeConfigsResponse.ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG
LOGGER_SOURCE = 6
# Kafka's (log4j) level names -> Python's; FATAL is CRITICAL, OFF above everything.
_LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
           "WARN": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
           "OFF": logging.CRITICAL + 10}
_NAMES = {v: k for k, v in _LEVELS.items()}
SET, DELETE = 0, 1


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)


def _known() -> list[str]:
    """The root and every `yak` logger created so far (Kafka lists its log4j loggers)."""
    names = [n for n, lg in logging.root.manager.loggerDict.items()
             if isinstance(lg, logging.Logger) and (n == "yak" or n.startswith("yak."))]
    return [ROOT_LOGGER, *sorted(names)]


def _level_name(level: int) -> str:
    return _NAMES.get(level, logging.getLevelName(level))


def logger_entries(keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """Each logger with its effective level (a logger with none of its own shows its
    parent's, as Kafka shows log4j's effective level)."""
    names = _known()
    if keys:
        wanted = set(keys)
        names = [n for n in names if n in wanted]
    return [ConfigEntry(name=n, value=_level_name(_logger(n).getEffectiveLevel()),
                        source=LOGGER_SOURCE, read_only=False, type=ConfigType.STRING)
            for n in names]


def alter_loggers(ops: list[tuple[str, int, str | None]], validate_only: bool) -> None:
    """Check every operation, then apply them all (none if one is bad)."""
    changes: list[tuple[logging.Logger, int]] = []
    for name, op, value in ops:
        if op == SET:
            level = _LEVELS.get((value or "").strip().upper())
            if level is None:
                raise InvalidConfigurationError(
                    f"Cannot set the log level of {name} to {value}: expected one of "
                    + ", ".join(_LEVELS))
            changes.append((_logger(name), level))
        elif op == DELETE:
            if name == ROOT_LOGGER:
                raise InvalidRequestError("Removing the log level of the root logger is"
                                          " not allowed")
            changes.append((_logger(name), logging.NOTSET))
        else:
            raise InvalidRequestError(f"Operation {op} is not allowed for the broker logger"
                                      f" {name}: only SET and DELETE")
    if not validate_only:
        for logger, level in changes:
            logger.setLevel(level)
