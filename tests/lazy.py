"""Heavy client SDKs imported when a test first uses them, not when pytest collects the module.

Every xdist worker imports every test module at collection, so a module-level ``import anthropic``
(about 3,600 modules, over a second of CPU) or ``import agents`` (the OpenAI Agents SDK) cost each
worker that time even when another worker runs those tests. ``anthropic = lazy_import("anthropic")``
imports it at the first public attribute a test reads (``anthropic.Anthropic(...)``), in the worker
that runs it. Not ``importlib.util.LazyLoader``: pytest's collection probes every module-level name
(``isinstance``, ``__test__``, fixture markers), which would load such a module at once; this proxy
answers those probes itself.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


class LazyModule:
    """Stands for module ``name`` until a public attribute is read, then hands out the real one's."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):  # pytest's probes (__test__, __wrapped__, _pytestfixturefunction, ...)
            raise AttributeError(attribute)
        return getattr(importlib.import_module(self._name), attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy_import(name: str) -> Any:
    """Module ``name``, imported at its first public attribute access; ``ModuleNotFoundError`` now if it is missing."""
    if importlib.util.find_spec(name) is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return LazyModule(name)
