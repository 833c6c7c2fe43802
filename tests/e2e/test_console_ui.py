"""The operations console in a real browser: Debian's Chromium driven by Playwright, against two real replicas.

Two gateways share the suite's Redis; traffic goes to replica B and the console is opened on
replica A, so what it shows must have come through the store (the rollups), not from A's own
counters. The numbers on the page are compared with the admin API's; a key made in the console
is used with the OpenAI SDK at once (on the other replica) and refused after it is revoked.
"""

from __future__ import annotations

import csv
import io
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.approving import cleanup, pause_for_approval
from tests.e2e.browser import expect, new_tab, screenshot, sign_in
from tests.e2e.conftest import KEY, Gateway, gateway_config, two_replicas, with_keys
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
ADMIN = "console-admin-secret"
APPROVER = "console-approver-key"
WAIT_MS = 20_000  # rollups every second, the page polls every 2 s: generous for a busy CI machine
BURST = 20
# the failover's second target is priced, so the usage rows carry a cost
SECONDARY_PRICES = "prices: {m2: {input_per_mtok: 10, output_per_mtok: 30}}, "
ROUTING = ("{backoff_base_s: 0.01, backoff_max_s: 0.05, breaker_failures: 2, breaker_cooldown_s: 600, "
           "request_timeout_s: 30}")


def console_config(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> str:
    config = gateway_config(fakes, store_url=REDIS_URL, routing=ROUTING, tool_server=tool_server.url)
    config = config.replace("api_key: upstream-secondary, ", "api_key: upstream-secondary, " + SECONDARY_PRICES)
    assert SECONDARY_PRICES in config
    config = with_keys(config, f"{{key: {APPROVER}, tenant: team-a, role: approver}}", admin=ADMIN)
    return config + """
tenants:
  team-a: {budget: {limit: 1000000, unit: tokens, period: month}}
observability: {rollups: {resolution_s: 1, retention_s: 600}}
"""


@pytest.fixture(scope="module")
def replicas(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[tuple[Gateway, Gateway]]:
    yield from two_replicas(console_config(fakes, tool_server), REDIS_URL)


def admin(gateway: Gateway, path: str, **params: str) -> Any:
    response = httpx.get(f"{gateway.url}{path}", params=params, headers={"authorization": f"Bearer {ADMIN}"},
                         timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def open_console(browser: Any, gateway: Gateway, key: str, **context_options: Any) -> Any:
    """A new tab on the console, signed in with ``key``; it also lists every URL it fetched (``page.requested``)."""
    page = new_tab(browser, **context_options)
    page.requested = []
    page.on("request", lambda request: page.requested.append(request.url))
    page.goto(f"{gateway.url}/ui/")
    sign_in(page, key)
    expect(page.locator("#who")).to_be_visible(timeout=WAIT_MS)
    return page


def until(page: Any, expression: str) -> None:
    """Poll a condition in the page (``wait_for_function`` would need eval, which the page's CSP forbids)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"not true within {WAIT_MS} ms: {expression}"
        page.wait_for_timeout(50)


def traffic(b: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """A burst on ``plain`` and one request on ``failover`` whose first target fails twice (its circuit opens)."""
    client = b.client()
    for _ in range(BURST):
        assert client.chat.completions.create(model="plain", messages=[{"role": "user", "content": "hi"}])
    fakes["primary"].queue(Reply(status=500), Reply(status=500))
    fakes["secondary"].queue(Reply(text="from the second target", usage=(300, 40)))
    answer = client.chat.completions.create(model="failover", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "from the second target"


def test_console_is_served_with_strict_headers(replicas: tuple[Gateway, Gateway]) -> None:
    a, _ = replicas
    page = httpx.get(f"{a.url}/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert page.headers["x-frame-options"] == "DENY" and "set-cookie" not in page.headers
    assert "<script>" not in page.text and not re.search(r"\son[a-z]+\s*=", page.text)
    for asset, kind in (("console.js", "text/javascript"), ("console-charts.js", "text/javascript"),
                        ("console-keys.js", "text/javascript"),
                        ("console.css", "text/css"), ("vendor/uplot.min.js", "text/javascript"),
                        ("vendor/uplot.min.css", "text/css"), ("vendor/uplot.LICENSE.txt", "text/plain")):
        response = httpx.get(f"{a.url}/ui/{asset}")
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind), asset
        assert response.headers["x-content-type-options"] == "nosniff"
    assert "MIT" in httpx.get(f"{a.url}/ui/vendor/uplot.LICENSE.txt").text
    for script in ("console.js", "console-charts.js", "console-keys.js"):
        assert "innerHTML" not in httpx.get(f"{a.url}/ui/{script}").text
    bare = httpx.get(f"{a.url}/ui")
    assert bare.status_code == 308 and str(bare.next_request.url) == f"{a.url}/ui/"
    # The JSON behind the page is for admin keys only.
    for path in ("/admin/console/overview", "/admin/budgets", "/admin/audit?tenant=team-a", "/admin/tenants"):
        for key in (KEY, APPROVER, "nope"):
            denied = httpx.get(f"{a.url}{path}", headers={"authorization": f"Bearer {key}"})
            assert denied.status_code == 401, (path, key)
    # Bad input is a 400 naming the parameter, in the API's error shape.
    auth = {"authorization": f"Bearer {ADMIN}"}
    for path, param in (("/admin/console/overview?minutes=0", "minutes"), ("/admin/console/overview?minutes=x",
                        "minutes"), ("/admin/console/overview?minutes=11", "minutes"), ("/admin/audit", "tenant"),
                        ("/admin/audit?tenant=team-a&from=yesterday", "from"),
                        ("/admin/audit?tenant=team-a&cursor=zz", "cursor")):
        bad = httpx.get(f"{a.url}{path}", headers=auth)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == param, (path, bad.text)
    assert admin(a, "/admin/tenants")["data"] == ["jobs", "team-a", "team-b"]


def test_overview_shows_traffic_failover_and_open_circuit(replicas: tuple[Gateway, Gateway], browser: Any,
                                                          fakes: dict[str, FakeUpstream]) -> None:
    a, b = replicas
    traffic(b, fakes)
    paused, _ = pause_for_approval(b, fakes, "7")  # a loop waiting for a person, paused on the other replica
    page = open_console(browser, a, ADMIN, viewport={"width": 1280, "height": 1000})
    try:
        expect(page.locator("#page-overview")).to_be_visible()
        expect(page.locator("#paused")).to_have_text("team-a: 1 waiting", timeout=WAIT_MS)
        expect(page.locator("#tile-paused")).to_have_text("1")
        plain = page.locator('#routes tr[data-route="plain"]')
        expect(plain).to_have_attribute("data-requests", str(BURST), timeout=WAIT_MS)
        circuit = page.locator('#circuits tr[data-target="primary:m1"]')
        expect(circuit).to_have_attribute("data-state", "open", timeout=WAIT_MS)
        expect(circuit).to_contain_text("server_error")
        failover = page.locator('#failovers tr[data-target="primary:m1"]')
        expect(failover).to_contain_text("server_error", timeout=WAIT_MS)
        expect(page.locator('#circuits tr[data-target="secondary:m2"]')).to_have_attribute("data-state", "closed")
        expect(page.locator("#tile-open")).to_have_text("1")
        assert page.locator("#chart-rps canvas").count() >= 1  # drawn by uPlot, not hand-made markup
        # The page's numbers are the API's: the same window, read from the store.
        overview = admin(a, "/admin/console/overview")
        served = overview["series"]["routes"]["plain"]["requests_per_s"]
        assert round(sum(served) * overview["resolution_s"]) == BURST
        # Added latency (the gateway overhead) per route: the page's window p50/p99 are the API's.
        added = overview["series"]["routes"]["plain"]["overhead_window_ms"]
        assert added["p50"] is not None and 0 < added["p50"] <= added["p99"]
        row_js = "document.querySelector('#routes tr[data-route=\"plain\"]').dataset"
        until(page, f"Number({row_js}.addedP50) === {added['p50']!r} && Number({row_js}.addedP99) === {added['p99']!r}")
        expect(page.locator("#tile-added")).to_have_text(re.compile(r"\d ms$"))
        assert page.locator("#chart-added canvas").count() >= 1
        assert {r.split(":")[0] for r in overview["replicas"]} and len(overview["replicas"]) >= 2
        # Works offline: nothing is fetched from anywhere but this gateway (uPlot is served by it).
        assert all(url.startswith((f"{a.url}/", "data:", "blob:")) for url in page.requested), page.requested
        assert f"{a.url}/ui/vendor/uplot.min.js" in page.requested
        screenshot(page, "console-overview.png")
        page.set_viewport_size({"width": 390, "height": 844})  # a phone: nothing wider than the screen
        # The charts follow the narrower box (uPlot is given the new width after the resize).
        until(page, "document.querySelector('#chart-rps .uplot').getBoundingClientRect().width <= 390")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        screenshot(page, "console-overview-phone.png")
        assert page.problems == []  # type: ignore[attr-defined]
    finally:
        page.context.close()
        cleanup(b, paused)


def test_usage_page_matches_admin_usage(replicas: tuple[Gateway, Gateway], browser: Any,
                                        fakes: dict[str, FakeUpstream]) -> None:
    a, b = replicas
    if not admin(a, "/admin/usage")["data"]:
        traffic(b, fakes)
    page = open_console(browser, a, ADMIN, viewport={"width": 1280, "height": 1000})
    try:
        page.locator('#nav a[data-page="usage"]').focus()  # the keyboard reaches every page
        page.keyboard.press("Enter")
        expect(page.locator("#page-usage")).to_be_visible()
        rows = admin(a, "/admin/usage")["data"]
        assert rows and any(r["cost_usd"] > 0 for r in rows)
        shown = page.locator("#usage-table tbody tr")
        expect(shown).to_have_count(len(rows), timeout=WAIT_MS)
        fields = ("requests", "errors", "prompt_tokens", "completion_tokens", "total_tokens", "cost_usd", "tool_calls")
        for index, expected in enumerate(rows):
            row = shown.nth(index)
            assert row.get_attribute("data-date") == expected["date"]
            assert row.get_attribute("data-tenant") == expected["tenant"]
            for field in fields:
                assert float(row.get_attribute(f"data-{field}")) == pytest.approx(expected[field])
        total = page.locator('#usage-table tfoot [data-sum="total_tokens"]')
        assert int(total.get_attribute("data-value")) == sum(r["total_tokens"] for r in rows)
        # Filter to one tenant: the table follows the API's answer for that tenant.
        page.locator("#usage-tenant").select_option("team-a")
        page.locator("#usage-form").get_by_role("button", name="Show").click()
        team_a = admin(a, "/admin/usage", tenant="team-a")["data"]
        expect(shown).to_have_count(len(team_a), timeout=WAIT_MS)
        with page.expect_download() as download:
            page.get_by_role("button", name="Export CSV").click()
        exported = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text(encoding="utf-8"))))
        assert [(r["date"], r["tenant"], int(r["total_tokens"])) for r in exported] == \
            [(r["date"], r["tenant"], r["total_tokens"]) for r in team_a]
        # Split by route and model, then one route: the table, the chart and the CSV follow the API's answer.
        page.locator("#usage-group").select_option("route,model")
        page.locator("#usage-form").get_by_role("button", name="Show").click()
        split = admin(a, "/admin/usage", tenant="team-a", group_by="route,model")["data"]
        assert {r["model"] for r in split} >= {"secondary:m2"}  # the failover's answering target
        expect(shown).to_have_count(len(split), timeout=WAIT_MS)
        expect(page.locator("#usage-chart-title")).to_have_text("Tokens per day, per route and model")
        for index, expected in enumerate(split):
            row = shown.nth(index)
            assert (row.get_attribute("data-route"), row.get_attribute("data-model")) == \
                (expected["route"], expected["model"])
            for field in fields:
                assert float(row.get_attribute(f"data-{field}")) == pytest.approx(expected[field])
        route = split[0]["route"]
        page.locator("#usage-route").select_option(route)
        page.locator("#usage-form").get_by_role("button", name="Show").click()
        one_route = admin(a, "/admin/usage", tenant="team-a", route=route, group_by="route,model")["data"]
        expect(shown).to_have_count(len(one_route), timeout=WAIT_MS)
        expect(page.locator("#usage-table tbody tr").first).to_have_attribute("data-route", route)
        with page.expect_download() as download:
            page.get_by_role("button", name="Export CSV").click()
        exported = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text(encoding="utf-8"))))
        assert [(r["date"], r["route"], r["model"], int(r["total_tokens"]), float(r["cost_usd"])) for r in exported] \
            == [(r["date"], r["route"], r["model"], r["total_tokens"], r["cost_usd"]) for r in one_route]
        page.locator("#usage-route").select_option("")
        page.locator("#usage-group").select_option("")
        page.locator("#usage-form").get_by_role("button", name="Show").click()
        expect(shown).to_have_count(len(team_a), timeout=WAIT_MS)
        # The tenant's budget: what is left is the limit less this month's tokens.
        (budget,) = admin(a, "/admin/budgets", tenant="team-a")["data"]
        month = admin(a, "/admin/usage", tenant="team-a")["data"]
        assert budget["spent"] == sum(r["total_tokens"] for r in month)
        left = page.locator('#budgets tbody tr[data-key-id=""]')
        expect(left).to_have_count(1, timeout=WAIT_MS)
        assert float(left.get_attribute("data-remaining")) == budget["remaining"] == budget["limit"] - budget["spent"]
        assert page.locator("#chart-usage canvas").count() >= 1
        screenshot(page, "console-usage.png")
        assert page.problems == []  # type: ignore[attr-defined]
    finally:
        page.context.close()


def test_a_key_made_in_the_console_works_at_once_and_stops_after_revoke(
        replicas: tuple[Gateway, Gateway], browser: Any) -> None:
    a, b = replicas
    page = open_console(browser, a, ADMIN, viewport={"width": 1280, "height": 1000})
    try:
        page.goto(f"{a.url}/ui/#keys")
        expect(page.locator("#page-keys")).to_be_visible(timeout=WAIT_MS)
        page.get_by_role("button", name="Create a key").click()
        form = page.locator("#key-form")
        form.get_by_role("textbox", name="Tenant").fill("team-c")
        form.get_by_role("textbox", name="Name").fill("made-in-console")
        form.get_by_label("Routes (comma-separated, empty: all)").fill("plain")
        form.get_by_label("Requests/min").fill("600")
        form.get_by_role("button", name="Create", exact=True).click()
        secret_box = page.locator("#secret-value")
        expect(secret_box).to_have_text(re.compile(r"\S{20,}"), timeout=WAIT_MS)
        secret = secret_box.text_content()
        assert secret
        page.context.grant_permissions(["clipboard-read", "clipboard-write"])
        page.get_by_role("button", name="Copy").click()
        expect(page.locator("#secret-copied")).not_to_have_text("")
        screenshot(page, "console-keys.png")
        # At once, on the other replica too (an unknown secret is looked up in the store before a 401).
        made = b.client(key=secret).chat.completions.create(model="plain", messages=[{"role": "user", "content": "x"}])
        assert made.choices[0].message.content
        listed = [k for k in admin(a, "/admin/keys", tenant="team-c")["data"] if k["name"] == "made-in-console"]
        assert len(listed) == 1 and listed[0]["rpm"] == 600 and listed[0]["models"] == ["plain"]
        key_id = listed[0]["id"]

        row = page.locator(f'#keys-table tr[data-id="{key_id}"]')
        row.get_by_role("button", name="Edit made-in-console").click()
        form.get_by_label("Tokens/min").fill("50000")
        form.get_by_role("button", name="Save").click()
        expect(page.locator("#status")).to_have_text("Key saved.", timeout=WAIT_MS)
        assert admin(a, f"/admin/keys/{key_id}")["tpm"] == 50000

        page.once("dialog", lambda dialog: dialog.accept())
        row.get_by_role("button", name="Revoke made-in-console").click()
        expect(row).to_have_attribute("data-status", "revoked", timeout=WAIT_MS)
        with pytest.raises(openai.AuthenticationError):
            a.client(key=secret).chat.completions.create(model="plain", messages=[{"role": "user", "content": "x"}])
        # The other replica polls the key generation (within a second; on a busy machine, later).
        deadline = time.monotonic() + 30
        while True:
            try:
                b.client(key=secret).chat.completions.create(model="plain", messages=[{"role": "user", "content": "x"}])
            except openai.AuthenticationError:
                break
            assert time.monotonic() < deadline, "the revoke never reached the other replica"
            time.sleep(0.02)

        # The audit page shows both changes, made by the admin key.
        page.goto(f"{a.url}/ui/#audit")
        page.locator("#audit-tenant").select_option("team-c")
        page.locator("#audit-form").get_by_role("button", name="Show").click()
        events = page.locator("#audit-table tbody tr")
        expect(page.locator('#audit-table tr[data-event="key.revoked"]')).to_have_count(1, timeout=WAIT_MS)
        expect(page.locator('#audit-table tr[data-event="key.created"]')).to_have_count(1)
        assert events.count() == len(admin(a, "/admin/audit", tenant="team-c")["data"])
        page.locator("#audit-event").select_option("key.revoked")
        expect(events).to_have_count(1)
        screenshot(page, "console-audit.png")
        assert page.problems == []  # type: ignore[attr-defined]
    finally:
        page.context.close()


def test_a_key_with_expiry_and_headless_made_in_the_console(
        replicas: tuple[Gateway, Gateway], browser: Any) -> None:
    """Every field the admin API takes is in the form; the API's own validation message is shown as text."""
    a, _ = replicas
    page = open_console(browser, a, ADMIN, viewport={"width": 1280, "height": 1000})
    try:
        page.goto(f"{a.url}/ui/#keys")
        expect(page.locator("#page-keys")).to_be_visible(timeout=WAIT_MS)
        page.get_by_role("button", name="Create a key").click()
        form = page.locator("#key-form")
        form.get_by_role("textbox", name="Tenant").fill("team-d")
        form.get_by_role("textbox", name="Name").fill("expiring-headless")
        expires = form.get_by_role("textbox", name="Expires at")
        error = page.locator("#key-form-error")
        for wrong, says in (("next tuesday", "expires_at"), ("2020-01-01T00:00:00Z", "in the past")):
            expires.fill(wrong)
            form.get_by_role("button", name="Create", exact=True).click()
            expect(error).to_be_visible(timeout=WAIT_MS)
            expect(error).to_contain_text(says)
        assert [k for k in admin(a, "/admin/keys", tenant="team-d")["data"]] == []
        expires.fill("2099-06-30T12:00:00+02:00")
        form.get_by_role("checkbox", name=re.compile("Headless")).check()
        form.get_by_role("button", name="Create", exact=True).click()
        expect(page.locator("#secret-value")).to_have_text(re.compile(r"\S{20,}"), timeout=WAIT_MS)
        (made,) = admin(a, "/admin/keys", tenant="team-d")["data"]
        assert made["expires_at"] == "2099-06-30T10:00:00Z" and made["headless"] is True
        row = page.locator(f'#keys-table tr[data-id="{made["id"]}"]')
        expect(row).to_have_attribute("data-expires-at", "2099-06-30T10:00:00Z", timeout=WAIT_MS)
        expect(row).to_have_attribute("data-headless", "true")

        # Edit: the form shows both; clearing them is sent as such.
        row.get_by_role("button", name="Edit expiring-headless").click()
        expect(expires).to_have_value("2099-06-30T10:00:00Z")
        headless = form.get_by_role("checkbox", name=re.compile("Headless"))
        expect(headless).to_be_checked()
        headless.uncheck()
        expires.fill("")
        form.get_by_role("button", name="Save").click()
        expect(page.locator("#status")).to_have_text("Key saved.", timeout=WAIT_MS)
        edited = admin(a, f"/admin/keys/{made['id']}")
        assert edited["expires_at"] is None and edited["headless"] is False
        # the browser logs the two refused creates (400), and nothing else went wrong
        problems = page.problems  # type: ignore[attr-defined]
        assert len(problems) == 2 and all("status of 400" in problem for problem in problems), problems
    finally:
        page.context.close()


def test_an_approver_key_sees_only_the_inbox(replicas: tuple[Gateway, Gateway], browser: Any) -> None:
    a, _ = replicas
    page = open_console(browser, a, APPROVER, viewport={"width": 1100, "height": 800})
    try:
        expect(page.locator("#inbox-only")).to_be_visible()
        expect(page.locator("#who-text")).to_have_text("Signed in (approvals only)")
        for name in ("overview", "usage", "keys", "audit"):
            expect(page.locator(f'#nav a[data-page="{name}"]')).to_be_hidden()
            expect(page.locator(f"#page-{name}")).to_be_hidden()
        page.goto(f"{a.url}/ui/#keys")  # asking for a page by its address does not open it either
        expect(page.locator("#inbox-only")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#page-keys")).to_be_hidden()
        page.get_by_role("link", name="Open the approvals inbox").click()
        expect(page.locator("#inbox")).to_be_visible(timeout=WAIT_MS)  # signed in there already (same tab)
        screenshot(page, "console-approver.png")
    finally:
        page.context.close()
