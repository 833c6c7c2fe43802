"""Deciding an elicitation pause: the answer checked against the question, delivered, audited.

A decision on a pending call of reason ``elicitation`` is ``{"tool_call_id", "action": "accept" |
"decline" | "cancel", "content": {...}}``. ``content`` (form mode, ``accept`` only) must satisfy the
question's ``requested_schema``: MCP form schemas are flat objects of strings (``minLength``,
``maxLength``, ``format``, ``enum``), numbers and integers (``minimum``, ``maximum``), booleans and
enums. The schema is the server's (untrusted): only those keywords are applied (no ``pattern``,
no references), so checking an answer costs what the answer's size says. A bad answer is a 400
naming the field, before anything is claimed: the pause stays pending.

The answer then crosses to the replica holding the call (``loop/held.py``) under the
continuation's claim, so it is delivered at most once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from gateway.errors import GatewayError, bad_request, quoted
from gateway.json_schemas import LOCAL_ONLY
from gateway.loop.approvals import audit_entry
from gateway.loop.held import HeldCalls
from gateway.loop.pairing import ToolResult
from gateway.loop.pausing import PendingCall
from gateway.loop.state import LoopRequest, ToolRunner
from gateway.loop.tool_runs import record
from gateway.store.base import Store
from gateway.store.continuations.base import Continuation
from gateway.tools.interaction import InputRetry

ACTIONS = ("accept", "decline", "cancel")
ELICITATION_TIMED_OUT = "elicitation timed out"
#: what a server's schema may use, per level (everything else is dropped before checking an answer)
_OBJECT_KEYS = frozenset({"type", "properties", "required"})
_FIELD_KEYS = frozenset({"type", "enum", "minLength", "maxLength", "format", "minimum", "maximum", "items",
                         "minItems", "maxItems", "oneOf", "anyOf", "const"})
# The formats MCP names that this installation can check (``uri``/``date-time`` need optional packages).
_FORMATS = FormatChecker([f for f in ("email", "date", "date-time", "uri") if f in FormatChecker.checkers])
_MAX_FIELDS = 100


def is_elicitation(item: dict[str, Any]) -> bool:
    return item.get("reason") == "elicitation" and isinstance(item.get("elicitation"), dict)


def question_expired(item: dict[str, Any], now: float) -> bool:
    deadline = item.get("elicitation_deadline")
    return isinstance(deadline, int | float) and deadline <= now


def answer_of(decision: dict[str, Any], item: dict[str, Any], param: str, now: float) -> dict[str, Any] | None:
    """The answer a decision gives pending ``item`` (None: its question timed out, the holder declined it)."""
    action = decision.get("action")
    if action not in ACTIONS:
        raise bad_request(f"{param}.action must be one of accept, decline, cancel (the call waits for the user's "
                          "input)", f"{param}.action")
    if question_expired(item, now):
        if action == "accept":
            raise GatewayError(409, f"the question of {quoted(item['tool_call_id'])} timed out; it was declined",
                               param=param, code="elicitation_expired")
        return None
    if action != "accept":
        return {"action": action}
    question = item["elicitation"]
    if question.get("mode") == "url":  # the user completed the page: there is no content to send
        return {"action": "accept"}
    content = decision.get("content", {})
    if not isinstance(content, dict):
        raise bad_request(f"{param}.content must be an object", f"{param}.content")
    schema = question.get("requested_schema")
    content = with_defaults(schema, content)
    check_content(schema, content, f"{param}.content")
    return {"action": "accept", "content": content}


def with_defaults(schema: Any, content: dict[str, Any]) -> dict[str, Any]:
    """``content`` with every field it leaves out set to the field's ``default`` in the server's schema.

    What the inbox's form does (each field starts at its default) holds for every accepted answer, the
    inbox's and an API caller's alike: an ``accept`` without ``content`` gives the server its defaults
    (MCP's elicitation defaults). A default that is not a flat value is not applied; the filled answer
    is checked against the schema like any other.
    """
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return content
    filled = dict(content)
    for name, spec in list(properties.items())[:_MAX_FIELDS]:
        if name not in filled and isinstance(spec, dict) and "default" in spec and _primitive(spec["default"]):
            filled[name] = spec["default"]
    return filled


def check_content(schema: Any, content: dict[str, Any], param: str) -> None:
    """400 naming the first field of ``content`` that the (flat) ``schema`` refuses."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    properties = properties if isinstance(properties, dict) else {}
    for name, value in content.items():
        where = f"{param}.{name[:100]}"
        if name not in properties:
            raise bad_request(f"{param}: {quoted(name)} is not a field of the requested schema", where)
        if not _primitive(value):
            raise bad_request(f"{where} must be a string, number, boolean or array of strings", where)
    flat = _flat(schema)
    errors = sorted(_validator(flat).iter_errors(content),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return
    error = errors[0]
    field = _field_of(error, flat, content)
    where = f"{param}.{field}" if field else param
    raise bad_request(f"{where}: {error.message[:300]}", where[:200])


def _validator(flat: dict[str, Any]) -> Validator:
    """The server's (cut) schema on a registry that fetches nothing: no reference ever leaves the process."""
    return Draft202012Validator(flat, format_checker=_FORMATS, registry=LOCAL_ONLY)


def _primitive(value: Any) -> bool:
    if isinstance(value, str | int | float | bool):
        return True
    return isinstance(value, list) and len(value) <= _MAX_FIELDS and all(isinstance(v, str) for v in value)


def _flat(schema: Any) -> dict[str, Any]:
    """The server's schema cut to the keywords MCP form schemas use."""
    if not isinstance(schema, dict):
        return {"type": "object"}
    flat: dict[str, Any] = {k: v for k, v in schema.items() if k in _OBJECT_KEYS}
    flat["type"] = "object"
    properties = schema.get("properties")
    flat["properties"] = {str(name): _field(spec) for name, spec in list(properties.items())[:_MAX_FIELDS]} \
        if isinstance(properties, dict) else {}
    if not isinstance(flat.get("required"), list) or not all(isinstance(r, str) for r in flat["required"]):
        flat.pop("required", None)
    return flat


def _field(spec: Any) -> dict[str, Any]:
    if not isinstance(spec, dict):
        return {}
    out: dict[str, Any] = {k: v for k, v in spec.items() if k in _FIELD_KEYS}
    for key in ("items",):
        if key in out:
            out[key] = _field(out[key])
    for key in ("oneOf", "anyOf"):
        if key in out:
            options = out[key]
            out[key] = [_field(o) for o in options[:_MAX_FIELDS]] if isinstance(options, list) else []
            if not out[key]:
                del out[key]
    return out


def _field_of(error: ValidationError, schema: dict[str, Any], content: dict[str, Any]) -> str:
    if error.absolute_path:
        return str(error.absolute_path[0])
    if error.validator == "required":
        missing = [name for name in schema.get("required", ()) if name not in content]
        if missing:
            return str(missing[0])
    return ""


# -- the resume ----------------------------------------------------------------------------------
async def deliver_answers(held: HeldCalls, continuation: Continuation, request: LoopRequest,
                          tools: ToolRunner) -> None:
    """Give each held call of ``continuation`` its answer and put what it did next into the resumed turn:
    its result (the turn goes on) or its next question (``turn.asked``: the turn pauses again)."""
    turn = request.resume
    assert turn is not None
    items = [item for item in continuation.pending if is_elicitation(item)]
    if not items:
        return
    calls = {c["id"]: c for c in turn.assistant.get("tool_calls") or ()}

    async def one(item: dict[str, Any]) -> tuple[dict[str, Any], ToolResult | dict[str, Any] | InputRetry]:
        answer = turn.answers.get(item["tool_call_id"])
        tool = tools.get(item["name"])
        retry = retry_of(item, answer, str(getattr(getattr(tool, "spec", None), "source", "")))
        if retry is not None and await held.take_over(continuation.tenant, item, answer, continuation.id):
            return item, retry  # a stateless server's call: this replica sends the retry (the resumed turn runs it)
        timeout_s = float(getattr(getattr(tool, "spec", None), "timeout_s", 30.0))
        return item, await held.deliver(continuation.tenant, item, answer, timeout_s)

    started = time.perf_counter()
    delivered = await asyncio.gather(*(one(item) for item in items))
    request.state.add_wait(time.perf_counter() - started)  # waiting on tools, not the gateway's own time
    for item, outcome in delivered:
        call = calls[item["tool_call_id"]]
        if isinstance(outcome, InputRetry):
            turn.retries[call["id"]] = outcome
        elif isinstance(outcome, ToolResult):
            turn.results[call["id"]] = outcome
            record(request.state.tool_records, call, outcome.status, outcome.elapsed_ms)
        else:
            turn.asked.append(PendingCall(call, "elicitation", ask=outcome))


def retry_of(item: dict[str, Any], answer: dict[str, Any] | None, source: str) -> InputRetry | None:
    """The retry a stateless server's question stored (``Ask.pending_fields``) with the answer; None for any
    other question (only its holder can answer it), and when the tool's ``source`` here is not the server
    that asked (a config changed between): its state goes to no other server. A timed-out question is
    retried declined."""
    stored = item.get("retry")
    if not isinstance(stored, dict) or not isinstance(stored.get("input_key"), str) or stored.get("server") != source:
        return None
    state = stored.get("request_state")
    action = answer.get("action") if answer is not None else "decline"
    content = answer.get("content") if answer is not None else None
    return InputRetry(state if isinstance(state, str) else None, stored["input_key"],
                      "accept" if action == "accept" else "cancel" if action == "cancel" else "decline",
                      content if isinstance(content, dict) else None)


async def audit_answers(store: Store, c: Continuation, answers: dict[str, dict[str, Any] | None],
                        key_id: str | None, key_name: str | None) -> None:
    """One ``elicitation_<action>`` entry per answered question (never its content), ``elicitation_timeout`` for
    the questions that timed out."""
    for item in c.pending:
        call_id = item["tool_call_id"]
        if not is_elicitation(item) or call_id not in answers:
            continue
        answer = answers[call_id]
        if answer is None:
            await store.append_audit(audit_entry(c, item, "elicitation_timeout", None, None, ELICITATION_TIMED_OUT))
        else:
            event = {"accept": "elicitation_accepted", "decline": "elicitation_declined",
                     "cancel": "elicitation_cancelled"}[answer["action"]]
            await store.append_audit(audit_entry(c, item, event, key_id, key_name, None))
