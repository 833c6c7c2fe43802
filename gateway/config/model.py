"""Typed, validated configuration. Built once at start-up; read-only on the hot path.

``Config`` composes the sections; each section's dataclasses, keys and parser live in its own
module (``server_section.py``, ``providers_section.py``, ...). They are re-exported here, so
``from gateway.config.model import ProviderConfig`` keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.approval_section import ApprovalMode
from gateway.config.background_section import BackgroundConfig
from gateway.config.keys_section import (
    AdminKey,
    ApiKey,
    AuthConfig,
    Budget,
    BudgetPeriod,
    BudgetUnit,
    KeyRole,
    Limits,
    TenantConfig,
)
from gateway.config.mcp_section import McpServerConfig
from gateway.config.models_section import ContextConfig, RouteConfig, TargetConfig
from gateway.config.notifications_section import WEBHOOK_EVENTS, NotificationsConfig, WebhookConfig
from gateway.config.observability_section import LoggingConfig, ObservabilityConfig
from gateway.config.prices_section import Price
from gateway.config.providers_section import PROVIDER_TYPES, ProviderConfig, ProviderType, ReasoningPassback
from gateway.config.responses_section import ResponsesConfig
from gateway.config.routing_section import RoutingConfig
from gateway.config.server_section import ServerConfig
from gateway.config.store_section import REDIS_SCHEMES, StoreConfig, StoreSentinel, StoreTls
from gateway.config.tools_section import HttpToolConfig, ToolConfig
from gateway.config.usage_section import UsageConfig
from gateway.config.websocket_section import WebSocketConfig

__all__ = [
    "PROVIDER_TYPES", "REDIS_SCHEMES", "WEBHOOK_EVENTS", "AdminKey", "ApiKey", "ApprovalMode", "AuthConfig",
    "BackgroundConfig", "Budget", "BudgetPeriod", "BudgetUnit", "Config", "ContextConfig", "HttpToolConfig",
    "KeyRole", "Limits", "LoggingConfig", "McpServerConfig", "NotificationsConfig", "ObservabilityConfig", "Price",
    "ProviderConfig", "ProviderType", "ReasoningPassback", "ResponsesConfig", "RouteConfig", "RoutingConfig",
    "ServerConfig", "StoreConfig", "StoreSentinel", "StoreTls", "TargetConfig", "TenantConfig", "ToolConfig",
    "UsageConfig", "WebSocketConfig", "WebhookConfig",
]


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
    responses: ResponsesConfig = field(default_factory=ResponsesConfig)
    websocket: WebSocketConfig = field(default_factory=WebSocketConfig)
