"""Small example tables for the docs, generated from a seed (no download, no pandas).

``blrgraph example NAME`` (or :func:`write`) writes ``NAME.csv``; every page of the
docs creates the files it uses this way, so each command runs from a fresh install.
The tables are simulated from a known model, so a fit can be checked against the
values that generated it:

* ``blobs``: columns a, b; three Gaussian clusters (``gmm``).
* ``customers``: age, income, visits (numbers), plan, region (text); three
  segments, about 5% of the cells empty (``mixed_mixture``).
* ``survey``: age and four answers q1..q4 (agree / neutral / disagree); four
  respondent types, some answers missing (``mixed_mixture``, ``latent_class``).
* ``houses``: area, rooms, age, price; price linear in the others plus noise
  (``linreg``, target price).
* ``loans``: income, debt, years, default (yes / no); logistic in debt/income
  (``logreg``, target default).
* ``claims``: age, vehicle_age, urban (0/1), claims (counts); log-linear rate
  (``poisson_reg``, target claims).
* ``reviews``: text; short reviews mixing four topics (``lda``, columns text).
* ``people``: height, weight, color (text), with missing cells (``blrgraph.io``).
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

#: name -> (default number of rows, one-line description)
NAMES = {
    "blobs": (300, "columns a, b: three Gaussian clusters (gmm)"),
    "customers": (300, "age, income, visits, plan, region: three segments, missing cells (mixed_mixture)"),
    "survey": (400, "age and answers q1..q4: four respondent types, missing answers (mixed_mixture, latent_class)"),
    "houses": (200, "area, rooms, age, price (linreg, target price)"),
    "loans": (400, "income, debt, years, default yes/no (logreg, target default)"),
    "claims": (500, "age, vehicle_age, urban, claims counts (poisson_reg, target claims)"),
    "reviews": (200, "text: short reviews on four topics (lda, columns text)"),
    "people": (50, "height, weight, color, with missing cells (blrgraph.io)"),
}


def _missing(rng, values, frac):
    """values as an object array with a fraction of the cells set to None (missing)."""
    out = np.asarray(values, dtype=object)
    out[rng.random(len(out)) < frac] = None
    return out


def _blobs(rng, n):
    centres = np.array([[0.0, 0.0], [4.0, 4.0], [-4.0, 4.0]])
    k = rng.integers(3, size=n)
    x = centres[k] + rng.normal(size=(n, 2))
    return {"a": np.round(x[:, 0], 3), "b": np.round(x[:, 1], 3)}


def _customers(rng, n):
    seg = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    age = rng.normal([28.0, 45.0, 62.0], 5.0, size=(n, 3))[np.arange(n), seg]
    income = rng.normal([32.0, 70.0, 48.0], 8.0, size=(n, 3))[np.arange(n), seg]
    visits = rng.normal([12.0, 4.0, 2.0], 1.5, size=(n, 3))[np.arange(n), seg]
    plans = np.array(["basic", "plus", "pro"])
    plan_p = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.6, 0.2]])
    plan = plans[[rng.choice(3, p=plan_p[s]) for s in seg]]
    regions = np.array(["north", "south", "east", "west"])
    region = regions[rng.integers(4, size=n)]
    return {"age": _missing(rng, np.round(age).astype(int), 0.05), "income": _missing(rng, np.round(income, 1), 0.05),
            "visits": _missing(rng, np.round(visits, 1), 0.05), "plan": _missing(rng, plan, 0.05),
            "region": _missing(rng, region, 0.05)}


def _survey(rng, n):
    kind = rng.choice(4, size=n, p=[0.3, 0.3, 0.2, 0.2])
    age = rng.normal([25.0, 40.0, 55.0, 70.0], 6.0, size=(n, 4))[np.arange(n), kind]
    levels = np.array(["agree", "neutral", "disagree"])
    # probability of (agree, neutral, disagree) for each type and question
    p = np.array([[[.8, .1, .1], [.7, .2, .1], [.1, .2, .7], [.6, .3, .1]],
                  [[.1, .1, .8], [.2, .2, .6], [.7, .2, .1], [.1, .3, .6]],
                  [[.2, .6, .2], [.1, .8, .1], [.2, .6, .2], [.2, .6, .2]],
                  [[.7, .2, .1], [.1, .1, .8], [.8, .1, .1], [.1, .1, .8]]])
    u = rng.random((n, 4, 1))
    answers = (u > np.cumsum(p[kind], axis=-1)).sum(axis=-1)          # (n, 4) in 0..2
    out = {"age": np.round(age).astype(int)}
    for q in range(4):
        out[f"q{q + 1}"] = _missing(rng, levels[answers[:, q]], 0.04)
    return out


def _houses(rng, n):
    area = rng.uniform(40.0, 200.0, size=n)
    rooms = np.clip(np.round(area / 30.0 + rng.normal(0.0, 0.7, size=n)), 1, None)
    age = rng.uniform(0.0, 80.0, size=n)
    price = 50.0 + 2.0 * area + 10.0 * rooms - 0.8 * age + rng.normal(0.0, 20.0, size=n)
    return {"area": np.round(area, 1), "rooms": rooms.astype(int), "age": np.round(age).astype(int),
            "price": np.round(price, 1)}


def _loans(rng, n):
    income = rng.lognormal(np.log(50.0), 0.4, size=n)
    debt = income * rng.uniform(0.05, 0.8, size=n)
    years = rng.integers(0, 30, size=n)
    logit = -3.0 + 6.0 * debt / income - 0.05 * years
    default = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-logit)), "yes", "no")
    return {"income": np.round(income, 1), "debt": np.round(debt, 1), "years": years,
            "default": default}


def _claims(rng, n):
    age = rng.uniform(18.0, 80.0, size=n)
    vehicle_age = rng.integers(0, 20, size=n)
    urban = rng.integers(0, 2, size=n)
    rate = np.exp(-0.5 - 0.02 * (age - 40.0) + 0.05 * vehicle_age + 0.6 * urban)
    return {"age": np.round(age).astype(int), "vehicle_age": vehicle_age, "urban": urban,
            "claims": rng.poisson(rate)}


_TOPICS = {
    "food": "pizza pasta sauce cheese bread salad dessert waiter menu tasty".split(),
    "service": "staff friendly rude slow quick helpful manager wait table booking".split(),
    "price": "price cheap expensive value money bill cost discount deal worth".split(),
    "place": "music noisy quiet view terrace parking cozy decor seats location".split(),
}


def _reviews(rng, n):
    names = list(_TOPICS)
    texts = []
    for _ in range(n):
        mix = rng.dirichlet(np.full(len(names), 0.3))
        length = rng.integers(8, 20)
        words = [_TOPICS[names[rng.choice(len(names), p=mix)]][rng.integers(10)] for _ in range(length)]
        texts.append(" ".join(words))
    return {"text": np.array(texts, dtype=object)}


def _people(rng, n):
    height = rng.normal(170.0, 10.0, size=n)
    weight = 0.9 * (height - 100.0) + rng.normal(0.0, 8.0, size=n)
    color = np.array(["red", "green", "blue"])[rng.integers(3, size=n)]
    return {"height": _missing(rng, np.round(height, 1), 0.1),
            "weight": _missing(rng, np.round(weight, 1), 0.1), "color": _missing(rng, color, 0.1)}


_MAKERS = {"blobs": _blobs, "customers": _customers, "survey": _survey, "houses": _houses,
           "loans": _loans, "claims": _claims, "reviews": _reviews, "people": _people}


def generate(name, rows=None, seed=0):
    """The columns of example ``name`` as {column: 1-D array} (None = a missing cell)."""
    if name not in NAMES:
        raise ValueError(f"no example data set {name!r}; available: {', '.join(NAMES)}")
    rows = NAMES[name][0] if rows is None else int(rows)
    if rows < 1:
        raise ValueError(f"example {name!r}: rows must be >= 1, got {rows}")
    return _MAKERS[name](np.random.default_rng(seed), rows)


def write(name, path=None, rows=None, seed=0):
    """Write example ``name`` as a CSV file (default ``NAME.csv`` in the working directory;
    an existing directory gets ``NAME.csv`` inside it). Returns the path."""
    cols = generate(name, rows, seed)
    path = Path(f"{name}.csv" if path is None else path)
    if path.is_dir():
        path = path / f"{name}.csv"
    n = len(next(iter(cols.values())))
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(list(cols))
        for i in range(n):
            out.writerow(["" if c[i] is None else c[i] for c in cols.values()])
    return path
