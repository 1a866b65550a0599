"""Workload threads for the kill -9 tests: keyed publishers that record acknowledged sends, acking receivers."""

from __future__ import annotations

import threading
import time

import pulsar

KEYS_PER_PRODUCER = 8


class Publisher(threading.Thread):
    """Publishes `<tag>:<seq>` with key `<tag><seq % KEYS>`; remembers the sequence numbers acknowledged Ok."""

    def __init__(self, producer: pulsar.Producer, tag: str) -> None:
        super().__init__(daemon=True, name=f"publisher-{tag}")
        self.producer = producer
        self.tag = tag
        self.next_seq = 0
        self.acked: set[int] = set()
        self.failed: list[tuple[int, str]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def _callback(self, seq: int):
        def done(result: pulsar.Result, _message_id: pulsar.MessageId) -> None:
            with self.lock:
                if result == pulsar.Result.Ok:
                    self.acked.add(seq)
                else:
                    self.failed.append((seq, str(result)))

        return done

    def run(self) -> None:
        while not self.stop.is_set():
            seq = self.next_seq
            try:
                self.producer.send_async(
                    f"{self.tag}:{seq}".encode(),
                    self._callback(seq),
                    partition_key=f"{self.tag}{seq % KEYS_PER_PRODUCER}",
                )
            except pulsar.PulsarException as error:  # e.g. the pending queue is full while disconnected
                with self.lock:
                    self.failed.append((seq, repr(error)))
                time.sleep(0.05)
                continue
            self.next_seq += 1
            if seq % 20 == 19:
                time.sleep(0.01)  # a steady stream rather than a flood


class Receiver(threading.Thread):
    """Receives and acknowledges; records every delivery with a global arrival number."""

    def __init__(self, consumer: pulsar.Consumer, log: list, log_lock: threading.Lock) -> None:
        super().__init__(daemon=True, name=f"receiver-{consumer.consumer_name()}")
        self.consumer = consumer
        self.log = log
        self.log_lock = log_lock
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                message = self.consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            except pulsar.PulsarException:
                time.sleep(0.05)
                continue
            tag, seq = message.data().decode().split(":")
            with self.log_lock:
                self.log.append((message.partition_key(), tag, int(seq), self.consumer.consumer_name()))
            try:
                self.consumer.acknowledge(message)
            except pulsar.PulsarException:
                pass  # lost with the connection: the message comes again
