"""Fault injection on an in-process broker (`start_broker`): a failed fsync must turn the
acknowledgement of that partition, and only that one, into KAFKA_STORAGE_ERROR."""

from __future__ import annotations

import asyncio
import datetime
import struct
from pathlib import Path

from yak.broker.server import start_broker
from yak.config import BrokerConfig
from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode
from yak.protocol.records import Record, build_batch


async def _request(port: int, req, cid: int = 1):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(kio_compat.encode_request(req, cid))
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        frame = await reader.readexactly(size)
        return kio_compat.decode_response(int(req.__api_key__), int(req.__version__), frame)[1]
    finally:
        writer.close()


def test_failed_fsync_is_not_acknowledged(tmp_path: Path) -> None:
    async def run() -> dict[str, ErrorCode]:
        cfg = BrokerConfig.load(data_dir=str(tmp_path / "d"), listen="127.0.0.1:0")
        running = await start_broker(cfg)
        try:
            topics = running.broker.topics
            for name in ("sick", "healthy"):
                await topics.create(name, 1, {"write.caching": "false"})

            def broken_sync(offset: int) -> None:
                raise OSError(5, "Input/output error")

            # Fault injection under the partition layer: the storage fsync fails.
            running.broker.replica_manager.get_partition("sick", 0).log.sync = broken_sync
            mod = kio_compat.schema_module("produce", 9, "request")
            req = mod.ProduceRequest(
                transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                topic_data=tuple(
                    mod.TopicProduceData(name=name, partition_data=(mod.PartitionProduceData(
                        index=0, records=build_batch([Record(None, b"v")])),))
                    for name in ("sick", "healthy")
                ),
            )
            resp = await _request(running.broker.port, req)
            return {t.name: t.partition_responses[0].error_code for t in resp.responses}
        finally:
            await running.stop()

    codes = asyncio.run(run())
    assert codes == {"sick": ErrorCode.kafka_storage_error, "healthy": ErrorCode.none}
