"""Every ``>>>`` example of the library runs (issue 45): each module holding one is imported by the name it installs
under (the layers as ``ektelo_ng.<layer>``, never by their folder names) and run by doctest, and every example line
of the sources is one doctest ran."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"ektelo_ng": "ektelo_ng", "plans": "ektelo_ng.plans", "operators": "ektelo_ng.operators",
            "gateway": "ektelo_ng.gateway", "kernel": "ektelo_ng.kernel"}


def _modules_with_examples() -> list[tuple[str, int]]:
    """(import name, number of ``>>>`` lines) of every module whose source holds an example."""
    found = []
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            examples = sum(line.lstrip().startswith(">>>") for line in path.read_text().splitlines())
            if examples:
                parts = [part for part in path.relative_to(ROOT / folder).with_suffix("").parts if part != "__init__"]
                found.append((".".join([package, *parts]), examples))
    return found


MODULES = _modules_with_examples()


def test_the_library_has_examples_and_the_front_door_is_one_of_them():
    assert sum(count for _, count in MODULES) >= 50
    assert "ektelo_ng" in dict(MODULES)


@pytest.mark.parametrize(("name", "examples"), MODULES, ids=[name for name, _ in MODULES])
def test_every_example_of_the_module_runs(name, examples):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    ran = 0
    for test in finder.find(module, name):
        if Path(test.filename or "").resolve() != Path(module.__file__).resolve():
            continue  # an example of a name it imports is its own module's
        runner.run(test)
        ran += len(test.examples)
    failed = runner.summarize(verbose=False).failed
    assert failed == 0, f"{failed} of {name}'s examples failed (doctest's report above)"
    assert ran == examples, f"{name}: {examples} example lines, but doctest ran {ran}: some are not in a docstring"
