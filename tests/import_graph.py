"""The library's import graph, read from the source with ``ast``: module -> module and folder -> folder, every
import counted (top-level and late, function-level ones alike), the folders mapped to their installed names as
pyproject.toml's ``package-dir`` maps them (``kernel/`` -> ``ektelo_ng.kernel``). tests/test_imports.py checks it;
``python tests/import_graph.py`` prints what docs/house.md reports: cycles, upward imports, late imports, names
defined in several modules, and functions nobody names."""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("kernel", "gateway", "operators", "plans", "ektelo_ng")
"""Bottom to top (docs/design.md#layers): a module may import its own layer and the layers below it."""


@lru_cache(maxsize=None)
def _tree(path: Path, text: str) -> ast.Module:
    return ast.parse(text)


def syntax(path: Path) -> ast.Module:
    """The syntax tree of a file, parsed once per content."""
    return _tree(path, path.read_text())


def folders() -> dict[str, str]:
    """Installed package name -> folder of the repository, from pyproject.toml's package-dir."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {"ektelo_ng": "ektelo_ng", **config["package-dir"]}


def modules() -> dict[str, Path]:
    """Every library module by its installed dotted name (a package by the name of its __init__)."""
    out = {}
    for package, folder in folders().items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            out[".".join((package, *parts))] = path
    return out


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    late: bool  # inside a function: runs when called, which is how a cycle can hide


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imports(known: dict[str, Path] | None = None) -> list[Import]:
    """Every import between library modules; ``from a import b`` points at module a.b when b is a module."""
    known = modules() if known is None else known
    out = []
    for name, path in known.items():
        tree = syntax(path)
        late_lines = {n.lineno for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                      for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    package = _package_of(name, path).split(".")
                    base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for target in dict.fromkeys(targets):
                while target and target not in known and "." in target:
                    target = target.rpartition(".")[0]  # import a.b.c of a name inside module a.b
                if target in known and target != name:
                    out.append(Import(name, target, node.lineno, node.lineno in late_lines))
    return out


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS[:-1] else "ektelo_ng"


def folder(module: str, known: dict[str, Path]) -> str:
    """The package a module sits in (a package's __init__ sits in the package itself)."""
    return module if known[module].name == "__init__.py" else module.rpartition(".")[0]


def module_graph(edges: list[Import]) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_edges_from((e.source, e.target) for e in edges)
    return graph


def folder_graph(edges: list[Import], known: dict[str, Path], assembly: bool = False) -> nx.DiGraph:
    """Folder -> folder. A package's __init__ importing its own sub-packages is how a package is assembled (Python
    runs a parent's __init__ before any child of it anyway), so that edge is left out unless ``assembly``: a
    folder cycle is then a folder's modules using a sub-folder whose modules use the folder's. (A child importing
    its parent's __init__ still shows, as a module cycle.)"""
    graph = nx.DiGraph()
    for e in edges:
        a, b = folder(e.source, known), folder(e.target, known)
        if a != b and (assembly or known[e.source].name != "__init__.py" or not b.startswith(f"{a}.")):
            graph.add_edge(a, b)
    return graph


def cycles(graph: nx.DiGraph) -> list[tuple[str, ...]]:
    """The graph's strongly connected components of two or more nodes, each sorted: every cycle lies in one."""
    return sorted(tuple(sorted(c)) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def upward(edges: list[Import]) -> list[Import]:
    return [e for e in edges if LAYERS.index(layer(e.target)) > LAYERS.index(layer(e.source))]


def defined_names(known: dict[str, Path]) -> dict[str, list[str]]:
    """Top-level class, function and constant names -> the modules that define them (not merely import them)."""
    out: dict[str, list[str]] = {}
    for name, path in known.items():
        for node in syntax(path).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                names = [t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                         if isinstance(t, ast.Name)]
            else:
                continue
            for n in names:
                if not n.startswith("__") and n != "_" and name not in out.get(n, []):
                    out.setdefault(n, []).append(name)
    return {n: ms for n, ms in sorted(out.items()) if len(ms) > 1}


SEARCHED = ("ektelo_ng", "kernel", "gateway", "operators", "plans", "tests", "benchmarks", "docs", "examples", ".ci")


def referenced_names() -> set[str]:
    """Every name the repository's code uses (names, attributes, imports, identifier strings, for getattr) and
    every word of its Markdown pages (a documented public function is in use)."""
    names: set[str] = set()
    for entry in SEARCHED:
        for path in sorted((ROOT / entry).rglob("*.py")):
            for node in ast.walk(syntax(path)):
                if isinstance(node, ast.Name):
                    names.add(node.id)
                elif isinstance(node, ast.Attribute):
                    names.add(node.attr)
                elif isinstance(node, ast.alias):
                    names.add(node.name.rpartition(".")[2])
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                    names.add(node.value)
    for page in [ROOT / "README.md", *sorted(p for e in SEARCHED for p in (ROOT / e).rglob("*.md"))]:
        names |= set(re.findall(r"[A-Za-z_]\w*", page.read_text()))
    return names


def dead_functions(known: dict[str, Path]) -> list[str]:
    """Functions and methods whose name nothing uses (dunders, and functions a decorator registers, excepted)."""
    used = referenced_names()
    return [f"{path.relative_to(ROOT)}:{node.lineno} {node.name}" for path in known.values()
            for node in ast.walk(syntax(path))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("__")
            and not node.decorator_list and node.name not in used]


def report() -> str:
    known = modules()
    edges = imports(known)
    lines = [f"{len(known)} modules, {len({(e.source, e.target) for e in edges})} module pairs imported, "
             f"{sum(e.late for e in edges)} late imports"]
    lines += ["", "module cycles:"] + [f"  {' <-> '.join(c)}" for c in cycles(module_graph(edges))]
    lines += ["", "folder cycles:"] + [f"  {' <-> '.join(c)}" for c in cycles(folder_graph(edges, known))]
    lines += ["", "folder cycles, counting a package's __init__ importing its sub-packages:"]
    lines += [f"  {' <-> '.join(c)}" for c in cycles(folder_graph(edges, known, assembly=True))]
    lines += ["", "upward imports:"] + [f"  {e.source}:{e.line} -> {e.target}" for e in upward(edges)]
    lines += ["", "late imports:"] + [f"  {e.source}:{e.line} -> {e.target}" for e in edges if e.late]
    lines += ["", "public names defined in 2+ modules:"]
    lines += [f"  {n}: {', '.join(ms)}" for n, ms in defined_names(known).items() if not n.startswith("_")]
    lines += ["", "functions nothing uses:"] + [f"  {d}" for d in dead_functions(known)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
