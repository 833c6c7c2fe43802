"""A tool call asking for input, answered in the approvals inbox: Debian's Chromium driven by Playwright.

The model calls a tool that asks the user (``tests.e2e.sample_tools:ask_user``, through the loop's
elicitation handler as an MCP source would); the loop pauses; a person signed in to ``/ui/approvals``
sees the question as a form built from its schema (or the URL to open), fills it, accepts, and the
tool's result reaches the model. The question's text is hostile and must stay text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.asking import APPROVER, ask, asking_gateway, last_tool_result
from tests.e2e.browser import WAIT_MS, card, expect, open_inbox, screenshot
from tests.e2e.conftest import Gateway
from tests.fakes.upstream import FakeUpstream, Reply

HOSTILE = 'Who are you? <img src=x id="pwned"> <script>window.pwned=1</script>'


@pytest.fixture(scope="module")
def ui_gateway(fakes: dict[str, FakeUpstream]) -> Iterator[Gateway]:
    yield from asking_gateway(fakes)


def test_a_form_question_is_filled_and_accepted_in_the_browser(ui_gateway: Gateway, browser: Any,
                                                               fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(ui_gateway, fakes, question=HOSTILE)
    page = open_inbox(browser, ui_gateway, APPROVER)
    try:
        shown = card(page, paused["continuation_id"])
        expect(shown).to_be_visible(timeout=WAIT_MS)
        expect(shown.locator(".call-name")).to_have_text("ask_user asks for your input")
        expect(shown.locator(".question")).to_have_text(f"{HOSTILE} (round 1)")  # text, not markup
        assert page.locator("#pwned").count() == 0 and page.evaluate("window.pwned") is None
        expect(shown.locator(".call-status")).to_contain_text("then it is declined")
        shown.get_by_label("Your name *").fill("Ada")
        shown.get_by_label("age").fill("36")
        shown.get_by_label("color").select_option("green")
        shown.get_by_label("subscribe").check()
        screenshot(page, "approvals-inbox-elicitation.png")
        fakes["primary"].queue(Reply(text="Nice to meet you, Ada."))
        shown.get_by_role("button", name="Accept the question of ask_user").click()
        expect(shown.locator(".card-note")).to_contain_text("Answered", timeout=WAIT_MS)
        assert last_tool_result(fakes["primary"]) == \
            'user said: accept {"age":36,"color":"green","name":"Ada","subscribe":true}'
        row = page.locator("#decisions tbody tr").first
        expect(row).to_contain_text("elicitation accepted", timeout=WAIT_MS)
        assert page.problems == []  # type: ignore[attr-defined]
    finally:
        page.context.close()


def test_a_refused_answer_shows_the_field_and_can_be_corrected(ui_gateway: Gateway, browser: Any,
                                                               fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(ui_gateway, fakes)
    page = open_inbox(browser, ui_gateway, APPROVER)
    try:
        shown = card(page, paused["continuation_id"])
        expect(shown).to_be_visible(timeout=WAIT_MS)
        shown.get_by_label("Your name *").fill("Ada")
        shown.get_by_label("email").fill("no-at-sign")  # the browser lets it through; the gateway refuses it
        shown.get_by_role("button", name="Accept the question of ask_user").click()
        expect(shown.locator(".card-error")).to_contain_text("content.email", timeout=WAIT_MS)
        shown.get_by_label("email").fill("ada@example.com")
        fakes["primary"].queue(Reply(text="thanks"))
        shown.get_by_role("button", name="Accept the question of ask_user").click()
        expect(shown.locator(".card-note")).to_contain_text("Answered", timeout=WAIT_MS)
        assert last_tool_result(fakes["primary"]) == \
            'user said: accept {"email":"ada@example.com","name":"Ada","subscribe":false}'
    finally:
        page.context.close()


def test_a_url_question_shows_its_link_and_declines(ui_gateway: Gateway, browser: Any,
                                                    fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(ui_gateway, fakes, mode="url")
    page = open_inbox(browser, ui_gateway, APPROVER)
    try:
        shown = card(page, paused["continuation_id"])
        expect(shown).to_be_visible(timeout=WAIT_MS)
        link = shown.locator("a.url-link")
        expect(link).to_have_text("https://auth.example.com/connect?state=abc")
        expect(link).to_have_attribute("href", "https://auth.example.com/connect?state=abc")
        expect(link).to_have_attribute("rel", "noopener noreferrer")
        assert shown.locator("input").count() == 0  # a URL question has no form
        fakes["primary"].queue(Reply(text="maybe later"))
        shown.get_by_role("button", name="Decline the question of ask_user").click()
        expect(shown.locator(".card-note")).to_contain_text("Answered", timeout=WAIT_MS)
        assert last_tool_result(fakes["primary"]) == "user said: decline null"
    finally:
        page.context.close()
