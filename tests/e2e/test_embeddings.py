"""``POST /v1/embeddings`` end to end: the official ``openai`` SDK and LangChain's ``OpenAIEmbeddings``
against a real gateway, fake OpenAI-compatible and Gemini upstreams over HTTP.

Vectors are a pure function of model and input in the fakes (tests/fakes/embeddings.py), so each
test checks every vector, in order, against the one its input must give.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from gateway.context.encodings import CL100K, get_encoding
from tests.e2e.conftest import KEY, ROOT, Gateway, gateway_config
from tests.fakes.embeddings import vector_of
from tests.fakes.tool_server import ToolServer
from tests.fakes.upstream import FakeUpstream, Reply

ADMIN = "admin-secret"
RPM_KEY, TPM_KEY, BUDGET_KEY, NARROW_KEY = "emb-rpm", "emb-tpm", "emb-budget", "emb-narrow"
EXTRA_KEYS = f"""
    - {{key: {RPM_KEY}, tenant: emb-rpm, rpm: 1}}
    - {{key: {TPM_KEY}, tenant: emb-tpm, tpm: 20}}
    - {{key: {BUDGET_KEY}, tenant: emb-budget, budget: {{limit: 10, unit: tokens, period: day}}}}
    - {{key: {NARROW_KEY}, tenant: emb-narrow, models: [plain]}}
  admin_keys:
    - {{key: {ADMIN}, name: ops}}
"""
# embed: two OpenAI-compatible targets of one size, priced; embed_gemini: Gemini; the bounded route is small.
EMBED_MODELS = """
  embed:
    kind: embeddings
    retries: 0
    targets:
      - {provider: primary, model: emb-small, dimensions: 8, price: {input_per_mtok: 20}}
      - {provider: secondary, model: emb-small, dimensions: 8, price: {input_per_mtok: 20}}
  embed_wrong_size:
    kind: embeddings
    targets:
      - {provider: primary, model: emb-d4, dimensions: 8}
      - {provider: secondary, model: emb-small, dimensions: 8}
  embed_gemini:
    kind: embeddings
    targets: [{provider: gemini, model: gemini-embedding-001, dimensions: 8}]
  embed_bounded:
    kind: embeddings
    max_inputs: 3
    max_input_tokens: 6
    max_total_tokens: 10
    targets: [{provider: primary, model: emb-small, dimensions: 8}]
"""
TEXTS = ["the first document", "a second, longer document about gateways", "third"]


@pytest.fixture(scope="module")
def gateway(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> Iterator[Gateway]:
    config = gateway_config(fakes, tool_server=tool_server.url, extra_models=EMBED_MODELS)
    anchor = "    - {key: cron-key, tenant: jobs, headless: true}\n"
    assert anchor in config
    gw = Gateway(config.replace(anchor, anchor + EXTRA_KEYS.lstrip("\n"))).start()
    yield gw
    gw.stop()


def floats(raw: str) -> list[float]:
    data = base64.b64decode(raw)
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def test_float_vectors_come_back_in_input_order(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    answer = gateway.client().embeddings.create(model="embed", input=TEXTS, encoding_format="float")
    assert [item.index for item in answer.data] == [0, 1, 2]  # the fake answers in reverse order
    assert [item.embedding for item in answer.data] == [vector_of("emb-small", text, 8) for text in TEXTS]
    assert answer.model == "embed"
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > 0
    sent = fakes["primary"].requests[-1]
    assert sent.path == "/embeddings" and sent.body["input"] == TEXTS and "encoding_format" not in sent.body
    assert sent.headers["authorization"] == "Bearer upstream-primary"


def test_base64_asked_explicitly_is_base64_float32(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    answer = gateway.client().embeddings.create(model="embed", input=TEXTS, encoding_format="base64")
    assert all(isinstance(item.embedding, str) for item in answer.data)  # the SDK leaves an explicit base64 alone
    assert [floats(item.embedding) for item in answer.data] == [vector_of("emb-small", t, 8) for t in TEXTS]
    assert fakes["primary"].requests[-1].body["encoding_format"] == "base64"


def test_sdk_default_base64_is_decoded_by_the_sdk(gateway: Gateway) -> None:
    answer = gateway.client().embeddings.create(model="embed", input="just one")
    assert answer.data[0].embedding == vector_of("emb-small", "just one", 8)


def test_base64_from_floats_and_floats_from_base64(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """Gemini answers floats: a base64 caller gets them packed; a token array is read back the same."""
    answer = gateway.client().embeddings.create(model="embed_gemini", input=TEXTS, encoding_format="base64")
    assert [floats(item.embedding) for item in answer.data] == [vector_of("gemini-embedding-001", t, 8)
                                                                 for t in TEXTS]


def test_gemini_batches_split_at_the_provider_limit(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    texts = [f"doc {i}" for i in range(250)]
    answer = gateway.client().embeddings.create(model="embed_gemini", input=texts, encoding_format="float")
    assert [item.embedding for item in answer.data] == [vector_of("gemini-embedding-001", t, 8) for t in texts]
    batches = [r for r in fakes["gemini"].requests if r.path.endswith(":batchEmbedContents")]
    assert sorted(len(r.body["requests"]) for r in batches) == [50, 100, 100]
    assert sorted(item["content"]["parts"][0]["text"] for r in batches for item in r.body["requests"]) == sorted(texts)
    assert all(r.headers["x-goog-api-key"] == "upstream-gemini" for r in batches)
    fakes["gemini"].reset()
    gateway.client().embeddings.create(model="embed_gemini", input="alone", dimensions=8)
    [single] = fakes["gemini"].requests
    assert single.path == "/v1beta/models/gemini-embedding-001:embedContent"
    assert single.body["outputDimensionality"] == 8


def test_failover_to_a_target_of_the_same_size(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(status=500))
    response = gateway.post("/v1/embeddings", {"model": "embed", "input": TEXTS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert [item["embedding"] for item in body["data"]] == [vector_of("emb-small", t, 8) for t in TEXTS]
    assert body["gateway"]["answered_by"] == ["secondary:emb-small"]
    assert [a["error_class"] for a in body["gateway"]["attempts"]] == ["server_error", None]


def test_vectors_of_the_wrong_size_fail_over(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """The first target answers 4-dimensional vectors where 8 are declared: never returned, the next one answers."""
    response = gateway.post("/v1/embeddings", {"model": "embed_wrong_size", "input": TEXTS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["gateway"]["answered_by"] == ["secondary:emb-small"]
    assert body["gateway"]["attempts"][0]["error_class"] == "invalid_response"
    assert all(len(item["embedding"]) == 8 for item in body["data"])


def test_every_target_failing_is_an_openai_error(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    fakes["primary"].queue(Reply(status=500))
    fakes["secondary"].queue(Reply(fault="wrong_shape"))
    with pytest.raises(openai.APIStatusError) as caught:
        gateway.client().embeddings.create(model="embed", input=TEXTS)
    assert caught.value.status_code == 502
    assert "secondary:emb-small" in caught.value.message


def test_usage_and_cost_are_recorded(gateway: Gateway) -> None:
    before = _usage(gateway, "team-a")
    response = gateway.post("/v1/embeddings", {"model": "embed", "input": TEXTS})
    body = response.json()
    tokens = body["usage"]["prompt_tokens"]
    assert body["gateway"]["usage_cost"] == pytest.approx(tokens * 20 / 1_000_000, abs=1e-12)
    after = _usage(gateway, "team-a")
    assert after["requests"] == before["requests"] + 1
    assert after["prompt_tokens"] == before["prompt_tokens"] + tokens
    assert after["completion_tokens"] == before["completion_tokens"]
    assert after["cost_usd"] == pytest.approx(before["cost_usd"] + tokens * 20 / 1_000_000, abs=1e-12)
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert 'loopgate_requests_total{path="/v1/embeddings",model="embed",status="200"}' in metrics


def _usage(gateway: Gateway, tenant: str) -> dict[str, float]:
    response = httpx.get(f"{gateway.url}/admin/usage", params={"tenant": tenant},
                         headers={"authorization": f"Bearer {ADMIN}"})
    assert response.status_code == 200, response.text
    rows = response.json()["data"]
    fields = ("requests", "prompt_tokens", "completion_tokens", "cost_usd")
    return {field: sum(row[field] for row in rows) for field in fields}


def test_rpm_limits_embeddings(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    client = gateway.client(RPM_KEY)
    first = client.embeddings.with_raw_response.create(model="embed", input="once")
    assert first.headers["x-ratelimit-limit-requests"] == "1"
    with pytest.raises(openai.RateLimitError):
        client.embeddings.create(model="embed", input="twice")


def test_tpm_counts_the_input_tokens_before_sending(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """The key's tpm is 20: an input of about 40 tokens is refused before any upstream hears of it."""
    text = " ".join(f"word{i}" for i in range(40))
    with pytest.raises(openai.RateLimitError):
        gateway.client(TPM_KEY).embeddings.create(model="embed", input=text)
    assert fakes["primary"].requests == [] and fakes["secondary"].requests == []
    gateway.client(TPM_KEY).embeddings.create(model="embed", input="short")  # within the limit


def test_budget_refuses_once_spent(gateway: Gateway) -> None:
    client = gateway.client(BUDGET_KEY)
    client.embeddings.create(model="embed", input=TEXTS)  # crosses the 10-token budget: it finishes
    with pytest.raises(openai.RateLimitError) as caught:
        client.embeddings.create(model="embed", input="more")
    assert caught.value.code == "insufficient_quota"


def test_allow_lists_apply(gateway: Gateway) -> None:
    with pytest.raises(openai.PermissionDeniedError):
        gateway.client(NARROW_KEY).embeddings.create(model="embed", input="x")
    with pytest.raises(openai.AuthenticationError):
        gateway.client("no-such-key").embeddings.create(model="embed", input="x")


@pytest.mark.parametrize(("inputs", "limit"), [
    (["a", "b", "c", "d"], "max_inputs"),
    (["one two three four five six seven eight"], "max_input_tokens"),
    (["one two three four", "five six seven eight", "nine ten eleven twelve"], "max_total_tokens"),
])
def test_bounds_are_400s_naming_the_limit(gateway: Gateway, fakes: dict[str, FakeUpstream], inputs: list[str],
                                          limit: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.client().embeddings.create(model="embed_bounded", input=inputs)
    assert limit in caught.value.message
    assert caught.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    assert fakes["primary"].requests == []


def test_default_bounds_are_the_providers(gateway: Gateway) -> None:
    response = gateway.post("/v1/embeddings", {"model": "embed", "input": ["x"] * 2049})
    assert response.status_code == 400
    assert "2048" in response.json()["error"]["message"] and "max_inputs" in response.json()["error"]["message"]


@pytest.mark.parametrize("body", [
    {"model": "embed"}, {"model": "embed", "input": ""}, {"model": "embed", "input": []},
    {"model": "embed", "input": ["a", 1]}, {"model": "embed", "input": [[1, 2], "a"]},
    {"model": "embed", "input": [[-1]]}, {"model": "embed", "input": "a", "encoding_format": "int8"},
    {"model": "embed", "input": "a", "dimensions": 0}, {"model": "embed", "input": "a", "user": "u" * 1000},
    {"input": "a"}, ["not", "an", "object"],
])
def test_malformed_requests_are_400s(gateway: Gateway, body: object) -> None:
    response = gateway.post("/v1/embeddings", body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_route_kinds_do_not_mix(gateway: Gateway) -> None:
    chat = gateway.post("/v1/chat/completions", {"model": "embed", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 400 and "/v1/embeddings" in chat.json()["error"]["message"]
    embed = gateway.post("/v1/embeddings", {"model": "plain", "input": "hi"})
    assert embed.status_code == 400 and "chat route" in embed.json()["error"]["message"]
    missing = gateway.post("/v1/embeddings", {"model": "nope", "input": "hi"})
    assert missing.status_code == 404
    listed = {model.id for model in gateway.client().models.list()}
    assert {"embed", "embed_gemini", "plain"} <= listed


def test_direct_provider_model(gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    answer = gateway.client().embeddings.create(model="primary/text-embedding-3-small", input=["a", "b"],
                                                encoding_format="float", dimensions=5)
    assert [item.embedding for item in answer.data] == [vector_of("text-embedding-3-small", t, 5) for t in "ab"]
    assert fakes["primary"].requests[-1].body["dimensions"] == 5


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_a_direct_answer_with_vectors_of_different_lengths_is_a_502(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                                     encoding: str) -> None:
    """A direct ``PROVIDER/MODEL`` declares no size, but one answer must still have one: mixed lengths are the
    upstream's fault, as on a route (they would break the caller's index), never passed on."""
    response = gateway.post("/v1/embeddings", {"model": "primary/emb-ragged", "input": TEXTS,
                                               "encoding_format": encoding})
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "dimensions" in error["message"] and "primary:emb-ragged" in error["message"]
    # One input, or a route's declared size checked the same way: a good direct answer still passes.
    single = gateway.post("/v1/embeddings", {"model": "primary/emb-ragged", "input": "alone"})
    assert single.status_code == 200 and len(single.json()["data"][0]["embedding"]) == 8


# -- LangChain -------------------------------------------------------------------------------------

@pytest.fixture
def tiktoken_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """LangChain tokenizes with tiktoken, which downloads its file unless it is in the cache under its URL's hash."""
    folder = Path(tempfile.mkdtemp(prefix="tiktoken-"))
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    shutil.copy(ROOT / "gateway" / "assets" / "cl100k_base.tiktoken", folder / hashlib.sha1(url.encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(folder))
    yield
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.usefixtures("tiktoken_cache")
@pytest.mark.parametrize(("route", "upstream", "model"), [("embed", "primary", "emb-small"),
                                                          ("embed_gemini", "gemini", "gemini-embedding-001")])
def test_langchain_openai_embeddings_sends_token_arrays(gateway: Gateway, fakes: dict[str, FakeUpstream],
                                                        route: str, upstream: str, model: str) -> None:
    from langchain_openai import OpenAIEmbeddings

    embedder = OpenAIEmbeddings(model=route, base_url=f"{gateway.url}/v1", api_key=KEY,  # type: ignore[arg-type]
                                max_retries=0)
    vectors = embedder.embed_documents(TEXTS)
    query = embedder.embed_query("what is a gateway?")
    encoding = get_encoding(CL100K)
    if upstream == "primary":  # token arrays reach an OpenAI-compatible upstream as they were sent
        sent = fakes[upstream].requests[0].body["input"]
        assert sent == [encoding.encode_ordinary(text) for text in TEXTS]
        assert vectors == [vector_of(model, encoding.encode_ordinary(t), 8) for t in TEXTS]
        assert query == vector_of(model, encoding.encode_ordinary("what is a gateway?"), 8)
    else:  # Gemini takes text: the arrays are decoded with the tokenizer they were made with
        sent = [item["content"]["parts"][0]["text"] for item in fakes[upstream].requests[0].body["requests"]]
        assert sent == TEXTS
        assert vectors == [vector_of(model, t, 8) for t in TEXTS]
        assert query == vector_of(model, "what is a gateway?", 8)


# -- config ----------------------------------------------------------------------------------------

def test_check_config_refuses_targets_of_different_sizes(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("""
providers:
  a: {type: openai, base_url: "http://127.0.0.1:9", api_key: k}
  g: {type: gemini, base_url: "http://127.0.0.1:9", api_key: k}
models:
  vectors:
    kind: embeddings
    targets:
      - {provider: a, model: text-embedding-3-small, dimensions: 1536}
      - {provider: g, model: gemini-embedding-001, dimensions: 768}
""")
    result = subprocess.run([sys.executable, "-m", "gateway", "check-config", "--config", str(config)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "models.vectors.targets[1].dimensions" in result.stderr and "1536" in result.stderr
    config.write_text(config.read_text().replace("dimensions: 768", "dimensions: 1536"))
    result = subprocess.run([sys.executable, "-m", "gateway", "check-config", "--config", str(config)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_litellm_embeddings(litellm_gateway: Gateway, fakes: dict[str, FakeUpstream]) -> None:
    """``type: litellm`` (the long tail) embeds through ``litellm.aembedding``: here its OpenAI route to the fake."""
    gw = litellm_gateway
    answer = gw.client().embeddings.create(model="tail_embed", input=TEXTS, encoding_format="float")
    assert [item.embedding for item in answer.data] == [vector_of("emb-small", t, 8) for t in TEXTS]
    [sent] = fakes["secondary"].requests
    assert sent.path == "/embeddings" and sent.body["input"] == TEXTS
    assert sent.headers["authorization"] == "Bearer tail-key"
    arrays = [get_encoding(CL100K).encode_ordinary(t) for t in TEXTS]  # token arrays go on as text
    answer = gw.client().embeddings.create(model="tail_embed", input=arrays, encoding_format="float")
    assert fakes["secondary"].requests[1].body["input"] == TEXTS
    assert [item.embedding for item in answer.data] == [vector_of("emb-small", t, 8) for t in TEXTS]


def test_request_ids_and_the_path_without_v1(gateway: Gateway) -> None:
    """``/v1/embeddings`` (served by the app's fast path) and ``/embeddings`` (routed) answer alike, with ids."""
    for path in ("/v1/embeddings", "/embeddings"):
        ok = gateway.post(path, {"model": "embed", "input": "x"}, headers={"x-request-id": "req-emb-1"})
        assert ok.status_code == 200 and ok.headers["x-request-id"] == "req-emb-1"
        bad = gateway.post(path, {"model": "embed"})
        assert bad.status_code == 400 and bad.headers["x-request-id"]
        assert bad.json()["error"]["param"] == "input"


def test_a_direct_model_of_a_provider_without_embeddings_is_a_400(gateway: Gateway) -> None:
    response = gateway.post("/v1/embeddings", {"model": "claude/claude-sonnet-4-5", "input": "x"})
    assert response.status_code == 400, response.text
    assert "no embeddings API" in response.json()["error"]["message"]


def test_two_replicas_on_redis_share_limits_and_usage(fakes: dict[str, FakeUpstream], tool_server: ToolServer) -> None:
    """Usage rows and the rpm limit of embeddings live in the shared store: two replicas, one Redis."""
    import os

    import redis

    from tests.e2e.conftest import require_redis

    url = os.environ["LOOPGATE_TEST_REDIS_URL"]
    require_redis(url)
    redis.Redis.from_url(url).flushdb()
    config = gateway_config(fakes, store_url=url, tool_server=tool_server.url, extra_models=EMBED_MODELS)
    anchor = "    - {key: cron-key, tenant: jobs, headless: true}\n"
    config = config.replace(anchor, anchor + EXTRA_KEYS.lstrip("\n"))
    first, second = Gateway(config).start(), Gateway(config).start()
    try:
        first.client(RPM_KEY).embeddings.create(model="embed", input="one")
        with pytest.raises(openai.RateLimitError):
            second.client(RPM_KEY).embeddings.create(model="embed", input="two")
        tokens = second.post("/v1/embeddings", {"model": "embed", "input": TEXTS}).json()["usage"]["prompt_tokens"]
        deadline = time.monotonic() + 10
        while True:  # the replica writes its usage rows after the answer (Redis: batched, usage.flush_s)
            seen = _usage(first, "team-a")
            if seen["prompt_tokens"] == tokens or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert seen["requests"] == 1 and seen["prompt_tokens"] == tokens
        assert seen["cost_usd"] == pytest.approx(tokens * 20 / 1_000_000, abs=1e-12)
    finally:
        first.stop()
        second.stop()
