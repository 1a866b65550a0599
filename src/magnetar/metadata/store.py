"""The metadata store's interface: what every part of a cluster that keeps shared state (ownership,
the broker registry, the leader, managed-ledger and cursor metadata, policies) asks of the store, as
Pulsar's `MetadataStoreExtended` (PIP-45) defines it.

Owns: the operations and their semantics, `Stat`, `GetResult`, the `multi` operations (`Check`, `Put`,
`Delete`), `Notification` and `SessionEvent`, and the errors. Must not touch: any store's engine (the
stores are memory.py, and beside it the SQLite and ZooKeeper ones), topics, consumers.

Semantics, ZooKeeper's as Pulsar exposes them:
- paths are absolute and '/'-separated, without a trailing '/': `/managed-ledgers/public/default/persistent/t`;
- a node's version counts from 0 at its creation and goes up by one with each write;
- `expected_version` None writes whatever is there; -1 requires that nothing is there (create only);
  any other value requires that version, else BadVersionError (NotFoundError when the node is gone);
- `put` creates the missing parents as empty persistent nodes, as Pulsar's ZooKeeper store does;
- an ephemeral node lives as long as the session that created it; a sequential one gets a ten-digit
  counter appended to its path (`/ledgers/idgen/ID-0000000007`), unique among its parent's children;
- `multi` applies all of its operations or none, in one step that nobody else's write interleaves: the
  `Check` in the same `multi` as a write is what keeps a broker whose ownership is gone from writing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "BadVersionError",
    "Check",
    "ConnectionLostError",
    "Delete",
    "EphemeralParentError",
    "GetResult",
    "MetadataStore",
    "MetadataStoreError",
    "NotEmptyError",
    "NotFoundError",
    "Notification",
    "NotificationType",
    "Op",
    "Put",
    "SessionEvent",
    "SessionExpiredError",
    "Stat",
    "check_path",
    "parent_of",
]


class MetadataStoreError(Exception):
    """A metadata operation failed (Pulsar's MetadataStoreException)."""


class BadVersionError(MetadataStoreError):
    """The node's version is not the one expected, or a create found the node there already under -1."""


class NotFoundError(MetadataStoreError):
    pass


class EphemeralParentError(NotFoundError):
    """A node under an ephemeral one: ZooKeeper refuses it (NoChildrenForEphemerals)."""


class NotEmptyError(MetadataStoreError):
    """A delete of a node that still has children."""


class ConnectionLostError(MetadataStoreError):
    """The store cannot reach its servers now; whether the operation was applied is unknown (ZooKeeper's
    ConnectionLoss). The session may still live: a CONNECTION_LOST event came before, RECONNECTED or
    SESSION_LOST comes after."""


class SessionExpiredError(MetadataStoreError):
    """The store's session is gone: its ephemeral nodes were deleted and nothing it sends is applied."""


@dataclass(frozen=True, slots=True)
class Stat:
    path: str
    version: int
    creation_ms: int
    modification_ms: int
    ephemeral: bool
    # The node's ephemeral owner is this store's current session.
    created_by_self: bool


@dataclass(frozen=True, slots=True)
class GetResult:
    value: bytes
    stat: Stat


@dataclass(frozen=True, slots=True)
class Check:
    """In a `multi`: the node at `path` has `version` (BadVersionError or NotFoundError otherwise)."""

    path: str
    version: int


@dataclass(frozen=True, slots=True)
class Put:
    path: str
    value: bytes
    expected_version: int | None = None
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    expected_version: int | None = None


Op = Check | Put | Delete


class NotificationType(enum.Enum):
    CREATED = "Created"
    MODIFIED = "Modified"
    DELETED = "Deleted"
    CHILDREN_CHANGED = "ChildrenChanged"


@dataclass(frozen=True, slots=True)
class Notification:
    type: NotificationType
    path: str


class SessionEvent(enum.Enum):
    """Pulsar's session events. CONNECTION_LOST: the store cannot reach its servers, its session may still
    live; RECONNECTED: it reaches them again with the same session; SESSION_LOST: the session expired, its
    ephemeral nodes are gone; SESSION_REESTABLISHED: a new session, whose owner must create its ephemeral
    nodes again (Pulsar's `zookeeperSessionExpiredPolicy=reconnect`)."""

    CONNECTION_LOST = "ConnectionLost"
    RECONNECTED = "Reconnected"
    SESSION_LOST = "SessionLost"
    SESSION_REESTABLISHED = "SessionReestablished"


class MetadataStore(Protocol):
    """A versioned tree of byte values with ephemeral nodes, notifications and a session. Every call is
    made on the event loop; a store that blocks runs its work elsewhere and returns an awaitable."""

    @property
    def session_timeout_ms(self) -> int:
        """The session's timeout as the servers granted it: once a request this long ago was answered with
        nothing heard since, the session may be gone. 0 for a session that ends only with the store (an
        embedded one)."""
        ...

    async def get(self, path: str) -> GetResult | None: ...

    async def exists(self, path: str) -> Stat | None: ...

    async def get_children(self, path: str) -> list[str]:
        """The names (not paths) of the node's children, sorted; [] when the node does not exist."""
        ...

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        """Write `value` at `path` (see the module's semantics); the Stat of what was written, whose `path`
        is the sequential path when `sequential`."""
        ...

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """NotFoundError when absent, NotEmptyError when it has children."""
        ...

    async def delete_recursive(self, path: str) -> None:
        """The node and everything below it; nothing when absent."""
        ...

    async def multi(self, ops: Sequence[Op]) -> list[Stat | None]:
        """All of `ops` or none: a Stat per Put, None per Check and Delete. The first failing op's error."""
        ...

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        """Called on the event loop for every change of any node: CREATED / MODIFIED / DELETED for the node,
        CHILDREN_CHANGED for its parent."""
        ...

    def register_session_listener(self, listener: Callable[[SessionEvent], None]) -> None: ...

    async def close(self) -> None:
        """End the session: its ephemeral nodes are deleted."""
        ...


def check_path(path: str) -> None:
    """ValueError unless `path` is absolute, has no empty part and no trailing '/' (the root aside)."""
    if path == "/":
        return
    if not path.startswith("/") or path.endswith("/") or "//" in path:
        raise ValueError(f"metadata path {path!r} must be absolute, as /a/b, without an empty part")


def parent_of(path: str) -> str:
    """'/a/b' → '/a'; '/a' → '/'."""
    head, _, _ = path.rpartition("/")
    return head or "/"
