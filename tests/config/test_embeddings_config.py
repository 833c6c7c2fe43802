"""Embeddings routes in the config: ``kind: embeddings``, every target's ``dimensions``, one size per route."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_config
from gateway.config.models_section import EmbeddingBounds
from gateway.config.prices_section import Price

PROVIDERS = """
providers:
  oa: {type: openai, base_url: "http://127.0.0.1:9", api_key: k}
  gem: {type: gemini, base_url: "http://127.0.0.1:9", api_key: k}
  claude: {type: anthropic, api_key: k}
"""


def config(models: str) -> str:
    return PROVIDERS + "models:\n" + models


def mistake(models: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(config(models), {})
    return str(caught.value)


def test_an_embeddings_route_parses_with_the_provider_bounds_by_default() -> None:
    parsed = parse_config(config("""
  vectors:
    kind: embeddings
    retries: 2
    targets:
      - {provider: oa, model: text-embedding-3-small, dimensions: 1536, price: {input_per_mtok: 0.02}}
      - {provider: gem, model: gemini-embedding-001, dimensions: 1536}
  chat: {targets: [{provider: oa, model: gpt-x}]}
"""), {})
    route = parsed.models["vectors"]
    assert route.kind == "embeddings" and route.retries == 2
    assert route.embeddings == EmbeddingBounds(max_inputs=2048, max_input_tokens=8192, max_total_tokens=300_000)
    assert [t.dimensions for t in route.targets] == [1536, 1536]
    assert route.targets[0].price == Price(input_per_mtok=0.02, output_per_mtok=0.0)
    assert parsed.models["chat"].kind == "chat" and parsed.models["chat"].embeddings is None


def test_targets_of_different_sizes_are_refused() -> None:
    message = mistake("""
  vectors:
    kind: embeddings
    targets:
      - {provider: oa, model: text-embedding-3-small, dimensions: 1536}
      - {provider: gem, model: gemini-embedding-001, dimensions: 768}
""")
    assert message.startswith("models.vectors.targets[1].dimensions: is 768 but targets[0]")
    assert "oa:text-embedding-3-small" in message and "1536" in message


@pytest.mark.parametrize(("models", "expected"), [
    ("  v: {kind: embeddings, targets: [{provider: oa, model: e}]}", "models.v.targets[0].dimensions: is required"),
    ("  v: {kind: embeddings, targets: [{provider: oa, model: e, dimensions: 0}]}", "must be in [1, 65536]"),
    ("  v: {kind: embeddings, targets: [{provider: claude, model: e, dimensions: 8}]}", "has no embeddings API"),
    ("  v: {kind: embeddings, targets: [{provider: oa, model: e, dimensions: 8}], tools: [x]}",
     "models.v.tools: unknown key"),
    ("  v: {kind: embeddings, targets: [{provider: oa, model: e, dimensions: 8}], max_inputs: 0}",
     "models.v.max_inputs: must be > 0"),
    ("  v: {kind: embeddings, targets: []}", "needs at least one target"),
    ("  v: {kind: vectors, targets: [{provider: oa, model: e}]}", "must be 'chat' or 'embeddings'"),
    ("  v: {targets: [{provider: oa, model: e, dimensions: 8}]}",
     "models.v.targets[0].dimensions: is declared by the targets of embeddings routes: add kind: embeddings"),
    ("  v: {targets: [{provider: oa, model: e}], max_inputs: 5}", "models.v.max_inputs: is a key of embeddings routes"),
    ("  v: {kind: embeddings, targets: [{provider: oa, model: e, dimensions: 8, price: {output_per_mtok: 1}}]}",
     "input_per_mtok: is required"),
    ("  v: {kind: embeddings, targets: [{provider: oa, model: e, dimensions: 8}]}\n"
     "  c: {targets: [{provider: oa, model: g}], context: {compress_with: v}}", "is an embeddings route"),
])
def test_mistakes_name_their_key(models: str, expected: str) -> None:
    assert expected in mistake(models)


def test_allow_lists_may_name_embeddings_routes() -> None:
    parsed = parse_config(config("  v: {kind: embeddings, targets: [{provider: oa, model: e, dimensions: 8}]}\n")
                          + "auth:\n  keys:\n    - {key: k1, tenant: t, models: [v]}\n", {})
    assert list(parsed.auth.keys[0].models or []) == ["v"]


def test_the_config_and_the_registry_agree_on_embeddings_providers() -> None:
    from gateway.config.embeddings_section import EMBEDDING_PROVIDER_TYPES
    from gateway.providers.registry import EMBEDDERS

    assert set(EMBEDDERS) == set(EMBEDDING_PROVIDER_TYPES)
