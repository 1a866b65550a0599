"""magnetar's BookKeeper client: ledgers on Apache BookKeeper bookies, in BookKeeper's own wire protocol
(v2, as Pulsar uses it), metadata format and ZooKeeper layout, so the Java client and BookKeeper's tools
read what it writes and the reverse.

Owns: the wire codec and digests, per-bookie connections, ledger metadata and ids, ledger handles (write,
read, ensemble change, recovery and fencing). Must not touch: managed ledgers, topics, consumers, or any
other magnetar layer (it may import `magnetar.positions` only).
"""

from magnetar.bookkeeper.bookie_client import BookieClient, BookieTransport
from magnetar.bookkeeper.client import BookKeeper
from magnetar.bookkeeper.digest import DigestType
from magnetar.bookkeeper.errors import BKError
from magnetar.bookkeeper.ledger import LedgerHandle, ReadHandle
from magnetar.bookkeeper.ledger_manager import LedgerManager, MemoryLedgerManager, Versioned
from magnetar.bookkeeper.metadata import LedgerMetadata, State
from magnetar.bookkeeper.reader import LedgerEntry
from magnetar.bookkeeper.zk_ledger_manager import ZkLedgerManager

__all__ = [
    "BKError",
    "BookKeeper",
    "BookieClient",
    "BookieTransport",
    "DigestType",
    "LedgerEntry",
    "LedgerHandle",
    "LedgerManager",
    "LedgerMetadata",
    "MemoryLedgerManager",
    "ReadHandle",
    "State",
    "Versioned",
    "ZkLedgerManager",
]
