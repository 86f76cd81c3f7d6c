"""Bayesian linear regression with unknown noise precision and optional ARD
(docs/models/linreg.md). Copy this file and adapt it. The model::

    alpha ~ Gamma(a0, b0)            plates (P,): one precision per weight (ARD)
                                     plates ():   one shared precision (isotropic)
    w     ~ MultivariateNormal(zeros(P), alpha)      (precision diag(alpha))
    tau   ~ Gamma(a0, b0)                            noise precision
    y_n   ~ Normal(x_n . w, tau)                     y = Normal(Dot(X, w), tau)

Mean-field VMP gives q(w) = N(m, S), q(tau) and q(alpha) Gamma (MATH.md §6).
ARD drives the precision of an irrelevant weight up, so its posterior shrinks
towards zero; ``prior_precision`` in the summary shows it.

Input: a DataFrame or CSV path with ``target=`` the response column and
``columns=`` the predictors (default: every other column), or a pair of arrays
``(X, y)``. A categorical predictor becomes 0/1 indicator columns (the first
level is the reference). Missing targets are masked (the row is kept and gets
a prediction); rows with a missing predictor are masked with a warning, since
``Dot(X, w)`` needs complete covariates.

    import linreg
    model = linreg.build(df, target="price", columns=["area", "rooms"])
    fit = model.fit("vmp", **model.meta["fit_options"])
    linreg.summarize(fit)                      # one row per weight, plus the noise
    mean, var = linreg.predict(fit, new_rows)  # posterior predictive
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

import blrgraph as bg
from blrgraph import io

DEFAULT_METHOD = "vmp"
DESCRIPTION = "Bayesian linear regression, Gamma noise precision, optional ARD (target=)"


def build(data, target=None, columns=None, ard=True, intercept=True, a0=1e-3, b0=1e-3):
    """Linear regression of ``target`` on ``columns`` (see the module docstring)."""
    X, y, terms, design = _design(data, target, columns, intercept)
    N, P = X.shape
    ymask = np.isfinite(y)
    xmask = np.all(np.isfinite(X), axis=1)
    if not xmask.all():
        warnings.warn(f"linreg: {int((~xmask).sum())} of {N} rows have a missing predictor; they are "
                      f"masked out of the fit (Dot(X, w) needs complete covariates): impute them "
                      f"to use those rows", stacklevel=2)
    observed = ymask & xmask
    if observed.sum() == 0:
        raise ValueError("linreg: no row has both the target and every predictor observed")

    alpha = bg.Gamma(a0, b0, plates=(P,) if ard else (), name="alpha")
    w = bg.MultivariateNormal(np.zeros(P), alpha, name="w")
    tau = bg.Gamma(a0, b0, name="tau")
    Xf = np.where(np.isfinite(X), X, 0.0)       # masked rows: placeholder covariates
    yv = bg.Normal(bg.Dot(Xf, w), tau, name="y").observe(np.where(observed, y, 0.0), mask=observed)

    model = bg.Model(yv)
    model.meta = {"zoo": "linreg", "terms": terms, "design": design, "X": X, "y": y,
                  "observed": observed, "ard": ard, "target": design["target"],
                  "fit_options": {"max_iter": 2000, "tol": 1e-10}}
    return model


def _design(data, target, columns, intercept):
    """(X, y, term names, recipe to rebuild X from new rows)."""
    if isinstance(data, tuple) and len(data) == 2:
        X, y = (np.asarray(a, dtype=float) for a in data)
        X = X[:, None] if X.ndim == 1 else X
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValueError(f"linreg: give (X, y) with X of shape (N, P) and y of shape (N,), got "
                             f"{X.shape} and {y.shape}")
        names = [f"x{j}" for j in range(X.shape[1])]
        design = {"kind": "array", "columns": names, "intercept": intercept, "target": "y",
                  "levels": {}}
        return _with_intercept(X, intercept), y, (["intercept"] if intercept else []) + names, design
    df = io.read_table(data)          # needs pandas (pip install blrgraph[tables])
    if target is None:
        raise ValueError(f"linreg: name the response column with target= (--target); columns: "
                         f"{list(df.columns)}")
    if target not in df.columns:
        raise ValueError(f"linreg: unknown target column {target!r}; columns: {list(df.columns)}")
    cols = io.parse_columns(columns) or [c for c in df.columns if c != target]
    if target in cols:
        raise ValueError(f"linreg: the target {target!r} cannot also be a predictor; leave it out "
                         f"of columns=")
    table = io.encode_table(df, cols + [target])
    if table[target].kind != "numeric":
        raise ValueError(f"linreg: the target column {target!r} is categorical (levels "
                         f"{table.levels(target)[:4]}); linear regression needs a numeric target")
    design = {"kind": "table", "columns": cols, "intercept": intercept, "target": target,
              "levels": {c: table.levels(c) for c in table.categorical if c != target}}
    X, terms = _expand(table, design)
    return _with_intercept(X, intercept), table[target].values, \
        (["intercept"] if intercept else []) + terms, design


def _expand(table, design):
    """Numeric columns as they are; a categorical column as indicators of its levels
    after the first (the reference level)."""
    blocks, terms = [], []
    for c in design["columns"]:
        col = table[c]
        if c in design["levels"]:
            levels = design["levels"][c]
            codes = col.values if col.kind == "categorical" else None
            if codes is None:
                raise ValueError(f"linreg: column {c!r} was categorical when the model was built")
            labels = [col.levels[int(v)] if v >= 0 else None for v in codes]
            for lv in levels[1:]:
                ind = np.array([np.nan if lab is None else float(lab == lv) for lab in labels])
                blocks.append(ind)
                terms.append(f"{c}[{lv}]")
        else:
            blocks.append(col.values.astype(float))
            terms.append(c)
    return np.column_stack(blocks) if blocks else np.empty((table.n_rows, 0)), terms


def _with_intercept(X, intercept):
    return np.column_stack([np.ones(len(X)), X]) if intercept else X


def _model(fit):
    model = getattr(fit, "model", fit)
    if getattr(model, "meta", {}).get("zoo") != "linreg":
        raise TypeError("linreg: give the FitResult of a model built by linreg.build")
    return model


def _new_design(model, X_new):
    d = model.meta["design"]
    if d["kind"] == "array" or not hasattr(X_new, "columns"):
        X = np.atleast_2d(np.asarray(X_new, dtype=float))
        n_in = len(model.meta["terms"]) - int(d["intercept"])
        if X.shape[1] != n_in:
            raise ValueError(f"linreg.predict: new rows need {n_in} columns "
                             f"{model.meta['terms'][int(d['intercept']):]}, got shape {X.shape}")
        return _with_intercept(X, d["intercept"])
    missing = [c for c in d["columns"] if c not in X_new.columns]
    if missing:
        raise ValueError(f"linreg.predict: new rows lack the column(s) {missing}")
    table = io.encode_table(X_new[d["columns"]], categorical=list(d["levels"]))
    for c, levels in d["levels"].items():          # re-use the training levels
        col = table[c]
        labels = [col.levels[int(v)] if v >= 0 else None for v in col.values]
        unknown = sorted({lab for lab in labels if lab is not None and lab not in levels}, key=str)
        if unknown:
            raise ValueError(f"linreg.predict: column {c!r} has levels {unknown} not seen in training")
        col.levels = list(levels)
        col.values = np.array([-1 if lab is None else levels.index(lab) for lab in labels])
    X, _ = _expand(table, d)
    return _with_intercept(X, d["intercept"])


def predict(fit, X_new):
    """Posterior predictive mean and variance of y for new rows (a DataFrame with
    the predictor columns, or an array without the intercept column):
    E[y] = x.m,  Var[y] = x^T S x + E[1/tau]   (under q(w) q(tau))."""
    model = _model(fit)
    X = _new_design(model, X_new)
    w = model["w"].posterior
    m, S = w.mean, w.cov
    p = model["tau"].posterior.params
    e_inv_tau = p["rate"] / (p["shape"] - 1.0)
    return X @ m, np.einsum("ni,ij,nj->n", X, S, X) + e_inv_tau


def summarize(fit, level=0.95):
    """One row per weight: posterior mean, sd, central ``level`` interval and the
    prior precision E[alpha]; a last row for the noise precision tau."""
    pd = io.require_pandas()
    model = _model(fit)
    post = model["w"].posterior
    m, sd = post.mean, np.sqrt(np.diag(post.cov))
    zq = stats.norm.ppf(0.5 + level / 2)
    lo_name, hi_name = f"q{50 - 50 * level:g}", f"q{50 + 50 * level:g}"
    ea = np.broadcast_to(model["alpha"].posterior.mean, m.shape)
    rows = [{"term": t, "mean": m[i], "sd": sd[i], lo_name: m[i] - zq * sd[i],
             hi_name: m[i] + zq * sd[i], "prior_precision": ea[i]}
            for i, t in enumerate(model.meta["terms"])]
    p = model["tau"].posterior.params
    g = stats.gamma(p["shape"], scale=1.0 / p["rate"])
    rows.append({"term": "noise precision (tau)", "mean": g.mean(), "sd": g.std(),
                 lo_name: g.ppf(0.5 - level / 2), hi_name: g.ppf(0.5 + level / 2),
                 "prior_precision": np.nan})
    return pd.DataFrame(rows)


def write_outputs(fit, out_dir):
    """predictions.csv: the target, the posterior predictive mean and sd per row
    (rows with a missing target get a prediction too)."""
    from pathlib import Path

    pd = io.require_pandas()
    model = _model(fit)
    X = model.meta["X"]
    ok = np.all(np.isfinite(X), axis=1)
    mean = np.full(len(X), np.nan)
    sd = np.full(len(X), np.nan)
    post = model["w"].posterior
    p = model["tau"].posterior.params
    mean[ok] = X[ok] @ post.mean
    sd[ok] = np.sqrt(np.einsum("ni,ij,nj->n", X[ok], post.cov, X[ok]) + p["rate"] / (p["shape"] - 1.0))
    df = pd.DataFrame({model.meta["target"]: model.meta["y"], "predicted_mean": mean,
                       "predicted_sd": sd})
    path = Path(out_dir) / "predictions.csv"
    df.to_csv(path, index_label="row")
    return [path]
