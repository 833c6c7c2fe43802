"""The approval view: the bounded decision context, digests, expiry flags, and records from before this view."""

from __future__ import annotations

import hashlib

import pytest

from gateway.errors import GatewayError
from gateway.loop.approvals import (
    MAX_CONTEXT_CHARS,
    continuation_view,
    decision_context,
    expired_calls,
    summary_of,
)
from gateway.loop.continuations import Continuations
from gateway.store.continuations.base import Continuation


def paused(pending: list[dict[str, object]], data: dict[str, object] | None = None) -> Continuation:
    return Continuation.new("acme", "smart", pending, data or {}, 600, now=1000.0)


def test_context_is_the_latest_user_turn_and_this_requests_assistant_text_bounded() -> None:
    transcript = [{"role": "user", "content": "old question"}, {"role": "assistant", "content": "old answer"},
                  {"role": "user", "content": [{"type": "text", "text": "x" * (MAX_CONTEXT_CHARS + 50)}]},
                  {"role": "assistant", "content": "Looking.", "tool_calls": []},
                  {"role": "tool", "tool_call_id": "c", "content": "result"}]
    context = decision_context(transcript, {"role": "assistant", "content": "y" * MAX_CONTEXT_CHARS + "END"})
    assert context["user"].startswith("xxx") and len(context["user"]) == MAX_CONTEXT_CHARS + 1
    assert context["assistant"].endswith("END") and len(context["assistant"]) == MAX_CONTEXT_CHARS + 1
    assert "old" not in context["user"] + context["assistant"]
    assert decision_context([], {"role": "assistant", "content": None}) == {"user": "", "assistant": ""}


def test_a_record_without_the_new_fields_still_has_a_full_view() -> None:
    c = paused([{"tool_call_id": "c1", "name": "delete", "reason": "approval", "arguments": '{"id": 1}'}],
               {"transcript": [{"role": "user", "content": "delete 1"}], "assistant": {"content": "ok"}})
    view = continuation_view(c)
    assert view["key"] == {"id": None, "name": None} and view["context"] == {"user": "delete 1", "assistant": "ok"}
    assert view["pending"][0]["arguments_sha256"] == hashlib.sha256(b'{"id": 1}').hexdigest()
    assert view["pending"][0]["approval_deadline"] is None and view["status"] == "pending"
    assert summary_of(c)["route"] == "smart"


def test_expiry_counts_only_approval_calls_past_their_deadline() -> None:
    c = paused([{"tool_call_id": "a", "name": "t", "reason": "approval", "arguments": "{}",
                 "approval_deadline": 1010.5},
                {"tool_call_id": "b", "name": "t", "reason": "approval", "arguments": "{}"},
                {"tool_call_id": "c", "name": "u", "reason": "client", "arguments": "{}", "approval_deadline": 1.0}])
    assert expired_calls(c, 1010.0) == set() and expired_calls(c, 1010.5) == {"a"}
    view = continuation_view(c, 1011.0)
    assert view["pending"][0]["approval_deadline"] == 1011 and view["pending"][0]["approval_expired"] is True
    assert continuation_view(c, 1010.9)["pending"][0]["approval_expired"] is False  # shown rounded up


@pytest.mark.parametrize(("digest", "status", "code"), [
    (hashlib.sha256(b'{"id": 2}').hexdigest(), 409, "arguments_mismatch"), (42, 400, None)])
def test_decision_digest_checks(digest: object, status: int, code: str | None) -> None:
    c = paused([{"tool_call_id": "c1", "name": "delete", "reason": "approval", "arguments": '{"id": 1}'}])
    with pytest.raises(GatewayError) as error:
        Continuations.decisions_to_results(c, [{"tool_call_id": "c1", "approve": True, "arguments_sha256": digest}])
    assert error.value.status == status and error.value.code == code
    good = hashlib.sha256(b'{"id": 1}').hexdigest()
    assert Continuations.decisions_to_results(c, [{"tool_call_id": "c1", "approve": True,
                                                   "arguments_sha256": good}]) == ({}, ["c1"], {})
