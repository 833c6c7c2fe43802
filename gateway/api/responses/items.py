"""Responses input items -> the canonical (chat-shaped) transcript, and back to the ids they carry.

Clients that resend the whole conversation (``store: false``, the Agents SDK) send back every
output item the gateway emitted, so each maps onto the transcript it came from:

* ``message`` (user/system/developer) -> a message; ``input_text``/``input_image`` parts become chat parts;
* assistant ``message``, ``reasoning``, ``function_call``, ``mcp_call``, ``mcp_approval_request``
  -> parts of one assistant turn (text, reasoning, tool calls), a new turn starting when text
  follows tool calls or when the previous turn's calls got their answers; a reasoning item's
  ``encrypted_content`` is kept with its turn, unopened (``Converted.sealed``: the provider
  artifacts the gateway sealed into it, ``responses/reasoning.py``);
* ``mcp_call`` -> a tool call of that turn *and* its result (the server exchange it records);
* ``function_call_output`` -> a tool message; ``mcp_approval_response`` -> the decision on its request;
* ``function_call`` of a ``namespace`` -> the call of the name the model sees for it, and a
  ``custom_tool_call`` the call of its custom tool (``{"input": ...}``, ``type: "custom"``)
  (``responses/tools.py``: ``CallerTools``); ``custom_tool_call_output`` -> a tool message;
* a hosted tool's items (``web_search_call``, ``local_shell_call`` and its output, ...) -> kept on their
  assistant turn, verbatim for an OpenAI Responses target, the text they carry as a note opening the
  turn's content for every other target (``responses/hosted_items.py``).

Answers at the very end (``function_call_output``/``mcp_approval_response`` after the last
assistant item) may resume a paused loop: they are also returned as way-B decisions.
Item ids encode the tool call id (``mcp_<call>``, ``mcpr_<call>``), so nothing else is needed
to map them back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.api.chat.request import type_name
from gateway.api.responses.hosted_items import hosted_artifact
from gateway.api.responses.item_fields import content_parts, output_text, string_field
from gateway.api.responses.tools import CallerTools
from gateway.canonical import MAX_JSON_DEPTH, Message, arguments_too_deep, custom_arguments
from gateway.errors import bad_request, quoted
from gateway.loop.decisions import declined

MCP_CALL_PREFIX = "mcp_"
APPROVAL_PREFIX = "mcpr_"
_ASSISTANT_SIDE = frozenset({"reasoning", "function_call", "custom_tool_call", "mcp_call", "mcp_approval_request"})
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
_COMPACTION = frozenset({"compaction", "compaction_summary", "compaction_trigger"})
# A hosted tool's calls and outputs: kept on their turn for the target that takes them (see the module docstring).
HOSTED_ITEM_TYPES = frozenset({"web_search_call", "file_search_call", "image_generation_call", "code_interpreter_call",
                               "computer_call", "computer_call_output", "local_shell_call", "local_shell_call_output",
                               "shell_call", "shell_call_output", "apply_patch_call", "apply_patch_call_output",
                               "mcp_list_tools", "tool_search_call", "tool_search_output"})
_NO_NAMES = CallerTools()
_NO_SEALED: list[tuple[Message, list[str]]] = []


def call_id_of(item_id: str, prefix: str) -> str:
    return item_id[len(prefix):] if item_id.startswith(prefix) else item_id


@dataclass(slots=True)
class Converted:
    """The transcript an item list stands for.

    ``messages`` is the stateless reading (trailing answers included as tool messages where they
    can be; an approval cannot be executed without the paused loop, so it is left out);
    ``decisions`` are the trailing answers as way-B decisions; ``approved`` tells whether one of
    them approves a call; ``orphan`` names the first answer whose call is not in the items (it can
    only answer a call the gateway holds: a paused ``previous_response_id``); ``sealed``: the turns
    whose reasoning items carried ``encrypted_content``, opened (or dropped) by whoever runs them.
    """

    messages: list[Message]
    decisions: list[dict[str, Any]] = field(default_factory=list)
    approved: bool = False
    orphan: str | None = None
    #: the assistant turns that came with reasoning items' ``encrypted_content``, and those tokens, unopened
    #: (``responses/reasoning.py``: ``restore``)
    sealed: list[tuple[Message, list[str]]] = field(default_factory=list)


class _Turn:
    """An assistant turn being assembled from consecutive items."""

    __slots__ = ("answered", "calls", "hosted", "reasoning", "results", "sealed", "text")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.sealed: list[str] | None = None  # its reasoning items' encrypted_content
        self.calls: list[dict[str, Any]] = []
        self.results: dict[str, str] = {}
        self.hosted: list[dict[str, Any]] | None = None  # a hosted tool's items: made for the first
        self.answered = False  # a client answer arrived: the next assistant item opens a new turn

    def has(self, call_id: str) -> bool:
        return any(call["id"] == call_id for call in self.calls)

    def flush(self, out: list[Message]) -> Message | None:
        """The turn's message (appended to ``out`` with its calls' results), None when it has nothing to say (a
        sealed reasoning item alone then goes nowhere: it is not opened)."""
        if not (self.text or self.calls or self.reasoning or self.hosted):
            return None
        text = "".join(self.text)
        message: Message = {"role": "assistant", "content": text or None}
        if self.hosted:
            message["openai_hosted"], note = hosted_artifact(self.hosted)
            if note:
                message["content"] = f"{note}\n\n{text}" if text else note
        if self.calls:
            message["tool_calls"] = self.calls
        elif message["content"] is None:
            message["content"] = ""
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        out.append(message)
        out.extend({"role": "tool", "tool_call_id": c["id"], "content": self.results[c["id"]]}
                   for c in self.calls if c["id"] in self.results)
        return message

    def answer(self, call_id: str) -> bool:
        """Whether the answered call is one of this turn's (else the gateway must hold it)."""
        if not self.has(call_id):
            return False
        self.answered = True
        return True

    # -- the assistant side's items, each adding its part -----------------------------------------
    def add_text(self, item: dict[str, Any], param: str) -> None:
        """An assistant ``message``: its text."""
        content = content_parts(item.get("content"), param, "assistant")
        self.text.append(content if isinstance(content, str) else "".join(p["text"] for p in content))

    def add_reasoning(self, item: dict[str, Any], param: str) -> None:
        """A ``reasoning`` item: its summary's text, and its ``encrypted_content`` to open (any other value of it is
        not this gateway's: nothing to open)."""
        content = item.get("encrypted_content")
        if content.__class__ is str and content:
            if self.sealed is None:
                self.sealed = [content]
            else:
                self.sealed.append(content)
        summary = item.get("summary")
        if summary is not None and not isinstance(summary, list):
            raise bad_request(f"'{param}.summary' must be an array of summary_text parts, not "
                              f"{type_name(summary)}", f"{param}.summary")
        if summary:
            self.reasoning.extend(s.get("text", "") for s in summary if isinstance(s, dict)
                                  and isinstance(s.get("text"), str))

    def add_mcp_call(self, call_id: str, item: dict[str, Any], param: str) -> None:
        """An ``mcp_call``: a call of this turn (unless an approval request here named it) and its result."""
        if not self.has(call_id):
            self.calls.append(_call(call_id, item, param))
        self.results[call_id] = _mcp_result(item, param)


class _Reading:
    """The one pass over the items: the transcript so far, the assistant turn being assembled, and the
    answers since the last assistant item. Each item type has its translator; the pass keeps their order."""

    __slots__ = ("approved", "names", "orphan", "out", "sealed", "trailing", "turn")

    def __init__(self, names: CallerTools) -> None:
        self.names = names
        self.out: list[Message] = []
        self.turn = _Turn()
        self.trailing: list[dict[str, Any]] = []  # answers since the last assistant item
        self.approved = False
        self.orphan: str | None = None
        self.sealed = _NO_SEALED  # a list of its own once a turn has sealed items

    def flush(self) -> None:
        turn = self.turn
        message = turn.flush(self.out)
        if message is not None and turn.sealed is not None:
            if self.sealed is _NO_SEALED:
                self.sealed = []
            self.sealed.append((message, turn.sealed))

    def next_turn(self) -> _Turn:
        self.flush()
        self.turn = _Turn()
        return self.turn

    def message(self, item: dict[str, Any], param: str) -> None:
        """A user, system or developer ``message``: it ends the assistant turn."""
        role = item.get("role")
        if role not in ("user", "system", "developer"):
            raise bad_request(f"'{param}.role' must be user, assistant, system or developer, not "
                              f"{quoted(role)}", f"{param}.role")
        self.next_turn()
        self.trailing, self.approved = [], False
        self.out.append({"role": role, "content": content_parts(item.get("content"), param, role)})

    def expanded(self, message: Message) -> None:
        """An item the gateway stands a message for (a compaction item's summary): it ends the assistant turn."""
        self.next_turn()
        self.trailing, self.approved = [], False
        self.out.append(message)

    def assistant_side(self, kind: str, item: dict[str, Any], param: str) -> None:
        """An item of the assistant's turn, opening a new turn when text follows tool calls or when the
        turn's calls got their answers (the execution of a call approved in this turn is not new)."""
        self.trailing, self.approved = [], False
        turn = self.turn
        call_id = call_id_of(string_field(item, "id", param), MCP_CALL_PREFIX) if kind == "mcp_call" else None
        if call_id is not None and turn.has(call_id):
            pass  # the execution of a call approved earlier in this turn: only its result is new
        elif turn.answered or (kind in ("assistant_message", "reasoning") and turn.calls):
            turn = self.next_turn()
        if kind == "assistant_message":
            turn.add_text(item, param)
        elif kind == "reasoning":
            turn.add_reasoning(item, param)
        elif kind == "function_call":
            turn.calls.append(_call(string_field(item, "call_id", param), item, param, self._wire_name(item, param)))
        elif kind == "custom_tool_call":
            turn.calls.append(_custom_call(item, param, self._wire_name(item, param)))
        elif kind == "mcp_approval_request":
            turn.calls.append(_call(call_id_of(string_field(item, "id", param), APPROVAL_PREFIX), item, param))
        else:
            assert call_id is not None, "an mcp_call"
            turn.add_mcp_call(call_id, item, param)

    def hosted(self, item: dict[str, Any]) -> None:
        """A hosted tool's item: part of the assistant turn (a call after the turn's text or its answered calls opens a
        new one; an output stays with its call). Not an answer the gateway holds: the trailing answers stay."""
        turn = self.turn
        if (turn.answered or turn.text) and not item["type"].endswith("_output"):
            turn = self.next_turn()  # after the turn's text: the order the target is sent them back in
        if turn.hosted is None:
            turn.hosted = []
        turn.hosted.append(item)

    def _wire_name(self, item: dict[str, Any], param: str) -> str:
        """The name the model sees for the tool a call item names (with its ``namespace``, if any)."""
        name = string_field(item, "name", param)
        namespace = item.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise bad_request(f"'{param}.namespace' must be a string", f"{param}.namespace")
        return self.names.wire_name(namespace or None, name)

    def function_call_output(self, item: dict[str, Any], param: str) -> None:
        """A client tool's output (a function's or a custom tool's): its call's result in this turn, and a trailing
        answer."""
        call_id = string_field(item, "call_id", param)
        output = item.get("output")
        if isinstance(output, list):
            output = output_text(output, f"{param}.output")
        elif not isinstance(output, str):
            raise bad_request(f"'{param}.output' must be a string or an array of input_text parts, not "
                              f"{type_name(output)}", f"{param}.output")
        if self.turn.answer(call_id):
            self.turn.results[call_id] = output
        else:
            self.orphan = self.orphan or param
        self.trailing.append({"tool_call_id": call_id, "output": output})

    def mcp_approval_response(self, item: dict[str, Any], param: str) -> None:
        """A decision on an approval request: a denial is its call's result here; a trailing answer either way."""
        call_id = call_id_of(string_field(item, "approval_request_id", param), APPROVAL_PREFIX)
        approve = item.get("approve")
        if not isinstance(approve, bool):
            raise bad_request(f"'{param}.approve' must be a boolean", f"{param}.approve")
        reason = item.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise bad_request(f"'{param}.reason' must be a string", f"{param}.reason")
        if not self.turn.answer(call_id):
            self.orphan = self.orphan or param
        elif not approve:
            self.turn.results[call_id] = declined(reason)
        self.approved = self.approved or approve
        self.trailing.append({"tool_call_id": call_id, "approve": approve, "reason": reason})

    def converted(self) -> Converted:
        self.flush()
        return Converted(self.out, self.trailing, self.approved, self.orphan, self.sealed)


def to_messages(items: list[dict[str, Any]], expand: Callable[[dict[str, Any], str], Message] | None = None,
                names: CallerTools | None = None) -> Converted:
    """The transcript ``items`` stand for (see the module docstring); a 400 naming the first bad item.

    ``expand`` opens a compaction item into the message it stands for (``responses/compaction.py``);
    ``names``: the request's namespaced and custom tools (a call item of one is named as the model saw it).
    """
    if len(items) == 1:  # the common case (``input`` a string): what the pass below makes of it, directly
        item = items[0]
        content = item.get("content")
        if item["type"] == "message" and item.get("role") == "user" and isinstance(content, str):
            # positional: no default factory (``_NO_SEALED`` is shared: only read)
            return Converted([{"role": "user", "content": content}], [], False, None, _NO_SEALED)
    reading = _Reading(names or _NO_NAMES)
    for index, item in enumerate(items):
        param = f"input[{index}]"
        kind = item["type"]
        if kind == "message" and item.get("role") == "assistant":
            reading.assistant_side("assistant_message", item, param)
        elif kind in _ASSISTANT_SIDE:
            reading.assistant_side(kind, item, param)
        elif kind in _OUTPUTS:
            reading.function_call_output(item, param)
        elif kind == "mcp_approval_response":
            reading.mcp_approval_response(item, param)
        elif kind in _COMPACTION:
            reading.expanded(_compaction(item, param, expand))
        elif kind in HOSTED_ITEM_TYPES:
            reading.hosted(item)
        else:
            reading.message(item, param)
    return reading.converted()


def _compaction(item: dict[str, Any], param: str, expand: Callable[[dict[str, Any], str], Message] | None
                ) -> Message:
    if item["type"] == "compaction_trigger":  # read before the items, as the last one (responses/compaction_turn.py)
        raise bad_request("a compaction_trigger item can only be the last item of 'input'", f"{param}.type")
    if expand is None:
        raise bad_request(f"a {item['type']} item is not accepted here", f"{param}.type")
    return expand(item, param)


def _custom_call(item: dict[str, Any], param: str, name: str) -> dict[str, Any]:
    """A ``custom_tool_call`` as the canonical call of its custom tool."""
    text = item.get("input")
    if not isinstance(text, str):
        raise bad_request(f"'{param}.input' must be a string, not {type_name(text)}", f"{param}.input")
    return {"id": string_field(item, "call_id", param), "type": "custom",
            "function": {"name": name, "arguments": custom_arguments(text)}}


def _call(call_id: str, item: dict[str, Any], param: str, name: str | None = None) -> dict[str, Any]:
    name = string_field(item, "name", param) if name is None else name
    arguments = item.get("arguments", "{}")
    if not isinstance(arguments, str):
        raise bad_request(f"'{param}.arguments' must be a JSON string", f"{param}.arguments")
    if arguments_too_deep(arguments):
        raise bad_request(f"'{param}.arguments' is nested deeper than {MAX_JSON_DEPTH} levels", f"{param}.arguments")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments or "{}"}}


def _mcp_result(item: dict[str, Any], param: str) -> str:
    output = item.get("output")
    if isinstance(output, str):
        return output
    error = item.get("error")
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        message = error.get("message") or error.get("content")
        return message if isinstance(message, str) else "The tool call failed."
    return ""
