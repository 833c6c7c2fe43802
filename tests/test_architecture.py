"""The shape of ``gateway``'s import graph: no cycles, and no layer importing one above it.

The graph is read statically: every module under ``gateway/`` is parsed with ``ast`` and each
``import`` and ``from ... import`` in it is an edge, wherever it sits (module level, a function, a
class, ``try``), relative imports resolved against the importing module. ``from P import N`` is an
edge to ``P.N`` when that is a module, else to ``P``; ``import a.b.c`` is an edge to ``a.b.c``. The
parent packages Python initialises first are not edges of their own (a package whose ``__init__``
imports its modules would otherwise be on a cycle with each of them). Imports under ``if TYPE_CHECKING:`` never run:
they are dependencies (the layering rules count them) but cannot close an import cycle (the cycle
check leaves them out).

Rules:

* no import cycle between modules of ``gateway`` (a package's ``__init__`` is a module like the others);
* no cycle between its top-level packages and modules either (``gateway.config`` importing
  ``gateway.upstream.x`` while ``gateway.upstream.y`` imports ``gateway.config.z`` is a knot even
  though no module is on a cycle); here ``TYPE_CHECKING`` imports count: a package that needs
  another's types depends on it;
* the HTTP layer (``gateway.http``, once it exists) imports nothing from ``gateway`` outside itself;
* the layering table ``LAYERS``: a package must not import the packages listed for it; every
  package of ``gateway`` has a row (the HTTP layer's is its own rule above);
* ``NARROW``: where a row allows a package only in part, the importer may import only the listed
  modules of it, and those modules import nothing else of their package (so the rest never comes
  in through them). ``TYPE_CHECKING`` imports count here too.

``KNOWN_EXCEPTIONS`` holds the edges that break a rule today and are being fixed elsewhere; each
one must still exist and still break its rule, so the set cannot outlive the fix.
"""

from __future__ import annotations

import ast
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "gateway"
HTTP_LAYER = "gateway.http"

#: The layers, top first. A request flows http -> api -> loop -> routing -> providers -> upstream;
#: imports point down that flow from api on, and the HTTP layer, which api uses, imports nothing.
#: Beside the flow sit services the layers above them use: tools (and beside them interaction, the
#: answers to what a tool call asks), store, context, notify, governance, usage, background; at the
#: bottom observability, which imports only config, and
#: config, which imports nothing. Each row names what a package MAY import (besides itself, the
#: ``SHARED`` packages and the top-level modules such as ``gateway.errors``); ``LAYERS`` turns it
#: into what it must not, so a new package is forbidden to every row until a row allows it.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    # The composition root: everything but the command line that starts it.
    "gateway.api": ("gateway.background", "gateway.config", "gateway.context", "gateway.governance", "gateway.http",
                    "gateway.interaction", "gateway.loop", "gateway.notify", "gateway.observability",
                    "gateway.providers", "gateway.routing", "gateway.store", "gateway.tools", "gateway.upstream",
                    "gateway.usage"),
    # What a running MCP tool call asks of the gateway (elicitation, sampling), answered beside the tools
    # through the loop; the request lifecycle it needs is handed to it by the composition root (protocols).
    "gateway.interaction": ("gateway.loop", "gateway.routing", "gateway.tools", "gateway.http", "gateway.config",
                            "gateway.observability"),
    "gateway.loop": ("gateway.routing", "gateway.tools", "gateway.store", "gateway.context", "gateway.notify",
                     "gateway.config", "gateway.observability"),
    "gateway.routing": ("gateway.providers", "gateway.upstream", "gateway.context", "gateway.config",
                        "gateway.observability"),
    "gateway.providers": ("gateway.upstream", "gateway.config", "gateway.observability"),
    "gateway.upstream": ("gateway.config", "gateway.observability"),
    # Domain services that are not HTTP: the surfaces use them, never the reverse. Governance and
    # usage read the loop's events (and governance the route plan), of the loop nothing but its
    # events module (``NARROW``); nothing below them reads them.
    "gateway.governance": ("gateway.loop", "gateway.routing", "gateway.store", "gateway.config",
                           "gateway.observability"),
    "gateway.usage": ("gateway.loop", "gateway.store", "gateway.config", "gateway.observability"),
    "gateway.background": ("gateway.store", "gateway.http", "gateway.config", "gateway.observability"),
    "gateway.notify": ("gateway.store", "gateway.upstream", "gateway.config", "gateway.observability"),
    # Tools post through the transport's proxy rules and error classes, nothing of the providers.
    "gateway.tools": ("gateway.upstream", "gateway.config", "gateway.observability"),
    "gateway.store": ("gateway.config", "gateway.observability"),
    "gateway.context": ("gateway.config", "gateway.observability"),
    "gateway.observability": ("gateway.config",),
    # Config is read by every layer and reads none: the transport's timers, bounds and the model
    # name check live in it (config/transport.py, config/model_names.py), not the other way round.
    "gateway.config": (),
    # The vocabulary every layer speaks (messages, the model request, stream deltas): any package
    # may import it (``SHARED``); it reads only the HTTP layer's depth-bounded JSON parser.
    "gateway.canonical": ("gateway.http",),
}

#: the packages every package may import, listed in no other row
SHARED = ("gateway.canonical",)

#: every package a row may forbid: the packages of ``MAY_IMPORT`` but ``SHARED``, the HTTP layer (its row is its
#: own rule: it imports nothing of gateway outside itself) and the command line on top
_EVERY_LAYER = (*(layer for layer in MAY_IMPORT if layer not in SHARED), HTTP_LAYER, "gateway.cli")

#: package -> the packages it must not import (a package includes its subpackages)
LAYERS: dict[str, tuple[str, ...]] = {
    layer: tuple(other for other in _EVERY_LAYER if other != layer and other not in allowed)
    for layer, allowed in MAY_IMPORT.items()
}

#: importer -> {package its row allows only in part: the only modules of it the importer may import}.
#: Usage and governance read the loop's events and result (``loop/events.py``) and a request's work
#: through ``canonical.WorkRecord`` (a loop's state or a loopless call's record alike): never the
#: engine's module, which would tie metering and admission to how the loop runs.
NARROW: dict[str, dict[str, tuple[str, ...]]] = {
    "gateway.governance": {"gateway.loop": ("gateway.loop.events",)},
    "gateway.usage": {"gateway.loop": ("gateway.loop.events",)},
}

#: ``(rule, importer, imported)`` edges that break a rule today, each with the reason it may for now.
#: ``rule`` is "cycle" (the edge closes an import cycle), "package" (the edge, between two top-level
#: packages, closes a package cycle), "http" or the ``LAYERS`` key it breaks.
KNOWN_EXCEPTIONS: frozenset[tuple[str, str, str]] = frozenset()


#: The composition root: it builds every service and cuts each surface its bundle (``api/services.py``).
#: Only the app, which starts and stops it, may import it (``TYPE_CHECKING`` imports count: a handler
#: typed against it still reaches through it); a handler is given what it uses, never the root.
COMPOSITION_ROOT = "gateway.api.runtime"
ROOT_READERS = frozenset({"gateway.api.app"})


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    typing_only: bool  # under ``if TYPE_CHECKING:``: never executed

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line}{', TYPE_CHECKING' if self.typing_only else ''})"


# -- the walker --------------------------------------------------------------------------------------


def discover(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Every module of ``package`` (a directory under ``root``): dotted name -> (file, is a package)."""
    modules: dict[str, tuple[Path, bool]] = {}
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join(parts)] = (path, is_package)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(node: ast.AST, typing_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement in ``node`` at any depth, and whether it sits under ``if TYPE_CHECKING:``."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, typing_only
    elif isinstance(node, ast.If) and _is_type_checking(node.test):
        for child in node.body:
            yield from _import_nodes(child, True)
        for child in node.orelse:
            yield from _import_nodes(child, typing_only)
    else:
        for child in ast.iter_child_nodes(node):
            yield from _import_nodes(child, typing_only)


def resolve_base(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module a ``from`` import names: ``from ..a import b`` in ``p.q.r`` names ``p.a``."""
    if level == 0:
        return name or ""
    anchor = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 > len(anchor) - 1:
        raise ValueError(f"relative import beyond the top-level package in {module}")
    anchor = anchor[:len(anchor) - (level - 1)]
    return ".".join([*anchor, name] if name else anchor)


def _known(name: str, modules: Container[str]) -> str | None:
    """``name`` or its longest prefix that is a module of the graph (``import a.b.c`` runs ``a.b.c``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def module_edges(module: str, is_package: bool, source: str, modules: Mapping[str, object]) -> list[Edge]:
    """The edges out of one module, given its source text; imports of modules outside ``modules`` are left out."""
    edges: list[Edge] = []
    for node, typing_only in _import_nodes(ast.parse(source)):
        targets: list[str | None] = []
        if isinstance(node, ast.Import):
            targets = [_known(alias.name, modules) for alias in node.names]
        else:
            base = resolve_base(module, is_package, node.level, node.module)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.append(submodule if submodule in modules else _known(base, modules))
        edges.extend(Edge(module, target, node.lineno, typing_only) for target in dict.fromkeys(targets)
                     if target is not None and target != module)
    return edges


def build_graph(sources: Mapping[str, tuple[str, bool]]) -> list[Edge]:
    """Every edge between the modules of ``sources`` (dotted name -> (source text, is a package))."""
    edges: list[Edge] = []
    for module, (source, is_package) in sorted(sources.items()):
        edges.extend(module_edges(module, is_package, source, sources))
    return edges


def read_package(root: Path = ROOT, package: str = PACKAGE) -> list[Edge]:
    found = discover(root, package)
    return build_graph({name: (path.read_text(), is_package) for name, (path, is_package) in found.items()})


def _executed(edges: Iterable[Edge]) -> dict[str, set[str]]:
    """The graph of the edges that run (``TYPE_CHECKING`` ones left out): module -> the modules it imports."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        if not edge.typing_only:
            graph.setdefault(edge.source, set()).add(edge.target)
            graph.setdefault(edge.target, set())
    return graph


def cyclic_components(edges: Iterable[Edge]) -> list[tuple[list[str], list[str]]]:
    """``(cycle, component)`` per strongly connected component of more than one module (or a module
    importing itself): a shortest cycle ``[a, b, ..., a]`` from its first module by name, and every
    module of the component (each is on some cycle with the others)."""
    graph = _executed(edges)
    found = []
    for component in _components(graph):
        start = min(component)
        if len(component) == 1 and start not in graph[start]:
            continue
        found.append((_shortest_cycle(graph, component, start), sorted(component)))
    return sorted(found)


def cycles(edges: Iterable[Edge]) -> list[list[str]]:
    """One cycle per strongly connected component (``cyclic_components``)."""
    return [cycle for cycle, _ in cyclic_components(edges)]


def _components(graph: Mapping[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit on a deep graph)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components


def _shortest_cycle(graph: Mapping[str, set[str]], component: set[str], start: str) -> list[str]:
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node]):
                if successor not in component:
                    continue
                if successor == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if successor not in previous:
                    previous[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a component of more than one module has one


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def http_violations(edges: Iterable[Edge], http: str = HTTP_LAYER, package: str = PACKAGE) -> list[Edge]:
    """Imports from the HTTP layer of anything in ``package`` outside it."""
    return [edge for edge in edges if _within(edge.source, http) and _within(edge.target, package)
            and not _within(edge.target, http)]


def layer_violations(edges: Iterable[Edge], layers: Mapping[str, tuple[str, ...]] = LAYERS
                     ) -> list[tuple[str, Edge]]:
    """``(rule, edge)`` for every import a layer must not make (``rule``: the ``layers`` key)."""
    found = []
    for edge in edges:
        for layer, forbidden in layers.items():
            if _within(edge.source, layer) and any(_within(edge.target, below) for below in forbidden):
                found.append((layer, edge))
    return found


def narrow_violations(edges: Iterable[Edge], narrow: Mapping[str, Mapping[str, tuple[str, ...]]] = NARROW
                      ) -> list[tuple[str, Edge, str]]:
    """``(rule, edge, problem)`` for every import ``narrow`` forbids: an importer's of a module of a
    narrowed package it is not allowed (``rule``: the importer's key), and an allowed module's of
    another module of its own package (``rule``: that module)."""
    found = []
    edges = list(edges)
    checked: set[tuple[str, str]] = set()  # (allowed module, its package): checked once however many allow it
    for layer, allowances in narrow.items():
        for package, allowed in allowances.items():
            only = ", ".join(allowed)
            for edge in edges:
                if not _within(edge.target, package) or edge.target in allowed:
                    continue
                if _within(edge.source, layer):
                    found.append((layer, edge, f"{layer} may import only {only} of {package}: {edge}"))
            for module in allowed:
                if (module, package) in checked:
                    continue
                checked.add((module, package))
                found.extend((module, edge, f"{module} ({layer} may import it) imports more of {package}: {edge}")
                             for edge in edges if edge.source == module and _within(edge.target, package)
                             and edge.target not in allowed)
    return found


def cycle_edges(edges: Iterable[Edge]) -> set[tuple[str, str]]:
    """Every executed edge that lies on some import cycle (both ends in one strongly connected component)."""
    edges = [edge for edge in edges if not edge.typing_only]
    graph = _executed(edges)
    component_of = {}
    for number, component in enumerate(_components(graph)):
        for module in component:
            component_of[module] = number
    return {(edge.source, edge.target) for edge in edges if component_of[edge.source] == component_of[edge.target]}


def unit(module: str) -> str:
    """The top-level package or module ``module`` belongs to: ``gateway.loop.engine`` -> ``gateway.loop``."""
    return ".".join(module.split(".")[:2])


def package_edges(edges: Iterable[Edge]) -> dict[tuple[str, str], Edge]:
    """``(importer, imported)`` top-level units -> the first module edge between them, ``TYPE_CHECKING``
    ones included and those on a module cycle left out (that cycle is reported as such)."""
    edges = list(edges)
    on_module_cycle = cycle_edges(edges)
    found: dict[tuple[str, str], Edge] = {}
    for edge in edges:
        pair = (unit(edge.source), unit(edge.target))
        if pair[0] != pair[1] and (edge.typing_only or (edge.source, edge.target) not in on_module_cycle):
            found.setdefault(pair, edge)
    return found


def package_cycles(edges: Iterable[Edge], exceptions: Container[tuple[str, str, str]] = frozenset()
                   ) -> tuple[list[str], set[tuple[str, str]]]:
    """The package cycles not silenced by ``("package", importer, imported)`` exceptions, each as a
    path with a module edge per step, and every package edge on some cycle (exceptions or not)."""
    between = package_edges(edges)
    as_edges = [Edge(source, target, 0, False) for source, target in between]
    kept = [edge for edge in as_edges if ("package", edge.source, edge.target) not in exceptions]
    problems = []
    for cycle, component in cyclic_components(kept):
        steps = ", ".join(str(between[pair]) for pair in pairwise(cycle))
        others = sorted(set(component) - set(cycle))
        problems.append("package cycle: " + " -> ".join(cycle) + f" ({steps})"
                        + (f" (more cycles through {', '.join(others)})" if others else ""))
    return problems, cycle_edges(as_edges)


def root_readers(edges: Iterable[Edge], root: str = COMPOSITION_ROOT) -> set[str]:
    """The modules that import the composition root, ``TYPE_CHECKING`` imports included."""
    return {edge.source for edge in edges if edge.target == root}


def violations(edges: list[Edge], exceptions: frozenset[tuple[str, str, str]] = KNOWN_EXCEPTIONS) -> list[str]:
    """Every broken rule not in ``exceptions``, and every exception that no longer breaks its rule."""
    problems = []
    cycle_exceptions = {(source, target) for rule, source, target in exceptions if rule == "cycle"}
    kept = [edge for edge in edges if (edge.source, edge.target) not in cycle_exceptions]
    for cycle, component in cyclic_components(kept):
        others = sorted(set(component) - set(cycle))
        problems.append("import cycle: " + " -> ".join(cycle)
                        + (f" (more cycles through {', '.join(others)})" if others else ""))
    broken = {("cycle", source, target) for source, target in cycle_edges(edges)}
    package_problems, package_broken = package_cycles(edges, exceptions)
    problems.extend(package_problems)
    broken |= {("package", source, target) for source, target in package_broken}
    for edge in http_violations(edges):
        broken.add(("http", edge.source, edge.target))
        if ("http", edge.source, edge.target) not in exceptions:
            problems.append(f"the HTTP layer imports the rest of gateway: {edge}")
    for rule, edge in layer_violations(edges):
        broken.add((rule, edge.source, edge.target))
        if (rule, edge.source, edge.target) not in exceptions:
            problems.append(f"{rule} must not import {edge.target}: {edge}")
    for rule, edge, problem in narrow_violations(edges):
        broken.add((rule, edge.source, edge.target))
        if (rule, edge.source, edge.target) not in exceptions:
            problems.append(problem)
    for exception in sorted(exceptions - broken):
        problems.append(f"KNOWN_EXCEPTIONS entry no longer breaks its rule (remove it): {exception}")
    return problems


# -- the rules on gateway itself -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway_edges() -> list[Edge]:
    return read_package()


def test_gateway_import_graph_keeps_its_rules(gateway_edges: list[Edge]) -> None:
    problems = violations(gateway_edges)
    assert not problems, "\n".join(problems)


def test_only_the_app_reads_the_composition_root(gateway_edges: list[Edge]) -> None:
    assert sorted(root_readers(gateway_edges) - ROOT_READERS) == [], "given a bundle (api/services.py) instead"
    # Nor through the app's state: only the app itself reads the runtime there (the driver reads the bundles).
    sources = {path: path.read_text() for path in (ROOT / PACKAGE).rglob("*.py")}
    assert [str(path.relative_to(ROOT)) for path, text in sources.items()
            if "state.runtime" in text and path != ROOT / PACKAGE / "api" / "app.py"] == []


def test_the_walker_sees_gateway_whole(gateway_edges: list[Edge]) -> None:
    """A guard on the guard: a walker that found nothing would pass every rule."""
    sources = {edge.source for edge in gateway_edges}
    assert {"gateway.cli", "gateway.api.app", "gateway.loop.engine", "gateway.observability.recorder"} <= sources
    pairs = _pairs(gateway_edges)
    assert ("gateway.api.app", "gateway.observability.metrics") in pairs  # from P import module
    assert ("gateway.loop.engine", "gateway.observability.tracing") in pairs  # from P.module import name
    assert ("gateway.observability.startup", "gateway.observability.shipper") in pairs  # inside a function


def test_every_package_has_a_layer_row() -> None:
    packages = {f"{PACKAGE}.{path.parent.name}" for path in (ROOT / PACKAGE).glob("*/__init__.py")}
    assert len(packages) > 10  # the guard sees the packages
    assert sorted(packages - {*LAYERS, HTTP_LAYER}) == []


def test_every_layer_and_exception_names_real_modules(gateway_edges: list[Edge]) -> None:
    modules = set(discover(ROOT, PACKAGE))
    for layer in LAYERS:
        assert any(_within(module, layer) for module in modules), layer
    for layer, allowances in NARROW.items():
        for package, allowed in allowances.items():
            assert layer in MAY_IMPORT and package in MAY_IMPORT[layer], (layer, package)  # narrows an allowance
            assert set(allowed) <= modules and all(_within(module, package) for module in allowed), allowed
    for _, source, target in KNOWN_EXCEPTIONS:
        assert source in modules and target in modules, (source, target)


def test_usage_and_governance_read_the_loop_only_through_its_events(gateway_edges: list[Edge]) -> None:
    """Metering and admission see the loop's events and result, never the engine: its module (or any other of
    the loop's) imported by either, even for types only, breaks the rule."""
    reads = {(edge.source, edge.target) for edge in gateway_edges
             if _within(edge.target, "gateway.loop") and unit(edge.source) in ("gateway.usage", "gateway.governance")}
    assert reads == {("gateway.usage.meter", "gateway.loop.events"),
                     ("gateway.governance.admission", "gateway.loop.events")}
    assert not [edge for edge in gateway_edges if edge.source == "gateway.loop.events"
                and _within(edge.target, "gateway.loop")]
    meter = ROOT / "gateway" / "usage" / "meter.py"
    again = meter.read_text() + "\nif TYPE_CHECKING:\n    from gateway.loop.engine import LoopState\n"
    edges = [edge for edge in gateway_edges if edge.source != "gateway.usage.meter"]
    edges += module_edges("gateway.usage.meter", False, again, set(discover(ROOT, PACKAGE)))
    assert [problem for problem in violations(edges) if "gateway.loop.engine" in problem] == [
        "gateway.usage may import only gateway.loop.events of gateway.loop: gateway.usage.meter -> "
        f"gateway.loop.engine (line {len(again.splitlines())}, TYPE_CHECKING)"]


# -- the walker on synthetic module sets --------------------------------------------------------------


def _graph(**modules: str) -> list[Edge]:
    """Edges of modules given as ``a__b="source"`` (``a.b``); a name ending in ``__init`` is a package."""
    sources = {}
    for key, source in modules.items():
        is_package = key.endswith("__init")
        name = key.removesuffix("__init").replace("__", ".")
        sources[name] = (source, is_package)
    return build_graph(sources)


def _pairs(edges: Iterable[Edge]) -> set[tuple[str, str]]:
    return {(edge.source, edge.target) for edge in edges}


def test_a_cycle_is_found_and_reported_as_a_path() -> None:
    edges = _graph(g__init="", g__a="from g import b\n", g__b="import g.c\n", g__c="from g.a import thing\n",
                   g__d="from g import a\n")
    assert cycles(edges) == [["g.a", "g.b", "g.c", "g.a"]]
    assert violations(edges, frozenset()) == ["import cycle: g.a -> g.b -> g.c -> g.a"]


def test_a_component_of_several_cycles_is_reported_whole() -> None:
    edges = _graph(g__a="import g.b\n", g__b="import g.a\nimport g.c\n", g__c="import g.b\n", g__d="import g.d\n")
    assert cyclic_components(edges) == [(["g.a", "g.b", "g.a"], ["g.a", "g.b", "g.c"])]
    assert violations(edges, frozenset()) == ["import cycle: g.a -> g.b -> g.a (more cycles through g.c)"]


def test_a_cycle_between_packages_is_found_though_no_module_is_on_one() -> None:
    edges = _graph(g__a__x="import g.b.y\n", g__b__z="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                   "    from g.a import w\n", g__a__w="", g__b__y="", g__c__v="import g.a.w\n")
    assert cycles(edges) == []
    assert violations(edges, frozenset()) == [
        "package cycle: g.a -> g.b -> g.a (g.a.x -> g.b.y (line 1), g.b.z -> g.a.w (line 3, TYPE_CHECKING))"]
    assert violations(edges, frozenset({("package", "g.b", "g.a")})) == []
    assert violations(_graph(g__a__x="", g__b__z=""), frozenset({("package", "g.b", "g.a")})) == [
        "KNOWN_EXCEPTIONS entry no longer breaks its rule (remove it): ('package', 'g.b', 'g.a')"]


def test_a_function_level_import_closes_a_cycle_and_type_checking_does_not() -> None:
    edges = _graph(g__a="import g.b\n", g__b="def f():\n    from g import a\n    return a\n")
    assert cycles(edges) == [["g.a", "g.b", "g.a"]]
    typed = _graph(g__a="import g.b\n", g__b="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import g.a\n")
    assert cycles(typed) == []
    assert [edge.typing_only for edge in typed if edge.source == "g.b"] == [True]


def test_relative_imports_are_resolved() -> None:
    edges = _graph(g__init="from . import a\n", g__a="from .sub import c\nfrom .sub.c import name\n",
                   g__sub__init="from .. import a\n", g__sub__c="from ..a import thing\nfrom . import d\n",
                   g__sub__d="from .c import x\n")
    assert _pairs(edges) == {("g", "g.a"), ("g.a", "g.sub.c"), ("g.sub", "g.a"), ("g.sub.c", "g.a"),
                             ("g.sub.c", "g.sub.d"), ("g.sub.d", "g.sub.c")}
    assert resolve_base("g.sub.c", False, 2, "a") == "g.a"
    assert resolve_base("g.sub", True, 1, None) == "g.sub"
    assert resolve_base("g.sub", True, 2, "x") == "g.x"
    with pytest.raises(ValueError):
        resolve_base("g.a", False, 3, None)


def test_imports_outside_the_package_and_of_names_are_placed_right() -> None:
    edges = _graph(g__init="", g__a="import os\nimport g.b.c\nfrom g.b import NAME\nfrom g import b as bee\n",
                   g__b__init="", g__b__c="")
    assert _pairs(edges) == {("g.a", "g.b.c"), ("g.a", "g.b")}


def test_an_upward_import_is_found_by_the_layer_table() -> None:
    edges = _graph(gateway__observability__access="from gateway.api.exchange import ACCESS\n",
                   gateway__api__exchange="from gateway.observability import access\n",
                   gateway__store__base="def f():\n    from gateway.loop import engine\n",
                   gateway__loop__engine="from gateway.store import base\n")
    found = [(rule, edge.source, edge.target) for rule, edge in layer_violations(edges)]
    assert found == [("gateway.observability", "gateway.observability.access", "gateway.api.exchange"),
                     ("gateway.store", "gateway.store.base", "gateway.loop.engine")]
    problems = violations(edges, frozenset())
    assert "gateway.observability must not import gateway.api.exchange: gateway.observability.access -> " \
           "gateway.api.exchange (line 1)" in problems


def test_the_http_layer_may_import_only_itself() -> None:
    edges = _graph(gateway__http__init="", gateway__http__server="from gateway.http import wire\nimport orjson\n",
                   gateway__http__wire="from gateway.api.exchange import request_id\n",
                   gateway__api__exchange="from gateway.http.wire import parse\n")
    assert [str(edge) for edge in http_violations(edges)] == ["gateway.http.wire -> gateway.api.exchange (line 1)"]
    assert violations(edges, frozenset()) == [
        "import cycle: gateway.api.exchange -> gateway.http.wire -> gateway.api.exchange",
        "the HTTP layer imports the rest of gateway: gateway.http.wire -> gateway.api.exchange (line 1)"]
    assert http_violations(_graph(gateway__api__app="from gateway.api import exchange\n",
                                  gateway__api__exchange="")) == []  # no HTTP layer: nothing to check


def test_a_handler_typed_against_the_root_reads_it() -> None:
    edges = _graph(gateway__api__runtime="", gateway__api__app="from gateway.api.runtime import Runtime\n",
                   gateway__api__chat__endpoint="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                   "    from gateway.api.runtime import Runtime\n",
                   gateway__api__services="from gateway.api import runtime as root\n",
                   gateway__api__driver="from gateway.api.services import Services\n")
    assert root_readers(edges) == {"gateway.api.app", "gateway.api.chat.endpoint", "gateway.api.services"}


def test_known_exceptions_silence_their_rule_and_must_stay_true() -> None:
    edges = _graph(gateway__store__base="from gateway.store import redis\n",
                   gateway__store__redis="from gateway.store import base\nfrom gateway.api import app\n",
                   gateway__api__app="")
    exceptions = frozenset({("cycle", "gateway.store.redis", "gateway.store.base"),
                            ("gateway.store", "gateway.store.redis", "gateway.api.app")})
    assert violations(edges, exceptions) == []
    fixed = _graph(gateway__store__base="", gateway__store__redis="from gateway.store import base\n",
                   gateway__api__app="")
    assert violations(fixed, exceptions) == [
        "KNOWN_EXCEPTIONS entry no longer breaks its rule (remove it): "
        "('cycle', 'gateway.store.redis', 'gateway.store.base')",
        "KNOWN_EXCEPTIONS entry no longer breaks its rule (remove it): "
        "('gateway.store', 'gateway.store.redis', 'gateway.api.app')"]


def test_a_narrowed_row_allows_only_its_modules_and_they_bring_in_nothing_else() -> None:
    narrow = {"g.usage": {"g.loop": ("g.loop.events",)}}
    fine = _graph(g__usage__meter="from g.loop.events import Finished\nfrom g.loop import events\n",
                  g__loop__events="from g.canonical import Usage\n", g__loop__engine="from g.loop import events\n",
                  g__canonical="")
    assert narrow_violations(fine, narrow) == []
    found = _graph(g__usage__meter="from g.loop.events import Finished\nfrom g.loop.engine import LoopState\n",
                   g__usage__admission="import g.loop\n", g__usage__typed="from typing import TYPE_CHECKING\n"
                   "if TYPE_CHECKING:\n    from g.loop import engine\n",
                   g__loop__init="", g__loop__events="from g.loop.engine import LoopEvent\n", g__loop__engine="",
                   g__other="from g.loop import engine\n")
    assert [problem for _, _, problem in narrow_violations(found, narrow)] == [
        "g.usage may import only g.loop.events of g.loop: g.usage.admission -> g.loop (line 1)",
        "g.usage may import only g.loop.events of g.loop: g.usage.meter -> g.loop.engine (line 2)",
        "g.usage may import only g.loop.events of g.loop: g.usage.typed -> g.loop.engine (line 3, TYPE_CHECKING)",
        "g.loop.events (g.usage may import it) imports more of g.loop: g.loop.events -> g.loop.engine (line 1)"]
