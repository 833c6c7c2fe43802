"""Typed, validated configuration. Built once at start-up; read-only on the hot path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.config.observability_section import LoggingConfig, ObservabilityConfig

ProviderType = Literal["openai", "anthropic", "gemini", "litellm", "mock"]
PROVIDER_TYPES: tuple[str, ...] = ("openai", "anthropic", "gemini", "litellm", "mock")
ReasoningPassback = bool | Literal["auto"]
#: ``auto`` follows MCP tool annotations (gateway/tools/mcp/protocol.py); a tool without any is ``required``
ApprovalMode = Literal["never", "required", "auto"]


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 4 * 1024 * 1024
    workers: int = 1
    #: request line + headers; past it 431 (gateway/api/server_protocol.py)
    max_header_bytes: int = 64 * 1024
    #: a whole request head must arrive within this
    header_timeout_s: float = 10.0
    #: the longest silence between two reads of a request body
    body_timeout_s: float = 30.0
    #: an idle keep-alive connection is closed after this
    keepalive_timeout_s: float = 5.0
    #: the gateway's address as people reach it (links in notifications: {public_url}/ui/approvals)
    public_url: str | None = None
    #: the garbage collector's youngest-generation threshold in a serving worker (0: Python's own
    #: settings, nothing frozen); see gateway/gc_policy.py
    gc_young_threshold: int = 10_000


KeyRole = Literal["caller", "approver"]
BudgetUnit = Literal["tokens", "usd"]
BudgetPeriod = Literal["day", "month", "total"]


@dataclass(frozen=True, slots=True)
class Budget:
    """A spending cap; parsed and stored here, enforced by the budget module (usage-budgets)."""

    limit: float
    unit: BudgetUnit = "tokens"
    period: BudgetPeriod = "month"


@dataclass(frozen=True, slots=True)
class Limits:
    """The rate limits of a key or a tenant; ``None`` = unlimited. A scope whose three are ``None`` costs nothing."""

    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None

    @property
    def any(self) -> bool:
        return self.rpm is not None or self.tpm is not None or self.max_concurrent is not None


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A caller key: from ``auth.keys`` (``key`` holds the secret) or managed (``key`` empty, ``managed`` true).

    ``id`` is stable and public: ``cfg_`` + 16 hex of the secret's SHA-256 for config keys, ``key_...``
    for managed ones. ``models`` is the allow-list of routes (``None``: every route); an entry
    ``PROVIDER/*`` allows direct ``PROVIDER/MODEL`` calls to that provider.
    """

    key: str
    tenant: str
    headless: bool = False
    id: str = ""
    name: str = ""
    role: KeyRole = "caller"
    models: tuple[str, ...] | None = None
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    budget: Budget | None = None
    #: Unix seconds (UTC); past it the key is rejected like an unknown one
    expires_at: float | None = None
    managed: bool = False
    created_at: float | None = None
    revoked: bool = False
    #: server tools this key may use (None: every tool of the route); others are never offered to the model
    tools: frozenset[str] | None = None

    @property
    def limits(self) -> Limits:
        return Limits(self.rpm, self.tpm, self.max_concurrent)


@dataclass(frozen=True, slots=True)
class AdminKey:
    """A key of the ``/admin/`` API (``auth.admin_keys``); it cannot call models."""

    key: str = field(repr=False)
    name: str


@dataclass(frozen=True, slots=True)
class TenantConfig:
    """``tenants.NAME``: limits shared by every key of the tenant, and its budget."""

    name: str
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    budget: Budget | None = None

    @property
    def limits(self) -> Limits:
        return Limits(self.rpm, self.tpm, self.max_concurrent)


@dataclass(frozen=True, slots=True)
class AuthConfig:
    keys: tuple[ApiKey, ...] = ()
    admin_keys: tuple[AdminKey, ...] = ()

    @property
    def enabled(self) -> bool:
        # Admin keys switch auth on too: they can create caller keys, which must then be required.
        return bool(self.keys or self.admin_keys)


REDIS_SCHEMES: tuple[str, ...] = ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")


@dataclass(frozen=True, slots=True)
class StoreTls:
    """Files for ``rediss://``: the CA that signed the server certificate, and a client certificate + key."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None


@dataclass(frozen=True, slots=True)
class StoreSentinel:
    """Sentinels that name the current master of ``master`` (the url's host is then ignored)."""

    master: str
    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    #: TLS to the sentinels themselves, with the files of ``store.tls``
    tls: bool = False


@dataclass(frozen=True, slots=True)
class StoreConfig:
    # repr=False: a URL may carry a password, and config objects end up in logs and tracebacks.
    url: str = field(default="memory://", repr=False)
    continuation_ttl_s: int = 86400
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: StoreTls | None = None
    cluster: bool = False
    sentinel: StoreSentinel | None = None
    #: a pause, a claim and a ledger entry are acknowledged only after WAIT confirms this many replicas
    wait_replicas: int = 0
    wait_timeout_ms: int = 500

    @property
    def kind(self) -> str:
        return "redis" if self.sentinel is not None or self.url.startswith(REDIS_SCHEMES) else "memory"


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens; cached input at the input price when no cached price is given."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    name: str
    type: ProviderType
    base_url: str
    api_key: str = ""
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    # Transport bounds (README "Providers"): sending a request body that makes no progress,
    # waiting for a free pooled connection, reusing an idle keep-alive connection (below common
    # server idle timeouts: uvicorn 5 s, nginx 75 s), and one response's size (raw, decompressed,
    # or a whole stream).
    write_timeout_s: float = 30.0
    pool_timeout_s: float = 30.0
    idle_timeout_s: float = 4.0
    max_response_bytes: int = 32 * 1024 * 1024
    headers: dict[str, str] = field(default_factory=dict)
    max_connections: int = 1000
    # Anthropic requires max_tokens; used when the client sent none.
    default_max_tokens: int = 4096
    # Azure OpenAI: deployment-style URL and the api-key header.
    api_version: str | None = None
    # Whether assistant turns go back to this OpenAI-format server with their ``reasoning_content``:
    # "auto" (only to the target that produced it; see providers/openai.py), True (always), False (never).
    reasoning_passback: ReasoningPassback = "auto"
    # Callers may name PROVIDER/UPSTREAM_MODEL directly (any upstream model, no failover, no tools).
    direct: bool = True
    # ``type: mock`` only (gateway/providers/mock.py): the wait before answering, and the stream's pace
    # in pieces per second (0: as fast as possible).
    latency_ms: float = 0.0
    tokens_per_s: float = 0.0
    #: upstream model -> price (a route target's own ``price`` wins)
    prices: dict[str, Price] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HttpToolConfig:
    url: str
    timeout_s: float = 30.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolConfig:
    name: str
    description: str
    parameters: dict[str, Any]
    http: HttpToolConfig | None = None
    python: str | None = None
    approval: ApprovalMode = "never"
    timeout_s: float = 30.0
    #: a pending approval older than this counts as denied ("approval timed out"); None: only the TTL
    approval_timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """An MCP server whose tools become server tools: streamable HTTP (``url``) or stdio (``command``)."""

    name: str
    url: str | None = None
    command: tuple[str, ...] = ()
    headers: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0
    approval: ApprovalMode = "never"
    refresh_s: float = 300.0
    approval_timeout_s: float | None = None


@dataclass(frozen=True, slots=True)
class TargetConfig:
    provider: str
    model: str
    price: Price | None = None

    @property
    def label(self) -> str:
        return f"{self.provider}:{self.model}"


@dataclass(frozen=True, slots=True)
class ContextConfig:
    threshold: float = 0.8
    compress_with: str | None = None
    max_tool_result_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class RouteConfig:
    name: str
    targets: tuple[TargetConfig, ...]
    tools: tuple[str, ...] = ()
    # MCP servers whose every tool (as listed now and at each refresh) belongs to the route: ``mcp:NAME``.
    mcp_servers: tuple[str, ...] = ()
    max_tool_iterations: int = 25
    context_window: int | None = None
    retries: int = 0
    tool_concurrency: int = 8
    context: ContextConfig = field(default_factory=ContextConfig)


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    """Failover policy shared by every route (an optional section; defaults are production-safe)."""

    backoff_base_s: float = 0.2
    backoff_max_s: float = 5.0
    retry_after_cap_s: float = 10.0
    breaker_failures: int = 3
    breaker_cooldown_s: float = 30.0
    request_timeout_s: float = 900.0


WEBHOOK_EVENTS: tuple[str, ...] = ("paused", "resumed", "decided", "expired", "headless_denied")


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """One receiver of notifications (gateway/notify): where, how signed, which events, which body format."""

    url: str
    secret: str = field(repr=False)
    events: tuple[str, ...] = WEBHOOK_EVENTS
    format: Literal["json", "slack"] = "json"
    #: one delivery attempt (connect + send + response head) must finish within this
    timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class NotificationsConfig:
    webhooks: tuple[WebhookConfig, ...] = ()
    #: an event not delivered this long after it happened is dropped (and counted)
    retry_for_s: float = 600.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    #: deliveries waiting in the store at most; past it new events are dropped (and counted)
    max_queue: int = 100_000


@dataclass(frozen=True, slots=True)
class UsageConfig:
    """Daily usage aggregates in the store (gateway/store/usage/); off: nothing is written."""

    record: bool = True
    retention_days: int = 400
    #: with Redis: how long a process sums requests' usage before writing it (one pipeline per tenant)
    flush_s: float = 0.5


@dataclass(frozen=True, slots=True)
class BackgroundConfig:
    """Background responses (``background: true``): bounds per process and per run, and the runner's lease."""

    #: background responses one gateway process runs at once; past it a new one gets 429
    max_concurrent: int = 64
    #: stream events stored per run (only for runs created with ``stream: true``); past it the run fails
    max_events: int = 50_000
    #: their total size in bytes
    max_event_bytes: int = 16 * 1024 * 1024
    #: a run whose replica stopped renewing its lease for this long is marked failed by the next reader
    lease_s: float = 30.0
    #: how often the runner renews its lease and checks for a cancel issued on another replica
    heartbeat_s: float = 1.0
    #: how often a stream follower on another replica looks for new events
    poll_s: float = 0.1
    #: background responses one key runs at once across every replica sharing the store (0: no cap
    #: but the process's); past it a new one gets 429, so one key cannot take every slot
    max_runs_per_key: int = 16
    #: the same for all the keys of one tenant together (0: no tenant cap)
    max_runs_per_tenant: int = 0


@dataclass(frozen=True, slots=True)
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    tools: dict[str, ToolConfig] = field(default_factory=dict)
    mcp_servers: dict[str, McpServerConfig] = field(default_factory=dict)
    models: dict[str, RouteConfig] = field(default_factory=dict)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    usage: UsageConfig = field(default_factory=UsageConfig)
    tenants: dict[str, TenantConfig] = field(default_factory=dict)
    background: BackgroundConfig = field(default_factory=BackgroundConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    observability: ObservabilityConfig = field(default_factory=ObservabilityConfig)
    notifications: NotificationsConfig = field(default_factory=NotificationsConfig)
