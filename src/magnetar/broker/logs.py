"""The broker's log: its levels, how the `magnetar` loggers are set up, and the DEBUG lines that describe a
Key_Shared subscription after a change.

Owns: the level names (`logLevel`, `--log-level`), the one log format, a client's address as Pulsar prints
it (`/127.0.0.1:51234`, the prefix of every line about one connection), and the DEBUG describers that
read a dispatcher's public state (ranges by consumer, draining hashes) after it handled an event.
Must not touch: any state. The core never logs (it is pure); the shell logs what the core decided.

Cost. INFO lines are one per lifecycle event (connection, producer, consumer, subscription, topic),
never per message. The describers return at once unless DEBUG is enabled; the only check left on the
dispatch path is `PersistentSubscription.draining_logged`, which stays empty unless DEBUG was enabled
when hashes started draining.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = [
    "LOG_FORMAT",
    "LOG_LEVELS",
    "configure_logging",
    "consumer_changed",
    "draining_ended",
    "parse_log_level",
    "remote_address",
]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
# A DEBUG line names at most this many ranges per consumer and this many hashes per consumer: with
# consistent hashing a consumer owns ~100 ranges, and 10,000 hashes may start draining at once
# (PIP-379's example). The counts are always given in full.
RANGES_SHOWN_MAX = 16
HASHES_SHOWN_MAX = 16


class _Connected(Protocol):
    @property
    def remote_address(self) -> str: ...


class _Consumer(Protocol):
    """What the DEBUG lines read of a consumer (consumer.ServerConsumer)."""

    @property
    def name(self) -> str: ...

    @property
    def client_consumer_id(self) -> int: ...

    @property
    def connection(self) -> _Connected: ...


class _Named(Protocol):
    @property
    def name(self) -> Any: ...


class _Subscription(Protocol):
    """What the DEBUG lines read of a subscription (subscription.PersistentSubscription); they keep the
    hashes they reported draining in `draining_logged`."""

    draining_logged: dict[int, Any]

    @property
    def name(self) -> str: ...

    @property
    def topic(self) -> _Named: ...

    @property
    def dispatcher(self) -> Any: ...

    @property
    def consumers(self) -> Mapping[int, _Consumer]: ...


# The Key_Shared lines describe a subscription: they go out under its module's name, whoever calls.
log = logging.getLogger("magnetar.broker.subscription")


def parse_log_level(text: str) -> str:
    """`text` as one of LOG_LEVELS (any case); ValueError names the accepted values."""
    level = str(text).strip().lower()
    if level not in LOG_LEVELS:
        raise ValueError(f"{text!r} is not a log level: use one of {', '.join(LOG_LEVELS)}")
    return level


def configure_logging(level: str) -> None:
    """One handler on stderr. `level` applies to magnetar's loggers; other libraries (asyncio, uvicorn)
    stay at INFO or above, so that debug shows the broker's details and not theirs."""
    number = LOG_LEVELS[parse_log_level(level)]
    logging.basicConfig(level=max(number, logging.INFO), format=LOG_FORMAT)
    logging.getLogger("magnetar").setLevel(number)


def remote_address(peer: Any) -> str:
    """A peer as Pulsar's logs and stats print it: `/host:port`."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"/{peer[0]}:{peer[1]}"
    return str(peer)


# ------------------------------------------------------------------------------ Key_Shared (DEBUG)


def consumer_changed(subscription: _Subscription, consumer: _Consumer, change: str) -> None:
    """DEBUG, after `consumer` joined or left (`change`): the subscription's hash ranges by consumer,
    and the hashes that started or stopped draining (PIP-379) with the change."""
    if not log.isEnabledFor(logging.DEBUG):
        return
    dispatcher = subscription.dispatcher
    ranges_by_consumer = getattr(dispatcher, "ranges_by_consumer", None)
    if ranges_by_consumer is not None:
        log.debug(
            "[%s] Key_Shared ranges on topic %s / %s after consumer %s (consumerId=%d) %s: %s",
            consumer.connection.remote_address,
            subscription.topic.name,
            subscription.name,
            consumer.name,
            consumer.client_consumer_id,
            change,
            _describe_ranges(subscription, ranges_by_consumer()),
        )
    before = subscription.draining_logged
    now = _draining_now(dispatcher)
    if before or now:
        _log_draining(subscription, "ended", {h: c for h, c in before.items() if now.get(h, (None,))[0] is not c})
        _log_draining(subscription, "started", {h: c for h, (c, _ref) in now.items() if before.get(h) is not c}, now)
    subscription.draining_logged = {h: c for h, (c, _ref) in now.items()}


def draining_ended(subscription: _Subscription) -> None:
    """DEBUG, after any event while logged hashes drain: those that stopped (acked, consumer gone, or
    back with their consumer). Between consumer changes hashes only stop draining, so the count says
    whether anything changed."""
    logged = subscription.draining_logged
    if not log.isEnabledFor(logging.DEBUG):
        logged.clear()
        return
    tracker = getattr(subscription.dispatcher, "draining", None)
    if tracker is not None and len(tracker) == len(logged):
        return
    draining_consumer = tracker.draining_consumer if tracker is not None else lambda _hash: None
    ended = {h: c for h, c in logged.items() if draining_consumer(h) is not c}
    for sticky_hash in ended:
        del logged[sticky_hash]
    _log_draining(subscription, "ended", ended)


def _draining_now(dispatcher: Any) -> dict[int, tuple[Any, int]]:
    """sticky hash -> (draining consumer, its unacked messages of the hash)."""
    tracker = getattr(dispatcher, "draining", None)
    if tracker is None or not len(tracker):
        return {}
    return {h: (entry.consumer, entry.ref_count) for h, entry in tracker.items()}


def _log_draining(
    subscription: _Subscription,
    what: str,
    hashes: dict[int, Any],
    refs: dict[int, tuple[Any, int]] | None = None,
) -> None:
    by_consumer: dict[Any, list[int]] = {}
    for sticky_hash, core_consumer in hashes.items():
        by_consumer.setdefault(core_consumer, []).append(sticky_hash)
    for core_consumer, sticky_hashes in by_consumer.items():
        sticky_hashes.sort()
        shown = sticky_hashes[:HASHES_SHOWN_MAX]
        if refs is not None:
            listed = ", ".join(f"{h} ({refs[h][1]} unacked)" for h in shown)
        else:
            listed = ", ".join(map(str, shown))
        if len(sticky_hashes) > len(shown):
            listed += f", and {len(sticky_hashes) - len(shown)} more"
        log.debug(
            "[%s][%s] Draining %s for %s of consumer %s: %s",
            subscription.topic.name,
            subscription.name,
            what,
            _count(len(sticky_hashes), "hash", "hashes"),
            _consumer_label(subscription, core_consumer),
            listed,
        )


def _consumer_label(subscription: _Subscription, core_consumer: Any) -> str:
    """The consumer's name, with its connection and the client's id while it is attached."""
    consumer_id = getattr(core_consumer, "consumer_id", None)
    server = subscription.consumers.get(consumer_id) if consumer_id is not None else None
    if server is None:
        return str(getattr(core_consumer, "name", core_consumer))
    return f"{server.name} ({server.connection.remote_address}, consumerId={server.client_consumer_id})"


def _describe_ranges(subscription: _Subscription, ranges_by_consumer: dict[Any, list[tuple[int, int]]]) -> str:
    parts = []
    for core_consumer, ranges in ranges_by_consumer.items():
        shown = ", ".join(f"{start}-{end}" for start, end in ranges[:RANGES_SHOWN_MAX])
        if len(ranges) > RANGES_SHOWN_MAX:
            shown += f", and {len(ranges) - RANGES_SHOWN_MAX} more"
        slots = sum(end - start + 1 for start, end in ranges)
        parts.append(
            f"{_consumer_label(subscription, core_consumer)}: {_count(len(ranges), 'range')}, "
            f"{_count(slots, 'hash', 'hashes')} [{shown}]"
        )
    return "; ".join(parts) if parts else "no consumers"


def _count(number: int, noun: str, plural: str | None = None) -> str:
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
