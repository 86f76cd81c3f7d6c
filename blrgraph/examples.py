"""Small example tables for the docs, generated from a seed (no download, no pandas).

``blrgraph example NAME`` (or :func:`write`) writes ``NAME.csv``; every page of the
docs creates the files it uses this way, so each command runs from a fresh install.
The tables are simulated from a known model, so a fit can be checked against the
values that generated it:

* ``blobs``: columns a, b; three Gaussian clusters around (-4, 4), (0, 0), (4, 4)
  (``gmm``).
* ``customers``: age, income (numbers), region (north / south); two groups with
  age 30 / 60 (sd 5), income 30 / 70 (sd 8), region north / south with
  probability 0.85; 5% of the cells empty (``mixed_mixture``, ``gmm``).
* ``survey``: smoker (no / yes), exercise (never / weekly / daily), diet (good /
  poor); two classes of weights 0.6 / 0.4 with P(smoker) 0.2 / 0.8, exercise
  (never, weekly, daily) 0.1/0.3/0.6 versus 0.6/0.3/0.1, P(good diet) 0.7 / 0.3;
  5% of the cells empty (``latent_class``, ``mixed_mixture``).
* ``houses``: area, rooms, city (A / B), price = 50 + 2 area + 0 rooms +
  40 [city = B] + N(0, 15^2); two prices missing (``linreg``, target price).
* ``loans``: age, income, region (north / south / west), default (no / yes) with
  log-odds -1 + 0.04 (age - 45) - 0.03 (income - 35) + 0.8 [region = south];
  three targets and two incomes missing (``logreg``, target default).
* ``claims``: age, urban (0/1), car (sedan / suv / van), claims (counts) with log
  rate -2 + 0.02 age + 0.6 urban + 0.4 [car = van]; two counts missing
  (``poisson_reg``, target claims).
* ``counts``: calls, visits (counts); two groups of weights 0.7 / 0.3 with rates
  (1, 3) and (8, 12); 3% of the cells empty (``poisson_mixture``).
* ``reviews``: text; short restaurant reviews mixing four topics (food, service,
  price, place) (``lda``, columns text).
* ``people``: height, weight, color (text), with missing cells (``blrgraph.io``).
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

#: name -> (default number of rows, one-line description)
NAMES = {
    "blobs": (300, "columns a, b: three Gaussian clusters (gmm)"),
    "customers": (200, "age, income, region: two groups, missing cells (mixed_mixture, gmm)"),
    "survey": (300, "smoker, exercise, diet: two classes, missing cells (latent_class)"),
    "houses": (100, "area, rooms, city, price (linreg, target price)"),
    "loans": (500, "age, income, region, default yes/no (logreg, target default)"),
    "claims": (400, "age, urban, car, claims counts (poisson_reg, target claims)"),
    "counts": (300, "calls, visits: two groups of Poisson counts (poisson_mixture)"),
    "reviews": (200, "text: short reviews on four topics (lda, columns text)"),
    "people": (50, "height, weight, color, with missing cells (blrgraph.io)"),
}


def _missing(rng, values, frac):
    """values as an object array with a fraction of the cells set to None (missing)."""
    out = np.asarray(values, dtype=object)
    out[rng.random(len(out)) < frac] = None
    return out


def _missing_n(rng, values, n):
    """values as an object array with n cells, picked at random, set to None."""
    out = np.asarray(values, dtype=object)
    out[rng.choice(len(out), size=n, replace=False)] = None
    return out


def _blobs(rng, n):
    centres = np.array([[-4.0, 4.0], [0.0, 0.0], [4.0, 4.0]])
    k = rng.integers(3, size=n)
    x = centres[k] + rng.normal(size=(n, 2))
    return {"a": np.round(x[:, 0], 3), "b": np.round(x[:, 1], 3)}


def _customers(rng, n):
    g = rng.integers(2, size=n)
    age = np.where(g == 0, 30.0, 60.0) + 5.0 * rng.normal(size=n)
    income = np.where(g == 0, 30.0, 70.0) + 8.0 * rng.normal(size=n)
    south = rng.random(n) < np.where(g == 0, 0.15, 0.85)
    region = np.where(south, "south", "north")
    return {"age": _missing(rng, np.round(age, 1), 0.05),
            "income": _missing(rng, np.round(income, 1), 0.05),
            "region": _missing(rng, region, 0.05)}


def _survey(rng, n):
    c = (rng.random(n) < 0.4).astype(int)                      # class 1 with weight 0.4
    smoker = np.where(rng.random(n) < np.where(c == 0, 0.2, 0.8), "yes", "no")
    p_ex = np.array([[0.1, 0.3, 0.6], [0.6, 0.3, 0.1]])[c]     # (never, weekly, daily)
    ex = (rng.random((n, 1)) > np.cumsum(p_ex, axis=1)).sum(axis=1)
    exercise = np.array(["never", "weekly", "daily"])[ex]
    diet = np.where(rng.random(n) < np.where(c == 0, 0.7, 0.3), "good", "poor")
    return {"smoker": _missing(rng, smoker, 0.05), "exercise": _missing(rng, exercise, 0.05),
            "diet": _missing(rng, diet, 0.05)}


def _houses(rng, n):
    area = np.round(rng.uniform(40.0, 200.0, size=n), 1)
    rooms = rng.integers(1, 7, size=n)
    city = np.where(rng.random(n) < 0.5, "A", "B")
    price = 50.0 + 2.0 * area + 0.0 * rooms + 40.0 * (city == "B") + 15.0 * rng.normal(size=n)
    return {"area": area, "rooms": rooms, "city": city,
            "price": _missing_n(rng, np.round(price, 1), min(2, n))}


def _loans(rng, n):
    age = rng.integers(20, 71, size=n)
    income = np.round(rng.uniform(10.0, 60.0, size=n), 1)
    region = np.array(["north", "south", "west"])[rng.integers(3, size=n)]
    logit = -1.0 + 0.04 * (age - 45) - 0.03 * (income - 35) + 0.8 * (region == "south")
    default = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-logit)), "yes", "no")
    return {"age": age, "income": _missing_n(rng, income, min(2, n)), "region": region,
            "default": _missing_n(rng, default, min(3, n))}


def _claims(rng, n):
    age = rng.integers(18, 81, size=n)
    urban = rng.integers(0, 2, size=n)
    car = np.array(["sedan", "suv", "van"])[rng.integers(3, size=n)]
    rate = np.exp(-2.0 + 0.02 * age + 0.6 * urban + 0.4 * (car == "van"))
    return {"age": age, "urban": urban, "car": car,
            "claims": _missing_n(rng, rng.poisson(rate), min(2, n))}


def _counts(rng, n):
    g = (rng.random(n) < 0.3).astype(int)
    rates = np.array([[1.0, 3.0], [8.0, 12.0]])[g]
    x = rng.poisson(rates)
    return {"calls": _missing(rng, x[:, 0], 0.03), "visits": _missing(rng, x[:, 1], 0.03)}


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
           "loans": _loans, "claims": _claims, "counts": _counts, "reviews": _reviews,
           "people": _people}


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
