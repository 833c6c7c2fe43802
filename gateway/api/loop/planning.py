"""The route a request names, the client tools it may bring to it, and starting its loop: the same on every surface."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.api.request.lifecycle import Work
from gateway.api.services import LoopServices
from gateway.canonical import Message, NativeRequest, ToolDef
from gateway.config.model import ApiKey
from gateway.errors import GatewayError, bad_request, quoted
from gateway.governance.access import visible_routes
from gateway.loop.engine import LoopRequest, run_loop, server_tool_names
from gateway.loop.events import LoopEvent
from gateway.routing.routes import RoutePlan, RouteTable
from gateway.tools.registry import ToolRegistry


def route_of(routes: RouteTable, key: ApiKey, model: str) -> RoutePlan:
    """The plan of ``model``; 404 naming the models this key may see when there is none."""
    plan = routes.lookup(model)
    if plan is None:
        raise GatewayError(404, f"The model {quoted(model)} does not exist. Known models: "
                           f"{', '.join(visible_routes(key, routes.names())) or 'none'}.",
                           "invalid_request_error", "model", "model_not_found")
    return plan


def refuse_name_clashes(tools: ToolRegistry, plan: RoutePlan, client_tools: list[dict[str, Any]], model: str,
                        kind: str) -> None:
    """400 when a client tool (``kind``: how the surface calls it) has the name of one of the route's
    server tools: the model could not tell which one it calls, and a result could reach the wrong one."""
    server = set(server_tool_names(plan, tools))
    for index, tool in enumerate(client_tools):
        if tool["function"]["name"] in server:
            raise bad_request(f"{kind} {quoted(tool['function']['name'])} has the name of a server "
                              f"tool of model {quoted(model)}; rename it", f"tools[{index}]")


async def start_loop(services: LoopServices, work: Work, plan: RoutePlan, *, messages: list[Message],
                     client_tools: list[ToolDef], tool_choice: Any, params: dict[str, Any],
                     max_tool_iterations: int | None, headless: bool, stream: bool, deadline: float,
                     native: NativeRequest | None = None, stream_rescue: bool | None = None,
                     ) -> AsyncIterator[LoopEvent]:
    """A new loop for the authenticated, allowed caller (not a resume): admitted, artifacts put back, watched.

    ``max_tool_iterations`` is the caller's cap, never above the route's.
    """
    key = work.key
    assert key is not None, "authenticate first"
    await work.admit(work.incoming.body_bytes, plan=plan, params=params)
    if plan.needs_artifacts:
        await services.continuations.reattach(key.tenant, messages)
    max_iterations = plan.max_tool_iterations
    if max_tool_iterations is not None:
        max_iterations = min(max_iterations, max_tool_iterations)
    loop_request = LoopRequest(
        plan=plan, messages=list(messages), client_tools=client_tools, tool_choice=tool_choice, params=params,
        max_iterations=max_iterations, headless=headless, tenant=key.tenant, stream=stream, deadline=deadline,
        key_id=key.id, key_name=key.name, allowed_tools=key.tools, native=native, stream_rescue=stream_rescue)
    work.watch(loop_request)
    return run_loop(loop_request, services.deps)
