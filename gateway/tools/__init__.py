"""Server-side tools: sources (HTTP, Python, MCP servers), the registry, and the executor."""

from gateway.tools.base import Approval, ToolFailure, ToolOutcome, ToolSource, ToolSpec, ToolTimeouts
from gateway.tools.executor import run_tool
from gateway.tools.http_source import HttpToolSource
from gateway.tools.python_source import PythonToolSource
from gateway.tools.registry import RegisteredTool, ToolRegistry

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
