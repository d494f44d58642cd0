"""Made-up example tables with real dependence structure, for demonstrations, tests and benchmarks.

Nothing here is private or drawn from real people: each table is sampled from a fixed, hand-written Bayesian
network (ancestral sampling, vectorized numpy), so marginals carry the kind of structure real census data has
(education depends on age, income on education, employment and sex, ...) and a graphical model has something to
find. The network is the same for every call; ``seed`` only chooses the sample, so ``census(rows, seed)`` is
reproducible and two seeds are two independent samples of one population.

    columns, domain = census()          # ({name: int64 codes}, {name: size}), ready for ek.protect
    session = ek.protect(columns, domain, ek.ZCDP(1))

This module is the top layer: the kernel, operators and plans never import it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["census", "cps", "people", "CENSUS_DOMAIN", "CPS_DOMAIN", "PEOPLE_DOMAIN"]

#: The census-like table's attributes and sizes: 20 x 2 x 5 x 8 x 5 x 4 x 10 = 320,000 cells.
CENSUS_DOMAIN: dict[str, int] = {"age": 20, "sex": 2, "race": 5, "education": 8, "marital": 5, "employment": 4,
                                 "income": 10}
#: The CPS schema of the ResidualPlanner paper (Xiao et al. 2023): 100 x 50 x 7 x 4 x 2 = 280,000 cells.
CPS_DOMAIN: dict[str, int] = {"income": 100, "age": 50, "marital": 7, "race": 4, "sex": 2}

#: The README's people.csv: age in years, sex, and one of five regions (100 x 2 x 5 = 1,000 cells).
PEOPLE_DOMAIN: dict[str, int] = {"age": 100, "sex": 2, "region": 5}

#: Most rows drawn at once (the codes alone then take 8 bytes a value per attribute).
MAX_ROWS = 10**8

# The networks' conditional tables carry a little fixed jitter (from this seed, never the caller's) so that
# they are not exactly the smooth parametric shapes below.
_NETWORK_SEED = 20_230_611


def census(rows: int = 50_000, seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """A census-like table of ``rows`` made-up people: ``({name: codes}, {name: size})``.

    Attributes (codes ``0..size-1``): age (20 bins of 4 years from 15), sex (2), race (5), education (8
    levels), marital (5: never married, married, divorced, widowed, separated), employment (4: employed,
    unemployed, not in the labour force, retired) and income (10 ordered bands). The network: age, sex and
    race are independent roots; education <- age, race; marital <- age, sex; employment <- age, education;
    income <- education, employment, sex. Deterministic in ``seed``.
    """
    rows, rng = _arguments(rows, seed)
    jitter = np.random.default_rng(_NETWORK_SEED)
    n = CENSUS_DOMAIN
    age_bins = np.arange(n["age"])
    age_p = np.exp(-age_bins / 14.0) * (1.0 + 0.15 * np.sin(age_bins / 2.5))
    age = _draw_root(age_p, rows, rng)
    sex = _draw_root(np.array([0.49, 0.51]), rows, rng)
    race = _draw_root(np.array([0.62, 0.13, 0.17, 0.06, 0.02]), rows, rng)

    # education <- age, race: the young have not finished school; the level's centre differs by race.
    a, r = np.meshgrid(age_bins, np.arange(n["race"]), indexing="ij")
    centre = 1.0 + 3.5 / (1.0 + np.exp(-(a - 2.0))) - 0.12 * np.maximum(a - 8, 0) + np.array(
        [0.0, -0.6, 0.8, -0.3, 0.2])[r]
    education_cpt = _ordinal(centre, n["education"], spread=1.3, jitter=jitter)
    education = _draw(education_cpt, _index((age, race), (n["age"], n["race"])), rng)

    # marital <- age, sex: never married falls with age, widowed rises (more for women).
    a, s = np.meshgrid(age_bins, np.arange(n["sex"]), indexing="ij")
    scores = np.stack([
        3.0 - 0.55 * a,                                          # never married
        0.2 + 0.5 * np.minimum(a, 8) - 0.1 * np.maximum(a - 12, 0),  # married
        -1.5 + 0.35 * np.minimum(a, 10),                         # divorced
        -6.0 + 0.5 * a + 0.9 * s,                                # widowed
        -2.0 + 0.15 * np.minimum(a, 8),                          # separated
    ], axis=-1)
    marital_cpt = _softmax(scores + 0.2 * jitter.standard_normal(scores.shape))
    marital = _draw(marital_cpt, _index((age, sex), (n["age"], n["sex"])), rng)

    # employment <- age, education: work rises with education; retirement with age.
    a, e = np.meshgrid(age_bins, np.arange(n["education"]), indexing="ij")
    scores = np.stack([
        0.2 + 0.3 * e + 0.4 * np.minimum(a, 3),             # employed
        -0.2 - 0.15 * e,                                    # unemployed
        1.2 - 0.2 * e - 0.3 * np.minimum(a, 3) + 0.04 * a,  # not in the labour force
        -6.0 + 0.6 * a,                                     # retired
    ], axis=-1)
    employment_cpt = _softmax(scores + 0.2 * jitter.standard_normal(scores.shape))
    employment = _draw(employment_cpt, _index((age, education), (n["age"], n["education"])), rng)

    # income <- education, employment, sex: an ordinal band centred by all three.
    e, m, s = np.meshgrid(np.arange(n["education"]), np.arange(n["employment"]), np.arange(n["sex"]),
                          indexing="ij")
    centre = 0.5 + 0.75 * e + np.array([2.0, -1.5, -2.0, 0.5])[m] - 0.8 * s
    income_cpt = _ordinal(centre, n["income"], spread=1.4, jitter=jitter)
    income = _draw(income_cpt, _index((education, employment, sex), (n["education"], n["employment"], n["sex"])), rng)

    columns = {"age": age, "sex": sex, "race": race, "education": education, "marital": marital,
               "employment": employment, "income": income}
    return columns, dict(CENSUS_DOMAIN)


def people(rows: int = 20_000, seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The README's table of ``rows`` made-up people: ``({name: codes}, {name: size})`` with age (0..99 years),
    sex (2) and region (5). region is a root; age <- region (some regions are older); sex <- age (more women
    among the old). Deterministic in ``seed``.
    """
    rows, rng = _arguments(rows, seed)
    n = PEOPLE_DOMAIN
    region = _draw_root(np.array([0.35, 0.25, 0.2, 0.12, 0.08]), rows, rng)
    r, years = np.meshgrid(np.arange(n["region"]), np.arange(n["age"]), indexing="ij")
    age_cpt = np.exp(-years / (30.0 + 6.0 * r)) * (1.0 + 0.3 * np.exp(-(((years - 35.0) / 12.0) ** 2)))
    age = _draw(age_cpt, region, rng)  # (regions, ages): _draw normalizes each row
    women = 0.45 + 0.25 / (1.0 + np.exp(-(np.arange(n["age"]) - 60.0) / 10.0))
    sex = _draw(np.stack([1.0 - women, women], axis=1), age, rng)
    return {"age": age, "sex": sex, "region": region}, dict(PEOPLE_DOMAIN)


def cps(rows: int = 50_000, seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """A table on the CPS schema of the ResidualPlanner paper (income 100, age 50, marital 7, race 4, sex 2):
    ``({name: codes}, {name: size})``, attributes in that order.

    Made-up people: age, race and sex are independent roots; marital <- age, sex; income (100 ordered bands,
    skewed to the right) <- age, marital, race, sex, centred highest in middle age and for the married.
    Deterministic in ``seed``.
    """
    rows, rng = _arguments(rows, seed)
    jitter = np.random.default_rng(_NETWORK_SEED + 1)
    n = CPS_DOMAIN
    age_bins = np.arange(n["age"])
    age_p = np.exp(-age_bins / 35.0) * (1.0 + 0.1 * np.cos(age_bins / 4.0))
    age = _draw_root(age_p, rows, rng)
    race = _draw_root(np.array([0.78, 0.12, 0.06, 0.04]), rows, rng)
    sex = _draw_root(np.array([0.48, 0.52]), rows, rng)

    # marital (never, married, married-absent, separated, divorced, widowed, other) <- age, sex
    a, s = np.meshgrid(age_bins, np.arange(n["sex"]), indexing="ij")
    scores = np.stack([
        2.5 - 0.16 * a,
        -1.0 + 0.16 * np.minimum(a, 20) - 0.03 * np.maximum(a - 30, 0),
        -3.5 + 0.02 * a,
        -3.5 + 0.04 * np.minimum(a, 20),
        -4.0 + 0.1 * np.minimum(a, 25) + 0.3 * s,
        -10.0 + 0.2 * a + 0.8 * s,
        -4.0 + 0.0 * a,
    ], axis=-1)
    marital_cpt = _softmax(scores + 0.2 * jitter.standard_normal(scores.shape))
    marital = _draw(marital_cpt, _index((age, sex), (n["age"], n["sex"])), rng)

    # income <- age, marital, race, sex: a discretized log-normal whose centre follows all four parents.
    a, m, r, s = np.meshgrid(age_bins, np.arange(n["marital"]), np.arange(n["race"]), np.arange(n["sex"]),
                             indexing="ij")
    log_centre = (2.6 + 0.9 * np.exp(-((a - 22.0) / 14.0) ** 2) - 0.6 * np.exp(-a / 4.0)
                  + np.array([-0.2, 0.25, 0.0, -0.15, -0.05, -0.3, -0.1])[m]
                  + np.array([0.0, -0.25, 0.1, -0.1])[r] - 0.3 * s)
    bands = np.log(np.arange(n["income"]) + 1.0)  # log(k + 1) for band k
    scores = -((bands - log_centre[..., None]) ** 2) / (2 * 0.55**2) + bands  # log-normal density in k + 1
    income_cpt = _softmax(scores + 0.15 * jitter.standard_normal(scores.shape)).reshape(-1, n["income"])
    income = _draw(income_cpt, _index((age, marital, race, sex), (n["age"], n["marital"], n["race"], n["sex"])), rng)

    columns = {"income": income, "age": age, "marital": marital, "race": race, "sex": sex}
    return columns, dict(CPS_DOMAIN)


# ---------------------------------------------------------------------------------------
# Sampling helpers
# ---------------------------------------------------------------------------------------
def _arguments(rows: object, seed: object) -> tuple[int, np.random.Generator]:
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"rows must be a whole number from 1 to {MAX_ROWS:,}, got {rows!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative whole number, got {seed!r}")
    return int(rows), np.random.default_rng(int(seed))


def _softmax(scores: np.ndarray) -> np.ndarray:
    """Probabilities along the last axis."""
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _ordinal(centre: np.ndarray, size: int, spread: float, jitter: np.random.Generator) -> np.ndarray:
    """A conditional table over ``size`` ordered levels per parent configuration: a discretized bell around
    ``centre`` (one per configuration), jittered. Returns ``(configurations, size)``."""
    levels = np.arange(size)
    scores = -((levels - centre[..., None]) ** 2) / (2 * spread**2)
    return _softmax(scores + 0.2 * jitter.standard_normal(scores.shape)).reshape(-1, size)


def _index(parents: Sequence[np.ndarray], sizes: Sequence[int]) -> np.ndarray:
    """Each row's parent configuration (C order over the parents' sizes)."""
    return np.ravel_multi_index(tuple(parents), tuple(sizes))


def _draw_root(p: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
    return _draw(np.asarray(p, dtype=np.float64)[None, :], np.zeros(rows, dtype=np.int64), rng)


def _draw(cpt: np.ndarray, config: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One code per row from row ``config[i]`` of the conditional table ``cpt`` (configurations, levels), by
    inverting the cumulative distribution: every configuration's cumulative row is shifted by twice its index
    into one increasing array, searched once for all rows."""
    cpt = cpt.reshape(-1, cpt.shape[-1])
    configurations, levels = cpt.shape
    cumulative = np.cumsum(cpt, axis=1)
    cumulative /= cumulative[:, -1:]
    cumulative[:, -1] = 1.0
    shifted = (cumulative + 2.0 * np.arange(configurations)[:, None]).ravel()
    position = np.searchsorted(shifted, 2.0 * config + rng.random(config.size), side="right")
    # a draw that rounds up onto 2c + 1 lands past its row: take the row's last level of positive probability
    last = levels - 1 - np.argmax(cpt[:, ::-1] > 0, axis=1)
    return np.minimum(position - config * levels, last[config]).astype(np.int64)
