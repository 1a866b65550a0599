"""The broker.conf shipped at the repository root lists every setting with its default."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.broker.config import ConfigError, load_config

SHIPPED = Path(__file__).resolve().parents[2] / "broker.conf"


def test_shipped_broker_conf_holds_the_defaults() -> None:
    assert load_config(SHIPPED).values == load_config().values


def test_shipped_broker_conf_names_every_setting() -> None:
    written = {
        line.split("=", 1)[0].strip()
        for line in SHIPPED.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert written == set(load_config().values)


def test_overrides_are_typed_and_reach_each_layer() -> None:
    config = load_config(overrides=[("keySharedOrderingMode", "classic"), ("managedLedgerMaxEntriesPerLedger", "10")])
    assert config.dispatcher_settings().key_shared_ordering_mode == "classic"
    assert config.storage_config().managedLedgerMaxEntriesPerLedger == 10


def test_classic_implementation_flag_selects_classic() -> None:
    config = load_config(overrides={"subscriptionKeySharedUseClassicPersistentImplementation": "true"})
    assert config.dispatcher_settings().key_shared_ordering_mode == "classic"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("brokerServicePort", "many", "brokerServicePort"),
        ("noSuchSetting", "1", "noSuchSetting"),
        ("keySharedOrderingMode", "sometimes", "keySharedOrderingMode"),
        ("allowAutoTopicCreation", "yes", "allowAutoTopicCreation"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=[(key, value)])
