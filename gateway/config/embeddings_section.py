"""An embeddings route (``models.NAME`` with ``kind: embeddings``): targets that all return vectors of one size.

A route fails over between its targets; for embeddings that is only sound between models whose
vectors land in the same space, so every target declares its model's ``dimensions`` and a route
whose targets differ is refused here, at load (``loopgate check-config`` included): a fallback
to a model of another size would silently corrupt the caller's index. The request bounds
(``max_inputs``, ``max_input_tokens``, ``max_total_tokens``) default to OpenAI's own limits.
"""

from __future__ import annotations

from typing import Any

from gateway.config.checks import ConfigError, closest, get, mapping, positive
from gateway.config.model_names import model_problem
from gateway.config.models_section import EmbeddingBounds, RouteConfig, TargetConfig
from gateway.config.prices_section import parse_price
from gateway.config.providers_section import ProviderConfig

EMBEDDINGS_ROUTE_KEYS = {"kind", "targets", "retries", "max_inputs", "max_input_tokens", "max_total_tokens"}
EMBEDDINGS_TARGET_KEYS = {"provider", "model", "dimensions", "price"}
#: provider types with an embeddings API the gateway speaks
EMBEDDING_PROVIDER_TYPES = ("openai", "gemini", "litellm")
#: no model returns longer vectors; a larger number is a typo
MAX_DIMENSIONS = 65_536


def is_embeddings(raw: Any) -> bool:
    """Whether a ``models.NAME`` entry declares ``kind: embeddings`` (decided before it is parsed)."""
    return isinstance(raw, dict) and raw.get("kind") == "embeddings"


def embeddings_route_section(name: str, raw: Any, providers: dict[str, ProviderConfig]) -> RouteConfig:
    path = f"models.{name}"
    section = mapping(raw, path, EMBEDDINGS_ROUTE_KEYS)
    raw_targets = get(section, "targets", path, list, None)
    if not raw_targets:
        raise ConfigError(f"{path}.targets", "needs at least one target")
    targets = [_target(entry, f"{path}.targets[{index}]", providers) for index, entry in enumerate(raw_targets)]
    first = targets[0]
    for index, target in enumerate(targets[1:], 1):
        if target.dimensions != first.dimensions:
            raise ConfigError(f"{path}.targets[{index}].dimensions",
                              f"is {target.dimensions} but targets[0] ({first.label}) returns {first.dimensions}: "
                              "an embeddings route fails over only between models whose vectors have the same "
                              "size (a fallback to another model would corrupt the caller's index)")
    defaults = EmbeddingBounds()
    bounds = EmbeddingBounds(
        max_inputs=_count(section, "max_inputs", path, defaults.max_inputs),
        max_input_tokens=_count(section, "max_input_tokens", path, defaults.max_input_tokens),
        max_total_tokens=_count(section, "max_total_tokens", path, defaults.max_total_tokens),
    )
    retries = int(positive(get(section, "retries", path, int, 0), f"{path}.retries", allow_zero=True))
    return RouteConfig(name=name, targets=tuple(targets), retries=retries, kind="embeddings", embeddings=bounds)


def _target(entry: Any, path: str, providers: dict[str, ProviderConfig]) -> TargetConfig:
    item = mapping(entry, path, EMBEDDINGS_TARGET_KEYS)
    provider = get(item, "provider", path, str, "")
    if provider not in providers:
        raise ConfigError(f"{path}.provider", f"unknown provider '{provider}'{closest(provider, set(providers))}")
    kind = providers[provider].type
    if kind not in EMBEDDING_PROVIDER_TYPES:
        raise ConfigError(f"{path}.provider", f"'{provider}' is of type {kind}, which has no embeddings API "
                                              f"(embeddings targets: {', '.join(EMBEDDING_PROVIDER_TYPES)})")
    model = get(item, "model", path, str, "")
    if not model:
        raise ConfigError(f"{path}.model", "is required")
    problem = model_problem(model)
    if problem is not None:
        raise ConfigError(f"{path}.model", f"{model!r} {problem}")
    dimensions = get(item, "dimensions", path, int, None)
    if dimensions is None:
        raise ConfigError(f"{path}.dimensions", "is required: the length of the vectors this model returns "
                                                "(targets of one route must all return the same length)")
    if not 0 < dimensions <= MAX_DIMENSIONS:
        raise ConfigError(f"{path}.dimensions", f"must be in [1, {MAX_DIMENSIONS}], got {dimensions}")
    price = parse_price(item["price"], f"{path}.price", input_only=True) if item.get("price") is not None else None
    return TargetConfig(provider=provider, model=model, price=price, dimensions=dimensions)


def _count(section: dict[str, Any], key: str, path: str, default: int) -> int:
    return int(positive(get(section, key, path, int, default), f"{path}.{key}"))
