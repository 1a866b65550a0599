"""Topic compaction in the broker: running it, its status, its `__compaction` subscription, and the
compacted reads of consumers and readers that ask for them (`read_compacted`).

Owns: one `TopicCompaction` per loaded topic (the horizon, the status Pulsar's admin API reports, the
task of a compaction in progress) and whether a topic is past its compaction threshold. Must not touch: which messages survive (broker/compaction.py, pure), SQL
(storage/compaction.py), dispatch (the subscription hands what `read_entries` gives to its dispatcher
as it would a ledger read).

As in Pulsar (TwoPhaseCompactor, CompactedTopicUtils):
- a compaction reads up to the last entry stored when it starts (the horizon); its input is the
  previous compacted view and the entries after the previous horizon, so what retention deleted since
  is still compacted in, and the `__compaction` cursor, a durable subscription created at the earliest
  position, is acknowledged up to the horizon once the new view is durable: until then it holds the
  entries it has not compacted against retention;
- a compacted read at or before the horizon reads the view from the cursor's read position and moves
  the read position past what it returned; past the view's end it moves it past the horizon, and the
  ledger is read as for anyone else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.compaction import compact_entry, compacted_out_indexes, latest_for_keys
from magnetar.positions import Position
from magnetar.storage.compaction import read_compacted, read_horizon, read_last_compacted, replace_compacted
from magnetar.storage.sqlite_engine import Entry, new_entry

if TYPE_CHECKING:
    from magnetar.broker.topic_context import TopicContext
    from magnetar.broker.topic_name import TopicName
    from magnetar.storage import ManagedCursor, ManagedLedger


class _CompactionSubscription(Protocol):
    @property
    def cursor(self) -> ManagedCursor: ...

    def skip_to(self, position: Position) -> None: ...


class CompactedTopic(Protocol):
    """What compaction reaches of its topic (topic.PersistentTopic, which names this module's class, not
    the other way round)."""

    @property
    def name(self) -> TopicName: ...

    @property
    def context(self) -> TopicContext: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def subscriptions(self) -> Mapping[str, _CompactionSubscription]: ...

    async def subscribe(
        self, name: str, durable: bool, initial_position: str, start_message_id: Position | None
    ) -> _CompactionSubscription: ...


__all__ = [
    "COMPACTION_SUBSCRIPTION",
    "CompactionAlreadyRunning",
    "CompactedTopic",
    "TopicCompaction",
]

log = logging.getLogger(__name__)

# Pulsar's Compactor.COMPACTION_SUBSCRIPTION.
COMPACTION_SUBSCRIPTION = "__compaction"
# A compaction reads the topic this many entries at a time, twice (phase one, phase two): it bounds the
# payload bytes held at once besides the output, and the time a worker thread holds the GIL per step.
COMPACTION_READ_ENTRIES_MAX = 1000
# The statuses of Pulsar's LongRunningProcessStatus.
NOT_RUN, RUNNING, SUCCESS, ERROR = "NOT_RUN", "RUNNING", "SUCCESS", "ERROR"


class CompactionAlreadyRunning(Exception):
    """A compaction was asked for while one runs (Pulsar's AlreadyRunningException, 409 on the admin API)."""


class TopicCompaction:
    """Invariants:
    - at most one compaction task runs per topic;
    - `horizon` is the stored view's horizon once `_horizon_known` (the view and the horizon are
      replaced together, durably, before `horizon` moves).
    """

    def __init__(self, topic: CompactedTopic) -> None:
        self.topic = topic
        self.horizon: Position | None = None
        self._horizon_known = False
        self.status = NOT_RUN
        self.last_error = ""
        self._task: asyncio.Task[None] | None = None

    @property
    def _factory(self) -> Any:
        return self.topic.ledger.factory

    async def load_horizon(self) -> Position | None:
        if not self._horizon_known:
            stored = await read_horizon(self._factory, self.topic.ledger.topic_id)
            if not self._horizon_known:  # a compaction that finished meanwhile knows better
                self.horizon = stored
                self._horizon_known = True
        return self.horizon

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def trigger(self) -> None:
        """Start a compaction (PersistentTopic.triggerCompaction); raises CompactionAlreadyRunning."""
        if self.running:
            raise CompactionAlreadyRunning("Compaction already in progress")
        self.status = RUNNING
        self.last_error = ""
        self._task = asyncio.get_running_loop().create_task(self._run())

    def check(self, threshold: int) -> None:
        """Compact if the compaction has not read more than `threshold` bytes (PersistentTopic.checkCompaction):
        the backlog of the `__compaction` subscription, or the topic's size before any compaction. 0 is off."""
        topic = self.topic
        if threshold <= 0 or self.running:
            return
        subscription = topic.subscriptions.get(COMPACTION_SUBSCRIPTION)
        if subscription is None:
            backlog = topic.ledger.total_size
        else:
            backlog = _backlog_size(topic, subscription.cursor.mark_delete_position)
        if backlog > threshold:
            log.info("[%s] Compaction backlog of %d bytes passed the threshold of %d", topic.name, backlog, threshold)
            self.trigger()

    async def wait(self) -> None:
        """Until the compaction in progress, if any, has finished."""
        if self._task is not None:
            await asyncio.shield(self._task)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        try:
            await self._compact()
        except asyncio.CancelledError:
            self.status = ERROR
            self.last_error = "Compaction cancelled"
            raise
        except Exception as error:
            log.exception("[%s] Compaction failed", self.topic.name)
            self.status = ERROR
            self.last_error = str(error) or type(error).__name__
        else:
            self.status = SUCCESS

    async def _compact(self) -> None:
        topic, ledger = self.topic, self.topic.ledger
        subscription = topic.subscriptions.get(COMPACTION_SUBSCRIPTION)
        if subscription is None:
            subscription = await topic.subscribe(COMPACTION_SUBSCRIPTION, True, "earliest", None)
        previous = await self.load_horizon()
        horizon = ledger.last_confirmed_entry
        if horizon[1] < 0 or (previous is not None and horizon <= previous):
            log.info("[%s] Nothing to compact after %s", topic.name, previous)
            return
        retain_null_key = bool(topic.context.config["topicCompactionRetainNullKey"])
        log.info("[%s] Commencing phase one of compaction, reading to %s", topic.name, horizon)
        latest: dict[str, tuple[Position, int]] = {}
        async for entries in self._input(previous, horizon):
            await asyncio.to_thread(latest_for_keys, [(e.position, e.data) for e in entries], latest)
        log.info("[%s] Commencing phase two of compaction, compacting %d keys", topic.name, len(latest))
        view: list[Entry] = []
        async for entries in self._input(previous, horizon):
            view += await asyncio.to_thread(_phase_two, entries, latest, retain_null_key)
        await replace_compacted(self._factory, ledger.topic_id, horizon, view, topic.context.clock.time_ms())
        self.horizon = horizon
        self._horizon_known = True
        subscription.skip_to(horizon)
        await subscription.cursor.flush()
        log.info("[%s] Compaction done: %d entries kept up to %s", topic.name, len(view), horizon)

    async def _input(self, previous: Position | None, horizon: Position) -> AsyncIterator[list[Entry]]:
        """What a compaction reads, a read at a time: the previous view, then the ledger after it."""
        ledger, topic_id = self.topic.ledger, self.topic.ledger.topic_id
        if previous is not None:
            start: tuple[int, int] = (-1, -1)
            while True:
                entries = await read_compacted(self._factory, topic_id, start, COMPACTION_READ_ENTRIES_MAX)
                if not entries:
                    break
                yield entries
                start = (entries[-1].position[0], entries[-1].position[1] + 1)
        position = ledger.next_valid_position(previous) if previous is not None else ledger.first_position()
        while position <= horizon:
            entries = await ledger.read_entries(position, COMPACTION_READ_ENTRIES_MAX)
            entries = [entry for entry in entries if entry.position <= horizon]
            if not entries:
                break
            yield entries
            position = ledger.next_valid_position(entries[-1].position)

    # ------------------------------------------------------------------------ compacted reads

    async def read_entries(self, cursor: ManagedCursor, count: int) -> list[Entry] | None:
        """A compacted read from the cursor's read position (CompactedTopicUtils.asyncReadCompactedEntries):
        the view's entries the cursor has not acknowledged (maybe none: read again), or None when the
        ledger is to be read instead (past the horizon).

        A cursor whose mark-delete position is before a ledger's first entry, its read position right
        after it, reads the view from its start, as Pulsar's reader from the earliest position does:
        retention may have deleted the ledgers the view's first entries came from, so their positions
        are before the cursor's, and its read position then goes through them (the view's positions),
        never through the ledger's, until the view is read."""
        horizon = await self.load_horizon()
        if horizon is None or cursor.read_position > horizon:
            return None
        ledger = self.topic.ledger
        mark_delete = cursor.mark_delete_position
        before_ledgers = mark_delete[1] < 0
        if before_ledgers and cursor.read_position == ledger.next_valid_position(mark_delete):
            start: tuple[int, int] = (-1, -1)
        else:
            start = cursor.read_position
        entries = await read_compacted(self._factory, ledger.topic_id, start, count)
        if not entries:
            cursor.seek(ledger.next_valid_position(horizon))
            return None
        last = entries[-1].position
        following = Position(last[0], last[1] + 1)
        cursor.read_position = following if following <= horizon else ledger.next_valid_position(horizon)
        deleted = cursor.individually_deleted
        return [
            entry
            for entry in entries
            if entry.position not in deleted and (before_ledgers or entry.position > mark_delete)
        ]

    def hidden_batch_indexes(
        self, data: bytes, acked: tuple[int, int] | None, batch_size: int
    ) -> tuple[int, int] | None:
        """(batch size, mask) of a batch entry's messages a compacted reader must not receive: those
        acknowledged and those compacted out. MESSAGE's ack set leaves them out: the C++ client (and the
        Python one on it) skips a slot by the ack set, not by `compacted_out`."""
        indexes = compacted_out_indexes(data)
        if not indexes:
            return acked
        size, mask = acked if acked is not None else (batch_size, 0)
        for index in indexes:
            mask |= 1 << index
        return size, mask

    async def last_message_id(self, last: Position) -> tuple[Position, int] | None:
        """GET_LAST_MESSAGE_ID for a compacted reader when everything up to `last` (the newest entry a
        consumer can receive, or before the first stored one) is compacted: the view's last message
        (entry, batch index), or before the first entry when the view is empty. None when entries after
        the horizon are to be read."""
        horizon = await self.load_horizon()
        if horizon is None or (last[1] >= 0 and last > horizon):
            return None
        entry = await read_last_compacted(self._factory, self.topic.ledger.topic_id)
        if entry is None:
            ledger = self.topic.ledger
            return ledger.previous_position(ledger.first_position()), -1
        return entry.position, _last_kept_index(entry)


def _phase_two(entries: list[Entry], latest: dict[str, tuple[Position, int]], retain_null_key: bool) -> list[Entry]:
    kept = []
    for entry in entries:
        data = compact_entry(entry.position, entry.data, latest, retain_null_key)
        if data is not None:
            kept.append(new_entry((entry.position, data, *entry[2:])))
    return kept


def _last_kept_index(entry: Entry) -> int:
    """The batch index of the last message of a compacted entry that was not compacted out; -1 for a
    single message."""
    if entry.message_count <= 1:
        return -1
    compacted_out = set(compacted_out_indexes(entry.data))
    for index in range(entry.message_count - 1, -1, -1):
        if index not in compacted_out:
            return index
    return entry.message_count - 1


def _backlog_size(topic: CompactedTopic, mark_delete: Position) -> int:
    """Pulsar's estimate of the bytes after a mark-delete position: whole ledgers after it and its own
    ledger's share."""
    size = 0
    for info in topic.ledger.ledgers:
        if info.ledger_id > mark_delete[0]:
            size += info.size
        elif info.ledger_id == mark_delete[0] and info.entries:
            after = info.entries - (mark_delete[1] + 1)
            if after > 0:
                size += info.size * after // info.entries
    return size
