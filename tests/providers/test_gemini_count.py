"""Gemini's ``:countTokens``: the ``generateContent`` body the adapter would send, counted upstream; its answer read
strictly (anything but a count is the upstream's fault, so the gateway estimates instead)."""

from __future__ import annotations

import orjson
import pytest

from gateway.canonical import ModelRequest
from gateway.config.model import ProviderConfig
from gateway.providers.base import ErrorClass, ProviderError
from gateway.providers.gemini import GeminiAdapter
from tests.fakes.gemini_rules import gemini_request_problems

PROVIDER = ProviderConfig(name="google", type="gemini", base_url="https://generativelanguage.googleapis.com",
                          api_key="test-key", headers={"x-team": "blue"})
ADAPTER = GeminiAdapter()
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
REQUEST = ModelRequest(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Paris?"}],
                       tools=[TOOL], tool_choice="auto", params={"temperature": 0.2, "max_tokens": 99})


def test_the_count_wraps_the_generate_body_without_its_generation_config() -> None:
    counted = ADAPTER.build_count_tokens(REQUEST, PROVIDER, "gemini-3-pro-preview")
    generated = orjson.loads(ADAPTER.build_request(REQUEST, PROVIDER, "gemini-3-pro-preview", False).body)
    assert counted.url == ("https://generativelanguage.googleapis.com/v1beta/models/gemini-3-pro-preview"
                           ":countTokens")
    assert counted.headers["x-goog-api-key"] == "test-key" and counted.headers["x-team"] == "blue"
    body = orjson.loads(counted.body)
    inner = body["generateContentRequest"]
    assert inner == {"model": "models/gemini-3-pro-preview",
                     **{k: v for k, v in generated.items() if k != "generationConfig"}}
    assert "generationConfig" in generated and inner["tools"] == generated["tools"]
    assert gemini_request_problems(generated, "gemini-3-pro-preview") == []


def test_a_tuned_model_and_a_caller_named_model_stay_one_path_segment() -> None:
    tuned = ADAPTER.build_count_tokens(REQUEST, PROVIDER, "tunedModels/my-model")
    assert tuned.url.endswith("/v1beta/tunedModels/my-model:countTokens")
    assert orjson.loads(tuned.body)["generateContentRequest"]["model"] == "tunedModels/my-model"
    odd = ADAPTER.build_count_tokens(REQUEST, PROVIDER, "a/b?c")
    assert odd.url.endswith("/v1beta/models/a%2Fb%3Fc:countTokens")


@pytest.mark.parametrize("body", [b"{}", b'{"totalTokens": "12"}', b'{"totalTokens": -1}', b'{"totalTokens": 1e99}',
                                  b"[]", b'{"totalTokens": true}'])
def test_anything_but_a_count_is_an_invalid_response(body: bytes) -> None:
    with pytest.raises(ProviderError) as caught:
        ADAPTER.parse_count_tokens(body)
    assert caught.value.error_class is ErrorClass.INVALID_RESPONSE


def test_a_count_is_read() -> None:
    assert ADAPTER.parse_count_tokens(b'{"totalTokens": 31, "promptTokensDetails": []}') == 31
    with pytest.raises(ProviderError):
        ADAPTER.parse_count_tokens(b"not json")
