"""Latent class analysis: a mixture of Categorical columns for discrete tables
(docs/models/latent_class.md). Copy this file and adapt it. The model::

    w              ~ Dirichlet(alpha * ones(K))
    phi_j          ~ Dirichlet(beta * ones(L_j)),   plates (K,)   one profile per class, column j
    z_n            ~ Categorical(w)                                 n = 1..N
    x_nj | z_n = k ~ Categorical(phi_jk)                            one Mixture node per column

Every column is its own Mixture node; they all share z. Each column may have a
different number of levels L_j. Missing cells are masked: a row with a missing
answer still informs its class through its other columns.

    import latent_class
    model = latent_class.build(df, k=3)
    fit = model.fit("vmp", seed=0, **model.meta["fit_options"])
    latent_class.summarize(fit)         # class x column x level probabilities
    latent_class.class_membership(fit)  # (N, K) posterior class probabilities
"""
from __future__ import annotations

import numpy as np

import blrgraph as bg
from blrgraph import io

NAME = "latent_class"
DEFAULT_METHOD = "vmp"
DESCRIPTION = "latent class analysis: mixture of Categorical columns (discrete tables)"


def build(data, k=2, columns=None, alpha=1.0, beta=1.0):
    """K latent classes over the ``columns`` of ``data``; every column is read as
    categorical (numbers such as 1/2/3 are labels)."""
    k = int(k)
    if k < 1:
        raise ValueError(f"latent_class: k must be >= 1, got {k}")
    table = io.encode_table(data, columns, categorical="all")
    N = table.n_rows

    w = bg.Dirichlet(alpha * np.ones(k), name="weights")
    phis = {c: bg.Dirichlet(beta * np.ones(len(table.levels(c))), plates=(k,), name=f"phi[{c}]")
            for c in table.names}
    z = bg.Categorical(w, plates=(N,), name="z")
    xs = []
    for c in table.names:
        codes = table.codes(c)
        observed = codes >= 0
        xs.append(bg.Mixture(z, bg.Categorical, phis[c], name=f"x[{c}]")
                  .observe(np.where(observed, codes, 0), mask=observed))

    model = bg.Model(*xs)
    model.meta = {"zoo": NAME, "table": table, "columns": table.names, "k": k,
                  "levels": {c: [io.jsonable(v) for v in table.levels(c)] for c in table.names},
                  "fit_options": {"max_iter": 1000, "tol": 1e-8}}
    return model


def class_membership(fit):
    """(N, K) posterior class probabilities of the rows."""
    return io.responsibilities(io.fitted_model(fit, NAME))


def predict_table(fit, data):
    """Class probabilities of new rows (a DataFrame or CSV with the columns; missing cells
    are left out): p(c = k | row) proportional to E[w_k] prod_j E[phi_jk][x_j], the exact
    posterior predictive under q (docs/predict.md). One row per new row: the most
    probable ``class`` and ``p0..pK-1``."""
    logp = _log_joint(io.fitted_model(fit, NAME), data)
    return io.assignment_table(io.normalise_log(logp), label="class")


def log_predictive(fit, data):
    """(M,) held-out score of each new row (a DataFrame or CSV with the columns; missing
    cells are left out): log p(row | training data) = log sum_k E[w_k] prod_j
    E[phi_jk][x_j], exact under q (docs/predict.md, "Held-out scores of the zoo")."""
    from scipy.special import logsumexp
    return logsumexp(_log_joint(io.fitted_model(fit, NAME), data), axis=1)


def _log_joint(model, data):
    """(M, K) log E[w_k] + sum_j log E[phi_jk][x_j] over the observed cells of new rows."""
    cols = model.meta["columns"]
    df = io.new_rows(data, cols, NAME)
    logp = np.log(io.mixture_weights(model))[None, :] * np.ones((len(df), 1))
    for c in cols:
        codes = io.level_codes(df[c].tolist(), model.meta["levels"][c], c, NAME)
        phi = model[f"phi[{c}]"].posterior.mean                    # (K, L)
        logp += np.where(codes[:, None] >= 0, np.log(phi[:, np.maximum(codes, 0)].T), 0.0)
    return logp


def predict(fit, data):
    """(M,) the most probable class of each new row (the argmax of :func:`predict_table`'s
    probabilities; docs/predict.md, "What predict means")."""
    return _log_joint(io.fitted_model(fit, NAME), data).argmax(axis=1)


def profiles(fit):
    """{column: (K, L) posterior mean probabilities of each level in each class}."""
    model = io.fitted_model(fit, NAME)
    return {c: model[f"phi[{c}]"].posterior.mean for c in model.meta["columns"]}


def summarize(fit):
    """One row per (class, column, level): the class weight E[w_k], the posterior
    mean probability of the level in that class and its posterior sd."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    table = model.meta["table"]
    weight = io.mixture_weights(model)
    rows = []
    for k in range(model.meta["k"]):
        for c in model.meta["columns"]:
            post = model[f"phi[{c}]"].posterior
            mean, sd = post.mean[k], np.sqrt(post.var[k])
            for i, level in enumerate(table.levels(c)):
                rows.append({"class": k, "weight": weight[k], "variable": c, "category": level,
                             "prob": mean[i], "prob_sd": sd[i]})
    return pd.DataFrame(rows)


def write_outputs(fit, out_dir):
    """assignments.csv: the most probable class and the class probabilities per row."""
    model = io.fitted_model(fit, NAME)
    return [io.write_assignments(class_membership(model), model.meta["table"].index, out_dir,
                                 label="class")]
