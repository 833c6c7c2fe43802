"""Elicitation and sampling against the reference MCP server (``@modelcontextprotocol/server-everything``),
behind real gateways, driven by the OpenAI SDK, the decision API and Chromium; upstream models faked over HTTP.

Its ``trigger-elicitation-request`` tool (registered only for a client that declares elicitation)
pauses the loop; the question is shown in the inbox, answered with form content (or declined, or
left to time out), and the tool's result reaches the model. ``trigger-url-elicitation`` shows its
URL. The pause is answered from a second replica (the server's HTTP session stays on the first).
``trigger-sampling-request`` is answered by a mock route and billed to the asking key.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.asking import last_tool_result, usage_totals
from tests.e2e.browser import WAIT_MS, card, expect, open_inbox, screenshot
from tests.e2e.conftest import Gateway, gateway_config, two_replicas, with_keys
from tests.fakes.everything import EverythingHttp, everything_command
from tests.fakes.upstream import FakeUpstream, Reply

REDIS_URL = os.environ["LOOPGATE_TEST_REDIS_URL"]  # the suite's own server (tests/conftest.py)
ASKER, APPROVER, ADMIN = "ev-asker-key", "ev-approver-key", "ev-admin-key"
ELICIT = ("trigger-elicitation-request", {})
QUESTION = "Please provide inputs for the following fields:"
ROUTES = """  ev_ask: {targets: [{provider: primary, model: m}], tools: ['mcp:ev']}
  ev_sampler: {targets: [{provider: secondary, model: sampler-model}]}
"""


def config(fakes: dict[str, FakeUpstream], server: str, store_url: str = "memory://") -> str:
    text = with_keys(gateway_config(fakes, store_url=store_url, extra_models=ROUTES),
                     f"{{key: {ASKER}, tenant: ev-team, name: ev-asker}}",
                     f"{{key: {APPROVER}, tenant: ev-team, name: ev-reviewer, role: approver}}", admin=ADMIN)
    return text.replace("models:\n", f"mcp_servers:\n  ev: {server}\nmodels:\n", 1)


def stdio_server(extra: str = "") -> str:
    node, entry, transport = everything_command()
    return f"{{command: ['{node}', '{entry}', '{transport}'], timeout_s: 30, sampling_route: ev_sampler, " \
           f"sampling_max_tokens: 50{extra}}}"


def http_server(url: str, extra: str = "") -> str:
    return f"{{url: '{url}', timeout_s: 30, sampling_route: ev_sampler, sampling_max_tokens: 50{extra}}}"


@pytest.fixture(scope="module")
def ev_http() -> Iterator[EverythingHttp]:
    everything_command()  # skipped or failed (CI) when the server is not installed
    server = EverythingHttp()
    yield server
    server.stop()


@pytest.fixture(scope="module", params=["stdio", "http"])
def gw(request: pytest.FixtureRequest, fakes: dict[str, FakeUpstream], ev_http: EverythingHttp) -> Iterator[Gateway]:
    server = stdio_server() if request.param == "stdio" else http_server(ev_http.url)
    gateway = Gateway(config(fakes, server)).start()
    yield gateway
    gateway.stop()


def ask(gw: Gateway, fakes: dict[str, FakeUpstream], tool: tuple[str, dict[str, Any]] = ELICIT) -> dict[str, Any]:
    fakes["primary"].queue(Reply(text="I need a few details.", tool_calls=[tool]))
    completion = gw.client(ASKER).chat.completions.create(model="ev_ask",
                                                          messages=[{"role": "user", "content": "Sign me up."}])
    extension: dict[str, Any] = completion.model_extra["gateway"]
    return extension


def decide(gw: Gateway, paused: dict[str, Any], **decision: Any) -> httpx.Response:
    call_id = paused["pending"][0]["tool_call_id"]
    return gw.post(f"/v1/continuations/{paused['continuation_id']}",
                   {"decisions": [{"tool_call_id": call_id, **decision}]}, key=APPROVER)


def test_its_elicitation_pauses_and_the_accepted_form_reaches_the_model(gw: Gateway,
                                                                        fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(gw, fakes)
    assert paused["status"] == "paused"
    [pending] = paused["pending"]
    assert pending["name"] == "trigger-elicitation-request" and pending["reason"] == "elicitation"
    question = pending["elicitation"]
    assert question["server"] == "ev" and question["mode"] == "form" and question["message"] == QUESTION
    assert question["requested_schema"]["required"] == ["name"]
    refused = decide(gw, paused, action="accept", content={"name": "Ada", "integer": 500})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "decisions[0].content.integer"
    fakes["primary"].queue(Reply(text="You are signed up, Ada."))
    decided = decide(gw, paused, action="accept", content={
        "name": "Ada Lovelace", "check": True, "email": "ada@example.com", "integer": 7,
        "untitledSingleSelectEnum": "Joey", "untitledMultipleSelectEnum": ["Piano", "Bass"],
        "titledSingleSelectEnum": "hero-3"})
    assert decided.status_code == 200, decided.text
    assert decided.json()["choices"][0]["message"]["content"] == "You are signed up, Ada."
    result = last_tool_result(fakes["primary"])
    assert "User provided the requested information" in result and "- Name: Ada Lovelace" in result
    assert "- Favorite Integer: 7" in result and "- Agreed to terms: true" in result


def test_a_declined_question(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(gw, fakes)
    fakes["primary"].queue(Reply(text="Maybe later then."))
    assert decide(gw, paused, action="decline").status_code == 200
    assert "User declined to provide the requested information" in last_tool_result(fakes["primary"])


def test_the_url_question_shows_its_url(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(gw, fakes, ("trigger-url-elicitation", {"url": "https://example.com/authorize?x=1",
                                                         "message": "Connect your account."}))
    question = paused["pending"][0]["elicitation"]
    assert question == {"server": "ev", "mode": "url", "message": "Connect your account.",
                        "url": "https://example.com/authorize?x=1"}
    fakes["primary"].queue(Reply(text="Connected."))
    assert decide(gw, paused, action="accept").status_code == 200
    result = last_tool_result(fakes["primary"])
    assert "User completed the URL elicitation flow" in result and "https://example.com/authorize?x=1" in result


def test_its_sampling_is_answered_by_the_route_and_billed_to_the_asking_key(
        gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    before = usage_totals(gw, ADMIN, "ev-team")
    fakes["primary"].queue(Reply(tool_calls=[("trigger-sampling-request", {"prompt": "a haiku", "maxTokens": 500})],
                                 usage=(50, 5)),
                           Reply(text="Here is your haiku.", usage=(60, 6)))
    fakes["secondary"].queue(Reply(text="Autumn moonlight", usage=(20, 4)))
    done = gw.client(ASKER).chat.completions.create(model="ev_ask", messages=[{"role": "user", "content": "haiku"}])
    assert done.model_extra["gateway"]["status"] == "completed"
    [sampled] = fakes["secondary"].bodies
    assert sampled["model"] == "sampler-model" and sampled["max_tokens"] == 50 and "tools" not in sampled
    assert sampled["messages"][0] == {"role": "system", "content": "You are a helpful test server."}
    assert "a haiku" in sampled["messages"][1]["content"]
    result = last_tool_result(fakes["primary"])
    assert "LLM sampling result" in result and "Autumn moonlight" in result and "sampler-model" in result
    after = usage_totals(gw, ADMIN, "ev-team", before["requests"] + 2)
    assert after["requests"] - before["requests"] == 2  # the chat request and the sampling request
    assert after["prompt_tokens"] - before["prompt_tokens"] == 50 + 60 + 20
    assert after["completion_tokens"] - before["completion_tokens"] == 5 + 6 + 4


def test_a_refused_sampling_reaches_the_server_as_an_error(gw: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(tool_calls=[("trigger-sampling-request", {"prompt": "a haiku"})]),
                           Reply(text="Sampling failed."))
    fakes["secondary"].queue(*[Reply(status=400, error_body={"error": {"message": "no such model"}})] * 4)
    done = gw.client(ASKER).chat.completions.create(model="ev_ask", messages=[{"role": "user", "content": "haiku"}])
    assert done.choices[0].message.content == "Sampling failed."
    assert done.model_extra["gateway"]["tool_calls"][0]["status"] == "error"
    assert "Sampling request refused" in last_tool_result(fakes["primary"])


def test_the_inbox_shows_the_form_and_the_answer_reaches_the_model(gw: Gateway, browser: Any,
                                                                   fakes: dict[str, FakeUpstream]) -> None:
    paused = ask(gw, fakes)
    page = open_inbox(browser, gw, APPROVER)
    try:
        shown = card(page, paused["continuation_id"])
        expect(shown).to_be_visible(timeout=WAIT_MS)
        expect(shown.locator(".question")).to_have_text(QUESTION)
        assert shown.locator("[data-field]").count() == len(paused["pending"][0]["elicitation"]["requested_schema"]
                                                            ["properties"])
        expect(shown.locator('[data-field="integer"]')).to_have_value("42")  # the schema's default
        shown.locator('[data-field="name"]').fill("Grace Hopper")
        shown.locator('[data-field="check"]').check()
        shown.locator('[data-field="legacyTitledEnum"]').select_option(label="Dogs")
        screenshot(page, "approvals-inbox-everything-elicitation.png")
        fakes["primary"].queue(Reply(text="Welcome, Grace."))
        shown.get_by_role("button", name="Accept the question of trigger-elicitation-request").click()
        expect(shown.locator(".card-note")).to_contain_text("Answered", timeout=WAIT_MS)
        result = last_tool_result(fakes["primary"])
        assert "- Name: Grace Hopper" in result and "- Favorite Integer: 42" in result
        assert '"legacyTitledEnum": "pet-2"' in result
        assert page.problems == []  # type: ignore[attr-defined]
    finally:
        page.context.close()


def test_a_question_unanswered_in_time_is_declined(fakes: dict[str, FakeUpstream], ev_http: EverythingHttp) -> None:
    gateway = Gateway(config(fakes, http_server(ev_http.url, ", elicitation_timeout_s: 1.5"))).start()
    try:
        paused = ask(gateway, fakes)
        view = f"{gateway.url}/v1/continuations/{paused['continuation_id']}"
        deadline = time.monotonic() + 20
        while not httpx.get(view, headers={"authorization": f"Bearer {ASKER}"}).json()["pending"][0][
                "elicitation_expired"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        late = decide(gateway, paused, action="accept", content={"name": "Ada"})
        assert late.status_code == 409 and late.json()["error"]["code"] == "elicitation_expired"
        fakes["primary"].queue(Reply(text="No answer came."))
        assert decide(gateway, paused, action="decline").status_code == 200
        assert "User declined to provide the requested information" in last_tool_result(fakes["primary"])
    finally:
        gateway.stop()


@pytest.fixture
def pair(fakes: dict[str, FakeUpstream], ev_http: EverythingHttp) -> Iterator[tuple[Gateway, Gateway]]:
    yield from two_replicas(config(fakes, http_server(ev_http.url), REDIS_URL), REDIS_URL, flush_after=True)


def test_the_pause_is_answered_from_a_second_replica(pair: tuple[Gateway, Gateway],
                                                     fakes: dict[str, FakeUpstream]) -> None:
    holder, decider = pair  # the server's session (and the open call) stay on the holder
    paused = ask(holder, fakes)
    assert paused["status"] == "paused"
    fakes["primary"].queue(Reply(text="Done from the other replica."))
    decided = decide(decider, paused, action="accept", content={"name": "Ada Lovelace"})
    assert decided.status_code == 200, decided.text
    assert decided.json()["choices"][0]["message"]["content"] == "Done from the other replica."
    assert "- Name: Ada Lovelace" in last_tool_result(fakes["primary"])
