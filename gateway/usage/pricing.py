"""What a loop's model calls cost, each call priced by the target that answered it.

The engine records one entry per answered call (``LoopState.calls``: target label and token
counts); failed attempts have no usage and no entry, so they are never billed. Prices are
resolved once at start-up into one dict keyed by target label (``provider:model``): a route
target's ``price`` wins over its provider's ``prices``; a label has one price (config check).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gateway.config.model import Config, Price

NANO = 1_000_000_000
_PER_TOKEN = 1_000_000  # prices are per million tokens


class Pricing:
    __slots__ = ("_per_token", "_prices")

    def __init__(self, prices: dict[str, Price]) -> None:
        self._prices = prices
        # Per label, nano-USD per token (input, cached input, output): one tuple read per call.
        scale = NANO / _PER_TOKEN
        self._per_token = {label: (price.input_per_mtok * scale,
                                   (price.input_per_mtok if price.cached_input_per_mtok is None
                                    else price.cached_input_per_mtok) * scale,
                                   price.output_per_mtok * scale) for label, price in prices.items()}

    @classmethod
    def from_config(cls, config: Config) -> Pricing:
        prices = {f"{provider.name}:{model}": price
                  for provider in config.providers.values() for model, price in provider.prices.items()}
        for route in config.models.values():
            for target in route.targets:
                if target.price is not None:
                    prices[target.label] = target.price
        return cls(prices)

    def __bool__(self) -> bool:
        return bool(self._prices)

    def cost_nano(self, calls: Iterable[Sequence[Any]]) -> int | None:
        """The cost in nano-USD (an integer, so aggregates add up exactly), or None when a call has no price.

        A call is ``[label, prompt, completion, cached, reasoning]``; cached tokens are part of the
        prompt (OpenAI's convention, which every adapter follows) and cost the cached price when
        one is given; reasoning tokens are part of the completion.
        """
        per_token = self._per_token
        if not per_token:
            return None
        total = 0.0
        for label, prompt, completion, cached, _reasoning in calls:
            price = per_token.get(label)
            if price is None:
                return None
            uncached, cached_price, output = price
            total += (prompt - cached) * uncached + cached * cached_price + completion * output
        return round(total)


def usd(nano: int) -> float:
    return nano / NANO
