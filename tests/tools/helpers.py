"""Small builders shared by the tool tests."""

from __future__ import annotations

from typing import Any

from gateway.config.model import HttpToolConfig, ToolConfig

SAMPLE = "tests.tools.sample_tools"
OPEN_OBJECT: dict[str, Any] = {"type": "object"}
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def http_tool(name: str, url: str, *, parameters: dict[str, Any] | None = None, timeout_s: float = 5.0,
              headers: dict[str, str] | None = None) -> ToolConfig:
    return ToolConfig(name=name, description=f"{name} over HTTP", parameters=parameters or OPEN_OBJECT,
                      http=HttpToolConfig(url=url, timeout_s=timeout_s, headers=headers or {}), timeout_s=timeout_s)


def python_tool(name: str, function: str, *, parameters: dict[str, Any] | None = None,
                timeout_s: float = 5.0, approval: str = "never") -> ToolConfig:
    target = function if ":" in function or "." in function else f"{SAMPLE}:{function}"
    return ToolConfig(name=name, description=f"{name} in Python", parameters=parameters or OPEN_OBJECT,
                      python=target, timeout_s=timeout_s, approval=approval)  # type: ignore[arg-type]


class ScriptedSource:
    """A ToolSource whose tool list can change between refreshes, like an MCP server's.

    ``behaviour`` maps a tool name to an async function of the arguments; ``fail_listing``
    makes the next ``list_tools`` raise (a server that is down).
    """

    def __init__(self, name: str, specs: list[Any] | None = None,
                 behaviour: dict[str, Any] | None = None) -> None:
        self.name = name
        self.specs = list(specs or [])
        self.behaviour = dict(behaviour or {})
        self.fail_listing = False
        self.list_calls = 0
        self.closed = False

    async def list_tools(self) -> list[Any]:
        self.list_calls += 1
        if self.fail_listing:
            raise ConnectionError(f"{self.name} is down")
        return list(self.specs)

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        return await self.behaviour[tool](arguments)

    async def aclose(self) -> None:
        self.closed = True
