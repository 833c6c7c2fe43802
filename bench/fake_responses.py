"""The bench fake upstream's OpenAI Responses API (``POST /responses``): the same answers as its chat completions.

``bench.fake_upstream`` serves these for a provider of ``type: openai_responses``: the text (or the
agent's ``bench_tool`` call, planned from the ``function_call_output`` items as ``plan_reply`` plans
from ``tool`` messages) as a ``response`` object, or as its event stream (``response.created``, the
item added, one ``output_text.delta`` per chunk, the item done, ``response.completed``), so
``bench.instructions --upstream responses`` compares the two upstream wire formats on equal answers.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

TEXT = "Hello from the fake upstream."


def _plan(req: dict[str, Any], agent_tools: int) -> tuple[str | None, dict[str, Any] | None]:
    """(text, one function_call item) as ``fake_upstream.plan_reply`` plans a chat answer."""
    if agent_tools > 0 and req.get("tools"):
        items = req.get("input") or []
        done = sum(1 for item in items if isinstance(item, dict) and item.get("type") == "function_call_output")
        if done < agent_tools:
            step = done + 1
            return None, {"type": "function_call", "id": f"fc_bench_{step}", "status": "completed",
                          "call_id": f"call_bench_{step}", "name": "bench_tool",
                          "arguments": orjson.dumps({"step": step}).decode()}
        return f"Done after {done} tool results.", None
    return TEXT, None


def _response(req: dict[str, Any], output: list[dict[str, Any]], prompt_tokens: int, chunks: int) -> dict[str, Any]:
    return {"id": "resp_fake", "object": "response", "created_at": int(time.time()), "status": "completed",
            "model": req.get("model", "fake-model"), "output": output, "error": None, "incomplete_details": None,
            "usage": {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": chunks, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": prompt_tokens + chunks}}


def _message(text: str) -> dict[str, Any]:
    return {"type": "message", "id": "msg_fake", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def response_body(req: dict[str, Any], agent_tools: int, prompt_tokens: int, chunks: int) -> bytes:
    text, call = _plan(req, agent_tools)
    return orjson.dumps(_response(req, [call] if call else [_message(str(text))], prompt_tokens, chunks))


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    data = f"event: {kind}\ndata: ".encode() + orjson.dumps({"type": kind, **payload}) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def stream_events(req: dict[str, Any], agent_tools: int, prompt_tokens: int, chunks: int) -> list[bytes]:
    """The HTTP chunks of one Responses event stream (without the response head and the final 0-chunk)."""
    text, call = _plan(req, agent_tools)
    started = _response(req, [], prompt_tokens, chunks) | {"status": "in_progress", "usage": None}
    events = [_event("response.created", {"response": started})]
    if call is not None:
        item = call
        events.append(_event("response.output_item.added", {"output_index": 0, "item": {**call, "arguments": ""}}))
        events.append(_event("response.function_call_arguments.delta", {"output_index": 0, "item_id": call["id"],
                                                                         "delta": call["arguments"]}))
    else:
        n = max(1, chunks)
        pieces = [f"tok{i} " if i < n - 1 else str(text) for i in range(n)]
        item = _message("".join(pieces))
        events.append(_event("response.output_item.added", {"output_index": 0, "item": {**item, "content": []}}))
        events += [_event("response.output_text.delta", {"output_index": 0, "item_id": "msg_fake", "content_index": 0,
                                                         "delta": piece}) for piece in pieces]
    events.append(_event("response.output_item.done", {"output_index": 0, "item": item}))
    events.append(_event("response.completed", {"response": _response(req, [item], prompt_tokens, chunks)}))
    return events
