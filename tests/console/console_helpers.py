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


# The ring's paths and markers are read in one script, between two of the page's redraws: a refresh
# replaces every element of the ring, and reading its ~100 paths one WebDriver command at a time (two
# per path, 30 to 40 ms each measured on 2 busy cores) takes longer than the page's 2 s between redraws, so such
# a read went stale every time and never saw the ring.
_RING = """return Array.from(document.querySelectorAll('#ring path.range'),
                  (p) => [p.dataset.consumer, Number(p.dataset.start), Number(p.dataset.end)]);"""
_DRAINING = """return Array.from(document.querySelectorAll('#ring g.draining'),
                  (g) => [Number(g.dataset.hash), g.dataset.waitsFor, g.dataset.owner]);"""


def ring(browser) -> dict[str, list[tuple[int, int]]]:
    """Each consumer's hash ranges as the ring draws them."""
    drawn: dict[str, list[tuple[int, int]]] = {}
    for consumer, start, end in browser.execute_script(_RING):
        drawn.setdefault(consumer, []).append((start, end))
    return {name: sorted(spans) for name, spans in drawn.items()}


def draining_markers(browser) -> set[tuple[int, str, str]]:
    """(hash, the consumer it waits for, its owner now) of each draining marker on the ring."""
    return {(hash_, waits_for, owner) for hash_, waits_for, owner in browser.execute_script(_DRAINING)}


def confirm(browser, accept: bool = True) -> None:
    """Answers the console's confirmation dialog."""
    until(lambda: browser.find_element(By.ID, "confirm").get_attribute("open") is not None, "the confirmation")
    browser.find_element(By.ID, "confirm-ok" if accept else "confirm-cancel").click()
