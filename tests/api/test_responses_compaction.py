"""Compaction items (``gateway/api/responses/compaction.py``) and how an input's items stand for them.

An item opens only for the tenant it was sealed for and stands in the transcript as the guard's
summary message; everything else is a 400 naming the item, never a message sent on.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.api.responses.compact import summary_tokens
from gateway.api.responses.compaction import (
    KIND,
    MAX_ENCRYPTED_CHARS,
    MAX_SUMMARY_CHARS,
    compaction_item,
    expand_compaction,
    stated_conversation,
    user_items,
)
from gateway.api.responses.items import to_messages
from gateway.api.responses.request import parse_responses_request
from gateway.canonical.sealing import Sealer
from gateway.context.summary import SUMMARY_PREFIX, is_summary, summary_message
from gateway.errors import GatewayError
from gateway.store.responses.memory import MemoryResponseRecords

SEALER = Sealer([b"k" * 32])


def item(tenant: str = "team-a", summary: str = "Earlier: the user booked Hotel Avenida.") -> dict[str, Any]:
    return compaction_item(SEALER, tenant, summary, "primary:gpt-x")


def expand(entry: dict[str, Any], param: str) -> Any:
    return expand_compaction(SEALER, "team-a", entry, param)


def refusal(call: Any) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        call()
    assert caught.value.status == 400
    return caught.value


def test_an_item_opens_into_the_guards_summary_message() -> None:
    made = item()
    assert made["type"] == "compaction" and made["id"].startswith("cmp_")
    assert "Avenida" not in made["encrypted_content"]
    message = expand(made, "input[0]")
    assert message == summary_message("Earlier: the user booked Hotel Avenida.") and is_summary(message)
    assert str(message["content"]).startswith(SUMMARY_PREFIX)


@pytest.mark.parametrize(("change", "code"), [
    ({"encrypted_content": None}, None), ({"encrypted_content": 7}, None), ({"encrypted_content": ""}, None),
    ({"encrypted_content": "lgs1." + "A" * 80}, "invalid_encrypted_content"),
    ({"encrypted_content": "x" * (MAX_ENCRYPTED_CHARS + 1)}, "invalid_encrypted_content"),
])
def test_what_is_not_one_of_its_items_is_a_400_naming_it(change: dict[str, Any], code: str | None) -> None:
    error = refusal(lambda: expand({**item(), **change}, "input[3]"))
    assert error.param == "input[3].encrypted_content" and error.code == code


def test_another_tenants_item_and_another_kinds_seal_do_not_open() -> None:
    error = refusal(lambda: expand(item(tenant="team-b"), "input[0]"))
    assert error.code == "invalid_encrypted_content" and "another tenant" in error.message
    other_kind = {"type": "compaction", "encrypted_content": SEALER.seal("team-a", "reasoning", {"summary": "x"})}
    refusal(lambda: expand(other_kind, "input[0]"))
    no_summary = {"type": "compaction", "encrypted_content": SEALER.seal("team-a", KIND, {"text": "x"})}
    refusal(lambda: expand(no_summary, "input[0]"))


def test_items_in_an_input_stand_for_their_summary_and_end_the_assistant_turn() -> None:
    items = parse_responses_request({"model": "m", "input": [
        {"role": "user", "content": "Plan it."},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
        {**item(), "type": "compaction_summary"},  # Codex reads this alias too
        {"role": "user", "content": "Go on."},
    ]}).input
    messages = to_messages(items, expand).messages
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "user"]
    assert is_summary(messages[3]) and messages[4]["content"] == "Go on."


def test_an_item_where_nothing_opens_it_and_a_trigger_not_last_are_400s() -> None:
    made = item()
    assert refusal(lambda: to_messages([made, {"type": "message", "role": "user", "content": "x"}])).param == \
        "input[0].type"
    trigger = [{"type": "compaction_trigger"}, {"type": "message", "role": "user", "content": "x"}]
    error = refusal(lambda: to_messages(trigger, expand))
    assert error.param == "input[0].type" and "last item" in error.message


def test_user_items_keep_the_users_messages_in_input_shape() -> None:
    messages = [
        {"role": "system", "content": "instructions"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer"},
        summary_message("an older compaction"),
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA",
                                                                         "detail": "low"}}]},
    ]
    kept = user_items(messages)
    assert [{k: v for k, v in item.items() if k != "id"} for item in kept] == [
        {"type": "message", "role": "user", "status": "completed", "content": [{"type": "input_text",
                                                                                "text": "first"}]},
        {"type": "message", "role": "user", "status": "completed", "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "low"}]},
    ]
    assert all(item["id"].startswith("msg_") for item in kept) and kept[0]["id"] != kept[1]["id"]
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}
    assert user_items([image])[0]["content"] == [{"type": "input_image", "image_url": "https://x/y.png",
                                                  "detail": "auto"}], "the specification requires a detail"


def test_the_summary_bound_is_the_configured_one_or_the_requests_lower_one() -> None:
    services: Any = SimpleNamespace(compact_max_output_tokens=4096)
    assert summary_tokens(services, parse_responses_request({"model": "m", "input": "x"})) == 4096
    asked = parse_responses_request({"model": "m", "input": "x", "max_output_tokens": 300})
    assert summary_tokens(services, asked) == 300
    assert summary_tokens(services, parse_responses_request({"model": "m", "input": "x",
                                                             "max_output_tokens": 90000})) == 4096


def test_what_a_request_stands_for_without_running_it() -> None:
    records = MemoryResponseRecords()
    services: Any = SimpleNamespace(records=records)

    async def scenario() -> None:
        await records.put("t", "r1", {"response": {"id": "r1"}, "input": [], "continuation_id": None,
                                      "transcript": [{"role": "user", "content": "q"},
                                                     {"role": "assistant", "content": "a"}]}, 600)
        stated = await stated_conversation(services, "t", "Be brief.", "r1", [{"role": "user", "content": "q2"}])
        assert [m["content"] for m in stated] == ["Be brief.", "q", "a", "q2"]
        with pytest.raises(GatewayError) as gone:
            await stated_conversation(services, "other-tenant", None, "r1", [])
        assert gone.value.code == "previous_response_not_found"
        with pytest.raises(GatewayError) as empty:
            await stated_conversation(services, "t", "only instructions", None, [])
        assert empty.value.param == "input"

    asyncio.run(scenario())


def test_a_summary_past_its_bound_is_cut_before_it_is_sealed() -> None:
    made = compaction_item(SEALER, "team-a", "z" * (MAX_SUMMARY_CHARS + 5000), "primary:gpt-x")
    assert len(made["encrypted_content"]) < MAX_ENCRYPTED_CHARS
    opened = expand(made, "input[0]")
    assert str(opened["content"]) == SUMMARY_PREFIX + "z" * MAX_SUMMARY_CHARS
