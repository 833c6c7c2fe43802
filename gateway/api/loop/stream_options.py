"""The ``gateway.stream_rescue`` request option, read the same way on every surface."""

from __future__ import annotations

from typing import Any

from gateway.errors import bad_request

_VALUES = {"continue": True, "off": False, True: True, False: False}


def stream_rescue_option(options: dict[str, Any]) -> bool | None:
    """``continue`` / ``off`` (or true / false) override the route's ``stream_rescue``; absent: None (the route's)."""
    value = options.get("stream_rescue")
    if value is None:
        return None
    if isinstance(value, (str, bool)) and value in _VALUES:
        return _VALUES[value]
    raise bad_request("'gateway.stream_rescue' must be \"continue\" or \"off\"", "gateway.stream_rescue")
