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
    __slots__ = ("_per_token", "_prices", "_route_rates")

    def __init__(self, prices: dict[str, Price], routes: dict[str, list[str]] | None = None) -> None:
        """``routes``: route name -> its targets' labels (for ``estimate_nano``)."""
        self._prices = prices
        # Per label, nano-USD per token (input, cached input, output): one tuple read per call.
        scale = NANO / _PER_TOKEN
        self._per_token = {label: (price.input_per_mtok * scale,
                                   (price.input_per_mtok if price.cached_input_per_mtok is None
                                    else price.cached_input_per_mtok) * scale,
                                   price.output_per_mtok * scale) for label, price in prices.items()}
        # Per route, the dearest input and output nano-USD per token of its priced targets (whichever
        # target answers, a reservation at these rates covers it).
        self._route_rates: dict[str, tuple[float, float]] = {}
        for route, labels in (routes or {}).items():
            rates = [self._per_token[label] for label in labels if label in self._per_token]
            if rates:
                self._route_rates[route] = (max(rate[0] for rate in rates), max(rate[2] for rate in rates))

    @classmethod
    def from_config(cls, config: Config) -> Pricing:
        prices = {f"{provider.name}:{model}": price
                  for provider in config.providers.values() for model, price in provider.prices.items()}
        for route in config.models.values():
            for target in route.targets:
                if target.price is not None:
                    prices[target.label] = target.price
        return cls(prices, {name: [target.label for target in route.targets] for name, route in config.models.items()})

    def __bool__(self) -> bool:
        return bool(self._prices)

    def estimate_nano(self, route: str, prompt: int, output: int) -> int:
        """What a request of ``prompt`` and ``output`` tokens on ``route`` may cost at its dearest target (0:
        no target of it is priced): a USD budget's reservation for a key with no history yet."""
        rates = self._route_rates.get(route)
        return 0 if rates is None else round(prompt * rates[0] + output * rates[1])

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
