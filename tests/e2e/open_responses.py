"""The Open Responses compliance checks (openresponses.org/compliance), run from Python against a base URL.

The public suite is a Bun script inside the specification's repository (``bin/compliance-test.ts``),
not a package a registry serves, and it validates with zod schemas generated from the specification's
OpenAPI document. These are its HTTP checks re-created: the same requests, the same semantic checks
(output present, status ``completed``, a ``function_call`` item, every stream event valid, ...), and the
same schemas, taken from ``openresponses-types`` (pydantic models generated from that OpenAPI
document, version ``SPEC_VERSION``; a pinned test dependency). Each check returns its errors, an
empty list when it passes, worded like the suite's so a failure reads the same in both.

Its WebSocket checks (``CLI WebSocket ...``, run from its CLI only) are ``open_responses_ws.py``.
"""

from __future__ import annotations

import base64
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openresponses_types as spec
import orjson
from pydantic import BaseModel, ValidationError

SPEC_VERSION = spec.__spec_version__
#: the suite's browser checks this module re-creates, in its order
CHECKS = ("basic-response", "assistant-message-phase", "response-output-phase-schema", "streaming-response",
          "system-prompt", "tool-calling", "image-input", "multi-turn", "compaction-endpoint",
          "compaction-missing-model")

# The schema of each stream event type: every model of the specification named ``...StreamingEvent``.
_EVENT_MODELS: dict[str, type[BaseModel]] = {}
for _model in vars(spec.types).values():
    if isinstance(_model, type) and issubclass(_model, BaseModel) and _model.__name__.endswith("StreamingEvent"):
        _annotation = _model.model_fields["type"].annotation
        for _value in getattr(_annotation, "__members__", {}).values():
            _EVENT_MODELS[str(_value.value)] = _model


def _png(side: int, rgb: tuple[int, int, int]) -> str:
    """A one-colour PNG as a data URL (the suite sends a small icon the same way)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + bytes(rgb) * side for _ in range(side))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode()


RED_SQUARE = _png(16, (220, 20, 60))
WEATHER_TOOL: dict[str, Any] = {
    "type": "function", "name": "get_weather", "description": "Get the current weather for a location",
    "parameters": {"type": "object", "properties": {"location": {
        "type": "string", "description": "The city and state, e.g. San Francisco, CA"}}, "required": ["location"]}}


@dataclass
class Sent:
    """One exchange: the status, the parsed body (the final Response of a stream) and the stream's events."""

    status: int
    body: Any
    events: list[dict[str, Any]]
    text: str


def _issues(model: type[BaseModel], value: Any) -> list[str]:
    """Schema errors as ``path: message`` lines (the suite prints zod's issues the same way)."""
    try:
        model.model_validate_json(orjson.dumps(value), strict=True)
    except ValidationError as error:
        return [f"{'.'.join(str(p) for p in issue['loc'])}: {issue['msg']}" for issue in error.errors()]
    return []


def resource_errors(response: Any) -> list[str]:
    """``response`` against the specification's ``ResponseResource``."""
    return _issues(spec.ResponseResource, response)


def event_errors(event: dict[str, Any]) -> list[str]:
    """One stream event against the schema its ``type`` names (an unknown type is an error, as in the suite)."""
    model = _EVENT_MODELS.get(str(event.get("type")))
    if model is None:
        return [f"Event validation failed for {event.get('type')}: not a streaming event of the specification"]
    return [f"Event validation failed for {event.get('type')}: {issue}" for issue in _issues(model, event)]


_FRAME = re.compile(r"^data: ?(.*)$", re.MULTILINE)


def _events(text: str) -> list[dict[str, Any]]:
    events = []
    for frame in text.split("\n\n"):
        data = "\n".join(_FRAME.findall(frame))
        if data and data != "[DONE]":
            events.append(orjson.loads(data))
    return events


def send(base_url: str, key: str, path: str, body: dict[str, Any], stream: bool = False) -> Sent:
    payload = {**body, "stream": True} if stream else body
    response = httpx.post(f"{base_url}{path}", json=payload, headers={"authorization": f"Bearer {key}"}, timeout=30)
    if not stream or response.status_code != 200:
        try:
            parsed: Any = response.json()
        except ValueError:
            parsed = None
        return Sent(response.status_code, parsed, [], response.text)
    events = _events(response.text)
    final = next((e.get("response") for e in reversed(events)
                  if e.get("type") in ("response.completed", "response.failed", "response.incomplete")), None)
    return Sent(response.status_code, final, events, response.text)


def _http(sent: Sent) -> list[str]:
    return [] if sent.status == 200 else [f"HTTP {sent.status}: {sent.text[:500]}"]


def _has_output(response: dict[str, Any]) -> list[str]:
    return [] if response.get("output") else ["Response has no output items"]


def _completed(response: dict[str, Any]) -> list[str]:
    status = response.get("status")
    return [] if status == "completed" else [f'Expected status "completed" but got "{status}"']


def _has_type(kind: str) -> Callable[[dict[str, Any]], list[str]]:
    def check(response: dict[str, Any]) -> list[str]:
        found = any(item.get("type") == kind for item in response.get("output") or [])
        return [] if found else [f'Expected output item of type "{kind}" but none found']
    return check


def _responded(sent: Sent, *checks: Callable[[dict[str, Any]], list[str]]) -> list[str]:
    """A ``/responses`` exchange: 200, a schema-valid ``ResponseResource``, then the semantic checks."""
    if errors := _http(sent):
        return errors
    if not isinstance(sent.body, dict):
        return ["No final response (response.completed, response.failed or response.incomplete)"]
    if errors := resource_errors(sent.body):
        return errors
    return [error for check in checks for error in check(sent.body)]


def _message(role: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": content, **extra}


def _streamed(sent: Sent) -> list[str]:
    """Every event valid, at least one, ending with a terminal response (the suite's streaming validators)."""
    if errors := _http(sent):
        return errors
    if not sent.events:
        return ["No streaming events received"]
    errors = [error for event in sent.events for error in event_errors(event)]
    return errors + _responded(sent, _completed)


def run_check(check: str, base_url: str, key: str, model: str) -> list[str]:
    """The errors of one compliance check against ``base_url`` (the ``/v1`` base) and ``model``; [] passes."""
    post = lambda body, stream=False: send(base_url, key, "/responses", {"model": model, **body}, stream)  # noqa: E731
    if check == "basic-response":
        return _responded(post({"input": [_message("user", "Say hello in exactly 3 words.")]}),
                          _has_output, _completed)
    if check == "assistant-message-phase":
        return _responded(post({"input": [
            _message("user", "Plan a greeting, then give it."),
            _message("assistant", [{"type": "output_text", "text": "Thinking about a greeting."}], phase="commentary"),
            _message("assistant", [{"type": "output_text", "text": "Hello!"}], phase="final_answer"),
            _message("user", "Say it again.")]}), _has_output, _completed)
    if check == "response-output-phase-schema":
        return _responded(post({"input": [_message("user", "Say hello.")]}), _has_output, _completed,
                          _phases_valid)
    if check == "streaming-response":
        return _streamed(post({"input": [_message("user", "Count from 1 to 5.")]}, stream=True))
    if check == "system-prompt":
        return _responded(post({"input": [_message("system", "You are a pirate. Always respond in pirate speak."),
                                          _message("user", "Say hello.")]}), _has_output, _completed)
    if check == "tool-calling":
        return _responded(post({"input": [_message("user", "What's the weather like in San Francisco?")],
                                "tools": [WEATHER_TOOL]}), _has_output, _has_type("function_call"))
    if check == "image-input":
        return _responded(post({"input": [_message("user", [
            {"type": "input_text", "text": "What do you see in this image? Answer in one sentence."},
            {"type": "input_image", "image_url": RED_SQUARE}])]}), _has_output, _completed)
    if check == "multi-turn":
        return _responded(post({"input": [
            _message("user", "My name is Alice."),
            _message("assistant", "Hello Alice! Nice to meet you. How can I help you today?"),
            _message("user", "What is my name?")]}), _has_output, _completed)
    if check == "compaction-endpoint":
        return _compacted(send(base_url, key, "/responses/compact", {
            "model": model, "prompt_cache_key": "openresponses-compliance",
            "input": [_message("user", "My name is Alice."), _message("assistant", "Hello Alice!"),
                      _message("user", "Remember my name.")]}))
    if check == "compaction-missing-model":
        sent = send(base_url, key, "/responses/compact", {"input": [_message("user", "Hello.")]})
        return [] if sent.status == 400 else [
            f"Expected a 400 refusal of a compact request without model, got HTTP {sent.status}: {sent.text[:300]}"]
    raise ValueError(f"unknown check {check!r}")


def _phases_valid(response: dict[str, Any]) -> list[str]:
    """Assistant output messages may carry ``phase``; when they do it is one of the specification's labels."""
    return [f"output[{index}].phase: {item['phase']!r} is not commentary or final_answer"
            for index, item in enumerate(response.get("output") or [])
            if item.get("type") == "message" and "phase" in item and item["phase"] not in ("commentary",
                                                                                           "final_answer")]


def _compacted(sent: Sent) -> list[str]:
    if errors := _http(sent):
        return errors
    errors = _issues(spec.CompactResource, sent.body)
    if not errors and not sent.body.get("output"):
        errors.append("Compacted response has no output items")
    return errors
