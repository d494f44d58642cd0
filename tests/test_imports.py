"""The import graph (tests/import_graph.py, read from the source): imports only point down the layers, no cycle
appears between modules or folders beyond the known ones below, which may only shrink, and no function is left
that nothing uses (docs/house.md reports the graph; ``python tests/import_graph.py`` prints it)."""

from __future__ import annotations

import textwrap

from tests import import_graph as graph

KNOWN_MODULE_CYCLES = [
    # plans.registry lists the Advised plan; Advised runs a catalog plan by name (a late import of the registry).
    ("ektelo_ng.plans.advised", "ektelo_ng.plans.registry"),
]
KNOWN_FOLDER_CYCLES = [
    # cli.py sits beside the modules the commands use (grammar, session, figures, workload_spec), and
    # commands/plan_child.py imports cli.guarded; dpbench/ uses session and figures.
    ("ektelo_ng", "ektelo_ng.commands", "ektelo_ng.dpbench"),
    # kernel/matrix and kernel/mechanisms use kernel/limits, noise and privacy; kernel/measurements, protocol,
    # service and transforms use them.
    ("ektelo_ng.kernel", "ektelo_ng.kernel.matrix", "ektelo_ng.kernel.mechanisms"),
]


def _check(found: list[tuple[str, ...]], known: list[tuple[str, ...]], kind: str, edges: list[str]) -> None:
    new = [c for c in found if not any(set(c) <= set(k) for k in known)]
    assert not new, f"new {kind} cycle(s) {new}: an import closes a loop; the imports among them:\n" + "\n".join(
        e for e in edges if any(all(part in e for part in c[:2]) for c in new))
    fixed = [k for k in known if k not in found]
    assert not fixed, (f"the known {kind} cycle(s) {fixed} are gone or smaller (now {found}): well done; take them "
                       f"out of KNOWN_{kind.upper()}_CYCLES in {__file__} (or replace them by what is left)")


def test_no_import_points_up_the_layers():
    up = graph.upward(graph.imports())
    assert not up, "imports pointing up the layers (kernel < gateway < operators < plans < ektelo_ng):\n" + "\n".join(
        f"{e.source}:{e.line} -> {e.target}" for e in up)


def test_no_module_cycle_beyond_the_known_ones():
    edges = graph.imports()
    _check(graph.cycles(graph.module_graph(edges)), KNOWN_MODULE_CYCLES, "module",
           [f"{e.source}:{e.line} -> {e.target}{' (late)' if e.late else ''}" for e in edges])


def test_no_folder_cycle_beyond_the_known_ones():
    known = graph.modules()
    edges = graph.imports(known)
    _check(graph.cycles(graph.folder_graph(edges, known)), KNOWN_FOLDER_CYCLES, "folder",
           [f"{e.source}:{e.line} -> {e.target}{' (late)' if e.late else ''}" for e in edges])


def test_no_function_is_left_that_nothing_uses():
    dead = graph.dead_functions(graph.modules())
    assert not dead, "functions nothing uses (delete them, or use them):\n" + "\n".join(dead)


def _package(tmp_path, files: dict[str, str]) -> dict:
    known = {}
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        parts = name.removesuffix(".py").split("/")
        known[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return known


def test_the_graph_sees_late_imports_relative_imports_and_folder_loops(tmp_path):
    """On a small package: a loop closed by a function-level import; a sub-folder using its parent's module, a
    loop only when a module of the parent (not its __init__, which assembles the package) uses the sub-folder."""
    files = {
        "pkg/__init__.py": "from .sub import thing\n",
        "pkg/a.py": "def f():\n    from . import b\n",
        "pkg/b.py": "from .a import f\n",
        "pkg/sub/__init__.py": "from .deep import g\nthing = 1\n",
        "pkg/sub/deep.py": "from ..b import f as g\n",
    }
    known = _package(tmp_path, files)
    edges = graph.imports(known)
    assert {(e.source, e.target, e.late) for e in edges} == {
        ("pkg", "pkg.sub", False), ("pkg.a", "pkg.b", True), ("pkg.b", "pkg.a", False),
        ("pkg.sub", "pkg.sub.deep", False), ("pkg.sub.deep", "pkg.b", False)}
    assert graph.cycles(graph.module_graph(edges)) == [("pkg.a", "pkg.b")]
    assert graph.cycles(graph.folder_graph(edges, known)) == []
    assert graph.cycles(graph.folder_graph(edges, known, assembly=True)) == [("pkg", "pkg.sub")]
    known = _package(tmp_path, {**files, "pkg/c.py": "import pkg.sub.deep\n"})
    assert graph.cycles(graph.folder_graph(graph.imports(known), known)) == [("pkg", "pkg.sub")]
