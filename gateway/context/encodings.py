"""Offline tiktoken encodings, built from the BPE files shipped in ``gateway/assets``.

``tiktoken.get_encoding`` downloads its BPE files at first use, which fails (or hangs) on a
machine without internet, and ``tiktoken.load.load_tiktoken_bpe`` copies even a local file into
a cache directory taken from ``TIKTOKEN_CACHE_DIR`` (which litellm overwrites process-wide) and
raises when that directory is not writable. So this module reads the shipped bytes itself,
checks their pinned sha256, parses the same ``base64-token rank`` lines tiktoken's loader
parses, and builds ``tiktoken.Encoding`` objects with the pattern and special tokens that
``tiktoken_ext/openai_public.py`` defines. Nothing here can reach the network.

A load is slow and its rank tables are large (bench/README.md), so each encoding is built once
per process, lazily, under a lock (two threads asking share one load).
"""

from __future__ import annotations

import base64
import hashlib
import re
import threading
from dataclasses import dataclass
from importlib import resources

import tiktoken

O200K = "o200k_base"
CL100K = "cl100k_base"

_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"


@dataclass(frozen=True, slots=True)
class _Spec:
    file: str
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]


# Copied from tiktoken 0.14 ``tiktoken_ext/openai_public.py``; the hashes are the ones tiktoken pins.
_SPECS: dict[str, _Spec] = {
    CL100K: _Spec(
        file="cl100k_base.tiktoken",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=(r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
                 r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""),
        special_tokens={_ENDOFTEXT: 100257, _FIM_PREFIX: 100258, _FIM_MIDDLE: 100259, _FIM_SUFFIX: 100260,
                        _ENDOFPROMPT: 100276},
    ),
    O200K: _Spec(
        file="o200k_base.tiktoken",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join([
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]),
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
}

ENCODING_NAMES: tuple[str, ...] = tuple(_SPECS)

_lock = threading.Lock()
_encodings: dict[str, tiktoken.Encoding] = {}


def asset_bytes(name: str) -> bytes:
    """The shipped BPE file of encoding ``name``, verified against its pinned sha256."""
    spec = _SPECS[name]
    data = (resources.files("gateway") / "assets" / spec.file).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise ValueError(f"gateway/assets/{spec.file} is corrupt: sha256 {digest}, expected {spec.sha256}")
    return data


def _ranks(data: bytes, file: str) -> dict[bytes, int]:
    """Parse ``base64-token rank`` lines exactly as ``tiktoken.load.load_tiktoken_bpe`` does."""
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError as exc:
            raise ValueError(f"gateway/assets/{file}: cannot parse line {line[:60]!r}") from exc
    return ranks


def _build(name: str) -> tiktoken.Encoding:
    spec = _SPECS[name]
    ranks = _ranks(asset_bytes(name), spec.file)
    return tiktoken.Encoding(name, pat_str=spec.pat_str, mergeable_ranks=ranks, special_tokens=spec.special_tokens)


def get_encoding(name: str = O200K) -> tiktoken.Encoding:
    """The encoding ``name`` (``o200k_base`` or ``cl100k_base``), loaded once per process from the shipped file."""
    encoding = _encodings.get(name)
    if encoding is not None:
        return encoding
    if name not in _SPECS:
        raise KeyError(f"unknown encoding {name!r}; shipped: {', '.join(ENCODING_NAMES)}")
    with _lock:
        encoding = _encodings.get(name)
        if encoding is None:
            encoding = _encodings[name] = _build(name)
    return encoding


def is_loaded(name: str) -> bool:
    """Whether ``name`` is already built (so ``get_encoding`` returns at once)."""
    return name in _encodings


def preload() -> None:
    """Load every shipped encoding now (at start-up), so no request pays the first-load cost."""
    for name in ENCODING_NAMES:
        get_encoding(name)


def clear_loaded() -> None:
    """Forget the loaded encodings (tests use it to prove a cold load is offline)."""
    with _lock:
        _encodings.clear()


# Models whose tokenizer is cl100k_base; every newer OpenAI model (gpt-4o, gpt-4.1, gpt-4.5, gpt-5,
# o-series, gpt-oss) uses o200k_base, and for non-OpenAI models o200k is only an estimate that the
# per-target calibration in ``TokenEstimator`` corrects.
_O200K_MODELS = re.compile(r"^(?:gpt-4o|gpt-4\.[1-9]|gpt-[5-9]|gpt-oss|chatgpt-4o|o\d|codex)")
_CL100K_MODELS = re.compile(r"^(?:gpt-4|gpt-3\.5|gpt-35|text-embedding-3|text-embedding-ada-002)")


def encoding_name_for_model(model: str) -> str:
    """``o200k_base`` or ``cl100k_base`` for ``model`` (a provider prefix such as ``openai/`` is ignored)."""
    base = model.strip().lower().rsplit("/", 1)[-1]
    if _O200K_MODELS.match(base):
        return O200K
    if _CL100K_MODELS.match(base):
        return CL100K
    return O200K


def encoding_for_model(model: str) -> tiktoken.Encoding:
    """The loaded encoding for ``model``; see ``encoding_name_for_model``."""
    return get_encoding(encoding_name_for_model(model))
