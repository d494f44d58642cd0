"""The trusted kernel stays small enough to audit: under 3,000 lines of code, docstrings included (issue #15)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

KERNEL = Path(__file__).resolve().parents[1] / "kernel"


def test_the_kernel_has_at_most_3000_lines_counted_with_docstrings():
    lines = [line for path in sorted(KERNEL.rglob("*.py")) for line in path.read_text().splitlines()
             if not re.match(r"^\s*(#|$)", line)]
    assert len(lines) <= 3000, f"kernel/ has {len(lines)} lines of code and docstrings; the audit budget is 3,000"


def test_the_trusted_surface_lists_every_kernel_module():
    listed = (KERNEL / "README.md").read_text()
    for path in sorted(KERNEL.rglob("*.py")):
        if path.name != "__init__.py":
            assert str(path.relative_to(KERNEL.parent)) in listed, f"{path} is missing from kernel/README.md"


LAYERS = ("kernel", "gateway", "operators", "plans", "ektelo_ng")  # bottom to top (DESIGN.md)


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
