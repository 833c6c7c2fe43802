"""From the ``model`` a client sends to a plan: targets (resolved once), server tools and limits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config.embeddings_section import EMBEDDING_PROVIDER_TYPES
from gateway.config.model import Config, RouteConfig, TargetConfig
from gateway.config.model_names import model_problem
from gateway.config.models_section import EmbeddingBounds
from gateway.errors import bad_request, quoted
from gateway.routing.rescue import StreamPolicy
from gateway.routing.router import ResolvedTarget, Router

#: a budget never reserves more than this for one answer (a caller's ``max_tokens`` of 10**30 must not
#: overflow the store's integer counters; far above any model's output)
MAX_OUTPUT_RESERVATION = 1 << 30


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
    # The ``model`` label in metrics: the route name, or ``PROVIDER/*`` for a direct route.
    metric_label: str
    # ``stream_rescue`` and ``stream_idle_timeout_s`` (routing/rescue.py).
    stream: StreamPolicy
    # What a budget reserves for the answer of a request that names no output cap: the largest
    # ``default_max_tokens`` of the route's providers (what an Anthropic target is sent anyway).
    default_output: int = 4096

    def output_reservation(self, params: Mapping[str, Any]) -> int:
        """The answer's tokens a budget reserves: the request's ``max_completion_tokens`` / ``max_tokens``
        (every surface's cap lands in one of them), else ``default_output``; at most ``MAX_OUTPUT_RESERVATION``."""
        asked = params.get("max_completion_tokens")
        if asked is None:
            asked = params.get("max_tokens")
        if asked.__class__ is not int or asked <= 0:
            return self.default_output
        return asked if asked < MAX_OUTPUT_RESERVATION else MAX_OUTPUT_RESERVATION

    @classmethod
    def build(cls, route: RouteConfig, targets: tuple[ResolvedTarget, ...], metric_label: str = "") -> RoutePlan:
        return cls(name=route.name, targets=targets, route=route, server_tools=route.tools,
                   tool_sources=tuple(f"mcp:{name}" for name in route.mcp_servers),
                   max_tool_iterations=route.max_tool_iterations, retries=route.retries,
                   tool_concurrency=route.tool_concurrency, needs_artifacts=_needs_artifacts(targets),
                   metric_label=metric_label or route.name,
                   stream=StreamPolicy(route.stream_rescue == "continue", route.stream_idle_timeout_s),
                   default_output=max((t.provider.default_max_tokens for t in targets), default=4096))


def _needs_artifacts(targets: tuple[ResolvedTarget, ...]) -> bool:
    return any(t.provider.type in _KEEPS_ARTIFACTS or t.provider.reasoning_passback is not False for t in targets)


#: provider types whose answers carry artifacts only they take back (thinking blocks, thought signatures,
#: encrypted reasoning): a client's history gets a paused turn's artifacts put back for them
_KEEPS_ARTIFACTS = ("anthropic", "gemini", "openai_responses")


#: what a direct embeddings route (``PROVIDER/UPSTREAM_MODEL`` on ``/v1/embeddings``) may ask for
_DIRECT_EMBEDDINGS = EmbeddingBounds()


class RouteTable:
    """Routes from config, plus ``PROVIDER/UPSTREAM_MODEL`` straight to one provider (no failover, no tools).

    Chat routes and embeddings routes (``kind: embeddings``) share one name space: ``lookup`` finds
    the first, ``lookup_embeddings`` the second, and each answers a 400 naming the right endpoint
    for a route of the other kind (an embeddings model cannot chat, nor a chat model embed).

    A direct route exists only for a provider whose ``direct`` is on, and only for a model name
    that can be sent upstream as it is (``config.model_names.model_problem``): anything else is refused before
    it reaches a URL, a metric label or the circuit breaker.
    """

    _DIRECT_CACHE_LIMIT = 1024

    def __init__(self, config: Config, router: Router) -> None:
        self._router = router
        self._direct_providers = frozenset(name for name, p in config.providers.items() if p.direct)
        self._provider_types = {name: p.type for name, p in config.providers.items()}
        self._routes: dict[str, RoutePlan] = {}
        self._embeddings: dict[str, RoutePlan] = {}
        for name, route in config.models.items():
            table = self._routes if route.kind == "chat" else self._embeddings
            table[name] = RoutePlan.build(route, router.resolve(route.targets))
        self._direct: dict[str, RoutePlan] = {}
        self._direct_embeddings: dict[str, RoutePlan] = {}

    def names(self) -> list[str]:
        """Every configured route, chat and embeddings (what ``/v1/models`` lists)."""
        return [*self._routes, *self._embeddings]

    def target_labels(self) -> list[str]:
        """Every configured target's circuit name (the console lists their circuits, closed ones too)."""
        plans = [*self._routes.values(), *self._embeddings.values()]
        return sorted({target.metric_label for plan in plans for target in plan.targets})

    def lookup(self, model: str) -> RoutePlan | None:
        """The chat plan for ``model``; None when there is none (a 404). Raises a 400 for an embeddings
        route, and for a direct name that names an enabled provider but could not be sent upstream safely."""
        plan = self._routes.get(model) or self._direct.get(model)
        if plan is not None:
            return plan
        if model in self._embeddings:
            raise bad_request(f"model {quoted(model)} is an embeddings route: call POST /v1/embeddings with it",
                              "model", "model_not_chat")
        return self._direct_plan(model, self._direct, None)

    def lookup_embeddings(self, model: str) -> RoutePlan | None:
        """The embeddings plan for ``model`` (a ``kind: embeddings`` route or ``PROVIDER/UPSTREAM_MODEL``);
        None when there is none; a 400 for a chat route or an unsafe direct name."""
        plan = self._embeddings.get(model) or self._direct_embeddings.get(model)
        if plan is not None:
            return plan
        if model in self._routes:
            raise bad_request(f"model {quoted(model)} is a chat route, not an embeddings route "
                              "(an embeddings route has kind: embeddings)", "model", "model_not_embeddings")
        provider = model.partition("/")[0]
        kind = self._provider_types.get(provider)
        if provider in self._direct_providers and kind not in EMBEDDING_PROVIDER_TYPES:
            raise bad_request(f"provider {quoted(provider)} is of type {kind}, which has no embeddings API",
                              "model", "model_not_embeddings")
        return self._direct_plan(model, self._direct_embeddings, _DIRECT_EMBEDDINGS)

    def _direct_plan(self, model: str, cache: dict[str, RoutePlan], bounds: EmbeddingBounds | None) -> RoutePlan | None:
        provider, sep, upstream_model = model.partition("/")
        if not sep or provider not in self._direct_providers:
            return None
        problem = model_problem(upstream_model)
        if problem is not None:
            raise bad_request(f"model {quoted(model)}: the upstream model name {problem}", "model", "invalid_model")
        target = TargetConfig(provider, upstream_model)
        route = (RouteConfig(name=model, targets=(target,)) if bounds is None
                 else RouteConfig(name=model, targets=(target,), kind="embeddings", embeddings=bounds))
        plan = RoutePlan.build(route, self._router.resolve([target], direct=True), f"{provider}/*")
        if len(cache) < self._DIRECT_CACHE_LIMIT:
            cache[model] = plan
        return plan
