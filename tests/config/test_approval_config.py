"""Approval policies in the config (required | never | auto, time-outs, per-key tools) and how ``auto`` resolves."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_config
from gateway.tools.base import resolve_approval
from tests.config.test_config import ENV, GOOD


def with_tool_lines(lines: str) -> str:
    return GOOD.replace('    approval: required\n', lines, 1)


def test_approval_modes_and_the_boolean_shorthand() -> None:
    for raw, expected in (("auto", "auto"), ("never", "never"), ("required", "required"), ("true", "required"),
                          ("false", "never")):
        config = parse_config(with_tool_lines(f"    approval: {raw}\n"), ENV)
        assert config.tools["delete_record"].approval == expected
    config = parse_config(with_tool_lines("    approval: required\n    approval_timeout_s: 90\n"), ENV)
    assert config.tools["delete_record"].approval_timeout_s == 90.0


@pytest.mark.parametrize(("lines", "path", "words"), [
    ("    approval: sometimes\n", "tools.delete_record.approval", "'required', 'never' or 'auto'"),
    ("    approval: required\n    approval_timeout_s: 0\n", "tools.delete_record.approval_timeout_s", "(0, 604800]"),
    ("    approval: required\n    approval_timeout_s: 1000000\n", "tools.delete_record.approval_timeout_s", "604800"),
    ("    approval_timeout_s: 30\n", "tools.delete_record.approval_timeout_s", "needs 'approval: required'"),
])
def test_bad_approval_settings_name_their_key(lines: str, path: str, words: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(with_tool_lines(lines), ENV)
    assert error.value.path == path and words in str(error.value)


def test_mcp_server_approval_policy() -> None:
    text = GOOD.replace("models:\n", "mcp_servers:\n  gh: {url: 'http://mcp.internal/mcp', approval: auto, "
                                     "approval_timeout_s: 600}\nmodels:\n", 1)
    server = parse_config(text, ENV).mcp_servers["gh"]
    assert (server.approval, server.approval_timeout_s) == ("auto", 600.0)


def test_key_tool_allow_list() -> None:
    config = parse_config(GOOD.replace("{key: cron, tenant: jobs, headless: true}",
                                       "{key: cron, tenant: jobs, tools: [get_weather, get_weather]}"), ENV)
    assert [k.tools for k in config.auth.keys] == [None, frozenset({"get_weather"})]
    with pytest.raises(ConfigError) as error:
        parse_config(GOOD.replace("{key: cron, tenant: jobs, headless: true}", "{key: cron, tenant: jobs, tools: [1]}"),
                     ENV)
    assert error.value.path == "auth.keys[1].tools"


def test_auto_follows_annotations_and_fails_closed() -> None:
    assert resolve_approval("auto", {"readOnlyHint": True}) == "never"
    assert resolve_approval("auto", {"readOnlyHint": False, "destructiveHint": False}) == "never"
    assert resolve_approval("auto", {"destructiveHint": True}) == "required"
    assert resolve_approval("auto", {"readOnlyHint": "yes"}) == "required"  # not a boolean: unknown
    assert resolve_approval("auto", {}) == "required"
    assert resolve_approval("auto", None) == "required"
    assert resolve_approval("never", {"destructiveHint": True}) == "never"  # an explicit mode wins
    assert resolve_approval("required", {"readOnlyHint": True}) == "required"
