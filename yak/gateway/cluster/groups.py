"""Consumer groups and transactions, the state the coordinators keep: groups listed and
described, their committed offsets and lag (ListGroups, DescribeGroups, OffsetFetch),
and the transactions the transaction coordinators know (ListTransactions,
DescribeTransactions)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions

from yak.gateway.cluster.metadata import MetadataCalls

# Transaction states with work in flight (the rest are finished or idle ids).
OPEN_TXN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


class GroupCalls(MetadataCalls):
    """Groups and their offsets and lag; transactions."""

    async def groups(self) -> list[dict[str, Any]]:
        fut = self.admin.list_consumer_groups(request_timeout=self.timeout_s)
        res = await self._future(fut)
        return [
            {"group_id": g.group_id, "state": getattr(g.state, "name", str(g.state)),
             "simple": bool(g.is_simple_consumer_group)}
            for g in sorted(res.valid, key=lambda g: g.group_id)
        ]

    async def describe_group(self, group: str) -> dict[str, Any]:
        futs = self.admin.describe_consumer_groups([group], request_timeout=self.timeout_s)
        d = await self._future(futs[group])
        members = [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "group_instance_id": m.group_instance_id,
                "assignment": sorted(
                    [tp.topic, tp.partition] for tp in (m.assignment.topic_partitions or [])
                ) if m.assignment else [],
            }
            for m in d.members
        ]
        return {
            "group_id": d.group_id,
            "state": getattr(d.state, "name", str(d.state)),
            "protocol": d.partition_assignor,
            "coordinator": d.coordinator.id if d.coordinator is not None else None,
            "members": members,
        }

    async def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        futs = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout_s
        )
        res = await self._future(futs[group])
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in res.topic_partitions
            if tp.offset >= 0
        }

    async def group_lag(self, group: str) -> list[dict[str, Any]]:
        """Committed offset, high watermark and lag per partition the group committed."""
        committed = await self.group_offsets(group)
        marks = await self.watermarks(committed)
        return [
            {
                "topic": t, "partition": p, "committed": off,
                "high_watermark": marks[(t, p)].high_watermark,
                "lag": max(marks[(t, p)].high_watermark - off, 0),
            }
            for (t, p), off in sorted(committed.items())
        ]

    async def transactions(self) -> list[dict[str, Any]]:
        """The transactions the coordinators know (ListTransactions), open ones described
        (DescribeTransactions: start time, timeout, partitions). No Python Kafka client has
        these APIs: Yak's blocking client, in a thread, with this cluster's security."""

        def fetch() -> list[dict[str, Any]]:
            from yak.client.transactions import TransactionalClient

            with TransactionalClient(self.bootstrap, client_id=self.client_id,
                                     request_timeout_ms=int(self.timeout_s * 1000), retries=1,
                                     security=self.security) as c:
                out = []
                for t in c.list_transactions():
                    row: dict[str, Any] = {"transactional_id": t.transactional_id,
                                           "producer_id": t.producer_id, "state": t.state}
                    if t.state in OPEN_TXN_STATES:
                        d = c.describe_transaction(t.transactional_id, known=True)
                        row.update(producer_epoch=d.producer_epoch, timeout_ms=d.timeout_ms,
                                   start_time_ms=d.start_time_ms,
                                   partitions=[list(tp) for tp in d.partitions])
                    out.append(row)
                return out

        return await self._blocking(fetch)
