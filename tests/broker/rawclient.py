"""A tiny blocking Kafka client for raw-protocol tests: kio encodes, we frame.

It exists so tests can send exactly the bytes they want (replayed batches, bad CRCs,
hostile frames) which real clients never would.
"""

from __future__ import annotations

import datetime
import socket
import struct
from typing import Any

from yak.protocol import kio_compat
from yak.protocol.kio_compat import ErrorCode


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._cid = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def is_closed_by_peer(self, wait: float = 5.0) -> bool:
        """True if the broker closed the connection (EOF or reset) within `wait` seconds."""
        self.sock.settimeout(wait)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def send(self, request: Any) -> int:
        self._cid += 1
        self.sock.sendall(kio_compat.encode_request(request, self._cid))
        return self._cid

    def request(self, request: Any) -> Any:
        cid = self.send(request)
        frame = self.recv_frame()
        got_cid, response = kio_compat.decode_response(
            int(request.__api_key__), int(request.__version__), frame
        )
        assert got_cid == cid
        return response

    # ---------------------------------------------------------------- helpers

    def create_topic(self, name: str, partitions: int = 1, **configs: str) -> None:
        mod = kio_compat.schema_module("create_topics", 5, "request")
        req = mod.CreateTopicsRequest(
            topics=(mod.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=1, assignments=(),
                configs=tuple(mod.CreatableTopicConfig(name=k.replace("_", "."), value=v)
                              for k, v in configs.items()),
            ),),
            timeout=datetime.timedelta(seconds=10), validate_only=False,
        )
        resp = self.request(req)
        code = resp.topics[0].error_code
        assert code in (ErrorCode.none, ErrorCode.topic_already_exists), code

    def produce(self, topic: str, batches: dict[int, bytes | None], acks: int = -1,
                version: int = 9, transactional_id: str | None = None) -> Any:
        mod = kio_compat.schema_module("produce", version, "request")
        req = mod.ProduceRequest(
            transactional_id=transactional_id, acks=acks,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(mod.TopicProduceData(name=topic, partition_data=tuple(
                mod.PartitionProduceData(index=p, records=b) for p, b in batches.items()
            )),),
        )
        if acks == 0:
            self.send(req)
            return None
        return self.request(req)

    def produce_one(self, topic: str, partition: int, batch: bytes, **kw: Any) -> Any:
        """(error_code, base_offset) of a single-partition produce."""
        resp = self.produce(topic, {partition: batch}, **kw)
        p = resp.responses[0].partition_responses[0]
        return p.error_code, p.base_offset

    def fetch(self, topic: str, partition: int, offset: int, version: int = 12,
              max_wait_ms: int = 0, min_bytes: int = 0, max_bytes: int = 50 << 20,
              partition_max_bytes: int = 10 << 20, isolation_level: int = 0) -> Any:
        mod = kio_compat.schema_module("fetch", version, "request")
        part = kio_compat.build(mod.FetchPartition, partition=partition, fetch_offset=offset,
                                partition_max_bytes=partition_max_bytes,
                                current_leader_epoch=-1, log_start_offset=-1,
                                last_fetched_epoch=-1)
        req = kio_compat.build(
            mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=isolation_level,
            session_id=0,
            session_epoch=-1, topics=(kio_compat.build(mod.FetchTopic, topic=topic,
                                                       partitions=(part,)),),
            forgotten_topics_data=(), rack_id="",
        )
        return self.request(req)

    def list_offset(self, topic: str, partition: int, timestamp: int, version: int = 7,
                    isolation_level: int = 0) -> Any:
        mod = kio_compat.schema_module("list_offsets", version, "request")
        req = kio_compat.build(
            mod.ListOffsetsRequest, replica_id=-1, isolation_level=isolation_level,
            topics=(mod.ListOffsetsTopic(name=topic, partitions=(kio_compat.build(
                mod.ListOffsetsPartition, partition_index=partition, current_leader_epoch=-1,
                timestamp=timestamp),)),),
            timeout=datetime.timedelta(seconds=5),
        )
        p = self.request(req).topics[0].partitions[0]
        return p

    def init_producer_id(self, producer_id: int = -1, epoch: int = -1, version: int = 4) -> Any:
        mod = kio_compat.schema_module("init_producer_id", version, "request")
        req = kio_compat.build(
            mod.InitProducerIdRequest, transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=producer_id, producer_epoch=epoch,
        )
        return self.request(req)

    def api_versions(self, version: int = 3) -> Any:
        mod = kio_compat.schema_module("api_versions", version, "request")
        req = kio_compat.build(mod.ApiVersionsRequest, client_software_name="yak-tests",
                               client_software_version="1")
        return self.request(req)
