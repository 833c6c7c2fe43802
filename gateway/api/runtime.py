"""The composition root: every service a worker runs, started once inside the app's lifespan.

``Runtime.start`` builds and starts them (and closes what it started when a step fails);
``compose`` cuts from them the small bundles each surface is given (``api/services.py``), so no
handler reads this object: only the app (its lifespan, ``/readyz``, ``/metrics``) does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from gateway import redact
from gateway.api.admin.auth import admin_ring
from gateway.api.admin.tenants import Tenants
from gateway.api.console.feed import ConsoleFeed
from gateway.api.request.lifecycle import Lifecycle
from gateway.api.responses.decided import respond_decided
from gateway.api.services import (
    AdminServices,
    ApprovalServices,
    ConsoleServices,
    ContinuationServices,
    CountingServices,
    EmbeddingServices,
    LoopServices,
    ModelServices,
    ResponsesServices,
    Services,
)
from gateway.background.followers import FollowerHub
from gateway.background.runner import BackgroundRunner
from gateway.canonical import ToolCall
from gateway.canonical.sealing import Sealer
from gateway.config.model import Config
from gateway.context import ContextGuard
from gateway.context.tokens import TokenEstimator
from gateway.governance.admission import RateLimits
from gateway.governance.key_ids import id_key, with_key_ids
from gateway.governance.key_lookup import KeyLookup
from gateway.governance.key_sync import KeySync
from gateway.governance.keys import KeyRing
from gateway.governance.sealing_keys import deployment_sealer
from gateway.interaction.asking import asking_factory
from gateway.interaction.sampling import sampler_factory
from gateway.loop.continuations import Continuations
from gateway.loop.engine import LoopDeps
from gateway.notify import Notifier
from gateway.observability.banner import store_address
from gateway.providers import litellm as litellm_provider
from gateway.providers.upstreams import upstream_pool
from gateway.redact import Redactor
from gateway.routing.embeddings import Embedder
from gateway.routing.health import TargetHealth
from gateway.routing.router import Router
from gateway.routing.routes import RouteTable
from gateway.store.base import Store
from gateway.store.factory import (
    open_background,
    open_configured_store,
    open_key_store,
    open_limiter,
    open_response_records,
    open_rollups,
)
from gateway.store.keys.base import KeyStore
from gateway.store.responses.base import ResponseRecords
from gateway.tools.base import ToolOutcome
from gateway.tools.executor import run_tool
from gateway.tools.mcp.servers import McpRefresher
from gateway.tools.registry import RegisteredTool, ToolRegistry
from gateway.upstream.pool import UpstreamPool
from gateway.usage.meter import Metering
from gateway.usage.setup import start_metering

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("loopgate")


def _tool_session(config: Config) -> aiohttp.ClientSession | None:
    """The HTTP tools' pooled session, at start-up: aiohttp (a tenth of a start-up's CPU) loads only for them."""
    if not any(tool.http is not None for tool in config.tools.values()):
        return None
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))


async def _run_tool(call: ToolCall, tool: RegisteredTool) -> ToolOutcome:
    return await run_tool(tool, call["function"]["arguments"])


@dataclass(slots=True)
class Runtime:
    config: Config
    pool: UpstreamPool
    #: the pooled session of the HTTP tools; None without any (aiohttp is then never imported)
    tool_session: aiohttp.ClientSession | None
    store: Store
    tools: ToolRegistry
    router: Router
    routes: RouteTable
    continuations: Continuations
    deps: LoopDeps
    mcp: McpRefresher
    responses: ResponseRecords  # stored Responses-API responses (same backend as ``store``)
    key_store: KeyStore
    key_sync: KeySync
    limits: RateLimits
    usage: Metering
    background: BackgroundRunner
    #: the stream followers of background runs: one store poll per run, capped (background/followers.py)
    followers: FollowerHub
    #: what every request goes through (auth, allow-lists, admission, budget, metering, records)
    lifecycle: Lifecycle
    #: embeddings calls, walked over a route's targets by ``router``'s failover rules
    embedder: Embedder
    #: seals what callers carry for the gateway (governance/sealing_keys.py)
    sealer: Sealer
    #: the console's rollups writer (None when ``observability.rollups.enabled`` is false)
    console: ConsoleFeed | None = None
    #: when this worker started (epoch s: each model's ``created`` in ``/v1/models``)
    started: int = 0
    #: what the surfaces are given (``compose``)
    services: Services = field(init=False)

    @classmethod
    async def start(cls, config: Config) -> Runtime:
        """Build and start everything; on a failure part-way, what was started is closed again first.

        A start-up that fails (a tool that does not import, a stdio MCP server that cannot start)
        must not leave open sessions or connections behind: the process reports one clear line
        and exits, with no "Unclosed client session" from the garbage collector after it.
        """
        redact.install(Redactor.from_config(config))  # before anything can log upstream text
        if not config.auth.enabled:
            log.warning("auth is DISABLED: no keys configured, every caller is tenant 'default' (development only)")
        async with AsyncExitStack() as undo:
            runtime = await cls._start(config, undo)
            undo.pop_all()  # started: Runtime.stop closes it all from now on
        return runtime

    @classmethod
    async def _start(cls, config: Config, undo: AsyncExitStack) -> Runtime:
        store = open_configured_store(config.store)
        undo.push_async_callback(store.aclose)
        problem = await store.unavailable_reason()
        if problem is not None:
            # Not fatal: the gateway serves what needs no store, answers 503 store_unavailable for
            # what does, and /readyz reports not ready until the store answers.
            log.warning("the %s store is not usable at start-up: %s (store %s; serving, /readyz answers 503 "
                        "until it is)", store.kind, problem, store_address(config))
        key_store = open_key_store(store, config.auth.key_retention_s)
        # Config key ids are keyed by the deployment's id key (a salt in a shared store, or configured).
        ids = await id_key(config.auth, key_store, shared=store.kind == "redis")
        config = with_key_ids(config, ids)
        sealer = deployment_sealer(config, ids, shared_store=store.kind == "redis")
        pool = upstream_pool(config.providers)
        undo.push_async_callback(pool.aclose)
        if any(provider.type == "litellm" for provider in config.providers.values()):
            await asyncio.to_thread(litellm_provider.preload)
        tool_session = _tool_session(config)
        if tool_session is not None:
            undo.push_async_callback(tool_session.close)
        tools = await ToolRegistry.from_config(config.tools, tool_session)
        undo.push_async_callback(tools.aclose)
        mcp = McpRefresher(tools, config.mcp_servers)
        await mcp.start()
        undo.push_async_callback(mcp.stop)
        shared = store if store.kind == "redis" else None
        health = TargetHealth(config.routing.breaker_failures, config.routing.breaker_cooldown_s, shared)
        health.start()  # shared circuit state: refreshed and written in the background, never on the request path
        router = Router(config.providers, config.routing, pool, health)
        routes = RouteTable(config, router)
        notifier = Notifier(config.notifications, config.server.public_url, store)
        await notifier.start()
        undo.push_async_callback(notifier.stop)
        continuations = Continuations(store, config.store.continuation_ttl_s, config.routing.request_timeout_s,
                                      notifier, config.store.claim_lease_margin_s)
        # Tokenizer tables (large: bench/README.md) load lazily, on a worker thread, the first time a
        # transcript gets near its window: most traffic stays under the byte bound and never needs them.
        deps = LoopDeps(router=router, tools=tools, run_tool=_run_tool, pause=continuations.pause,
                        audit=continuations.audit_denial, run_approved=continuations.ledgered,
                        context=ContextGuard(), route_lookup=routes.lookup)
        keys = KeyRing(config.auth.keys, config.auth.enabled)
        # Only a shared store can change behind this process's back: memory needs no polling.
        key_sync = KeySync(key_store, keys, poll=store.kind == "redis")
        await key_sync.start()
        undo.push_async_callback(key_sync.stop)
        admin_keys = admin_ring(config.auth.admin_keys)
        # A key created on another replica is found in the store before a 401 (memory: the ring is the store).
        lookup = KeyLookup(key_store, keys) if store.kind == "redis" and config.auth.enabled else None
        limits = RateLimits(open_limiter(store), config)
        undo.push_async_callback(limits.limiter.aclose)
        usage = start_metering(config, store)
        undo.push_async_callback(usage.drain)
        console = None
        rollups = config.observability.rollups
        if rollups.enabled:
            console = ConsoleFeed(open_rollups(store, rollups.retention_s, ConsoleFeed.status_ttl(rollups)), rollups,
                                  health)
            console.start()
            undo.push_async_callback(console.stop)
        lifecycle = Lifecycle(keys, admin_keys, limits, usage, lookup)
        background = BackgroundRunner(open_background(store), config.background, config.store.continuation_ttl_s)
        sampler = sampler_factory(lifecycle, keys.find, router, routes.lookup, config.routing.request_timeout_s)
        deps.asking = asking_factory(config.mcp_servers, continuations, sampler)
        runtime = cls(config=config, pool=pool, tool_session=tool_session,
                      store=store, tools=tools, router=router, routes=routes, continuations=continuations, deps=deps,
                      mcp=mcp, responses=open_response_records(store),
                      key_store=key_store, key_sync=key_sync, limits=limits, usage=usage,
                      background=background, followers=FollowerHub(background.store, config.background, background),
                      lifecycle=lifecycle, embedder=Embedder(router, pool), sealer=sealer, console=console,
                      started=int(time.time()))
        runtime.services = compose(runtime)
        return runtime

    async def stop(self) -> None:
        if self.console is not None:
            await self.console.stop()
        await self.background.aclose()
        await self.followers.aclose()  # the runs ended: their followers have had their last events
        await self.continuations.held.aclose()  # held calls report that they ended before the store closes
        await self.continuations.notifier.stop()
        await self.key_sync.stop()
        await self.mcp.stop()
        await self.router.health.aclose()
        await self.pool.aclose()
        await self.tools.aclose()
        if self.tool_session is not None:
            await self.tool_session.close()
        await self.limits.limiter.aclose()  # leased allowance goes back before the store closes
        await self.usage.drain()
        await self.store.aclose()


def compose(runtime: Runtime) -> Services:
    """Each surface's bundle, cut from the started services (settings copied in as plain values)."""
    config = runtime.config
    max_body_bytes = config.server.max_body_bytes
    request_timeout_s = config.routing.request_timeout_s
    loop = LoopServices(runtime.routes, runtime.tools, runtime.continuations, runtime.deps, max_body_bytes,
                        request_timeout_s)
    guard = runtime.deps.context
    tenants = Tenants(config.auth.keys, config.tenants, runtime.key_store)
    responses = ResponsesServices(loop, runtime.responses, config.store.continuation_ttl_s,
                                  config.store.tenant_max_stored_bytes, runtime.background, runtime.followers,
                                  runtime.sealer, config.responses.compact_max_output_tokens)
    return Services(
        lifecycle=runtime.lifecycle,
        loop=loop,
        counting=CountingServices(runtime.routes, runtime.tools, runtime.pool,
                                  guard.estimator if guard is not None else TokenEstimator(), max_body_bytes,
                                  request_timeout_s),
        embeddings=EmbeddingServices(runtime.routes, runtime.embedder, max_body_bytes, request_timeout_s),
        continuations=ContinuationServices(loop, partial(respond_decided, responses)),
        approvals=ApprovalServices(runtime.continuations, runtime.store, tenants),
        admin=AdminServices(runtime.key_store, runtime.key_sync, runtime.store, tenants, runtime.routes,
                            frozenset(config.providers), config.tenants, runtime.usage.store),
        console=ConsoleServices(runtime.console, runtime.routes, runtime.continuations, tenants),
        models=ModelServices(runtime.routes, runtime.started),
        responses=responses,
    )
