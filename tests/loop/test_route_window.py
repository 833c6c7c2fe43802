"""The context step resolves a route's window once per route plan: a plan of the same name built from
another config (a second gateway in one process, a test's own) never gets the first plan's numbers."""

from __future__ import annotations

from gateway.config.loader import parse_config
from gateway.loop.context_step import ContextStep, route_window
from gateway.providers.registry import adapter_for
from gateway.routing.routes import RoutePlan
from gateway.routing.walk import ResolvedTarget

CONFIG = """
providers:
  up: {type: openai, base_url: "http://127.0.0.1:9/v1", api_key: k, default_max_tokens: 1000}
models:
  r:
    targets: [{provider: up, model: m}]
    context_window: %d
    context: {threshold: %s}
"""


def plan_of(window: int, threshold: float) -> RoutePlan:
    config = parse_config(CONFIG % (window, threshold))
    provider = config.providers["up"]
    target = ResolvedTarget("up:m", provider, "m", adapter_for(provider.type), "up:m")
    return RoutePlan.build(config.models["r"], (target,))


def test_a_plan_is_resolved_once() -> None:
    plan = plan_of(10_000, 0.5)
    first = route_window(plan)
    assert (first.window, first.known, first.limit, first.label, first.model) == (10_000, True, 5_000, "up:m", "m")
    assert first.default_output == 1000  # the provider's default, under a quarter of the window
    assert route_window(plan) is first


def test_a_new_plan_of_the_same_name_is_resolved_anew() -> None:
    before = route_window(plan_of(10_000, 0.5))
    after = route_window(plan_of(2_000, 0.9))
    assert after is not before
    assert (after.window, after.limit, after.default_output) == (2_000, 1_800, 500)


def test_the_request_names_its_reserve() -> None:
    plan = plan_of(10_000, 0.5)

    def step(params: dict[str, object]) -> ContextStep:
        return ContextStep(None, None, plan, params, 0.0, None, None)  # type: ignore[arg-type]

    assert step({}).reserve == 1000 + 64
    assert step({"max_tokens": 300}).reserve == 300 + 64
    assert step({"max_completion_tokens": 200, "max_tokens": 300}).reserve == 200 + 64
