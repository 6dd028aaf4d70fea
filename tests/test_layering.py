"""The allowed import directions between graphtier's layers, checked on the source.

    graphtier.v1 <- graphtier.contract <- data plane (graphtier.service) <- daemon (graphtier.service.daemon)
                                                                          <- launcher (graphtier.launcher)

The contract is shared by the daemon and its clients, so it imports only itself and the
generated messages; the data plane imports neither the daemon nor the launcher; the launcher
talks to the daemon over gRPC and never imports it. Beyond the layers, no two packages import
each other, directly or round a longer circle: a package here is its own modules (its
`__init__` and its `.py` files, not its sub-packages), and an edge is any import of one of
graphtier's modules, at module level or inside a function, parent and child included.
Failures name each offending import as `module:line imports target`, which says what to move.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {  # import name -> folder, as setup.py maps them
    "graphtier.contract": ROOT / "contract",
    "graphtier.service": ROOT / "service",
    "graphtier.launcher": ROOT / "launcher",
    "graphtier.v1": ROOT / "proto" / "graphtier" / "v1",
}
DAEMON = "graphtier.service.daemon"


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def package(self) -> str:
        """The package whose own module this is: itself for an `__init__`, else its parent."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Edge:
    source: Module
    line: int
    target: str

    def __str__(self) -> str:
        return f"{self.source.name}:{self.line} imports {self.target}"


def _modules() -> dict[str, Module]:
    found = {}
    for name, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            module = ".".join([name, *parts])
            found[module] = Module(module, path, is_package)
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module `name` refers to: itself, or the nearest enclosing module (for `pkg.attr`)."""
    while name not in MODULES:
        if "." not in name:
            return None
        name = name.rpartition(".")[0]
    return name


def _imported_names(node: ast.AST, module: Module) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.package.split(".")
            base = base[: len(base) - (node.level - 1)]
            origin = ".".join(base + ([node.module] if node.module else []))
        else:
            origin = node.module or ""
        return [origin, *(f"{origin}.{alias.name}" for alias in node.names)]
    return []


def _edges() -> list[Edge]:
    edges = []
    for module in MODULES.values():
        tree = ast.parse(module.path.read_text(), str(module.path))
        for node in ast.walk(tree):
            targets = {_resolve(name) for name in _imported_names(node, module) if name.startswith("graphtier.")}
            edges += [Edge(module, node.lineno, t) for t in sorted(filter(None, targets)) if t != module.name]
    return edges


EDGES = _edges()


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _layer(name: str) -> str:
    if _within(name, "graphtier.v1"):
        return "v1"
    if _within(name, "graphtier.contract"):
        return "contract"
    if _within(name, DAEMON):
        return "daemon"
    if _within(name, "graphtier.service"):
        return "data plane"
    return "launcher"


ALLOWED = {  # what each layer may import
    "v1": {"v1"},
    "contract": {"contract", "v1"},
    "data plane": {"data plane", "contract", "v1"},
    "daemon": {"daemon", "data plane", "contract", "v1"},
    "launcher": {"launcher", "data plane", "contract", "v1"},
}


def _report(title: str, edges: list[Edge]) -> str:
    return f"{title}:\n" + "\n".join(f"  {edge}" for edge in edges)


def test_every_layer_imports_only_the_layers_below_it() -> None:
    wrong = [e for e in EDGES if _layer(e.target) not in ALLOWED[_layer(e.source.name)]]
    assert not wrong, _report(
        "imports against the layering (v1 <- contract <- data plane <- daemon, launcher; the launcher never "
        "imports the daemon)",
        wrong,
    )


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_package_imports_a_package_that_imports_it_back() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    by_pair: dict[tuple[str, str], list[Edge]] = defaultdict(list)
    for edge in EDGES:
        source, target = edge.source.package, MODULES[edge.target].package
        graph[target]
        if source != target:
            graph[source].add(target)
            by_pair[source, target].append(edge)
    cycles = _cycles(graph)
    message = []
    for component in cycles:
        members = set(component)
        inside = [e for (s, t), edges in sorted(by_pair.items()) if s in members and t in members for e in edges]
        message.append(_report(f"packages importing each other: {', '.join(component)}", inside))
    assert not cycles, "\n".join(message)


def test_the_check_sees_every_layer() -> None:
    """The checks above pass vacuously if the folders move: make sure they read real code."""
    layers = {_layer(name) for name in MODULES}
    assert layers == set(ALLOWED), layers
    assert any(_layer(e.source.name) == "daemon" and _layer(e.target) == "data plane" for e in EDGES)
    assert any(_layer(e.source.name) == "launcher" and _layer(e.target) == "contract" for e in EDGES)
