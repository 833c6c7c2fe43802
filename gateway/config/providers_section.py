"""The ``providers`` section: model provider endpoints, their credentials, transport bounds and prices."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlparse

from gateway.config.checks import ConfigError, get, header_map, mapping, one_line, positive
from gateway.config.prices_section import Price, parse_prices
from gateway.config.transport import DEFAULT_LIMITS, DEFAULT_TIMEOUTS, PoolLimits, Timeouts

PROVIDER_KEYS = {"type", "base_url", "api_key", "timeout_s", "connect_timeout_s", "headers",
                  "max_connections", "default_max_tokens", "api_version", "reasoning_passback", "direct",
                  "write_timeout_s", "pool_timeout_s", "idle_timeout_s", "max_response_bytes", "latency_ms",
                  "tokens_per_s", "prices", "azure"}

ProviderType = Literal["openai", "openai_responses", "anthropic", "gemini", "litellm", "mock"]
PROVIDER_TYPES: tuple[str, ...] = ("openai", "openai_responses", "anthropic", "gemini", "litellm", "mock")
ReasoningPassback = bool | Literal["auto"]


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    name: str
    type: ProviderType
    base_url: str
    api_key: str = ""
    # Transport bounds (README "Providers"): ``timeout_s``, ``connect_timeout_s``, ``write_timeout_s``
    # and ``pool_timeout_s`` are ``timeouts``; ``max_connections``, ``idle_timeout_s`` and
    # ``max_response_bytes`` are ``limits`` (gateway/config/transport.py).
    timeouts: Timeouts = DEFAULT_TIMEOUTS
    limits: PoolLimits = DEFAULT_LIMITS
    headers: dict[str, str] = field(default_factory=dict)
    # Anthropic requires max_tokens; used when the client sent none.
    default_max_tokens: int = 4096
    # Azure OpenAI: deployment-style URL and the api-key header (``openai``); ``openai_responses``: the
    # ``api-version`` query parameter of Azure's v1 API (optional there).
    api_version: str | None = None
    # ``openai_responses`` only: Azure OpenAI's v1 API (``{base_url}/openai/v1/responses``, the key as ``api-key``);
    # the default is true for an Azure OpenAI host or with ``api_version`` set (``_azure``).
    azure: bool = False
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


# Keys only ``type: mock`` reads; bounds keep a typo (60000000) from parking requests for days.
_MOCK_KEYS = ("latency_ms", "tokens_per_s")
_MAX_MOCK_LATENCY_MS = 600_000.0
_MAX_MOCK_TOKENS_PER_S = 1_000_000.0

_DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "openai_responses": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
    "litellm": "",
    "mock": "",
}


def provider_section(name: str, raw: Any) -> ProviderConfig:
    path = f"providers.{name}"
    section = mapping(raw, path, PROVIDER_KEYS)
    kind = get(section, "type", path, str, None)
    if kind is None:
        raise ConfigError(f"{path}.type", f"is required (one of {', '.join(PROVIDER_TYPES)})")
    if kind not in PROVIDER_TYPES:
        raise ConfigError(f"{path}.type", f"unknown provider type '{kind}' (one of {', '.join(PROVIDER_TYPES)})")
    base_url = get(section, "base_url", path, str, _DEFAULT_BASE_URLS[kind]).rstrip("/")
    if kind == "mock":
        latency_ms, tokens_per_s = _mock_pace(section, path)
    else:
        latency_ms = tokens_per_s = 0.0
        for key in _MOCK_KEYS:
            if key in section:
                raise ConfigError(f"{path}.{key}", "is only for providers of type mock")
    if kind not in ("litellm", "mock"):
        parsed = urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"{path}.base_url", f"must be an http(s) URL, got '{base_url}'")
    if kind == "litellm" and importlib.util.find_spec("litellm") is None:
        raise ConfigError(f"{path}.type", "litellm providers need: pip install 'loopgate[litellm]'")
    # Checked in the order the keys were always checked, so the first mistake reported stays the same.
    api_key = one_line(get(section, "api_key", path, str, ""), f"{path}.api_key")
    read = positive(get(section, "timeout_s", path, float, 600.0), f"{path}.timeout_s")
    connect = positive(get(section, "connect_timeout_s", path, float, 10.0), f"{path}.connect_timeout_s")
    write = positive(get(section, "write_timeout_s", path, float, 30.0), f"{path}.write_timeout_s")
    pool = positive(get(section, "pool_timeout_s", path, float, 30.0), f"{path}.pool_timeout_s")
    keepalive = positive(get(section, "idle_timeout_s", path, float, 4.0), f"{path}.idle_timeout_s", allow_zero=True)
    most_bytes = int(positive(get(section, "max_response_bytes", path, int, 32 * 1024 * 1024),
                              f"{path}.max_response_bytes"))
    headers = header_map(section.get("headers"), f"{path}.headers")
    connections = int(positive(get(section, "max_connections", path, int, 1000), f"{path}.max_connections"))
    api_version = get(section, "api_version", path, str, None)
    return ProviderConfig(
        name=name,
        type=kind,
        base_url=base_url,
        api_key=api_key,
        timeouts=Timeouts(connect=connect, read=read, write=write, pool=pool),
        limits=PoolLimits(max_connections=connections, keepalive_expiry=keepalive, max_response_bytes=most_bytes),
        headers=headers,
        default_max_tokens=int(positive(get(section, "default_max_tokens", path, int, 4096),
                                         f"{path}.default_max_tokens")),
        api_version=api_version,
        azure=_azure(section, path, kind, base_url, api_version),
        reasoning_passback=_passback(section.get("reasoning_passback", "auto"), f"{path}.reasoning_passback"),
        direct=get(section, "direct", path, bool, True),
        latency_ms=latency_ms,
        tokens_per_s=tokens_per_s,
        prices=parse_prices(section.get("prices"), f"{path}.prices"),
    )


# Hosts of Azure OpenAI resources (classic and Foundry): an ``openai_responses`` provider there is Azure's v1 API.
_AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")


def _azure(section: dict[str, Any], path: str, kind: str, base_url: str, api_version: str | None) -> bool:
    """``azure`` (``openai_responses`` only): as configured, else: the host is Azure's or ``api_version`` is set."""
    if kind != "openai_responses":
        if "azure" in section:
            raise ConfigError(f"{path}.azure", "is only for providers of type openai_responses (an Azure "
                              "deployment of type openai is told by its api_version)")
        return False
    host = (urlparse(base_url).hostname or "").lower()
    return bool(get(section, "azure", path, bool, api_version is not None or host.endswith(_AZURE_HOSTS)))


def _mock_pace(section: dict[str, Any], path: str) -> tuple[float, float]:
    """``latency_ms`` (0 to 600000, default 0) and ``tokens_per_s`` (0 = unpaced, to 1000000, default 0)."""
    pace = []
    for key, ceiling in (("latency_ms", _MAX_MOCK_LATENCY_MS), ("tokens_per_s", _MAX_MOCK_TOKENS_PER_S)):
        value = positive(get(section, key, path, float, 0.0), f"{path}.{key}", allow_zero=True)
        if not value <= ceiling:  # also refuses nan
            raise ConfigError(f"{path}.{key}", f"must be at most {ceiling:g}, got {value}")
        pace.append(value)
    return pace[0], pace[1]


def _passback(value: Any, path: str) -> ReasoningPassback:
    """``auto`` | ``true`` | ``false``; the strings too, as an environment variable delivers them."""
    if value is None or value == "auto":
        return "auto"
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(path, f"must be auto, true or false, got {value!r}")
