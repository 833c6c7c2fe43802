"""``/v1/continuations/{id}``: inspect (GET), resume with decisions (POST, way B), cancel (DELETE)."""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import Route

from gateway import metrics
from gateway.api.approvals import key_identity
from gateway.api.body import read_json
from gateway.api.exchange import scope_request_id
from gateway.api.incoming import Incoming
from gateway.api.json_response import JSONResponse
from gateway.api.lifecycle import Work
from gateway.api.respond import respond
from gateway.api.runtime import Runtime
from gateway.api.sse_response import SSEResponse
from gateway.errors import GatewayError, bad_request, quoted
from gateway.loop.approvals import audit_decisions, continuation_view
from gateway.notify import Notifier
from gateway.routing.routes import RoutePlan
from gateway.store.continuations.base import Continuation, ContinuationNotFound

PATH = "/v1/continuations"


def resume_plan(runtime: Runtime, stored: Continuation) -> RoutePlan:
    """The route a continuation resumes on: the one it paused on, by name (ways A and B alike).

    Never the route of the follow-up request: the stored transcript belongs to its own route's
    tools and targets. Called before the claim, so a refused resume leaves the continuation pending.
    """
    plan = runtime.routes.lookup(stored.model)
    if plan is None:
        raise GatewayError(404, f"the model {quoted(stored.model)} of continuation {stored.id} is no longer "
                           "configured", param="model", code="model_not_found")
    return plan


# Ids the gateway issues are far shorter; a longer one cannot exist, and is not echoed back whole.
MAX_CONTINUATION_ID = 100


def _continuation_id(request: Request) -> str:
    continuation_id: str = request.path_params["id"]
    if len(continuation_id) > MAX_CONTINUATION_ID:
        raise ContinuationNotFound(continuation_id[:MAX_CONTINUATION_ID] + "…")
    return continuation_id


def _view(continuation: Continuation) -> dict[str, object]:
    return continuation_view(continuation)


def _begin(request: Request, runtime: Runtime, metered: bool) -> Work:
    """The app's wrapper (``app.FastChatPath``) chose the request id and sends ``x-request-id`` itself."""
    scope = request.scope
    rid = scope.get("loopgate.request_id") or scope_request_id(scope["headers"])
    return runtime.lifecycle.begin(request.method, PATH, Incoming(scope, request.receive), rid=rid, metered=metered)


def asker_of(stored: Continuation) -> str:
    """The id of the key that asked for the paused work ("" for continuations stored before askers were)."""
    asker = stored.data.get("asker")
    return str(asker.get("id") or "") if isinstance(asker, dict) else ""


def notify_decisions(notifier: Notifier, claimed: Continuation, decisions: list[dict[str, Any]],
                     decided_by: str | None) -> None:
    """``decided`` for the approve/deny decisions (client outputs are not decisions), then ``resumed``."""
    verdicts = [{"tool_call_id": d["tool_call_id"], "approved": d["approve"], "reason": d.get("reason")}
                for d in decisions if "output" not in d]
    if verdicts:
        notifier.decided(claimed, verdicts, decided_by)
    notifier.resumed(claimed, "b")


async def get_continuation(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.runtime
    work = _begin(request, runtime, metered=False)
    try:
        key = work.authenticate()
        continuation = await runtime.store.get_continuation(_continuation_id(request), key.tenant)
        work.done(200)
        return JSONResponse(orjson.dumps(_view(continuation)))
    except Exception as exc:
        return work.render_error(await work.failed(exc))


async def delete_continuation(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.runtime
    work = _begin(request, runtime, metered=False)
    try:
        key = work.authenticate()
        await runtime.store.cancel_continuation(_continuation_id(request), key.tenant)
        metrics.CONTINUATIONS.inc("cancelled")
        work.exchange.span.event("loopgate.cancel", {"loopgate.continuation_id": request.path_params["id"][:100]})
        work.done(200)
        return JSONResponse(orjson.dumps({"id": request.path_params["id"], "object": "continuation.deleted",
                                          "deleted": True}))
    except Exception as exc:
        return work.render_error(await work.failed(exc))


def _stream_options(body: Any) -> tuple[bool, bool]:
    """``stream`` and ``stream_options.include_usage`` of a decisions body."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    stream = body.get("stream")
    if stream is None:
        stream = False
    elif not isinstance(stream, bool):
        raise bad_request("'stream' must be a boolean", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", "stream_options")
    return stream, bool((options or {}).get("include_usage"))


async def resume_continuation(request: Request) -> JSONResponse | SSEResponse:
    """Way B: the caller decides (any key of the tenant, approvers included); the asker is charged."""
    runtime: Runtime = request.app.state.runtime
    work = _begin(request, runtime, metered=True)
    try:
        decider = work.authenticate()
        incoming = work.incoming
        body = await read_json(incoming, runtime.config.server.max_body_bytes)
        stream, include_usage = _stream_options(body)
        continuations = runtime.continuations
        stored = await runtime.store.get_continuation(_continuation_id(request), decider.tenant)
        if stored.status == "resumed":
            raise GatewayError(409, f"continuation {stored.id} was already resumed", code="continuation_conflict")
        results, approved = continuations.decisions_to_results(stored, body.get("decisions"))
        plan = resume_plan(runtime, stored)
        work.allow(plan, resume=True)
        asker = work.charge_to(asker_of(stored), plan)
        span = work.exchange.span
        if span.recording:
            for call_id, result in results.items():
                if result.status == "denied":
                    span.event("loopgate.denial", {"loopgate.continuation_id": stored.id,
                                                   "gen_ai.tool.call.id": call_id})
        await work.admit(incoming.body_bytes)
        claimed = await runtime.store.claim_continuation(stored.id, decider.tenant, continuations.lease_s)
        notify_decisions(continuations.notifier, claimed, body["decisions"], key_identity(decider)[1] or None)
        deadline = time.monotonic() + runtime.config.routing.request_timeout_s
        headless = asker.headless or incoming.headless
        loop_request = continuations.resumed_request(claimed, plan, results, approved, stream, deadline,
                                                     decider.tenant, headless)
        work.watch(loop_request)
        # The decider's identity goes to the audit log only: the work stays the asker's.
        decided = audit_decisions(runtime.store, claimed, approved, denied_reasons(body["decisions"]),
                                  *key_identity(decider))
        events = continuations.run_resumed(claimed, loop_request, runtime.deps, decided)
        work.show_limits()
        return await respond(work.settled_at_end(events), stream, include_usage, stored.model, work)
    except Exception as exc:
        error = await work.failed(exc)
        if error.status == 409:
            metrics.CONTINUATIONS.inc("conflict")
        elif error.code == "continuation_not_found":
            metrics.CONTINUATIONS.inc("not_found")  # unknown, expired or cancelled
        return work.render_error(error)


def denied_reasons(decisions: list[dict[str, object]]) -> dict[str, str | None]:
    """The calls a (validated) decision list denies, with the person's reason."""
    return {str(d["tool_call_id"]): d["reason"] if isinstance(d.get("reason"), str) else None  # type: ignore[misc]
            for d in decisions if d.get("approve") is False}


def continuation_routes() -> list[Route]:
    return [
        Route("/v1/continuations/{id}", get_continuation, methods=["GET"]),
        Route("/v1/continuations/{id}", resume_continuation, methods=["POST"]),
        Route("/v1/continuations/{id}", delete_continuation, methods=["DELETE"]),
    ]
