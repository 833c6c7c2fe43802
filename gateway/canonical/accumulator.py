"""Streamed tool-call fragments -> whole calls, with ids that stay the same when a turn is parsed again."""

from __future__ import annotations

import hashlib
from typing import Any

from gateway.canonical.arguments import normalize_arguments
from gateway.canonical.tools import custom_arguments
from gateway.canonical.types import ToolCall


def stable_tool_call_id(seed: str, index: int) -> str:
    """A deterministic id for a provider that gave none (Gemini without ids, some compat servers).

    Deterministic so that re-parsing the same response yields the same id; salted with the
    response id or content so two responses do not collide.
    """
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=12).hexdigest()
    return f"call_{digest}"


_identity = id


class ToolCallAccumulator:
    """Reassembles streamed tool-call fragments into whole calls.

    Fragments are keyed by index; where a provider omits or repeats the index, the id decides
    (a fragment carrying a new id opens a new call). The first id and name win; argument
    fragments concatenate in arrival order (kept as pieces and joined when read: adding each to the
    call's string would copy all of it per fragment, quadratic in long arguments). A fragment of a
    custom (freeform) tool's call (``custom``) makes the call ``type: "custom"``: its fragments are
    the input text, wrapped as ``{"input": text}`` when the call is whole.
    """

    __slots__ = ("_by_id", "_by_index", "_calls", "_last", "_pieces")

    def __init__(self) -> None:
        self._calls: list[ToolCall] = []
        self._pieces: dict[int, list[str]] = {}  # id() of a call in ``_calls`` -> its argument fragments
        self._by_index: dict[int, ToolCall] = {}
        self._by_id: dict[str, ToolCall] = {}
        self._last: ToolCall | None = None

    def add(
        self,
        index: int | None,
        id: str | None = None,
        name: str | None = None,
        arguments: Any = None,
        extra_content: dict[str, Any] | None = None,
        custom: bool = False,
    ) -> None:
        call: ToolCall | None = None
        if id and id in self._by_id:
            call = self._by_id[id]
        elif index is not None and index in self._by_index:
            existing = self._by_index[index]
            # Same index but a different, new id: a provider reusing index 0 for every call.
            call = None if id and existing["id"] and existing["id"] != id else existing
        elif index is None and not id:
            call = self._last
        if call is None:
            call = {"id": id or "", "type": "function", "function": {"name": name or "", "arguments": ""}}
            self._calls.append(call)
            if index is not None:
                self._by_index[index] = call
            if id:
                self._by_id[id] = call
        else:
            if id and not call["id"]:
                call["id"] = id
                self._by_id[id] = call
            if name and not call["function"]["name"]:
                call["function"]["name"] = name
        if arguments:
            # Ollama and some compat servers send arguments as an object, not a JSON string.
            piece = arguments if isinstance(arguments, str) else normalize_arguments(arguments)
            pieces = self._pieces.get(_identity(call))  # (``id`` is a parameter here)
            if pieces is None:
                pieces = self._pieces[_identity(call)] = [call["function"]["arguments"]]
            pieces.append(piece)
        if extra_content:
            call.setdefault("extra_content", {}).update(extra_content)
        if custom:
            call["type"] = "custom"
        self._last = call

    def __bool__(self) -> bool:
        return bool(self._calls)

    def _settle(self) -> None:
        for call in self._calls:
            pieces = self._pieces.get(id(call))
            if pieces is not None and len(pieces) > 1:
                pieces[:] = ["".join(pieces)]
                call["function"]["arguments"] = pieces[0]

    def arguments_so_far(self) -> str:
        """Every call's name and argument text so far (what a cut stream produced of them)."""
        self._settle()
        return "".join(call["function"]["name"] + call["function"]["arguments"] for call in self._calls)

    def result(self, id_seed: str) -> list[ToolCall]:
        """The finished calls, each with an id and object-JSON arguments."""
        self._settle()
        for position, call in enumerate(self._calls):
            if not call["id"]:
                call["id"] = stable_tool_call_id(id_seed, position)
            arguments = call["function"]["arguments"]
            call["function"]["arguments"] = custom_arguments(arguments) if call["type"] == "custom" else \
                normalize_arguments(arguments)
        return self._calls
