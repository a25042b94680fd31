"""Kafka transactions for the blocking client: the producer side (the Spark sink's
exactly-once writes) and the admin side (`yak txn list|describe|abort`).

The classic protocol (transaction version 1), the one every broker speaks: find the
transaction coordinator, InitProducerId with the transactional id (which fences an
earlier instance and aborts what it left open), AddPartitionsToTxn / AddOffsetsToTxn
before writing, Produce with the transactional id, TxnOffsetCommit, EndTxn. Retriable
coordinator answers (CONCURRENT_TRANSACTIONS while an earlier transaction completes,
COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) are retried
with backoff for at most `request_timeout_ms`; anything else raises with Kafka's code, so
a fenced producer stops instead of writing on.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from importlib import import_module
from typing import Any, TypeVar

from yak.client.client import KafkaClient, YakClientError
from yak.client.connection import build
from yak.errors import ErrorCode, error_for_code

__all__ = [
    "ProducerState",
    "TransactionDescription",
    "TransactionListing",
    "TransactionalClient",
]

T = TypeVar("T")

# Answers that mean "ask again (maybe another broker) in a moment".
_RETRIABLE = frozenset({
    ErrorCode.concurrent_transactions,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.unstable_offset_commit,
})
_RE_FIND = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    error: ErrorCode
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


def _mod(api: str, version: int) -> Any:
    return import_module(f"kio.schema.{api}.v{version}.request")


class TransactionalClient(KafkaClient):
    # ------------------------------------------------------------------ plumbing

    def _version(self, api: str) -> int:
        self._ensure(self._any_node())
        version = self._versions.get(api)
        if version is None:
            raise YakClientError(f"the broker does not support {api} (no transactions?)")
        return version

    def supports_transactions(self) -> bool:
        self._ensure(self._any_node())
        return all(a in self._versions for a in (
            "find_coordinator", "add_partitions_to_txn", "add_offsets_to_txn", "end_txn",
            "txn_offset_commit"))

    def _retry(self, what: str, attempt: Callable[[], tuple[ErrorCode, T]]) -> T:
        """Run `attempt` until it answers NONE, retrying Kafka's retriable coordinator
        answers with backoff within the request timeout; raise anything else."""
        deadline = time.monotonic() + self.timeout_s
        delay = 0.02
        while True:
            code, value = attempt()
            if code is ErrorCode.none:
                return value
            if code not in _RETRIABLE or time.monotonic() + delay > deadline:
                raise error_for_code(int(code), f"{what}: {code.name}")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def find_coordinator(self, key: str, key_type: int = 1) -> int:
        """Node id of the coordinator of a transactional id (1) or group (0)."""
        version = self._version("find_coordinator")

        def attempt() -> tuple[ErrorCode, int]:
            r = self._call(self._any_node(), "find_coordinator", key=key, key_type=key_type)
            if r.error_code is ErrorCode.none:
                self._brokers[int(r.node_id)] = (r.host, int(r.port))
            return r.error_code, int(r.node_id)

        assert version < 4  # one key per request
        return self._retry(f"find coordinator of {key!r}", attempt)

    def _txn_call(self, txn_id: str, what: str, api: str,
                  result: Callable[[Any], ErrorCode], **fields: Any) -> Any:
        """One request to the transaction coordinator of `txn_id`, found again after
        NOT_COORDINATOR."""
        node = [self.find_coordinator(txn_id)]
        out: list[Any] = []

        def attempt() -> tuple[ErrorCode, None]:
            resp = self._call(node[0], api, **fields)
            code = result(resp)
            if code in _RE_FIND:
                node[0] = self.find_coordinator(txn_id)
            out[:] = [resp]
            return code, None

        self._retry(what, attempt)
        return out[0]

    # ------------------------------------------------------------------ producer side

    def init_transactions(self, txn_id: str, timeout_ms: int = 60_000) -> tuple[int, int]:
        """(producer id, epoch) for `txn_id`: fences earlier instances and aborts what they
        left open (the coordinator answers CONCURRENT_TRANSACTIONS until that is done)."""
        self._version("init_producer_id")
        resp = self._txn_call(
            txn_id, f"init transactions for {txn_id!r}", "init_producer_id",
            lambda r: r.error_code, transactional_id=txn_id,
            transaction_timeout=timedelta(milliseconds=timeout_ms),
            producer_id=-1, producer_epoch=-1)
        return int(resp.producer_id), int(resp.producer_epoch)

    def add_partitions_to_txn(self, txn_id: str, pid: int, epoch: int,
                              partitions: Iterable[tuple[str, int]]) -> None:
        version = self._version("add_partitions_to_txn")
        mod = _mod("add_partitions_to_txn", version)
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        topics = tuple(build(mod.AddPartitionsToTxnTopic, name=t, partitions=tuple(ps))
                       for t, ps in by_topic.items())

        def code(resp: Any) -> ErrorCode:
            codes = {p.partition_error_code for t in resp.results_by_topic_v3_and_below
                     for p in t.results_by_partition}
            codes.discard(ErrorCode.none)
            # OPERATION_NOT_ATTEMPTED only accompanies the partition that failed
            codes.discard(ErrorCode.operation_not_attempted)
            return min(codes, key=int) if codes else ErrorCode.none

        self._txn_call(txn_id, f"add partitions to {txn_id!r}", "add_partitions_to_txn", code,
                       v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                       v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics)

    def add_offsets_to_txn(self, txn_id: str, pid: int, epoch: int, group_id: str) -> None:
        self._version("add_offsets_to_txn")
        self._txn_call(txn_id, f"add offsets of {group_id!r} to {txn_id!r}",
                       "add_offsets_to_txn", lambda r: r.error_code, transactional_id=txn_id,
                       producer_id=pid, producer_epoch=epoch, group_id=group_id)

    def txn_offset_commit(self, txn_id: str, group_id: str, pid: int, epoch: int,
                          offsets: Mapping[tuple[str, int], tuple[int, str]]) -> None:
        """Commit `offsets` ((topic, partition) -> (offset, metadata)) for the group as part
        of the transaction (sent to the group's coordinator)."""
        version = self._version("txn_offset_commit")
        mod = _mod("txn_offset_commit", version)
        by_topic: dict[str, list[Any]] = {}
        for (t, p), (off, meta) in offsets.items():
            by_topic.setdefault(t, []).append(build(
                mod.TxnOffsetCommitRequestPartition, partition_index=p, committed_offset=off,
                committed_leader_epoch=-1, committed_metadata=meta))
        topics = tuple(build(mod.TxnOffsetCommitRequestTopic, name=t, partitions=tuple(ps))
                       for t, ps in by_topic.items())
        node = [self.find_coordinator(group_id, key_type=0)]

        def attempt() -> tuple[ErrorCode, None]:
            resp = self._call(node[0], "txn_offset_commit", transactional_id=txn_id,
                              group_id=group_id, producer_id=pid, producer_epoch=epoch,
                              generation_id=-1, member_id="", group_instance_id=None,
                              topics=topics)
            codes = {p.error_code for t in resp.topics for p in t.partitions}
            codes.discard(ErrorCode.none)
            code = min(codes, key=int) if codes else ErrorCode.none
            if code in _RE_FIND:
                node[0] = self.find_coordinator(group_id, key_type=0)
            return code, None

        self._retry(f"commit offsets of {group_id!r} in {txn_id!r}", attempt)

    def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool) -> None:
        self._version("end_txn")
        self._txn_call(txn_id, f"{'commit' if commit else 'abort'} {txn_id!r}", "end_txn",
                       lambda r: r.error_code, transactional_id=txn_id, producer_id=pid,
                       producer_epoch=epoch, committed=commit)

    def committed_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]],
                          require_stable: bool = True) -> dict[tuple[str, int], tuple[int, str]]:
        """(offset, metadata) per partition (-1 where none). With `require_stable` a
        commit still pending in a transaction is waited for (UNSTABLE_OFFSET_COMMIT is
        retried), so a value read here is never one an open transaction may still undo."""
        version = self._version("offset_fetch")
        mod = _mod("offset_fetch", version)
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        topics = tuple(build(mod.OffsetFetchRequestTopic, name=t, partition_indexes=tuple(ps))
                       for t, ps in by_topic.items())
        node = [self.find_coordinator(group_id, key_type=0)]
        out: dict[tuple[str, int], tuple[int, str]] = {}

        def attempt() -> tuple[ErrorCode, None]:
            resp = self._call(node[0], "offset_fetch", group_id=group_id, topics=topics,
                              require_stable=require_stable)
            codes = {resp.error_code}
            for t in resp.topics:
                for p in t.partitions:
                    codes.add(p.error_code)
                    out[(t.name, int(p.partition_index))] = (int(p.committed_offset),
                                                             p.metadata or "")
            codes.discard(ErrorCode.none)
            code = min(codes, key=int) if codes else ErrorCode.none
            if code in _RE_FIND:
                node[0] = self.find_coordinator(group_id, key_type=0)
            return code, None

        self._retry(f"committed offsets of {group_id!r}", attempt)
        return out

    # ------------------------------------------------------------------ admin side

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          min_duration_ms: int = -1,
                          pattern: str | None = None) -> list[TransactionListing]:
        """Every transaction the brokers coordinate (asks each broker, as
        kafka-transactions.sh does), filtered as ListTransactions v0-2 allows."""
        self._version("list_transactions")
        self.metadata([])
        nodes = list(self._brokers) or [self._any_node()]
        out: list[TransactionListing] = []
        for node in nodes:
            resp = self._call(node, "list_transactions", state_filters=tuple(states),
                              producer_id_filters=tuple(producer_ids),
                              duration_filter=min_duration_ms,
                              transactional_id_pattern=pattern)
            if resp.error_code is not ErrorCode.none:
                raise error_for_code(int(resp.error_code), f"list transactions on node {node}")
            out += [TransactionListing(t.transactional_id, int(t.producer_id),
                                       t.transaction_state) for t in resp.transaction_states]
        return sorted(out, key=lambda t: t.transactional_id)

    def describe_transaction(self, txn_id: str, known: bool = False) -> TransactionDescription:
        """`known`: the caller just listed the id (skips the check below)."""
        self._version("describe_transactions")
        # An unknown id is answered with start time -1, which kio cannot decode: learn
        # that it is unknown from ListTransactions first.
        if not known and not [t for t in self.list_transactions(pattern=re.escape(txn_id))
                              if t.transactional_id == txn_id]:
            raise error_for_code(int(ErrorCode.transactional_id_not_found),
                                 f"describe {txn_id!r}: transactional_id_not_found")
        resp = self._txn_call(txn_id, f"describe {txn_id!r}", "describe_transactions",
                              lambda r: r.transaction_states[0].error_code
                              if r.transaction_states[0].error_code in _RETRIABLE
                              else ErrorCode.none,
                              transactional_ids=(txn_id,))
        s = resp.transaction_states[0]
        if s.error_code is not ErrorCode.none:
            raise error_for_code(int(s.error_code), f"describe {txn_id!r}: {s.error_code.name}")
        return TransactionDescription(
            txn_id, s.error_code, s.transaction_state, int(s.producer_id),
            int(s.producer_epoch), int(s.transaction_timeout.total_seconds() * 1000),
            round(s.transaction_start_time.timestamp() * 1000),
            [(t.topic, int(p)) for t in s.topics for p in t.partitions])

    def describe_producers(self, partitions: Iterable[tuple[str, int]]
                           ) -> dict[tuple[str, int], list[ProducerState]]:
        """The producers each partition's leader knows (open transactions included)."""
        version = self._version("describe_producers")
        mod = _mod("describe_producers", version)
        out: dict[tuple[str, int], list[ProducerState]] = {}
        for node, tps in self._group_by_leader(partitions).items():
            by_topic: dict[str, list[int]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(p)
            topics = tuple(build(mod.TopicRequest, name=t, partition_indexes=tuple(ps))
                           for t, ps in by_topic.items())
            resp = self._call(node, "describe_producers", topics=topics)
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code is not ErrorCode.none:
                        raise error_for_code(int(p.error_code),
                                             f"producers of {t.name}-{p.partition_index}")
                    out[(t.name, int(p.partition_index))] = [
                        ProducerState(int(x.producer_id), int(x.producer_epoch),
                                      int(x.last_sequence), int(x.last_timestamp),
                                      int(x.coordinator_epoch),
                                      int(x.current_txn_start_offset))
                        for x in p.active_producers]
        return out

    def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                          commit: bool, partitions: Iterable[tuple[str, int]]
                          ) -> dict[tuple[str, int], ErrorCode]:
        """WriteTxnMarkers to each partition's leader (an admin abort of a hanging
        transaction: `kafka-transactions.sh abort`)."""
        version = self._version("write_txn_markers")
        mod = _mod("write_txn_markers", version)
        out: dict[tuple[str, int], ErrorCode] = {}
        for node, tps in self._group_by_leader(partitions).items():
            by_topic: dict[str, list[int]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(p)
            topics = tuple(build(mod.WritableTxnMarkerTopic, name=t, partition_indexes=tuple(ps))
                           for t, ps in by_topic.items())
            marker = build(mod.WritableTxnMarker, producer_id=producer_id,
                           producer_epoch=producer_epoch, transaction_result=commit,
                           topics=topics, coordinator_epoch=coordinator_epoch)
            resp = self._call(node, "write_txn_markers", markers=(marker,))
            for m in resp.markers:
                for t in m.topics:
                    for p in t.partitions:
                        out[(t.name, int(p.partition_index))] = p.error_code
        return out
