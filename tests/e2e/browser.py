"""Debian's Chromium driven by Playwright, and the signed-in tabs the inbox and console tests open.

The ``browser`` fixture (tests/e2e/conftest.py) launches it, one per module. A module that imports
this one is skipped without Playwright; under ``CI=true`` a missing Chromium fails instead of skipping.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, Gateway

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

IN_CI = os.environ.get("CI", "").lower() == "true"
ARTIFACTS = Path(os.environ.get("LOOPGATE_TEST_ARTIFACTS", ROOT / "tests" / "artifacts"))
WAIT_MS = 15_000  # well past the inbox's 2 s poll and 5 s display of a decided card, on a busy CI machine


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "Debian's chromium is not installed (apt-get install -y chromium; .ci/run does it)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return found


def chromium() -> Iterator[Any]:
    """The launched browser, closed at the end: the body of the ``browser`` fixture."""
    # Chromium refuses its sandbox as root (CI runs as root); a container's small /dev/shm crashes tabs.
    args = ["--disable-dev-shm-usage", *(["--no-sandbox"] if os.geteuid() == 0 else [])]
    with playwright_sync.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=args)
        yield launched
        launched.close()


def new_tab(browser: Any, **context_options: Any) -> Any:
    """A tab in a fresh context (its own sessionStorage) that collects console errors and CSP reports in
    ``page.problems``; close it with ``page.context.close()``."""
    context = browser.new_context(**context_options)
    page = context.new_page()
    page.problems = []
    page.on("console", lambda msg: msg.type == "error" and page.problems.append(msg.text))
    page.on("pageerror", lambda exc: page.problems.append(str(exc)))
    return page


def sign_in(page: Any, key: str) -> None:
    """Sign in with the keyboard, as a person would."""
    page.get_by_label("API key").fill(key)
    page.get_by_label("API key").press("Enter")


def open_inbox(browser: Any, gateway: Gateway, key: str, **context_options: Any) -> Any:
    """A new tab on the approvals inbox, signed in with ``key``."""
    page = new_tab(browser, **context_options)
    page.goto(f"{gateway.url}/ui/approvals")
    sign_in(page, key)
    expect(page.locator("#inbox")).to_be_visible(timeout=WAIT_MS)
    return page


def card(page: Any, continuation_id: str) -> Any:
    return page.locator(f'li.card[data-id="{continuation_id}"]')


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path
