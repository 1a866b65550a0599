"""Pulsar's `internalStats` of a persistent topic, built from a managed ledger and its cursors.

Owns: the field names and their rendering (`"L:E"` positions, `[(a..b]]` ranges, ISO timestamps), as
`GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/internalStats` returns them. Must not touch:
state; it only reads. Subscription-level fields that only the broker knows
(`subscriptionHavePendingRead`, `subscriptionHavePendingReplayRead`) are added by the broker.
"""

from __future__ import annotations

import datetime
from typing import Any

from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.managed_ledger import ManagedLedger

__all__ = ["managed_ledger_internal_stats", "cursor_internal_stats"]


def _timestamp(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def managed_ledger_internal_stats(ledger: ManagedLedger) -> dict[str, Any]:
    current = ledger.current_ledger
    return {
        "entriesAddedCounter": ledger.entries_added_counter,
        "numberOfEntries": ledger.number_of_entries,
        "totalSize": ledger.total_size,
        "currentLedgerEntries": current.entries,
        "currentLedgerSize": current.size,
        "lastLedgerCreatedTimestamp": _timestamp(ledger.last_ledger_created_timestamp_ms),
        "waitingCursorsCount": ledger.waiting_cursors_count,
        "pendingAddEntriesCount": ledger.pending_add_entries_count,
        "lastConfirmedEntry": str(ledger.last_confirmed_entry),
        "state": ledger.state,
        "ledgers": [
            {
                "ledgerId": info.ledger_id,
                "entries": info.entries,
                "size": info.size,
                "offloaded": False,
                "underReplicated": False,
            }
            for info in ledger.ledgers
        ],
        "cursors": {name: cursor_internal_stats(cursor) for name, cursor in ledger.cursors.items()},
    }


def cursor_internal_stats(cursor: ManagedCursor) -> dict[str, Any]:
    return {
        "markDeletePosition": str(cursor.mark_delete_position),
        "readPosition": str(cursor.read_position),
        "waitingReadOp": False,
        "pendingReadOps": cursor.pending_read_ops,
        "messagesConsumedCounter": cursor.messages_consumed_counter,
        # Cursors live in the database's cursors table, not in a ledger of their own.
        "cursorLedger": -1,
        "cursorLedgerLastEntry": -1,
        "individuallyDeletedMessages": cursor.individually_deleted.to_string(".."),
        "lastLedgerSwitchTimestamp": _timestamp(cursor.ledger.last_ledger_created_timestamp_ms),
        "state": "Closed" if cursor.closed else ("Open" if cursor.durable else "NoLedger"),
        "active": not cursor.closed,
        "numberOfEntriesSinceFirstNotAckedMessage": cursor.number_of_entries_since_first_not_acked(),
        "totalNonContiguousDeletedMessagesRange": cursor.individually_deleted.range_count(),
        "properties": dict(cursor.properties),
    }
