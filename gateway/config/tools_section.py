"""The ``tools`` section: server tools the gateway runs itself, over HTTP or as a Python function."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from gateway.config.approval_section import ApprovalMode, approval_policy
from gateway.config.checks import ConfigError, get, header_map, mapping, positive

TOOL_KEYS = {"description", "parameters", "http", "python", "approval", "timeout_s", "approval_timeout_s"}
HTTP_TOOL_KEYS = {"url", "timeout_s", "headers"}


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


def tool_section(name: str, raw: Any) -> ToolConfig:
    path = f"tools.{name}"
    section = mapping(raw, path, TOOL_KEYS)
    params = get(section, "parameters", path, dict, {"type": "object", "properties": {}})
    if params.get("type", "object") != "object":
        raise ConfigError(f"{path}.parameters", "must be a JSON Schema of type object")
    _check_schema(params, f"{path}.parameters")
    http_raw = section.get("http")
    python = get(section, "python", path, str, None)
    if (http_raw is None) == (python is None):
        raise ConfigError(path, "needs exactly one of 'http' or 'python'")
    http = None
    if http_raw is not None:
        hpath = f"{path}.http"
        hsec = mapping(http_raw, hpath, HTTP_TOOL_KEYS)
        url = get(hsec, "url", hpath, str, "")
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"{hpath}.url", f"must be an http(s) URL, got '{url}'")
        http = HttpToolConfig(
            url=url,
            timeout_s=positive(get(hsec, "timeout_s", hpath, float, 30.0), f"{hpath}.timeout_s"),
            headers=header_map(hsec.get("headers"), f"{hpath}.headers"),
        )
    if python is not None and (":" not in python or not all(python.split(":", 1))):
        raise ConfigError(f"{path}.python", f"must look like 'package.module:function', got '{python}'")
    approval, approval_timeout = approval_policy(section, path)
    timeout = http.timeout_s if http else get(section, "timeout_s", path, float, 30.0)
    return ToolConfig(
        name=name,
        description=get(section, "description", path, str, ""),
        parameters=params,
        http=http,
        python=python,
        approval=approval,
        timeout_s=positive(timeout, f"{path}.timeout_s"),
        approval_timeout_s=approval_timeout,
    )


def _check_schema(schema: dict[str, Any], path: str) -> None:
    """Valid JSON Schema, within the bounds of a tool's schema, and no reference out of it (never fetched)."""
    from gateway.json_schemas import compile_schema, schema_problem  # start-up only

    try:
        compile_schema(schema, path)
    except ValueError as exc:
        raise ConfigError(path, str(exc).removeprefix(f"{path}: ")) from None
    problem = schema_problem(schema)
    if problem is not None:
        raise ConfigError(path, "the schema " + problem.removeprefix("its input schema "))
