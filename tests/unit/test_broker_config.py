"""The broker.conf shipped at the repository root lists every setting with its default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from magnetar.broker.config import ConfigError, UnknownListener, load_config

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


LISTENERS = "internal:pulsar://127.0.0.1:6650,external:pulsar://broker.example.com:6650"


def test_advertised_listeners_answer_lookups_by_name() -> None:
    config = load_config(overrides={"advertisedListeners": LISTENERS})
    assert config.lookup_urls("external") == ("pulsar://broker.example.com:6650", None)
    # No name: the internal listener, the first one unless internalListenerName says otherwise.
    assert config.lookup_urls() == ("pulsar://127.0.0.1:6650", None)
    assert config.advertised_url == "pulsar://127.0.0.1:6650"
    named = load_config(overrides={"advertisedListeners": LISTENERS, "internalListenerName": "external"})
    assert named.lookup_urls() == ("pulsar://broker.example.com:6650", None)
    with pytest.raises(UnknownListener, match="the broker do not have other listener"):
        config.lookup_urls("other")


def test_advertised_listeners_carry_their_tls_and_web_urls() -> None:
    config = load_config(
        overrides={
            "advertisedListeners": "a:pulsar://10.0.0.1:6650,a:http://10.0.0.1:8080,"
            "b:pulsar://b.example.com:6650,b:pulsar+ssl://b.example.com:6651",
        }
    )
    assert config.lookup_urls("b") == ("pulsar://b.example.com:6650", "pulsar+ssl://b.example.com:6651")
    # The internal listener's http:// URL is this broker's web service URL (lookups' httpUrl, clusters).
    assert config.advertised_web_url == "http://10.0.0.1:8080"
    assert config.advertised_url_tls is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"internalListenerName": "nope"}, "do not contain `internalListenerName` entry"),
        ({"advertisedListeners": "pulsar://h:1"}, "the value //h:1 in the `advertisedListeners` configure is invalid"),
        ({"advertisedListeners": ":pulsar://h:1"}, "do not contain listener name"),
        ({"advertisedListeners": "a:pulsar://h:1,a:pulsar://h:2"}, "redundant configure for listener `a`"),
        ({"advertisedListeners": "a:pulsar://h:1,a:http://h:2,a:https://h:3"}, "redundant configure for listener `a`"),
        ({"advertisedListeners": "a:pulsar://h:1,b:pulsar://h:1"}, "must not specify `h:1` to different listener"),
        (
            {"advertisedListeners": "a:pulsar+ssl://h:2"},
            "the `a` listener in the `advertisedListeners` do not specify `pulsar` address",
        ),
        (
            {"advertisedListeners": "a:pulsar://h:x"},
            "the value pulsar://h:x in the `advertisedListeners` configure is invalid",
        ),
    ],
)
def test_advertised_listeners_are_checked_as_pulsar_checks_them(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(overrides={"advertisedListeners": LISTENERS} | settings)


@pytest.mark.parametrize(
    ("key", "other"),
    [
        ("loadBalancerLoadSheddingStrategy", "org.apache.pulsar.broker.loadbalance.impl.OverloadShedder"),
        ("loadBalancerLoadPlacementStrategy", "org.apache.pulsar.broker.loadbalance.impl.LeastResourceUsageWithWeight"),
        ("defaultNamespaceBundleSplitAlgorithm", "topic_count_equally_divide"),
    ],
)
def test_the_load_manager_takes_the_strategies_it_has_only(key: str, other: str) -> None:
    assert load_config()[key] in {
        "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder",
        "org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate",
        "range_equally_divide",
    }
    with pytest.raises(ConfigError, match=f"{key}: only"):
        load_config(overrides={key: other})
