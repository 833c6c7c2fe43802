"""The overview's range control and the console's one date format, in Chromium (issue 52).

The overview always spanned 60 minutes (a few minutes of traffic was a sliver) with no control,
and the pages used three date formats. Now *Fit the data* (the default) picks the smallest span
that holds the traffic, a fixed span can be chosen (only those the rollup retention holds), and
every absolute time on the console and in the inbox reads ``YYYY-MM-DD HH:MM UTC``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.browser import expect, sign_in
from tests.e2e.conftest import Gateway, gateway_config, with_keys
from tests.fakes.upstream import FakeUpstream, Reply

ADMIN = "range-admin-secret"
WAIT_MS = 20_000
UTC_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")


@pytest.fixture
def console_gateway(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    config = with_keys(gateway_config(fakes), admin=ADMIN)
    # Two hours kept: 5 min, 15 min and 1 h can be chosen, 6 h and more cannot.
    gw = Gateway(config + "\nobservability: {rollups: {resolution_s: 1, retention_s: 7200}}\n").start()
    yield gw
    gw.stop()


def overview(gw: Gateway, **params: str) -> dict[str, Any]:
    response = httpx.get(f"{gw.url}/admin/console/overview", params=params,
                         headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_range_fits_the_data_and_can_be_chosen(console_gateway: Gateway, browser: Any,
                                                    fakes: dict[str, FakeUpstream]) -> None:
    gw = console_gateway
    client = gw.client()
    fakes["primary"].queue(Reply(status=500), Reply(status=500))  # the failover route moves on: one failover row
    client.chat.completions.create(model="failover", messages=[{"role": "user", "content": "hi"}])
    for _ in range(3):
        client.chat.completions.create(model="plain", messages=[{"role": "user", "content": "hi"}])
    give_up = time.monotonic() + 20
    while overview(gw)["first_traffic_at"] is None:  # the rollup of the traffic's interval is written
        assert time.monotonic() < give_up, "no rollup with the traffic"
        time.sleep(0.2)
    first = overview(gw)["first_traffic_at"]
    assert overview(gw, minutes="1")["first_traffic_at"] in (first, None)

    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    try:
        page.goto(f"{gw.url}/ui/")
        sign_in(page, ADMIN)
        expect(page.locator("#page-overview")).to_be_visible(timeout=WAIT_MS)
        # A minute of traffic: the default range fits it (5 min), not the whole hour.
        select = page.get_by_label("Range")
        expect(select.locator("option").first).to_have_text("Fit the data (5 min)", timeout=WAIT_MS)
        expect(page.locator("#overview-meta")).to_contain_text("Last 5 min", timeout=WAIT_MS)
        expect(page.locator("#overview-meta")).to_contain_text("UTC")
        # Only the spans the retention (2 h) holds can be chosen.
        enabled = page.evaluate("[...document.querySelectorAll('#overview-range option')]"
                                ".filter(o => !o.disabled).map(o => o.value)")
        assert enabled == ["auto", "5", "15", "60"]
        select.select_option("60")
        expect(page.locator("#overview-meta")).to_contain_text("Last 1 h", timeout=WAIT_MS)
        expect(page.locator('#routes tr[data-route="plain"]')).to_have_attribute("data-requests", "3",
                                                                               timeout=WAIT_MS)
        # Every absolute time is YYYY-MM-DD HH:MM UTC: the failovers table, the chart's legend under the cursor.
        failover = page.locator('#failovers tr[data-target="primary:m1"]')
        expect(failover).to_contain_text(UTC_TIME, timeout=WAIT_MS)
        box = page.locator("#chart-rps canvas").first.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] / 2)
        legend_time = page.locator("#chart-rps .u-legend .u-series").first.locator(".u-value")
        expect(legend_time).to_have_text(UTC_TIME, timeout=WAIT_MS)
        expect(page.locator("#chart-rps .u-legend .u-series").first.locator(".u-label")).to_have_text("Time (UTC)")
        # The choice is kept for the session.
        page.reload()
        expect(page.get_by_label("Range")).to_have_value("60", timeout=WAIT_MS)
        expect(page.locator("#overview-meta")).to_contain_text("Last 1 h", timeout=WAIT_MS)
        assert problems == []
    finally:
        context.close()
