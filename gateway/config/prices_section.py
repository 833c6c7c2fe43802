"""The ``price`` of a route target and a provider's ``prices`` (USD per million tokens).

A price is part of the bill a tenant sees, so a typo must fail at start-up, never price a call
at zero: every number is checked, and one target label (``provider:model``) has one price
across the whole config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.config.checks import ConfigError, get, mapping, type_name

if TYPE_CHECKING:
    from gateway.config.models_section import RouteConfig

PRICE_KEYS = {"input_per_mtok", "output_per_mtok", "cached_input_per_mtok"}


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens; cached input at the input price when no cached price is given."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None


#: far above any real list price (USD per million tokens): a larger number is a unit mistake
MAX_PRICE_PER_MTOK = 100_000.0


def parse_price(raw: Any, path: str, input_only: bool = False) -> Price:
    """``input_only``: an embeddings target's price, which bills input tokens only (an output price is 0)."""
    section = mapping(raw, path, PRICE_KEYS)
    if input_only and "output_per_mtok" not in section:
        section = {**section, "output_per_mtok": 0}
    for key in ("input_per_mtok", "output_per_mtok"):
        if key not in section:
            raise ConfigError(f"{path}.{key}", "is required (USD per million tokens)")
    values = {key: _amount(get(section, key, path, float, None), f"{path}.{key}") for key in section}
    return Price(input_per_mtok=values["input_per_mtok"], output_per_mtok=values["output_per_mtok"],
                 cached_input_per_mtok=values.get("cached_input_per_mtok"))


def parse_prices(raw: Any, path: str) -> dict[str, Price]:
    """A provider's ``prices``: upstream model name -> price."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(path, f"expected a mapping of upstream model names to prices, got {type_name(raw)}")
    return {str(model): parse_price(price, f"{path}.{model}") for model, price in raw.items()}


def _amount(value: Any, path: str) -> float:
    if value is None or value != value or not 0 <= value <= MAX_PRICE_PER_MTOK:  # None, NaN, out of range
        raise ConfigError(path, f"must be a number of USD per million tokens in [0, {MAX_PRICE_PER_MTOK:g}]")
    return float(value)


def check_target_prices(models: dict[str, RouteConfig]) -> None:
    """A target label is priced once: calls are billed by the label that answered them."""
    seen: dict[str, tuple[Price, str]] = {}
    for name, route in models.items():
        for index, target in enumerate(route.targets):
            if target.price is None:
                continue
            label = f"{target.provider}:{target.model}"
            here = f"models.{name}.targets[{index}].price"
            first = seen.setdefault(label, (target.price, here))
            if first[0] != target.price:
                raise ConfigError(here, f"{label} already has another price at {first[1]}; give a target one "
                                        f"price (or set it once under providers.{target.provider}.prices)")
