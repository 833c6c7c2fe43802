"""The approval keys of a tool or MCP server, and a key's tool allow-list.

Apart from validate.py so the approval policy (issue 16) stays one small, self-contained piece.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from gateway.config.checks import ConfigError, get

#: ``auto`` follows MCP tool annotations (gateway/tools/mcp/protocol.py); a tool without any is ``required``
ApprovalMode = Literal["never", "required", "auto"]

APPROVAL_MODES: tuple[str, ...] = ("required", "never", "auto")
#: a week: an approval deadline beyond it is almost certainly a unit mistake (ms for s)
MAX_APPROVAL_TIMEOUT_S = 7 * 86400.0
#: names in one key's ``tools`` list
MAX_KEY_TOOLS = 1000


def approval_policy(section: dict[str, Any], path: str) -> tuple[ApprovalMode, float | None]:
    """``approval`` (required | never | auto, or the boolean shorthand) and ``approval_timeout_s``."""
    raw = section.get("approval")
    if raw is None:
        mode: ApprovalMode = "never"
    elif isinstance(raw, bool):  # ``approval: true`` reads as "approval required"
        mode = "required" if raw else "never"
    elif isinstance(raw, str) and raw in APPROVAL_MODES:
        mode = raw  # type: ignore[assignment]
    else:
        raise ConfigError(f"{path}.approval", f"must be 'required', 'never' or 'auto', got {raw!r}")
    timeout = get(section, "approval_timeout_s", path, float, None)
    if timeout is not None and not (math.isfinite(timeout) and 0 < timeout <= MAX_APPROVAL_TIMEOUT_S):
        raise ConfigError(f"{path}.approval_timeout_s",
                          f"must be a number of seconds in (0, {MAX_APPROVAL_TIMEOUT_S:g}], got {timeout}")
    if timeout is not None and mode == "never":
        raise ConfigError(f"{path}.approval_timeout_s", "needs 'approval: required' or 'approval: auto'")
    return mode, timeout


def key_tools(item: dict[str, Any], path: str) -> frozenset[str] | None:
    """A key's ``tools`` allow-list: server tool names (MCP tools by their own name); absent = every tool."""
    raw = get(item, "tools", path, list, None)
    if raw is None:
        return None
    if len(raw) > MAX_KEY_TOOLS or not all(isinstance(name, str) and name for name in raw):
        raise ConfigError(f"{path}.tools", f"must be a list of at most {MAX_KEY_TOOLS} non-empty tool names")
    return frozenset(raw)
