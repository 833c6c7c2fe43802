"""The ``responses`` section: how the Responses API seals what a caller carries, and compaction's bounds.

``sealing_keys`` are the secrets of ``gateway/canonical/sealing.py`` (compaction items, and any
state the gateway hands a stateless caller): the first seals, every one unseals (rotation). An empty
entry is skipped, so ``["${LOOPGATE_SEALING_KEY:-}"]`` is valid with the variable unset; without
any, the deployment's key-id key is used (``governance/sealing_keys.py``, docs/surfaces/responses.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.config.checks import ConfigError, get, mapping, type_name

RESPONSES_KEYS = {"sealing_keys", "compact_max_output_tokens"}

#: a sealing key shorter than this is refused: it is the only secret between a caller and a forged item
MIN_SEALING_KEY_CHARS = 32
MAX_SEALING_KEYS = 16
#: ``compact_max_output_tokens`` bounds
MIN_COMPACT_OUTPUT = 256
MAX_COMPACT_OUTPUT = 128_000


@dataclass(frozen=True, slots=True)
class ResponsesConfig:
    #: the secrets sealing what callers carry (first seals, all unseal); empty: derived (see the module docstring)
    sealing_keys: tuple[str, ...] = field(default=(), repr=False)
    #: the most tokens a compaction's summary may take (``max_tokens`` of its model call)
    compact_max_output_tokens: int = 4096


def responses_section(raw: Any) -> ResponsesConfig:
    section = mapping(raw, "responses", RESPONSES_KEYS)
    keys = get(section, "sealing_keys", "responses", (list, str), [])
    if isinstance(keys, str):
        keys = [keys]
    if len(keys) > MAX_SEALING_KEYS:
        raise ConfigError("responses.sealing_keys", f"at most {MAX_SEALING_KEYS} keys, got {len(keys)}")
    secrets = []
    for index, key in enumerate(keys):
        path = f"responses.sealing_keys[{index}]"
        if not isinstance(key, str):
            raise ConfigError(path, f"expected a string, got {type_name(key)}")
        if not key:
            continue
        if len(key) < MIN_SEALING_KEY_CHARS:
            raise ConfigError(path, f"must be at least {MIN_SEALING_KEY_CHARS} characters of a random secret "
                                    f"(e.g. `openssl rand -base64 32`), got {len(key)}")
        secrets.append(key)
    tokens = get(section, "compact_max_output_tokens", "responses", int, 4096)
    if not MIN_COMPACT_OUTPUT <= tokens <= MAX_COMPACT_OUTPUT:
        raise ConfigError("responses.compact_max_output_tokens",
                          f"must be between {MIN_COMPACT_OUTPUT} and {MAX_COMPACT_OUTPUT}, got {tokens}")
    return ResponsesConfig(tuple(secrets), int(tokens))
