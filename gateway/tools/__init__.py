"""Server-side tools: sources (HTTP, Python, MCP servers), the registry, and the executor.

``HttpToolSource`` loads on first use of the name: it brings aiohttp, which a gateway without HTTP tools or
webhooks never imports (a tenth of its start-up CPU).
"""

from typing import TYPE_CHECKING, Any

from gateway.tools.base import Approval, ToolFailure, ToolOutcome, ToolSource, ToolSpec, ToolTimeouts
from gateway.tools.executor import run_tool
from gateway.tools.python_source import PythonToolSource
from gateway.tools.registry import RegisteredTool, ToolRegistry

if TYPE_CHECKING:
    from gateway.tools.http_source import HttpToolSource

__all__ = [
    "Approval",
    "HttpToolSource",
    "PythonToolSource",
    "RegisteredTool",
    "ToolFailure",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSource",
    "ToolSpec",
    "ToolTimeouts",
    "run_tool",
]


def __getattr__(name: str) -> Any:
    if name == "HttpToolSource":
        from gateway.tools.http_source import HttpToolSource

        return HttpToolSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
