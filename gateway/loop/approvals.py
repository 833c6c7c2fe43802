"""What a person deciding an approval sees, and the record of what was decided.

One place builds the view of a paused continuation (the listing, ``GET /v1/continuations/{id}``
and the inbox page all show the same fields), binds a decision to exactly what was shown
(``arguments_sha256``: the SHA-256 hex of the arguments string as the model produced it), and
writes every decision, headless denial and approval time-out to the tenant's audit log.

Decision and expiry handling live in named functions (:func:`audit_decisions`,
:func:`expired_calls`, :func:`audit_expired`) so notifications can hook the same points.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import time
from typing import Any

from gateway.canonical import Message, text_of
from gateway.store.base import Store
from gateway.store.continuations.base import Continuation

# The decision context is for a human to read, not the whole transcript: each text is cut to this.
MAX_CONTEXT_CHARS = 2000
APPROVAL_TIMED_OUT = "approval timed out"


def arguments_digest(arguments: Any) -> str:
    """SHA-256 hex of the arguments string exactly as the model produced it (what the view shows)."""
    text = arguments if isinstance(arguments, str) else ""
    return hashlib.sha256(text.encode()).hexdigest()


def new_audit_id() -> str:
    return "aud_" + secrets.token_urlsafe(12)


def _head(text: str) -> str:
    return text if len(text) <= MAX_CONTEXT_CHARS else text[:MAX_CONTEXT_CHARS] + "…"


def _tail(text: str) -> str:
    return text if len(text) <= MAX_CONTEXT_CHARS else "…" + text[-MAX_CONTEXT_CHARS:]


def decision_context(transcript: list[Message], assistant: Message) -> dict[str, str]:
    """The latest user message and the assistant text since it (this request's text so far), bounded."""
    index = len(transcript) - 1
    while index >= 0 and transcript[index].get("role") != "user":
        index -= 1
    user = text_of(transcript[index].get("content")) if index >= 0 else ""
    parts = [text_of(m.get("content")) for m in transcript[index + 1:] if m.get("role") == "assistant"]
    parts.append(text_of(assistant.get("content")))
    return {"user": _head(user or ""), "assistant": _tail("\n\n".join(p for p in parts if p))}


def summary_of(c: Continuation) -> dict[str, Any]:
    """The listing entry of a continuation (everything but its live status), built once at the pause."""
    asker = c.data.get("asker") or {}
    data = c.data
    context = data.get("context")
    if not isinstance(context, dict):
        context = decision_context(list(data.get("transcript") or []), data.get("assistant") or {})
    return {
        "id": c.id, "object": "continuation", "model": c.model, "route": c.model,
        "key": {"id": asker.get("id") or None, "name": asker.get("name") or None},
        "created_at": int(c.created_at), "expires_at": int(c.expires_at),
        "pending": [pending_view(p) for p in c.pending],
        "context": context,
    }


def pending_view(item: dict[str, Any]) -> dict[str, Any]:
    arguments = item.get("arguments")
    deadline = item.get("approval_deadline")
    view = {"tool_call_id": item["tool_call_id"], "name": item["name"], "reason": item["reason"],
            "arguments": arguments if isinstance(arguments, str) else "",
            "arguments_sha256": item.get("arguments_sha256") or arguments_digest(arguments),
            # Rounded up: the view never calls a call expired before the gateway would refuse its approval.
            "approval_deadline": None if deadline is None else math.ceil(deadline)}
    question = item.get("elicitation")
    if isinstance(question, dict):  # a running call asking the user for input (MCP elicitation)
        asked_until = item.get("elicitation_deadline")
        view["elicitation"] = question
        view["elicitation_deadline"] = None if asked_until is None else math.ceil(asked_until)
    return view


def continuation_view(c: Continuation, now: float | None = None) -> dict[str, Any]:
    """``GET /v1/continuations/{id}`` and each listing entry: the summary, its status, which calls timed out."""
    view = c.summary if c.summary is not None else summary_of(c)
    return with_status(dict(view), c.status, now)


def with_status(view: dict[str, Any], status: str, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    view["status"] = status
    view.pop("_score", None)
    view["pending"] = [_expiry(p, now) for p in view.get("pending") or ()]
    return view


def _expiry(p: dict[str, Any], now: float) -> dict[str, Any]:
    shown = {**p, "approval_expired": p.get("approval_deadline") is not None and p["approval_deadline"] <= now}
    if "elicitation" in p:
        shown["elicitation_expired"] = p.get("elicitation_deadline") is not None and p["elicitation_deadline"] <= now
    return shown


def expired_calls(c: Continuation, now: float | None = None) -> set[str]:
    """The approval calls of ``c`` whose ``approval_timeout_s`` has passed: they count as denied."""
    now = time.time() if now is None else now
    return {p["tool_call_id"] for p in c.pending
            if p.get("reason") == "approval" and p.get("approval_deadline") is not None
            and float(p["approval_deadline"]) <= now}


def audit_entry(c: Continuation, item: dict[str, Any], event: str, key_id: str | None, key_name: str | None,
           reason: str | None) -> dict[str, Any]:
    return {"id": new_audit_id(), "tenant": c.tenant, "ts": time.time(), "event": event,
            "key_id": key_id or None, "key_name": key_name or None, "tool": item["name"],
            "tool_call_id": item["tool_call_id"], "continuation_id": c.id,
            "arguments_sha256": item.get("arguments_sha256") or arguments_digest(item.get("arguments")),
            "reason": reason}


async def audit_decisions(store: Store, c: Continuation, approved: list[str], denied: dict[str, str | None],
                          key_id: str | None, key_name: str | None) -> None:
    """One ``approved``/``denied`` entry per approval call a person decided (client outputs are not decisions)."""
    # A timed-out call is the time-out's to record (audit_expired), whatever a late decision said.
    expired = expired_calls(c)
    items = {p["tool_call_id"]: p for p in c.pending if p.get("reason") == "approval"
             and p["tool_call_id"] not in expired}
    for call_id in approved:
        if call_id in items:
            await store.append_audit(audit_entry(c, items[call_id], "approved", key_id, key_name, None))
    for call_id, reason in denied.items():
        if call_id in items:
            await store.append_audit(audit_entry(c, items[call_id], "denied", key_id, key_name, reason))


async def audit_expired(store: Store, c: Continuation, call_ids: set[str]) -> None:
    """One ``approval_timeout`` entry per call that timed out, written by the resume that applies the denial."""
    for item in c.pending:
        if item["tool_call_id"] in call_ids:
            await store.append_audit(audit_entry(c, item, "approval_timeout", None, None, APPROVAL_TIMED_OUT))


def timed_out_result() -> str:
    return f"The tool call was not run: {APPROVAL_TIMED_OUT} (no one approved it in time)."
