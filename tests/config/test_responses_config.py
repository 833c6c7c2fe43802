"""The ``responses`` config section: sealing keys (long random secrets, rotation order kept) and compaction's bound."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError
from gateway.config.loader import parse_config
from gateway.config.model import ResponsesConfig
from gateway.config.validate import build_config
from gateway.redact import Redactor

KEY_A, KEY_B = "a" * 32, "b" * 44


def test_defaults_when_absent() -> None:
    assert build_config({}).responses == ResponsesConfig(sealing_keys=(), compact_max_output_tokens=4096)


def test_keys_keep_their_order_and_an_unset_variable_is_skipped() -> None:
    text = "responses:\n  sealing_keys: ['${NEW_KEY}', '${OLD_KEY:-}', '${GONE:-}']\n  compact_max_output_tokens: 900\n"
    config = parse_config(text, {"NEW_KEY": KEY_B, "OLD_KEY": KEY_A}, "x.yaml").responses
    assert config.sealing_keys == (KEY_B, KEY_A) and config.compact_max_output_tokens == 900
    assert build_config({"responses": {"sealing_keys": KEY_A}}).responses.sealing_keys == (KEY_A,)
    assert KEY_A not in repr(config) and KEY_B not in repr(config)


def test_sealing_keys_are_redacted_like_every_configured_secret() -> None:
    config = build_config({"responses": {"sealing_keys": [KEY_B]}})
    assert KEY_B not in Redactor.from_config(config).scrub(f"error: {KEY_B}")


@pytest.mark.parametrize(("section", "path"), [
    ({"sealing_keys": ["short-secret"]}, "responses.sealing_keys[0]"),
    ({"sealing_keys": [KEY_A, 12]}, "responses.sealing_keys[1]"),
    ({"sealing_keys": {"a": KEY_A}}, "responses.sealing_keys"),
    ({"sealing_keys": [KEY_A] * 17}, "responses.sealing_keys"),
    ({"compact_max_output_tokens": 10}, "responses.compact_max_output_tokens"),
    ({"compact_max_output_tokens": 10**9}, "responses.compact_max_output_tokens"),
    ({"compact_max_output_tokens": "many"}, "responses.compact_max_output_tokens"),
    ({"sealing_key": KEY_A}, "responses.sealing_key"),
])
def test_bad_values_name_the_key(section: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config({"responses": section})
    assert info.value.path == path
    assert KEY_A not in str(info.value)
