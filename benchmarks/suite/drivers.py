"""The same three workloads for every broker, each with the client a user would pick.

- produce: N messages of S bytes as fast as the client goes with acknowledgements on
  (Kafka protocol: confluent-kafka acks=all linger.ms=5; Redis: pipelined XADD; NATS:
  JetStream publish_async; RabbitMQ: rstream send_batch with confirms);
- consume: read them all back from the start;
- latency: a fixed rate (10k msg/s) paced in 1 ms ticks, a consumer in another process,
  latency = receive time - send time written in the first 8 bytes of each message.

Settings are those of ../shared/peers (measured there). Every driver returns
(messages, client CPU seconds, latencies in ns or None); the caller meters the server.
Every loop is bounded by count and by wall time.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import queue
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

from yak.bench.runner import run as kafka_run
from yak.bench.spec import BenchResult, BenchSpec

TS = struct.Struct("<q")
# (messages, client CPU s, latencies in ns or None, seconds from first send to last ack/read)
Outcome = tuple[int, float, list[int] | None, float]


def _payload(size: int) -> bytes:
    return os.urandom(size)


# ---------------------------------------------------------------- Kafka protocol (3 brokers)

def kafka(mode: str, bootstrap: str, pid: int, topic: str, size: int, n: int, cap: float,
          rate: int = 0, secs: float = 0, topic_config: dict[str, str] | None = None
          ) -> BenchResult:
    """One `yak bench` run: the same code path a user gets from `yak bench`."""
    tc = dict(topic_config or {})
    if mode == "latency":
        spec = BenchSpec(bootstrap=bootstrap, topic=topic, message_size=size, count=0,
                         duration_s=secs, rate=rate, linger_ms=0, fetch_wait_ms=5,
                         timeout_s=secs + 20, topic_config=tc)
        return kafka_run("e2e", spec, broker_pid=pid)
    spec = BenchSpec(bootstrap=bootstrap, topic=topic, message_size=size, count=n,
                     duration_s=cap, linger_ms=5, timeout_s=cap + 30, topic_config=tc)
    return kafka_run(mode, spec, broker_pid=pid)


# ---------------------------------------------------------------- Redis Streams

def redis_produce(port: int, key: str, size: int, n: int, cap: float) -> Outcome:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    body = _payload(size)
    t0 = time.monotonic()
    c0, end, sent = time.process_time(), t0 + cap, 0
    while sent < n and time.monotonic() < end:
        p = r.pipeline(transaction=False)
        k = min(1000, n - sent)
        for _ in range(k):
            p.xadd(key, {b"d": body})
        p.execute()
        sent += k
    return sent, time.process_time() - c0, None, time.monotonic() - t0


def redis_consume(port: int, key: str, size: int, n: int, cap: float) -> Outcome:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    t0 = time.monotonic()
    c0, end, got, last = time.process_time(), t0 + cap, 0, b"0-0"
    while got < n and time.monotonic() < end:
        resp = r.xread({key: last}, count=10_000)
        if not resp:
            break
        entries = resp[0][1]
        for _id, fields in entries:
            _ = fields[b"d"]
        got += len(entries)
        last = entries[-1][0]
    return got, time.process_time() - c0, None, time.monotonic() - t0


def _redis_lat_consumer(port: int, key: str, total: int, secs: float, q: Any) -> None:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    lat: list[int] = []
    last = b"0-0"
    q.put("ready")
    c0, end = time.process_time(), time.monotonic() + secs + 10
    while len(lat) < total and time.monotonic() < end:
        resp = r.xread({key: last}, count=1000, block=200)
        now = time.time_ns()
        if resp:
            for _id, fields in resp[0][1]:
                lat.append(now - TS.unpack_from(fields[b"d"])[0])
            last = resp[0][1][-1][0]
    q.put((lat, time.process_time() - c0))


def redis_latency(port: int, key: str, size: int, rate: int, secs: float) -> Outcome:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    pad = _payload(size - TS.size)

    def send(k: int) -> None:
        p = r.pipeline(transaction=False)
        for _ in range(k):
            p.xadd(key, {b"d": TS.pack(time.time_ns()) + pad})
        p.execute()

    return _paced(_redis_lat_consumer, (port, key), send, rate, secs)


# ---------------------------------------------------------------- shared pacing

def _paced(consumer: Callable[..., None], args: tuple[Any, ...], send: Callable[[int], Any],
           rate: int, secs: float, drain: Callable[[], Any] | None = None) -> Outcome:
    """Run `consumer` in a spawned process, then call send(k) every 1 ms tick."""
    total = int(rate * secs)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=consumer, args=(*args, total, secs, q), daemon=True)
    proc.start()
    try:
        q.get(timeout=60)
        time.sleep(0.3)
        c0 = time.process_time()
        per_tick = max(1, rate // 1000)
        t0 = time.monotonic()
        sent = tick = 0
        while sent < total and time.monotonic() - t0 < secs + 5:
            delay = t0 + tick / 1000 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            k = min(per_tick, total - sent)
            send(k)
            sent += k
            tick += 1
        if drain:
            drain()
        span = time.monotonic() - t0
        client = time.process_time() - c0
        lat, ccpu = q.get(timeout=secs + 30)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
    return len(lat), client + ccpu, lat, span


# ---------------------------------------------------------------- NATS JetStream

def _uvloop_run(coro: Any) -> Any:
    import uvloop

    return uvloop.run(coro)


async def _nats_reset(js: Any, stream: str, subject: str) -> None:
    from nats.js.api import StorageType, StreamConfig

    with contextlib.suppress(Exception):  # absent is fine
        await js.delete_stream(stream)
    await js.add_stream(StreamConfig(name=stream, subjects=[subject], storage=StorageType.FILE,
                                     num_replicas=1))


def nats_prepare(port: int, subject: str) -> None:
    async def go() -> None:
        import nats

        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        await _nats_reset(nc.jetstream(), subject.upper(), subject)
        await nc.close()

    _uvloop_run(go())


def nats_produce(port: int, subject: str, size: int, n: int, cap: float) -> Outcome:
    async def go() -> int:
        import nats

        nc = await nats.connect(f"nats://127.0.0.1:{port}", pending_size=8 * 2**20)
        js = nc.jetstream(publish_async_max_pending=4000)
        body = _payload(size)
        t0 = time.monotonic()
        end, sent = t0 + cap, 0
        while sent < n and time.monotonic() < end:
            await js.publish_async(subject, body)
            sent += 1
        await asyncio.wait_for(js.publish_async_completed(), 60)
        span = time.monotonic() - t0
        info = await js.stream_info(subject.upper())
        await nc.close()
        return int(info.state.messages), span

    c0 = time.process_time()
    n_done, span = _uvloop_run(go())
    return n_done, time.process_time() - c0, None, span


def nats_consume(port: int, subject: str, size: int, n: int, cap: float) -> Outcome:
    async def go() -> int:
        import nats

        nc = await nats.connect(f"nats://127.0.0.1:{port}", pending_size=64 * 2**20)
        js = nc.jetstream()
        got = 0
        done = asyncio.Event()

        async def cb(msg: Any) -> None:
            nonlocal got
            _ = msg.data
            got += 1
            if got >= n:
                done.set()

        t0 = time.monotonic()
        sub = await js.subscribe(subject, cb=cb, ordered_consumer=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), cap)
        span = time.monotonic() - t0
        await sub.unsubscribe()
        await nc.close()
        return got, span

    c0 = time.process_time()
    got, span = _uvloop_run(go())
    return got, time.process_time() - c0, None, span


def _nats_lat_consumer(port: int, subject: str, total: int, secs: float, q: Any) -> None:
    async def go() -> None:
        import nats

        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        js = nc.jetstream()
        lat: list[int] = []
        done = asyncio.Event()

        async def cb(msg: Any) -> None:
            lat.append(time.time_ns() - TS.unpack_from(msg.data)[0])
            if len(lat) >= total:
                done.set()

        await js.subscribe(subject, cb=cb, ordered_consumer=True)
        q.put("ready")
        c0 = time.process_time()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), secs + 10)
        q.put((lat, time.process_time() - c0))
        await nc.close()

    _uvloop_run(go())


def nats_latency(port: int, subject: str, size: int, rate: int, secs: float) -> Outcome:
    """The producer side runs its own event loop in a thread-free, tick-paced coroutine."""
    import nats

    pad = _payload(size - TS.size)
    total = int(rate * secs)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_nats_lat_consumer, args=(port, subject, total, secs, q),
                       daemon=True)
    proc.start()

    async def produce() -> tuple[float, float]:
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        js = nc.jetstream(publish_async_max_pending=4000)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, q.get, True, 60)
        await asyncio.sleep(0.3)
        c0 = time.process_time()
        per_tick = max(1, rate // 1000)
        t0 = time.monotonic()
        sent = tick = 0
        while sent < total and time.monotonic() - t0 < secs + 5:
            delay = t0 + tick / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            for _ in range(min(per_tick, total - sent)):
                await js.publish_async(subject, TS.pack(time.time_ns()) + pad)
            sent += per_tick
            tick += 1
        await js.publish_async_completed()
        cpu = time.process_time() - c0
        span = time.monotonic() - t0
        await nc.close()
        return cpu, span

    try:
        client, span = _uvloop_run(produce())
        lat, ccpu = q.get(timeout=secs + 30)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
    return len(lat), client + ccpu, lat, span


# ---------------------------------------------------------------- RabbitMQ Streams

RABBIT_AUTH = {"username": "guest", "password": "guest"}


def rabbit_prepare(port: int, stream: str) -> None:
    async def go() -> None:
        from rstream import Producer

        async with Producer("127.0.0.1", port, **RABBIT_AUTH) as p:
            await p.delete_stream(stream, missing_ok=True)
            await p.create_stream(stream, exists_ok=True)

    _uvloop_run(go())


def rabbit_produce(port: int, stream: str, size: int, n: int, cap: float) -> Outcome:
    async def go() -> int:
        from rstream import Producer

        body = _payload(size)
        batch = max(1, min(1000, (512 * 1024) // (size + 16)))  # stay under frame_max
        confirmed = 0
        room = asyncio.Event()
        room.set()
        sent = 0

        def on_confirm(_status: Any) -> None:
            nonlocal confirmed
            confirmed += 1
            if sent - confirmed <= 10_000:
                room.set()

        async with Producer("127.0.0.1", port, **RABBIT_AUTH) as p:
            t0 = time.monotonic()
            end = t0 + cap
            while sent < n and time.monotonic() < end:
                if sent - confirmed > 20_000:  # bound unconfirmed messages like the peers did
                    room.clear()
                    await room.wait()
                k = min(batch, n - sent)
                sent += k
                await p.send_batch(stream, [body] * k, on_publish_confirm=on_confirm)
            deadline = time.monotonic() + 60
            while confirmed < sent and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            span = time.monotonic() - t0
        return confirmed, span

    c0 = time.process_time()
    n_done, span = _uvloop_run(go())
    return n_done, time.process_time() - c0, None, span


def rabbit_consume(port: int, stream: str, size: int, n: int, cap: float) -> Outcome:
    async def go() -> int:
        from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

        got = 0
        done = asyncio.Event()

        async def cb(msg: Any, _ctx: Any) -> None:
            nonlocal got
            got += 1
            if got >= n:
                done.set()

        c = Consumer("127.0.0.1", port, **RABBIT_AUTH)
        await c.start()
        t0 = time.monotonic()
        await c.subscribe(stream, cb, offset_specification=ConsumerOffsetSpecification(
            OffsetType.FIRST, None), initial_credit=10)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), cap)
        span = time.monotonic() - t0
        await c.close()
        return got, span

    c0 = time.process_time()
    got, span = _uvloop_run(go())
    return got, time.process_time() - c0, None, span


def _rabbit_lat_consumer(port: int, stream: str, total: int, secs: float, q: Any) -> None:
    async def go() -> None:
        from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

        lat: list[int] = []
        done = asyncio.Event()

        async def cb(msg: Any, _ctx: Any) -> None:
            lat.append(time.time_ns() - TS.unpack_from(bytes(msg))[0])
            if len(lat) >= total:
                done.set()

        c = Consumer("127.0.0.1", port, **RABBIT_AUTH)
        await c.start()
        await c.subscribe(stream, cb, offset_specification=ConsumerOffsetSpecification(
            OffsetType.FIRST, None), initial_credit=10)
        q.put("ready")
        c0 = time.process_time()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), secs + 10)
        q.put((lat, time.process_time() - c0))
        await c.close()

    _uvloop_run(go())


def rabbit_latency(port: int, stream: str, size: int, rate: int, secs: float) -> Outcome:
    from rstream import Producer

    pad = _payload(size - TS.size)
    total = int(rate * secs)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()

    async def produce() -> tuple[float, Any, float]:
        async with Producer("127.0.0.1", port, **RABBIT_AUTH) as p:
            proc = ctx.Process(target=_rabbit_lat_consumer, args=(port, stream, total, secs, q),
                               daemon=True)
            proc.start()
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, q.get, True, 60)
            await asyncio.sleep(0.3)
            c0 = time.process_time()
            per_tick = max(1, rate // 1000)
            t0 = time.monotonic()
            sent = tick = 0
            while sent < total and time.monotonic() - t0 < secs + 5:
                delay = t0 + tick / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                k = min(per_tick, total - sent)
                await p.send_batch(stream, [TS.pack(time.time_ns()) + pad for _ in range(k)])
                sent += k
                tick += 1
            return time.process_time() - c0, proc, time.monotonic() - t0

    client, proc, span = _uvloop_run(produce())
    try:
        lat, ccpu = q.get(timeout=secs + 30)
    except queue.Empty:
        lat, ccpu = [], 0.0
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
    return len(lat), client + ccpu, lat, span


def redis_prepare(port: int, key: str) -> None:
    import redis

    redis.Redis(host="127.0.0.1", port=port).delete(key)


# prepare(port, name) creates the stream/topic outside the measured window
PREPARE: dict[str, Callable[[int, str], None]] = {
    "redis": redis_prepare, "nats": nats_prepare, "rabbit": rabbit_prepare,
}
DRIVERS: dict[str, dict[str, Callable[..., Outcome]]] = {
    "redis": {"produce": redis_produce, "consume": redis_consume, "latency": redis_latency},
    "nats": {"produce": nats_produce, "consume": nats_consume, "latency": nats_latency},
    "rabbit": {"produce": rabbit_produce, "consume": rabbit_consume, "latency": rabbit_latency},
}


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"
