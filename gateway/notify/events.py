"""The body of a notification event, the same for every receiver (the Slack format is rendered from it).

Tool calls carry their name, id and ``arguments_sha256`` (the SHA-256 hex of the arguments string,
the digest a decision can be bound to), never the argument values: webhooks often end in chat
tools and third-party services, and arguments may hold personal data or secrets. A receiver that
needs them asks ``GET /v1/continuations/{id}`` with a key of the tenant. Caller-supplied text
(a denial reason, a client tool's name) is cut to a bound.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

#: Caller-controlled strings in an event (reasons, tool names) are cut to this many characters.
MAX_TEXT = 500
#: At most this many tool calls are listed in one event (the rest are counted in ``tool_calls_omitted``).
MAX_CALLS = 32


def new_event_id() -> str:
    return "evt_" + secrets.token_urlsafe(18)


def cut(text: Any, limit: int = MAX_TEXT) -> str | None:
    if text is None:
        return None
    value = str(text)
    return value if len(value) <= limit else value[:limit] + "…"


def digest(arguments: Any) -> str:
    """SHA-256 hex of the arguments string as stored (and as ``GET /v1/continuations/{id}`` shows it)."""
    text = arguments if isinstance(arguments, str) else ""
    return hashlib.sha256(text.encode()).hexdigest()


def call_summary(item: Mapping[str, Any]) -> dict[str, Any]:
    """A pending item ``{tool_call_id, name, reason, arguments}`` without the argument values."""
    out: dict[str, Any] = {"tool_call_id": cut(item.get("tool_call_id"), 200), "name": cut(item.get("name"), 200),
                           "arguments_sha256": digest(item.get("arguments"))}
    if item.get("reason") is not None:
        out["reason"] = item.get("reason")
    question = item.get("elicitation")
    if isinstance(question, Mapping):  # which server asks, and how: its message and schema stay in the inbox
        out["elicitation"] = {"server": cut(question.get("server"), 200), "mode": cut(question.get("mode"), 10)}
    return out


def build(event_type: str, tenant: str, *, continuation_id: str | None = None, route: str | None = None,
          calls: Iterable[Mapping[str, Any]] = (), decided_by: str | None = None,
          **extra: Any) -> dict[str, Any]:
    """A new event: ``{id, type, created_at, tenant, continuation_id, route, tool_calls, decided_by, ...extra}``."""
    listed = list(calls)
    event: dict[str, Any] = {
        "id": new_event_id(), "type": event_type, "created_at": int(time.time()), "tenant": tenant,
        "continuation_id": continuation_id, "route": route,
        "tool_calls": [call_summary(c) for c in listed[:MAX_CALLS]], "decided_by": decided_by,
    }
    if len(listed) > MAX_CALLS:
        event["tool_calls_omitted"] = len(listed) - MAX_CALLS
    event.update({k: cut(v) if isinstance(v, str) else v for k, v in extra.items() if v is not None})
    return event
