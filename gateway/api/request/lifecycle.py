"""The one request lifecycle: :class:`Work`, the one object a request lives in, and its steps.

``Lifecycle.begin`` opens the :class:`Work` of one HTTP request (it *is* the request's
:class:`~gateway.api.request.exchange.Exchange`: id, span, headers, key, loop state, meter). The driver
(``api/driver.py``) and the surface it drives call, in order, what applies:

1. ``authenticate`` (caller keys) or ``authenticate_admin`` (``/admin/``);
2. ``allow(plan)``: the key's role and route allow-list, and the route's metrics label;
3. ``charge_to(asker)`` when the work resumes a pause: the key that **asked** pays for it (its
   limits, budget and usage rows), whoever decided;
4. ``await admit(body_bytes, tokens)``: the budget check, then admission (rpm, tpm, concurrency per key
   and tenant), and for a background run its slot under the per-key/per-tenant run caps;
5. ``watch(loop_request)``: the loop's usage feeds the meter, the access record and the span (work
   that runs no loop reports its calls with ``account(record)``, a ``canonical.CallRecord``, instead);
6. the end: ``done(status)`` once the answer is complete and ``await settle(usage)`` (a JSON
   answer), ``settled_at_end(events)`` (a stream), ``hold()`` (work that outlives its request:
   a background run, settled by the run's own end), or, written once in the driver,
   ``render_error(await failed(exc))``.

Admission is held for the whole life of the work and settled exactly once with its real usage
(no usage: the request failed, its estimate is given back). The error shape is the surface's:
``begin`` takes the renderer.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from gateway.api.admin.auth import require_admin
from gateway.api.request.errors import error_response, to_gateway_error
from gateway.api.request.exchange import Exchange
from gateway.cancellation import EXITS
from gateway.canonical import Usage, WorkRecord
from gateway.config.model import AdminKey, ApiKey
from gateway.errors import GatewayError, quoted
from gateway.governance.access import check_model_access
from gateway.governance.admission import Admission, RateLimits
from gateway.governance.key_lookup import KeyLookup
from gateway.governance.keys import KeyRing, authenticate
from gateway.http.incoming import Incoming
from gateway.http.request_id import request_id
from gateway.loop.engine import LoopRequest
from gateway.loop.events import LoopEvent
from gateway.routing.routes import RoutePlan
from gateway.usage.meter import NO_PARAMS, Meter, Metering

if TYPE_CHECKING:
    pass

#: renders a mapped error in the surface's own shape, with the work's headers
ErrorRenderer = Callable[[GatewayError, list[tuple[bytes, bytes]] | None], Any]


class Lifecycle:
    """The services a request goes through, built once per worker (``Runtime.start``)."""

    __slots__ = ("admin_keys", "keys", "limits", "lookup", "usage")

    def __init__(self, keys: KeyRing, admin_keys: dict[bytes, AdminKey], limits: RateLimits,
                 usage: Metering, lookup: KeyLookup | None = None) -> None:
        self.keys = keys
        #: a shared store: secrets the ring lacks are looked up there before a 401 (key_lookup.py)
        self.lookup = lookup
        self.admin_keys = admin_keys
        self.limits = limits
        self.usage = usage

    def begin(self, method: str, path: str, incoming: Incoming, *, rid: bytes | None = None,
              metered: bool = True, background: bool = False,
              errors: ErrorRenderer = error_response) -> Work:
        """A new request. ``path`` is the route's template (never caller text: it is logged and a label).

        ``rid``: the request id an outer layer already chose and echoes (``FastChatPath``); None:
        chosen here and sent back as ``x-request-id`` on every answer of this work.
        """
        if rid is None:
            return Work(self, method, path, request_id(incoming.request_id), incoming, background, errors)
        return Work(self, method, path, rid, incoming, background, errors, echo=False, metered=metered)


class Work(Exchange):
    """One request's way through the lifecycle, and the work that outlives it (see the module docstring).

    The one object of a request: it *is* its :class:`Exchange` (the id, span, headers, key, state and
    meter its access record and metrics read), so nothing is kept in step by hand.
    """

    __slots__ = ("admission", "background", "errors", "incoming", "lifecycle", "slot")

    def __init__(self, lifecycle: Lifecycle, method: str, path: str, rid: bytes, incoming: Incoming,
                 background: bool, errors: ErrorRenderer, echo: bool = True, metered: bool = True) -> None:
        Exchange.__init__(self, method, path, rid, incoming.traceparent, echo, metered)
        self.lifecycle = lifecycle
        self.incoming = incoming
        self.errors = errors
        #: a background run: ``admit`` also takes a slot under the per-key/per-tenant run caps
        self.background = background
        self.admission: Admission | None = None
        self.slot: Admission | None = None

    # -- who ------------------------------------------------------------------------------------
    async def authenticate(self) -> ApiKey:
        """The caller's key (401 for an unknown, revoked or expired one); the work is charged to it.

        A secret this replica's snapshot lacks is looked up in a shared store first (a key created
        on another replica a moment ago). Once per work: a handler that hands the request on to
        another (a fallback) gets the same key.
        """
        if self.key is not None:
            return self.key
        lifecycle = self.lifecycle
        try:
            key = authenticate(self.incoming.authorization, lifecycle.keys)
        except GatewayError as exc:
            key = await self._look_up(exc)
        self.key = key
        self.meter = lifecycle.usage.meter(key)
        return key

    async def _look_up(self, refused: GatewayError) -> ApiKey:
        """The key of a secret the ring lacks, from the store; ``refused`` (the 401) when there is none."""
        lookup = self.lifecycle.lookup
        header = self.incoming.authorization
        if refused.status != 401 or lookup is None or not header:
            raise refused
        _, _, token = header.partition(" ")
        found = await lookup.resolve(token.strip())
        if found is None or (found.expires_at is not None and found.expires_at <= time.time()):
            raise refused
        return found

    def authenticate_admin(self) -> AdminKey:
        """An ``auth.admin_keys`` key (404 when the admin API is off, 401 otherwise); recorded by name."""
        admin = require_admin(self.incoming, self.lifecycle.admin_keys)
        self.key = ApiKey(key="", tenant="", id="admin:" + admin.name, name=admin.name)
        return admin

    def allow(self, plan: RoutePlan, resume: bool = False) -> None:
        """403 when the caller may not run ``plan`` (``resume``: deciding a pause, which approvers may)."""
        assert self.key is not None, "authenticate first"
        # the metrics label: a configured route, PROVIDER/* or unknown (never the raw name)
        self.label = plan.metric_label
        if self.meter is not None:
            self.meter.route = plan.metric_label
        check_model_access(self.key, plan, resume)

    def charge_to(self, asker_id: str, plan: RoutePlan) -> ApiKey:
        """Charge a resume to the key that asked for the paused work: its allow-list, limits, budget, usage.

        The caller (an approver, the inbox, another key of the tenant) only decided. 403 when the
        asking key is gone (revoked or expired): its work does not go on. A continuation from
        before askers were recorded stays charged to the caller.
        """
        caller = self.key
        assert caller is not None, "authenticate first"
        if not asker_id or asker_id == caller.id:
            check_model_access(caller, plan)
            return caller
        asker = self.lifecycle.keys.find(asker_id)
        if asker is None:
            raise GatewayError(403, f"the key that asked for this work ({quoted(asker_id)}) is revoked or expired; "
                               "its paused work cannot go on", "permission_error", code="asker_key_revoked")
        check_model_access(asker, plan)
        meter = self.lifecycle.usage.meter(asker)
        meter.route = plan.metric_label
        self.key = asker
        self.meter = meter
        return asker

    def act_for(self, key: ApiKey) -> None:
        """Work no caller sent, done for ``key`` (an MCP server's sampling request during that key's tool call):
        charged to it like its own requests (budget, limits, usage rows, access record)."""
        self.key = key
        self.meter = self.lifecycle.usage.meter(key)

    # -- admission ------------------------------------------------------------------------------
    async def admit(self, body_bytes: int, tokens: int | None = None, plan: RoutePlan | None = None,
                    params: Mapping[str, Any] = NO_PARAMS, budget: bool = True) -> None:
        """Budget, then rate limits (a 429 for either), then a background run's slot: all for ``key``.

        The fast paths (a budget judged from a fresh reading, an allowance held in process) are
        taken here, behind this one step, without a store call. ``tokens``: the input tokens the
        surface counted before sending (tpm's estimate); None: estimated from ``body_bytes``.
        ``plan`` and ``params``: the route and the request's parameters, whose answer's tokens
        (``RoutePlan.output_reservation``) a budget reserves for a key with no history (only then
        worked out). ``budget`` False: work that spends nothing (``count_tokens``) is limited by
        requests only.
        """
        key, meter = self.key, self.meter
        assert key is not None and meter is not None, "authenticate first"
        lifecycle = self.lifecycle
        pending = meter.check_budget(body_bytes, plan, params) if budget else None
        if pending is not None:
            await pending
        limits = lifecycle.limits
        admitted = limits.admit(key, body_bytes, tokens)
        if admitted is not None and not isinstance(admitted, Admission):
            admitted = await admitted  # the store decides
        self.admission = admitted
        if self.background:
            self.slot = await limits.admit_background(key)

    def show_limits(self) -> None:
        """The admission's ``x-ratelimit-*`` headers on every answer from now on."""
        if self.admission is not None:
            self.add_headers(self.admission.headers)

    # -- the run --------------------------------------------------------------------------------
    def watch(self, loop_request: LoopRequest) -> None:
        """The loop's state feeds the meter (usage, cost), the access record and the server span."""
        loop_request.span = self.span
        state = self.state = loop_request.state
        meter = self.meter
        if meter is not None:
            meter.watch(state)
            loop_request.on_finish = meter.finish

    def account(self, record: WorkRecord) -> int | None:
        """Work that runs no loop (an embeddings call, a sampling): its answered calls (``record.calls``) feed the
        meter (usage rows, cost), the access record and the metrics as a loop's would. The cost in nano-USD, or
        None when a call has no price."""
        self.state = record
        meter = self.meter
        return None if meter is None else meter.account(record)

    def settled_at_end(self, events: AsyncIterator[LoopEvent]) -> AsyncIterator[LoopEvent]:
        """A stream's events; the admission is settled with the loop's usage when they end (or close)."""
        admission = self.admission
        if admission is None or not admission.needs_settling:
            return events
        return admission.observe(events)

    def usage(self) -> Usage | None:
        """What the watched loop (or the accounted call) used so far; None when nothing ran."""
        state = self.state
        return None if state is None else state.usage

    async def settle(self, usage: Usage | None) -> None:
        """Settle the admission (and a background slot) with the work's real usage; once, later calls do nothing.

        The slot is freed even when settling the admission fails (whatever it raises).
        """
        admission, slot = self.admission, self.slot
        try:
            if admission is not None:
                pending = admission.finish(usage)
                if pending is not None:
                    await pending
        finally:
            if slot is not None:
                pending = slot.finish(None)
                if pending is not None:
                    await pending

    def hold(self) -> Held:
        """The work goes on after its answer (a background run): its admission, background slot and
        meter move to the returned :class:`Held`, whose ``end`` the run calls once, however it ends.

        The answer itself is still this work's: ``done(200)`` once it is given, ``failed`` if the
        run could not be started (that settles what was admitted, as ``Held.end`` would).
        """
        held = Held(self, self.meter)
        self.meter = None  # recorded when the run ends, not with this answer
        self.state = None
        return held

    # -- failure --------------------------------------------------------------------------------
    async def failed(self, exc: BaseException) -> GatewayError:
        """Give back what was admitted, map ``exc`` to the client's error, record the request.

        ``exc`` may be any ``BaseException`` (a surface catches them all, since a native library's panic is
        one): what was admitted is given back first, whatever ``exc`` is. An exit (a cancellation, the
        interpreter's; ``cancellation.EXITS``) is no failure to answer: it is raised again once given back.
        """
        try:
            await self.settle(None)
        finally:
            if isinstance(exc, EXITS):
                raise exc
        error = to_gateway_error(exc)
        self.done(error.status, error)
        return error

    def render_error(self, error: GatewayError) -> Any:
        """``error`` in the surface's shape, with this work's headers (request id, rate limits)."""
        return self.errors(error, self.headers)


class Held:
    """A detached work's admission and meter, until the run that outlives its request ends."""

    __slots__ = ("_meter", "_work")

    def __init__(self, work: Work, meter: Meter | None) -> None:
        self._work = work
        self._meter = meter

    async def end(self, status: int, usage: Usage | None) -> None:
        """Once, however the run ended: its usage recorded (an error status counts it as failed), admission settled."""
        meter, self._meter = self._meter, None
        try:
            if meter is not None:
                meter.close(status)
        finally:
            await self._work.settle(usage)  # a failed run's calls were paid for too
