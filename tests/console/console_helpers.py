"""What the console's tests share: opening a page and waiting, within a bound, for what it shows."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By

WAIT_S = 30


def until(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """The first truthy result of `check`; fails naming `what` (and the last result) at the deadline.
    A page redraws itself every refresh, so an element found a moment ago may be gone: try again."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = check()
        except StaleElementReferenceException:
            last = None
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"the console did not show {what} within {timeout_s} s; last seen: {last!r}")
        time.sleep(0.1)


def open_page(browser, broker, fragment: str) -> None:
    browser.get(f"{broker.http_url}/#{fragment}")
    until(lambda: int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes") or 0) > 0, "a refresh")


def refreshes(browser) -> int:
    return int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes") or 0)


def after_next_refresh(browser, check: Callable[[], Any], what: str) -> Any:
    """`check` once the page has read the broker again after now."""
    seen = refreshes(browser)
    return until(lambda: refreshes(browser) > seen and check(), what)


def ring(browser) -> dict[str, list[tuple[int, int]]]:
    """Each consumer's hash ranges as the ring draws them."""
    drawn: dict[str, list[tuple[int, int]]] = {}
    for path in browser.find_elements(By.CSS_SELECTOR, "#ring path.range"):
        drawn.setdefault(path.get_attribute("data-consumer"), []).append(
            (int(path.get_attribute("data-start")), int(path.get_attribute("data-end")))
        )
    return {name: sorted(spans) for name, spans in drawn.items()}


def draining_markers(browser) -> set[tuple[int, str, str]]:
    """(hash, the consumer it waits for, its owner now) of each draining marker on the ring."""
    return {
        (int(g.get_attribute("data-hash")), g.get_attribute("data-waits-for"), g.get_attribute("data-owner"))
        for g in browser.find_elements(By.CSS_SELECTOR, "#ring g.draining")
    }


def confirm(browser, accept: bool = True) -> None:
    """Answers the console's confirmation dialog."""
    until(lambda: browser.find_element(By.ID, "confirm").get_attribute("open") is not None, "the confirmation")
    browser.find_element(By.ID, "confirm-ok" if accept else "confirm-cancel").click()
