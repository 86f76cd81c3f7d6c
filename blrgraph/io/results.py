"""Regression results: the weights' posterior, linear predictors, the weights' summary
table, and the predictions written next to the data."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .tables import require_pandas
from .design import design_rows


# ---- regression: results -------------------------------------------------------------------
def weights_posterior(model, node="w"):
    """Posterior mean and covariance of the regression weights on the original scale
    of the columns: (A m, A S A^T) with A = ``model.meta["to_original"]`` (exact: a
    linear map of the Gaussian q(w)); plus ``model.meta["offset"]`` when the fit centred
    the target (linreg's ``hyper="evidence"``: the intercept is y-bar - x-bar . m)."""
    q = model[node].posterior
    A = model.meta.get("to_original")
    if A is None:
        return q.mean, q.cov
    m = A @ q.mean
    c = model.meta.get("offset")
    return (m if c is None else m + np.asarray(c, dtype=float)), A @ q.cov @ A.T


def linear_predictor(model, X_new, node="w"):
    """Mean and variance of a = x . w under q for new rows (see :func:`design_rows`)."""
    X = design_rows(model.meta["design"], X_new)
    m, S = weights_posterior(model, node)
    return X @ m, np.einsum("ni,ij,nj->n", X, S, X)


def held_out(model, data, node="w"):
    """(mean, variance of a = x . w under q, target y, observed) for held-out rows: a
    DataFrame or CSV with the predictor and target columns, or a pair of arrays (X
    without the intercept column, y). A two-level text target is coded as in the fit
    (its second level is 1); ``observed`` is False where the target is missing."""
    recipe = model.meta["design"]
    name, target = recipe["model"], recipe["target"]
    if isinstance(data, tuple) and len(data) == 2:
        X, y = np.atleast_2d(np.asarray(data[0], dtype=float)), np.asarray(data[1], dtype=float)
        if X.shape[0] == 1 and y.size > 1:
            X = X.T
    else:
        from .tables import read_table
        df = read_table(data) if not hasattr(data, "columns") else data
        if target not in df.columns:
            raise ValueError(f"{name}.log_predictive: the held-out rows lack the target column "
                             f"{target!r}; it is what is scored (predict_table needs only the "
                             f"predictors)")
        X = df
        levels = recipe.get("target_levels")
        if levels:
            from .outputs import level_codes
            codes = level_codes(df[target].tolist(), levels, target, name)
            y = np.where(codes >= 0, codes, np.nan).astype(float)
        else:
            y = df[target].to_numpy(dtype=float, na_value=np.nan)
    m, v = linear_predictor(model, X, node)
    if y.shape != m.shape:
        raise ValueError(f"{name}.log_predictive: {len(m)} rows of predictors but {y.size} "
                         f"targets")
    return m, v, y, np.isfinite(y)


def prior_precision(model, node="w"):
    """(P,) diagonal of the weights' prior precision on the fit scale: E[alpha] for a
    Gamma precision node (shared or one per weight), else the fixed matrix's diagonal."""
    w = model[node]
    prec = w.factor.parents[1]
    P = np.shape(w.posterior.mean)[-1]
    if prec.stochastic:
        return np.broadcast_to(prec.posterior.mean, (P,))
    return np.diag(prec.moments()[0])


def prior_sd(model, node="w"):
    """Prior sd of each weight on the original scale: sqrt(diag(A diag(1/prec) A^T))."""
    prec = prior_precision(model, node)
    A = model.meta.get("to_original")
    A = np.eye(len(prec)) if A is None else A
    return np.sqrt(np.einsum("ij,j,ij->i", A, 1.0 / prec, A))


def interval_names(level=0.95):
    """Column names of a central ``level`` interval: ("q2.5", "q97.5") for 0.95."""
    return f"q{50 - 50 * level:g}", f"q{50 + 50 * level:g}"


def weights_summary(terms, mean, cov, level=0.95, **columns):
    """One row per weight: ``term``, ``mean``, ``sd``, the central ``level`` interval
    of the Gaussian marginal, then each of ``columns`` (name=array of one value per
    weight), in order."""
    from scipy import stats

    pd = require_pandas()
    mean = np.asarray(mean, dtype=float)
    sd = np.sqrt(np.diag(cov))
    zq = stats.norm.ppf(0.5 + level / 2)
    lo_name, hi_name = interval_names(level)
    return pd.DataFrame([{"term": t, "mean": mean[i], "sd": sd[i], lo_name: mean[i] - zq * sd[i],
                          hi_name: mean[i] + zq * sd[i],
                          **{k: np.asarray(v)[i] for k, v in columns.items()}}
                         for i, t in enumerate(terms)])


def training_predictions(model, predict):
    """``predict(model, rows)`` on the training rows that have every predictor; NaN for
    the others. ``predict`` may return an array or a tuple of arrays (one per row)."""
    X = model.meta["X"]
    ok = np.all(np.isfinite(X), axis=1)     # design_matrix guarantees at least one such row
    out = predict(model, X[ok][:, int(model.meta["design"]["intercept"]):])
    full = []
    for part in (out if isinstance(out, tuple) else (out,)):
        a = np.full(len(X), np.nan)
        a[ok] = part
        full.append(a)
    return tuple(full) if isinstance(out, tuple) else full[0]


def write_predictions(model, out_dir, **columns):
    """predictions.csv: the target and ``columns`` (name=array over the training rows),
    one line per row; returns its path."""
    pd = require_pandas()
    df = pd.DataFrame({model.meta["target"]: model.meta["y"], **columns})
    path = Path(out_dir) / "predictions.csv"
    df.to_csv(path, index_label="row")
    return path
