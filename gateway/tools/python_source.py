"""Tools implemented as Python callables named ``package.module:function`` in the config.

Resolution happens at construction (start-up) so a typo fails the boot, naming the tool,
instead of failing the first request that uses it. Sync functions run in a worker thread:
a tool doing blocking I/O must never stall the event loop every request shares.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from gateway.config.tools_section import ToolConfig
from gateway.tools.base import ToolFailure, ToolSpec, resolve_approval

log = logging.getLogger("loopgate.tools")

_DUMP_OPTIONS = orjson.OPT_NON_STR_KEYS


class PythonToolSource:
    """Every ``python:`` tool of the config, behind one source named ``python``.

    A timed-out or cancelled sync tool keeps running in its thread until it returns (Python
    cannot stop a thread); its result is then discarded. Such tools share the default
    executor, so tools that can hang should bound their own blocking calls.
    """

    def __init__(self, tools: Iterable[ToolConfig], name: str = "python") -> None:
        self._name = name
        self._specs: list[ToolSpec] = []
        self._funcs: dict[str, tuple[Callable[..., Any], bool]] = {}
        for cfg in tools:
            if cfg.python is None:
                raise ValueError(f"tool '{cfg.name}' has no 'python' target")
            func = resolve(cfg.name, cfg.python)
            self._funcs[cfg.name] = (func, _is_async(func))
            self._specs.append(ToolSpec(cfg.name, cfg.description, cfg.parameters,
                                        resolve_approval(cfg.approval), cfg.timeout_s, name,
                                        cfg.approval_timeout_s))

    @property
    def name(self) -> str:
        return self._name

    async def list_tools(self) -> list[ToolSpec]:
        return list(self._specs)

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        try:
            func, is_async = self._funcs[tool]
        except KeyError:
            raise ToolFailure(f"Unknown tool {tool}") from None
        try:
            result = await func(**arguments) if is_async else await asyncio.to_thread(func, **arguments)
            if inspect.isawaitable(result):  # a sync wrapper that hands back a coroutine
                result = await result
        except ToolFailure:
            raise  # a tool may raise it itself to choose the exact message
        except Exception as exc:
            log.warning("python tool %s raised", tool, exc_info=True)
            raise ToolFailure(f"{type(exc).__name__}: {exc}") from None
        return _to_text(result)

    async def aclose(self) -> None:
        return None


def resolve(tool: str, target: str) -> Callable[..., Any]:
    """Import ``package.module:attr[.attr...]``; a ValueError naming the tool says what is wrong."""
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise ValueError(f"tool '{tool}': python target must look like 'package.module:function', got '{target}'")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raises while importing
        raise ValueError(f"tool '{tool}': cannot import module '{module_name}' ({type(exc).__name__}: {exc})") from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"tool '{tool}': '{module_name}' has no attribute '{attr_path}'") from None
    if not callable(obj):
        raise ValueError(f"tool '{tool}': '{target}' is not callable")
    return obj


def _is_async(func: Callable[..., Any]) -> bool:
    # Also covers objects with an ``async def __call__``.
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(type(func).__call__)


def _to_text(result: Any) -> str:
    """A str is the result as is; anything else becomes JSON (``default=str`` for the exotic)."""
    if isinstance(result, str):
        return result
    try:
        return orjson.dumps(result, default=str, option=_DUMP_OPTIONS).decode()
    except TypeError:  # orjson.JSONEncodeError: e.g. an int beyond 64 bits, cycles
        return str(result)
