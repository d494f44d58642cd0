"""A synthetic Person table of any size with realistic margins, for releasing SF1 tables end to end.

No real census microdata can be published, so this draws records from public 2010 figures: each state's share of
the population, its Hispanic share (a few large states by name, the rest at the national rate of the others), race
given Hispanic origin (the census's race-alone shares, and combinations of two or more races weighted towards the
common ones), an age pyramid, sex given age, and relationship to householder given age. The margins are close to
the census's; the joint distribution is a simple model, enough to give every table realistic counts and empty
cells where the real data has them.

The table is written as Parquet files of ``chunk_rows`` records each (the codes of ``operators.census``'s domain,
as small integers), so any size is written in bounded memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ektelo_ng.operators.census import RACES, RELATIONSHIPS, STATES

#: 2010 resident population of each state, in thousands (FIPS order, as ``STATES``).
STATE_THOUSANDS = (
    4780, 710, 6392, 2916, 37254, 5029, 3574, 898, 602, 18801, 9688, 1360, 1568, 12831, 6484, 3046, 2853, 4339, 4533,
    1328, 5774, 6548, 9884, 5304, 2967, 5989, 989, 1826, 2701, 1316, 8792, 2059, 19378, 9535, 673, 11537, 3751, 3831,
    12702, 1053, 4625, 814, 6346, 25146, 2764, 626, 8001, 6725, 1853, 5687, 564,
)  # fmt: skip
#: Hispanic share where it is far from the rest of the country's (taken as 8%, a little above the real 6.4%, so
#: that the national share is 17.4% against the census's 16.3%).
HISPANIC_SHARE = {
    "New Mexico": 0.46, "California": 0.38, "Texas": 0.38, "Arizona": 0.30, "Nevada": 0.27, "Florida": 0.23,
    "Colorado": 0.21, "New Jersey": 0.18, "New York": 0.18, "Illinois": 0.16, "Connecticut": 0.13,
}  # fmt: skip
#: Race alone (six races, then two or more races) given not Hispanic, then given Hispanic.
RACE_GIVEN_HISPANIC = (
    (0.767, 0.145, 0.009, 0.056, 0.002, 0.002, 0.019),
    (0.530, 0.025, 0.014, 0.004, 0.001, 0.366, 0.060),
)
#: How likely each race is to be among a person's several races, and how many races such a person has (2..6).
RACE_IN_COMBINATION = (0.45, 0.15, 0.10, 0.12, 0.03, 0.15)
RACE_COUNT = (0.92, 0.07, 0.008, 0.001, 0.001)
#: Relationship to householder for ages 0-17, 18-64 and 65+ (``RELATIONSHIPS`` order).
RELATIONSHIP_GIVEN_AGE = (
    (0.001, 0, 0.80, 0.02, 0.05, 0.01, 0, 0.08, 0, 0, 0.025, 0.002, 0.002, 0, 0.006, 0.002, 0.002),
    (0.45, 0.24, 0.10, 0.004, 0.01, 0.02, 0.01, 0.005, 0.004, 0.006, 0.02, 0.01, 0.025, 0.05, 0.015, 0.012, 0.019),
    (0.60, 0.24, 0.01, 0.0, 0.0, 0.01, 0.03, 0, 0.01, 0, 0.01, 0.002, 0.003, 0.008, 0.003, 0.06, 0.01),
)  # fmt: skip


def age_shares() -> np.ndarray:
    """The share of each age 0..114: flat to 55, then a falling tail (about 13% aged 65 and over, few past 100)."""
    ages = np.arange(115)
    weight = np.where(ages < 55, 1.0, np.exp(-(((ages - 55) / 21.0) ** 2)))
    return weight / weight.sum()


def _race_codes(given_hispanic: tuple[float, ...]) -> np.ndarray:
    """Probabilities of the 64 race codes: the six single races, and the combinations of 2..6 races."""
    p = np.zeros(64)
    for i in range(len(RACES)):
        p[1 << i] = given_hispanic[i]
    weight = np.array(RACE_IN_COMBINATION)
    for k, share in zip(range(2, 7), RACE_COUNT):
        combos = [c for c in range(64) if c.bit_count() == k]
        w = np.array([np.prod(weight[[i for i in range(6) if c >> i & 1]]) for c in combos])
        p[combos] = given_hispanic[6] * share * w / w.sum()
    return p / p.sum()


def _chunk(rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    population = np.array(STATE_THOUSANDS, dtype=np.float64)
    state = rng.choice(len(STATES), size=rows, p=population / population.sum())
    return {"state": state.astype(np.int8), **persons_in(rng, state)}


def persons_in(rng: np.random.Generator, state: np.ndarray) -> dict[str, np.ndarray]:
    """The other columns of Person records whose states (codes) are ``state``: race, hispanic, sex, age and
    relationship, drawn in that model's order (Hispanic origin given the state first)."""
    rows = state.size
    share = np.array([HISPANIC_SHARE.get(name, 0.08) for name in STATES])
    hispanic = (rng.random(rows) < share[state]).astype(np.int8)
    race = np.empty(rows, dtype=np.int8)
    for h in (0, 1):
        where = np.flatnonzero(hispanic == h)
        race[where] = rng.choice(64, size=where.size, p=_race_codes(RACE_GIVEN_HISPANIC[h]))
    age = rng.choice(115, size=rows, p=age_shares())
    female_share = np.clip(0.49 + 0.004 * np.maximum(age - 60, 0), 0, 0.85)
    sex = (rng.random(rows) < female_share).astype(np.int8)
    band = np.digitize(age, [18, 65])
    relationship = np.empty(rows, dtype=np.int8)
    for b, shares in enumerate(RELATIONSHIP_GIVEN_AGE):
        where = np.flatnonzero(band == b)
        p = np.array(shares) / np.sum(shares)
        relationship[where] = rng.choice(len(RELATIONSHIPS), size=where.size, p=p)
    return {"race": race, "hispanic": hispanic, "sex": sex, "age": age.astype(np.int8),
            "relationship": relationship}  # fmt: skip


def _check_sizes(rows: int, chunk_rows: int) -> None:
    if int(rows) < 0 or int(chunk_rows) < 1:
        raise ValueError(f"rows must be >= 0 and chunk_rows >= 1, got {rows} and {chunk_rows}")


def person_chunks(rows: int, seed: int = 0, chunk_rows: int = 1 << 22) -> Iterator[dict[str, np.ndarray]]:
    """``rows`` Person records in chunks of at most ``chunk_rows``: dicts of code columns (state first). The
    records depend on ``seed`` and on ``chunk_rows`` (each chunk draws its columns in turn)."""
    _check_sizes(rows, chunk_rows)
    return _chunks(int(rows), seed, int(chunk_rows))


def _chunks(rows: int, seed: int, chunk_rows: int) -> Iterator[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    for start in range(0, rows, chunk_rows):
        yield _chunk(rng, min(chunk_rows, rows - start))


def parquet_folder(path: str | Path):
    """pyarrow, its Parquet module and the directory ``path`` (made if missing), for writing records: refused if
    pyarrow is missing, or if the directory holds Parquet files already."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("writing Parquet needs pyarrow: pip install -e '.[parquet]'") from None
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    if any(out.glob("*.parquet")):
        raise ValueError(f"{out} already holds Parquet files; give an empty or new directory")
    return pa, pq, out


def write_persons(path: str | Path, rows: int, seed: int = 0, chunk_rows: int = 1 << 22, progress: bool = True,
                  national: bool = False) -> Path:
    """Write ``rows`` synthetic Person records as Parquet files ``part-NNNNN.parquet`` in the directory ``path``
    (made if missing; refused if it holds Parquet files already). ``national`` leaves out the state column (the
    domain of ``SF1``). Returns the directory."""
    _check_sizes(rows, chunk_rows)
    pa, pq, out = parquet_folder(path)
    from tqdm import tqdm

    with tqdm(total=int(rows), unit=" rows", unit_scale=True, desc="persons", disable=not progress) as bar:
        for part, chunk in enumerate(person_chunks(rows, seed, chunk_rows)):
            if national:
                chunk.pop("state")
            pq.write_table(pa.table(chunk), out / f"part-{part:05d}.parquet")
            bar.update(len(chunk["race"]))
    return out
