"""The approvals inbox in a real browser: Debian's Chromium driven by Playwright, against a real gateway.

A client pauses through the OpenAI SDK on a tool that needs approval; a person signed in to
``/ui/approvals`` with an approver key sees it (arguments, context), approves or denies it, and
the loop goes on. The fake tool server counts executions, the fake upstream records what the
model was told, and nothing here reloads the page: the list must update by itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.approving import APPROVER_A, APPROVER_B, REDIS_URL, cleanup, inbox_config, pause_for_approval
from tests.e2e.browser import WAIT_MS, card, expect, open_inbox, screenshot
from tests.e2e.conftest import Gateway, two_replicas
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

HOSTILE = 'Delete record 42 <img src=x id="pwned"> <script>window.pwned=1</script>'


@pytest.fixture(scope="module")
def ui_gateway(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    gateway = Gateway(inbox_config(fakes, tool_server)).start()
    yield gateway
    gateway.stop()


@pytest.fixture
def pair(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[tuple[Gateway, Gateway]]:
    yield from two_replicas(inbox_config(fakes, tool_server, store_url=REDIS_URL), REDIS_URL)


def test_page_is_served_with_strict_headers(ui_gateway: Gateway) -> None:
    page = httpx.get(f"{ui_gateway.url}/ui/approvals")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in page.text and not re.search(r"\son[a-z]+\s*=", page.text)  # no inline handlers
    for asset, kind in (("approvals.js", "text/javascript"), ("approvals.css", "text/css")):
        response = httpx.get(f"{ui_gateway.url}/ui/approvals/{asset}")
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind)
        assert response.headers["x-content-type-options"] == "nosniff"
        again = httpx.get(f"{ui_gateway.url}/ui/approvals/{asset}", headers={"if-none-match": response.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
    assert "innerHTML" not in httpx.get(f"{ui_gateway.url}/ui/approvals/approvals.js").text
    head = httpx.head(f"{ui_gateway.url}/ui/approvals")
    assert head.status_code == 200 and head.content == b"" and head.headers["x-frame-options"] == "DENY"
    posted = httpx.post(f"{ui_gateway.url}/ui/approvals", content=b"x")
    assert posted.status_code == 405 and posted.json()["error"]["type"] == "invalid_request_error"
    slash = httpx.get(f"{ui_gateway.url}/ui/approvals/")
    assert slash.status_code == 308 and str(slash.next_request.url) == f"{ui_gateway.url}/ui/approvals"


def test_polled_listing_answers_304_when_unchanged(ui_gateway: Gateway) -> None:
    headers = {"authorization": f"Bearer {APPROVER_A}"}
    first = httpx.get(f"{ui_gateway.url}/v1/continuations?status=paused&limit=5", headers=headers)
    assert first.status_code == 200, first.text
    tag = first.headers["etag"]
    again = httpx.get(f"{ui_gateway.url}/v1/continuations?status=paused&limit=5",
                      headers={**headers, "if-none-match": tag})
    assert again.status_code == 304 and again.content == b""
    stranger = httpx.get(f"{ui_gateway.url}/v1/continuations?status=paused&limit=5",
                         headers={"authorization": "Bearer nope", "if-none-match": tag})
    assert stranger.status_code == 401  # a tag never stands in for authentication


def test_approve_in_the_browser_runs_the_tool_once(ui_gateway: Gateway, browser: Any,
                                                   fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    before = len(tool_server.calls)
    continuation_id, call_id = pause_for_approval(ui_gateway, fakes, "42", user=HOSTILE)
    page = open_inbox(browser, ui_gateway, APPROVER_A, viewport={"width": 1100, "height": 900})
    try:
        shown = card(page, continuation_id)
        expect(shown).to_be_visible(timeout=WAIT_MS)
        expect(shown.locator(".card-title")).to_have_text("delete_remote")
        expect(shown.locator("pre.args")).to_have_text('{\n  "id": "42"\n}')
        expect(shown.locator(".f-route")).to_have_text("agent")
        expect(shown.locator(".f-key")).to_have_text("billing-bot")  # the asking key's name
        expect(shown.locator(".ctx-assistant")).to_have_text("I will delete record 42.")
        # The caller's hostile text is shown as text: no element from it, no script run.
        expect(shown.locator(".ctx-user")).to_have_text(HOSTILE)
        assert page.locator("#pwned").count() == 0 and page.evaluate("window.pwned") is None
        assert len(tool_server.calls) == before  # nothing runs before a person decides
        screenshot(page, "approvals-inbox.png")
        page.set_viewport_size({"width": 390, "height": 844})  # a phone: one column, nothing cut off
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        screenshot(page, "approvals-inbox-phone.png")
        page.set_viewport_size({"width": 1100, "height": 900})

        fakes["primary"].queue(Reply(text="Deleted record 42."))
        shown.get_by_role("button", name="Approve delete_remote").click()
        # The click is the way-B resume: its answer is the finished loop.
        expect(shown.locator(".card-note")).to_have_text("Approved; the loop resumed (completed).", timeout=WAIT_MS)
        assert tool_server.calls[before:] == [{"id": "42"}]
        told = [m for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool"]
        assert told[-1]["content"] == "deleted 42"
        # At most once: the client's own way-B resume of the same call is now a conflict, nothing reruns.
        late = ui_gateway.post(f"/v1/continuations/{continuation_id}",
                               {"decisions": [{"tool_call_id": call_id, "approve": True}]})
        assert late.status_code in (404, 409)
        assert len(tool_server.calls) == before + 1
        # The decision appears under recent decisions, with who made it; the card leaves the list.
        row = page.locator("#decisions tbody tr").filter(has_text="delete_remote").first
        expect(row).to_contain_text("alice", timeout=WAIT_MS)
        expect(row).to_contain_text("approv")
        expect(shown).to_have_count(0, timeout=WAIT_MS)
        assert page.problems == []  # type: ignore[attr-defined]
    finally:
        page.context.close()
        cleanup(ui_gateway, continuation_id)


def test_deny_with_a_reason_reaches_the_model(ui_gateway: Gateway, browser: Any, fakes: dict[str, FakeUpstream],
                                              tool_server: ToolServer) -> None:
    before = len(tool_server.calls)
    continuation_id, _ = pause_for_approval(ui_gateway, fakes, "7")
    page = open_inbox(browser, ui_gateway, APPROVER_A)
    try:
        shown = card(page, continuation_id)
        expect(shown).to_be_visible(timeout=WAIT_MS)
        fakes["primary"].queue(Reply(text="Understood, record 7 stays."))
        # Keyboard only: the reason field is labelled, and Enter in it denies.
        reason = shown.get_by_label("Reason (sent to the model when denied)")
        reason.focus()
        page.keyboard.type("record 7 is still referenced by invoices")
        screenshot(page, "approvals-inbox-deny.png")  # docs/approvals-inbox.png's scene: a pending call, past decisions
        page.keyboard.press("Tab")
        expect(shown.get_by_role("button", name="Approve delete_remote")).to_be_focused()
        page.keyboard.press("Tab")
        expect(shown.get_by_role("button", name="Deny delete_remote")).to_be_focused()
        page.keyboard.press("Enter")
        expect(shown.locator(".card-note")).to_contain_text("Denied", timeout=WAIT_MS)
        assert len(tool_server.calls) == before
        result = [m for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool"][-1]["content"]
        assert "record 7 is still referenced by invoices" in result
        row = page.locator("#decisions tbody tr").filter(has_text="invoices").first
        expect(row).to_contain_text("alice", timeout=WAIT_MS)
        assert page.problems == []  # type: ignore[attr-defined]
    finally:
        page.context.close()
        cleanup(ui_gateway, continuation_id)


def test_several_calls_in_one_turn_are_decided_together(ui_gateway: Gateway, browser: Any,
                                                        fakes: dict[str, FakeUpstream],
                                                        tool_server: ToolServer) -> None:
    before = len(tool_server.calls)
    fakes["primary"].queue(Reply(tool_calls=[("delete_remote", {"id": "1"}), ("delete_remote", {"id": "2"})]))
    paused = ui_gateway.client().chat.completions.create(model="agent", messages=[{"role": "user", "content": "go"}])
    continuation_id = paused.model_extra["gateway"]["continuation_id"]
    page = open_inbox(browser, ui_gateway, APPROVER_A)
    try:
        shown = card(page, continuation_id)
        expect(shown.locator(".card-title")).to_have_text("2 tools: delete_remote, delete_remote", timeout=WAIT_MS)
        calls = shown.locator(".call")
        send = shown.get_by_role("button", name="Send decisions")
        expect(send).to_be_disabled()
        calls.nth(0).get_by_role("button", name="Approve delete_remote").click()
        expect(send).to_be_disabled()  # one call still undecided: nothing is sent yet
        assert len(tool_server.calls) == before
        calls.nth(1).get_by_role("button", name="Deny delete_remote").click()
        calls.nth(1).get_by_label("Reason (sent to the model when denied)").fill("keep record 2")  # after Deny
        fakes["primary"].queue(Reply(text="Deleted 1, kept 2."))
        send.click()
        expect(shown.locator(".card-note")).to_have_text("Decided; the loop resumed (completed).", timeout=WAIT_MS)
        assert tool_server.calls[before:] == [{"id": "1"}]
        results = [m["content"] for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool"]
        assert results[0] == "deleted 1" and "keep record 2" in results[1]
    finally:
        page.context.close()
        cleanup(ui_gateway, continuation_id)


def test_a_timed_out_approval_cannot_be_approved(ui_gateway: Gateway, browser: Any, fakes: dict[str, FakeUpstream],
                                                tool_server: ToolServer) -> None:
    before = len(tool_server.calls)
    fakes["primary"].queue(Reply(tool_calls=[("delete_soon", {"id": "5"})]))
    paused = ui_gateway.client().chat.completions.create(model="agent_soon",
                                                         messages=[{"role": "user", "content": "go"}])
    continuation_id = paused.model_extra["gateway"]["continuation_id"]
    page = open_inbox(browser, ui_gateway, APPROVER_A)
    try:
        shown = card(page, continuation_id)
        expect(shown).to_be_visible(timeout=WAIT_MS)
        expect(shown.locator(".call-status")).to_have_text("Approval timed out: this call counts as denied.",
                                                           timeout=WAIT_MS)
        expect(shown.get_by_role("button", name="Approve delete_soon")).to_be_disabled()
        # Deny stays: it resumes the loop now, and the model is told the approval timed out.
        fakes["primary"].queue(Reply(text="Not deleted."))
        shown.get_by_role("button", name="Deny delete_soon").click()
        expect(shown.locator(".card-note")).to_have_text("Denied; the loop resumed (completed).", timeout=WAIT_MS)
        result = [m for m in fakes["primary"].bodies[-1]["messages"] if m["role"] == "tool"][-1]["content"]
        assert "approval timed out" in result
        assert len(tool_server.calls) == before
    finally:
        page.context.close()
        cleanup(ui_gateway, continuation_id)


def test_another_tenants_approver_sees_nothing(ui_gateway: Gateway, browser: Any,
                                               fakes: dict[str, FakeUpstream]) -> None:
    continuation_id, _ = pause_for_approval(ui_gateway, fakes, "99")
    own = open_inbox(browser, ui_gateway, APPROVER_A)
    other = open_inbox(browser, ui_gateway, APPROVER_B)
    try:
        expect(card(own, continuation_id)).to_be_visible(timeout=WAIT_MS)
        expect(other.locator("#status")).to_contain_text("Updated", timeout=WAIT_MS)
        expect(other.locator("#count")).to_have_text("0")
        assert other.locator("li.card").count() == 0
        expect(other.locator("#empty")).to_be_visible()
        assert "delete_remote" not in other.locator("main").inner_text()
    finally:
        own.context.close()
        other.context.close()
        cleanup(ui_gateway, continuation_id)


def test_the_list_updates_without_a_reload(ui_gateway: Gateway, browser: Any, fakes: dict[str, FakeUpstream],
                                           tool_server: ToolServer) -> None:
    page = open_inbox(browser, ui_gateway, APPROVER_A)
    made: list[str] = []
    try:
        expect(page.locator("#status")).to_contain_text("Updated", timeout=WAIT_MS)
        page.evaluate("window.__marker = 'same page'")  # gone if anything reloads the page
        continuation_id, call_id = pause_for_approval(ui_gateway, fakes, "314")
        made.append(continuation_id)
        shown = card(page, continuation_id)
        expect(shown).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#announce")).to_contain_text("New approval request", timeout=WAIT_MS)
        # Another approver decides elsewhere (through the API): the card leaves this page by itself.
        fakes["primary"].queue(Reply(text="ok"))
        decided = ui_gateway.post(f"/v1/continuations/{continuation_id}", {"decisions": [
            {"tool_call_id": call_id, "approve": False, "reason": "not today"}]}, key=APPROVER_A)
        assert decided.status_code == 200, decided.text
        expect(shown).to_have_count(0, timeout=WAIT_MS)
        expect(page.locator("#decisions tbody tr").filter(has_text="not today").first).to_be_visible(timeout=WAIT_MS)
        assert page.evaluate("window.__marker") == "same page"
        assert page.problems == []  # type: ignore[attr-defined]
    finally:
        page.context.close()
        cleanup(ui_gateway, *made)


def test_a_bad_key_is_refused_and_never_stored(ui_gateway: Gateway, browser: Any) -> None:
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(f"{ui_gateway.url}/ui/approvals")
        page.get_by_label("API key").fill("not-a-key")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#sign-in-error")).to_contain_text("not accepted", timeout=WAIT_MS)
        assert page.evaluate("sessionStorage.length") == 0
        assert page.locator("#inbox").is_hidden()
    finally:
        context.close()


def test_a_pause_on_one_replica_is_decided_on_another(pair: tuple[Gateway, Gateway], fakes: dict[str, FakeUpstream],
                                                      tool_server: ToolServer, browser: Any) -> None:
    """Two gateways sharing Redis: the page served by one lists and decides what the other paused."""
    first, second = pair
    before = len(tool_server.calls)
    page = open_inbox(browser, second, APPROVER_A)
    try:
        expect(page.locator("#status")).to_contain_text("Updated", timeout=WAIT_MS)
        continuation_id, _ = pause_for_approval(first, fakes, "2718")
        shown = card(page, continuation_id)
        expect(shown.locator("pre.args")).to_have_text('{\n  "id": "2718"\n}', timeout=WAIT_MS)
        fakes["primary"].queue(Reply(text="Deleted record 2718."))
        shown.get_by_role("button", name="Approve delete_remote").click()
        expect(shown.locator(".card-note")).to_have_text("Approved; the loop resumed (completed).", timeout=WAIT_MS)
        assert tool_server.calls[before:] == [{"id": "2718"}]
        shown_on_first = httpx.get(f"{first.url}/v1/continuations?status=paused",
                                   headers={"authorization": f"Bearer {APPROVER_A}"}).json()
        assert continuation_id not in [item["id"] for item in shown_on_first["data"]]
        assert page.problems == []  # type: ignore[attr-defined]
    finally:
        page.context.close()
