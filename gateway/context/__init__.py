"""Context management for the tool loop: token estimates, windows, tool-result caps and the guard.

Everything here is offline (tiktoken BPE files ship in ``gateway/assets``) and cheap per call
(per-message token counts are cached), so the guard can run before every model call.
"""

from gateway.context.guard import ContextGuard, GuardAction, GuardOutcome, Summarize, split_transcript
from gateway.context.summary import SUMMARY_PREFIX, is_summary, summary_message, summary_prompt
from gateway.context.tokens import (
    TokenEstimator,
    count_message,
    count_messages,
    count_text,
    count_tools,
    encoding_for_model,
    encoding_name_for_model,
    get_encoding,
    preload,
)
from gateway.context.truncate import cap_tool_messages, cap_tool_result
from gateway.context.windows import DEFAULT_WINDOW, context_window, effective_window, known_window

__all__ = [
    "DEFAULT_WINDOW", "SUMMARY_PREFIX", "ContextGuard", "GuardAction", "GuardOutcome", "Summarize",
    "TokenEstimator", "cap_tool_messages", "cap_tool_result", "context_window", "count_message",
    "count_messages", "count_text", "count_tools", "effective_window", "encoding_for_model",
    "encoding_name_for_model", "get_encoding", "is_summary", "known_window", "preload", "split_transcript",
    "summary_message", "summary_prompt",
]
