"""Bayesian logistic regression with a full-covariance Gaussian posterior, fitted
by NCVMP (docs/ncvmp.md). Copy this file and adapt it. The model::

    w   ~ MultivariateNormal(zeros(P), prior)     prior = prior_precision * I   (prior="fixed")
                                                  or diag(alpha), alpha ~ Gamma(a0, b0)
                                                  shared (prior="gamma") or per weight ("ard")
    y_n ~ Bernoulli(sigmoid(x_n . w))             y = Bernoulli(logits=Dot(X, w))

q(w) = N(m, S) is the exact Gaussian-VI optimum: E[log sigmoid] by Gauss-Hermite
quadrature, no Jaakkola-Jordan bound, so the ELBO is the true one. A Gamma
precision alpha is conjugate and is updated in closed form (rho = 1) inside the
same fit; w takes damped steps (rho = 0.5).

Input: a DataFrame or CSV path with ``target=`` the response column and
``columns=`` the predictors (default: every other column), or a pair of arrays
``(X, y)``. The target is 0/1 (numbers or booleans) or a text column with two
levels (the second level, in sorted order, is "1"). A categorical predictor
becomes 0/1 indicator columns (the first level is the reference). Missing
targets are masked (the row is kept and gets a prediction); rows with a missing
predictor are masked with a warning, since ``Dot(X, w)`` needs complete covariates.

With ``standardize=True`` (the default) numeric predictors with more than two
distinct values are centred and scaled for the fit, so the prior applies to the
standardised coefficients and the first sweep never meets huge linear predictors
(for the Poisson model E[exp(x . w)] under the prior would overflow with raw
covariates such as ages or incomes). Summaries and predictions are on the
original scale: w = A w_std is an exact linear map of the Gaussian posterior.

    import logreg
    model = logreg.build(df, target="default", columns=["income", "age"])
    fit = model.fit(logreg.DEFAULT_METHOD, **model.meta["fit_options"])
    logreg.summarize(fit)                    # one row per weight; odds ratio exp(mean)
    logreg.predict_proba(fit, new_rows)      # P(y = 1 | x, data) = E_q[sigmoid(x . w)]
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy import stats
from scipy.special import expit

import blrgraph as bg
from blrgraph import io

NAME = "logreg"
DEFAULT_METHOD = "ncvmp"
DESCRIPTION = ("Bayesian logistic regression, full-covariance Gaussian posterior by NCVMP "
               "(target= a 0/1 or two-level column)")
GH_NODES = 64


def build(data, target=None, columns=None, intercept=True, prior="fixed", prior_precision=1.0,
          a0=1e-2, b0=1e-2, standardize=True):
    """Logistic regression of ``target`` on ``columns`` (see the module docstring)."""
    X, y, terms, design = _design(data, target, columns, intercept)
    N, P = X.shape
    observed = _check_target(y, design["target"]) & _complete_rows(X, N)
    Xs, A = _standardize(X, observed, intercept) if standardize else (X, np.eye(P))
    yv = bg.Bernoulli(logits=bg.Dot(np.where(np.isfinite(Xs), Xs, 0.0),
                                    bg.MultivariateNormal(np.zeros(P), _prior(P, prior, prior_precision,
                                                                              a0, b0), name="w"),
                                    name="eta"),
                      name="y").observe(np.where(observed, y, 0.0), mask=observed)
    model = bg.Model(yv)
    model.meta = {"zoo": NAME, "terms": terms, "design": design, "X": X, "y": y,
                  "observed": observed, "prior": prior, "target": design["target"],
                  "to_original": A,
                  "fit_options": {"max_iter": 2000, "tol": 1e-10}}
    return model


def _check_target(y, target):
    obs = np.isfinite(y)
    bad = obs & (y != 0) & (y != 1)
    if np.any(bad):
        raise ValueError(f"{NAME}: the target {target!r} must be 0/1 (or a column with two levels), "
                         f"but {int(bad.sum())} values are not, e.g. {y[np.argmax(bad)]:g}")
    return obs


def _complete_rows(X, N):
    ok = np.all(np.isfinite(X), axis=1)
    if not ok.all():
        warnings.warn(f"{NAME}: {int((~ok).sum())} of {N} rows have a missing predictor; they are "
                      f"masked out of the fit (Dot(X, w) needs complete covariates): impute them "
                      f"to use those rows", stacklevel=3)
    if not ok.any():
        raise ValueError(f"{NAME}: no row has every predictor observed")
    return ok


def _standardize(X, rows, intercept):
    """Centre (with an intercept) and scale every column with more than two distinct
    values; returns (X_std, A) with w_original = A w_std (exact: a linear map of a
    Gaussian). The prior then applies to the standardised coefficients, and the
    first sweep never sees astronomically wide linear predictors."""
    Xs, A = X.copy(), np.eye(X.shape[1])
    for j in range(int(intercept), X.shape[1]):
        col = X[rows, j]
        if len(np.unique(col)) <= 2 or np.std(col) == 0:
            continue                                   # indicators and constants stay as they are
        c, s = (np.mean(col) if intercept else 0.0), np.std(col)
        Xs[:, j] = (X[:, j] - c) / s
        A[j, j] = 1.0 / s
        if intercept:
            A[0, j] = -c / s
    return Xs, A


def _prior(P, prior, prior_precision, a0, b0):
    """The weights' precision: a fixed matrix, or a Gamma node (shared or one per weight)."""
    if prior == "fixed":
        return float(prior_precision) * np.eye(P)
    if prior in ("gamma", "ard"):
        return bg.Gamma(a0, b0, plates=(P,) if prior == "ard" else (), name="alpha")
    raise ValueError(f"{NAME}: prior={prior!r}; choose 'fixed', 'gamma' or 'ard'")


# ---- the design matrix (same recipe as linreg.py) ------------------------------------------
def _design(data, target, columns, intercept):
    """(X, y, term names, recipe to rebuild X from new rows)."""
    if isinstance(data, tuple) and len(data) == 2:
        X, y = (np.asarray(a, dtype=float) for a in data)
        X = X[:, None] if X.ndim == 1 else X
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValueError(f"{NAME}: give (X, y) with X of shape (N, P) and y of shape (N,), got "
                             f"{X.shape} and {y.shape}")
        names = [f"x{j}" for j in range(X.shape[1])]
        design = {"kind": "array", "columns": names, "intercept": intercept, "target": "y",
                  "levels": {}, "target_levels": None}
        return _with_intercept(X, intercept), y, (["intercept"] if intercept else []) + names, design
    df = io.read_table(data)
    if target is None:
        raise ValueError(f"{NAME}: name the response column with target= (--target); columns: "
                         f"{list(df.columns)}")
    if target not in df.columns:
        raise ValueError(f"{NAME}: unknown target column {target!r}; columns: {list(df.columns)}")
    cols = io.parse_columns(columns) or [c for c in df.columns if c != target]
    if target in cols:
        raise ValueError(f"{NAME}: the target {target!r} cannot also be a predictor; leave it out "
                         f"of columns=")
    table = io.encode_table(df, cols + [target])
    design = {"kind": "table", "columns": cols, "intercept": intercept, "target": target,
              "levels": {c: table.levels(c) for c in table.categorical if c != target},
              "target_levels": None}
    col = table[target]
    if col.kind == "categorical":
        if len(col.levels) != 2:
            raise ValueError(f"{NAME}: the target {target!r} has {len(col.levels)} levels "
                             f"({table.levels(target)[:4]}); logistic regression needs two")
        design["target_levels"] = list(col.levels)
        y = np.where(col.values >= 0, col.values, np.nan).astype(float)
    else:
        y = col.values.astype(float)
    X, terms = _expand(table, design)
    return _with_intercept(X, intercept), y, (["intercept"] if intercept else []) + terms, design


def _expand(table, design):
    """Numeric columns as they are; a categorical column as indicators of its levels
    after the first (the reference level)."""
    blocks, terms = [], []
    for c in design["columns"]:
        col = table[c]
        if c in design["levels"]:
            if col.kind != "categorical":
                raise ValueError(f"{NAME}: column {c!r} was categorical when the model was built")
            labels = [col.levels[int(v)] if v >= 0 else None for v in col.values]
            for lv in design["levels"][c][1:]:
                blocks.append(np.array([np.nan if lab is None else float(lab == lv) for lab in labels]))
                terms.append(f"{c}[{lv}]")
        else:
            blocks.append(col.values.astype(float))
            terms.append(c)
    return np.column_stack(blocks) if blocks else np.empty((table.n_rows, 0)), terms


def _with_intercept(X, intercept):
    return np.column_stack([np.ones(len(X)), X]) if intercept else X


def _model(fit):
    model = getattr(fit, "model", fit)
    if getattr(model, "meta", {}).get("zoo") != NAME:
        raise TypeError(f"{NAME}: give the FitResult of a model built by {NAME}.build")
    return model


def _new_design(model, X_new):
    d = model.meta["design"]
    if d["kind"] == "array" or not hasattr(X_new, "columns"):
        X = np.atleast_2d(np.asarray(X_new, dtype=float))
        n_in = len(model.meta["terms"]) - int(d["intercept"])
        if X.shape[1] != n_in:
            raise ValueError(f"{NAME}.predict: new rows need {n_in} columns "
                             f"{model.meta['terms'][int(d['intercept']):]}, got shape {X.shape}")
        return _with_intercept(X, d["intercept"])
    missing = [c for c in d["columns"] if c not in X_new.columns]
    if missing:
        raise ValueError(f"{NAME}.predict: new rows lack the column(s) {missing}")
    table = io.encode_table(X_new[d["columns"]], categorical=list(d["levels"]))
    for c, levels in d["levels"].items():          # re-use the training levels
        col = table[c]
        labels = [col.levels[int(v)] if v >= 0 else None for v in col.values]
        unknown = sorted({lab for lab in labels if lab is not None and lab not in levels}, key=str)
        if unknown:
            raise ValueError(f"{NAME}.predict: column {c!r} has levels {unknown} not seen in training")
        col.levels = list(levels)
        col.values = np.array([-1 if lab is None else levels.index(lab) for lab in labels])
    X, _ = _expand(table, d)
    return _with_intercept(X, d["intercept"])


# ---- results ------------------------------------------------------------------------------
def linear_predictor(fit, X_new):
    """Mean and variance of a = x . w under q for new rows (a DataFrame with the
    predictor columns, or an array without the intercept column)."""
    model = _model(fit)
    X = _new_design(model, X_new)
    m, S = _weights(model)
    return X @ m, np.einsum("ni,ij,nj->n", X, S, X)


def _weights(model):
    """Posterior mean and covariance of the weights on the original scale of the columns."""
    q = model["w"].posterior
    A = model.meta["to_original"]
    return A @ q.mean, A @ q.cov @ A.T


def predict_proba(fit, X_new):
    """P(y = 1 | x, data) = E_q[sigmoid(x . w)] (Gauss-Hermite), one per new row.
    For a two-level text target, "1" is the second level (``meta['design']['target_levels']``)."""
    m, v = linear_predictor(fit, X_new)
    t, wt = np.polynomial.hermite.hermgauss(GH_NODES)
    return expit(m[:, None] + np.sqrt(2.0 * v)[:, None] * t) @ wt / np.sqrt(np.pi)


predict = predict_proba


def summarize(fit, level=0.95):
    """One row per weight: posterior mean, sd, central ``level`` interval, the odds
    ratio exp(mean) (the posterior median of exp(w_j)) and the prior sd (with a Gamma
    precision, at its posterior mean), all on the original scale of the columns."""
    pd = io.require_pandas()
    model = _model(fit)
    m, S = _weights(model)
    sd = np.sqrt(np.diag(S))
    zq = stats.norm.ppf(0.5 + level / 2)
    lo_name, hi_name = f"q{50 - 50 * level:g}", f"q{50 + 50 * level:g}"
    prec = np.diag(model["w"].factor.parents[1].moments()[0]) if model.meta["prior"] == "fixed" \
        else np.broadcast_to(model["alpha"].posterior.mean, m.shape)
    A = model.meta["to_original"]
    prior_sd = np.sqrt(np.einsum("ij,j,ij->i", A, 1.0 / prec, A))
    return pd.DataFrame([{"term": t, "mean": m[i], "sd": sd[i], lo_name: m[i] - zq * sd[i],
                          hi_name: m[i] + zq * sd[i], "odds_ratio": np.exp(m[i]),
                          "prior_sd": prior_sd[i]}
                         for i, t in enumerate(model.meta["terms"])])


def write_outputs(fit, out_dir):
    """predictions.csv: the target and P(y = 1) per row (rows with a missing target
    get a prediction too; rows with a missing predictor get none)."""
    from pathlib import Path

    pd = io.require_pandas()
    model = _model(fit)
    X = model.meta["X"]
    ok = np.all(np.isfinite(X), axis=1)
    prob = np.full(len(X), np.nan)
    if ok.any():
        d = model.meta["design"]
        prob[ok] = predict_proba(fit, X[ok][:, int(d["intercept"]):])
    df = pd.DataFrame({model.meta["target"]: model.meta["y"], "predicted_probability": prob})
    path = Path(out_dir) / "predictions.csv"
    df.to_csv(path, index_label="row")
    return [path]
