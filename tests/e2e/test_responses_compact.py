"""``/v1/responses/compact``, compaction items and Codex's ``compaction_trigger``, end to end.

The official SDK (``client.responses.compact``) against a real gateway process and fake upstreams of
each wire format: the route's model summarises the conversation, the caller gets a sealed
``compaction`` item, and a later request carrying it reaches the upstream with the summary in its
place. Forged, changed and other tenants' items are refused before any upstream call.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.context.summary import SUMMARY_PREFIX
from tests.e2e.conftest import KEY, OTHER_KEY, Gateway, gateway_config, with_keys
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply, count_of, gemini_count_of

CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "Plan the Lisbon offsite for 12 people."},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Booked Hotel Avenida."}]},
    {"role": "user", "content": [{"type": "input_text", "text": "Budget is 9000 EUR."}]},
]
#: each target format, by the fake that answers for it
ROUTES = {"openai": ("solo_primary", "primary"), "anthropic": ("solo_claude", "claude"),
          "gemini": ("solo_gemini", "gemini")}


def sent_text(body: dict[str, Any]) -> str:
    """Everything a fake upstream was sent, as one string (each wire format nests text its own way)."""
    return orjson.dumps(body).decode()


def compact(gateway: Gateway, model: str, key: str = KEY, **fields: Any) -> Any:
    return gateway.client(key).responses.compact(model=model, input=CONVERSATION, **fields)


@pytest.mark.parametrize("wire", sorted(ROUTES))
def test_compact_then_the_item_stands_for_the_conversation(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                           wire: str) -> None:
    route, fake = ROUTES[wire]
    summary = f"SUMMARY-{wire}: offsite for 12 in Lisbon, Hotel Avenida, budget 9000 EUR."
    fakes[fake].queue(Reply(text=summary, usage=(321, 45)))
    compacted = compact(gateway, route, instructions="You plan events.")

    assert compacted.object == "response.compaction" and compacted.id.startswith("resp_")
    assert (compacted.usage.input_tokens, compacted.usage.output_tokens, compacted.usage.total_tokens) == (321, 45, 366)
    *users, item = compacted.output
    assert [u.role for u in users] == ["user", "user"]
    assert users[0].content[0].text == "Plan the Lisbon offsite for 12 people."
    assert item.type == "compaction" and item.id.startswith("cmp_")
    assert item.encrypted_content.startswith("lgs1.") and "Lisbon" not in item.encrypted_content
    extension = compacted.model_extra["gateway"]
    assert extension["route"] == route and extension["answered_by"] == [f"{fake}:{fakes_model(route)}"]
    asked = sent_text(fakes[fake].requests[-1].body)
    assert "Booked Hotel Avenida." in asked and "You plan events." in asked and "Summarise" in asked
    assert "tools" not in fakes[fake].requests[-1].body

    fakes[fake].queue(Reply(text="Day one: arrivals."))
    follow_up = [item.model_dump(exclude_none=True, warnings=False) for item in compacted.output]
    answer = gateway.client().responses.create(model=route, input=[*follow_up, {"role": "user", "content": "Go on."}])
    assert answer.output_text == "Day one: arrivals."
    received = sent_text(fakes[fake].requests[-1].body)
    assert summary in received and orjson.dumps(SUMMARY_PREFIX.strip()).decode()[1:-1] in received
    assert "lgs1." not in received and "Booked Hotel Avenida." not in received  # the item, not the history


def fakes_model(route: str) -> str:
    return {"solo_primary": "gpt-x", "solo_claude": "claude-sonnet-4-5", "solo_gemini": "gemini-3-pro-preview"}[route]


def test_compaction_fails_over_like_any_model_call(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["claude"].queue(Reply(status=529, error_body={"type": "error", "error": {"type": "overloaded_error",
                                                                                    "message": "Overloaded"}}))
    fakes["primary"].queue(Reply(text="Summary from the second target."))
    compacted = compact(gateway, "chain_claude_primary")
    extension = compacted.model_extra["gateway"]
    assert extension["answered_by"] == ["primary:gpt-x"]
    assert [a["target"] for a in extension["attempts"]][:1] == ["claude:claude-sonnet-4-5"]

    fakes["primary"].queue(Reply(text="ok"))
    item = compacted.output[-1].model_dump(warnings=False)
    gateway.client().responses.create(model="plain", input=[item, {"role": "user", "content": "next"}])
    assert "Summary from the second target." in sent_text(fakes["primary"].requests[-1].body)


def test_previous_response_id_is_compacted_with_its_stored_conversation(gateway: Gateway,
                                                                        fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="The capital is Lisbon."), Reply(text="Summary: capital question."))
    first = gateway.client().responses.create(model="plain", input="What is Portugal's capital?")
    compacted = gateway.client().responses.compact(model="plain", previous_response_id=first.id,
                                                   input="And its river?")
    asked = sent_text(fakes["primary"].requests[-1].body)
    assert "The capital is Lisbon." in asked and "And its river?" in asked
    assert [u.content[0].text for u in compacted.output[:-1]] == ["What is Portugal's capital?", "And its river?"]


def item_of(gateway: Gateway, fakes: dict[str, FakeUpstream], key: str = KEY) -> dict[str, Any]:
    fakes["primary"].queue(Reply(text="A summary."))
    return dict(compact(gateway, "plain", key=key).output[-1].model_dump(warnings=False))


def refused(gateway: Gateway, fakes: dict[str, FakeUpstream], item: dict[str, Any], key: str = KEY) -> Any:
    served = len(fakes["primary"].requests)
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.client(key).responses.create(model="plain", input=[item, {"role": "user", "content": "hi"}])
    assert len(fakes["primary"].requests) == served, "never sent upstream"
    return caught.value


def test_forged_changed_and_other_tenants_items_are_refused(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    item = item_of(gateway, fakes)
    token = item["encrypted_content"]
    flipped = token[:20] + ("A" if token[20] != "A" else "B") + token[21:]
    for content in (flipped, token[:-2], "lgs1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                    "gAAAAABoQ1-openai-made-it", token + "=="):
        error = refused(gateway, fakes, {**item, "encrypted_content": content})
        assert error.code == "invalid_encrypted_content" and error.param == "input[0].encrypted_content"
        assert error.body["type"] == "invalid_request_error"  # type: ignore[index]
    error = refused(gateway, fakes, item, key=OTHER_KEY)  # team-b replays team-a's item
    assert error.code == "invalid_encrypted_content"
    assert "another tenant" in error.message and token[:40] not in error.message
    with pytest.raises(openai.APIStatusError) as too_large:  # the body bound comes first (an item's own: unit tests)
        gateway.client().responses.create(model="plain", input=[{"type": "compaction",
                                                                 "encrypted_content": "x" * 250_000}])
    assert too_large.value.status_code == 413
    fakes["primary"].queue(Reply(text="fine"))
    assert gateway.client().responses.create(model="plain", input=[item, {"role": "user", "content": "hi"}]).output_text


def test_compaction_trigger_is_answered_with_one_compaction_item(gateway: Gateway,
                                                                 fakes: dict[str, FakeUpstream]) -> None:
    """Codex's remote compaction v2: a streamed /v1/responses whose input ends with the trigger."""
    fakes["claude"].queue(Reply(text="Summary for Codex.", usage=(50, 7)))
    body = {"model": "solo_claude", "instructions": "You are Codex.", "stream": True, "store": False,
            "input": [*CONVERSATION, {"type": "compaction_trigger"}], "tools": [],
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "thread-1"}
    with httpx.stream("POST", f"{gateway.url}/v1/responses", json=body, timeout=20,
                      headers={"authorization": f"Bearer {KEY}", "x-codex-beta-features": "remote_compaction_v2"}
                      ) as answer:
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
        events = [orjson.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "response.output_item.added",
                                           "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(5))
    final = events[-1]["response"]
    (item,) = final["output"]
    assert item["type"] == "compaction" and final["status"] == "completed"
    assert final["usage"]["input_tokens"] == 50 and final["usage"]["output_tokens"] == 7
    assert "compaction_trigger" not in sent_text(fakes["claude"].requests[-1].body)

    fakes["claude"].queue(Reply(text="Continuing."))
    answer = gateway.client().responses.create(model="solo_claude", input=[item, {"role": "user", "content": "Go."}])
    assert answer.output_text == "Continuing." and "Summary for Codex." in sent_text(fakes["claude"].requests[-1].body)

    fakes["primary"].queue(Reply(text="A summary."))
    whole = gateway.client().responses.create(model="plain", input=[{"role": "user", "content": "x"},
                                                                     {"type": "compaction_trigger"}])
    assert [i.type for i in whole.output] == ["compaction"] and whole.status == "completed"
    assert whole.model_extra["gateway"]["answered_by"] == ["primary:up-model"]


def test_a_trigger_anywhere_but_last_is_a_400(gateway: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.client().responses.create(model="plain", input=[{"type": "compaction_trigger"},
                                                                 {"role": "user", "content": "hi"}])
    assert caught.value.param == "input[0].type"


def test_input_tokens_exact_where_the_target_counts(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    client = gateway.client()
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]
    exact = client.responses.input_tokens.count(model="solo_claude", input=CONVERSATION, instructions="Be brief.",
                                                tools=tools)
    sent = fakes["claude"].requests[-1]
    assert sent.path.endswith("/v1/messages/count_tokens")
    assert exact.object == "response.input_tokens" and exact.input_tokens == count_of(sent.body)
    assert [t["name"] for t in sent.body["tools"]] == ["get_weather", "add", "lookup"], "server tools counted"
    assert exact.model_extra["gateway"] == {"method": "exact", "target": "claude:claude-sonnet-4-5"}

    gemini = client.responses.input_tokens.count(model="solo_gemini", input=CONVERSATION)
    counted = fakes["gemini"].requests[-1]
    assert counted.path.endswith(":countTokens") and "generationConfig" not in counted.body["generateContentRequest"]
    assert gemini.input_tokens == gemini_count_of(counted.body) and gemini.model_extra["gateway"]["method"] == "exact"

    estimate = client.responses.input_tokens.count(model="solo_primary", input=CONVERSATION)
    longer = client.responses.input_tokens.count(model="solo_primary", input="word " * 800)
    assert estimate.model_extra["gateway"]["method"] == "estimate" and longer.input_tokens > estimate.input_tokens > 0
    assert fakes["primary"].requests == [], "an estimate asks no upstream"


def test_input_tokens_count_an_item_as_its_summary(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(text="long summary " * 300))
    item = compact(gateway, "plain").output[-1].model_dump(warnings=False)
    client = gateway.client()
    bare = client.responses.input_tokens.count(model="solo_primary", input="hi")
    carried = client.responses.input_tokens.count(model="solo_primary", input=[item, {"role": "user", "content": "hi"}])
    assert carried.input_tokens > bare.input_tokens + 500
    with pytest.raises(openai.BadRequestError):
        gateway.client(OTHER_KEY).responses.input_tokens.count(model="solo_primary", input=[item])


def test_unknown_routes_and_bad_bodies_in_openais_shape(gateway: Gateway) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        gateway.client().responses.compact(model="no-such-route", input="hi")
    assert missing.value.code == "model_not_found"
    for path in ("/v1/responses/compact", "/v1/responses/input_tokens"):
        answer = gateway.post(path, {"model": "plain", "input": 42})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "input"
        assert gateway.post(path, {"model": "plain"}).json()["error"]["param"] == "input"
        assert gateway.post(path, {"model": "plain", "input": "x"}, key="wrong").status_code == 401



OLD_KEY, NEW_KEY = "old-sealing-key-0123456789abcdef0123", "new-sealing-key-fedcba9876543210fedc"
BUDGETED, ADMIN = "cmp-budget-key", "cmp-admin-key"


def keyed_config(fakes: dict[str, FakeUpstream], tool_server: ToolServer, keys: list[str]) -> str:
    config = with_keys(gateway_config(fakes, tool_server=tool_server.url),
                       f"{{key: {BUDGETED}, tenant: cmp-team, budget: {{limit: 1000, unit: tokens, period: day}}}}",
                       admin=ADMIN)
    return config + f"responses: {{sealing_keys: {orjson.dumps(keys).decode()}, compact_max_output_tokens: 512}}\n"


def test_sealing_keys_outlive_a_restart_and_compaction_is_metered_and_budgeted(
        gateway: Gateway, fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    first = Gateway(keyed_config(fakes, tool_server, [OLD_KEY])).start()
    try:
        fakes["primary"].queue(Reply(text="Kept across restarts."), Reply(text="Budgeted summary.", usage=(990, 20)))
        item = first.client().responses.compact(model="plain", input="remember this").output[-1].model_dump(
            warnings=False)
        assert fakes["primary"].requests[-1].body["max_tokens"] == 512  # responses.compact_max_output_tokens
        first.client(BUDGETED).responses.compact(model="plain", input="spend")
        rows = httpx.get(f"{first.url}/admin/usage", params={"tenant": "cmp-team"}, timeout=10,
                         headers={"authorization": f"Bearer {ADMIN}"}).json()["data"]
        assert [(r["requests"], r["total_tokens"]) for r in rows] == [(1, 1010)]
        served = len(fakes["primary"].requests)
        with pytest.raises(openai.RateLimitError) as caught:
            first.client(BUDGETED).responses.compact(model="plain", input="spend again")
        assert caught.value.code == "insufficient_quota" and len(fakes["primary"].requests) == served
    finally:
        first.stop()
    rotated = Gateway(keyed_config(fakes, tool_server, [NEW_KEY, OLD_KEY])).start()
    try:
        fakes["primary"].queue(Reply(text="ok"))
        rotated.client().responses.create(model="plain", input=[item, {"role": "user", "content": "next"}])
        assert "Kept across restarts." in sent_text(fakes["primary"].requests[-1].body)
    finally:
        rotated.stop()
    error = refused(gateway, fakes, item)  # another deployment (other keys): its items do not open here
    assert error.code == "invalid_encrypted_content"
