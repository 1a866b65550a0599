"""Dispatcher settings: Pulsar's names and defaults (ServiceConfiguration, Pulsar 4.x)."""

from __future__ import annotations

import dataclasses

import pytest

from magnetar.core.settings import ORDERING_MODES, PULSAR_KEYS, DispatcherSettings

# Pulsar 4.x ServiceConfiguration defaults.
PULSAR_DEFAULTS = {
    "subscriptionKeySharedUseConsistentHashing": True,
    "subscriptionKeySharedConsistentHashingReplicaPoints": 100,
    "keySharedLookAheadMsgInReplayThresholdPerConsumer": 2000,
    "keySharedLookAheadMsgInReplayThresholdPerSubscription": 20000,
    "maxUnackedMessagesPerConsumer": 50000,
    "maxUnackedMessagesPerSubscription": 200000,
    "keySharedUnblockingIntervalMs": 10,
    "dispatcherMaxReadBatchSize": 100,
    "dispatcherMaxRoundRobinBatchSize": 20,
    "dispatcherRetryBackoffInitialTimeInMs": 1,
    "dispatcherRetryBackoffMaxTimeInMs": 10,
}


def value_of(settings: DispatcherSettings, pulsar_key: str) -> object:
    name = next(name for name, (key, _doc, _dyn) in PULSAR_KEYS.items() if key == pulsar_key)
    return getattr(settings, name)


def test_defaults_equal_pulsars() -> None:
    settings = DispatcherSettings()
    for key, default in PULSAR_DEFAULTS.items():
        assert value_of(settings, key) == default, key
    # subscriptionKeySharedUseClassicPersistentImplementation=false: the PIP-379 dispatcher.
    assert settings.key_shared_ordering_mode == "pip379"


def test_every_field_has_one_pulsar_key_with_doc() -> None:
    names = {f.name for f in dataclasses.fields(DispatcherSettings)}
    assert set(PULSAR_KEYS) == names
    keys = [key for key, _doc, _dyn in PULSAR_KEYS.values()]
    assert len(set(keys)) == len(keys)
    assert all(doc for _key, doc, _dyn in PULSAR_KEYS.values())


def test_dynamic_flags_match_pulsar() -> None:
    dynamic = {key: dyn for key, _doc, dyn in PULSAR_KEYS.values()}
    for key in (
        "keySharedLookAheadMsgInReplayThresholdPerConsumer",
        "keySharedLookAheadMsgInReplayThresholdPerSubscription",
        "keySharedUnblockingIntervalMs",
        "dispatcherMaxReadBatchSize",
        "dispatcherMaxRoundRobinBatchSize",
    ):
        assert dynamic[key], key
    for key in (
        "subscriptionKeySharedUseConsistentHashing",
        "subscriptionKeySharedConsistentHashingReplicaPoints",
        "maxUnackedMessagesPerConsumer",
        "maxUnackedMessagesPerSubscription",
        "dispatcherRetryBackoffInitialTimeInMs",
        "dispatcherRetryBackoffMaxTimeInMs",
    ):
        assert not dynamic[key], key


def test_from_pulsar_maps_camel_case_keys() -> None:
    settings = DispatcherSettings.from_pulsar(
        {
            "maxUnackedMessagesPerConsumer": 10,
            "maxUnackedMessagesPerSubscription": 40,
            "keySharedUnblockingIntervalMs": 0,
            "dispatcherMaxReadBatchSize": 7,
            "dispatcherMaxRoundRobinBatchSize": 3,
            "subscriptionKeySharedUseConsistentHashing": False,
            "subscriptionKeySharedConsistentHashingReplicaPoints": 20,
            "keySharedLookAheadMsgInReplayThresholdPerConsumer": 0,
            "keySharedLookAheadMsgInReplayThresholdPerSubscription": 5,
            "dispatcherRetryBackoffInitialTimeInMs": 2,
            "dispatcherRetryBackoffMaxTimeInMs": 20,
        }
    )
    assert settings == DispatcherSettings(
        max_unacked_messages_per_consumer=10,
        max_unacked_messages_per_subscription=40,
        key_shared_unblocking_interval_ms=0,
        max_read_batch_size=7,
        max_round_robin_batch_size=3,
        use_consistent_hashing=False,
        consistent_hashing_replica_points=20,
        look_ahead_msg_in_replay_threshold_per_consumer=0,
        look_ahead_msg_in_replay_threshold_per_subscription=5,
        retry_backoff_initial_ms=2,
        retry_backoff_max_ms=20,
    )


def test_from_pulsar_ignores_keys_it_does_not_own() -> None:
    assert DispatcherSettings.from_pulsar({"brokerServicePort": 6650}) == DispatcherSettings()


@pytest.mark.parametrize("value", [True, "true", "True"])
def test_classic_implementation_flag_selects_classic(value: object) -> None:
    settings = DispatcherSettings.from_pulsar({"subscriptionKeySharedUseClassicPersistentImplementation": value})
    assert settings.key_shared_ordering_mode == "classic"


@pytest.mark.parametrize("value", [False, "false"])
def test_classic_implementation_flag_false_keeps_pip379(value: object) -> None:
    settings = DispatcherSettings.from_pulsar({"subscriptionKeySharedUseClassicPersistentImplementation": value})
    assert settings.key_shared_ordering_mode == "pip379"


def test_every_ordering_mode_is_accepted() -> None:
    for mode in ORDERING_MODES:
        assert DispatcherSettings(key_shared_ordering_mode=mode).key_shared_ordering_mode == mode


def test_invalid_ordering_mode_is_rejected_naming_the_key() -> None:
    with pytest.raises(ValueError, match="keySharedOrderingMode"):
        DispatcherSettings(key_shared_ordering_mode="pip999")
    with pytest.raises(ValueError, match="keySharedOrderingMode"):
        DispatcherSettings.from_pulsar({"keySharedOrderingMode": "fifo"})


INT_FIELDS = [name for name in PULSAR_KEYS if name not in ("key_shared_ordering_mode", "use_consistent_hashing")]


@pytest.mark.parametrize("field_name", INT_FIELDS)
def test_negative_values_are_rejected_naming_the_pulsar_key(field_name: str) -> None:
    pulsar_key = PULSAR_KEYS[field_name][0]
    with pytest.raises(ValueError, match=pulsar_key):
        DispatcherSettings(**{field_name: -1})
    with pytest.raises(ValueError, match=pulsar_key):
        DispatcherSettings.from_pulsar({pulsar_key: -1})


def test_zero_read_batch_size_and_replica_points_are_rejected() -> None:
    with pytest.raises(ValueError, match="dispatcherMaxReadBatchSize"):
        DispatcherSettings(max_read_batch_size=0)
    with pytest.raises(ValueError, match="subscriptionKeySharedConsistentHashingReplicaPoints"):
        DispatcherSettings(consistent_hashing_replica_points=0)


def test_zero_disables_unacked_limits_and_look_ahead_terms() -> None:
    settings = DispatcherSettings.from_pulsar(
        {
            "maxUnackedMessagesPerConsumer": 0,
            "maxUnackedMessagesPerSubscription": 0,
            "keySharedLookAheadMsgInReplayThresholdPerConsumer": 0,
            "keySharedLookAheadMsgInReplayThresholdPerSubscription": 0,
        }
    )
    assert settings.max_unacked_messages_per_consumer == 0
    assert settings.max_unacked_messages_per_subscription == 0


def test_from_pulsar_parses_broker_conf_strings() -> None:
    # Regression: values read from broker.conf are strings, and "false" is a truthy str.
    settings = DispatcherSettings.from_pulsar(
        {
            "subscriptionKeySharedUseConsistentHashing": "false",
            "maxUnackedMessagesPerConsumer": "10",
            "dispatcherMaxRoundRobinBatchSize": " 3 ",
            "subscriptionKeySharedUseClassicPersistentImplementation": "FALSE",
        }
    )
    assert settings.use_consistent_hashing is False
    assert settings.max_unacked_messages_per_consumer == 10
    assert settings.max_round_robin_batch_size == 3
    assert settings.key_shared_ordering_mode == "pip379"
    with pytest.raises(ValueError, match="maxUnackedMessagesPerConsumer"):
        DispatcherSettings.from_pulsar({"maxUnackedMessagesPerConsumer": "-1"})


def test_from_pulsar_rejects_malformed_values_naming_the_key() -> None:
    with pytest.raises(ValueError, match="subscriptionKeySharedUseConsistentHashing"):
        DispatcherSettings.from_pulsar({"subscriptionKeySharedUseConsistentHashing": "yes"})
    with pytest.raises(ValueError, match="dispatcherMaxReadBatchSize"):
        DispatcherSettings.from_pulsar({"dispatcherMaxReadBatchSize": "lots"})
    with pytest.raises(ValueError, match="subscriptionKeySharedUseClassicPersistentImplementation"):
        DispatcherSettings.from_pulsar({"subscriptionKeySharedUseClassicPersistentImplementation": "maybe"})
