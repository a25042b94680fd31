"""A confluent-kafka group member run as its own process, so a test can SIGKILL it.

It appends one line per event to its output file (flushed at once, so a SIGKILL
loses nothing that happened before it):

    A <partitions>          partitions assigned (comma-separated)
    R <partitions>          partitions revoked
    M <partition> <offset> <value>
    C <partition> <offset>  offset committed (the next offset to read)

It commits synchronously every COMMIT_EVERY messages, on revoke and before a clean
exit (SIGTERM), so the only messages another member may read again are the ones
after this member's last commit, and only if it dies without a clean exit.

    python consumer_worker.py BOOTSTRAP GROUP TOPIC OUTFILE [key=value ...]

(`commit.every=N` changes COMMIT_EVERY; other pairs are librdkafka settings.)
"""

from __future__ import annotations

import signal
import sys

from confluent_kafka import Consumer, KafkaException

COMMIT_EVERY = 10


def main() -> int:
    bootstrap, group, topic, outfile, *extra = sys.argv[1:]
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    commit_every = COMMIT_EVERY
    for kv in extra:
        k, v = kv.split("=", 1)
        if k == "commit.every":  # ours, not librdkafka's
            commit_every = int(v)
        else:
            conf[k] = v
    out = open(outfile, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    consumer = Consumer(conf)

    def commit() -> None:
        try:
            done = consumer.commit(asynchronous=False)
        except KafkaException as e:
            out.write(f"E commit {e}\n")
            return
        for tp in done or []:
            if tp.error is None and tp.offset >= 0:
                out.write(f"C {tp.partition} {tp.offset}\n")

    def on_assign(c: Consumer, parts: list) -> None:
        out.write("A " + ",".join(str(p.partition) for p in parts) + "\n")

    def on_revoke(c: Consumer, parts: list) -> None:
        commit()
        out.write("R " + ",".join(str(p.partition) for p in parts) + "\n")

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    since_commit = 0
    while not stop:
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        out.write(f"M {msg.partition()} {msg.offset()} {msg.value().decode()}\n")
        since_commit += 1
        if since_commit >= commit_every:
            commit()
            since_commit = 0
    commit()
    consumer.close()
    out.write("X\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
