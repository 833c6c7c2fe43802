"""The layout stays honest: no module past 400 lines and no function past 80 without saying why.

A module or function that must be longer carries a ``Long by design:`` comment (in a module's
first lines; in a function's first lines or just above its ``def``) with the reason. The test
also fails when such a comment outlives its reason, so the notes cannot go stale.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

GATEWAY = Path(__file__).resolve().parent.parent / "gateway"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
MARK = "Long by design:"
#: how far into a module (or around a function's ``def``) the comment may be
MODULE_HEAD = 40
FUNCTION_HEAD = 6


def modules() -> list[Path]:
    return sorted(GATEWAY.rglob("*.py"))


def long_functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


def marked(lines: list[str], start: int, stop: int) -> bool:
    return any(MARK in line for line in lines[max(start, 0):stop])


def problems_of(path: Path) -> list[str]:
    source = path.read_text()
    lines = source.splitlines()
    name = path.relative_to(GATEWAY.parent)
    found: list[str] = []
    tree = ast.parse(source)
    long_module = len(lines) > MAX_MODULE_LINES
    # A module's note sits before its first definition (a function's own note is not the module's).
    definitions = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                   ast.ClassDef))]
    head = min([MODULE_HEAD] + [min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
                                for node in definitions[:1]])
    if long_module != marked(lines, 0, head):
        found.append(f"{name}: {len(lines)} lines " + ("without" if long_module else "but a stale") + f" '{MARK}'")
    for node in long_functions(tree):
        first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        if not marked(lines, first - 1 - FUNCTION_HEAD, node.lineno + FUNCTION_HEAD):
            found.append(f"{name}:{node.lineno} {node.name}() is {node.end_lineno - node.lineno + 1} lines "  # type: ignore[operator]
                         f"without '{MARK}'")
    return found


def test_gateway_modules_and_functions_stay_short_or_say_why() -> None:
    problems = [problem for path in modules() for problem in problems_of(path)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("source", "expected"), [
    ("x = 1\n" * (MAX_MODULE_LINES + 1), "without"),
    (f"# {MARK} a reason\n" + "x = 1\n" * (MAX_MODULE_LINES + 1), None),
    (f"# {MARK} a reason\nx = 1\n", "stale"),
    ("def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES, "f() is"),
    (f"def f():\n    # {MARK} a reason\n" + "    x = 1\n" * MAX_FUNCTION_LINES, None),
])
def test_the_rule_finds_what_it_should(tmp_path: Path, source: str, expected: str | None) -> None:
    package = tmp_path / "gateway"
    package.mkdir()
    module = package / "sample.py"
    module.write_text(source)
    globals()["GATEWAY"] = package
    try:
        found = problems_of(module)
    finally:
        globals()["GATEWAY"] = Path(__file__).resolve().parent.parent / "gateway"
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0]
