"""Per-request usage metering: ``gateway.usage_cost``, the Prometheus counters and the daily aggregates.

A ``Meter`` follows one HTTP request (chat completion, either resume): it reads the request's work
through ``WorkRecord`` (gateway/canonical/records.py) — a loop's state it ``watch``es, whose
engine calls ``finish`` with the result just before rendering it (so the cost lands in the
response, stream or not), or the record of work that ran no loop, ``account``ed once its calls
answered — and the endpoint calls ``close`` once when the request is over, however it ended. ``close``
never waits for the store: it adds the counts in process (memory), or queues them for the Redis
store's next flush (gateway/store/usage/redis.py), after the response is produced; a failed or
dropped write is logged and counted (``loopgate_usage_store_failures_total``), never an error
for the caller. Calls that answered before a later failure are still recorded: they
were paid for.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from collections.abc import Coroutine, Mapping
from typing import Any, Protocol

from gateway.canonical import WorkRecord
from gateway.config.model import ApiKey, Budget
from gateway.loop.events import LoopResult
from gateway.observability import metrics
from gateway.observability.fail_open import BUDGETS, USAGE
from gateway.store.usage.base import NO_MODEL, UsageStore, Want
from gateway.usage.budgets import BudgetCheck, SpentCache, budget_checks, refusal
from gateway.usage.pricing import NANO, Pricing, usd

log = logging.getLogger("loopgate.usage")

_LOG_EVERY_S = 10.0
#: how much a key's typical request (tokens, nano-USD) moves towards each new one (moving average)
_TYPICAL_WEIGHT = 0.2
#: bytes of request body per estimated prompt token (as the rate limits estimate)
BYTES_PER_TOKEN = 4
#: keys whose budget checks are remembered (past it the memory starts over; they are rebuilt)
MAX_CACHED_KEYS = 10_000


#: no request parameters (the default of ``Meter.check_budget``)
NO_PARAMS: Mapping[str, Any] = {}


class AnswerCap(Protocol):
    """What a request's answer may take, for a budget to reserve (``RoutePlan.output_reservation``)."""

    def output_reservation(self, params: Mapping[str, Any]) -> int: ...


class Metering:
    """One per worker: prices, the aggregate store (None when ``usage.record`` is off) and the label set."""

    def __init__(self, pricing: Pricing, store: UsageStore | None, tenants: frozenset[str],
                 tenant_budgets: dict[str, Budget] | None = None, targets: frozenset[str] = frozenset()) -> None:
        self.pricing = pricing
        self.priced = bool(pricing)  # read per request: an attribute, not a ``__bool__`` call
        self.store = store
        self._tenant_budgets = tenant_budgets or {}
        self._spent = SpentCache()
        # id(key) -> (key, its checks); the key object is held so its id() stays its own
        self._checks_by_key: dict[int, tuple[ApiKey, list[BudgetCheck]]] = {}
        # Tenant label values come from the config only: a managed key's made-up tenant is "other".
        self._tenant_labels = tenants
        # The usage breakdown's model names: a configured target label (``provider:model``) as it is, any
        # other (a direct route's made-up model) as ``provider:*``; never the caller's text.
        self._models = {label: label for label in targets}
        self._logged_at = 0.0
        #: how long a budget reservation lasts when its request never reports back (a crash)
        self.lease_s = 3600.0
        # key id -> [tokens, nano-USD] of its typical request (a moving average of what it recorded)
        self._typical: dict[str, list[float]] = {}
        # Reservation ids: unique across replicas (random prefix) without a syscall per request.
        self._rid_prefix = secrets.token_hex(6) + ":"
        self._rids = itertools.count()
        if store is not None:
            store.on_error = self._store_failed

    def _checks(self, key: ApiKey) -> list[BudgetCheck]:
        """The key's budget checks, built once per key object (a managed key edit makes a new object)."""
        found = self._checks_by_key.get(id(key))
        if found is not None and found[0] is key:
            return found[1]
        if len(self._checks_by_key) >= MAX_CACHED_KEYS:
            self._checks_by_key.clear()
        checks = budget_checks(key, self._tenant_budgets.get(key.tenant))
        self._checks_by_key[id(key)] = (key, checks)  # the key is kept: its id() cannot be reused meanwhile
        return checks

    def estimate(self, key_id: str, body_bytes: int, output: int = 0, route: str = "") -> tuple[int, int]:
        """What a request of ``body_bytes`` is reserved against its budgets: tokens, nano-USD.

        A key with history: its prompt (body bytes / 4, as the rate limits guess) or its typical
        request so far (a moving average of what it recorded: prompt and completion), whichever is
        more, and in USD the typical request's cost. A key without: its prompt plus ``output``, the
        answer's tokens the request may take (its ``max_tokens``, else the route's default), and in
        USD what that costs at the route's dearest priced target. (Without the answer, a burst of a
        new key's requests each reserved a few prompt tokens and all ran: 30 times its budget.)
        """
        typical = self._typical.get(key_id)
        prompt = body_bytes // BYTES_PER_TOKEN + 1
        if typical is None:
            return prompt + output, self.pricing.estimate_nano(route, prompt, output) if self.priced else 0
        return max(prompt, int(typical[0])), int(typical[1])

    async def _reserve(self, meter: Meter, checks: list[BudgetCheck], tokens: int, cost_nano: int) -> None:
        """Budget admission in the store: refused (429) when a budget's spending plus what requests in
        flight reserved has reached it, else the estimate is reserved until the request records its
        usage. A store that does not answer within ``store.fail_open_ms`` lets the request through."""
        store = self.store
        assert store is not None
        rid = self._rid_prefix + str(next(self._rids))
        wants = [Want(check.scope, check.period, check.usd, int(check.threshold)) for check in checks]
        cache = self._spent
        # While this call renews the readings, requests far from the limit are judged on the last ones
        # (``judge_now``) instead of each asking the store too.
        renewing = cache.reading(checks)
        try:
            refused, spent, reserved = await store.reserve(meter.tenant, meter.key_id, wants, tokens, cost_nano, rid,
                                                           self.lease_s, time.time())
        except Exception as exc:  # a hung store: after store.fail_open_ms
            BUDGETS.failed(exc if str(exc) else "no answer in time")
            self._failed("budget_check", "budget check failed, request let through: %s", exc)
            return
        finally:
            cache.read_over(checks, renewing)
        if BUDGETS.in_burst:
            BUDGETS.answered()
        cache.remember(checks, spent, time.monotonic(), reserved)
        if refused >= 0:
            raise refusal(checks[refused], spent[refused], time.time(), reserved[refused])
        meter.hold = rid

    def meter(self, key: ApiKey) -> Meter:
        """The request's meter, holding the key's budget checks (none without a store: nothing is
        recorded to compare with)."""
        return Meter(self, key.tenant, key.id, _NO_CHECKS if self.store is None else self._checks(key))

    def model_label(self, label: str) -> str:
        """The breakdown's name of the target ``label`` (``provider:model``): bounded by the config."""
        found = self._models.get(label)
        return label.partition(":")[0] + ":*" if found is None else found

    def breakdown(self, route: str, calls: list[list[Any]], values: tuple[int, ...],
                  cost_nano: int) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
        """``values`` split by the model of each answered call: tokens and cost where they were spent;
        the request, its error and its tool calls to the target that answered last (the answer)."""
        model_label = self.model_label
        last = model_label(calls[-1][0])
        if len(calls) == 1 or all(call[0] == calls[0][0] for call in calls):
            return ((route, last, values),)
        parts: dict[str, list[int]] = {}
        for call in calls:
            part = parts.get(model := model_label(call[0]))
            if part is None:
                part = parts[model] = [0] * len(values)
            part[2] += call[1]
            part[3] += call[2]
            part[4] += call[3]
            part[5] += call[4]
            part[6] += (self.pricing.cost_nano((call,)) or 0) if cost_nano else 0
        # The answer carries the request, its error and tool calls, and whatever the parts miss (the
        # rounding of the summed cost), so they always add up to ``values`` exactly.
        answer = parts.setdefault(last, [0] * len(values))
        for index, total in enumerate(values):
            answer[index] += total - sum(part[index] for part in parts.values())
        return tuple((route, model, tuple(part)) for model, part in parts.items())

    def tenant_label(self, tenant: str) -> str:
        return tenant if tenant in self._tenant_labels else "other"

    def record(self, meter: Meter, failed: bool) -> None:
        tenant, key_id, state, cost_nano = meter.tenant, meter.key_id, meter._state, meter.cost_nano
        tool_calls = len(state.tool_records) if state is not None else 0
        if state is None or not state.calls:
            values: tuple[int, ...] = (1, int(failed), 0, 0, 0, 0, 0, tool_calls)
            dims: tuple[tuple[str, str, tuple[int, ...]], ...] = ((meter.route, NO_MODEL, values),)
        else:
            usage = state.usage
            if cost_nano is None and self.priced:
                cost_nano = self.pricing.cost_nano(state.calls)
            cost_nano = cost_nano or 0
            prompt, completion = usage.prompt_tokens, usage.completion_tokens
            cached, reasoning = usage.cached_tokens, usage.reasoning_tokens
            values = (1, int(failed), prompt, completion, cached, reasoning, cost_nano, tool_calls)
            dims = self.breakdown(meter.route, state.calls, values, cost_nano)
            label = tenant if tenant in self._tenant_labels else "other"
            route = meter.route
            tokens = metrics.TOKENS
            if prompt:
                tokens.inc(label, route, "prompt", amount=prompt)
            if completion:
                tokens.inc(label, route, "completion", amount=completion)
            if cached:
                tokens.inc(label, route, "cached", amount=cached)
            if reasoning:
                tokens.inc(label, route, "reasoning", amount=reasoning)
            if cost_nano:
                metrics.COST.inc(label, route, amount=cost_nano / NANO)
            if meter.checks:
                self._spent.add(meter.checks, prompt + completion, cost_nano)
                if meter.hold is not None:
                    # Learned from the requests that reserved (a key's first one always does, and every
                    # one near a limit, where the estimate matters); far from it the request path
                    # stays free of the bookkeeping.
                    self._learn(key_id, prompt + completion, cost_nano)
        if self.store is not None and not self.store.add_now(tenant, key_id, values, time.time(), meter.hold, dims):
            self._failed("dropped", "usage dropped: too many usage rows waiting for the store")

    def _learn(self, key_id: str, tokens: int, cost_nano: int) -> None:
        """A budgeted key's request ended: its typical request moves towards this one."""
        typical = self._typical.get(key_id)
        if typical is None:
            if len(self._typical) >= MAX_CACHED_KEYS:
                self._typical.clear()
            self._typical[key_id] = [float(tokens), float(cost_nano)]
            return
        typical[0] += (tokens - typical[0]) * _TYPICAL_WEIGHT
        typical[1] += (cost_nano - typical[1]) * _TYPICAL_WEIGHT

    def _store_failed(self, op: str, cause: BaseException | str) -> None:
        USAGE.failed(cause)
        self._failed(op, "usage store %s failed: %s", op, cause)

    def _failed(self, reason: str, message: str, *args: Any) -> None:
        metrics.USAGE_STORE_FAILURES.inc(reason)
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:  # an outage must not flood the log
            self._logged_at = now
            log.warning(message, *args)

    async def drain(self, timeout_s: float = 5.0) -> None:
        """At shutdown: write what is queued (bounded); a failure is reported, not raised."""
        if self.store is not None:
            try:
                await self.store.drain(timeout_s)
            except Exception as exc:
                self._store_failed("write", exc)


_NO_CHECKS: list[BudgetCheck] = []  # shared by every key without a budget (never changed)


class Meter:
    __slots__ = ("_closed", "_metering", "_running", "_state", "checks", "cost_nano", "hold", "key_id", "route",
                 "tenant")

    def __init__(self, metering: Metering, tenant: str, key_id: str, checks: list[BudgetCheck]) -> None:
        self._metering = metering
        self.tenant = tenant
        self.key_id = key_id
        #: the key's budget checks (built once per key by ``Metering``)
        self.checks = checks
        self.route = "unknown"  # the bounded metrics label of the route, once known
        self._state: WorkRecord | None = None
        #: a watched loop that has not finished yet: ``close`` counts it as an error (an error frame, a disconnect)
        self._running = self._closed = False
        #: the response's cost in nano-USD when every call of it had a price (the access record's ``cost_usd``)
        self.cost_nano: int | None = None
        #: the id of its budget reservation (given back with its usage), None without one
        self.hold: str | None = None

    def check_budget(self, body_bytes: int = 0, answer: AnswerCap | None = None,
                     params: Mapping[str, Any] = NO_PARAMS) -> Coroutine[Any, Any, None] | None:
        """Before a request or a resume: 429 ``insufficient_quota`` when the key's or its tenant's budget is spent.

        ``answer.output_reservation(params)``: the answer's tokens the request may take, reserved for a
        key with no history yet (``Metering.estimate``); worked out only on the paths that estimate, so
        a key without budgets, or one with history admitted here, never pays for it. None for a key without
        budgets, and for a request admitted here far from every limit (``SpentCache.take_local``:
        fresh readings under half the limit, 2 % of it per reading). A budget this process last saw
        exhausted (a reading at most ``REFRESH_S`` old, plus what it recorded since) is refused
        here, with no store call; otherwise the coroutine to await, which reserves the request's
        estimate in the store, so a burst stops as soon as the reserved and the spent reach the
        budget: the overshoot is at most the last admitted reservation plus what the admitted
        requests spend above their reservations. A store failure lets the request through (see
        gateway/usage/budgets.py).
        """
        checks = self.checks
        if not checks:
            return None
        metering = self._metering
        cache = metering._spent
        verdict = cache.judge_now(checks, time.monotonic())
        if verdict is True:
            output = answer.output_reservation(params) if answer is not None else 0
            tokens, cost_nano = metering.estimate(self.key_id, body_bytes, output, self.route)
            return metering._reserve(self, checks, tokens, cost_nano)
        if verdict is not False:
            raise refusal(verdict[0], verdict[1], time.time())
        # Fresh readings with room: far from every limit, admitted here when the estimate fits the
        # local share. ``Metering.estimate``, inlined for a key with history: every budgeted request's path.
        prompt = body_bytes // BYTES_PER_TOKEN + 1
        typical = metering._typical.get(self.key_id)
        if typical is None:
            output = answer.output_reservation(params) if answer is not None else 0
            tokens, cost_nano = metering.estimate(self.key_id, body_bytes, output, self.route)
        else:
            usual = typical[0]
            tokens, cost_nano = (prompt if prompt > usual else int(usual)), int(typical[1])
        if cache.take_local(checks, tokens, cost_nano):
            return None
        return metering._reserve(self, checks, tokens, cost_nano)

    def check_spent(self) -> None:
        """429 ``insufficient_quota`` when this process last saw a budget of the key spent: no store call,
        nothing reserved (a WebSocket upgrade, refused early; each of its turns still runs ``check_budget``)."""
        checks = self.checks
        if checks:
            verdict = self._metering._spent.judge_now(checks, time.monotonic())
            if verdict is not True and verdict is not False:
                raise refusal(verdict[0], verdict[1], time.time())

    def watch(self, state: WorkRecord) -> None:
        """A loop's state, read as it runs; its engine calls ``finish`` when it ends (the caller hooks it)."""
        self._state = state
        self._running = True

    def finish(self, result: LoopResult) -> None:
        """The engine's hook: ``usage_cost`` only when every call of the response has a price."""
        self._running = False
        if self._state is not None and self._metering.priced:
            self.cost_nano = self._metering.pricing.cost_nano(self._state.calls)
            if self.cost_nano is not None:
                result.gateway["usage_cost"] = usd(self.cost_nano)

    def account(self, record: WorkRecord) -> int | None:
        """Work without a loop (an embeddings call) reports its calls once they answered: recorded on ``close``
        as a finished loop's; the cost (nano-USD) when every call has a price."""
        self._state = record
        self._running = False
        if self._metering.priced:
            self.cost_nano = self._metering.pricing.cost_nano(record.calls)
        return self.cost_nano

    def close(self, status: int) -> None:
        """Once per request, however it ended: an error status, or a loop that never finished (an error frame,
        a disconnect), counts as an error; work that ran no model call (a token count, a listing) as its status says."""
        if self._closed:
            return
        self._closed = True
        self._metering.record(self, status >= 400 or self._running)
