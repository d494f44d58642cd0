"""The advisor's measured evidence: DPBench replay results condensed to operators/advice/dpbench_evidence.json
(the condensing itself is ektelo_ng.dpbench.condense, where its rules are described).

    python benchmarks/build_evidence.py --data-dir ../shared/dpbench \\
        --replay OUT1 COMMIT "the command that wrote OUT1/results.csv" [--replay ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ektelo_ng.dpbench.condense import build, dumps

OUT = Path(__file__).resolve().parents[1] / "operators" / "advice" / "dpbench_evidence.json"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replay", nargs=3, action="append", required=True, metavar=("DIR", "COMMIT", "COMMAND"),
                        help="a replay's output folder (or its results.csv), the code commit it ran on and the "
                             "command that wrote it")
    parser.add_argument("--data-dir", required=True, help="the DPBench data folder (for the shape descriptors)")
    parser.add_argument("--out", default=str(OUT), help=f"where the table goes (default: {OUT})")
    args = parser.parse_args(argv)
    text = dumps(build([tuple(r) for r in args.replay], args.data_dir))
    Path(args.out).write_text(text)
    print(f"{args.out}: {len(text):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
