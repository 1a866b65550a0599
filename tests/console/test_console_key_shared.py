"""The console's Key_Shared subscription page in headless Chromium, against a broker process with the
official client's consumers joining and leaving: the ring's owners are the broker's own (its stats
JSON, and Pulsar's consistent-hashing formula computed here), a draining hash is marked while its old
owner holds messages of it and goes when they are acknowledged, and the blocked-key box answers."""

from __future__ import annotations

import uuid

import httpx
import pytest
from selenium.webdriver.common.by import By

from console.console_helpers import after_next_refresh, draining_markers, open_page, ring, until
from e2e.key_shared_helpers import Ring, key_shared, keys_owned, ring_slot

NS = "public/default"


@pytest.fixture(scope="module")
def brokers(module_broker_factory):
    return lambda mode="pip379": module_broker_factory(keySharedOrderingMode=mode, keySharedUnblockingIntervalMs=0)


@pytest.fixture
def name() -> str:
    return f"console-{uuid.uuid4().hex[:8]}"


def stats(broker, topic: str) -> dict:
    return httpx.get(f"{broker.http_url}/admin/v2/persistent/{NS}/{topic}/stats", timeout=10).json()


def test_ring_owners_and_draining_hashes_follow_the_broker(brokers, client_factory, browser, screenshot, name) -> None:
    broker = brokers()
    client = client_factory(broker.url)
    topic = f"persistent://{NS}/{name}"
    # Keys c1 owns alone and c2 takes once it joins: c1 holds them unacked, so their hashes drain.
    moving = keys_owned([(["c1"], "c1"), (["c1", "c2"], "c2")], 3)
    c1 = key_shared(client, topic, "c1")
    producer = client.create_producer(topic, batching_enabled=False)
    for key in moving:
        producer.send(key.encode(), partition_key=key)
    held = [c1.receive(5000) for _ in moving]
    key_shared(client, topic, "c2")

    open_page(browser, broker, f"/sub/persistent/public/default/{name}/key_shared")
    drawn = until(lambda: (r := ring(browser)) and set(r) == {"c1", "c2"} and r, "both consumers on the ring")
    consumers = {c["consumerName"]: c for c in stats(broker, name)["subscriptions"]["key_shared"]["consumers"]}
    assert drawn == {n: sorted(map(tuple, c["keyHashRangeArrays"])) for n, c in consumers.items()}
    expected = Ring(["c1", "c2"])
    for key in [*moving, "other-1", "other-2", "other-3"]:
        slot = ring_slot(key)
        (owner,) = [n for n, spans in drawn.items() if any(a <= slot <= b for a, b in spans)]
        assert owner == expected.owner(key)

    draining = {(ring_slot(key), "c1", "c2") for key in moving}
    until(lambda: draining_markers(browser) == draining, "the draining hashes")
    until(
        lambda: any(
            row.text.split()[:3] == [str(ring_slot(moving[0])), "c2", "c1"]
            for row in browser.find_elements(By.CSS_SELECTOR, "#page table tbody tr")
        ),
        "the draining hash's row: its owner now and the consumer it waits for",
    )

    # Why is moving[0] blocked: the explainer says the hash drains from c1, which holds it.
    browser.find_element(By.ID, "explain-key").send_keys(moving[0])
    browser.find_element(By.CSS_SELECTOR, "#explain button").click()

    def answer() -> tuple[str | None, list[str], str, str]:
        """The explainer's answer as the page shows it: the verdict, the reasons, whom the hash drains
        from and its owner (read in one go: the page redraws the answer at every refresh)."""
        box = browser.find_element(By.ID, "explain-answer")
        return (
            box.find_element(By.CSS_SELECTOR, ".verdict").get_attribute("data-flowing"),
            [li.get_attribute("data-code") for li in box.find_elements(By.TAG_NAME, "li")],
            box.find_element(By.CSS_SELECTOR, "[data-field=draining-from]").text,
            box.find_element(By.CSS_SELECTOR, "[data-field=owner]").text,
        )

    flowing, codes, draining_from, owner = until(
        lambda: browser.find_elements(By.CSS_SELECTOR, "#explain-answer [data-field=draining-from]") and answer(),
        "the explainer's answer",
    )
    assert flowing == "false" and "DRAINING" in codes
    assert "c1" in draining_from and owner.startswith("c2")
    screenshot("subscription")

    for message in held:
        c1.acknowledge(message)
    assert until(lambda: not draining_markers(browser) and ring(browser), "the ring without draining hashes")
    after_next_refresh(
        browser,
        lambda: (
            browser.find_element(By.CSS_SELECTOR, "#explain-answer .verdict").get_attribute("data-flowing") == "true"
        ),
        "the key flowing",
    )

    # c1 leaves: the whole ring is c2's.
    c1.close()
    until(lambda: ring(browser) == {"c2": [(1, 65535)]}, "c2 alone on the whole ring")


def test_classic_mode_shows_the_recently_joined_consumer_and_its_read_position(
    brokers, client_factory, browser, name
) -> None:
    broker = brokers("classic")
    client = client_factory(broker.url)
    topic = f"persistent://{NS}/{name}"
    c1 = key_shared(client, topic, "c1")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(b"v", partition_key=f"k{i}")
    for _ in range(5):
        c1.receive(5000)  # held: the mark-delete position stays behind c2's join position
    key_shared(client, topic, "c2")

    open_page(browser, broker, f"/sub/persistent/public/default/{name}/key_shared")
    joined = stats(broker, name)["subscriptions"]["key_shared"]["consumersAfterMarkDeletePosition"]
    assert joined
    shown = until(
        lambda: {
            row.find_elements(By.TAG_NAME, "td")[0].text: row.find_elements(By.TAG_NAME, "td")[1].text
            for row in browser.find_elements(
                By.XPATH, "//h2[.='Recently joined consumers']/following-sibling::table[1]/tbody/tr"
            )
            if len(row.find_elements(By.TAG_NAME, "td")) == 2
        },
        "the recently joined consumer",
    )
    assert shown == joined
    until(lambda: set(ring(browser)) == {"c1", "c2"}, "both consumers on the ring")
