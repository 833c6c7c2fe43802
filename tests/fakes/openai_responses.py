"""A scriptable fake OpenAI Responses upstream (``POST /v1/responses``, OpenAI's and Azure's) over real HTTP.

``FakeResponsesUpstream`` is ``FakeUpstream`` (tests/fakes/upstream.py: the queue of ``Reply``
objects, the recorded requests and headers, the faults) answering in the Responses wire format:
a ``response`` object, or its event stream (``response.created``, ``output_item.added`` / ``.done``,
``output_text.delta``, ``reasoning_summary_text.delta``, ``function_call_arguments.delta`` / ``.done``,
``response.completed`` / ``.incomplete`` / ``.failed``). Every request goes through
``responses_request_problems`` first (a 400 as the real server's), with this fake as the account
that issued the encrypted reasoning it reads back.

A ``Reply`` says the answer as for the other wires; ``ResponsesReply`` adds what only this one
has: hosted tool items (``hosted``: output items such as a ``web_search_call``, said before the
message), a failure (``failed``: the ``response.error`` code), the ``namespace`` of each function call
(``namespaces``: a namespace's member is called by its own name and its namespace). ``Reply.reasoning`` becomes a
reasoning item (its summary) with ``encrypted_content`` (``enc:<issuer>:<n>``; the real API now
returns it by default); ``Reply.finish`` ``max_output_tokens`` or ``content_filter`` makes the answer
``incomplete`` for that reason. ``POST .../responses/input_tokens`` answers ``input_count_of`` the body
(recorded as a request too), after ``input_tokens_problems``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.openai_responses_rules import input_tokens_problems, responses_request_problems
from tests.fakes.upstream import FakeUpstream, Recorded, Reply

WIRE = "openai_responses"
_ISSUERS = itertools.count(1)
_INCOMPLETE = ("max_output_tokens", "content_filter")


@dataclass
class ResponsesReply(Reply):
    #: output items of hosted tools (said verbatim, before the message), e.g. a ``web_search_call``
    hosted: list[dict[str, Any]] = field(default_factory=list)
    #: the answer fails: ``response.failed`` (non-stream: ``status: failed``) with this error code
    failed: str | None = None
    #: the ``namespace`` of each of ``tool_calls`` (None: a top-level function), as a namespace's member is called
    namespaces: list[str | None] = field(default_factory=list)


def encrypted(issuer: str, n: int) -> str:
    return f"enc:{issuer}:{n}"


def input_count_of(body: dict[str, Any]) -> int:
    """The fake's count of an input_tokens body (a test computes the same)."""
    return 11 + len(orjson.dumps({k: body.get(k) for k in ("input", "instructions", "tools")})) // 4


class FakeResponsesUpstream(FakeUpstream):
    def __init__(self) -> None:
        super().__init__(WIRE)
        #: the account this fake is: only its own encrypted reasoning can be read back
        self.issuer = f"acct{next(_ISSUERS)}"
        self.rules = self._problems
        #: each request's query string, in order (Azure's ``api-version``)
        self.queries: list[str] = []
        #: model (deployment) names that do not reason: they refuse ``reasoning`` and ``include`` as gpt-4o does
        self.plain_models: set[str] = set()

    def build(self) -> web.Application:
        @web.middleware
        async def record_query(request: web.Request, handler: Any) -> web.StreamResponse:
            self.queries.append(request.query_string)
            return await handler(request)

        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[record_query])
        app.router.add_route("POST", "/{head:.*}responses/input_tokens", self._input_tokens)
        app.router.add_route("POST", "/{tail:.*}", self._handle)
        return app

    async def _input_tokens(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        problems = input_tokens_problems(body, self.issuer)
        self.requests.append(Recorded(request.path, body, problems, {n.lower(): v for n, v in request.headers.items()}))
        reply = self.script.popleft() if self.script else None
        if problems or (reply is not None and reply.status != 200):
            status = 400 if problems else reply.status  # type: ignore[union-attr]
            message = "; ".join(problems) or "boom"
            return web.json_response(self._error_payload(status, message), status=status)
        return web.json_response({"object": "response.input_tokens", "input_tokens": input_count_of(body)})

    def reset(self) -> None:
        super().reset()
        self.queries.clear()
        self.plain_models.clear()

    def _problems(self, body: dict[str, Any], model: str) -> list[str]:
        return responses_request_problems(body, model, self.issuer, model in self.plain_models)

    @staticmethod
    def received_reasoning(body: dict[str, Any]) -> list[dict[str, Any]]:
        """The reasoning items a request sent back."""
        return [item for item in body.get("input") or () if isinstance(item, dict) and item.get("type") == "reasoning"]

    # -- faults in this wire's shape ---------------------------------------------------------------
    def _wrong_shape(self, stream: bool = False) -> dict[str, Any]:
        if stream:
            return {"type": "response.output_text.delta", "output_index": "0", "delta": 42}
        return {"object": "response", "status": "completed", "output": "plain text instead of items"}

    def _stream_error(self) -> bytes:
        return b"event: error\ndata: " + orjson.dumps({"type": "error", "code": "server_is_overloaded",
                                                       "message": "overloaded", "param": None,
                                                       "sequence_number": 0}) + b"\n\n"

    # -- the answer --------------------------------------------------------------------------------
    def _output(self, reply: Reply, n: int) -> list[dict[str, Any]]:
        output: list[dict[str, Any]] = []
        if reply.reasoning:
            output.append({"type": "reasoning", "id": f"rs_{self._epoch}_{n}", "encrypted_content":
                           encrypted(self.issuer, n), "summary": [{"type": "summary_text", "text": reply.reasoning}]})
        output += getattr(reply, "hosted", [])
        if reply.text:
            output.append({"type": "message", "id": f"msg_{self._epoch}_{n}", "status": "completed",
                           "role": "assistant", "content": [{"type": "output_text", "text": reply.text,
                                                              "annotations": []}]})
        for i, (name, args) in enumerate(reply.tool_calls):
            call_id = reply.call_ids[i] if reply.call_ids else f"call_{self._epoch}_{n}_{i}"
            call = {"type": "function_call", "id": f"fc_{self._epoch}_{n}_{i}", "status": "completed",
                    "call_id": call_id, "name": name, "arguments": self._args(args)[0]}
            namespaces = getattr(reply, "namespaces", [])
            if i < len(namespaces) and namespaces[i] is not None:
                call["namespace"] = namespaces[i]
            output.append(call)
        return output

    def _response(self, reply: Reply, model: str, n: int, output: list[dict[str, Any]]) -> dict[str, Any]:
        prompt, completion = reply.usage or (10, 5)
        response: dict[str, Any] = {
            "id": f"resp_{self._epoch}_{n}", "object": "response", "created_at": int(time.time()),
            "status": "completed", "model": model, "output": output, "error": None, "incomplete_details": None,
            "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": reply.cached},
                      "output_tokens": completion,
                      "output_tokens_details": {"reasoning_tokens": 3 if reply.reasoning else 0},
                      "total_tokens": prompt + completion}}
        failed = getattr(reply, "failed", None)
        if failed:
            response.update(status="failed", output=[], error={"code": failed, "message": f"failed: {failed}"})
        elif reply.finish in _INCOMPLETE:
            response.update(status="incomplete", incomplete_details={"reason": reply.finish})
        return response

    def _whole(self, reply: Reply, model: str, n: int) -> dict[str, Any]:
        return self._response(reply, model, n, self._output(reply, n))

    def _frames(self, reply: Reply, model: str, n: int) -> list[bytes]:
        """One answer's events, item by item, in the order the real server sends them."""
        sequence = itertools.count()

        def event(kind: str, **payload: Any) -> bytes:
            return (f"event: {kind}\ndata: ".encode()
                    + orjson.dumps({"type": kind, "sequence_number": next(sequence), **payload}) + b"\n\n")

        whole = self._whole(reply, model, n)
        started = {**whole, "status": "in_progress", "output": [], "usage": None, "error": None,
                   "incomplete_details": None}
        frames = [event("response.created", response=started), event("response.in_progress", response=started)]
        for index, item in enumerate(whole["output"]):
            kind, at = item["type"], {"output_index": index, "item_id": item.get("id")}
            added: dict[str, Any] = {**item}
            if kind == "reasoning":
                added = {k: v for k, v in item.items() if k != "encrypted_content"} | {"summary": []}
            elif kind == "message":
                added["content"] = []
            elif kind == "function_call":
                added["arguments"] = ""
            frames.append(event("response.output_item.added", output_index=index, item=added))
            if kind == "reasoning":
                frames.append(event("response.reasoning_summary_part.added", **at, summary_index=0,
                                    part={"type": "summary_text", "text": ""}))
                frames += [event("response.reasoning_summary_text.delta", **at, summary_index=0, delta=piece)
                           for piece in self._halves(reply.reasoning)]
                frames.append(event("response.reasoning_summary_text.done", **at, summary_index=0,
                                    text=reply.reasoning))
            elif kind == "message":
                frames.append(event("response.content_part.added", **at, content_index=0,
                                    part={"type": "output_text", "text": "", "annotations": []}))
                frames += [event("response.output_text.delta", **at, content_index=0, delta=piece, logprobs=[])
                           for piece in self._split(reply.text, reply.pieces)]
                frames.append(event("response.output_text.done", **at, content_index=0, text=reply.text))
            elif kind == "function_call":
                frames += [event("response.function_call_arguments.delta", **at, delta=piece)
                           for piece in self._halves(item["arguments"])]
                frames.append(event("response.function_call_arguments.done", **at, arguments=item["arguments"]))
            frames.append(event("response.output_item.done", output_index=index, item=item))
        status = whole["status"]
        kind = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(status, "response.failed")
        frames.append(event(kind, response=whole))
        return frames
