"""A stateless MCP server's call (the 2026-07-28 revision): ``input_required`` rounds driven here, durably.

Such a server keeps no session: a tool that needs input answers ``input_required`` with the
embedded requests and an opaque ``requestState``, and the client retries ``tools/call`` with the
answers (``inputResponses``) and that state. The SDK's ``Client.call_tool`` drives those rounds
itself and never shows the state, so a question could only be answered on the replica whose call
is waiting. This module drives the rounds with the SDK's own driver and session calls instead,
keeping the round in progress in :data:`INPUT_ROUND`: a question the call's handler pauses for
then carries what any replica needs to send the retry (:func:`retry_fields`, stored with the
pause), and a call the loop retries with a user's answer (:data:`~gateway.tools.interaction.CALL_RETRY`)
starts with that retry instead of a new call (:func:`call_stateless`).

Only a round whose one input request is the question is retried elsewhere: the answers of other
requests in the same round (a second question, a sampling) would have to be stored too. The state
is bounded (:data:`MAX_REQUEST_STATE_CHARS`); a question beyond the bound is answered only where
the call runs, as for a session-holding server.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.client import Client
from mcp.client._input_required import run_input_required_driver
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from gateway.tools.interaction import InputRetry

#: the longest ``requestState`` stored with a pause (longer: the question is answered where the call runs)
MAX_REQUEST_STATE_CHARS = 64 * 1024


@dataclass(slots=True)
class InputRound:
    """The round of one call in progress: the server's last ``input_required`` result (None: none yet)."""

    server: str
    tool: str
    current: types.InputRequiredResult | None = None


#: the round of the stateless call running in this context (its input requests' handlers read it)
INPUT_ROUND: contextvars.ContextVar[InputRound | None] = contextvars.ContextVar("loopgate_mcp_input_round",
                                                                                default=None)


def is_stateless(client: Client) -> bool:
    return client.protocol_version in MODERN_PROTOCOL_VERSIONS


def retry_fields(input_key: object) -> dict[str, Any] | None:
    """What a replica needs to retry the call with the answer to input request ``input_key``; None when the
    round cannot be retried elsewhere (not a stateless call, other requests in the round, a state too large)."""
    round_ = INPUT_ROUND.get()
    current = round_.current if round_ is not None else None
    if round_ is None or current is None or not isinstance(input_key, str):
        return None
    if list(current.input_requests or {}) != [input_key]:
        return None
    state = current.request_state
    if state is not None and len(state) > MAX_REQUEST_STATE_CHARS:
        return None
    return {"server": round_.server, "tool": round_.tool, "request_state": state, "input_key": input_key}


def answer_response(retry: InputRetry) -> types.ElicitResult:
    if retry.action == "accept" and retry.content is not None:
        return types.ElicitResult(action="accept", content=retry.content)
    return types.ElicitResult(action=retry.action)


async def call_stateless(client: Client, server: str, tool: str, arguments: dict[str, Any], progress: Any,
                         meta: Any, retry: InputRetry | None) -> types.CallToolResult:
    """``tools/call`` on a stateless server, its ``input_required`` rounds answered through the client's
    callbacks (the same handlers as the SDK's own driver); with ``retry``, the first request is that retry."""
    session = client.session
    round_ = InputRound(server, tool)
    token = INPUT_ROUND.set(round_)

    async def send(responses: types.InputResponses | None, state: str | None) -> Any:
        for relisted in (False, True):
            try:
                result = await session.call_tool(tool, arguments, progress_callback=progress,
                                                 input_responses=responses, request_state=state, meta=meta,
                                                 allow_input_required=True)
                break
            except MCPError as mismatch:
                # The protocol's recovery, as the SDK's own call does: the listed schema is stale, list once.
                if mismatch.code != types.HEADER_MISMATCH or relisted:
                    raise
                await client.list_tools(cache_mode="refresh")
        round_.current = result if isinstance(result, types.InputRequiredResult) else None
        return result

    async def dispatch(key: str, request: types.InputRequest) -> types.InputResponse | types.ErrorData:
        meta_of = request.params.meta if request.params else None
        return await session.dispatch_input_request(ClientRequestContext(session=session, request_id=key,
                                                                         meta=meta_of), request)

    try:
        if retry is None:
            first = await send(None, None)
        else:
            first = await send({retry.input_key: answer_response(retry)}, retry.request_state)
        result = await run_input_required_driver(first, dispatch=dispatch, retry=send,
                                                 max_rounds=client.input_required_max_rounds)
    finally:
        INPUT_ROUND.reset(token)
    if not isinstance(result, types.CallToolResult):
        raise MCPError(types.INTERNAL_ERROR, f"unexpected result type {type(result).__name__} from tools/call")
    return result
