"""Dispatcher settings, under Pulsar's configuration names.

Owns: the values a dispatcher reads and the one table that ties each to its Pulsar key, default,
meaning and whether Pulsar lets it change at run time.
Must not touch: files or the environment; the broker loads `broker.conf` and builds these.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["DispatcherSettings", "ORDERING_MODES", "PULSAR_KEYS"]

# pip379: draining hashes (Pulsar 4.0 default); pip282: joining consumers wait for the last sent
# position (merged to Pulsar master, removed before 4.0); classic: they wait for the read position at
# join time (Pulsar 3.x, `subscriptionKeySharedUseClassicPersistentImplementation=true`).
ORDERING_MODES = ("pip379", "pip282", "classic")


@dataclass(frozen=True, slots=True)
class DispatcherSettings:
    key_shared_ordering_mode: str = "pip379"
    use_consistent_hashing: bool = True
    consistent_hashing_replica_points: int = 100
    look_ahead_msg_in_replay_threshold_per_consumer: int = 2000
    look_ahead_msg_in_replay_threshold_per_subscription: int = 20000
    max_unacked_messages_per_consumer: int = 50000
    max_unacked_messages_per_subscription: int = 200000
    key_shared_unblocking_interval_ms: int = 10
    max_read_batch_size: int = 100
    precise_dispatcher_flow_control: bool = False
    max_round_robin_batch_size: int = 20
    retry_backoff_initial_ms: int = 1
    retry_backoff_max_ms: int = 10

    def __post_init__(self) -> None:
        if self.key_shared_ordering_mode not in ORDERING_MODES:
            raise ValueError(
                f"keySharedOrderingMode must be one of {', '.join(ORDERING_MODES)}, "
                f"not {self.key_shared_ordering_mode!r}"
            )
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"{PULSAR_KEYS[f.name][0]} must not be negative (got {value})")
        if self.max_read_batch_size < 1:
            raise ValueError("dispatcherMaxReadBatchSize must be at least 1")
        if self.consistent_hashing_replica_points < 1:
            raise ValueError("subscriptionKeySharedConsistentHashingReplicaPoints must be at least 1")

    @classmethod
    def from_pulsar(cls, conf: dict[str, object]) -> DispatcherSettings:
        """Build from Pulsar keys; `subscriptionKeySharedUseClassicPersistentImplementation=true` selects classic.

        Values may be typed or, as read from `broker.conf`, strings: `"false"` must not count as true.
        """
        by_key = {key: name for name, (key, _doc, _dynamic) in PULSAR_KEYS.items()}
        defaults = cls()
        # Each value parsed to its field's type above (bool, int), or taken as given (the mode's string).
        values: dict[str, Any] = {}
        for key, value in conf.items():
            if key == "subscriptionKeySharedUseClassicPersistentImplementation":
                if _parse_bool(key, value):
                    values["key_shared_ordering_mode"] = "classic"
            elif key in by_key:
                name = by_key[key]
                default = getattr(defaults, name)
                if isinstance(default, bool):
                    value = _parse_bool(key, value)
                elif isinstance(default, int):
                    value = _parse_int(key, value)
                values[name] = value
        return cls(**values)


def _parse_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{key} must be true or false (got {value!r})")
    return text == "true"


def _parse_int(key: str, value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{key} must be an integer (got {value!r})")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"{key} must be an integer (got {value!r})") from None


# field -> (Pulsar key, meaning, dynamic)
PULSAR_KEYS: dict[str, tuple[str, str, bool]] = {
    "key_shared_ordering_mode": (
        "keySharedOrderingMode",
        "How Key_Shared keeps per-key order when consumers change: pip379 | pip282 | classic.",
        False,
    ),
    "use_consistent_hashing": (
        "subscriptionKeySharedUseConsistentHashing",
        "AUTO_SPLIT uses a consistent-hash ring; false selects PIP-34's splitting of hash ranges.",
        False,
    ),
    "consistent_hashing_replica_points": (
        "subscriptionKeySharedConsistentHashingReplicaPoints",
        "Ring points per consumer.",
        False,
    ),
    "look_ahead_msg_in_replay_threshold_per_consumer": (
        "keySharedLookAheadMsgInReplayThresholdPerConsumer",
        "Replay queue bound per connected consumer while keys are blocked; 0 disables this term.",
        True,
    ),
    "look_ahead_msg_in_replay_threshold_per_subscription": (
        "keySharedLookAheadMsgInReplayThresholdPerSubscription",
        "Replay queue bound per subscription; 0 disables this term.",
        True,
    ),
    "max_unacked_messages_per_consumer": (
        "maxUnackedMessagesPerConsumer",
        "A consumer with this many unacked messages gets no more until half are acked; 0 disables.",
        False,
    ),
    "max_unacked_messages_per_subscription": (
        "maxUnackedMessagesPerSubscription",
        "A subscription with this many unacked messages stops dispatching until half are acked; 0 disables.",
        False,
    ),
    "key_shared_unblocking_interval_ms": (
        "keySharedUnblockingIntervalMs",
        "Delay that batches the re-reads triggered by unblocked hashes.",
        True,
    ),
    "max_read_batch_size": ("dispatcherMaxReadBatchSize", "Entries per read.", True),
    "precise_dispatcher_flow_control": (
        "preciseDispatcherFlowControl",
        "A read takes the permits over the consumers' average messages per entry, not the permits, in entries.",
        False,
    ),
    "max_round_robin_batch_size": (
        "dispatcherMaxRoundRobinBatchSize",
        "Shared: entries given to one consumer before moving to the next.",
        True,
    ),
    "retry_backoff_initial_ms": (
        "dispatcherRetryBackoffInitialTimeInMs",
        "First retry delay after a read dispatched nothing.",
        False,
    ),
    "retry_backoff_max_ms": ("dispatcherRetryBackoffMaxTimeInMs", "Largest retry delay.", False),
}
