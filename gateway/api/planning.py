"""The route a request names, and the client tools it may bring to it: the same rules on every surface."""

from __future__ import annotations

from typing import Any

from gateway.api.runtime import Runtime
from gateway.config.model import ApiKey
from gateway.errors import GatewayError, bad_request, quoted
from gateway.governance.access import visible_routes
from gateway.loop.engine import server_tool_names
from gateway.routing.routes import RoutePlan


def route_of(runtime: Runtime, key: ApiKey, model: str) -> RoutePlan:
    """The plan of ``model``; 404 naming the models this key may see when there is none."""
    plan = runtime.routes.lookup(model)
    if plan is None:
        raise GatewayError(404, f"The model {quoted(model)} does not exist. Known models: "
                           f"{', '.join(visible_routes(key, runtime.routes.names())) or 'none'}.",
                           "invalid_request_error", "model", "model_not_found")
    return plan


def refuse_name_clashes(runtime: Runtime, plan: RoutePlan, tools: list[dict[str, Any]], model: str,
                        kind: str) -> None:
    """400 when a client tool (``kind``: how the surface calls it) has the name of one of the route's
    server tools: the model could not tell which one it calls, and a result could reach the wrong one."""
    server = set(server_tool_names(plan, runtime.tools))
    for index, tool in enumerate(tools):
        if tool["function"]["name"] in server:
            raise bad_request(f"{kind} {quoted(tool['function']['name'])} has the name of a server "
                              f"tool of model {quoted(model)}; rename it", f"tools[{index}]")
