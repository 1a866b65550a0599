"""Errors the core raises when a request cannot be honoured.

Each carries the Pulsar `ServerError` name the broker answers with, so the shell maps it to the wire
without a table of its own.
"""

from __future__ import annotations

__all__ = ["CoreError", "ConsumerAssignError", "ConsumerBusyError", "NotAllowedError"]


class CoreError(Exception):
    """A request the core refuses; `server_error` is Pulsar's ServerError name for it."""

    server_error = "UnknownError"


class ConsumerAssignError(CoreError):
    """A Key_Shared consumer cannot be given hash ranges (STICKY range conflict, no range left to split)."""

    server_error = "ConsumerAssignError"


class ConsumerBusyError(CoreError):
    """An Exclusive subscription already has a consumer."""

    server_error = "ConsumerBusy"


class NotAllowedError(CoreError):
    """The request conflicts with the subscription's settings (e.g. another Key_Shared policy)."""

    server_error = "NotAllowedError"
