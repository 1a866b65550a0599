"""Topic -> Parquet files, with Spark Structured Streaming, against a running `magnetar standalone`.

    magnetar standalone                          # or: make run   (in another terminal)
    .venv/bin/python examples/spark_topic_to_parquet.py

Publishes 10,000 sensor readings to `readings`, then copies the topic into Parquet files under
data/spark-examples/readings-parquet in micro-batches of at most 20 entries (Spark's file sink is
exactly once with its checkpoint), and reads the files back: readings and average per sensor. Run it
again: the checkpoint makes it copy only what was published since.
"""

from __future__ import annotations

import argparse

import pulsar


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument("--admin-url", default="http://127.0.0.1:8080")
    parser.add_argument("--output", default="data/spark-examples/readings-parquet")
    args = parser.parse_args()

    client = pulsar.Client(args.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(
        "readings", batching_enabled=True, batching_type=pulsar.BatchingType.KeyBased, block_if_queue_full=True
    )
    for number in range(10_000):
        sensor = f"sensor-{number % 8}"
        producer.send_async(f"{20 + number % 7}.{number % 10}".encode(), None, partition_key=sensor,
                            properties={"unit": "celsius"})
    producer.flush()
    client.close()

    from pyspark.sql import functions as F

    from magnetar.spark import local_session

    spark = local_session("readings-to-parquet")

    readings = (
        spark.readStream.format("magnetar")
        .option("serviceUrl", args.service_url).option("adminUrl", args.admin_url)
        .option("topic", "readings").option("startingOffsets", "earliest")
        .option("maxEntriesPerTrigger", "20")  # bounded micro-batches
        .load()
        .select("key", F.col("value").cast("string").cast("double").alias("celsius"),
                F.col("properties")["unit"].alias("unit"), "publishTime", "messageId", "ledgerId", "entryId")
    )
    query = (
        readings.writeStream.format("parquet")
        .option("path", args.output).option("checkpointLocation", args.output + "-checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(f"copied {sum(p['numInputRows'] for p in query.recentProgress)} readings in "
          f"{len(query.recentProgress)} micro-batches to {args.output}")
    files = spark.read.parquet(args.output)
    files.groupBy("key").agg(F.count("*").alias("readings"), F.round(F.avg("celsius"), 2).alias("average")).orderBy("key").show()
    spark.stop()


if __name__ == "__main__":
    main()
