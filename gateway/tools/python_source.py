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
import os
import sys
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


class ToolTargetError(ValueError):
    """A ``python:`` target that cannot be imported or called; ``key`` is its config key (``tools.NAME.python``)."""

    def __init__(self, tool: str, problem: str) -> None:
        super().__init__(f"tool '{tool}': {problem}")
        self.key = f"tools.{tool}.python"
        self.problem = problem


def add_import_paths(*directories: str | os.PathLike[str]) -> None:
    """Put the config file's directory and the working directory first on ``sys.path``.

    A user's tool module sits beside their config (``python: mytools:lookup``): it must import
    whether or not PYTHONPATH says so, as ``python script.py`` imports the script's neighbours.
    """
    for directory in reversed(directories):
        path = os.path.abspath(directory)
        if path in sys.path:
            continue
        sys.path.insert(0, path)
    importlib.invalidate_caches()


def resolve(tool: str, target: str) -> Callable[..., Any]:
    """Import ``package.module:attr[.attr...]``; a ``ToolTargetError`` naming the tool says what is wrong."""
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise ToolTargetError(tool, f"python target must look like 'package.module:function', got '{target}'")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raises while importing
        hint = (" (is the module beside the config file or in the working directory? Both are on the import path)"
                if isinstance(exc, ModuleNotFoundError) and exc.name == module_name.split(".")[0] else "")
        problem = f"cannot import module '{module_name}' ({type(exc).__name__}: {exc}){hint}"
        raise ToolTargetError(tool, problem) from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ToolTargetError(tool, f"'{module_name}' has no attribute '{attr_path}'"
                                  f"{_did_you_mean(part, obj)}") from None
    if not callable(obj):
        raise ToolTargetError(tool, f"'{target}' is not callable")
    return obj


def _did_you_mean(name: str, owner: Any) -> str:
    import difflib  # start-up only

    public = [attr for attr in dir(owner) if not attr.startswith("_")]
    found = difflib.get_close_matches(name, public, n=1)
    return f" (did you mean '{found[0]}'?)" if found else ""


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
