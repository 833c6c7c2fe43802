"""``POST /v1/responses/compact``: the route's model summarises a conversation into one compaction item.

The body is a Responses request's (``model``, ``input``, ``instructions``, ``previous_response_id``,
read by the same parser as ``/v1/responses``; ``prompt_cache_key``, ``service_tier`` and the other
fields OpenAI takes here are accepted and not used). What it stands for (``compaction.stated_conversation``)
is rendered as text with the context guard's summariser prompt (``context/summary.py``: every
provider can summarise it, tool calls included, without tool definitions) and sent to the route's
targets as one model call, with their failover (``Router.complete``), without tools, ``max_tokens``
at most ``responses.compact_max_output_tokens`` (or the request's lower ``max_output_tokens``).

The answer is OpenAI's ``response.compaction`` object: ``output`` holds the conversation's user
messages, then the ``compaction`` item (``compaction.compaction_item``) to send back in later
requests, ``usage`` the call's tokens, and ``gateway`` the route, the target that answered and the
failover attempts. The call is a request like any other (``summarise``): the key's route allow-list,
budget, rate limits (its tokens count in tpm), usage rows, cost, access record and a ``chat`` span.
Errors are OpenAI's shape (``api/request/errors.py``); a model that answers without text is a 502
(``empty_summary``), after its tokens were counted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.api.driver import Operation, deadline_of, read_body
from gateway.api.loop.planning import route_of
from gateway.api.request.errors import error_response
from gateway.api.request.lifecycle import ErrorRenderer, Work
from gateway.api.responses.compaction import compaction_item, expander, stated_conversation, user_items
from gateway.api.responses.events import usage_object
from gateway.api.responses.ids import response_id
from gateway.api.responses.items import to_messages
from gateway.api.responses.request import ResponsesRequest, parse_responses_request
from gateway.api.services import ResponsesServices, Services
from gateway.canonical import CallRecord, Message, ModelRequest, text_of
from gateway.context.summary import summary_prompt
from gateway.errors import GatewayError
from gateway.http.json_response import JSONResponse
from gateway.routing.routes import RoutePlan
from gateway.usage.pricing import usd

PATH = "/v1/responses/compact"


@dataclass(slots=True)
class Summary:
    """A conversation summarised: the text, and the call's record (its usage, the target that answered)."""

    text: str
    record: CallRecord
    #: the target that answered (``provider:model``)
    target: str
    #: the model stopped at ``max_tokens``: the summary may end mid-sentence
    truncated: bool
    #: the call's cost in nano-USD (None: unpriced)
    cost: int | None


def summary_tokens(services: ResponsesServices, request: ResponsesRequest) -> int:
    """``max_tokens`` of a compaction call: the configured bound, or the request's ``max_output_tokens`` when lower."""
    asked = request.params.get("max_completion_tokens")
    bound = services.compact_max_output_tokens
    return min(bound, asked) if isinstance(asked, int) and asked > 0 else bound


async def summarise(services: ResponsesServices, work: Work, plan: RoutePlan, conversation: list[Message],
                    max_tokens: int) -> Summary:
    """One model call on ``plan``'s targets summarising ``conversation``, admitted, accounted and settled as
    ``work``'s (the caller renders the answer; ``work.done`` is theirs)."""
    params = {"max_tokens": max_tokens}
    await work.admit(work.incoming.body_bytes, plan=plan, params=params)
    work.show_limits()
    request = ModelRequest(messages=summary_prompt(conversation), params=params)
    record = CallRecord()
    span = work.span
    call_span = span.model_call(plan.targets, request) if span.recording else None
    waiting = time.perf_counter()
    try:
        answer = await services.loop.deps.router.complete(plan.targets, request, record.attempts, plan.retries,
                                                          deadline_of(services.loop.request_timeout_s))
    except BaseException as exc:
        if call_span is not None:
            call_span.failed(exc, record.attempts)
        raise
    record.waited_s = time.perf_counter() - waiting
    response = answer.response
    if call_span is not None:
        call_span.answered(answer.target, response, record.attempts)
    record.answered(answer.target.label, response.model or answer.target.model, response.usage)
    cost = work.account(record)
    await work.settle(record.usage)  # the tokens were spent whatever comes next
    text = text_of(response.message.get("content")).strip()
    if not text:
        raise GatewayError(502, f"{answer.target.label} answered the compaction without any summary text; try "
                           "again or compact on another route", "api_error", None, "empty_summary")
    return Summary(text, record, answer.target.label, response.finish_reason == "length", cost)


def gateway_report(model: str, summary: Summary) -> dict[str, Any]:
    """The ``gateway`` object of a compaction's answer: the route, who answered, the failover, the cost."""
    report: dict[str, Any] = {"route": model, "answered_by": summary.record.answered_by,
                              "attempts": summary.record.attempts, "summary_truncated": summary.truncated}
    if summary.cost is not None:
        report["usage_cost"] = usd(summary.cost)
    return report


class CompactSurface:
    """``POST /v1/responses/compact`` on the driver (``api/driver.py``): OpenAI's error shape, one JSON answer."""

    operations: tuple[Operation[Any], ...] = ()

    def __init__(self, path: str) -> None:
        self.path = path
        self.errors: ErrorRenderer = error_response

    def services(self, every: Services) -> ResponsesServices:
        return every.responses

    async def serve(self, work: Work, services: ResponsesServices) -> JSONResponse:
        key = await work.authenticate()
        parsed = parse_responses_request(await read_body(work, services.loop.max_body_bytes))
        plan = route_of(services.loop.routes, key, parsed.model)
        work.allow(plan)
        given = to_messages(parsed.input, expander(services, key.tenant), parsed.names).messages
        conversation = await stated_conversation(services, key.tenant, parsed.instructions,
                                                 parsed.previous_response_id, given)
        summary = await summarise(services, work, plan, conversation, summary_tokens(services, parsed))
        item = compaction_item(services.sealer, key.tenant, summary.text, summary.target)
        body = {"id": response_id(), "object": "response.compaction", "created_at": int(time.time()),
                "output": [*user_items(conversation), item], "usage": usage_object(summary.record.usage),
                "gateway": gateway_report(parsed.model, summary)}
        work.done(200)
        return JSONResponse(orjson.dumps(body), raw_headers=work.headers)


COMPACT = CompactSurface(PATH)

