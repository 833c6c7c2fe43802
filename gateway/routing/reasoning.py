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
#: how a refusal names the field: chat completions' name, the Responses API's (``reasoning.effort``), and the
#: Responses API's word for the encrypted reasoning asked with it (a model that does not reason refuses it)
_NAMES = (_FIELD, "reasoning.effort", "encrypted content is not supported")
#: what the Responses API says when it cannot read the encrypted reasoning sent back (``invalid_encrypted_content``)
_UNREADABLE = ("could not be verified", "could not be decrypted", "invalid_encrypted_content")
_ITEMS = "openai_output"  # the message key of that reasoning (gateway/canonical/types.py)
#: the provider types that get the field by model family (source 3)
_BY_FAMILY = ("openai", "openai_responses")


def takes_reasoning(provider_type: str, model: str, configured: bool | None) -> bool:
    """Whether a target gets ``reasoning_effort``, before it has said anything (sources 2 and 3).

    A known reasoning family and an unknown name alike get it (an unknown one is learned from its 400).
    """
    if configured is not None:
        return configured
    return provider_type not in _BY_FAMILY or reasoning_model(model)


def _learn(memory: dict[tuple[str, str], None], key: tuple[str, str]) -> None:
    if key not in memory:
        if len(memory) >= MAX_LEARNED:
            del memory[next(iter(memory))]
        memory[key] = None


def _without_items(request: ModelRequest) -> ModelRequest:
    messages = [{k: v for k, v in m.items() if k != _ITEMS} if _ITEMS in m else m for m in request.messages]
    return dataclasses.replace(request, messages=messages)


class ReasoningSupport:
    """The per-process memory of targets that refused ``reasoning_effort`` (source 1), keyed by provider and model.

    And of the targets that could not read the encrypted reasoning sent back to them (a Responses
    upstream answering ``invalid_encrypted_content``: its key now belongs to another account, the
    items are too old): they are sent again at once, and from then on, without those items
    (``openai_output``); the answer loses the earlier reasoning, not the request.
    """

    __slots__ = ("_refused", "_unreadable")

    def __init__(self) -> None:
        self._refused: dict[tuple[str, str], None] = {}  # ordered: the oldest is forgotten first
        self._unreadable: dict[tuple[str, str], None] = {}

    def shaped(self, takes: bool, provider: str, model: str, request: ModelRequest) -> ModelRequest:
        """``request`` as this target takes it: without ``reasoning_effort`` when it does not (one lookup otherwise)."""
        if self._unreadable and (provider, model) in self._unreadable:
            request = _without_items(request)
        params = request.params
        if _FIELD not in params or (takes and (provider, model) not in self._refused):
            return request
        return dataclasses.replace(request, params={k: v for k, v in params.items() if k != _FIELD})

    def refused(self, provider: str, model: str, sent: ModelRequest, error: ProviderError) -> bool:
        """Did the target refuse the field (or the encrypted reasoning) it was sent? Then it is remembered, and
        the caller retries without it."""
        if error.error_class is not ErrorClass.BAD_REQUEST:
            return False
        said = error.message.lower()
        if _FIELD in sent.params and any(name in said for name in _NAMES):
            _learn(self._refused, (provider, model))
            return True
        if any(marker in said for marker in _UNREADABLE) and any(_ITEMS in m for m in sent.messages):
            _learn(self._unreadable, (provider, model))
            return True
        return False
