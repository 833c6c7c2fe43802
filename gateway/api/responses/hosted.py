"""A request's hosted tools against its route: what the loop carries, what each target drops, or a refusal.

The route's ``hosted_tools`` (``config/models_section.py``) decides, per target, for each hosted
tool the request names (``providers/hosted.py`` says what a target does with one):

* ``map`` (the default): a target that runs it takes it, one with a counterpart of its own maps it,
  any other drops it; the response's ``gateway.warnings`` names what the targets that answered dropped;
* ``drop``: as ``map``, but no target maps: only one that runs it natively takes it;
* ``refuse``: a request with a hosted tool some target of the route would drop is a 400 naming it
  (before anything is sent; the route fails over to any of its targets, so each must honour it).
"""

from __future__ import annotations

from typing import Any

from gateway.api.responses.request import ResponsesRequest
from gateway.canonical import HostedTools
from gateway.errors import bad_request, quoted
from gateway.providers.hosted import NATIVE, support
from gateway.routing.routes import RoutePlan

Drops = dict[str, tuple[str, ...]]


def plan_hosted(request: ResponsesRequest, plan: RoutePlan, functions: bool,
                refuse: bool = True) -> tuple[HostedTools | None, Drops]:
    """(the hosted tools the loop carries, the kinds each target drops by its label); raises the refusal.

    ``functions``: whether the model calls offer function tools too (the caller's or the route's);
    ``refuse``: False once the loop runs (a resume: its request was let through), the drops are only described.
    """
    if not request.hosted:
        return None, {}
    policy = plan.route.hosted_tools
    drops: Drops = {}
    for target in plan.targets:
        dropped = [tool for tool in request.hosted
                   if _dropped(support(target.adapter, str(tool.get("type")), target.model, functions), policy)]
        if not dropped:
            continue
        if policy == "refuse" and refuse:
            tool = dropped[0]
            raise bad_request(f"hosted tool type {quoted(tool.get('type'))} is not run by target {target.label} of "
                              f"model {quoted(request.model)}, and the route refuses hosted tools it would drop "
                              "(hosted_tools: refuse)", _param(request, tool))
        drops[target.label] = tuple(dict.fromkeys(str(tool.get("type")) for tool in dropped))
    return HostedTools(list(request.hosted), mapped=policy != "drop"), drops


def _dropped(how: str | None, policy: str) -> bool:
    return how is None or (how != NATIVE and policy == "drop")


def _param(request: ResponsesRequest, tool: dict[str, Any]) -> str:
    """``tools[i]``: where the caller wrote ``tool``."""
    for index, given in enumerate(request.echo.get("tools") or ()):
        if given is tool:
            return f"tools[{index}]"
    return "tools"
