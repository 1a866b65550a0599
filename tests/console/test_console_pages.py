"""The console's pages and actions in headless Chromium against a broker process: what they show is
what the admin API and /metrics say, each action changes the broker only once confirmed, the setting
turns the console off, and with authentication on the page works with the token typed into it."""

from __future__ import annotations

import base64
import uuid

import httpx
import pulsar
import pytest
from selenium.webdriver.common.by import By

from console.console_helpers import after_next_refresh, confirm, open_page, until
from security_helpers import token

NS = "public/default"
SECRET = b"magnetar-console-secret-key-32by"
PREFIX = "org.apache.pulsar.broker.authentication."


@pytest.fixture
def name() -> str:
    return f"console-{uuid.uuid4().hex[:8]}"


def admin(broker) -> httpx.Client:
    return httpx.Client(base_url=f"{broker.http_url}/admin/v2/persistent/{NS}", timeout=10)


def field(browser, name: str) -> str:
    return browser.find_element(By.CSS_SELECTOR, f"[data-field={name}]").text


def test_overview_namespaces_and_topic_pages_show_the_brokers_figures(
    module_broker, client_factory, browser, screenshot, name
) -> None:
    client = client_factory(module_broker.url)
    topic = f"persistent://{NS}/{name}"
    consumer = client.subscribe(topic, "readers", consumer_type=pulsar.ConsumerType.Shared, consumer_name="reader-1")
    producer = client.create_producer(topic, producer_name="writer-1", batching_enabled=False)
    for i in range(7):
        producer.send(f"message {i}".encode(), partition_key=f"k{i}", properties={"n": str(i)})
    consumer.receive(5000)

    open_page(browser, module_broker, "/")
    metrics = httpx.get(f"{module_broker.http_url}/metrics", timeout=10).text
    producers = sum(
        float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("pulsar_producers_count{")
    )
    assert until(lambda: field(browser, "producers") == str(int(producers)), "the producers")
    # The module's other clients may come and go: at least this test's one connection is open.
    assert until(lambda: field(browser, "connections") not in ("", "–", "0"), "the open connections")
    until(lambda: (field(browser, "cluster"), field(browser, "mode")) == ("standalone", "pip379"), "the cluster")
    screenshot("overview")

    open_page(browser, module_broker, "/tenants")
    until(lambda: browser.find_elements(By.LINK_TEXT, NS), "public/default")
    screenshot("tenants")
    browser.find_element(By.LINK_TEXT, NS).click()
    link = until(lambda: browser.find_elements(By.CSS_SELECTOR, f"a[data-topic='{topic}']"), "the topic")[0]
    screenshot("namespace")
    link.click()
    until(lambda: "writer-1" in browser.find_element(By.ID, "page").text, "the producer")
    stats = admin(module_broker).get(f"/{name}/stats").json()
    after_next_refresh(browser, lambda: field(browser, "messages-in") == str(stats["msgInCounter"]), "messages in")
    assert stats["subscriptions"]["readers"]["msgBacklog"] == 7
    until(
        lambda: "reader-1" in browser.find_element(By.ID, "page").text and field(browser, "backlog") == "7",
        "the consumer and the backlog",
    )

    # Peek: the subscription's first unacknowledged messages, as the peek endpoint answers them.
    browser.find_element(By.ID, "peek-count").clear()
    browser.find_element(By.ID, "peek-count").send_keys("3")
    browser.find_element(By.CSS_SELECTOR, "#peek button").click()
    # The peek's table is drawn once, when its answers are in (refreshes leave it alone).
    peeked = until(lambda: browser.find_elements(By.CSS_SELECTOR, "#peek-result tbody tr"), "the peeked messages")
    assert len(peeked) == 3
    assert [row.find_elements(By.TAG_NAME, "td")[1].text for row in peeked] == ["k0", "k1", "k2"]
    assert peeked[2].find_elements(By.TAG_NAME, "td")[-1].text == "message 2"
    screenshot("topic")


def test_actions_change_the_broker_once_confirmed(module_broker, client_factory, browser, name) -> None:
    http = admin(module_broker)
    open_page(browser, module_broker, "/ns/public/default")
    browser.find_element(By.ID, "create-topic-name").send_keys(name)
    browser.find_element(By.CSS_SELECTOR, "#create-topic button").click()
    confirm(browser, accept=False)
    assert http.get(f"/{name}/stats").status_code == 404
    browser.find_element(By.CSS_SELECTOR, "#create-topic button").click()
    confirm(browser)
    until(lambda: http.get(f"/{name}/stats").status_code == 200, "the topic created")

    client = client_factory(module_broker.url)
    topic = f"persistent://{NS}/{name}"
    client.subscribe(topic, "work", consumer_type=pulsar.ConsumerType.Shared).close()
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(10):
        producer.send(b"x")
    producer.close()
    backlog = lambda: http.get(f"/{name}/stats").json()["subscriptions"]["work"]["msgBacklog"]  # noqa: E731
    assert backlog() == 10

    open_page(browser, module_broker, f"/sub/persistent/public/default/{name}/work")
    browser.find_element(By.ID, "skip-count").clear()
    browser.find_element(By.ID, "skip-count").send_keys("3")
    browser.find_element(By.ID, "skip").click()
    confirm(browser)
    until(lambda: backlog() == 7, "three messages skipped")
    browser.find_element(By.ID, "clear-backlog").click()
    confirm(browser)
    until(lambda: backlog() == 0, "the backlog cleared")
    assert until(lambda: field(browser, "backlog") == "0", "the page's backlog at 0")
    browser.find_element(By.ID, "reset-minutes").clear()
    browser.find_element(By.ID, "reset-minutes").send_keys("0")
    browser.find_element(By.ID, "reset-cursor").click()
    confirm(browser)
    until(lambda: backlog() == 10, "the cursor reset to the earliest message")

    open_page(browser, module_broker, f"/topic/persistent/public/default/{name}")
    browser.find_element(By.ID, "unload").click()
    confirm(browser)
    until(lambda: "Unloaded" in browser.find_element(By.ID, "banner").text, "the unload done")
    browser.find_element(By.ID, "delete-topic").click()
    confirm(browser)
    until(lambda: http.get(f"/{name}/stats").status_code == 404, "the topic deleted")


def test_the_console_can_be_turned_off(broker_factory) -> None:
    broker = broker_factory(consoleEnabled="false")
    assert httpx.get(f"{broker.http_url}/", timeout=10).status_code == 404
    assert httpx.get(f"{broker.http_url}/console/console.js", timeout=10).status_code == 404
    assert httpx.get(f"{broker.http_url}/admin/v2/tenants", timeout=10).status_code == 200


def test_with_authentication_the_pages_use_the_token_typed_in(module_broker_factory, browser, screenshot) -> None:
    broker = module_broker_factory(
        authenticationEnabled="true",
        authenticationProviders=f"{PREFIX}AuthenticationProviderToken",
        tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
        authorizationEnabled="true",
        superUserRoles="admin",
    )
    page = httpx.get(f"{broker.http_url}/", timeout=10)
    assert page.status_code == 200 and "magnetar console" in page.text
    assert "Content-Security-Policy" in page.headers
    assert httpx.get(f"{broker.http_url}/admin/v2/tenants", timeout=10).status_code == 401

    browser.get(f"{broker.http_url}/#/tenants")
    until(lambda: browser.find_element(By.ID, "signin").is_displayed(), "the sign-in form")
    assert "401" in until(lambda: browser.find_element(By.ID, "banner").text, "the refusal")
    screenshot("signin")
    # A role that is no super user is refused the tenants' list, as over HTTP.
    browser.find_element(By.ID, "signin-token").send_keys(token(SECRET, "someone"))
    browser.find_element(By.CSS_SELECTOR, "#signin button").click()
    until(lambda: "super-user" in browser.find_element(By.ID, "banner").text, "the 401 for a non-super-user")
    browser.find_element(By.ID, "signin-token").send_keys(token(SECRET, "admin"))
    browser.find_element(By.CSS_SELECTOR, "#signin button").click()
    until(lambda: browser.find_elements(By.LINK_TEXT, NS), "the namespaces with the admin's token")
    assert not browser.find_element(By.ID, "signin").is_displayed()
    browser.find_element(By.ID, "signout").click()
    until(lambda: browser.find_element(By.ID, "signin").is_displayed(), "the sign-in form again")
