"""What an MCP server asks of Loopgate during a tool call: a user's input (elicitation) or a model's
answer (sampling), routed to the handlers of the call that triggered it.

The SDK runs these callbacks on its own tasks, not the caller's. Over Streamable HTTP a server's
request arrives on the SSE stream of the ``tools/call`` POST, and the SDK dispatches it in a copy
of the context that sent that POST: :data:`CALL_INTERACTIONS` there is the triggering call's. On a
stateless (2026-07-28) connection the client drives ``input_required`` rounds inside the call
itself, so the same holds. On stdio the wire carries no link from a server request to the call it
belongs to (the reader task has no call's context): the request goes to the one call in flight on
that server, and when several are in flight it is answered as if no one could (decline / error),
never guessed. Everything the server sends is bounded before a handler sees it; a policy of
``decline``, a missing handler or a request that breaks a bound is declined (elicitation) or
refused with the protocol's error (sampling).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import mcp_types as types
import orjson
from mcp.client.session import ClientRequestContext

from gateway.config.mcp_section import ElicitationPolicy
from gateway.tools.interaction import (
    CALL_INTERACTIONS,
    CallInteractions,
    ElicitationAnswer,
    ElicitationRequest,
    SamplingAnswer,
    SamplingRefused,
    SamplingRequest,
)
from gateway.tools.mcp.stateless import retry_fields

log = logging.getLogger("loopgate.tools.mcp")

#: the longest ``message`` of an elicitation shown to a user (longer is declined, not cut: it is the server's question)
MAX_ELICITATION_MESSAGE_CHARS = 4000
#: a form's requested schema, serialised, and its nesting (MCP allows only flat objects of primitives)
MAX_SCHEMA_BYTES = 32 * 1024
MAX_SCHEMA_DEPTH = 6
MAX_SCHEMA_PROPERTIES = 64
#: a URL-mode elicitation's URL (http and https only: it is shown to a user as a link)
MAX_URL_CHARS = 2048
#: a sampling request's messages: how many, and their total size serialised
MAX_SAMPLING_MESSAGES = 64
MAX_SAMPLING_BYTES = 1024 * 1024

DECLINE = types.ElicitResult(action="decline")


def _depth(value: Any, limit: int) -> int:
    """Nesting of a JSON value, counted up to ``limit + 1`` (so a deep value costs little)."""
    if limit < 0 or not isinstance(value, dict | list):
        return 0
    children = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(child, limit - 1) for child in children), default=0)


def _schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "its requested schema is not an object schema"
    properties = schema.get("properties")
    if not isinstance(properties, dict) or len(properties) > MAX_SCHEMA_PROPERTIES:
        return f"its requested schema needs 1..{MAX_SCHEMA_PROPERTIES} properties"
    if _depth(schema, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        return f"its requested schema is nested deeper than {MAX_SCHEMA_DEPTH}"
    if len(orjson.dumps(schema)) > MAX_SCHEMA_BYTES:
        return f"its requested schema is larger than {MAX_SCHEMA_BYTES} bytes"
    return None


def _url_problem(url: str) -> str | None:
    if len(url) > MAX_URL_CHARS:
        return f"its URL is longer than {MAX_URL_CHARS} characters"
    scheme, _, rest = url.partition(":")
    if scheme.lower() not in ("http", "https") or not rest.startswith("//") or len(rest) <= 2:
        return "its URL is not an http(s) URL"
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        return "its URL contains whitespace or control characters"
    return None


def elicitation_request(server: str, params: types.ElicitRequestParams) -> ElicitationRequest | str:
    """The bounded request a handler sees, or (a str) why it is declined."""
    if len(params.message) > MAX_ELICITATION_MESSAGE_CHARS:
        return f"its message is longer than {MAX_ELICITATION_MESSAGE_CHARS} characters"
    if isinstance(params, types.ElicitRequestURLParams):
        problem = _url_problem(params.url)
        if problem is not None:
            return problem
        return ElicitationRequest(server, "url", params.message, url=params.url, elicitation_id=params.elicitation_id)
    problem = _schema_problem(params.requested_schema)
    if problem is not None:
        return problem
    return ElicitationRequest(server, "form", params.message, requested_schema=params.requested_schema)


def sampling_request(server: str, params: types.CreateMessageRequestParams, max_tokens: int) -> SamplingRequest | str:
    """The bounded request a handler sees (``maxTokens`` capped), or (a str) why it is refused."""
    if not params.messages or len(params.messages) > MAX_SAMPLING_MESSAGES:
        return f"it needs 1..{MAX_SAMPLING_MESSAGES} messages"
    messages = [m.model_dump(by_alias=True, mode="json", exclude_none=True) for m in params.messages]
    if len(orjson.dumps(messages)) > MAX_SAMPLING_BYTES:
        return f"its messages are larger than {MAX_SAMPLING_BYTES} bytes"
    def dumped(model: Any) -> Any:
        return None if model is None else model.model_dump(by_alias=True, mode="json", exclude_none=True)
    tools = [dumped(tool) for tool in params.tools] if params.tools else None
    return SamplingRequest(server, messages, max(1, min(params.max_tokens, max_tokens)), params.system_prompt,
                           params.temperature, list(params.stop_sequences) if params.stop_sequences else None,
                           dumped(params.model_preferences), tools, dumped(params.tool_choice))


def sampling_result(answer: SamplingAnswer) -> types.CreateMessageResult | types.CreateMessageResultWithTools:
    """A handler's answer as the SDK's result type (the tools variant when the content is a list)."""
    fields = {"role": answer.role, "content": answer.content, "model": answer.model, "stopReason": answer.stop_reason}
    if isinstance(answer.content, list):
        return types.CreateMessageResultWithTools.model_validate(fields, by_alias=True)
    return types.CreateMessageResult.model_validate(fields, by_alias=True)


class ServerRequests:
    """The elicitation and sampling callbacks of one MCP server's sessions.

    ``in_flight`` gives the interactions of the calls running on the server now: the fallback when
    the context does not say which call a request belongs to (stdio, a request on the standalone
    stream); only a single call in flight is an unambiguous answer.
    """

    def __init__(self, server: str, elicitation: ElicitationPolicy, sampling_route: str | None,
                 sampling_max_tokens: int, in_flight: Callable[[], list[CallInteractions]]) -> None:
        self.server = server
        self.policy = elicitation
        self.sampling_route = sampling_route
        self.max_tokens = sampling_max_tokens
        self._in_flight = in_flight

    def interactions(self) -> CallInteractions | None:
        current = CALL_INTERACTIONS.get()
        if current is not None:
            return current
        calls = self._in_flight()
        if len(calls) == 1:
            return calls[0]
        if calls:
            log.warning("MCP server %s sent a request during %d concurrent calls and the transport does not say "
                        "which one it belongs to; it is answered as unrouted", self.server, len(calls))
        return None

    async def elicit(self, context: ClientRequestContext,
                     params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        if self.policy == "decline":
            return DECLINE
        request = elicitation_request(self.server, params)
        if isinstance(request, str):
            log.warning("MCP server %s: elicitation declined: %s", self.server, request)
            return DECLINE
        interactions = self.interactions()
        if interactions is None or interactions.elicit is None:
            log.info("MCP server %s: elicitation declined: no call here can ask a user", self.server)
            return DECLINE
        retry = retry_fields(context.request_id)  # a stateless server's round: any replica may send the retry
        if retry is not None:
            request = replace(request, retry=retry)
        answer: ElicitationAnswer = await interactions.elicit(request)
        if answer.action != "accept" or request.mode == "url":
            return types.ElicitResult(action=answer.action)
        return types.ElicitResult(action="accept", content=answer.content or {})

    async def sample(self, context: ClientRequestContext, params: types.CreateMessageRequestParams
                     ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        request = sampling_request(self.server, params, self.max_tokens)
        if isinstance(request, str):
            return types.ErrorData(code=types.INVALID_PARAMS, message=f"Sampling request refused: {request}")
        interactions = self.interactions()
        if interactions is None or interactions.sample is None:
            return types.ErrorData(code=types.INVALID_REQUEST,
                                   message="Sampling is not available outside a tool call of a request")
        try:
            answer = await interactions.sample(request)
        except SamplingRefused as refused:  # the asking key's limits, budget or route said no: the server hears why
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"Sampling request refused: {refused}")
        return sampling_result(answer)
