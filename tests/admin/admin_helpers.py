"""What the stats, explain and metrics tests share: polling until the broker shows something, and
message ids as the admin API writes them."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pulsar

WAIT_S = 20


def eventually(check: Callable[[], object], timeout_s: float = WAIT_S) -> object:
    """The first truthy result of `check`, polled until the deadline (then its last result)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.05)


def message_id(message: pulsar.Message) -> str:
    """`ledger:entry`, as stats and the explainers name a message."""
    mid = message.message_id()
    return f"{mid.ledger_id()}:{mid.entry_id()}"


def not_set(response: httpx.Response) -> bool:
    """A policy that was never set, as Pulsar 4.0.7 answers it: 200 and an empty body."""
    return response.status_code == 200 and response.content == b""
