"""Mixture over a table with numeric and categorical columns together
(docs/models/mixed_mixture.md). Copy this file and adapt it. The model::

    w                ~ Dirichlet(alpha * ones(K))
    z_n              ~ Categorical(w),                     plates (N, 1): one z per row
    numeric columns d = 1..Dn (one Mixture node, data (N, Dn)):
      (mu_dk, tau_dk) ~ NormalGamma(m0_d, beta0, 1, var_d / K), plates (Dn, K)
      x_nd | z_n = k  ~ Normal(mu_dk, 1 / tau_dk)
    each categorical column j (one Mixture node per column, data (N, 1)):
      phi_j          ~ Dirichlet(beta * ones(L_j)),       plates (K,)
      c_nj | z_n = k ~ Categorical(phi_jk)

The numeric priors are scaled to each column: m0_d is its mean and
E[tau_dk] = K / var_d (a component is a priori narrower than the column), with
shape 1, i.e. the weight of two observations; beta0 = 0.01 keeps the prior on
the component means vague. All the Mixture nodes share z, whose plates (N, 1) broadcast
against the (Dn, K) component parameters: the components are the last plate
axis. Missing cells are masked cell by cell, in numeric and categorical
columns alike.

    import mixed_mixture
    model = mixed_mixture.build(df, k=3)
    fit = model.fit("vmp", seed=0, **model.meta["fit_options"])
    mixed_mixture.summarize(fit)
"""
from __future__ import annotations

import numpy as np

import blrgraph as bg
from blrgraph import io

NAME = "mixed_mixture"
DEFAULT_METHOD = "vmp"
DESCRIPTION = "mixture over numeric (Gaussian) and categorical columns, missing cells masked"


def build(data, k=3, columns=None, categorical=None, alpha=1.0, beta=1.0, beta0=0.01):
    """K components over the ``columns`` of ``data``; numbers are Gaussian columns,
    text is categorical (``categorical=[...]`` makes numeric codes categorical)."""
    k = int(k)
    if k < 1:
        raise ValueError(f"mixed_mixture: k must be >= 1, got {k}")
    table = io.encode_table(data, columns, categorical=categorical)
    N = table.n_rows
    num = table.numeric

    w = bg.Dirichlet(alpha * np.ones(k), name="weights")
    theta = None
    if num:
        X, mask = table.numeric_array(num), table.mask(num)
        Xm = np.where(mask, X, np.nan)
        m0 = np.nanmean(Xm, axis=0)
        var = np.nanvar(Xm, axis=0)
        var = np.where(var > 0, var, 1.0)
        ones = np.ones((len(num), k))
        theta = bg.NormalGamma(m0[:, None] * ones, beta0, 1.0, var[:, None] * ones / k,
                               plates=(len(num), k), name="theta")
    phis = {c: bg.Dirichlet(beta * np.ones(len(table.levels(c))), plates=(k,), name=f"phi[{c}]")
            for c in table.categorical}
    z = bg.Categorical(w, plates=(N, 1), name="z")
    nodes = []
    if num:
        nodes.append(bg.Mixture(z, bg.Normal, theta, name="x").observe(np.where(mask, X, 0.0),
                                                                       mask=mask))
    for c in table.categorical:
        codes = table.codes(c)[:, None]
        observed = codes >= 0
        nodes.append(bg.Mixture(z, bg.Categorical, phis[c], name=f"x[{c}]")
                     .observe(np.where(observed, codes, 0), mask=observed))

    model = bg.Model(*nodes)
    model.meta = {"zoo": NAME, "table": table, "k": k, "numeric": list(num),
                  "categorical": list(table.categorical),
                  "levels": {c: [io.jsonable(v) for v in table.levels(c)] for c in table.categorical},
                  "fit_options": {"max_iter": 1000, "tol": 1e-8}}
    return model


def assignments(fit):
    """(N, K) posterior component probabilities of the rows."""
    return io.responsibilities(io.fitted_model(fit, NAME))


def predict_table(fit, data):
    """Component probabilities of new rows (a DataFrame or CSV with the model's columns;
    missing cells are left out): E[w_k] times the Student-t predictive of each numeric
    cell and E[phi_jk][level] of each categorical cell under component k (the exact
    posterior predictive under q; docs/predict.md). One row per new row: the most
    probable ``component`` and ``p0..pK-1``."""
    logp = _log_joint(io.fitted_model(fit, NAME), data)
    return io.assignment_table(io.normalise_log(logp))


def log_predictive(fit, data):
    """(M,) held-out score of each new row (a DataFrame or CSV with the model's columns;
    missing cells are left out): log p(row | training data) = log sum_k E[w_k] times the
    Student-t and Categorical cell predictives of component k, exact under q
    (docs/predict.md, "Held-out scores of the zoo")."""
    from scipy.special import logsumexp
    return logsumexp(_log_joint(io.fitted_model(fit, NAME), data), axis=1)


def _log_joint(model, data):
    """(M, K) log E[w_k] + the log predictives of the observed cells under component k."""
    from scipy import stats
    meta = model.meta
    df = io.new_rows(data, meta["numeric"] + meta["categorical"], NAME)
    logp = np.log(io.mixture_weights(model))[None, :] * np.ones((len(df), 1))
    if meta["numeric"]:
        X = io.numeric_cells(df, meta["numeric"], NAME)
        p = model["theta"].posterior.params                      # plates (Dn, K)
        m, kappa, a, b = p["mean"], p["beta"], p["shape"], p["rate"]
        scale = np.sqrt(b * (kappa + 1.0) / (a * kappa))
        obs = np.isfinite(X)
        ll = stats.t.logpdf(np.where(obs, X, 0.0)[:, :, None], 2.0 * a, m, scale)
        logp += np.where(obs[:, :, None], ll, 0.0).sum(axis=1)
    for c in meta["categorical"]:
        codes = io.level_codes(df[c].tolist(), meta["levels"][c], c, NAME)
        phi = model[f"phi[{c}]"].posterior.mean
        logp += np.where(codes[:, None] >= 0, np.log(phi[:, np.maximum(codes, 0)].T), 0.0)
    return logp


def predict(fit, data):
    """(M,) the most probable component of each new row (the argmax of :func:`predict_table`'s
    probabilities; docs/predict.md, "What predict means")."""
    return _log_joint(io.fitted_model(fit, NAME), data).argmax(axis=1)


def _t_sd(scale2, a):
    """sqrt(scale2 / (a - 1)): the sd of mu (scale2 = b / beta) or sqrt(E[1/tau])
    (scale2 = b) under a Normal-Gamma; infinite while a <= 1 (no data yet)."""
    return float(np.sqrt(scale2 / (a - 1.0))) if a > 1.0 else np.inf


def summarize(fit):
    """One row per (component, column[, level]). Numeric columns: ``mean`` = E[mu],
    ``mean_sd`` its posterior sd, ``sd`` = sqrt(E[1/tau]) the spread inside the
    component. Categorical columns: one row per level, ``mean`` = the posterior mean
    probability of the level, ``mean_sd`` its posterior sd."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    table = model.meta["table"]
    weight = io.mixture_weights(model)
    n = assignments(model).sum(axis=0)
    rows = []
    point = any(io.is_point(model, name) for name in
                (["theta"] if table.numeric else []) + [f"phi[{c}]" for c in table.categorical])
    if table.numeric:
        p = model["theta"].posterior.params      # plates (Dn, K)
        m, kappa, a, b = p["mean"], p["beta"], p["shape"], p["rate"]
        if point:  # EM: the MAP (mu, tau); the spread inside a component is 1/sqrt(tau)
            m, tau = model["theta"].posterior.point
    for k in range(model.meta["k"]):
        base = {"component": k, "weight": weight[k], "n": n[k]}
        for d, c in enumerate(table.numeric):
            rows.append({**base, "variable": c, "type": "numeric", "category": None,
                         "mean": m[d, k], "mean_sd": _t_sd(b[d, k] / kappa[d, k], a[d, k]),
                         "sd": 1.0 / np.sqrt(tau[d, k]) if point else _t_sd(b[d, k], a[d, k])})
        for c in table.categorical:
            post = model[f"phi[{c}]"].posterior
            for i, level in enumerate(table.levels(c)):
                rows.append({**base, "variable": c, "type": "categorical", "category": level,
                             "mean": post.mean[k, i], "mean_sd": np.sqrt(post.var[k, i]),
                             "sd": np.nan})
    df = pd.DataFrame(rows)
    return io.point_table(df) if point else df


def _covariances(model):
    """(K, Dn, Dn) diagonal posterior mean covariances diag(b / a) of the numeric columns."""
    p = model["theta"].posterior.params
    v = (p["rate"] / p["shape"]).T
    return v[:, :, None] * np.eye(v.shape[1])


def write_outputs(fit, out_dir):
    """assignments.csv: the most probable component and the probabilities per row;
    clusters.png: the numeric columns coloured by component (when there are any)."""
    from pathlib import Path

    model = io.fitted_model(fit, NAME)
    table = model.meta["table"]
    r = assignments(model)
    out = [io.write_assignments(r, table.index, out_dir)]
    if table.numeric:
        from blrgraph import plotting
        out.append(plotting.plot_clusters(table.numeric_array(), r, Path(out_dir) / "clusters.png",
                                          columns=table.numeric,
                                          means=model["theta"].posterior.params["mean"].T,
                                          covariances=_covariances(model),
                                          title=f"mixed mixture, K = {model.meta['k']}"))
    return out
