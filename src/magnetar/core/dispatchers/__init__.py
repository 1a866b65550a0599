"""Dispatchers: one state machine per subscription, events in, decisions out.

`new_dispatcher` picks the dispatcher for a subscription type, as Pulsar's PersistentSubscription does.
"""

from __future__ import annotations

from magnetar.core.dispatchers.key_shared import KeySharedDispatcher
from magnetar.core.dispatchers.shared import SharedDispatcher
from magnetar.core.dispatchers.single_active import SingleActiveConsumerDispatcher
from magnetar.core.settings import DispatcherSettings
from magnetar.positions import EARLIEST, Position

__all__ = ["KeySharedDispatcher", "SharedDispatcher", "SingleActiveConsumerDispatcher", "new_dispatcher"]

Dispatcher = KeySharedDispatcher | SharedDispatcher | SingleActiveConsumerDispatcher


def new_dispatcher(
    subscription_type: str,
    settings: DispatcherSettings | None = None,
    mark_delete_position: Position = EARLIEST,
    topic_name: str = "",
    partition_index: int = -1,
) -> Dispatcher:
    if subscription_type == "Key_Shared":
        return KeySharedDispatcher(settings, mark_delete_position)
    if subscription_type == "Shared":
        return SharedDispatcher(settings, mark_delete_position)
    if subscription_type in ("Exclusive", "Failover"):
        return SingleActiveConsumerDispatcher(
            subscription_type, settings, mark_delete_position, topic_name, partition_index
        )
    raise ValueError(f"unknown subscription type {subscription_type!r}")
