"""Topic -> Spark transformation -> topic, exactly once, against a running `magnetar standalone`.

    magnetar standalone                          # or: make run   (in another terminal)
    .venv/bin/python examples/spark_topic_to_topic.py --enable-deduplication

Publishes 1,000 orders (JSON, keyed by customer) to `shop-orders`, then runs a Structured Streaming
query that parses them, keeps the large ones, adds a VAT-inclusive amount and writes the result, still
keyed by customer, to `large-orders`. The transformation is narrow (no shuffle), so each customer's
orders keep their order. The sink is exactly once only through broker deduplication and refuses a
target without it: --enable-deduplication creates `large-orders` and turns deduplication on for that
topic alone (its namespace's other topics keep their policy); without the flag the script checks and,
if it is off, stops before publishing anything and says how to turn it on. Run it twice: the second
run reads only the new orders (the checkpoint), and a re-run of an interrupted micro-batch would store
nothing twice.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request

import pulsar

SOURCE, TARGET = "shop-orders", "large-orders"


def _admin(admin_url: str, method: str, path: str, body: bytes | None = None) -> bytes:
    request = urllib.request.Request(
        f"{admin_url}/admin/v2/persistent/public/default/{TARGET}{path}",
        body,
        {"Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


def deduplication_ready(admin_url: str, enable: bool) -> bool:
    """Whether the target has deduplication in force, after turning it on for the target alone if asked."""
    try:
        in_force = _admin(admin_url, "GET", "/deduplicationEnabled?applied=true") == b"true"
    except urllib.error.HTTPError as failure:
        if failure.code != 404:
            raise
        in_force = False  # the target does not exist yet
    if in_force or not enable:
        return in_force
    try:
        _admin(admin_url, "PUT", "")
    except urllib.error.HTTPError as failure:
        if failure.code != 409:  # 409: it exists already
            raise
    _admin(admin_url, "POST", "/deduplicationEnabled", b"true")
    print(f"turned deduplication on for persistent://public/default/{TARGET} (--enable-deduplication)")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--admin-url", default="http://127.0.0.1:8080")
    parser.add_argument("--checkpoint", default="data/spark-examples/topic-to-topic")
    parser.add_argument(
        "--enable-deduplication",
        action="store_true",
        help=f"create {TARGET} and turn deduplication on for it (that topic only), which the sink needs",
    )
    args = parser.parse_args()

    if not deduplication_ready(args.admin_url, args.enable_deduplication):
        sys.exit(
            f"deduplication is off for persistent://public/default/{TARGET}, and the sink is exactly once only "
            f"through it: run again with --enable-deduplication (turns it on for {TARGET} alone), or: "
            f"magnetar admin topics create {TARGET}; magnetar admin topics set-deduplication {TARGET} --enable"
        )

    client = pulsar.Client(args.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(
        SOURCE, batching_enabled=True, batching_type=pulsar.BatchingType.KeyBased, block_if_queue_full=True
    )
    for number in range(1000):
        customer = f"customer-{number % 25}"
        order = {"order": number, "customer": customer, "amount": (number * 37) % 500}
        producer.send_async(json.dumps(order).encode(), None, partition_key=customer)
    producer.flush()
    client.close()

    from pyspark.sql import functions as F

    from magnetar.spark import local_session

    spark = local_session(TARGET)

    orders = (
        spark.readStream.format("magnetar")
        .option("serviceUrl", args.service_url)
        .option("adminUrl", args.admin_url)
        .option("topic", SOURCE)
        .option("startingOffsets", "earliest")
        .option("keyHashRanges", "2")  # two Spark partitions, each customer in exactly one
        .option("subscriptionName", f"{TARGET}-pipeline")  # the backlog drains as batches commit
        .load()
    )
    fields = "order INT, customer STRING, amount INT"
    large = (
        orders.select("key", F.from_json(F.col("value").cast("string"), fields).alias("o"))
        .where("o.amount >= 400")
        .select(
            "key",
            F.to_json(
                F.struct("o.order", "o.customer", "o.amount", F.round(F.col("o.amount") * 1.2, 2).alias("with_vat"))
            ).alias("value"),
        )
    )
    query = (
        large.writeStream.format("magnetar")
        .option("serviceUrl", args.service_url)
        .option("adminUrl", args.admin_url)
        .option("topic", TARGET)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    written = sum(p["numInputRows"] for p in query.recentProgress)
    print(f"read {written} orders in {len(query.recentProgress)} micro-batches")

    copied = (
        spark.read.format("magnetar")
        .option("serviceUrl", args.service_url)
        .option("adminUrl", args.admin_url)
        .option("topic", TARGET)
        .load()
    )
    print(f"{TARGET} holds {copied.count()} orders; the first three:")
    for row in copied.orderBy("ledgerId", "entryId", "batchIndex").limit(3).collect():
        print(f"  {row.key}: {row.value.decode()}")
    spark.stop()


if __name__ == "__main__":
    main()
