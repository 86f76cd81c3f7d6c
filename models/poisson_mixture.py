"""Mixture of Poissons for count columns (docs/models/poisson_mixture.md).
Copy this file and adapt it. The model::

    w                ~ Dirichlet(alpha * ones(K))
    rate_dk          ~ Gamma(a0, a0 / mean_d),   plates (D, K)   (prior mean: the column mean)
    z_n              ~ Categorical(w),           plates (N, 1)   one z per row, shared by its D cells
    x_nd | z_n = k   ~ Poisson(rate_dk)          one Mixture node, data (N, D)

Gamma-Poisson is conjugate, so VMP updates are exact coordinate steps. Every
column must hold counts (non-negative integers); missing cells are masked.

    import poisson_mixture
    model = poisson_mixture.build(df, k=2)
    fit = model.fit("vmp", seed=0, **model.meta["fit_options"])
    poisson_mixture.summarize(fit)
"""
from __future__ import annotations

import numpy as np

import blrgraph as bg
from blrgraph import io

NAME = "poisson_mixture"
DEFAULT_METHOD = "vmp"
DESCRIPTION = "mixture of Poissons for count columns"


def build(data, k=2, columns=None, alpha=1.0, a0=1.0):
    """K Poisson components over the count ``columns`` of ``data``."""
    k = int(k)
    if k < 1:
        raise ValueError(f"poisson_mixture: k must be >= 1, got {k}")
    table = io.encode_table(data, columns)
    table.require_counts("the Poisson mixture (poisson_mixture)")
    X, mask = table.numeric_array(), table.mask()
    N, D = X.shape
    mean = np.array([np.mean(X[mask[:, d], d]) for d in range(D)])
    rate0 = a0 / np.maximum(mean, 1e-3)          # prior E[rate] = column mean

    w = bg.Dirichlet(alpha * np.ones(k), name="weights")
    rate = bg.Gamma(a0, rate0[:, None] * np.ones((D, k)), plates=(D, k), name="rate")
    z = bg.Categorical(w, plates=(N, 1), name="z")
    x = bg.Mixture(z, bg.Poisson, rate, name="x").observe(np.where(mask, X, 0.0), mask=mask)

    model = bg.Model(x)
    model.meta = {"zoo": NAME, "table": table, "columns": table.names, "k": k,
                  "fit_options": {"max_iter": 1000, "tol": 1e-8}}
    return model


def assignments(fit):
    """(N, K) posterior component probabilities of the rows."""
    return io.responsibilities(io.fitted_model(fit, NAME))


def predict_table(fit, data):
    """Component probabilities of new rows (a DataFrame or CSV with the count columns;
    missing cells are left out): E[w_k] times the product over cells of the negative
    binomial predictive of component k (Poisson with a Gamma rate; docs/predict.md).
    One row per new row: the most probable ``component`` and ``p0..pK-1``."""
    logp = _log_joint(io.fitted_model(fit, NAME), data)
    return io.assignment_table(io.normalise_log(logp))


def log_predictive(fit, data):
    """(M,) held-out score of each new row (a DataFrame or CSV with the count columns;
    missing cells are left out): log p(row | training data) = log sum_k E[w_k] prod_d
    NB(x_d | component k), exact under q (docs/predict.md, "Held-out scores of the zoo")."""
    from scipy.special import logsumexp
    return logsumexp(_log_joint(io.fitted_model(fit, NAME), data), axis=1)


def _log_joint(model, data):
    """(M, K) log E[w_k] + the negative binomial log predictives of the observed cells."""
    from scipy import stats
    cols = model.meta["columns"]
    df = io.new_rows(data, cols, NAME)
    X = io.numeric_cells(df, cols, NAME)
    p = model["rate"].posterior.params                            # plates (D, K)
    a, b = p["shape"], p["rate"]
    obs = np.isfinite(X)
    ll = stats.nbinom.logpmf(np.where(obs, X, 0.0)[:, :, None], a[None], (b / (b + 1.0))[None])
    return np.log(io.mixture_weights(model))[None, :] + np.where(obs[:, :, None], ll, 0.0).sum(axis=1)


def predict(fit, data):
    """(M,) the most probable component of each new row (the argmax of :func:`predict_table`'s
    probabilities; docs/predict.md, "What predict means")."""
    return _log_joint(io.fitted_model(fit, NAME), data).argmax(axis=1)


def summarize(fit):
    """One row per (component, column): weight E[w_k], n (expected rows), the
    posterior mean of the rate and its posterior sd."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    weight = io.mixture_weights(model)
    n = assignments(model).sum(axis=0)
    post = model["rate"].posterior            # plates (D, K)
    mean, sd = post.mean, np.sqrt(post.var)
    rows = [{"component": k, "weight": weight[k], "n": n[k], "variable": c, "rate": mean[d, k],
             "rate_sd": sd[d, k]}
            for k in range(model.meta["k"]) for d, c in enumerate(model.meta["columns"])]
    df = pd.DataFrame(rows)
    # EM: the rate is the MAP estimate (the mean of a point mass), with no posterior sd
    return io.point_table(df, ("rate_sd",), value=None) if post.is_point else df


def write_outputs(fit, out_dir):
    """assignments.csv: the most probable component and the probabilities per row."""
    model = io.fitted_model(fit, NAME)
    return [io.write_assignments(assignments(model), model.meta["table"].index, out_dir)]
