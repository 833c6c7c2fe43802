"""The refusal of a running tool's ``sampling/createMessage`` (no route, the key gone, its budget spent, every
target failed): raised by the sampling handler, answered to the MCP server as an error with this message."""

from __future__ import annotations


class SamplingRefused(Exception):
    """Why the gateway does not answer a sampling request; its message is safe to send to the server."""
