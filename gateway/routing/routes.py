"""From the ``model`` a client sends to a plan: targets (resolved once), server tools and limits."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config.model import Config, RouteConfig, TargetConfig
from gateway.routing.router import ResolvedTarget, Router


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """A route ready for the hot path. Its limits are copied from ``route`` (where their defaults live)."""

    name: str
    targets: tuple[ResolvedTarget, ...]
    route: RouteConfig
    server_tools: tuple[str, ...]
    # Tool sources (``mcp:NAME``) whose every current tool also belongs to the route.
    tool_sources: tuple[str, ...]
    max_tool_iterations: int
    retries: int
    tool_concurrency: int
    # A target needs provider artifacts a client may have dropped.
    needs_artifacts: bool

    @classmethod
    def build(cls, route: RouteConfig, targets: tuple[ResolvedTarget, ...]) -> RoutePlan:
        return cls(name=route.name, targets=targets, route=route, server_tools=route.tools,
                   tool_sources=tuple(f"mcp:{name}" for name in route.mcp_servers),
                   max_tool_iterations=route.max_tool_iterations, retries=route.retries,
                   tool_concurrency=route.tool_concurrency, needs_artifacts=_needs_artifacts(targets))


def _needs_artifacts(targets: tuple[ResolvedTarget, ...]) -> bool:
    return any(t.provider.type in ("anthropic", "gemini") or t.provider.reasoning_passback is not False
               for t in targets)


class RouteTable:
    """Routes from config, plus ``PROVIDER/UPSTREAM_MODEL`` straight to one provider (no failover, no tools)."""

    _DIRECT_CACHE_LIMIT = 1024

    def __init__(self, config: Config, router: Router) -> None:
        self._router = router
        self._providers = config.providers
        self._routes: dict[str, RoutePlan] = {}
        for name, route in config.models.items():
            self._routes[name] = RoutePlan.build(route, router.resolve(route.targets))
        self._direct: dict[str, RoutePlan] = {}

    def names(self) -> list[str]:
        return list(self._routes)

    def lookup(self, model: str) -> RoutePlan | None:
        plan = self._routes.get(model) or self._direct.get(model)
        if plan is not None:
            return plan
        provider, sep, upstream_model = model.partition("/")
        if not sep or not upstream_model or provider not in self._providers:
            return None
        target = TargetConfig(provider, upstream_model)
        plan = RoutePlan.build(RouteConfig(name=model, targets=(target,)), self._router.resolve([target]))
        if len(self._direct) < self._DIRECT_CACHE_LIMIT:
            self._direct[model] = plan
        return plan
