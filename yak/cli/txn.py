"""`yak txn list|describe|abort`: transactions, as Kafka's `kafka-transactions.sh` shows and
aborts them.

    yak txn list [--state Ongoing] [--producer-id 7] [--min-duration-ms 60000] [--pattern RE]
    yak txn describe orders-writer-1
    yak txn abort --topic orders --partition 0 [--start-offset 42]
    yak txn abort --topic orders --partition 0 --producer-id 7 --producer-epoch 3

`abort` ends a hanging transaction in one partition by writing an ABORT marker there
(WriteTxnMarkers, as `kafka-transactions.sh abort` does): the open transaction is found
with DescribeProducers, by its start offset (or the only one open there). It is for a
transaction its coordinator can no longer finish; a live one is better ended by its
producer or its timeout.

No Python Kafka client has these APIs, so this goes through Yak's own client
(`yak.client.transactions`) and works against any Kafka-compatible cluster, with the same
--command-config / -X security settings as every `yak` client command.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from yak.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    Bootstrap,
    Timeout,
    client_security,
    fail,
    secured,
)

app = typer.Typer(help="List, describe and abort transactions.", no_args_is_help=True)

STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
          "CompleteAbort", "PrepareEpochFence", "Dead")
Format = Annotated[str, typer.Option("--format", "-f", help="table (text) or json.")]


def _client(bootstrap: str, timeout: float):  # noqa: ANN202
    from yak.client.transactions import TransactionalClient

    return TransactionalClient(bootstrap, client_id="yak-cli",
                               request_timeout_ms=int(timeout * 1000), retries=1,
                               security=client_security())


def _run(what: str, fn: Any) -> Any:
    """Call the broker; a Kafka error or an unreachable broker is one line, exit 1."""
    from yak.client.connection import BrokerConnectionError
    from yak.errors import KafkaError

    try:
        return fn()
    except BrokerConnectionError as e:
        fail(f"{what}: {e.message}")
    except KafkaError as e:
        name = getattr(e.code, "name", str(e.code)).upper()
        msg = e.message if e.message and e.message.lower() != name.lower() else ""
        fail(f"{what}: {name}: {msg}" if msg else f"{what}: {name}")


def _check_format(fmt: str, choices: tuple[str, ...]) -> None:
    if fmt not in choices:
        fail(f"invalid --format {fmt!r}: expected {' or '.join(choices)}", exit_code=2)


@app.command("list")
@secured
def list_transactions(
    state: Annotated[list[str] | None, typer.Option("--state", help="Only in this state "
                     "(repeatable): " + ", ".join(STATES))] = None,
    producer_id: Annotated[list[int] | None, typer.Option("--producer-id",
                           help="Only this producer id (repeatable).")] = None,
    min_duration_ms: Annotated[int, typer.Option("--min-duration-ms",
                               help="Only transactions open longer than this.")] = -1,
    pattern: Annotated[str | None, typer.Option("--pattern",
                       help="Only transactional ids matching this regular expression.")] = None,
    fmt: Format = "table",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Transactional ids the cluster's coordinators know, with producer id and state."""
    _check_format(fmt, ("table", "json"))
    for s in state or []:
        if s not in STATES:
            fail(f"unknown --state {s!r}: expected one of {', '.join(STATES)}", exit_code=2)
    with _client(bootstrap, timeout) as c:
        found = _run("list transactions", lambda: c.list_transactions(
            state or (), producer_id or (), min_duration_ms, pattern))
    if fmt == "json":
        print(json.dumps([{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                           "state": t.state} for t in found]))
        return
    if not found:
        print("no transactions")
        return
    width = max(len("TRANSACTIONAL_ID"), *(len(t.transactional_id) for t in found))
    print(f"{'TRANSACTIONAL_ID':<{width}}  {'PRODUCER_ID':>11}  STATE")
    for t in found:
        print(f"{t.transactional_id:<{width}}  {t.producer_id:>11}  {t.state}")


@app.command("describe")
@secured
def describe(
    transactional_id: Annotated[str, typer.Argument(help="The transactional id.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """State, producer, timeout, age and partitions of one transactional id."""
    _check_format(fmt, ("text", "json"))
    with _client(bootstrap, timeout) as c:
        d = _run(f"describe {transactional_id!r}", lambda: c.describe_transaction(
            transactional_id))
    now = int(time.time() * 1000)
    age = now - d.start_time_ms if d.start_time_ms >= 0 else None
    if fmt == "json":
        print(json.dumps({"transactional_id": d.transactional_id, "state": d.state,
                          "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
                          "timeout_ms": d.timeout_ms, "start_time_ms": d.start_time_ms,
                          "age_ms": age, "partitions": [f"{t}-{p}" for t, p in d.partitions]}))
        return
    print(f"transactional id  {d.transactional_id}")
    print(f"state             {d.state}")
    print(f"producer id       {d.producer_id} (epoch {d.producer_epoch})")
    print(f"timeout           {d.timeout_ms} ms")
    if age is not None:
        print(f"started           {d.start_time_ms} ({age / 1000:.1f} s ago)")
    print("partitions        " + (", ".join(f"{t}-{p}" for t, p in d.partitions) or "-"))


@app.command("abort")
@secured
def abort(
    topic: Annotated[str, typer.Option("--topic", help="Topic of the hanging transaction.")],
    partition: Annotated[int, typer.Option("--partition", help="Its partition.", min=0)],
    start_offset: Annotated[int | None, typer.Option(
        "--start-offset", help="Offset where the transaction began in the partition "
        "(without it, `yak txn abort` lists them when several are open there).")] = None,
    producer_id: Annotated[int | None, typer.Option(
        "--producer-id", help="Abort this producer's transaction (with --producer-epoch).")]
    = None,
    producer_epoch: Annotated[int | None, typer.Option("--producer-epoch")] = None,
    coordinator_epoch: Annotated[int, typer.Option("--coordinator-epoch")] = -1,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
    timeout: Timeout = DEFAULT_TIMEOUT_S,
) -> None:
    """Write an ABORT marker for a hanging transaction in one partition."""
    if (producer_id is None) != (producer_epoch is None):
        fail("give --producer-id and --producer-epoch together", exit_code=2)
    if producer_id is not None and start_offset is not None:
        fail("give --start-offset or --producer-id/--producer-epoch, not both", exit_code=2)
    tp = (topic, partition)
    with _client(bootstrap, timeout) as c:
        if producer_id is None:
            states = _run("describe producers", lambda: c.describe_producers([tp]))[tp]
            open_txns = [s for s in states if s.current_txn_start_offset >= 0]
            if start_offset is not None:
                open_txns = [s for s in open_txns if s.current_txn_start_offset == start_offset]
            if not open_txns:
                where = "" if start_offset is None else f" starting at offset {start_offset}"
                fail(f"no open transaction{where} in {topic}-{partition}")
            if len(open_txns) > 1:
                starts = ", ".join(str(s.current_txn_start_offset) for s in open_txns)
                fail(f"{len(open_txns)} open transactions in {topic}-{partition} (start "
                     f"offsets {starts}): give --start-offset", exit_code=2)
            s = open_txns[0]
            producer_id, producer_epoch = s.producer_id, s.producer_epoch
            if coordinator_epoch < 0:
                coordinator_epoch = max(s.coordinator_epoch, 0)
        assert producer_epoch is not None
        pid, epoch, cepoch = producer_id, producer_epoch, max(coordinator_epoch, 0)
        results = _run("abort", lambda: c.write_txn_markers(pid, epoch, cepoch, False, [tp]))
    code = results.get(tp)
    if code is None or int(code) != 0:
        name = "no answer" if code is None else code.name.upper()
        fail(f"abort of producer {pid} in {topic}-{partition} failed: {name}")
    print(f"aborted the transaction of producer {pid} (epoch {epoch}) in {topic}-{partition}")
