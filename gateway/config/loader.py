"""Reading a config file: YAML, then ``${VAR}`` / ``${VAR:-default}`` from the environment.

Interpolation runs on the parsed tree's string values (not on raw text), so a value that
contains YAML syntax cannot change the file's structure.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gateway.config.checks import WHOLE_FILE
from gateway.config.model import Config
from gateway.config.validate import ConfigError, build_config

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
DEFAULT_PATH = "config/gateway.yaml"
#: what ``loopgate init`` writes, and the second file looked for in the working directory
INIT_NAME = "loopgate.yaml"
#: the keyless starting config shipped in the package: ``loopgate init`` writes it, and ``serve`` runs it
#: when no config is named and none is found
PACKAGED_PATH = Path(__file__).with_name("starter.yaml")


def interpolate(value: Any, env: Mapping[str, str], path: str = "") -> Any:
    """Replace ``${VAR}`` and ``${VAR:-default}`` in every string of a parsed YAML tree.

    A variable that is unset and has no default is an error naming where it was used: a
    silently empty API key is a worse failure, discovered later, on a live request.
    """
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            found = env.get(name)
            if found is not None and (found != "" or default is None):
                return found
            if default is not None:
                return default
            raise ConfigError(path or "<root>", f"environment variable {name} is not set")

        if "${" not in value:
            return value
        result = _VAR.sub(substitute, value)
        return _coerce_scalar(result) if _VAR.fullmatch(value) else result
    if isinstance(value, dict):
        return {k: interpolate(v, env, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _coerce_scalar(text: str) -> Any:
    """``port: ${PORT:-8080}`` should give the int 8080, as if it had been written literally."""
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return loaded if isinstance(loaded, (int, float, bool)) else text


def parse_config(text: str, env: Mapping[str, str] | None = None, source: str = "<config>") -> Config:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(WHOLE_FILE, f"{source} is not valid YAML{where}: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("<root>", "the config must be a mapping of sections")
    raw = interpolate(raw, os.environ if env is None else env)
    return build_config(raw)


def find_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The config file to load: ``path``, else ``$LOOPGATE_CONFIG``, else ``config/gateway.yaml``, else
    ``./loopgate.yaml``, else the packaged starting config (``PACKAGED_PATH``).

    A path that was named (argument or environment) is returned even when missing, so loading it
    fails naming it; only the two conventional places fall through to the packaged default.
    """
    environ = os.environ if env is None else env
    named = path or environ.get("LOOPGATE_CONFIG")
    if named:
        return Path(named)
    for candidate in (Path(DEFAULT_PATH), Path(INIT_NAME)):
        if candidate.is_file():
            return candidate
    return PACKAGED_PATH


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Load and validate the file ``find_config`` chooses."""
    environ = os.environ if env is None else env
    chosen = find_config(path, environ)
    try:
        text = chosen.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(WHOLE_FILE, f"config file not found: {chosen}") from None
    except OSError as exc:
        raise ConfigError(WHOLE_FILE, f"cannot read {chosen}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(WHOLE_FILE, f"{chosen} is not UTF-8 text") from None
    return parse_config(text, environ, str(chosen))
