"""The trusted kernel stays readable in a day: a budget of statements (docstrings and comments free), formatted by a
standard formatter, every function listed in kernel/README.md with the section that argues for it, every request
type answered by one operation, every mechanism opening with its card (issue 31)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

KERNEL = Path(__file__).resolve().parents[1] / "kernel"
ROOT = KERNEL.parent

STATEMENT_BUDGET = 2800
"""About 20% above what the sealed kernel needs (2,338 statements when it was set): room for a fix, not a feature."""


def statements(path: Path) -> int:
    """Statements in a file's syntax tree, docstrings (and comments, which the tree does not hold) not counted."""
    count = 0
    for node in ast.walk(ast.parse(path.read_text())):
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        count += isinstance(node, ast.stmt) and not docstring
    return count


def test_the_kernel_is_within_its_statement_budget():
    total = sum(statements(path) for path in KERNEL.rglob("*.py"))
    assert total <= STATEMENT_BUDGET, f"kernel/ has {total} statements; its budget is {STATEMENT_BUDGET}"


@pytest.mark.skipif(shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"],
                    capture_output=True).returncode != 0, reason="ruff is not installed (the test extra has it)")
def test_the_kernel_is_laid_out_by_the_formatter():
    done = subprocess.run([sys.executable, "-m", "ruff", "format", "--check", str(KERNEL)], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def defined(path: Path) -> set[str]:
    """Every function and method a module defines: "function" and "Class.method"."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{f.name}" for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    out = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def check_link(link: str, base: Path) -> None:
    target, _, anchor = link.partition("#")
    page = (base / target).resolve()
    assert page.is_file(), f"{link}: no such page"
    assert not anchor or anchor in anchors(page), f"{link}: {page.name} has no section {anchor!r}"


def readme_sections() -> list[tuple[list[Path], list[tuple[set[str], list[str]]]]]:
    """(modules, [(names, links)] per bullet) for every '### ' heading of kernel/README.md."""
    sections, bullets, modules = [], None, None
    for line in (KERNEL / "README.md").read_text().splitlines():
        if line.startswith("### "):
            first, *others = line[4:].split(":", 1)[0].split(", ")
            folder = (ROOT / first).parent
            modules = [ROOT / first] + [p for o in others for p in
                                        (sorted((folder / o).glob("*.py")) if o.endswith("/") else [folder / o])]
            bullets = []
            sections.append((modules, bullets))
        elif bullets is not None and line.startswith("- "):
            bullets.append([line])
        elif bullets and line.startswith("  "):
            bullets[-1].append(line)
    return [(modules, [(set(re.findall(r"`([A-Za-z_][\w.]*)`", " ".join(b).split("](")[0])),
                        re.findall(r"\]\(([^)]+)\)", " ".join(b))) for b in bullets]) for modules, bullets in sections]


def test_the_readme_lists_every_kernel_function_with_the_section_that_argues_for_it():
    listed_modules = set()
    for modules, bullets in readme_sections():
        known = {}
        for path in modules:
            assert path.is_file(), f"kernel/README.md names {path.relative_to(ROOT)}, which does not exist"
            listed_modules.add(path)
            for name in defined(path):
                known[name] = known[f"{path.stem}.{name}"] = name
        named = set()
        for names, links in bullets:
            assert links, f"a bullet naming {sorted(names)} has no link to its argument"
            for link in links:
                check_link(link, KERNEL)
            unknown = {n for n in names if n not in known and n != "single_threaded_blas"}
            assert not unknown, f"kernel/README.md lists {sorted(unknown)}, not defined in {[p.name for p in modules]}"
            named |= {known[n] for n in names if n in known}
        missing = set(known.values()) - named
        assert not missing, f"kernel/README.md does not list {sorted(missing)} of {[p.name for p in modules]}"
    unlisted = [p for p in KERNEL.rglob("*.py") if defined(p) and p not in listed_modules]
    assert not unlisted, f"modules missing from kernel/README.md: {unlisted}"
    for path in KERNEL.rglob("*.py"):
        assert str(path.relative_to(ROOT)) in (KERNEL / "README.md").read_text() or path.name == "__init__.py" \
            or path in listed_modules, f"{path} is not mentioned in kernel/README.md"


def test_every_request_type_is_answered_by_one_operation():
    from typing import get_args

    from ektelo_ng.kernel import protocol as p
    from ektelo_ng.kernel.service import OPERATIONS

    assert set(OPERATIONS) == set(get_args(get_args(p.Request)[0]))


CARD = ("Neighbours:", ("Sensitivity:", "Stability:"), "Cost:", "Reads data:", "May fail before the charge:",
        "Proof: docs/privacy/")


@pytest.mark.parametrize("module", sorted({p.stem for p in (KERNEL / "mechanisms").glob("*.py")}
                                          - {"__init__", "release"}) + ["transforms"])
def test_every_mechanism_opens_with_its_card(module):
    path = KERNEL / "mechanisms" / f"{module}.py" if module != "transforms" else KERNEL / "transforms.py"
    doc = ast.get_docstring(ast.parse(path.read_text()))
    card = doc[doc.index("Card"):]
    for field in CARD:
        assert any(f"- {f}" in card for f in ((field,) if isinstance(field, str) else field)), \
            f"{path.name}'s card has no {field!r}"
    for link in re.findall(r"Proof: (docs/privacy/\S+)", card):
        check_link(link.rstrip(")."), ROOT)
    assert len(card.splitlines()) <= 16, f"{path.name}'s card takes {len(card.splitlines())} lines: an auditor reads it"


LAYERS = ("kernel", "gateway", "operators", "plans", "ektelo_ng")  # bottom to top (docs/design.md#layers)


def imports(layer: str):
    """(path, absolute module, imported names, written absolutely) of every from-import in a layer's folder,
    relative imports resolved against the file's package (ektelo_ng.<folders>)."""
    for path in sorted((KERNEL.parent / layer).rglob("*.py")):
        package = ["ektelo_ng", *path.parent.relative_to(KERNEL.parent).parts]
        package = package[1:] if layer == "ektelo_ng" else package  # ektelo_ng/ is itself the package
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join([*base, *(node.module or "").split(".")]).strip(".")
                yield path, module, [a.name for a in node.names], node.level == 0
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    yield path, alias.name, [], True


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] in LAYERS[:-1]:
        return parts[0]  # a bare folder name: never allowed (a user's module of that name would shadow it)
    if parts[0] == "ektelo_ng":
        return parts[1] if len(parts) > 1 and parts[1] in LAYERS[:-1] else "ektelo_ng"
    return None


def test_client_code_imports_no_private_kernel_names():
    for layer in ("operators", "plans", "ektelo_ng"):
        for path, module, names, _ in imports(layer):
            if layer_of(module) == "kernel":
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                assert not private, f"{path} imports private kernel names {private}"


def test_the_gateway_sits_between_the_client_operators_and_the_kernel():
    """gateway/ imports only the kernel's public names and itself: it passes request text to kernels, and the
    privacy argument never depends on it (kernel/README.md)."""
    for path, module, names, _ in imports("gateway"):
        assert layer_of(module) in (None, "kernel", "gateway"), f"{path} imports {module}, a layer above the gateway"
        if layer_of(module) == "kernel":
            assert not [n for n in names if n.startswith("_")], f"{path} imports a private kernel name"


def test_imports_only_point_down_the_layers():
    """Inside the layers' folders the library is imported relatively (so kernel/ imports only itself, and no
    layer names the front door); no layer imports one above it; nothing names a bare folder such as
    ``kernel``, which a user's module of the same name would shadow."""
    for rank, layer in enumerate(LAYERS):
        for path, module, _, absolute in imports(layer):
            target = layer_of(module)
            if target is None:
                continue
            assert module.split(".")[0] == "ektelo_ng", f"{path} imports the bare {module}"
            assert LAYERS.index(target) <= rank, f"{path} ({layer}) imports {module}, a layer above it"
            assert layer == "ektelo_ng" or not absolute, f"{path} imports {module} by the front door's name"
