"""``ektelo-ng example-data``: write the made-up tables the README's commands read (ages.csv, people.csv and
people's domain.json), so every example runs as written on a fresh clone."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT_ROWS = 5_000
FILES = ("ages.csv", "people.csv", "domain.json")


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "example-data",
        help="write ages.csv, people.csv and domain.json: the made-up tables the README's examples read",
        description=(
            "Write made-up tables for trying the README's commands: ages.csv (one column, age 0..99), people.csv "
            "(age 0..99, sex 0..1, region 0..4, with some dependence between them: ektelo_ng.example_tables.people) "
            "and domain.json (people.csv's domain). Existing files are left alone: the command refuses instead."
        ),
    )
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"records in each table (default {DEFAULT_ROWS})")
    parser.add_argument("--out", default=".", help="the folder to write them in (default: the current one)")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ektelo_ng.example_tables import people

    folder = Path(args.out)
    if not folder.is_dir():
        raise ValueError(f"--out {folder}: no such folder; make it first, or leave --out out for the current one")
    taken = [name for name in FILES if (folder / name).exists()]
    if taken:
        raise ValueError(f"{', '.join(str(folder / n) for n in taken)} already exist{'s' if len(taken) == 1 else ''}: "
                         "nothing was written; remove them or choose another --out")
    columns, domain = people(args.rows, args.seed)  # checks rows
    _write_csv(folder / "ages.csv", {"age": columns["age"]})
    _write_csv(folder / "people.csv", columns)
    (folder / "domain.json").write_text(json.dumps(domain) + "\n")
    print(f"wrote {args.rows} records each to {folder / 'ages.csv'} and {folder / 'people.csv'} (domain "
          f"{', '.join(f'{k}={v}' for k, v in domain.items())}, also in {folder / 'domain.json'})")
    return 0


def _write_csv(path: Path, columns: dict) -> None:
    with open(path, "w") as handle:
        handle.write(",".join(columns) + "\n")
        handle.writelines(",".join(map(str, row)) + "\n" for row in zip(*(c.tolist() for c in columns.values())))
