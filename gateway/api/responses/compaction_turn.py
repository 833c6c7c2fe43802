"""A ``/v1/responses`` request whose input ends with ``{"type": "compaction_trigger"}``: a compaction, as a Response.

This is how Codex compacts when it uses remote compaction (its ``remote_compaction_v2``, the
default for a provider named ``OpenAI``): an ordinary streamed Responses request whose last input
item is the trigger, answered by a Response whose ``output`` holds exactly one ``compaction`` item
(Codex keeps the user messages itself and puts the item after them). The work is
``POST /v1/responses/compact``'s (``compact.summarise``: one model call on the route, failover,
the key's limits, budget and usage), the answer a Response object, ``completed``, with that one
item: JSON, or with ``stream: true`` the events of one (``response.created``,
``response.in_progress``, ``response.output_item.added``/``.done``, ``response.completed``), sent
once the summary is made, so a failure is an HTTP error in OpenAI's shape, not a failed stream.

Such a response is not stored (``store`` is not acted upon), so no later request can name it in
``previous_response_id``: the item itself carries the conversation on. ``background: true`` is a 400.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from gateway.api.request.lifecycle import Work
from gateway.api.responses.compact import gateway_report, summarise, summary_tokens
from gateway.api.responses.compaction import compaction_item, expander, stated_conversation
from gateway.api.responses.events import Batch, ResponseEvents, usage_object
from gateway.api.responses.ids import response_id
from gateway.api.responses.items import to_messages
from gateway.api.responses.request import ResponsesRequest
from gateway.api.services import ResponsesServices
from gateway.errors import bad_request
from gateway.http.json_response import JSONResponse
from gateway.http.sse_response import SSEResponse, event_frame
from gateway.routing.routes import RoutePlan


class _CompactionEvents(ResponseEvents):
    """The Response of a compaction and (``emit``) its events."""

    __slots__ = ()

    def finish(self, item: dict[str, Any], model: str, usage: dict[str, Any], gateway: dict[str, Any]) -> Batch:
        """The item added and done, the Response completed; the events of that (none without ``emit``)."""
        out: Batch = []
        self._done(self._add(item, out), out)
        response = self.response
        response.update(status="completed", model=model, usage=usage, gateway=gateway, store=False)  # not kept
        if self.emit:
            out.append(self._event("response.completed", {"response": response}))
        return out


async def compaction_turn(request: ResponsesRequest, services: ResponsesServices, work: Work,
                          plan: RoutePlan) -> JSONResponse | SSEResponse:
    """Answer a triggered compaction (see the module docstring); ``work`` is authenticated and allowed ``plan``."""
    key = work.key
    assert key is not None, "authenticated by the caller"
    if request.background:
        raise bad_request("a compaction (an input ending with compaction_trigger) runs in the foreground; send "
                          "'background': false", "background")
    given = to_messages(request.input[:-1], expander(services, key.tenant), request.names).messages
    conversation = await stated_conversation(services, key.tenant, request.instructions,
                                             request.previous_response_id, given)
    summary = await summarise(services, work, plan, conversation, summary_tokens(services, request))
    events = _CompactionEvents(response_id(), request.model, request.echo, None, request.stream, False)
    batch = events.start()
    batch += events.finish(compaction_item(services.sealer, key.tenant, summary.text, summary.target),
                           summary.record.model, usage_object(summary.record.usage),
                           {**gateway_report(request.model, summary), "status": "completed"})
    if not request.stream:
        work.done(200)
        return JSONResponse(orjson.dumps(events.response), raw_headers=work.headers)
    return SSEResponse(_frames(batch, work), work.headers)


async def _frames(batch: Batch, work: Work) -> AsyncIterator[bytes]:
    try:
        for event in batch:
            yield event_frame(event["type"], orjson.dumps(event))
    finally:
        work.done(200)
