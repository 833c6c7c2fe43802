"""``POST /v1/responses/input_tokens``: the input tokens of a Responses request, counted for its route.

The body is a ``/v1/responses`` request (the same parser: ``input``, ``instructions``, ``tools``,
``tool_choice``, ``previous_response_id``, ``reasoning``, ...; ``model`` is required, it names the
route). What it stands for (``compaction.stated_conversation``: the instructions, the stored
conversation of ``previous_response_id``, the input with its compaction items opened) is counted
with the route's server tools beside the caller's (``api/loop/counting.py``): exactly by the first
target's provider where it counts (Anthropic, Gemini), else the gateway's estimate.

The answer is OpenAI's ``{"object": "response.input_tokens", "input_tokens": N}``, with a
``gateway`` object saying how (``method``: ``exact`` or ``estimate``) and for which target. A
count is a request for the rate limits (the key's and tenant's rpm and concurrency, a 429 in
OpenAI's shape) but sends no tokens to a model: it takes none from tpm and no budget, as
``/v1/messages/count_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.api.driver import Operation, read_body
from gateway.api.loop.counting import count_input
from gateway.api.loop.planning import route_of
from gateway.api.request.errors import error_response
from gateway.api.request.lifecycle import ErrorRenderer, Work
from gateway.api.responses.compaction import expander, stated_conversation
from gateway.api.responses.items import to_messages
from gateway.api.responses.request import parse_responses_request
from gateway.api.services import CountingServices, ResponsesServices, Services
from gateway.http.json_response import JSONResponse

PATH = "/v1/responses/input_tokens"


@dataclass(frozen=True, slots=True)
class InputTokenServices:
    """What a count reads: stored conversations and sealing (the Responses bundle), the counting services."""

    responses: ResponsesServices
    counting: CountingServices


class InputTokensSurface:
    """``POST /v1/responses/input_tokens`` on the driver (``api/driver.py``): OpenAI's error shape."""

    operations: tuple[Operation[Any], ...] = ()

    def __init__(self, path: str) -> None:
        self.path = path
        self.errors: ErrorRenderer = error_response

    def services(self, every: Services) -> InputTokenServices:
        return InputTokenServices(every.responses, every.counting)

    async def serve(self, work: Work, services: InputTokenServices) -> JSONResponse:
        key = await work.authenticate()
        responses, counting = services.responses, services.counting
        parsed = parse_responses_request(await read_body(work, counting.max_body_bytes))
        plan = route_of(counting.routes, key, parsed.model)
        work.allow(plan)
        given = to_messages(parsed.input, expander(responses, key.tenant), parsed.names).messages
        messages = await stated_conversation(responses, key.tenant, parsed.instructions,
                                             parsed.previous_response_id, given)
        await work.admit(0, tokens=0, budget=False)  # rpm and max_concurrent; no tokens, no budget (see above)
        counted = await count_input(counting, key, plan, messages, parsed.tools, parsed.tool_choice, parsed.params)
        await work.settle(None)  # frees the concurrency slot; nothing was used
        work.show_limits()
        work.done(200)
        body = {"object": "response.input_tokens", "input_tokens": counted.tokens, "gateway": counted.report()}
        return JSONResponse(orjson.dumps(body), raw_headers=work.headers)


INPUT_TOKENS = InputTokensSurface(PATH)
