"""Orders pipeline: generator -> Yak topic -> Spark Structured Streaming -> Yak topic + Parquet.

    # with a broker running (`make run` serves one on 127.0.0.1:9092):
    .venv/bin/python examples/orders_pipeline.py demo --bootstrap 127.0.0.1:9092 --out ./pipeline-out

`demo` generates orders, runs the streaming job to completion (Trigger.AvailableNow) and
prints the per-category revenue windows it wrote. The job itself:

1. reads JSON orders from the `orders` topic with the `yak` source,
2. parses them, takes event time from the order, watermarks it (10 s),
3. joins each order with a small static product table (product -> category),
4. sums revenue and counts orders per category in 10-second tumbling windows,
5. writes every closed window as JSON to the `order-stats` topic (exactly-once `yak` sink)
   and to Parquet files.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

PRODUCTS = [
    ("p-100", "books", 12.5),
    ("p-101", "books", 30.0),
    ("p-200", "games", 59.99),
    ("p-201", "games", 19.99),
    ("p-300", "garden", 7.25),
    ("p-301", "garden", 120.0),
]
WINDOW = "10 seconds"
WATERMARK = "10 seconds"


def make_orders(count: int, seed: int = 7, start_ms: int = 1_700_000_000_000) -> list[dict]:
    """Deterministic orders spread over `count / 20` seconds of event time, slightly shuffled."""
    rng = random.Random(seed)
    orders = []
    for i in range(count):
        pid, _, price = rng.choice(PRODUCTS)
        ts = start_ms + i * 50 + rng.randint(-400, 400)  # up to 0.4 s out of order
        orders.append(
            {
                "order_id": f"o-{i:07d}",
                "customer_id": f"c-{rng.randint(1, 500)}",
                "product_id": pid,
                "quantity": rng.randint(1, 4),
                "unit_price": price,
                "ts": ts,
            }
        )
    return orders


def generate(bootstrap: str, topic: str, count: int, seed: int = 7) -> list[dict]:
    from confluent_kafka import Producer

    orders = make_orders(count, seed)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for o in orders:
        p.produce(topic, key=o["customer_id"].encode(), value=json.dumps(o).encode())
    if p.flush(60) != 0:
        raise RuntimeError("orders were not all acknowledged")
    return orders


def spark_session():  # type: ignore[no-untyped-def]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from yak.spark import YakDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("yak-orders-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.dataSource.register(YakDataSource)
    return spark


def build_stats(spark, bootstrap: str, topic: str, max_per_trigger: int):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    schema = (
        "order_id string, customer_id string, product_id string, quantity int, "
        "unit_price double, ts long"
    )
    products = spark.createDataFrame(PRODUCTS, "product_id string, category string, price double")
    orders = (
        spark.readStream.format("yak")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_per_trigger))
        .load()
        .select(F.from_json(F.col("value").cast("string"), schema).alias("o"))
        .select("o.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", WATERMARK)
    )
    return (
        orders.join(F.broadcast(products.select("product_id", "category")), "product_id")
        .groupBy(F.window("event_time", WINDOW).alias("w"), "category")
        .agg(
            F.count("*").alias("orders"),
            F.round(F.sum(F.col("quantity") * F.col("unit_price")), 2).alias("revenue"),
        )
        .select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "category",
            "orders",
            "revenue",
        )
    )


def run(
    spark,  # type: ignore[no-untyped-def]
    bootstrap: str,
    source: str,
    sink: str,
    out_dir: Path,
    max_per_trigger: int = 500,
) -> None:
    """Run the job until all orders now in `source` are processed (Trigger.AvailableNow)."""
    from pyspark.sql import functions as F

    stats = build_stats(spark, bootstrap, source, max_per_trigger)
    to_topic = (
        stats.select(
            F.col("category").alias("key"),
            F.to_json(
                F.struct("window_start", "window_end", "category", "orders", "revenue")
            ).alias("value"),
        )
        .writeStream.format("yak")
        .outputMode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(out_dir / "checkpoints" / "topic"))
        .trigger(availableNow=True)
        .start()
    )
    to_parquet = (
        stats.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out_dir / "parquet"))
        .option("checkpointLocation", str(out_dir / "checkpoints" / "parquet"))
        .trigger(availableNow=True)
        .start()
    )
    for q in (to_topic, to_parquet):
        q.awaitTermination()
        if q.exception() is not None:
            raise RuntimeError(f"query failed: {q.exception()}")


def expected_windows(orders: list[dict]) -> dict[tuple[int, str], tuple[int, float]]:
    """What the job must output for each (window start ms, category): a plain-Python oracle."""
    cat = {p: c for p, c, _ in PRODUCTS}
    out: dict[tuple[int, str], list] = {}
    for o in orders:
        start = o["ts"] - o["ts"] % 10_000
        acc = out.setdefault((start, cat[o["product_id"]]), [0, 0.0])
        acc[0] += 1
        acc[1] += o["quantity"] * o["unit_price"]
    return {k: (n, round(r, 2)) for k, (n, r) in out.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("command", choices=["generate", "run", "demo"])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--source", default="orders")
    ap.add_argument("--sink", default="order-stats")
    ap.add_argument("--count", type=int, default=20_000)
    ap.add_argument("--out", default="./pipeline-out")
    args = ap.parse_args(argv)
    if args.command in ("generate", "demo"):
        generate(args.bootstrap, args.source, args.count)
        print(f"produced {args.count} orders to {args.source}")
    if args.command in ("run", "demo"):
        spark = spark_session()
        run(spark, args.bootstrap, args.source, args.sink, Path(args.out))
        rows = spark.read.parquet(str(Path(args.out) / "parquet")).orderBy(
            "window_start", "category"
        )
        rows.show(20, truncate=False)
        print(f"{rows.count()} closed windows in {args.out}/parquet and topic {args.sink}")
        spark.stop()


if __name__ == "__main__":
    main()
