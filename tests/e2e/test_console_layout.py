"""The console and the inbox at a phone's width and a desktop's, in Debian's Chromium (issue 52).

At 390x844 a rule that let every table cell break anywhere put key ids, numbers, dates and the
Edit/Revoke buttons one character per line, and the Keys table's visually hidden "Actions" label
escaped its scrolling box so the whole page scrolled sideways. ``docs/operations/console.md``
promises one column, with tables that scroll inside their own box. So on every page, at both
sizes: the page itself never scrolls sideways, and no word or number in a table cell is broken
across lines (each non-space run of a cell's text lies on one line: its range has one line box).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.approving import APPROVER_A, inbox_config, pause_for_approval
from tests.e2e.browser import expect, screenshot, sign_in
from tests.e2e.conftest import Gateway, with_keys
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

ADMIN = "layout-admin-secret"
WAIT_MS = 20_000
SIZES = ((390, 844), (1440, 900))

#: the words (non-space runs) of visible table cells and tiles whose text is laid out on more than one line
BROKEN_WORDS_JS = """() => {
  const broken = [];
  for (const cell of document.querySelectorAll("th, td, .tile-value")) {
    if (!cell.getClientRects().length) continue;  // not shown
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
        if (lines.size > 1) broken.push(match[0]);
      }
    }
  }
  return broken;
}"""
PAGE_SCROLLS_SIDEWAYS_JS = ("(() => { const s = document.scrollingElement; "
                            "return s.scrollWidth > s.clientWidth ? [s.scrollWidth, s.clientWidth] : null; })()")


@pytest.fixture(scope="module")
def busy_gateway(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    """A gateway with something on every page: traffic, a failover, managed keys with budgets and
    an expiry (so the Keys table has Edit and Revoke buttons), audit entries and a paused approval."""
    config = with_keys(inbox_config(fakes, tool_server), admin=ADMIN)
    config += "observability: {rollups: {resolution_s: 1, retention_s: 600}}\n"
    gateway = Gateway(config).start()
    # Set up before the first test's fresh fakes (tests/e2e/conftest.py): replies an earlier module's test left
    # queued (test_sampling.py leaves refusals on ``secondary``) would answer this traffic.
    for fake in fakes.values():
        fake.reset()
    auth = {"authorization": f"Bearer {ADMIN}"}
    for index in range(3):
        made = httpx.post(f"{gateway.url}/admin/keys", headers=auth, timeout=10, json={
            "tenant": "team-a", "name": f"nightly-reconciliation-job-{index}", "models": ["plain", "agent"],
            "rpm": 12000, "tpm": 2500000, "max_concurrent": 64, "expires_at": "2099-12-31T23:59:59Z",
            "budget": {"limit": 1234567, "unit": "tokens", "period": "month"}})
        assert made.status_code in (200, 201), made.text
    client = gateway.client()
    for _ in range(5):
        client.chat.completions.create(model="plain", messages=[{"role": "user", "content": "hi"}])
    fakes["primary"].queue(Reply(status=500), Reply(status=500))
    fakes["secondary"].queue(Reply(text="from the second target", usage=(300, 40)))
    client.chat.completions.create(model="failover", messages=[{"role": "user", "content": "hi"}])
    # A decided approval (a row of the inbox's recent decisions) and one still waiting.
    decided, call_id = pause_for_approval(gateway, fakes, "41")
    fakes["primary"].queue(Reply(text="Deleted."))
    resumed = gateway.post(f"/v1/continuations/{decided}", {"decisions": [
        {"tool_call_id": call_id, "approve": False, "reason": "not this one, it belongs to the 2024 archive"}]})
    assert resumed.status_code == 200, resumed.text
    pause_for_approval(gateway, fakes, "42")
    yield gateway
    gateway.stop()


def check_layout(page: Any, where: str) -> None:
    assert page.evaluate(PAGE_SCROLLS_SIDEWAYS_JS) is None, f"{where}: the page scrolls sideways"
    assert page.evaluate(BROKEN_WORDS_JS) == [], f"{where}: words broken inside a table cell"


def console_tab(browser: Any, gateway: Gateway, width: int, height: int) -> Any:
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.goto(f"{gateway.url}/ui/")
    check_layout(page, f"sign-in at {width}")
    sign_in(page, ADMIN)
    expect(page.locator("#who")).to_be_visible(timeout=WAIT_MS)
    return page


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_every_console_page_fits_without_breaking_words(busy_gateway: Gateway, browser: Any,
                                                        width: int, height: int) -> None:
    page = console_tab(browser, busy_gateway, width, height)
    try:
        expect(page.locator('#routes tr[data-route="plain"]')).to_have_count(1, timeout=WAIT_MS)
        expect(page.locator('#circuits tr[data-target="primary:m1"]')).to_have_count(1, timeout=WAIT_MS)
        expect(page.locator('#failovers tr[data-target="primary:m1"]')).to_have_count(1, timeout=WAIT_MS)
        check_layout(page, f"overview at {width}")
        screenshot(page, f"layout-overview-{width}.png")

        page.goto(f"{busy_gateway.url}/ui/#usage")
        expect(page.locator("#usage-table tbody tr").first).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#budgets tbody tr").first).to_be_visible(timeout=WAIT_MS)
        check_layout(page, f"usage at {width}")
        screenshot(page, f"layout-usage-{width}.png")

        page.goto(f"{busy_gateway.url}/ui/#keys")
        revoke = page.get_by_role("button", name="Revoke nightly-reconciliation-job-0")
        expect(revoke).to_be_visible(timeout=WAIT_MS)
        check_layout(page, f"keys at {width}")
        screenshot(page, f"layout-keys-{width}.png")

        page.goto(f"{busy_gateway.url}/ui/#audit")
        page.locator("#audit-tenant").select_option("team-a")
        page.locator("#audit-form").get_by_role("button", name="Show").click()
        expect(page.locator('#audit-table tr[data-event="key.created"]').first).to_be_visible(timeout=WAIT_MS)
        check_layout(page, f"audit at {width}")
        screenshot(page, f"layout-audit-{width}.png")
    finally:
        page.context.close()


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_the_inbox_fits_without_breaking_words(busy_gateway: Gateway, browser: Any,
                                               width: int, height: int) -> None:
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    try:
        page.goto(f"{busy_gateway.url}/ui/approvals")
        check_layout(page, f"inbox sign-in at {width}")
        sign_in(page, APPROVER_A)
        expect(page.locator("li.card").first).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#decisions tbody tr").first).to_be_visible(timeout=WAIT_MS)
        check_layout(page, f"inbox at {width}")
        screenshot(page, f"layout-inbox-{width}.png")
    finally:
        context.close()
