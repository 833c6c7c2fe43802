"""What a Responses pause remembers of its origin, and the input items a way-B decision stands for."""

from __future__ import annotations

from gateway.api.responses.decided import decided_request
from gateway.api.responses.echo import ECHO_FIELDS
from gateway.api.responses.origin import began_on_responses, decision_items, responses_origin
from gateway.api.responses.request import parse_responses_request


def test_decisions_become_the_items_the_responses_api_would_have_sent() -> None:
    items = decision_items([
        {"tool_call_id": "c1", "approve": True},
        {"tool_call_id": "c2", "approve": False, "reason": "not today"},
        {"tool_call_id": "c3", "approve": False},
        {"tool_call_id": "c4", "output": "forty-two"},
    ])
    assert items == [
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_c1", "approve": True},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_c2", "approve": False, "reason": "not today"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_c3", "approve": False},
        {"type": "function_call_output", "call_id": "c4", "output": "forty-two"},
    ]


def test_only_a_recorded_responses_origin_counts() -> None:
    request = parse_responses_request({"model": "agent", "input": "hi", "store": False, "background": True,
                                       "instructions": "Be brief.", "metadata": {"t": "1"}})
    origin = responses_origin("resp_paused", request, True)
    assert began_on_responses({"origin": origin}) == origin
    # Chat pauses, Messages pauses and continuations stored before origins were recorded: not a Response.
    for data in ({}, {"origin": None}, {"native": {"wire_format": "anthropic"}}, {"origin": {"surface": "chat"}},
                 {"origin": {"surface": "responses"}}):
        assert began_on_responses(data) is None


def test_the_decided_request_continues_the_paused_response_with_its_fields() -> None:
    request = parse_responses_request({"model": "agent", "input": "hi", "store": False, "background": True,
                                       "instructions": "Be brief.", "metadata": {"t": "1"}})
    decided = decided_request(responses_origin("resp_paused", request, True),
                              [{"tool_call_id": "c1", "approve": True}], stream=True)
    assert decided.previous_response_id == "resp_paused" and decided.echo["previous_response_id"] == "resp_paused"
    assert decided.store is False and decided.stream is True and decided.background is False
    assert decided.echo["background"] is False and decided.echo["store"] is False
    assert decided.echo["instructions"] == "Be brief." and decided.metadata == {"t": "1"}
    assert list(decided.echo) == list(ECHO_FIELDS)  # every field a Response repeats, in its order
    assert decided.input == [{"type": "mcp_approval_response", "approval_request_id": "mcpr_c1", "approve": True}]
    assert request.echo["previous_response_id"] is None  # the paused request's echo is not changed
