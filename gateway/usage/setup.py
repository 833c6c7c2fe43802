"""Building the worker's ``Metering`` from the config and the opened store (once, at start-up)."""

from __future__ import annotations

import logging

from gateway.config.model import Config
from gateway.store.base import Store
from gateway.store.factory import open_usage
from gateway.store.usage.base import UsageStore
from gateway.usage.meter import Metering
from gateway.usage.pricing import Pricing

log = logging.getLogger("loopgate.usage")


def usage_store(config: Config, store: Store) -> UsageStore | None:
    if not config.usage.record:
        return None
    return open_usage(store, config.usage.retention_days, config.usage.flush_s)


def start_metering(config: Config, store: Store) -> Metering:
    tenants = frozenset({key.tenant for key in config.auth.keys} | {"default"} | set(config.tenants))
    budgets = {name: tenant.budget for name, tenant in config.tenants.items() if tenant.budget is not None}
    if not config.usage.record and (budgets or any(key.budget for key in config.auth.keys)):
        log.warning("budgets are configured but usage.record is off: budgets are not enforced")
    targets = frozenset(target.label for route in config.models.values() for target in route.targets)
    metering = Metering(Pricing.from_config(config), usage_store(config, store), tenants, budgets, targets)
    # A budget reservation outlives its request only when the request never reports back (a crash).
    metering.lease_s = config.routing.request_timeout_s + 60.0
    return metering
