"""Key_Shared under consumer churn, black-box: the scenarios of churn.py against a broker process per
test, for each ordering mode (`keySharedOrderingMode`), unbatched and with KeyBased batching, over
seeds; and the checkers themselves, fed hand-made logs they must flag.

pip379 must keep every rule; classic and pip282 must lose nothing and get stuck nowhere, and their
ordering violations are only counted (printed with the test's output). Each run's full delivery log is
written to the test's tmp_path; a failure names it, with the seed and the first violations.

Soak: `MAGNETAR_CHURN_SEEDS=50` (or `3,8,21`, or `1-50`) runs those seeds for every mode, and
`MAGNETAR_CHURN_MESSAGES=20000` scales the messages; or run churn.py as a script.
"""

from __future__ import annotations

from pathlib import Path

import churn
import pytest
from churn import (
    DeliveryLog,
    check_first_delivery_order,
    check_no_loss,
    check_one_consumer_per_key,
    check_redelivered_after_close,
)

BATCHING = {"unbatched": False, "keybased": True}


def cases(
    pip379_seeds: int,
    other_seeds: int,
    other_batchings: tuple[str, ...] = ("unbatched",),
    pip379_batchings: tuple[str, ...] = ("unbatched", "keybased"),
) -> list:
    """(mode, batching, seed): the default run samples more seeds for pip379, the mode that must keep
    every rule; MAGNETAR_CHURN_SEEDS replaces the seeds of every mode and batching."""
    found = []
    for mode in churn.MODES:
        batchings = pip379_batchings if mode == "pip379" else other_batchings
        default = range(1, 1 + (pip379_seeds if mode == "pip379" else other_seeds))
        for batching in batchings:
            found += [
                pytest.param(mode, batching, seed, id=f"{mode}-{batching}-{seed}") for seed in churn.seeds(default)
            ]
    return found


def run(scenario: str, broker_factory, topic: str, tmp_path: Path, mode: str, batching: str, seed: int) -> None:
    broker = broker_factory(keySharedOrderingMode=mode)
    outcome = churn.SCENARIOS[scenario](
        broker.url, broker.http_url, topic, mode=mode, seed=seed, batching=BATCHING[batching]
    )
    log_path = tmp_path / f"churn-{scenario}-{mode}-{batching}-{seed}.log"
    outcome.write_log(log_path)
    print(outcome.report())
    failed = outcome.failed_rules()
    assert not failed, (
        f"{outcome.report()}\nfull log: {log_path}\nbroker log: {broker.log_path}\n"
        f"again: {churn.SEEDS_ENV}={seed} pytest tests/e2e/test_e2e_churn.py -k '{scenario.replace('-', '_')} "
        f"and {mode}-{batching}'"
    )


# ------------------------------------------------------------------------------------- scenarios


@pytest.mark.parametrize(("mode", "batching", "seed"), cases(3, 1, other_batchings=("unbatched", "keybased")))
def test_rolling_restarts(broker_factory, topic, tmp_path, mode, batching, seed) -> None:
    run("rolling-restarts", broker_factory, topic, tmp_path, mode, batching, seed)


@pytest.mark.parametrize(("mode", "batching", "seed"), cases(1, 1))
def test_slow_consumer(broker_factory, topic, tmp_path, mode, batching, seed) -> None:
    run("slow-consumer", broker_factory, topic, tmp_path, mode, batching, seed)


@pytest.mark.parametrize(("mode", "batching", "seed"), cases(3, 1))
def test_rolling_reconnects(broker_factory, topic, tmp_path, mode, batching, seed) -> None:
    run("rolling-reconnects", broker_factory, topic, tmp_path, mode, batching, seed)


# ------------------------------------------------------------------------------ the checkers fail


def test_a_key_delivered_while_another_consumer_holds_it_is_flagged() -> None:
    log = DeliveryLog()
    log.record("received", "c1#1", index=1, key="k")
    log.record("received", "c2#1", index=2, key="k")
    found = check_one_consumer_per_key(log.events())
    assert len(found) == 1
    assert found[0].startswith("key k: i=2 delivered to c2#1 at seq 1 while c1#1 holds i=1 unacked since seq 0")


def test_a_key_moves_after_ack_or_close_without_violation() -> None:
    log = DeliveryLog()
    log.record("received", "c1#1", index=1, key="k")
    log.record("acked", "c1#1", index=1, key="k")
    log.record("received", "c2#1", index=2, key="k")
    log.record("closing", "c2#1")
    log.record("received", "c2#2", index=2, key="k")
    log.record("received", "c1#1", index=3, key="other")
    assert check_one_consumer_per_key(log.events()) == []


def test_a_new_incarnation_of_the_same_name_is_another_consumer() -> None:
    log = DeliveryLog()
    log.record("received", "c1#1", index=1, key="k")
    log.record("subscribed", "c1#2")
    log.record("received", "c1#2", index=2, key="k")
    assert len(check_one_consumer_per_key(log.events())) == 1


def test_a_released_consumer_holds_nothing_until_it_is_connected_again() -> None:
    log = DeliveryLog()
    log.record("received", "c1#1", index=1, key="k")
    log.record("released", "c1#1", detail="its broker lost the topic")
    log.record("received", "c2#1", index=1, key="k")  # the new owner redelivers: c1's hold ended
    log.record("received", "c1#1", index=2, key="k")  # from c1's receiver queue, sent by the old owner
    log.record("connected", "c1#1", detail="broker 127.0.0.1:6651")
    log.record("received", "c1#1", index=3, key="k")  # from the new owner while c2 holds i=1
    found = check_one_consumer_per_key(log.events())
    assert len(found) == 1
    assert found[0].startswith("key k: i=3 delivered to c1#1 at seq 5 while c2#1 holds i=1 unacked since seq 2")


def test_a_first_delivery_behind_a_later_message_of_its_key_is_flagged() -> None:
    log = DeliveryLog()
    log.record("received", "c1#1", index=5, key="k")
    log.record("received", "c2#1", index=7, key="k")
    log.record("received", "c2#1", index=6, key="k")
    log.record("received", "c2#1", index=5, key="k")  # a redelivery: allowed
    found = check_first_delivery_order(log.events())
    assert len(found) == 1
    assert found[0].startswith("key k: i=6 first delivered to c2#1 at seq 2 after i=7 was first delivered")


def test_a_message_never_acked_is_flagged_with_its_deliveries() -> None:
    log = DeliveryLog()
    log.record("received", "c1#1", index=0, key="a")
    log.record("acked", "c1#1", index=0, key="a")
    log.record("received", "c1#1", index=1, key="b")
    log.record("closing", "c1#1")
    found = check_no_loss(log.events(), {0: "a", 1: "b", 2: "c"})
    assert [v.splitlines()[0] for v in found] == [
        "key b: i=1 published, delivered to c1#1 at seq 2, never acked",
        "key c: i=2 published, never delivered",
    ]


def test_a_message_held_at_close_and_never_delivered_again_is_flagged() -> None:
    log = DeliveryLog()
    log.record("received", "c1#1", index=1, key="k")
    log.record("received", "c1#1", index=2, key="k")
    log.record("closing", "c1#1")
    log.record("received", "c2#1", index=2, key="k")
    found = check_redelivered_after_close(log.events())
    assert len(found) == 1
    assert found[0].startswith("key k: i=1 held by c1#1 (received at seq 0) when it closed at seq 2")


def test_required_rules_per_mode() -> None:
    assert set(churn.REQUIRED["pip379"]) == set(churn.RULES)
    for mode in ("classic", "pip282"):
        assert {"no-loss", "drained", "progress"} <= set(churn.REQUIRED[mode])
        assert not set(churn.ORDERING_RULES) & set(churn.REQUIRED[mode])


def test_an_index_set_keeps_only_what_lies_above_its_low_water_mark() -> None:
    indexes = churn.IndexSet()
    for index in (0, 2, 1, 5):
        indexes.add(index)
    assert (indexes.low, indexes.stored()) == (3, 1)
    assert [i in indexes for i in range(7)] == [True, True, True, False, False, True, False]


def test_a_message_acked_before_its_send_receipt_is_not_lost() -> None:
    log = DeliveryLog()
    log.record("received", "c1#1", index=0, key="a")
    log.record("acked", "c1#1", index=0, key="a")
    assert check_no_loss(log.events(), {0: "a"}) == []


def test_a_log_that_keeps_nothing_still_feeds_its_observer_in_order() -> None:
    contract = churn.Contract()
    log = DeliveryLog(observer=contract.feed, keep=False)
    log.record("received", "c1#1", index=1, key="k")
    log.record("received", "c2#1", index=2, key="k")
    assert log.events() == []
    assert len(contract.violations()["one-consumer-per-key"]) == 1
