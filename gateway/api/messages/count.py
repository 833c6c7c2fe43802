"""``POST /v1/messages/count_tokens``: what the route's model would be sent, counted.

The count covers what the first call of the loop would send: the system prompt, the messages,
the caller's tools **and the route's server tools** (the model sees both). When the route's
first target is an Anthropic model (and the route's ``count_tokens`` is ``upstream``, the
default), Anthropic counts it (its own endpoint, the same request the gateway would send, byte
for byte): exact. Otherwise, or when no Anthropic target could count, it is the gateway's
estimate for that target (its tokenizer, corrected by what the target reported on earlier calls:
the context guard's estimator), encoded off the event loop when large. ``gateway.method`` says which.

A count is a request like any other for the rate limits: admitted under the key's and the
tenant's rpm and max_concurrent (a 429 in Anthropic's shape), its slot held until it answers,
an upstream count included. It sends no tokens to a model, so it takes none from tpm and is not
checked against or recorded in budgets (Anthropic's own endpoint is likewise limited by requests only).
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from gateway.api.driver import Operation, deadline_of, read_body
from gateway.api.loop.planning import route_of
from gateway.api.messages.errors import with_anthropic_headers
from gateway.api.messages.headers import betas_of, use_api_key
from gateway.api.messages.request import MessagesRequest, parse_messages_request
from gateway.api.request.lifecycle import Work
from gateway.api.services import CountingServices, counting_services
from gateway.canonical import ModelRequest
from gateway.config.model import ApiKey
from gateway.context.offload import encoding_off_loop, raw_prompt_tokens
from gateway.errors import GatewayError, upstream_message
from gateway.http.json_response import JSONResponse
from gateway.loop.engine import server_tool_names
from gateway.routing.router import ResolvedTarget
from gateway.routing.routes import RoutePlan
from gateway.upstream.errors import ProviderError

PATH = "/v1/messages/count_tokens"
# count_tokens takes no max_tokens; the parser wants one (it is the same parser as /v1/messages).
_STAND_IN_MAX_TOKENS = 1


async def count_tokens(request: Request, services: CountingServices, work: Work) -> JSONResponse:
    use_api_key(work.incoming)
    key = await work.authenticate()
    body = await read_body(work, services.max_body_bytes)
    without_max = isinstance(body, dict) and "max_tokens" not in body
    if without_max:
        body = {**body, "max_tokens": _STAND_IN_MAX_TOKENS}
    parsed = parse_messages_request(body, betas_of(work.incoming))
    if without_max:
        del parsed.native.fields["max_tokens"]
    plan = route_of(services.routes, key, parsed.model)
    work.allow(plan)
    await work.admit(0, tokens=0, budget=False)  # rpm and max_concurrent; no tokens, no budget (see above)
    counted = await _count(services, key, parsed, plan)
    await work.settle(None)  # frees the concurrency slot; nothing was used
    work.show_limits()
    return JSONResponse(orjson.dumps(counted), raw_headers=with_anthropic_headers(work.headers))


async def _count(services: CountingServices, key: ApiKey, parsed: MessagesRequest, plan: RoutePlan
                 ) -> dict[str, Any]:
    """The answer's body: the count, and how and for which target it was made."""
    names = server_tool_names(plan, services.tools)
    if key.tools is not None:
        names = tuple(name for name in names if name in key.tools)
    tools = services.tools.definitions(names) + parsed.tools
    model_request = ModelRequest(messages=parsed.messages, tools=tools,
                                 tool_choice=parsed.tool_choice if tools else None, params=parsed.params,
                                 native=parsed.native)
    deadline = deadline_of(services.request_timeout_s)
    first = plan.targets[0]
    if first.provider.type == "anthropic" and plan.route.count_tokens == "upstream":
        for target in plan.targets:
            if target.provider.type != "anthropic":
                continue
            counted = await _exact(services, target, model_request, deadline)
            if counted is not None:
                return _answer(counted, "exact", target.label)
    raw = await raw_prompt_tokens(model_request.messages, model_request.tools, await encoding_off_loop(first.model))
    return _answer(services.estimator.calibrated(first.label, raw), "estimate", first.label)


async def _exact(services: CountingServices, target: ResolvedTarget, request: ModelRequest,
                 deadline: float) -> int | None:
    """Anthropic's own count; None when this target could not count (the next one, or the estimate, answers)."""
    adapter: Any = target.adapter
    try:
        native = adapter.build_count_tokens(request, target.provider, target.model)
        reply = await services.pool.post(target.provider.name, native, deadline)
        if reply.status >= 400:
            error = adapter.parse_error(reply.status, reply.headers, reply.body)
            if error.status == 400:  # the caller's request is wrong: Anthropic's word is the answer
                raise GatewayError(400, f"{target.label}: {upstream_message(error)}", "invalid_request_error")
            return None
        count: int = adapter.parse_count_tokens(reply.body)
        return count
    except ProviderError:
        return None


def _answer(tokens: int, method: str, target: str) -> dict[str, Any]:
    return {"input_tokens": tokens, "gateway": {"method": method, "target": target}}


#: the Messages surface's operation Starlette routes (``POST /v1/messages`` is on the surface table)
COUNT_TOKENS = Operation("POST", PATH, count_tokens, counting_services, metered=True)
