"""What each surface is given: small bundles of the services and settings it uses, and nothing else.

The composition root (``api/runtime.py``) builds them once per worker; the driver
(``api/driver.py``) hands each surface the bundle it declares. A handler that needs something
new asks for it here, where what every surface depends on reads at a glance, instead of reaching
through one object that holds everything. Settings are copied in as plain values (the request
path reads ``max_body_bytes``, not ``config.server.max_body_bytes``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.api.admin.tenants import Tenants
from gateway.api.console.feed import ConsoleFeed
from gateway.api.request.lifecycle import Lifecycle, Work
from gateway.background.followers import FollowerHub
from gateway.background.runner import BackgroundRunner
from gateway.canonical.sealing import Sealer
from gateway.config.keys_section import TenantConfig
from gateway.context.tokens import TokenEstimator
from gateway.governance.key_sync import KeySync
from gateway.loop.continuations import Continuations
from gateway.loop.engine import LoopDeps
from gateway.routing.embeddings import Embedder
from gateway.routing.routes import RouteTable
from gateway.store.audit.base import AuditLog
from gateway.store.keys.base import KeyStore
from gateway.store.responses.base import ResponseRecords
from gateway.store.usage.base import UsageStore
from gateway.tools.registry import ToolRegistry
from gateway.upstream.pool import UpstreamPool

if TYPE_CHECKING:
    from gateway.api.loop.resume import Resumed


@dataclass(frozen=True, slots=True)
class LoopServices:
    """The loop surfaces' (chat completions, Messages) and every resume's: routes, tools, pauses, the loop."""

    routes: RouteTable
    tools: ToolRegistry
    #: pausing and resuming (the loop's continuation API: surfaces never call the store past it)
    continuations: Continuations
    #: what ``run_loop`` is given (router, tools, pause hooks, context guard)
    deps: LoopDeps
    #: ``server.max_body_bytes``: a larger body is a 413
    max_body_bytes: int
    #: ``routing.request_timeout_s``: the request's work ends this long after it starts
    request_timeout_s: float


@dataclass(frozen=True, slots=True)
class CountingServices:
    """``POST /v1/messages/count_tokens``: the route's tools, Anthropic's own count, the gateway's estimate."""

    routes: RouteTable
    tools: ToolRegistry
    pool: UpstreamPool
    #: the context guard's estimator (calibrated by what targets reported), else a fresh one
    estimator: TokenEstimator
    max_body_bytes: int
    request_timeout_s: float


@dataclass(frozen=True, slots=True)
class EmbeddingServices:
    """``POST /v1/embeddings``: the embeddings routes and the failover walk over their targets."""

    routes: RouteTable
    embedder: Embedder
    max_body_bytes: int
    request_timeout_s: float


#: a pause that began on ``/v1/responses``, decided way B, answered as a Response (``responses/decided.py``):
#: ``(work, origin, resumed, decisions, approved, stream)``
DecidedResponse = Callable[[Work, dict[str, Any], "Resumed", list[dict[str, Any]], list[str], bool], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ContinuationServices:
    """``/v1/continuations/{id}``: read, cancel, and resume with decisions (way B) as the loop surfaces do."""

    loop: LoopServices
    decided_response: DecidedResponse


@dataclass(frozen=True, slots=True)
class ApprovalServices:
    """The inbox's listings: paused loops and the audit log, a tenant's or (an admin key's) every tenant's."""

    continuations: Continuations
    audit: AuditLog
    tenants: Tenants


@dataclass(frozen=True, slots=True)
class AdminServices:
    """``/admin/``: managed keys, usage rows, budgets, any tenant's audit log."""

    key_store: KeyStore
    #: this replica's key snapshot, reloaded at once after a change (the others poll)
    key_sync: KeySync
    audit: AuditLog
    tenants: Tenants
    #: a key's ``models`` may name these routes, and ``PROVIDER/...`` of these providers
    routes: RouteTable
    providers: frozenset[str]
    #: ``tenants`` of the config (their budgets)
    tenant_config: Mapping[str, TenantConfig]
    #: the usage aggregates; None when ``usage.record`` is off
    usage: UsageStore | None


@dataclass(frozen=True, slots=True)
class ConsoleServices:
    """``GET /admin/console/overview``: every replica's rollups, the circuits, the paused loops."""

    #: None when ``observability.rollups.enabled`` is false
    feed: ConsoleFeed | None
    routes: RouteTable
    continuations: Continuations
    tenants: Tenants


@dataclass(frozen=True, slots=True)
class ResponsesServices:
    """``/v1/responses``: the loop surfaces' services, the stored responses, background runs and their followers."""

    loop: LoopServices
    records: ResponseRecords
    #: how long a stored response is kept (``store.continuation_ttl_s``)
    record_ttl_s: int
    #: ``store.tenant_max_stored_bytes``: a ``store: true`` request is refused past it (0: no quota)
    quota_bytes: int
    background: BackgroundRunner
    #: the stream followers of background runs: one store poll per run, capped
    followers: FollowerHub
    #: seals and opens what callers carry for the gateway (compaction items: ``responses/compaction.py``)
    sealer: Sealer
    #: ``responses.compact_max_output_tokens``: the most tokens a compaction's summary takes
    compact_max_output_tokens: int


@dataclass(frozen=True, slots=True)
class ModelServices:
    """``GET /v1/models``: the routes, and when this worker started (each model's ``created``)."""

    routes: RouteTable
    started: int


@dataclass(frozen=True, slots=True)
class Services:
    """Every bundle, and the lifecycle every request goes through: what the driver hands out."""

    lifecycle: Lifecycle
    loop: LoopServices
    counting: CountingServices
    embeddings: EmbeddingServices
    continuations: ContinuationServices
    approvals: ApprovalServices
    admin: AdminServices
    console: ConsoleServices
    models: ModelServices
    responses: ResponsesServices


# -- each bundle picked out of ``Services``: what an operation declares it is given (``Operation.services``) --
def loop_services(every: Services) -> LoopServices:
    return every.loop


def counting_services(every: Services) -> CountingServices:
    return every.counting


def embedding_services(every: Services) -> EmbeddingServices:
    return every.embeddings


def continuation_services(every: Services) -> ContinuationServices:
    return every.continuations


def approval_services(every: Services) -> ApprovalServices:
    return every.approvals


def admin_services(every: Services) -> AdminServices:
    return every.admin


def console_services(every: Services) -> ConsoleServices:
    return every.console


def model_services(every: Services) -> ModelServices:
    return every.models


def responses_services(every: Services) -> ResponsesServices:
    return every.responses
