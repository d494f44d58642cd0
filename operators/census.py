"""The 2010 Census Summary File 1 person tables as workloads: HDMM's SF1 and SF1+.

The tables are the ones the HDMM journal paper releases (section 2, Examples 2 to 10): P1, P3, P4, P5, P8 to P12,
P12A to P12I, PCT12 and PCT12A to PCT12O, as the Census Bureau's SF1 technical documentation defines them. On the
Person domain (race as 6 bits, Hispanic origin, sex, age 0..114, relationship to householder: 64 x 2 x 2 x 115 x 17
= 500,480 cells) they are 4,151 national counts (:func:`SF1`); SF1+ (:func:`SF1Plus`) asks each of them for the
nation and for each of 51 states (50 and D.C.): 215,852 counts on 25,524,480 cells, state first.

Each table is a union of Kronecker products (a product per group of lines, Total on the attributes a line does not
condition on), so a workload is 96 products whatever the geography, and every row carries its geography, table and
line (``CensusWorkload.geography``, ``.table``, ``.line``) so that a release says what each answer counts.

>>> W = SF1()
>>> W.matrix.shape, len(W.matrix.blocks)
((4151, 500480), 96)
>>> print(W.geography[0], W.table[0], W.line[0], sep=" | ")
United States | P1 | Total
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .domains import Domain, as_domain
from .estimate import Estimate
from .matrix import Dense, Identity, Kronecker, Matrix, Total, VStack

__all__ = [
    "HISPANIC",
    "NATION",
    "PERSON",
    "RACES",
    "RELATIONSHIPS",
    "SEXES",
    "SF1",
    "STATES",
    "STATE_PERSON",
    "CensusWorkload",
    "Lines",
    "SF1Plus",
    "Table",
    "age_groups",
    "race_alone",
    "race_detail",
    "sf1_tables",
    "write_release",
]

RACES = (
    "White",
    "Black or African American",
    "American Indian and Alaska Native",
    "Asian",
    "Native Hawaiian and Other Pacific Islander",
    "Some Other Race",
)
"""The six race bits, least significant first: a person's race code is the sum of 2**i over the races marked."""

HISPANIC = ("Not Hispanic or Latino", "Hispanic or Latino")
SEXES = ("Male", "Female")
RELATIONSHIPS = (
    "Householder", "Husband or wife", "Biological son or daughter", "Adopted son or daughter",
    "Stepson or stepdaughter", "Brother or sister", "Father or mother", "Grandchild", "Parent-in-law",
    "Son-in-law or daughter-in-law", "Other relative", "Roomer or boarder", "Housemate or roommate",
    "Unmarried partner", "Other nonrelative", "Institutionalized group quarters population",
    "Noninstitutionalized group quarters population",
)  # fmt: skip
STATES = (
    "Alabama", "Alaska", "Arizona", "Arkansas", "California", "Colorado", "Connecticut", "Delaware",
    "District of Columbia", "Florida", "Georgia", "Hawaii", "Idaho", "Illinois", "Indiana", "Iowa", "Kansas",
    "Kentucky", "Louisiana", "Maine", "Maryland", "Massachusetts", "Michigan", "Minnesota", "Mississippi", "Missouri",
    "Montana", "Nebraska", "Nevada", "New Hampshire", "New Jersey", "New Mexico", "New York", "North Carolina",
    "North Dakota", "Ohio", "Oklahoma", "Oregon", "Pennsylvania", "Rhode Island", "South Carolina", "South Dakota",
    "Tennessee", "Texas", "Utah", "Vermont", "Virginia", "Washington", "West Virginia", "Wisconsin", "Wyoming",
)  # fmt: skip
"""The 51 states of SF1+ (with D.C.), in FIPS code order: the state attribute's codes 0..50."""
NATION = "United States"

PERSON: Domain = as_domain({"race": 64, "hispanic": 2, "sex": 2, "age": 115, "relationship": 17})
"""The Person schema of HDMM's Example 2; ``STATE_PERSON`` puts the state (51 codes) before it."""
STATE_PERSON: Domain = as_domain({"state": len(STATES), **dict(zip(PERSON.names, PERSON.sizes))})

_P12_AGES = (0, 5, 10, 15, 18, 20, 21, 22, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70, 75, 80, 85, 115)
_PCT12_AGES = (*range(101), 105, 110, 115)


@dataclass(frozen=True)
class Lines:
    """Queries on one attribute: a 0/1 row per line, and the line's label (empty for a universe, e.g. "White
    alone" in P12A, which the table's name already says)."""

    rows: np.ndarray
    labels: tuple[str, ...]

    def matrix(self) -> Matrix:
        k, n = self.rows.shape
        if k == n and np.array_equal(self.rows, np.eye(n)):
            return Identity(n)
        return Dense(self.rows.astype(np.float64))


def _lines(n: int, members: Sequence[Sequence[int]], labels: Sequence[str]) -> Lines:
    rows = np.zeros((len(members), n), dtype=bool)
    for row, codes in zip(rows, members):
        row[list(codes)] = True
    return Lines(rows, tuple(labels))


def _races(code: int) -> str:
    return "; ".join(race for i, race in enumerate(RACES) if code >> i & 1)


def race_alone() -> Lines:
    """The seven race groups of P3: each race alone, and two or more races."""
    singles = [[1 << i] for i in range(len(RACES))]
    several = [c for c in range(64) if c.bit_count() >= 2]
    return _lines(64, [*singles, several], [f"{r} alone" for r in RACES] + ["Two or More Races"])


def race_detail() -> Lines:
    """The 70 lines of P8 below its total: persons of k races for k = 1..6 and each combination of k races, and
    persons of two or more races (the six-race line appears as its count and as its one combination)."""
    counts = ("one", "two", "three", "four", "five", "six")
    members, labels = [], []
    for k, word in enumerate(counts, start=1):
        combos = [c for c in range(1, 64) if c.bit_count() == k]
        head = f"Population of {word} race{'s' if k > 1 else ''}"
        head = head if k == 1 else f"Two or More Races: {head}"
        members.append(combos)
        labels.append(head)
        for code in combos:
            members.append([code])
            labels.append(f"{head}: {_races(code)}{' alone' if k == 1 else ''}")
        if k == 1:
            members.append([c for c in range(64) if c.bit_count() >= 2])
            labels.append("Two or More Races")
    return _lines(64, members, labels)


def _age_label(lo: int, hi: int) -> str:
    if hi == 115:
        return f"{lo} years and over"
    if hi - lo == 1:
        return "Under 1 year" if lo == 0 else "1 year" if lo == 1 else f"{lo} years"
    if lo == 0:
        return f"Under {hi} years"
    return f"{lo} and {hi - 1} years" if hi - lo == 2 else f"{lo} to {hi - 1} years"


def age_groups(bounds: Sequence[int]) -> Lines:
    """Age ranges [bounds[i], bounds[i+1]) over ages 0..114."""
    pairs = list(itertools.pairwise(bounds))
    return _lines(115, [range(lo, hi) for lo, hi in pairs], [_age_label(lo, hi) for lo, hi in pairs])


def _one(n: int, code: int, label: str = "") -> Lines:
    return _lines(n, [[code]], [label])


def _identity(labels: Sequence[str]) -> Lines:
    return _lines(len(labels), [[c] for c in range(len(labels))], labels)


@dataclass(frozen=True)
class Table:
    """One SF1 table: its name and its products, each a mapping from attribute to ``Lines`` (Total elsewhere)."""

    name: str
    products: tuple[Mapping[str, Lines], ...]


def _sex_by_age(name: str, ages: Lines, **universe: Lines) -> Table:
    sex = _identity(SEXES)
    return Table(name, (dict(universe), {**universe, "sex": sex}, {**universe, "sex": sex, "age": ages}))


def sf1_tables() -> tuple[Table, ...]:
    """The SF1 person tables of HDMM's workload, in the Census Bureau's order of tables (4,151 lines in all).

    Within a table, the rows come product by product (its total, then e.g. each sex, then each sex by age group),
    not in the printed table's line order; each row's ``line`` label says what it counts."""
    hispanic, not_hispanic_line = _identity(HISPANIC), _one(2, 0, HISPANIC[0])
    hispanic_universe, not_hispanic_universe = _one(2, 1), _one(2, 0)  # named by the table, not in the line
    adult = _lines(115, [range(18, 115)], [""])  # the universe of P10 and P11
    alone, detail = race_alone(), race_detail()
    p12, pct12 = age_groups(_P12_AGES), age_groups(_PCT12_AGES)
    iterations = [Lines(alone.rows[i : i + 1], ("",)) for i in range(len(alone.labels))]
    letters = "ABCDEFGHIJKLMNO"
    tables = [
        Table("P1", ({},)),
        Table("P3", ({}, {"race": alone})),
        Table("P4", ({}, {"hispanic": hispanic})),
        Table("P5", ({}, {"hispanic": hispanic}, {"hispanic": hispanic, "race": alone})),
        Table("P8", ({}, {"race": detail})),
        Table("P9", ({}, {"hispanic": hispanic}, {"hispanic": not_hispanic_line, "race": detail})),
        Table("P10", ({"age": adult}, {"age": adult, "race": detail})),
        Table("P11", ({"age": adult}, {"age": adult, "hispanic": hispanic},
                      {"age": adult, "hispanic": not_hispanic_line, "race": detail})),
        _sex_by_age("P12", p12),
        *(_sex_by_age(f"P12{letters[i]}", p12, race=race) for i, race in enumerate(iterations)),
        _sex_by_age("P12H", p12, hispanic=hispanic_universe),
        _sex_by_age("P12I", p12, hispanic=not_hispanic_universe, race=iterations[0]),
        _sex_by_age("PCT12", pct12),
        *(_sex_by_age(f"PCT12{letters[i]}", pct12, race=race) for i, race in enumerate(iterations)),
        _sex_by_age("PCT12H", pct12, hispanic=hispanic_universe),
        *(_sex_by_age(f"PCT12{letters[8 + i]}", pct12, hispanic=not_hispanic_universe, race=race)
          for i, race in enumerate(iterations)),
    ]  # fmt: skip
    return tuple(tables)


#: The order in which a line's parts are named (the tables' hierarchy: "Not Hispanic or Latino: White alone").
_LABEL_ORDER = ("hispanic", "race", "sex", "age", "relationship")


@dataclass(frozen=True)
class CensusWorkload:
    """A census workload: its matrix (a union of Kronecker products over ``domain``) and, per row, the geography,
    table and line it counts."""

    matrix: Matrix
    domain: Domain
    geography: np.ndarray
    table: np.ndarray
    line: np.ndarray

    def labels(self) -> list[str]:
        """One name per answer: ``geography | table | line``."""
        return [f"{g} | {t} | {line}" for g, t, line in zip(self.geography, self.table, self.line)]

    def release(self, estimate: Estimate, level: float = 0.95) -> dict[str, np.ndarray]:
        """Every answer of ``estimate`` to this workload with its error bars, as columns: geography, table, line,
        answer, std, lower, upper (NaN where withheld), level, method (what the interval accounts for)."""
        found = estimate.intervals(self.matrix, level)
        std = np.sqrt(np.maximum(estimate.variances(self.matrix), 0.0))  # NaN (unknown) stays NaN
        rows = self.matrix.shape[0]
        return {"geography": self.geography, "table": self.table, "line": self.line, "answer": found.answers,
                "std": std, "lower": found.lower, "upper": found.upper, "level": np.full(rows, found.level),
                "method": np.full(rows, found.method)}  # fmt: skip


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ImportError("a Parquet release needs pyarrow: pip install -e '.[parquet]', or write .csv") from None
    return pyarrow, pyarrow.parquet


def check_release_path(path: str | Path) -> Path:
    """``path`` if a release can be written there (its folder exists; pyarrow for ``.parquet``), else the error
    saying why: checked before any budget is spent, so that a release is never lost at its last step."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(f"cannot write the release to {path}: the folder {path.parent} does not exist")
    if path.is_dir():
        raise ValueError(f"cannot write the release to {path}: it is a folder; name a .csv or .parquet file")
    if path.suffix == ".parquet":
        _pyarrow()
    return path


def write_release(columns: Mapping[str, np.ndarray], path: str | Path) -> Path:
    """Write a release's columns as Parquet (a ``.parquet`` path: needs pyarrow) or CSV (any other path; a withheld
    value, NaN, is an empty cell)."""
    path = check_release_path(path)
    if path.suffix == ".parquet":
        pa, pq = _pyarrow()
        pq.write_table(pa.table({name: np.asarray(column) for name, column in columns.items()}), path)
        return path
    cells = []
    for column in map(np.asarray, columns.values()):
        text = column.astype(str)
        if column.dtype.kind == "f":
            text[np.isnan(column)] = ""
        cells.append(text.tolist())
    with open(path, "w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(list(columns))
        writer.writerows(zip(*cells))
    return path



def _workload(domain: Domain, geography: Lines | None) -> CensusWorkload:
    blocks, rows = [], []
    for table in sf1_tables():
        for product in table.products:
            given = {**product, **({"state": geography} if geography is not None else {})}
            factors = [given[name].matrix() if name in given else Total(size)
                       for name, size in zip(domain.names, domain.sizes)]  # fmt: skip
            blocks.append(Kronecker(factors))
            axes = [given[name].labels if name in given else ("",) for name in domain.names]
            for combo in itertools.product(*axes):
                named = dict(zip(domain.names, combo))
                line = ": ".join(named[a] for a in _LABEL_ORDER if named.get(a)) or "Total"
                rows.append((named.get("state") or NATION, table.name, line))
    geography_, table_, line_ = (np.array(column) for column in zip(*rows))
    return CensusWorkload(VStack(blocks), domain, geography_, table_, line_)


def _without_relationship(domain: Domain, relationship: bool) -> Domain:
    return domain if relationship else domain.project([n for n in domain.names if n != "relationship"])


def SF1(*, relationship: bool = True) -> CensusWorkload:
    """HDMM's SF1: the 4,151 national counts of the SF1 person tables on ``PERSON`` (500,480 cells).

    No SF1 person table conditions on relationship to householder; ``relationship=False`` leaves it out of the
    domain (29,440 cells), as the code behind the paper's Tables 6 and 7 did. HDMM's error is the same either way
    (its strategy sums over relationship); measuring every cell (Identity) is sqrt(17) times worse with it."""
    return _workload(_without_relationship(PERSON, relationship), None)


def SF1Plus(*, relationship: bool = True) -> CensusWorkload:
    """HDMM's SF1+: every SF1 count for the nation and for each of the 51 states (215,852 counts) on
    ``STATE_PERSON`` (25,524,480 cells, state first; ``relationship`` as for :func:`SF1`)."""
    nation_and_states = Lines(np.vstack([np.ones((1, len(STATES)), bool), np.eye(len(STATES), dtype=bool)]),
                              (NATION, *STATES))  # fmt: skip
    return _workload(_without_relationship(STATE_PERSON, relationship), nation_and_states)
