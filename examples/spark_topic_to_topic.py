"""Topic -> Spark transformation -> topic, exactly once, against a running `magnetar standalone`.

    magnetar standalone                          # or: make run   (in another terminal)
    .venv/bin/python examples/spark_topic_to_topic.py

Publishes 1,000 orders (JSON, keyed by customer) to `orders`, then runs a Structured Streaming query
that parses them, keeps the large ones, adds a VAT-inclusive amount and writes the result, still keyed
by customer, to `orders-large`. The transformation is narrow (no shuffle), so each customer's orders
keep their order. The sink is exactly once through broker deduplication, which this script turns on
for the namespace first. Run it twice: the second run reads only the new orders (the checkpoint), and
a re-run of an interrupted micro-batch would store nothing twice.
"""

from __future__ import annotations

import argparse
import json
import urllib.request

import pulsar


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--admin-url", default="http://127.0.0.1:8080")
    parser.add_argument("--checkpoint", default="data/spark-examples/topic-to-topic")
    args = parser.parse_args()

    # The sink refuses a target without deduplication: turn it on for public/default.
    request = urllib.request.Request(
        f"{args.admin_url}/admin/v2/namespaces/public/default/deduplication", b"true",
        {"Content-Type": "application/json"}, method="POST",
    )
    urllib.request.urlopen(request, timeout=10).close()

    client = pulsar.Client(args.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(
        "orders", batching_enabled=True, batching_type=pulsar.BatchingType.KeyBased, block_if_queue_full=True
    )
    for number in range(1000):
        customer = f"customer-{number % 25}"
        order = {"order": number, "customer": customer, "amount": (number * 37) % 500}
        producer.send_async(json.dumps(order).encode(), None, partition_key=customer)
    producer.flush()
    client.close()

    from pyspark.sql import functions as F

    from magnetar.spark import local_session

    spark = local_session("orders-large")

    orders = (
        spark.readStream.format("magnetar")
        .option("serviceUrl", args.service_url).option("adminUrl", args.admin_url)
        .option("topic", "orders").option("startingOffsets", "earliest")
        .option("keyHashRanges", "2")  # two Spark partitions, each customer in exactly one
        .option("subscriptionName", "orders-large-pipeline")  # the backlog drains as batches commit
        .load()
    )
    fields = "order INT, customer STRING, amount INT"
    large = (
        orders.select("key", F.from_json(F.col("value").cast("string"), fields).alias("o"))
        .where("o.amount >= 400")
        .select(
            "key",
            F.to_json(F.struct("o.order", "o.customer", "o.amount", F.round(F.col("o.amount") * 1.2, 2).alias("with_vat"))).alias("value"),
        )
    )
    query = (
        large.writeStream.format("magnetar")
        .option("serviceUrl", args.service_url).option("adminUrl", args.admin_url).option("topic", "orders-large")
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    written = sum(p["numInputRows"] for p in query.recentProgress)
    print(f"read {written} orders in {len(query.recentProgress)} micro-batches")

    copied = (
        spark.read.format("magnetar").option("serviceUrl", args.service_url).option("adminUrl", args.admin_url)
        .option("topic", "orders-large").load()
    )
    print(f"orders-large holds {copied.count()} orders; the first three:")
    for row in copied.orderBy("ledgerId", "entryId", "batchIndex").limit(3).collect():
        print(f"  {row.key}: {row.value.decode()}")
    spark.stop()


if __name__ == "__main__":
    main()
