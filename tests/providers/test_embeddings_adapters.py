"""The embeddings adapters as pure translators: requests per wire format, answers read back in input order."""

from __future__ import annotations

import base64
import struct

import orjson
import pytest

from gateway.api.embeddings.render import render_embeddings
from gateway.api.embeddings.tokens import decode_inputs
from gateway.canonical_embeddings import EmbeddingRequest, as_bytes, checked_base64, dimensions_of, pack, unpack
from gateway.config.model import ProviderConfig
from gateway.errors import GatewayError
from gateway.providers.base import ErrorClass, ProviderError
from gateway.providers.gemini_embeddings import BATCH_LIMIT, GeminiEmbeddings
from gateway.providers.openai_embeddings import OpenAIEmbeddings

OPENAI = ProviderConfig(name="oa", type="openai", base_url="https://api.example/v1", api_key="sk")
AZURE = ProviderConfig(name="az", type="openai", base_url="https://res.example", api_key="ak",
                       api_version="2024-10-21")
GEMINI = ProviderConfig(name="g", type="gemini", base_url="https://gl.example", api_key="gk")


def request(inputs: list[str] | list[list[int]], **kwargs: object) -> EmbeddingRequest:
    texts = inputs if inputs and isinstance(inputs[0], str) else []
    fields: dict[str, object] = {"dimensions": None, "encoding_format": "float", "user": None, **kwargs}
    return EmbeddingRequest(inputs, texts, counted_tokens=1, **fields)  # type: ignore[arg-type]


def test_openai_request_and_azure_url() -> None:
    [native] = OpenAIEmbeddings().build_embeddings(request([[1, 2], [3]], dimensions=256, encoding_format="base64",
                                                           user="u1"), OPENAI, "text-embedding-3-small")
    assert native.url == "https://api.example/v1/embeddings" and native.headers["authorization"] == "Bearer sk"
    assert orjson.loads(native.body) == {"model": "text-embedding-3-small", "input": [[1, 2], [3]], "dimensions": 256,
                                         "encoding_format": "base64", "user": "u1"}
    [azure] = OpenAIEmbeddings().build_embeddings(request(["a"]), AZURE, "my deployment")
    assert azure.url == "https://res.example/openai/deployments/my%20deployment/embeddings?api-version=2024-10-21"
    assert azure.headers["api-key"] == "ak" and "authorization" not in azure.headers


def test_openai_answer_out_of_order_and_base64() -> None:
    raw = base64.b64encode(struct.pack("<2f", 0.5, -1.0)).decode()
    body = orjson.dumps({"data": [{"index": 1, "embedding": raw}, {"index": 0, "embedding": [1, 2.5]}],
                         "model": "m", "usage": {"prompt_tokens": 7, "total_tokens": 7}})
    result = OpenAIEmbeddings().parse_embeddings([body], request(["a", "b"]))
    assert result.vectors[0] == [1, 2.5] and result.vectors[1] == raw  # base64 passed on as the upstream sent it
    assert unpack(as_bytes(raw)) == [0.5, -1.0] and dimensions_of(raw) == 2
    assert result.prompt_tokens == 7 and result.model == "m"


@pytest.mark.parametrize("payload", [
    {"data": [{"index": 0, "embedding": [1.0]}]},  # one vector for two inputs
    {"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}]},  # an index twice
    {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": ["x"]}]},  # not a number
    {"data": [{"index": 0, "embedding": "not base64!"}, {"index": 1, "embedding": [1.0]}]},
    {"data": [{"index": 0, "embedding": "AAA="}, {"index": 1, "embedding": [1.0]}]},  # 2 bytes: half a float
    {"data": [{"index": 0, "embedding": "AAAAAAA="}, {"index": 1, "embedding": [1.0]}]},  # 5 bytes: 1.25 floats
    {"data": [{"index": 0, "embedding": "AA=AAAAA"}, {"index": 1, "embedding": [1.0]}]},  # padding inside
    {"data": [{"index": 0, "embedding": "AAAAé==="}, {"index": 1, "embedding": [1.0]}]},  # not ASCII
    {"data": "nope"}, ["a list"],
])
def test_wrong_shaped_openai_answers_are_invalid_responses(payload: object) -> None:
    with pytest.raises(ProviderError) as caught:
        OpenAIEmbeddings().parse_embeddings([orjson.dumps(payload)], request(["a", "b"]))
    assert caught.value.error_class is ErrorClass.INVALID_RESPONSE


def test_gemini_one_input_is_embed_content_and_more_are_batches_of_the_limit() -> None:
    adapter = GeminiEmbeddings()
    [one] = adapter.build_embeddings(request(["a"], dimensions=64), GEMINI, "gemini-embedding-001")
    assert one.url == "https://gl.example/v1beta/models/gemini-embedding-001:embedContent"
    assert orjson.loads(one.body) == {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "a"}]},
                                      "outputDimensionality": 64}
    texts = [str(i) for i in range(BATCH_LIMIT * 2 + 1)]
    natives = adapter.build_embeddings(request(texts), GEMINI, "models/gemini-embedding-001")
    assert [len(orjson.loads(n.body)["requests"]) for n in natives] == [BATCH_LIMIT, BATCH_LIMIT, 1]
    assert all(n.url.endswith("/models/gemini-embedding-001:batchEmbedContents") for n in natives)
    assert natives[0].headers["x-goog-api-key"] == "gk"
    bodies = [orjson.dumps({"embeddings": [{"values": [float(t)]} for t in texts[i:i + BATCH_LIMIT]]})
              for i in range(0, len(texts), BATCH_LIMIT)]
    assert adapter.parse_embeddings(bodies, request(texts)).vectors == [[float(t)] for t in texts]
    with pytest.raises(ProviderError):
        adapter.parse_embeddings(bodies[:2], request(texts))  # a batch short


def test_base64_check_counts_whole_floats() -> None:
    three = base64.b64encode(struct.pack("<3f", 1.0, 2.0, 3.0)).decode()  # 12 bytes: no padding
    one = base64.b64encode(struct.pack("<f", 1.0)).decode()  # 4 bytes: "==" padding
    assert checked_base64(three) == three and dimensions_of(three) == 3
    assert checked_base64(one) == one and dimensions_of(one) == 1
    assert checked_base64(one[:-1]) is None and checked_base64("-_" + three[2:]) is None


def test_render_converts_only_when_the_forms_differ() -> None:
    passed = base64.b64encode(struct.pack("<2f", 4.0, 5.0)).decode()
    vectors = [[0.25, -2.0], pack([1.5, 3.0]), passed]
    as_float = orjson.loads(render_embeddings(vectors, "float", "r", 3, {}))
    assert [item["embedding"] for item in as_float["data"]] == [[0.25, -2.0], [1.5, 3.0], [4.0, 5.0]]
    as_b64 = orjson.loads(render_embeddings(vectors, "base64", "r", 3, {}))
    decoded = [list(struct.unpack("<2f", base64.b64decode(item["embedding"]))) for item in as_b64["data"]]
    assert decoded == [[0.25, -2.0], [1.5, 3.0], [4.0, 5.0]] and as_b64["data"][2]["embedding"] == passed
    assert as_b64["usage"] == {"prompt_tokens": 3, "total_tokens": 3} and as_b64["object"] == "list"


async def test_token_arrays_decode_for_text_targets() -> None:
    from gateway.context.encodings import CL100K, get_encoding

    encoding = get_encoding(CL100K)
    assert await decode_inputs([encoding.encode_ordinary("hello world")]) == ["hello world"]
    with pytest.raises(GatewayError) as caught:
        await decode_inputs([[10_000_000]])
    assert caught.value.status == 400
