"""The broker's log setting and the DEBUG lines of a Key_Shared subscription, in process on real storage.

What the log of a whole session looks like (connections, producers, consumers at INFO) is checked
against a broker process in tests/cli/test_cli_standalone_logging.py.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from magnetar.broker.config import ConfigError, load_config
from magnetar.broker.consumer import ServerConsumer
from magnetar.broker.logs import consumer_changed, parse_log_level, remote_address
from magnetar.broker.root import open_broker
from magnetar.broker.topic_name import TopicName
from magnetar.core.events import KeySharedMeta
from magnetar.core.sticky_key import key_hash

KEYS = [f"customer-{i}".encode() for i in range(40)]
# Dispatch happens on the loop after a flow; the test waits for it in steps, never on a clock.
DISPATCH_STEPS_MAX = 500


@pytest.mark.parametrize(
    ("text", "level"), [("debug", "debug"), ("INFO", "info"), (" Warning ", "warning"), ("error", "error")]
)
def test_log_levels_are_read_in_any_case(text: str, level: str) -> None:
    assert parse_log_level(text) == level


def test_an_unknown_log_level_names_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match="debug, info, warning, error"):
        parse_log_level("verbose")


def test_log_level_setting_defaults_to_info_and_is_read_from_the_file(tmp_path: Path) -> None:
    assert load_config()["logLevel"] == "info"
    conf = tmp_path / "broker.conf"
    conf.write_text("logLevel=DEBUG\n")
    assert load_config(conf)["logLevel"] == "debug"
    assert load_config(conf, [("logLevel", "warning")])["logLevel"] == "warning"
    conf.write_text("logLevel=loud\n")
    with pytest.raises(ConfigError, match="logLevel: 'loud' is not a log level"):
        load_config(conf)


def test_remote_address_is_printed_as_pulsar_does() -> None:
    assert remote_address(("127.0.0.1", 51234)) == "/127.0.0.1:51234"
    assert remote_address(("::1", 6650, 0, 0)) == "/::1:6650"
    assert remote_address(None) == "None"


class _Connection:
    """What a ServerConsumer needs of its connection: frames are counted, not sent."""

    def __init__(self, port: int) -> None:
        self.remote_address = f"/127.0.0.1:{port}"
        self.closed = False
        self.frames = 0

    def write(self, _data: bytes) -> None:
        self.frames += 1

    def deliver(self, data: bytes) -> None:
        self.write(data)

    def forget_consumer(self, _consumer_id: int) -> None:
        pass


def test_key_shared_debug_lines_follow_ranges_and_draining(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A consumer holding unacked messages of every key loses ranges to a joining one: the ranges and
    the hashes that start draining are logged; acking them ends the draining, and that is logged too."""

    async def scenario() -> None:
        broker = await open_broker(load_config(), tmp_path / "data")
        try:
            topic = await broker.context.registry.get_topic(TopicName.parse("logged"))
            subscription = await topic.subscribe("sub", True, "earliest", None)
            hashes = [key_hash(key) for key in KEYS]
            count = len(KEYS)
            await topic.ledger.append_many(
                [b"m"] * count, hashes, [1] * count, [0] * count, ["p"] * count, list(range(count))
            )

            first_connection = _Connection(1111)
            first = ServerConsumer(first_connection, subscription, 0, "first", -1)
            first.consumer_id = subscription.add_consumer(first, "Key_Shared", 0, KeySharedMeta())
            consumer_changed(subscription, first, "joined")
            first.flow(1000)
            for _ in range(DISPATCH_STEPS_MAX):
                if subscription.dispatcher.consumers[first.consumer_id].unacked_messages == len(KEYS):
                    break
                await asyncio.sleep(0.001)
            assert subscription.dispatcher.consumers[first.consumer_id].unacked_messages == len(KEYS)

            second = ServerConsumer(_Connection(2222), subscription, 0, "second", -1)
            second.consumer_id = subscription.add_consumer(second, "Key_Shared", 0, KeySharedMeta())
            consumer_changed(subscription, second, "joined")
            assert len(subscription.dispatcher.draining) > 0, "some of first's keys moved to second"

            pending = subscription.dispatcher.consumers[first.consumer_id].pending_acks
            positions = [position for position, _ in pending.items()]
            first.acknowledge(positions, [])
            assert len(subscription.dispatcher.draining) == 0
            second.detach()
            first.detach()
        finally:
            await broker.stop()

    with caplog.at_level(logging.DEBUG, logger="magnetar"):
        asyncio.run(scenario())
    lines = [record.getMessage() for record in caplog.records if record.levelno == logging.DEBUG]
    where = "on topic persistent://public/default/logged / sub"
    assert any(
        line.startswith(f"[/127.0.0.1:1111] Key_Shared ranges {where} after consumer first (consumerId=0) joined: ")
        and "first (/127.0.0.1:1111, consumerId=0): 1 range, 65535 hashes [1-65535]" in line
        for line in lines
    ), lines
    joined = [line for line in lines if "after consumer second (consumerId=0) joined" in line]
    assert len(joined) == 1 and "first (/127.0.0.1:1111" in joined[0] and "second (/127.0.0.1:2222" in joined[0]
    started = [line for line in lines if "Draining started" in line]
    ended = [line for line in lines if "Draining ended" in line]
    assert started and all("of consumer first (/127.0.0.1:1111, consumerId=0)" in line for line in started)
    assert ended and all("of consumer first" in line for line in ended)
    assert lines.index(started[0]) < lines.index(ended[0])
    assert any("after consumer second (consumerId=0) left: first" in line for line in lines)


def test_no_key_shared_details_are_gathered_at_info(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """At INFO the subscription remembers no draining hashes, so the dispatch path checks nothing more."""

    async def scenario() -> None:
        broker = await open_broker(load_config(), tmp_path / "data")
        try:
            topic = await broker.context.registry.get_topic(TopicName.parse("quiet"))
            subscription = await topic.subscribe("sub", True, "earliest", None)
            consumer = ServerConsumer(_Connection(1), subscription, 0, "only", -1)
            consumer.consumer_id = subscription.add_consumer(consumer, "Key_Shared", 0, KeySharedMeta())
            consumer_changed(subscription, consumer, "joined")
            assert subscription.draining_logged == {}
            consumer.detach()
        finally:
            await broker.stop()

    with caplog.at_level(logging.INFO, logger="magnetar"):
        asyncio.run(scenario())
    assert not [record for record in caplog.records if record.levelno < logging.INFO]
    assert any(
        "Closed consumer on topic persistent://public/default/quiet / sub" in r.getMessage() for r in caplog.records
    )
