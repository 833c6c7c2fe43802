"""One sign-in for the console and the inbox, an admin key deciding any tenant's approval, and auth off (issue 52).

The console's Approvals tab opens ``/ui/approvals``. That page kept its own session, asked for a
key again and then refused the admin key, while the overview counted paused loops. Now both pages
keep the key in one sessionStorage entry, and the inbox takes an admin key: it lists every
tenant's paused loops (each naming its tenant) and decides them, audited as the admin, the resumed
work charged to the key that asked. With auth off, any string used to sign in to ``/ui/`` as
"approvals only" ("This key is not an admin key"); the page now says auth is off and how to enable
the console, and so does the start-up banner.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.approving import inbox_config, pause_for_approval
from tests.e2e.browser import expect, new_tab, screenshot, sign_in
from tests.e2e.conftest import KEY, OTHER_KEY, Gateway, with_keys
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

ADMIN = "signin-admin-secret"
WAIT_MS = 20_000


@pytest.fixture(scope="module")
def admin_gateway(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    gateway = Gateway(with_keys(inbox_config(fakes, tool_server), admin=ADMIN)).start()
    yield gateway
    gateway.stop()


def as_admin(gateway: Gateway, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, f"{gateway.url}{path}", headers={"authorization": f"Bearer {ADMIN}"},
                         timeout=20, **kwargs)


def asker_usage(gateway: Gateway, key_id: str) -> tuple[int, int]:
    rows = as_admin(gateway, "GET", "/admin/usage", params={"key": key_id}).json()["data"]
    return sum(r["requests"] for r in rows), sum(r["total_tokens"] for r in rows)


def test_admin_signs_in_once_and_decides_another_tenants_approval(
        admin_gateway: Gateway, browser: Any, fakes: dict[str, FakeUpstream],
        tool_server: ToolServer) -> None:
    continuation_id, call_id = pause_for_approval(admin_gateway, fakes, "77", "Remove record 77.", OTHER_KEY)
    # The API first: an admin key lists every tenant's (each item names it), a tenant's key only its own.
    listed = as_admin(admin_gateway, "GET", "/v1/continuations", params={"status": "pending"}).json()
    assert listed["scope"] == "all_tenants"
    (item,) = [i for i in listed["data"] if i["id"] == continuation_id]
    assert item["tenant"] == "team-b"
    asker_id = item["key"]["id"]
    own = httpx.get(f"{admin_gateway.url}/v1/continuations", headers={"authorization": f"Bearer {KEY}"}).json()
    assert "scope" not in own and continuation_id not in {i["id"] for i in own["data"]}
    # On one continuation the admin names the tenant (continuations are kept per tenant).
    unnamed = as_admin(admin_gateway, "POST", f"/v1/continuations/{continuation_id}",
                       json={"decisions": [{"tool_call_id": call_id, "approve": True}]})
    assert unnamed.status_code == 400 and unnamed.json()["error"]["param"] == "tenant"
    wrong = as_admin(admin_gateway, "GET", f"/v1/continuations/{continuation_id}", params={"tenant": "team-a"})
    assert wrong.status_code == 404
    assert as_admin(admin_gateway, "GET", f"/v1/continuations/{continuation_id}",
                    params={"tenant": "team-b"}).json()["status"] == "pending"
    requests_before, tokens_before = asker_usage(admin_gateway, asker_id)

    before = len(tool_server.calls)
    page = new_tab(browser, viewport={"width": 1100, "height": 900})
    try:
        page.goto(f"{admin_gateway.url}/ui/")
        sign_in(page, ADMIN)
        expect(page.locator("#who-text")).to_have_text("Signed in (admin)", timeout=WAIT_MS)
        page.locator("#nav").get_by_role("link", name="Approvals").click()
        # Signed in already: no second sign-in, and the admin key is accepted.
        expect(page.locator("#inbox")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#sign-in")).to_be_hidden()
        expect(page.locator("#who-text")).to_have_text("Signed in (admin: every tenant)", timeout=WAIT_MS)
        shown = page.locator(f'li.card[data-id="{continuation_id}"]')
        expect(shown).to_be_visible(timeout=WAIT_MS)
        expect(shown.locator(".f-tenant")).to_have_text("team-b")
        assert len(tool_server.calls) == before
        screenshot(page, "approvals-inbox-admin.png")
        fakes["primary"].queue(Reply(text="Deleted record 77.", usage=(50, 7)))
        shown.get_by_role("button", name="Approve delete_remote").click()
        expect(shown.locator(".card-note")).to_have_text("Approved; the loop resumed (completed).", timeout=WAIT_MS)
        assert tool_server.calls[before:] == [{"id": "77"}]  # the tool ran, once
        # Audited as the admin; the recent decisions name it too.
        audit = as_admin(admin_gateway, "GET", "/admin/audit", params={"tenant": "team-b"}).json()["data"]
        decided = [e for e in audit if e["tool_call_id"] == call_id and e["event"].startswith("approv")]
        assert decided and decided[0]["key"] == {"id": "admin:ops", "name": "ops"}, audit
        row = page.locator("#decisions tbody tr").filter(has_text="delete_remote").first
        expect(row).to_contain_text("ops", timeout=WAIT_MS)
        # The resumed work is the asker's: its usage grew by the resume, nothing was charged to the admin.
        deadline = time.monotonic() + 20
        while asker_usage(admin_gateway, asker_id)[0] < requests_before + 1:
            assert time.monotonic() < deadline, "the resume never reached the asking key's usage"
            time.sleep(0.05)
        assert asker_usage(admin_gateway, asker_id)[1] >= tokens_before + 57
        by_admin = as_admin(admin_gateway, "GET", "/admin/usage", params={"key": "admin:ops", "tenant": "team-b"})
        assert by_admin.status_code == 200 and by_admin.json()["data"] == [], by_admin.text
        # Back to the console, still signed in; signing out of the inbox signs out of both.
        page.goto(f"{admin_gateway.url}/ui/")
        expect(page.locator("#who-text")).to_have_text("Signed in (admin)", timeout=WAIT_MS)
        page.goto(f"{admin_gateway.url}/ui/approvals")
        expect(page.locator("#inbox")).to_be_visible(timeout=WAIT_MS)
        page.locator("#sign-out").click()
        page.goto(f"{admin_gateway.url}/ui/")
        expect(page.locator("#sign-in")).to_be_visible(timeout=WAIT_MS)
        assert page.evaluate("sessionStorage.length") == 0
        assert page.problems == []  # type: ignore[attr-defined]
    finally:
        page.context.close()


def test_the_banner_names_the_console_and_that_it_is_on(admin_gateway: Gateway) -> None:
    assert f"console: {admin_gateway.url}/ui/ (on: sign in with an admin key; 1 configured)" in admin_gateway.logs()


AUTH_OFF_CONFIG = """
server: {{host: 127.0.0.1, port: __PORT__}}
store: {{url: "memory://"}}
providers:
  primary: {{type: openai, base_url: '{url}', api_key: upstream-primary}}
models:
  plain: {{targets: [{{provider: primary, model: up-model}}]}}
"""


def test_with_auth_off_the_console_says_so_and_how_to_enable_it(fakes: dict[str, FakeUpstream],
                                                                browser: Any) -> None:
    gateway = Gateway(AUTH_OFF_CONFIG.format(url=fakes["primary"].url)).start()
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    try:
        assert f"console: {gateway.url}/ui/ (off: set auth.admin_keys to enable it)" in gateway.logs()
        page.goto(f"{gateway.url}/ui/")
        panel = page.locator("#auth-off")
        expect(panel).to_be_visible(timeout=WAIT_MS)
        expect(panel).to_contain_text("Auth is off")
        expect(panel).to_contain_text("auth.admin_keys")
        expect(page.locator("#sign-in")).to_be_hidden()  # no string "signs in" as approvals only any more
        expect(page.locator("#inbox-only")).to_be_hidden()
        assert "not an admin key" not in page.locator("body").inner_text()
        screenshot(page, "console-auth-off.png")
        panel.get_by_role("link", name="Open the approvals inbox").click()
        expect(page.locator("#auth-off")).to_be_visible(timeout=WAIT_MS)  # the inbox's own note: any string works
    finally:
        context.close()
        gateway.stop()
