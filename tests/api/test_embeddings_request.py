"""The embeddings parser on hostile input: any JSON body is parsed or refused with a 400, never an exception."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.api.embeddings.request import check_inputs, check_tokens, parse_embeddings_request
from gateway.config.models_section import EmbeddingBounds
from gateway.errors import GatewayError

JSON = st.recursive(st.none() | st.booleans() | st.integers(min_value=-2**40, max_value=2**40)
                    | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner,
                                                                                 max_size=5), max_leaves=30)
INPUT = (st.text(max_size=30) | st.lists(st.text(max_size=10), max_size=5)
         | st.lists(st.integers(min_value=-5, max_value=2**33), max_size=5)
         | st.lists(st.lists(st.integers(min_value=-5, max_value=2**33), max_size=4), max_size=4) | JSON)


def parsed_or_400(body: Any) -> None:
    try:
        parsed = parse_embeddings_request(body)
    except GatewayError as exc:
        assert exc.status == 400 and exc.type == "invalid_request_error"
        return
    assert parsed.inputs and all(item for item in parsed.inputs)
    first = parsed.inputs[0]
    assert all(isinstance(item, type(first)) for item in parsed.inputs)
    if isinstance(first, list):
        assert all(type(t) is int and t >= 0 for item in parsed.inputs for t in item)  # type: ignore[union-attr]


@settings(max_examples=400, deadline=None)
@given(st.fixed_dictionaries({"model": st.just("m"), "input": INPUT},
                             optional={"encoding_format": JSON | st.sampled_from(["float", "base64"]),
                                       "dimensions": JSON, "user": JSON}))
def test_any_body_is_parsed_or_a_400(body: dict[str, Any]) -> None:
    parsed_or_400(body)


@given(JSON)
def test_any_json_document_is_parsed_or_a_400(body: Any) -> None:
    parsed_or_400(body)


def test_bounds_name_their_limit() -> None:
    bounds = EmbeddingBounds(max_inputs=2, max_input_tokens=5, max_total_tokens=8)
    for run, limit in ((lambda: check_inputs(["a", "b", "c"], bounds, "m"), "max_inputs"),
                       (lambda: check_tokens([1, 6], bounds, "m"), "max_input_tokens"),
                       (lambda: check_tokens([5, 4], bounds, "m"), "max_total_tokens")):
        try:
            run()
        except GatewayError as exc:
            assert exc.status == 400 and limit in exc.message
        else:
            raise AssertionError(f"{limit} not enforced")
    assert check_tokens([4, 4], bounds, "m") == 8
