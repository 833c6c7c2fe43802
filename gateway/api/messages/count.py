"""``POST /v1/messages/count_tokens``: what the route's model would be sent, counted.

The count covers what the first call of the loop would send: the system prompt, the messages,
the caller's tools **and the route's server tools** (the model sees both). When the route's
first target counts (an Anthropic or a Gemini model, and the route's ``count_tokens`` is
``upstream``, the default), that provider counts it (its own endpoint, the same request the
gateway would send, byte for byte): exact. Otherwise, or when no such target could count, it is
the gateway's estimate for that target (``api/loop/counting.py``). ``gateway.method`` says which.

A count is a request like any other for the rate limits: admitted under the key's and the
tenant's rpm and max_concurrent (a 429 in Anthropic's shape), its slot held until it answers,
an upstream count included. It sends no tokens to a model, so it takes none from tpm and is not
checked against or recorded in budgets (Anthropic's own endpoint is likewise limited by requests only).
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from gateway.api.driver import Operation, read_body
from gateway.api.loop.counting import Counted, count_input
from gateway.api.loop.planning import route_of
from gateway.api.messages.errors import with_anthropic_headers
from gateway.api.messages.headers import betas_of, use_api_key
from gateway.api.messages.request import parse_messages_request
from gateway.api.request.lifecycle import Work
from gateway.api.services import CountingServices, counting_services
from gateway.http.json_response import JSONResponse

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
    counted = await count_input(services, key, plan, parsed.messages, parsed.tools, parsed.tool_choice,
                                parsed.params, parsed.native)
    await work.settle(None)  # frees the concurrency slot; nothing was used
    work.show_limits()
    return JSONResponse(orjson.dumps(_answer(counted)), raw_headers=with_anthropic_headers(work.headers))


def _answer(counted: Counted) -> dict[str, Any]:
    return {"input_tokens": counted.tokens, "gateway": counted.report()}


#: the Messages surface's operation Starlette routes (``POST /v1/messages`` is on the surface table)
COUNT_TOKENS = Operation("POST", PATH, count_tokens, counting_services, metered=True)
