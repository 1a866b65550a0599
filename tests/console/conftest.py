"""Headless Chromium for the console's tests: the distribution's chromium and chromium-driver
(`make console-browser` installs them), driven with Selenium.

Set MAGNETAR_CONSOLE_SCREENSHOTS to a directory (docs/console) to have the tests save a PNG of each
page they look at, as docs/console.md shows them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMEDRIVER = "/usr/bin/chromedriver"
WINDOW = (1280, 900)


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    driver_path = shutil.which("chromedriver") or CHROMEDRIVER
    if not Path(driver_path).exists():
        pytest.fail("chromedriver not found: run `make console-browser` (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.add_argument("--headless=new")
    # Root in a container has no user namespace for Chromium's sandbox.
    options.add_argument("--no-sandbox")
    options.add_argument("--disable-dev-shm-usage")
    options.add_argument(f"--window-size={WINDOW[0]},{WINDOW[1]}")
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    yield driver
    driver.quit()


@pytest.fixture
def screenshot(browser) -> Callable[[str], None]:
    """Saves the whole page as <name>.png when MAGNETAR_CONSOLE_SCREENSHOTS names a directory."""
    folder = os.environ.get("MAGNETAR_CONSOLE_SCREENSHOTS")

    def take(name: str) -> None:
        if not folder:
            return
        Path(folder).mkdir(parents=True, exist_ok=True)
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(WINDOW[0], min(max(height, WINDOW[1]), 2400))
        browser.execute_script("window.scrollTo(0, 0)")
        browser.save_screenshot(str(Path(folder) / f"{name}.png"))
        browser.set_window_size(*WINDOW)

    return take
