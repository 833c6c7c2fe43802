"""Turning a parsed YAML tree into typed config, with one message per mistake naming its key path.

Unknown keys are errors: a typo such as ``targts`` would otherwise silently fall back to a
default and surface later as a confusing runtime behaviour. Each section parses itself
(``*_section.py``); this module composes them and runs the checks that span sections.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.config.background_section import BACKGROUND_KEYS, background_section
from gateway.config.checks import ConfigError, T, mapping, register_sections, type_name
from gateway.config.embeddings_section import embeddings_route_section, is_embeddings
from gateway.config.keys_section import (
    ADMIN_KEY_KEYS,
    API_KEY_KEYS,
    AUTH_KEYS,
    BUDGET_KEYS,
    TENANT_KEYS,
    auth_section,
    check_key_models,
    tenants_section,
)
from gateway.config.mcp_section import MCP_KEYS, check_sampling_routes, mcp_server_section
from gateway.config.model import Config
from gateway.config.models_section import (
    CONTEXT_KEYS,
    ROUTE_KEYS,
    TARGET_KEYS,
    check_compress_with,
    route_section,
)
from gateway.config.notifications_section import NOTIFICATIONS_KEYS, WEBHOOK_KEYS, notifications_section
from gateway.config.observability_section import ROLLUP_KEYS, logging_section, observability_section
from gateway.config.prices_section import PRICE_KEYS, check_target_prices
from gateway.config.providers_section import PROVIDER_KEYS, provider_section
from gateway.config.responses_section import RESPONSES_KEYS, responses_section
from gateway.config.routing_section import ROUTING_KEYS, routing_section
from gateway.config.server_section import SERVER_KEYS, server_section
from gateway.config.store_section import SENTINEL_KEYS, STORE_KEYS, STORE_TLS_KEYS, store_section
from gateway.config.tools_section import HTTP_TOOL_KEYS, TOOL_KEYS, tool_section
from gateway.config.usage_section import USAGE_KEYS, usage_section
from gateway.config.websocket_section import WEBSOCKET_KEYS, websocket_section

__all__ = ["ConfigError", "build_config", "deadline_warnings", "shared_stdio_warnings"]

TOP_KEYS = {"server", "auth", "store", "providers", "tools", "mcp_servers", "models", "routing", "tenants",
            "usage", "background", "logging", "observability", "notifications", "responses", "websocket"}
# The keys of every section, named by a path template (NAME: an entry's name, N: a list index). One
# table, so a key that is unknown where it was written but valid elsewhere can name where it belongs
# (``checks.elsewhere``; on a tie the earlier entry wins).
SECTIONS: tuple[tuple[str, set[str]], ...] = (
    ("", TOP_KEYS), ("server", SERVER_KEYS), ("auth", AUTH_KEYS), ("auth.keys[N]", API_KEY_KEYS),
    ("store", STORE_KEYS), ("store.tls", STORE_TLS_KEYS), ("store.sentinel", SENTINEL_KEYS),
    ("providers.NAME", PROVIDER_KEYS), ("tools.NAME", TOOL_KEYS),
    ("tools.NAME.http", HTTP_TOOL_KEYS), ("mcp_servers.NAME", MCP_KEYS), ("models.NAME", ROUTE_KEYS),
    ("models.NAME.targets[N]", TARGET_KEYS), ("models.NAME.context", CONTEXT_KEYS), ("routing", ROUTING_KEYS),
    ("models.NAME.targets[N].price", PRICE_KEYS), ("usage", USAGE_KEYS),
    ("auth.admin_keys[N]", ADMIN_KEY_KEYS), ("tenants.NAME", TENANT_KEYS), ("auth.keys[N].budget", BUDGET_KEYS),
    ("background", BACKGROUND_KEYS),
    ("notifications", NOTIFICATIONS_KEYS), ("notifications.webhooks[N]", WEBHOOK_KEYS),
    ("observability.rollups", ROLLUP_KEYS), ("responses", RESPONSES_KEYS),
    ("websocket", WEBSOCKET_KEYS),
)
register_sections(SECTIONS)


def _named(raw: Any, section: str, build: Callable[[str, Any], T]) -> dict[str, T]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(section, f"expected a mapping of names, got {type_name(raw)}")
    return {str(name): build(str(name), value) for name, value in raw.items()}


def build_config(raw: dict[str, Any]) -> Config:
    mapping(raw, "", TOP_KEYS)
    providers = _named(raw.get("providers"), "providers", provider_section)
    tools = _named(raw.get("tools"), "tools", tool_section)
    mcp_servers = _named(raw.get("mcp_servers"), "mcp_servers", mcp_server_section)
    models = _named(raw.get("models"), "models",
                    lambda n, v: embeddings_route_section(n, v, providers) if is_embeddings(v)
                    else route_section(n, v, providers, tools, mcp_servers))
    check_compress_with(models)
    check_sampling_routes(mcp_servers, {name: route.kind for name, route in models.items()})
    check_target_prices(models)
    auth = auth_section(raw.get("auth"))
    check_key_models(auth, set(models), set(providers))
    server = server_section(raw.get("server"))
    return Config(
        server=server,
        auth=auth,
        store=store_section(raw.get("store")),
        providers=providers,
        tools=tools,
        mcp_servers=mcp_servers,
        models=models,
        routing=routing_section(raw.get("routing")),
        usage=usage_section(raw.get("usage")),
        tenants=tenants_section(raw.get("tenants")),
        background=background_section(raw.get("background")),
        logging=logging_section(raw.get("logging")),
        observability=observability_section(raw.get("observability")),
        notifications=notifications_section(raw.get("notifications"), server.public_url),
        responses=responses_section(raw.get("responses")),
        websocket=websocket_section(raw.get("websocket")),
    )


def deadline_warnings(config: Config) -> list[str]:
    """Targets that can use up the whole request deadline on their own (valid, but failover then never happens)."""
    limit = config.routing.request_timeout_s
    warnings = []
    for name, route in config.models.items():
        for index, target in enumerate(route.targets):
            worst = (route.retries + 1) * config.providers[target.provider].timeouts.read
            if worst >= limit:
                consequence = ("the targets after it may never be tried" if index < len(route.targets) - 1
                               else "its retries cannot all happen")
                warnings.append(f"models.{name}: target {target.label}: (retries + 1) x timeout_s = {worst:g} s >= "
                                f"routing.request_timeout_s = {limit:g} s; a target that stalls uses up the request "
                                f"deadline, so {consequence}")
    return warnings


def shared_stdio_warnings(config: Config) -> list[str]:
    """stdio MCP servers that can ask (elicit or sample) and that calls of more than one tenant can reach.

    A stdio connection carries no link from a server's request to the call it belongs to: while two
    calls run on the server, its questions and samplings cannot be routed and are declined, so one
    tenant's waiting call declines every other tenant's. Valid, but worth a separate server per tenant.
    """
    warnings = []
    for name, server in config.mcp_servers.items():
        if not server.command or (server.elicitation == "decline" and server.sampling_route is None):
            continue
        routes = sorted(r for r, route in config.models.items() if name in getattr(route, "mcp_servers", ()))
        if not routes:
            continue
        if not config.auth.enabled:
            who = "every caller (auth is off)"
        else:
            tenants = sorted({key.tenant for key in config.auth.keys
                              if key.models is None or any(r in key.models for r in routes)})
            if len(tenants) > 1:
                who = f"keys of {len(tenants)} tenants ({', '.join(tenants[:5])}{', ...' if len(tenants) > 5 else ''})"
            elif config.auth.admin_keys:
                who = "keys the admin keys create (of any tenant)"
            else:
                continue
        asks = " and ".join(w for w, on in (("elicit", server.elicitation == "pause"),
                                             ("sample", server.sampling_route is not None)) if on)
        warnings.append(f"mcp_servers.{name}: a stdio server that can {asks} is reachable by {who} through "
                        f"{', '.join(f'models.{r}' for r in routes[:5])}; stdio cannot tell which call a server's "
                        "request belongs to, so while calls of two tenants run on it, its questions and samplings "
                        "are declined for both: give each tenant its own server, or set elicitation: decline and "
                        "no sampling_route")
    return warnings
