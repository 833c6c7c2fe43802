"""Which upstream model names may be sent at all: the check config load and direct routes share.

A model name can come from a caller (a direct route ``PROVIDER/UPSTREAM_MODEL``), and every
upstream URL is built from it (gateway/providers/urls.py quotes each piece as one path segment).
Names that could still mean something else to a server that decodes the path are refused before
any URL is built: at config load for configured targets, per new direct name at request time.
The check lives in config, not beside the URL builders, so that config imports no provider code.
"""

from __future__ import annotations

import re

# Whitespace (any Unicode space), C0/C1 controls and DEL, plus the characters that end a path
# (``?``, ``#``) or that some servers treat as a path separator (``\``).
_FORBIDDEN = re.compile(r"[\s\x00-\x1f\x7f-\x9f?#\\]")


def model_problem(model: str) -> str | None:
    """Why ``model`` cannot be an upstream model name, or None when it can."""
    if not model:
        return "is empty"
    found = _FORBIDDEN.search(model)
    if found is not None:
        char = found.group()
        what = f"'{char}'" if char in "?#\\" else "whitespace" if char.isspace() else "a control character"
        return f"contains {what}; model names cannot contain whitespace, control characters, '?', '#' or '\\'"
    if any(segment in (".", "..") for segment in model.split("/")):
        return "has a '.' or '..' path segment"
    return None
