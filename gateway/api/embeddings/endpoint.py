"""``POST /v1/embeddings``: parse, plan, bound, admit, walk the route's targets, account, render.

Everything a platform controls goes through the one lifecycle (``gateway/api/request/lifecycle.py``):
the key and its allow-list, budget, rpm and tpm (the input tokens counted before sending are
the estimate), usage rows and cost (``Work.account`` of the call's ``canonical.CallRecord``: the
call priced at its target's ``input_per_mtok``), the access record, metrics and the
``embeddings {model}`` span (its failed attempts as events, as on a chat span). No tool loop
runs: the call is the router's failover walk over the route's targets
(``gateway/routing/embeddings.py``), whose targets all return vectors of one size.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.api.driver import Operation, deadline_of, read_body
from gateway.api.embeddings.render import render_embeddings
from gateway.api.embeddings.request import check_inputs, check_tokens, parse_embeddings_request
from gateway.api.embeddings.tokens import count_inputs, decode_inputs
from gateway.api.request.errors import error_response
from gateway.api.request.lifecycle import ErrorRenderer, Work
from gateway.api.services import EmbeddingServices, Services
from gateway.canonical import CallRecord, Usage
from gateway.canonical_embeddings import EmbeddingRequest
from gateway.config.models_section import EmbeddingBounds
from gateway.errors import GatewayError, quoted
from gateway.governance.access import visible_routes
from gateway.http.json_response import JSONResponse
from gateway.routing.router import AllTargetsFailed
from gateway.routing.routes import RoutePlan, RouteTable
from gateway.usage.pricing import usd

PATH = "/v1/embeddings"
#: provider types whose embeddings API takes token ids (the others are sent the decoded text)
_TAKES_TOKENS = frozenset({"openai"})
_DEFAULT_BOUNDS = EmbeddingBounds()


def _plan(routes: RouteTable, work: Work, model: str) -> RoutePlan:
    plan = routes.lookup_embeddings(model)
    if plan is None:
        key = work.key
        assert key is not None
        raise GatewayError(404, f"The model {quoted(model)} does not exist. Known models: "
                           f"{', '.join(visible_routes(key, routes.names())) or 'none'}.",
                           "invalid_request_error", "model", "model_not_found")
    return plan


class EmbeddingsSurface:
    """``POST /v1/embeddings`` (and ``/embeddings``) on the driver (``api/driver.py``): OpenAI's error shape."""

    operations: tuple[Operation[Any], ...] = ()

    def __init__(self, path: str) -> None:
        self.path = path
        self.errors: ErrorRenderer = error_response

    def services(self, every: Services) -> EmbeddingServices:
        return every.embeddings

    async def serve(self, work: Work, services: EmbeddingServices) -> JSONResponse:
        answer = await embed(services, work)
        work.done(200)
        return answer


EMBEDDINGS = EmbeddingsSurface(PATH)


async def embed(services: EmbeddingServices, work: Work) -> JSONResponse:
    await work.authenticate()
    parsed = parse_embeddings_request(await read_body(work, services.max_body_bytes))
    plan = _plan(services.routes, work, parsed.model)
    work.allow(plan)
    bounds = plan.route.embeddings or _DEFAULT_BOUNDS
    check_inputs(parsed.inputs, bounds, parsed.model)
    counted = check_tokens(await count_inputs(parsed.inputs), bounds, parsed.model)
    inputs = parsed.inputs
    texts: list[str]
    if isinstance(inputs[0], str):
        texts = inputs
    elif all(target.provider.type in _TAKES_TOKENS for target in plan.targets):
        texts = []  # never read: every target takes the token arrays themselves
    else:
        texts = await decode_inputs(inputs)
    embedding_request = EmbeddingRequest(inputs, texts, parsed.dimensions, parsed.encoding_format, parsed.user,
                                         counted)
    deadline = deadline_of(services.request_timeout_s)
    await work.admit(work.incoming.body_bytes, counted)
    work.show_limits()
    record = CallRecord()
    first = plan.targets[0]
    span = work.span
    call_span = span.operation(f"embeddings {first.model}", {
        "gen_ai.operation.name": "embeddings", "gen_ai.request.model": first.model,
        "gen_ai.provider.name": first.provider.type, "loopgate.target": first.label}) if span.recording else None
    waiting = time.perf_counter()
    try:
        target, result = await services.embedder.embed(plan.targets, embedding_request, record.attempts,
                                                       plan.retries, deadline)
    except BaseException as exc:
        if call_span is not None:
            call_span.operation_done(_failure(exc), record.attempts)
        raise
    record.waited_s = time.perf_counter() - waiting  # the gateway overhead is the rest (metrics.OVERHEAD)
    prompt_tokens = result.prompt_tokens or counted
    record.answered(target.label, result.model or target.model, Usage(prompt_tokens=prompt_tokens))
    if call_span is not None:
        call_span.set("loopgate.target", target.label)
        call_span.set("gen_ai.provider.name", target.provider.type)
        call_span.set("gen_ai.response.model", record.model)
        call_span.set("gen_ai.usage.input_tokens", prompt_tokens)
        call_span.operation_done("", record.attempts)
    cost = work.account(record)
    gateway = {"answered_by": record.answered_by, "attempts": record.attempts}
    if cost is not None:
        gateway["usage_cost"] = usd(cost)
    payload = render_embeddings(result.vectors, parsed.encoding_format, parsed.model, prompt_tokens, gateway)
    await work.settle(record.usage)
    return JSONResponse(payload, raw_headers=work.headers)


def _failure(exc: BaseException) -> str:
    """The span's ``error.type``: the canonical error class the walk ended with, else the exception's name."""
    if isinstance(exc, AllTargetsFailed):
        return exc.last.error_class.value
    return type(exc).__name__
