"""Tool name -> (spec, source, compiled validator), rebuilt from the sources on refresh.

The registry knows sources only through :class:`ToolSource`, and learns their tools only by
listing them, so a source whose tools change at run time (an MCP server) is just one more
entry in ``sources``. Reads on the hot path are a dict lookup on an immutable snapshot;
a refresh builds a new snapshot and swaps it in, so an in-flight request never sees a
half-built table. JSON Schema validators are compiled when a tool first appears (or its
spec changes), never per call, and never follow a reference out of the schema (``json_schemas``):
a tool whose schema names one, or is too large or too deep, is left out with a warning.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jsonschema.protocols import Validator

from gateway.config.tools_section import ToolConfig
from gateway.json_schemas import compile_schema, schema_problem
from gateway.tools.base import ToolSource, ToolSpec
from gateway.tools.python_source import PythonToolSource

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("loopgate.tools")


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    """Everything the executor needs for one tool, resolved once."""

    spec: ToolSpec
    source: ToolSource
    validator: Validator


class ToolRegistry:
    """The server-side tools of this process, from every source.

    Build with :meth:`from_config` (start-up: HTTP and Python tools of the config); add
    further sources with :meth:`add_source` and call :meth:`refresh` to (re-)list them.
    """

    def __init__(self, sources: Iterable[ToolSource] = ()) -> None:
        self._sources: list[ToolSource] = []
        self._listed: dict[str, dict[str, RegisteredTool]] = {}  # source name -> its tools
        self._tools: dict[str, RegisteredTool] = {}
        self._lock = asyncio.Lock()
        for source in sources:
            self.add_source(source)

    @classmethod
    async def from_config(cls, tools: Mapping[str, ToolConfig],
                          session: aiohttp.ClientSession | None = None) -> ToolRegistry:
        """Sources for the config's tools, listed and compiled. Raises ValueError naming a bad tool.

        ``session`` is the shared pooled session for HTTP tools (not closed by the registry);
        without one the HTTP source makes and owns its own.
        """
        http = [cfg for cfg in tools.values() if cfg.http is not None and cfg.python is None]
        python = [cfg for cfg in tools.values() if cfg.python is not None and cfg.http is None]
        for cfg in tools.values():
            if (cfg.http is None) == (cfg.python is None):
                raise ValueError(f"tool '{cfg.name}' needs exactly one of 'http' or 'python'")
        sources: list[ToolSource] = []
        if http:  # aiohttp loads here, at start-up, only for a config with HTTP tools
            from gateway.tools.http_source import HttpToolSource

            sources.append(HttpToolSource(http, session))
        if python:
            sources.append(PythonToolSource(python))  # imports every target now
        registry = cls(sources)
        await registry.refresh(strict=True)
        return registry

    def add_source(self, source: ToolSource) -> None:
        """Register a source; its tools become visible at the next :meth:`refresh`."""
        if any(s.name == source.name for s in self._sources):
            raise ValueError(f"a tool source named '{source.name}' is already registered")
        self._sources.append(source)

    @property
    def sources(self) -> tuple[ToolSource, ...]:
        return tuple(self._sources)

    async def refresh(self, *, strict: bool = False, only: Collection[str] | None = None) -> None:
        """Re-list every source concurrently and swap in the new table.

        ``strict`` (start-up): any failing source or duplicate tool name raises and the table
        is left as it was. Otherwise (periodic refresh) a failing source keeps its previous
        tools and a duplicate name keeps the first source's tool; both are logged.
        ``only`` names the sources to re-list (one that said its tools changed); the others keep theirs.
        """
        async with self._lock:
            sources = list(self._sources)
            relisted = [s for s in sources if only is None or s.name in only]
            results = await asyncio.gather(*(self._list(s) for s in relisted), return_exceptions=True)
            listed = {s.name: self._listed.get(s.name, {}) for s in sources}
            for source, result in zip(relisted, results, strict=True):
                if isinstance(result, BaseException):
                    if strict or not isinstance(result, Exception):
                        raise result
                    log.error("tool source %s failed to list its tools; keeping its previous tools",
                              source.name, exc_info=result)
                else:
                    listed[source.name] = result
            table: dict[str, RegisteredTool] = {}
            for source in sources:
                for name, tool in listed[source.name].items():
                    if name in table:
                        message = (f"tool '{name}' is provided by both source '{table[name].spec.source}'"
                                   f" and source '{source.name}'")
                        if strict:
                            raise ValueError(message)
                        log.error("%s; keeping the first", message)
                        continue
                    table[name] = tool
            self._listed = listed
            self._tools = table

    async def _list(self, source: ToolSource) -> dict[str, RegisteredTool]:
        previous = self._listed.get(source.name, {})
        tools: dict[str, RegisteredTool] = {}
        for spec in await source.list_tools():
            if spec.name in tools:
                raise ValueError(f"tool source '{source.name}' lists tool '{spec.name}' twice")
            old = previous.get(spec.name)
            if old is not None and old.spec == spec and old.source is source:
                tools[spec.name] = old  # unchanged: keep the compiled validator
                continue
            problem = schema_problem(spec.parameters)
            if problem is not None:  # an outside schema: offering the tool would make the gateway fetch
                log.warning("tool source %s: tool %r left out: %s", source.name, spec.name[:100], problem)
                continue
            tools[spec.name] = RegisteredTool(spec, source, _compile(spec))
        return tools

    def get(self, name: str) -> RegisteredTool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def source_tools(self, source: str) -> tuple[str, ...]:
        """The names a source listed at the last refresh (an MCP server's tools change over time)."""
        return tuple(name for name, tool in self._listed.get(source, {}).items()
                     if self._tools.get(name) is tool)

    def definitions(self, names: Iterable[str]) -> list[dict[str, Any]]:
        """OpenAI ``tools[]`` entries for ``names``, in that order; unknown names raise KeyError.

        Config validation guarantees a route's tools exist; a KeyError here means a source
        stopped listing a tool a route still names, which should be loud, not a silent omission.
        """
        tools = self._tools
        out: list[dict[str, Any]] = []
        for name in names:
            tool = tools.get(name)
            if tool is None:
                raise KeyError(f"unknown tool '{name}'")
            out.append(tool.spec.definition())
        return out

    async def aclose(self) -> None:
        """Close every source (an HTTP source closes only a session it created itself)."""
        sources = list(self._sources)
        results = await asyncio.gather(*(s.aclose() for s in sources), return_exceptions=True)
        for source, result in zip(sources, results, strict=True):
            if isinstance(result, Exception):
                log.warning("closing tool source %s failed", source.name, exc_info=result)


def _compile(spec: ToolSpec) -> Validator:
    """A validator that resolves only references inside the schema (``json_schemas.LOCAL_ONLY``)."""
    return compile_schema(spec.parameters, f"tool '{spec.name}' (source '{spec.source}')")
