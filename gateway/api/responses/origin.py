"""What a pause that began on ``/v1/responses`` keeps, so a decision made elsewhere answers as a Response,
and how a paused response names what continued it.

A paused Responses loop can be decided "way B" (``POST /v1/continuations/{id}``: an approver key,
the approvals inbox, or the asker itself) as well as by a Responses request answering the paused
response. Either way the decider gets a ``response`` object that continues the chain: its
``previous_response_id`` is the paused response, it is stored (unless the paused request said
``store: false``) so ``GET /v1/responses/{id}``, ``input_items`` and a follow-up with
``previous_response_id`` work. The loop layer knows no surface: the Responses run puts this
origin on its ``LoopRequest`` and the pause stores it opaquely as ``data["origin"]``.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.api.responses.reasoning import INCLUDE
from gateway.api.responses.request import ResponsesRequest
from gateway.loop.continuations import Continuations
from gateway.store.continuations.base import ContinuationNotFound

SURFACE = "responses"


def responses_origin(response_id: str, request: ResponsesRequest, instructions_first: bool) -> dict[str, Any]:
    """The origin of a Responses run's loop: the response it renders (the one a pause of it leaves
    paused), the model the caller named, the request fields a Response repeats, its ``store``, and
    whether the loop's transcript starts with the request's instructions (they are not part of the
    stored transcript a follow-up continues from)."""
    origin = {"surface": SURFACE, "response_id": response_id, "model": request.model, "echo": request.echo,
              "store": request.store, "instructions_first": instructions_first}
    if request.include and INCLUDE in request.include:  # a way-B decision's Response seals its reasoning too
        origin["include"] = [INCLUDE]
    return origin


def began_on_responses(data: dict[str, Any]) -> dict[str, Any] | None:
    """The origin of a continuation whose pause was rendered by the Responses API; None for any other."""
    origin = data.get("origin")
    if isinstance(origin, dict) and origin.get("surface") == SURFACE and isinstance(origin.get("response_id"), str):
        return origin
    return None


def decision_items(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Way B's (validated) decisions as the Responses input items that would have said the same:
    ``function_call_output`` for a client tool's output, ``mcp_approval_response`` for an approval
    (its ``approval_request_id`` the paused response's ``mcp_approval_request`` item). They are the
    decided response's input, listed by ``input_items``."""
    items: list[dict[str, Any]] = []
    for decision in decisions:
        call_id = decision["tool_call_id"]
        if "action" in decision:  # an answer to a held call's question: no Responses item says it (nor its content)
            continue
        if "output" in decision:
            items.append({"type": "function_call_output", "call_id": call_id, "output": decision["output"]})
            continue
        item: dict[str, Any] = {"type": "mcp_approval_response", "approval_request_id": f"mcpr_{call_id}",
                                "approve": decision["approve"]}
        if isinstance(decision.get("reason"), str):
            item["reason"] = decision["reason"]
        items.append(item)
    return items


async def with_continued_by(continuations: Continuations, tenant: str, response: Any, continuation_id: Any) -> Any:
    """``response`` (a stored or background paused Response) with ``gateway.continued_by: {id, object}``
    once its continuation was resumed: the answer that continued it, whose body is the continuation's
    ``result``. Unchanged when it is not paused, or nothing continued it (expired or cancelled included)."""
    if not (isinstance(continuation_id, str) and continuation_id and isinstance(response, dict)
            and isinstance(response.get("gateway"), dict)):
        return response
    try:
        continuation = await continuations.get(continuation_id, tenant)
    except ContinuationNotFound:
        return response
    if continuation.result is None:
        return response
    result = orjson.loads(continuation.result)
    return {**response, "gateway": {**response["gateway"], "continued_by": {"id": result["id"],
                                                                            "object": result["object"]}}}
