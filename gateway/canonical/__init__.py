"""The canonical transcript every layer speaks, in four parts: ``types`` (messages, the model request and
response, stream deltas, the message helpers), ``arguments`` (tool-call arguments), ``accumulator``
(streamed tool-call fragments into whole calls) and ``tools`` (custom and hosted tools); and
``records``, what a request's model calls leave for its metering and access record (a loop's state or a
loopless call's record, read alike).

Every layer imports the names from here (``from gateway.canonical import Message``), so where a name
lives inside the package is this package's business. One exception: ``sealing`` (what a stateless
caller carries back, sealed) is imported by its module's name, so only who seals loads ``cryptography``.
"""

from gateway.canonical.accumulator import (
    ToolCallAccumulator,
    stable_tool_call_id,
)
from gateway.canonical.arguments import (
    MAX_JSON_DEPTH,
    JSONTooDeep,
    arguments_object,
    arguments_too_deep,
    history_arguments,
    history_arguments_text,
    load_json,
    normalize_arguments,
)
from gateway.canonical.records import CallRecord, WorkRecord
from gateway.canonical.tools import (
    CUSTOM_KEY,
    NAMESPACE_KEY,
    NAMESPACE_SEPARATOR,
    HostedToolCall,
    HostedTools,
    custom_arguments,
    custom_input,
    custom_names,
    custom_tool_def,
    namespaced,
)
from gateway.canonical.types import (
    ARTIFACT_MESSAGE_KEYS,
    MAX_TOKEN_COUNT,
    Answering,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    NativeRequest,
    ReasoningDelta,
    ReasoningSignature,
    RedactedReasoning,
    StreamDelta,
    TextDelta,
    ToolCall,
    ToolDef,
    Usage,
    mark_origin,
    normalize_finish_reason,
    reasoning_deltas,
    rewritten,
    strip_artifacts,
    text_of,
    token_count,
)

__all__ = [
    "ARTIFACT_MESSAGE_KEYS",
    "CUSTOM_KEY",
    "MAX_JSON_DEPTH",
    "MAX_TOKEN_COUNT",
    "NAMESPACE_KEY",
    "NAMESPACE_SEPARATOR",
    "Answering",
    "CallRecord",
    "FinishReason",
    "HostedToolCall",
    "HostedTools",
    "JSONTooDeep",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "NativeRequest",
    "ReasoningDelta",
    "ReasoningSignature",
    "RedactedReasoning",
    "StreamDelta",
    "TextDelta",
    "ToolCall",
    "ToolCallAccumulator",
    "ToolDef",
    "Usage",
    "WorkRecord",
    "arguments_object",
    "arguments_too_deep",
    "custom_arguments",
    "custom_input",
    "custom_names",
    "custom_tool_def",
    "history_arguments",
    "history_arguments_text",
    "load_json",
    "mark_origin",
    "namespaced",
    "normalize_arguments",
    "normalize_finish_reason",
    "reasoning_deltas",
    "rewritten",
    "stable_tool_call_id",
    "strip_artifacts",
    "text_of",
    "token_count",
]
