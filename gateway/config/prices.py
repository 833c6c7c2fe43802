"""The ``price`` of a route target and a provider's ``prices`` (USD per million tokens); the ``usage`` section.

A price is part of the bill a tenant sees, so a typo must fail at start-up, never price a call
at zero: every number is checked, and one target label (``provider:model``) has one price
across the whole config.
"""

from __future__ import annotations

from typing import Any

from gateway.config.checks import PRICE_KEYS, USAGE_KEYS, ConfigError, get, mapping, positive, type_name
from gateway.config.model import Price, RouteConfig, UsageConfig

#: far above any real list price (USD per million tokens): a larger number is a unit mistake
MAX_PRICE_PER_MTOK = 100_000.0


def parse_price(raw: Any, path: str) -> Price:
    section = mapping(raw, path, PRICE_KEYS)
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


#: a bound on how long day rows are kept (and how far back /admin/usage can look)
MAX_RETENTION_DAYS = 3660
#: usage a crashed process loses, and how late budgets see it, stay within this
MAX_FLUSH_S = 10.0


def usage_section(raw: Any) -> UsageConfig:
    section = mapping(raw, "usage", USAGE_KEYS)
    days = int(positive(get(section, "retention_days", "usage", int, 400), "usage.retention_days"))
    if days > MAX_RETENTION_DAYS:
        raise ConfigError("usage.retention_days", f"must be at most {MAX_RETENTION_DAYS}, got {days}")
    flush_s = positive(get(section, "flush_s", "usage", float, 0.5), "usage.flush_s")
    if flush_s > MAX_FLUSH_S:
        raise ConfigError("usage.flush_s", f"must be at most {MAX_FLUSH_S:g} seconds, got {flush_s:g}")
    return UsageConfig(record=get(section, "record", "usage", bool, True), retention_days=days, flush_s=flush_s)
