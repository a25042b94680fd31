"""`ClusterTopicManager.topic_name` (every Fetch v13+, per topic) keeps the text of the
last topic id it was asked about, never the name: a deleted topic answers None and a
re-created one its new id's name, through the same UUID object the request decoder hands
in again. A real single broker in this process (its one metadata path)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

from yak.broker.server import start_broker
from yak.config import BrokerConfig


async def _until(cond: Callable[[], bool]) -> None:
    """The image is applied from the store's watch: wait for it (the test's timeout
    bounds this)."""
    while not cond():
        await asyncio.sleep(0.01)


def test_the_name_follows_the_image_through_the_same_id_object(tmp_path: Path) -> None:
    async def body() -> None:
        running = await start_broker(BrokerConfig.load(data_dir=str(tmp_path),
                                                       listen="127.0.0.1:0"))
        try:
            topics = running.broker.topics
            await topics.create("a", 1)
            await topics.create("b", 1)
            await _until(lambda: topics.get("a") is not None and topics.get("b") is not None)
            a = topics.get("a").topic_id
            b = topics.get("b").topic_id
            assert topics.topic_name(a) == "a"
            assert topics.topic_name(a) == "a"  # the same object again
            assert topics.topic_name(uuid.UUID(bytes=a.bytes)) == "a"  # an equal one
            assert topics.topic_name(b) == "b"
            assert topics.topic_name(a) == "a"  # alternating ids
            assert topics.topic_name(uuid.uuid4()) is None
            assert topics.topic_name(a) == "a"  # the last id asked about, before...
            await topics.delete("a")
            await _until(lambda: topics.get("a") is None)
            assert topics.topic_name(a) is None  # ...and after: fails if the name were kept
            await topics.create("a", 1)
            await _until(lambda: topics.get("a") is not None)
            new = topics.get("a").topic_id
            assert new != a
            assert topics.topic_name(a) is None
            assert topics.topic_name(new) == "a"
            assert topics.topic_name(b) == "b"
        finally:
            await running.stop()

    asyncio.run(asyncio.wait_for(body(), 60))
