"""Which targets take ``reasoning_effort``: a per-target capability kept as data, not as code paths.

Claude Code always asks for adaptive thinking with an effort, which the Messages surface says as
``reasoning_effort``; an OpenAI model that does not reason answers 400 to the field. So each target
knows whether it takes it, from three sources, the most specific winning:

1. what the target said (per process): a 400 whose message names ``reasoning_effort`` (the Responses
   API's: ``reasoning.effort``) while the request carried it means the target refuses it. The walk
   sends the same request again at once without the field (once per call), and every later request
   to that target leaves it out.
2. the target's ``reasoning: true|false`` in the config (``models.NAME.targets[]``);
3. the model family, for ``openai`` and ``openai_responses`` providers only: o-series, ``gpt-5*``
   (not ``gpt-5*-chat``) and ``gpt-oss`` reason; ``gpt-4*`` (``gpt-4o``, ``gpt-4.1``), ``chatgpt-4o``
   and ``gpt-3.5`` do not (``providers.base.reasoning_model``). Any other name (DeepSeek, vLLM,
   Azure deployment names) gets the field, as before, and is learned from its answer. Other provider
   types translate the effort themselves (Anthropic and Gemini thinking), so only ``reasoning: false``
   changes what they get.

Without the field a model simply does not think: the answer is the same request, minus a hint.
"""

from __future__ import annotations

import dataclasses

from gateway.canonical import ModelRequest
from gateway.providers.base import reasoning_model
from gateway.upstream.errors import ErrorClass, ProviderError

#: how many refusing targets a process remembers; direct targets (``PROVIDER/MODEL``) are the caller's
#: to name, so the memory is bounded (the oldest is forgotten first, and then learned again)
MAX_LEARNED = 1024
_FIELD = "reasoning_effort"
#: how a refusal names the field: chat completions' name, and the Responses API's (``reasoning.effort``)
_NAMES = (_FIELD, "reasoning.effort")
#: the provider types that get the field by model family (source 3)
_BY_FAMILY = ("openai", "openai_responses")


def takes_reasoning(provider_type: str, model: str, configured: bool | None) -> bool:
    """Whether a target gets ``reasoning_effort``, before it has said anything (sources 2 and 3).

    A known reasoning family and an unknown name alike get it (an unknown one is learned from its 400).
    """
    if configured is not None:
        return configured
    return provider_type not in _BY_FAMILY or reasoning_model(model)


class ReasoningSupport:
    """The per-process memory of targets that refused ``reasoning_effort`` (source 1), keyed by provider and model."""

    __slots__ = ("_refused",)

    def __init__(self) -> None:
        self._refused: dict[tuple[str, str], None] = {}  # ordered: the oldest is forgotten first

    def shaped(self, takes: bool, provider: str, model: str, request: ModelRequest) -> ModelRequest:
        """``request`` as this target takes it: without ``reasoning_effort`` when it does not (one lookup otherwise)."""
        params = request.params
        if _FIELD not in params or (takes and (provider, model) not in self._refused):
            return request
        return dataclasses.replace(request, params={k: v for k, v in params.items() if k != _FIELD})

    def refused(self, provider: str, model: str, sent: ModelRequest, error: ProviderError) -> bool:
        """Did the target refuse the field it was sent? Then it is remembered, and the caller retries without it."""
        if error.error_class is not ErrorClass.BAD_REQUEST or _FIELD not in sent.params:
            return False
        said = error.message.lower()
        if not any(name in said for name in _NAMES):
            return False
        key = (provider, model)
        if key not in self._refused:
            if len(self._refused) >= MAX_LEARNED:
                del self._refused[next(iter(self._refused))]
            self._refused[key] = None
        return True
