"""Caller input never shapes an upstream URL: quoting, refused names, ``direct: false``, bounded labels."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.canonical import ModelRequest
from gateway.config import ConfigError, parse_config
from gateway.config.model import ProviderConfig
from gateway.config.model_names import model_problem
from gateway.errors import GatewayError
from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.gemini import GeminiAdapter
from gateway.providers.openai import OpenAIAdapter
from gateway.providers.upstreams import upstream_pool
from gateway.routing.health import TargetHealth
from gateway.routing.router import Router
from gateway.routing.routes import RouteTable

BASE = "https://upstream.example"
GEMINI = ProviderConfig(name="g", type="gemini", base_url=BASE, api_key="k")
AZURE = ProviderConfig(name="az", type="openai", base_url=BASE, api_key="k", api_version="2024-10-21")
REQUEST = ModelRequest(messages=[{"role": "user", "content": "hi"}])

UNSAFE = ["../../../v1/files?", "..", "x/../y", "./x", "a b", "x#frag", "x?alt=json", "tab\there", "nl\nx",
          "nul\x00", "del\x7f", "c1\x85", "nbsp\u00a0x", "back\\..\\slash", ""]


@pytest.mark.parametrize("model", UNSAFE)
def test_unsafe_model_names_are_refused(model: str) -> None:
    assert model_problem(model) is not None


@pytest.mark.parametrize("model", ["gemini-2.5-pro", "models/gemini-2.5-pro", "tunedModels/my-model-1",
                                   "Qwen/Qwen3-8B", "llama3.1:8b", "ünïcode", "a%2F..%2Fb", "x..y", "..x"])
def test_ordinary_model_names_pass(model: str) -> None:
    assert model_problem(model) is None


def _url(adapter: Any, provider: ProviderConfig, model: str, stream: bool = False) -> str:
    return adapter.build_request(REQUEST, provider, model, stream).url


def test_gemini_urls_are_built_from_quoted_segments() -> None:
    gemini = GeminiAdapter()
    assert _url(gemini, GEMINI, "gemini-2.5-pro") == f"{BASE}/v1beta/models/gemini-2.5-pro:generateContent"
    assert _url(gemini, GEMINI, "models/gemini-2.5-pro", True) == \
        f"{BASE}/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    assert _url(gemini, GEMINI, "tunedModels/mine") == f"{BASE}/v1beta/tunedModels/mine:generateContent"
    # Every other character that means something in a URL is one quoted segment.
    assert _url(gemini, GEMINI, "a/b:c?d#e f%2e") == \
        f"{BASE}/v1beta/models/a%2Fb%3Ac%3Fd%23e%20f%252e:generateContent"
    assert _url(gemini, GEMINI, "ünï") == f"{BASE}/v1beta/models/%C3%BCn%C3%AF:generateContent"


def test_azure_deployment_and_api_version_are_quoted() -> None:
    openai = OpenAIAdapter()
    assert _url(openai, AZURE, "dep-1") == f"{BASE}/openai/deployments/dep-1/chat/completions?api-version=2024-10-21"
    assert _url(openai, AZURE, "../admin?x=1") == \
        f"{BASE}/openai/deployments/..%2Fadmin%3Fx%3D1/chat/completions?api-version=2024-10-21"
    odd = ProviderConfig(name="az", type="openai", base_url=BASE, api_version="v&x=1#f")
    assert _url(openai, odd, "d").endswith("?api-version=v%26x%3D1%23f")


def test_model_free_urls_are_unchanged() -> None:
    plain = ProviderConfig(name="o", type="openai", base_url=BASE)
    assert _url(OpenAIAdapter(), plain, "../x") == f"{BASE}/chat/completions"
    claude = ProviderConfig(name="c", type="anthropic", base_url=f"{BASE}/v1")
    assert _url(AnthropicAdapter(), claude, "m") == f"{BASE}/v1/messages"


CONFIG = """
providers:
  gem: {type: gemini, base_url: "http://127.0.0.1:9", api_key: k}
  locked: {type: openai, base_url: "http://127.0.0.1:9", direct: false}
models:
  pro: {targets: [{provider: gem, model: gemini-2.5-pro}]}
"""


def _table(text: str = CONFIG) -> RouteTable:
    config = parse_config(text)
    router = Router(config.providers, config.routing, upstream_pool(config.providers), TargetHealth(3, 30))
    return RouteTable(config, router)


def test_configured_target_with_an_unsafe_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(CONFIG.replace("model: gemini-2.5-pro", "model: '../../v1/files'"))
    assert caught.value.path == "models.pro.targets[0].model"
    with pytest.raises(ConfigError, match="whitespace"):
        parse_config(CONFIG.replace("model: gemini-2.5-pro", "model: 'gemini 2.5'"))


def test_direct_route_with_an_unsafe_model_is_a_400_naming_model() -> None:
    table = _table()
    with pytest.raises(GatewayError) as caught:
        table.lookup("gem/../../../v1/files?")
    assert (caught.value.status, caught.value.param) == (400, "model")
    long = "gem/" + "x" * 5000 + "#"
    with pytest.raises(GatewayError) as caught:
        table.lookup(long)
    assert len(caught.value.message) < 300  # the caller's 5000 characters are not echoed whole


def test_direct_false_switches_direct_routes_off() -> None:
    table = _table()
    assert table.lookup("locked/gpt-4o") is None
    assert table.lookup("locked/../x") is None  # off means off: not even a 400 that confirms the provider
    assert table.lookup("gem/gemini-2.5-flash") is not None
    assert parse_config(CONFIG).providers["gem"].direct is True


def test_metric_labels_are_bounded() -> None:
    table = _table()
    configured = table.lookup("pro")
    assert configured is not None
    assert (configured.metric_label, configured.targets[0].metric_label) == ("pro", "gem:gemini-2.5-pro")
    direct = table.lookup("gem/made-up-1")
    assert direct is not None
    assert (direct.metric_label, direct.targets[0].metric_label) == ("gem/*", "gem:*")
    # The caller-facing label (attempts, error messages) still names the model.
    assert direct.targets[0].label == "gem:made-up-1"
