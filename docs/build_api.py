"""Build the API reference (HTML) from the docstrings with pdoc: ``python docs/build_api.py [OUT]`` (default
docs/api, not kept in git). Needs the docs extra: ``pip install -e ".[docs]"``. CI builds it on every run."""

from __future__ import annotations

import sys
from pathlib import Path

MODULES = ["ektelo_ng", "ektelo_ng.kernel", "ektelo_ng.gateway", "ektelo_ng.operators", "ektelo_ng.plans.registry",
           "ektelo_ng.plans.common"]


def main(out: Path) -> int:
    try:
        import pdoc
    except ImportError:
        print("the API reference needs pdoc: pip install -e '.[docs]'", file=sys.stderr)
        return 2
    pdoc.pdoc(*MODULES, output_directory=out)
    pages = sorted(out.rglob("*.html"))
    print(f"API reference: {len(pages)} pages in {out} (open {out / 'index.html'})")
    return 0 if len(pages) > len(MODULES) else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "api"))
