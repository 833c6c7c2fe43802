"""The ``models`` section: routes, each an ordered list of provider targets with its tools and context policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.config.checks import ConfigError, closest, get, mapping, positive
from gateway.config.mcp_section import McpServerConfig
from gateway.config.model_names import model_problem
from gateway.config.prices_section import Price, parse_price
from gateway.config.providers_section import ProviderConfig
from gateway.config.tools_section import ToolConfig

ROUTE_KEYS = {"kind", "targets", "tools", "max_tool_iterations", "context_window", "retries", "tool_concurrency",
              "context", "stream_rescue", "first_token_timeout_s", "stream_idle_timeout_s", "count_tokens",
              "hosted_tools"}
TARGET_KEYS = {"provider", "model", "price", "first_token_timeout_s", "prefill", "reasoning"}
STREAM_RESCUE = ("continue", "off")
#: how token counts (``/v1/messages/count_tokens``, ``/v1/responses/input_tokens``) are made for a route whose first
#: target counts (Anthropic, Gemini): ask it, or estimate here
COUNT_TOKENS = ("upstream", "local")
#: a caller's hosted tools (Responses ``web_search``, ...) on a target that does not run them itself:
#: ``map`` to the target's own counterpart where it has one, else drop with a warning; ``drop`` always;
#: ``refuse`` a request with one some target of the route would drop (docs/configuration.md)
HOSTED_TOOLS = ("map", "drop", "refuse")
#: a target's ``prefill``: ``auto`` (by provider type and model family), ``off``, or how it continues
PREFILL_SETTINGS = ("auto", "off", "native", "prefix", "continue_final_message")
CONTEXT_KEYS = {"threshold", "compress_with", "max_tool_result_tokens"}


@dataclass(frozen=True, slots=True)
class TargetConfig:
    provider: str
    model: str
    price: Price | None = None
    #: an embeddings target: the length of the vectors its model returns (config/embeddings_section.py)
    dimensions: int | None = None
    #: a stream with no content this many seconds after the attempt started fails over (None: off)
    first_token_timeout_s: float | None = None
    #: how the target continues an assistant message when a stream is rescued (``PREFILL_SETTINGS``)
    prefill: str = "auto"
    #: whether the model takes ``reasoning_effort``; None: decided by its family (routing/reasoning.py)
    reasoning: bool | None = None

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
    #: "chat" (the tool loop) or "embeddings" (``POST /v1/embeddings``: config/embeddings_section.py)
    kind: str = "chat"
    #: an embeddings route's request bounds (None on a chat route)
    embeddings: EmbeddingBounds | None = None
    #: a stream that fails after text reached the caller: "continue" (rescued on the next target) or "off"
    stream_rescue: str = "continue"
    #: the longest silence inside a stream after its first content; None: each provider's ``timeout_s``
    stream_idle_timeout_s: float | None = None
    #: counts on an Anthropic or Gemini first target: "upstream" (the provider counts, exact) or "local" (estimated)
    count_tokens: str = "upstream"
    #: a caller's hosted tools where a target does not run them: "map", "drop" or "refuse" (``HOSTED_TOOLS``)
    hosted_tools: str = "map"


@dataclass(frozen=True, slots=True)
class EmbeddingBounds:
    """What one ``POST /v1/embeddings`` may ask for; the defaults are OpenAI's own limits."""

    max_inputs: int = 2048
    max_input_tokens: int = 8192
    max_total_tokens: int = 300_000


def route_section(name: str, raw: Any, providers: dict[str, ProviderConfig], tools: dict[str, ToolConfig],
                  mcp_servers: dict[str, McpServerConfig]) -> RouteConfig:
    path = f"models.{name}"
    _embeddings_keys_on_chat(raw, path)
    section = mapping(raw, path, ROUTE_KEYS)
    if get(section, "kind", path, str, "chat") != "chat":
        raise ConfigError(f"{path}.kind", f"must be 'chat' or 'embeddings', got {section['kind']!r}")
    raw_targets = get(section, "targets", path, list, None)
    if not raw_targets:
        raise ConfigError(f"{path}.targets", "needs at least one target")
    first_token = _seconds(section, "first_token_timeout_s", path)
    targets = [_target(entry, f"{path}.targets[{i}]", providers, first_token) for i, entry in enumerate(raw_targets)]
    tool_names, mcp_names = _route_tools(get(section, "tools", path, list, []), path, tools, mcp_servers)
    iterations = get(section, "max_tool_iterations", path, int, 25)
    window = get(section, "context_window", path, int, None)
    rescue = _stream_rescue(section, path)
    context = _context(section.get("context"), f"{path}.context")
    return RouteConfig(
        name=name,
        targets=tuple(targets),
        tools=tool_names,
        mcp_servers=mcp_names,
        max_tool_iterations=int(positive(iterations, f"{path}.max_tool_iterations")),
        context_window=None if window is None else int(positive(window, f"{path}.context_window")),
        retries=int(positive(get(section, "retries", path, int, 0), f"{path}.retries", allow_zero=True)),
        tool_concurrency=int(positive(get(section, "tool_concurrency", path, int, 8),
                                       f"{path}.tool_concurrency")),
        context=context,
        stream_rescue=rescue,
        stream_idle_timeout_s=_seconds(section, "stream_idle_timeout_s", path),
        count_tokens=_count_tokens(section, path),
        hosted_tools=_choice(section, "hosted_tools", path, HOSTED_TOOLS),
    )


def _target(entry: Any, path: str, providers: dict[str, ProviderConfig], first_token: float | None) -> TargetConfig:
    """One of a chat route's targets; ``first_token`` is the route's timeout, which its own overrides."""
    item = mapping(entry, path, TARGET_KEYS)
    provider = get(item, "provider", path, str, "")
    if provider not in providers:
        hint = closest(provider, set(providers))
        raise ConfigError(f"{path}.provider", f"unknown provider '{provider}'{hint}")
    model = get(item, "model", path, str, "")
    if not model:
        raise ConfigError(f"{path}.model", "is required")
    problem = model_problem(model)
    if problem is not None:
        raise ConfigError(f"{path}.model", f"{model!r} {problem}")
    price = parse_price(item["price"], f"{path}.price") if item.get("price") is not None else None
    own = _seconds(item, "first_token_timeout_s", path)
    prefill = get(item, "prefill", path, (str, bool), "auto")
    if isinstance(prefill, bool):  # YAML reads a bare off / on as a boolean
        prefill = "native" if prefill else "off"
    if prefill not in PREFILL_SETTINGS:
        raise ConfigError(f"{path}.prefill", f"must be one of {', '.join(PREFILL_SETTINGS)}, got {prefill!r}")
    return TargetConfig(provider=provider, model=model, price=price,
                        first_token_timeout_s=own if own is not None else first_token, prefill=prefill,
                        reasoning=get(item, "reasoning", path, bool, None))


def _route_tools(listed: list[Any], path: str, tools: dict[str, ToolConfig],
                 mcp_servers: dict[str, McpServerConfig]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A route's ``tools`` list as (configured tools, MCP servers named ``mcp:NAME``), each checked to exist."""
    tool_names: list[str] = []
    mcp_names: list[str] = []
    for i, tool in enumerate(listed):
        if isinstance(tool, str) and tool.startswith("mcp:"):
            server = tool[4:]
            if server not in mcp_servers:
                hint = closest(server, set(mcp_servers))
                raise ConfigError(f"{path}.tools[{i}]", f"unknown MCP server '{server}'{hint}")
            mcp_names.append(server)
        elif tool not in tools:
            raise ConfigError(f"{path}.tools[{i}]", f"unknown tool '{tool}'{closest(str(tool), set(tools))}")
        else:
            tool_names.append(tool)
    return tuple(tool_names), tuple(mcp_names)


def _stream_rescue(section: dict[str, Any], path: str) -> str:
    rescue = get(section, "stream_rescue", path, (str, bool), "continue")
    if isinstance(rescue, bool):  # YAML reads a bare off as false
        rescue = "continue" if rescue else "off"
    if rescue not in STREAM_RESCUE:
        raise ConfigError(f"{path}.stream_rescue", f"must be 'continue' or 'off', got {rescue!r}")
    return str(rescue)


def _context(raw: Any, path: str) -> ContextConfig:
    section = mapping(raw, path, CONTEXT_KEYS)
    threshold = get(section, "threshold", path, float, 0.8)
    if not 0 < threshold <= 1:
        raise ConfigError(f"{path}.threshold", f"must be in (0, 1], got {threshold}")
    return ContextConfig(threshold=threshold, compress_with=get(section, "compress_with", path, str, None),
                         max_tool_result_tokens=get(section, "max_tool_result_tokens", path, int, None))


def _count_tokens(section: dict[str, Any], path: str) -> str:
    value = get(section, "count_tokens", path, str, "upstream")
    if value not in COUNT_TOKENS:
        raise ConfigError(f"{path}.count_tokens", f"must be 'upstream' or 'local', got {value!r}")
    return str(value)


def _choice(section: dict[str, Any], key: str, path: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (the first when absent)."""
    value = get(section, key, path, str, choices[0])
    if value not in choices:
        raise ConfigError(f"{path}.{key}", f"must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _seconds(section: dict[str, Any], key: str, path: str) -> float | None:
    """An optional positive number of seconds (absent: None, the feature's default)."""
    value = get(section, key, path, float, None)
    return None if value is None else float(positive(value, f"{path}.{key}"))


#: keys only an embeddings route (``kind: embeddings``) takes, and only its targets
_EMBEDDINGS_ONLY = ("max_inputs", "max_input_tokens", "max_total_tokens")


def _embeddings_keys_on_chat(raw: Any, path: str) -> None:
    """An embeddings key on a chat route: say that ``kind: embeddings`` is what is missing."""
    if not isinstance(raw, dict):
        return
    for key in _EMBEDDINGS_ONLY:
        if key in raw:
            raise ConfigError(f"{path}.{key}", "is a key of embeddings routes: add kind: embeddings to the route")
    targets = raw.get("targets")
    for index, target in enumerate(targets if isinstance(targets, list) else []):
        if isinstance(target, dict) and "dimensions" in target:
            raise ConfigError(f"{path}.targets[{index}].dimensions",
                              "is declared by the targets of embeddings routes: add kind: embeddings to the route")


def check_compress_with(models: dict[str, RouteConfig]) -> None:
    """``context.compress_with`` names a configured chat route."""
    for name, route in models.items():
        target = route.context.compress_with
        if target is not None and target not in models:
            raise ConfigError(f"models.{name}.context.compress_with", f"unknown model route '{target}'")
        if target is not None and models[target].kind != "chat":
            raise ConfigError(f"models.{name}.context.compress_with",
                              f"'{target}' is an embeddings route; a summary needs a chat route")
