"""Counting a request's input tokens for a route, as its first model call would send them.

Shared by ``POST /v1/messages/count_tokens`` and ``POST /v1/responses/input_tokens``. The count
covers what the first call of the loop would send: the system prompt, the messages, the caller's
tools **and the route's server tools** (the model sees both; a key's tool allow-list applies).

When the route's first target is of a provider that counts (Anthropic's
``/v1/messages/count_tokens``, Gemini's ``:countTokens``, the OpenAI Responses API's
``/responses/input_tokens``) and the route's ``count_tokens`` is ``upstream`` (the default), that
provider counts the request the gateway would send it, byte for byte: ``exact``. The route's other
targets of the same provider are asked in turn when one cannot count (an outage); a 400 from one
is the caller's request being wrong, and is the answer. Otherwise, or when none could count, it is
the gateway's ``estimate`` for the first target (its tokenizer, corrected by what that target
reported on earlier calls: the context guard's estimator), encoded off the event loop when large
(``context/offload.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.api.driver import deadline_of
from gateway.api.services import CountingServices
from gateway.canonical import Message, ModelRequest, NativeRequest, ToolDef
from gateway.config.model import ApiKey
from gateway.context.offload import encoding_off_loop, raw_prompt_tokens
from gateway.errors import GatewayError, upstream_message
from gateway.loop.engine import server_tool_names
from gateway.routing.router import ResolvedTarget
from gateway.routing.routes import RoutePlan
from gateway.upstream.errors import ProviderError

#: provider types whose adapter counts a request upstream (``build_count_tokens`` / ``parse_count_tokens``)
COUNTING_PROVIDERS = frozenset({"anthropic", "gemini", "openai_responses"})


@dataclass(frozen=True, slots=True)
class Counted:
    """A request's input tokens, how they were counted (``exact`` or ``estimate``) and for which target."""

    tokens: int
    method: str
    target: str

    def report(self) -> dict[str, str]:
        """The ``gateway`` object of a count's answer."""
        return {"method": self.method, "target": self.target}


async def count_input(services: CountingServices, key: ApiKey, plan: RoutePlan, messages: list[Message],
                      client_tools: list[ToolDef], tool_choice: Any, params: dict[str, Any],
                      native: NativeRequest | None = None) -> Counted:
    """The input tokens of the first model call ``plan`` would make for this request (see the module docstring)."""
    names = server_tool_names(plan, services.tools)
    if key.tools is not None:
        names = tuple(name for name in names if name in key.tools)
    tools = services.tools.definitions(names) + client_tools
    request = ModelRequest(messages=messages, tools=tools, tool_choice=tool_choice if tools else None, params=params,
                           native=native)
    first = plan.targets[0]
    if first.provider.type in COUNTING_PROVIDERS and plan.route.count_tokens == "upstream":
        deadline = deadline_of(services.request_timeout_s)
        for target in plan.targets:
            if target.provider.type != first.provider.type:
                continue
            counted = await _exact(services, target, request, deadline)
            if counted is not None:
                return Counted(counted, "exact", target.label)
    raw = await raw_prompt_tokens(request.messages, request.tools, await encoding_off_loop(first.model))
    return Counted(services.estimator.calibrated(first.label, raw), "estimate", first.label)


async def _exact(services: CountingServices, target: ResolvedTarget, request: ModelRequest,
                 deadline: float) -> int | None:
    """The provider's own count; None when this target could not count (the next one, or the estimate, answers)."""
    adapter: Any = target.adapter
    try:
        native = adapter.build_count_tokens(request, target.provider, target.model)
        reply = await services.pool.post(target.provider.name, native, deadline)
        if reply.status >= 400:
            error = adapter.parse_error(reply.status, reply.headers, reply.body)
            if error.status == 400:  # the caller's request is wrong: the provider's word is the answer
                raise GatewayError(400, f"{target.label}: {upstream_message(error)}", "invalid_request_error")
            return None
        count: int = adapter.parse_count_tokens(reply.body)
        return count
    except ProviderError:
        return None
