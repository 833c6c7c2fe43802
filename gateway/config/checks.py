"""The checks every config section shares: ``ConfigError``, typed lookups, unknown-key errors with hints.

Each section's module (``*_section.py``) holds its dataclasses, its keys and its parser; the table
of every section's keys (``validate.SECTIONS``) lets an unknown key name the section where it
belongs (``models.smart.max_tool_result_tokens`` -> ``models.smart.context.max_tool_result_tokens``).
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


#: the ``path`` of a mistake about the file itself (missing, unreadable, not YAML): no key is named
WHOLE_FILE = "<file>"


class ConfigError(Exception):
    """A config mistake: ``path`` is the key path, ``problem`` what is wrong with it. One about the
    file itself reads as the problem alone (it names the file), never as a key called ``<file>``."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(problem if path == WHOLE_FILE else f"{path}: {problem}")
        self.path = path
        self.problem = problem


def mapping(value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping, got {type_name(value)}")
    for key in value:
        if key not in allowed:
            hint = elsewhere(str(key), path, allowed) or closest(str(key), allowed)
            raise ConfigError(f"{path}.{key}" if path else str(key), "unknown key" + hint)
    return value


#: every section's keys by path template, registered by ``validate`` (which imports every section, so
#: this module, imported by each of them, cannot import it): see :func:`register_sections`
SECTIONS: tuple[tuple[str, set[str]], ...] = ()


def register_sections(sections: tuple[tuple[str, set[str]], ...]) -> None:
    """The table :func:`elsewhere` consults; on a tie the earlier entry wins."""
    global SECTIONS
    SECTIONS = sections


def elsewhere(key: str, path: str, allowed: set[str]) -> str:
    """`` (did you mean models.x.context.KEY?)`` when ``key`` belongs to another section, else ``""``.

    The section sharing most of this one's path wins (a route key that belongs in its ``context``,
    a target key that belongs to its route); the shared part is filled in from ``path``.
    """
    here = next((template for template, keys in SECTIONS if keys is allowed), None)
    if here is None:
        return ""
    ours = here.split(".") if here else []
    best: tuple[int, list[str]] | None = None
    for template, keys in SECTIONS:
        if key not in keys or keys is allowed:
            continue
        theirs = template.split(".") if template else []
        shared = 0
        while shared < min(len(ours), len(theirs)) and ours[shared] == theirs[shared]:
            shared += 1
        if best is None or shared > best[0]:
            best = (shared, theirs)
    if best is None:
        return ""
    shared, theirs = best
    # Names may contain dots (a route called gpt-4.1): cut the fixed-word tail off the path, not its head.
    prefix = [path.rsplit(".", len(ours) - shared)[0] if len(ours) > shared else path] if shared else []
    where = ".".join([*prefix, *theirs[shared:], key]).replace("NAME", "<name>").replace("[N]", "[<n>]")
    return f" (did you mean {where}?)"


def closest(word: str, choices: set[str]) -> str:
    import difflib  # start-up only

    found = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" (did you mean '{found[0]}'?)" if found else ""


def type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def get(section: dict[str, Any], key: str, path: str, kind: type[T] | tuple[type, ...], default: Any) -> Any:
    if key not in section or section[key] is None:
        return default
    value = section[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise ConfigError(f"{path}.{key}", f"expected {names(kinds)}, got a boolean")
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kinds):
        raise ConfigError(f"{path}.{key}", f"expected {names(kinds)}, got {type_name(value)}")
    return value


def names(kinds: tuple[type, ...]) -> str:
    words = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", dict: "a mapping",
             list: "a list"}
    return " or ".join(words.get(k, k.__name__) for k in kinds)


def positive(value: float, path: str, allow_zero: bool = False) -> float:
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(path, f"must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


def string_map(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping, got {type_name(value)}")
    return {str(k): str(v) for k, v in value.items()}


def header_map(value: Any, path: str) -> dict[str, str]:
    headers = string_map(value, path)
    for name, text in headers.items():
        one_line(name, f"{path}.{name}")
        one_line(text, f"{path}.{name}")
    return headers


def one_line(text: str, path: str) -> str:
    """Header values end up in an HTTP request head, where a line break would end the header."""
    if "\r" in text or "\n" in text:
        raise ConfigError(path, "contains a line break (a trailing newline from a secret file or "
                                "an environment variable?)")
    return text
