"""The official Java client 4.0.x (compat/java) consuming from magnetar: every subscription type, acks
of every kind, negative acks, dead-letter and retry topics."""

from __future__ import annotations

from collections import defaultdict


def test_exclusive_subscription_refuses_a_second_consumer(java, topic):
    seen = java("sub_exclusive", topic=topic)
    assert seen["second"] == "ConsumerBusyException"
    assert seen["values"] == [f"m-{i}" for i in range(5)]


def test_shared_consumers_split_the_messages(java, topic):
    seen = java("sub_shared", topic=topic, count=40)
    first, second = seen["first"], seen["second"]
    assert sorted(first + second) == sorted(f"m-{i}" for i in range(40))
    assert first and second


def test_failover_has_one_active_consumer_and_fails_over(java, topic):
    seen = java("sub_failover", topic=topic)
    first_round = seen["firstRound"]
    active = next(name for name, values in first_round.items() if values)
    standby = "b" if active == "a" else "a"
    assert first_round == {active: [f"m-{i}" for i in range(5)], standby: []}
    # Each consumer was told whether it is active, the newcomer included.
    last_told = {}
    for event in seen["eventsBeforeClose"]:
        name, state = event.split()
        last_told[name] = state
    assert last_told == {active: "active", standby: "inactive"}
    # Unacknowledged messages go to the standby once the active consumer leaves.
    assert seen["secondRound"] == {standby: [f"m-{i}" for i in range(5, 10)]}


def test_key_shared_sends_each_key_to_one_consumer_in_order(java, topic):
    seen = java("sub_key_shared", topic=topic, keys=20, perKey=5)
    owners: dict[str, set[str]] = defaultdict(set)
    order: dict[str, list[int]] = defaultdict(list)
    for consumer in ("first", "second"):
        for value in seen[consumer]:
            key, index = value.split(":")
            owners[key].add(consumer)
            order[key].append(int(index))
    assert len(seen["first"]) + len(seen["second"]) == 100
    assert all(len(consumers) == 1 for consumers in owners.values())
    assert order == {f"key-{k}": list(range(5)) for k in range(20)}
    assert seen["first"] and seen["second"]


def test_individual_acks_leave_only_the_others(java, topic):
    assert java("ack_individual", topic=topic)["redelivered"] == ["m-1", "m-3", "m-5", "m-7", "m-9"]


def test_cumulative_ack_moves_the_subscription_past_it(java, topic):
    assert java("ack_cumulative", topic=topic)["redelivered"] == ["m-6", "m-7", "m-8", "m-9"]


def test_ack_of_a_list_with_receipts(java, topic):
    assert java("ack_list", topic=topic)["redelivered"] == [f"m-{i}" for i in range(5, 10)]


def test_batch_index_acks_redeliver_only_the_unacked_messages_of_a_batch(java, topic):
    seen = java("ack_batch_index", topic=topic)
    assert [batch for _, _, batch, _ in seen["ids"]] == list(range(10))
    assert len({(ledger, entry) for ledger, entry, _, _ in seen["ids"]}) == 1
    assert seen["redelivered"] == ["m-1", "m-3", "m-5", "m-7", "m-9"]


def test_negative_ack_redelivers_with_a_count(java, topic):
    seen = java("nack", topic=topic)
    deliveries = [(m["value"], m["redeliveryCount"]) for m in seen["deliveries"]]
    assert deliveries == [("m-0", 0), ("m-1", 0), ("m-2", 0), ("m-1", 1)]
    assert seen["deliveries"][1]["id"] == seen["deliveries"][3]["id"]
    assert seen["more"] == []


def test_dead_letter_topic_gets_the_message_after_max_redeliveries(java, topic):
    # A regression: the dead-letter producer hung like every Java producer.
    seen = java("dead_letter", topic=topic)
    assert seen["deliveries"] == ["poison#0", "fine#0", "poison#1", "poison#2"]
    [dead] = seen["deadLetters"]
    assert dead["value"] == "poison"
    assert dead["topic"] == topic + "-DLQ"
    assert dead["properties"]["REAL_TOPIC"] == topic
    ledger, entry, _, _ = seen["poisonId"]
    assert dead["properties"]["ORIGIN_MESSAGE_ID"] == f"{ledger}:{entry}:-1"


def test_reconsume_later_comes_back_through_the_retry_topic(java, topic):
    seen = java("retry_letter", topic=topic)
    assert seen["first"]["value"] == "again"
    second = seen["second"]
    assert second["value"] == "again"
    assert second["topic"] == "persistent://public/default/sub-RETRY"
    assert second["properties"]["RECONSUMETIMES"] == "1"
    assert second["properties"]["REAL_TOPIC"] == topic
    # Delivered no earlier than the 1 s it was put off for (the broker holds it back).
    assert seen["delayMs"] >= 900
