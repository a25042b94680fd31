"""`yak bench produce|consume|e2e`: load-test any Kafka-compatible cluster.

Like kafka-producer-perf-test / kafka-consumer-perf-test and rpk's benchmarks, with the
broker's own CPU per message when the broker runs on this machine (found by the port it
listens on, or `--broker-pid`): on a shared machine that figure is steadier than msg/s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from yak.bench import report
from yak.bench.runner import BenchError, run
from yak.bench.spec import BenchSpec
from yak.cli.common import DEFAULT_BOOTSTRAP, Bootstrap, fail

app = typer.Typer(
    help="Measure produce/consume throughput and end-to-end latency.", no_args_is_help=True
)

Topic = Annotated[str, typer.Option("--topic", "-t", help="Topic (created if missing).")]
Size = Annotated[int, typer.Option("--size", "-s", help="Message value size in bytes.", min=1)]
Count = Annotated[int, typer.Option("--count", "-n", help="Messages in total (0: no bound).")]
Duration = Annotated[
    float, typer.Option("--duration", "-d", help="Seconds to run (0: until --count).")
]
Partitions = Annotated[
    int, typer.Option("--partitions", "-p", help="Partitions when creating the topic.", min=1)
]
Acks = Annotated[str, typer.Option("--acks", help="0, 1 or all.")]
Compression = Annotated[str, typer.Option("--compression", help="none, gzip, snappy, lz4 or zstd.")]
Batch = Annotated[int, typer.Option("--batch-size", help="Producer batch.size in bytes.")]
Producers = Annotated[int, typer.Option("--producers", help="Producer processes.", min=1)]
Consumers = Annotated[int, typer.Option("--consumers", help="Consumer processes.", min=1)]
BrokerPid = Annotated[
    int | None,
    typer.Option("--broker-pid", help="Broker pid for CPU figures (default: local listener)."),
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print the result as JSON, no table.")]
OutFile = Annotated[Path | None, typer.Option("--output", "-o", help="Also write JSON here.")]
NoProgress = Annotated[bool, typer.Option("--no-progress", help="No progress bar.")]
MaxTime = Annotated[float, typer.Option("--timeout", help="Hard cap on the run, seconds.")]
TopicSet = Annotated[
    list[str] | None,
    typer.Option("--topic-config", "-c", help="Topic config KEY=VALUE when creating, repeatable."),
]
ClientSet = Annotated[
    list[str] | None,
    typer.Option("--client-set", "-X", help="Extra librdkafka setting KEY=VALUE, repeatable."),
]


def _execute(
    mode: str,
    spec: BenchSpec,
    broker_pid: int | None,
    as_json: bool,
    output: Path | None,
    no_progress: bool,
) -> None:
    try:
        spec.validate(mode)
    except ValueError as e:
        fail(str(e), exit_code=2)
    err = Console(stderr=True)
    show = not no_progress and not as_json and err.is_terminal
    total_hint = spec.count or None
    with Progress(
        TextColumn(f"[bold]{mode}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=not show,
        transient=True,
    ) as bar:
        task = bar.add_task(mode, total=total_hint)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        try:
            result = run(mode, spec, broker_pid=broker_pid, progress=progress)
        except BenchError as e:
            fail(str(e))
    text = report.to_json(result)
    if output is not None:
        output.write_text(text + "\n")
    if as_json:
        print(text)
    else:
        report.print_table(result)


def _extra(items: list[str] | None, what: str = "--client-set") -> dict[str, str]:
    out = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            fail(f"invalid {what} {item!r}: expected KEY=VALUE", exit_code=2)
        out[k] = v
    return out


@app.command("produce")
def produce(
    topic: Topic = "yak-bench",
    size: Size = 100,
    count: Count = 1_000_000,
    duration: Duration = 0.0,
    partitions: Partitions = 1,
    acks: Acks = "all",
    compression: Compression = "none",
    linger_ms: Annotated[float, typer.Option("--linger-ms", help="Producer linger.ms.")] = 5.0,
    batch_size: Batch = 1_048_576,
    producers: Producers = 1,
    rate: Annotated[int, typer.Option("--rate", help="Throttle, msg/s in total (0: none).")] = 0,
    topic_config: TopicSet = None,
    client_set: ClientSet = None,
    broker_pid: BrokerPid = None,
    as_json: JsonOut = False,
    output: OutFile = None,
    no_progress: NoProgress = False,
    timeout: MaxTime = 300.0,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
) -> None:
    """Produce as fast as possible (or at --rate): msg/s, MB/s, ack latency, broker CPU."""
    spec = BenchSpec(
        bootstrap=bootstrap,
        topic=topic,
        message_size=size,
        count=count,
        duration_s=duration,
        partitions=partitions,
        acks=acks,
        compression=compression,
        linger_ms=linger_ms,
        batch_size=batch_size,
        producers=producers,
        rate=rate,
        timeout_s=timeout,
        client_config=_extra(client_set),
        topic_config=_extra(topic_config, "--topic-config"),
    )
    _execute("produce", spec, broker_pid, as_json, output, no_progress)


@app.command("consume")
def consume(
    topic: Topic = "yak-bench",
    size: Annotated[int, typer.Option("--size", "-s", help="Value size (for MB/s).")] = 100,
    count: Annotated[int, typer.Option("--count", "-n", help="At most (0: all there).")] = 0,
    duration: Duration = 0.0,
    consumers: Consumers = 1,
    fetch_wait_ms: Annotated[int, typer.Option("--fetch-wait-ms")] = 100,
    client_set: ClientSet = None,
    broker_pid: BrokerPid = None,
    as_json: JsonOut = False,
    output: OutFile = None,
    no_progress: NoProgress = False,
    timeout: MaxTime = 300.0,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
) -> None:
    """Read what the topic holds, from the log start to the log end offset seen at start.

    Partitions are split between the consumer processes and assigned directly (no group),
    so the run measures fetching, not rebalancing. Run `yak bench produce` first.
    """
    spec = BenchSpec(
        bootstrap=bootstrap,
        topic=topic,
        message_size=size,
        count=count,
        duration_s=duration,
        consumers=consumers,
        fetch_wait_ms=fetch_wait_ms,
        timeout_s=timeout,
        client_config=_extra(client_set),
    )
    _execute("consume", spec, broker_pid, as_json, output, no_progress)


@app.command("e2e")
def e2e(
    topic: Topic = "yak-bench-e2e",
    size: Size = 100,
    rate: Annotated[int, typer.Option("--rate", help="Target msg/s over all producers.")] = 10_000,
    duration: Annotated[float, typer.Option("--duration", "-d", help="Seconds.")] = 10.0,
    count: Count = 0,
    partitions: Partitions = 1,
    acks: Acks = "all",
    compression: Compression = "none",
    linger_ms: Annotated[float, typer.Option("--linger-ms", help="Producer linger.ms.")] = 0.0,
    batch_size: Batch = 1_048_576,
    producers: Producers = 1,
    consumers: Consumers = 1,
    fetch_wait_ms: Annotated[int, typer.Option("--fetch-wait-ms")] = 100,
    topic_config: TopicSet = None,
    client_set: ClientSet = None,
    broker_pid: BrokerPid = None,
    as_json: JsonOut = False,
    output: OutFile = None,
    no_progress: NoProgress = False,
    timeout: MaxTime = 300.0,
    bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
) -> None:
    """Latency from send to receipt at a fixed rate: p50/p95/p99/p99.9/max over every message.

    Each value starts with the sender's wall-clock time; consumers start at the log end.
    Across machines the figures are only as good as their clock sync.
    """
    spec = BenchSpec(
        bootstrap=bootstrap,
        topic=topic,
        message_size=size,
        count=count,
        duration_s=duration,
        partitions=partitions,
        acks=acks,
        compression=compression,
        linger_ms=linger_ms,
        batch_size=batch_size,
        producers=producers,
        consumers=consumers,
        rate=rate,
        fetch_wait_ms=fetch_wait_ms,
        timeout_s=timeout,
        client_config=_extra(client_set),
        topic_config=_extra(topic_config, "--topic-config"),
    )
    _execute("e2e", spec, broker_pid, as_json, output, no_progress)
