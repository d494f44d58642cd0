"""Proof pins: every section of docs/privacy/ that argues for kernel code, pinned to the commit at which it was last
read against that code, with the git blob hash of each module it covers as it was then (docs/privacy/pins.json).
tests/test_proof_pins.py fails when a pinned module changes, naming the sections to re-read; after the review,
re-pin them:

    python -m tests.proof_pins                          # which sections are stale, and why
    python -m tests.proof_pins --repin arithmetic.md#cost requests.md#deadlines --commit HEAD
    python -m tests.proof_pins --repin-all --commit HEAD  # after reading every stale section

Which modules a section covers is read from the kernel's own index: a bullet of kernel/README.md links the
functions it names (in the modules of its heading that define them) to sections, and a mechanism's card links its
module to its proof ("- Proof: docs/privacy/..."); every other section of a page covers what the page's linked
sections cover. A blob hash is git's (``git hash-object``), so
the pins can be checked against a checkout without git.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

from tests.test_kernel_size import anchors, defined, readme_sections

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "kernel"
PINS = ROOT / "docs" / "privacy" / "pins.json"


def blob(path: Path) -> str:
    """git's blob hash of a file's bytes."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _section(link: str, base: Path) -> str:
    """'laplace.md#guarantee' for a link to docs/privacy/laplace.md#guarantee written relative to ``base``."""
    page, _, anchor = link.partition("#")
    name = str((base / page).resolve().relative_to(ROOT / "docs" / "privacy"))
    return f"{name}#{anchor}" if anchor else name


def coverage() -> dict[str, set[str]]:
    """Section -> the kernel modules (paths from the repository's root) it argues for: those that link to it, and
    for a section no code links to (a page's neighbouring relation, its floats, ...) every module its page's
    linked sections cover."""
    linked = _linked()
    out = dict(linked)
    for page in sorted({s.partition("#")[0] for s in linked}):
        modules = set().union(*(m for s, m in linked.items() if s.partition("#")[0] == page))
        path = ROOT / "docs" / "privacy" / page
        title = anchors_of_title(path)
        for anchor in sorted(anchors(path) - title):
            out.setdefault(f"{page}#{anchor}", modules)
    return out


def anchors_of_title(page: Path) -> set[str]:
    """The anchor of a page's title (its '# ' heading), which names the page, not a section."""
    first = next((line for line in page.read_text().splitlines() if line.startswith("# ")), "")
    return {re.sub(r"[^\w\- ]", "", first[2:].strip().lower()).replace(" ", "-")}


def _linked() -> dict[str, set[str]]:
    """Section -> the kernel modules that link to it."""
    out: dict[str, set[str]] = {}
    privacy = ROOT / "docs" / "privacy"
    for modules, bullets in readme_sections():
        for names, links in bullets:
            owners = {m for m in modules if names & ({*defined(m), *(f"{m.stem}.{n}" for n in defined(m))})}
            for link in links:
                if (KERNEL / link.partition("#")[0]).resolve().parent == privacy:
                    out.setdefault(_section(link, KERNEL), set()).update(
                        str(m.relative_to(ROOT)) for m in (owners or modules))
    for path in sorted(KERNEL.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        for line in doc.splitlines():
            if line.startswith("- Proof:"):
                for link in re.findall(r"docs/privacy/[\w./-]+(?:#[\w-]+)?", line):
                    out.setdefault(_section(link.removeprefix("docs/privacy/"), privacy), set()).add(
                        str(path.relative_to(ROOT)))
    return out


def load() -> dict:
    return json.loads(PINS.read_text()) if PINS.is_file() else {"sections": {}}


def stale(pins: dict | None = None) -> dict[str, list[str]]:
    """Section -> why it must be re-read: a pinned module changed or is gone, or the section now covers a module
    it was not pinned with (or is not pinned at all)."""
    pins = load() if pins is None else pins
    out: dict[str, list[str]] = {}
    for section, modules in sorted(coverage().items()):
        pinned = pins["sections"].get(section)
        if pinned is None:
            out[section] = ["not pinned"]
            continue
        reasons = [f"{m} changed since {pinned['commit'][:12]}" for m, h in sorted(pinned["modules"].items())
                   if (ROOT / m).is_file() and blob(ROOT / m) != h]
        reasons += [f"{m} is gone" for m in sorted(pinned["modules"]) if not (ROOT / m).is_file()]
        reasons += [f"now covers {m}" for m in sorted(modules - set(pinned["modules"]))]
        if reasons:
            out[section] = reasons
    return out


def repin(sections: list[str], commit: str) -> dict:
    """The pins with ``sections`` pinned to ``commit`` and the blobs at that commit of the modules they cover (a
    module changed since, or not committed, is flagged at once); sections no longer linked from the kernel are
    dropped."""
    pins, covered = load(), coverage()
    unknown = [s for s in sections if s not in covered]
    if unknown:
        raise SystemExit(f"no kernel code links to {unknown}; sections: {sorted(covered)}")
    full = _git("rev-parse", commit)
    for section in sections:
        pins["sections"][section] = {"commit": full, "modules": {m: _git("rev-parse", f"{full}:{m}")
                                                                 for m in sorted(covered[section])}}
    pins["sections"] = {s: pins["sections"][s] for s in sorted(pins["sections"]) if s in covered}
    return pins


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repin", nargs="+", metavar="SECTION", default=[],
                        help="sections re-read against the code as it is now (e.g. laplace.md#guarantee)")
    parser.add_argument("--repin-all", action="store_true", help="every stale section (after reading them all)")
    parser.add_argument("--commit", default="HEAD", help="the commit the review read (default: HEAD)")
    args = parser.parse_args(argv)
    chosen = list(stale()) if args.repin_all else args.repin
    if chosen:
        PINS.write_text(json.dumps(repin(chosen, args.commit), indent=1) + "\n")
        print(f"{PINS.relative_to(ROOT)}: pinned {', '.join(chosen)}")
    for section, reasons in stale().items():
        print(f"{section}: {'; '.join(reasons)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
