"""Background responses over HTTP: start one, poll it, follow or resume its stream, cancel it.

- ``POST /v1/responses`` with ``background: true`` (``start_background``, called by the Responses
  handler) answers at once with the response ``in_progress``; with ``stream: true`` it answers
  with the stream, which the client may leave and resume: the run does not depend on it.
- ``GET /v1/responses/{id}`` answers from the run record on any replica sharing the store;
  ``?stream=true&starting_after=N`` replays the stored events after sequence number ``N`` and
  then follows the live ones (only for runs created with ``stream: true``, as OpenAI requires).
  Such a follower is a request for as long as it follows (the key's rpm, a concurrency slot of
  the key and its tenant) and is capped per run and per process; the followers of a run share
  one store poll per process (gateway/background/followers.py).
- ``POST /v1/responses/{id}/cancel`` sets the run's cancel flag (seen by the replica running it
  within ``background.heartbeat_s``) and waits, bounded, for the run to store ``cancelled``.

Whoever reads a run whose lease has run out (the replica running it died) ends it as ``failed``;
the store makes that happen once (``BackgroundStore.expire``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import orjson
from starlette.requests import Request

from gateway.api.driver import Handler, Operation
from gateway.api.request.lifecycle import Held, Work
from gateway.api.responses.events import usage_of
from gateway.api.responses.origin import with_continued_by
from gateway.api.responses.request import path_response_id, response_not_found
from gateway.api.responses.run import ResponseRun
from gateway.api.services import ResponsesServices, responses_services
from gateway.background.followers import Following
from gateway.background.runner import close_events, failed_snapshot, sse_frame
from gateway.canonical import Usage
from gateway.errors import bad_request
from gateway.http.json_response import JSONResponse
from gateway.http.sse_response import SSEResponse
from gateway.store.background.base import BackgroundRun, RunNotFound

# How long a cancel waits for the running replica to store "cancelled" before answering anyway.
CANCEL_WAIT_S = 10.0
LEASE_EXPIRED = ("the gateway replica running this background response stopped before it ended "
                 "(its lease expired)")

#: the Responses handler for what is not a background run
Fallback = Handler[ResponsesServices]
ONE = "/v1/responses/{id}"
CANCEL = ONE + "/cancel"


def check_background(services: ResponsesServices, store: bool) -> None:
    """What refuses a background request before anything runs: ``store: false``, a full process."""
    if not store:
        raise bad_request("background responses are stored ('background': true needs 'store': true)", "background")
    services.background.check_capacity()


_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed", "response.cancelled"})


async def _held(events: AsyncIterator[dict[str, Any]], held: Held) -> AsyncIterator[dict[str, Any]]:
    """The run's events; when it ends, however it ends, its usage is recorded and its admission settled
    (with the usage its last snapshot reports: a failed run's calls were paid for too)."""
    status = 500
    usage: Usage | None = None
    try:
        async for event in events:
            kind = event.get("type")
            if kind in _ENDS:
                if kind == "response.completed" or kind == "response.incomplete":
                    status = 200
                response = event.get("response")
                if isinstance(response, dict):
                    usage = usage_of(response)
            yield event
    finally:
        try:
            await close_events(events)
        finally:
            await held.end(status, usage)


async def start_background(services: ResponsesServices, tenant: str, run: ResponseRun, stream: bool,
                           held: Held) -> JSONResponse | SSEResponse:
    """Hand a prepared response to the runner; answer with the stored snapshot or the live stream.

    ``run.open()`` is not awaited: the request answers before the first model call. The response
    record is written first (its input items are listed while the run goes on); the run's end
    rewrites it, as in the foreground. ``held`` is the request's admission and meter: the run
    keeps them until it ends (if it cannot start, the request's own failure gives them back).
    """
    saved = False
    try:
        await run.save()
        saved = True
        stored = await services.background.launch(tenant, _held(run.events(), held), stream)
    except BaseException:
        await run.aclose()  # a claimed continuation goes back to resumable
        if saved:  # nothing runs: no record may say "in_progress"
            with contextlib.suppress(Exception):
                await services.records.delete(tenant, run.id)
        raise
    if not stream:
        return JSONResponse(orjson.dumps(stored.response))
    return SSEResponse(follow(services, stored.id, tenant, -1, counted=False))


async def settle(services: ResponsesServices, run: BackgroundRun, status: str = "failed") -> BackgroundRun:
    """``run`` as it stands, after ending it when its lease ran out (at most once across replicas)."""
    now = time.time()
    if not run.lease_expired(now):
        return run
    runner = services.background
    if status == "failed":
        response = failed_snapshot(run.response, "server_error", LEASE_EXPIRED)
    else:
        response = {**run.response, "status": status}
    event = None
    if run.stream and status == "failed":
        event = sse_frame({"type": "response.failed", "sequence_number": run.next_seq, "response": response})
    await runner.store.expire(run.id, run.tenant, now, run.events, status, response, event, runner.ttl_s)
    return await runner.store.get(run.id, run.tenant)


async def lookup(services: ResponsesServices, run_id: str, tenant: str) -> BackgroundRun | None:
    """The background run ``run_id`` of ``tenant`` (settled), or None when it is not one."""
    try:
        run = await services.background.store.get(run_id, tenant)
    except RunNotFound:
        return None
    return await settle(services, run)


async def _read(services: ResponsesServices, run_id: str, tenant: str) -> BackgroundRun:
    """The run as a follower sees it: settled (ended when its lease ran out). ``RunNotFound`` when gone."""
    return await settle(services, await services.background.store.get(run_id, tenant))


def follow(services: ResponsesServices, run_id: str, tenant: str, after: int, counted: bool = True) -> Following:
    """The stored events after sequence number ``after``, then the live ones until the run ends.

    The followers of one run in this process share one store poll (gateway/background/followers.py);
    ``counted``: under ``background.max_followers_per_run`` and ``max_followers`` (429 past them). The
    stream a run's own request answers with is not: the runs bound it.
    """
    return services.followers.follow(tenant, run_id, after, partial(_read, services), counted)


def _stream_options(request: Request) -> tuple[bool, int]:
    query = request.query_params
    stream_text = query.get("stream", "false").lower()
    if stream_text not in ("true", "false", "1", "0"):
        raise bad_request("'stream' must be true or false", "stream")
    stream = stream_text in ("true", "1")
    after_text = query.get("starting_after")
    if after_text is None:
        return stream, -1
    if not stream:
        raise bad_request("'starting_after' is only valid with stream=true", "starting_after")
    if len(after_text) > 12 or not after_text.lstrip("-").isdigit() or int(after_text) < -1:
        raise bad_request("'starting_after' must be a sequence number (an integer >= -1)", "starting_after")
    return stream, int(after_text)


def background_operations(get_fallback: Fallback, delete_fallback: Fallback
                          ) -> tuple[Operation[ResponsesServices], ...]:
    """``GET``/``DELETE /v1/responses/{id}`` (falling back to the Responses handlers for what is not a
    background run) and ``POST /v1/responses/{id}/cancel``. Listed before the Responses routes so they match first.
    """

    async def get_response(request: Request, services: ResponsesServices, work: Work) -> Any:
        key = await work.authenticate()
        run_id = path_response_id(request.path_params)
        stream, after = _stream_options(request)
        run = await lookup(services, run_id, key.tenant)
        if run is None:
            if stream:
                raise bad_request("stream=true is only supported for responses created with background=true "
                                  "and stream=true", "stream")
            return await get_fallback(request, services, work)
        if not stream:
            # A run that paused names what continued it, like a stored paused response (``endpoint.get_response``).
            extension = run.response.get("gateway")
            continuation_id = extension.get("continuation_id") if isinstance(extension, dict) else None
            shown = await with_continued_by(services.loop.continuations, key.tenant, run.response, continuation_id)
            return JSONResponse(orjson.dumps(shown))
        if not run.stream:
            raise bad_request("this response was not created with stream=true, so it cannot be streamed; "
                              "poll it without stream=true", "stream")
        # A follower is a request for as long as it follows: the key's rpm, and a concurrency slot of the key
        # and its tenant until it leaves (however it leaves: ``Following.aclose`` gives it back). It spends
        # nothing, so no budget: a key past its budget may still watch the run it already paid for.
        await work.admit(0, 0, budget=False)
        following = follow(services, run_id, key.tenant, after)  # a 429 past a cap gives the admission back
        following.on_close = partial(work.settle, None)
        return SSEResponse(following)

    async def cancel_response(request: Request, services: ResponsesServices, work: Work) -> Any:
        key = await work.authenticate()
        run_id = path_response_id(request.path_params)
        run = await cancel(services, run_id, key.tenant)
        if run is None:
            if await services.records.get(key.tenant, run_id) is not None:
                raise bad_request("Only responses created with background=true can be cancelled.",
                                  code="response_not_cancellable")
            raise response_not_found(run_id)
        return JSONResponse(orjson.dumps(run.response))

    async def delete_response(request: Request, services: ResponsesServices, work: Work) -> Any:
        key = await work.authenticate()
        run_id = path_response_id(request.path_params)
        runner = services.background
        # A run still going stops at its next write (its record is gone: the fence says so).
        if not await runner.store.delete(run_id, key.tenant):
            return await delete_fallback(request, services, work)
        runner.cancel_local(run_id)
        if await services.records.get(key.tenant, run_id) is not None:
            return await delete_fallback(request, services, work)
        return JSONResponse(orjson.dumps({"id": run_id, "object": "response.deleted", "deleted": True}))

    return (
        Operation("GET", ONE, get_response, responses_services),
        Operation("DELETE", ONE, delete_response, responses_services),
        Operation("POST", CANCEL, cancel_response, responses_services),
    )


async def cancel(services: ResponsesServices, run_id: str, tenant: str) -> BackgroundRun | None:
    """Cancel a background run and wait (bounded) for it to end; None when ``run_id`` is not one."""
    runner = services.background
    store = runner.store
    try:
        run = await store.get(run_id, tenant)
    except RunNotFound:
        return None
    if run.lease_expired(time.time()):  # its replica died: nobody else will end it
        return await settle(services, run, "cancelled")
    if not run.active:
        if run.status == "cancelled":
            return run  # cancelling twice is idempotent
        raise bad_request(f"Cannot cancel a response with status {run.status!r}.", code="response_not_cancellable")
    await store.request_cancel(run_id, tenant)
    if runner.cancel_local(run_id):
        await runner.wait_local(run_id, CANCEL_WAIT_S)
    deadline = time.monotonic() + CANCEL_WAIT_S
    while True:
        run = await settle(services, await store.get(run_id, tenant), "cancelled")
        if not run.active or time.monotonic() >= deadline:
            return run
        await asyncio.sleep(runner.config.poll_s)
