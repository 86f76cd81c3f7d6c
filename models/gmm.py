"""Gaussian mixture with K components, full or diagonal covariance (docs/models/gmm.md).

Copy this file and adapt it. The model (Bishop, PRML §10.2)::

    w                  ~ Dirichlet(alpha * ones(K))
    z_n                ~ Categorical(w)                                  n = 1..N
    covariance="full":
      (mu_k, Lambda_k) ~ NormalWishart(m0, beta0, nu0, W0)              k = 1..K
      x_n | z_n = k    ~ MultivariateNormal(mu_k, inv(Lambda_k))
    covariance="diag":
      (mu_dk, tau_dk)  ~ NormalGamma(m0_d, beta0, a0, b0_d)              d = 1..D
      x_nd | z_n = k   ~ Normal(mu_dk, 1 / tau_dk)

Priors scaled to the data (as scikit-learn's BayesianGaussianMixture does):
m0 = the column means; a priori a cluster's precision is D times the data's,
E[Lambda_k] = nu0 W0 = D inv(C) with C the data covariance, nu0 = D + 2
(diag: E[tau_dk] = a0 / b0_d = D / var_d with a0 = 1); beta0 = 0.01 keeps the
prior on the component means vague (scikit-learn's beta0 = 1 says a component's
mean lies within about one component-width of the data mean, which pulls
well-separated components towards the centre and widens them).

Missing cells: every observed cell counts. With ``covariance="diag"`` each cell
is its own observation and the mask leaves out exactly the missing ones. With
``covariance="full"`` the mask has the table's shape: a row's missing coordinates
are latent variables, Gaussian given the row's component (Ghahramani & Jordan 1994;
docs/api.md "Masks"), so a partly observed row counts through its observed cells.
A row with no observed cell is masked out of the fit (it integrates out exactly).

    import gmm
    model = gmm.build(df, k=3, columns=["a", "b"])
    fit = model.fit("vmp", seed=0, **model.meta["fit_options"])
    gmm.summarize(fit)                 # one row per (component, column)
    gmm.predict_proba(fit, new_rows)   # (M, K) cluster probabilities
    gmm.predict(fit, new_rows)         # (M,) the most probable cluster of each row
    gmm.predict_table(fit, new_rows)   # table: cluster, p0..pK-1, imputed missing cells
    gmm.impute(fit, new_rows)          # predictive mean and sd of every cell

Many rows (or rows in a memory-mapped file): stochastic VI on minibatches of
rows, the same model and results (docs/models/gmm.md, "SVI")::

    fit = model.fit("svi", seed=0, **model.meta["fit_options_by_method"]["svi"])
"""
from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import logsumexp

import blrgraph as bg
from blrgraph import io

NAME = "gmm"
DEFAULT_METHOD = "vmp"
DESCRIPTION = "Gaussian mixture (full or diagonal covariance), K chosen by the user"


def build(data, k=3, columns=None, covariance="full", alpha=1.0, beta0=0.01, weights="dirichlet",
          m0=None, nu0=None, cov0=None):
    """A K-component Gaussian mixture over the numeric ``columns`` of ``data``
    (a DataFrame, a CSV path or an (N, D) array; NaN = missing).

    ``weights="dirichlet"``: w ~ Dirichlet(alpha * ones(K)); ``"dirichlet_process"``:
    stick-breaking weights ``bg.StickBreaking(alpha, K, truncated=False)`` (scikit-learn's
    "dirichlet_process" prior: unused components empty out). ``m0``, ``nu0``, ``cov0``
    replace the data-scaled priors (scikit-learn's mean_prior, degrees_of_freedom_prior,
    covariance_prior): full, Lambda_k ~ Wishart(nu0, inv(cov0)); diag,
    tau_dk ~ Gamma(nu0 / 2, cov0_d / 2)."""
    k = int(k)
    if k < 1:
        raise ValueError(f"gmm: k must be >= 1, got {k}")
    if covariance not in ("full", "diag"):
        raise ValueError(f"gmm: covariance must be 'full' or 'diag', got {covariance!r}")
    if weights not in ("dirichlet", "dirichlet_process"):
        raise ValueError(f"gmm: weights must be 'dirichlet' or 'dirichlet_process', got {weights!r}")
    table = io.encode_table(data, columns)
    table.require_numeric("the Gaussian mixture (gmm)", alternative="mixed_mixture")
    X, mask = table.numeric_array(), table.mask()
    N, D = X.shape
    mean, C = io.observed_mean_cov(X, mask)
    m0 = mean if m0 is None else np.asarray(m0, dtype=float) * np.ones(D)

    if weights == "dirichlet":
        w = bg.Dirichlet(alpha * np.ones(k), name="weights")
    else:
        w = bg.StickBreaking(alpha, k, truncated=False, name="weights")
    if covariance == "full":
        if nu0 is None and cov0 is None:
            nu0 = D + 2.0
            W0 = D * np.linalg.inv(C) / nu0
        else:
            nu0 = D + 2.0 if nu0 is None else float(nu0)
            W0 = np.linalg.inv(C if cov0 is None else np.atleast_2d(np.asarray(cov0, dtype=float)))
        theta = bg.NormalWishart(m0, beta0, nu0, W0, plates=(k,), name="theta")
        z = bg.Categorical(w, plates=(N,), name="z")
        # a per-cell mask: missing coordinates of a row are latent (every observed cell counts)
        x = bg.Mixture(z, bg.MultivariateNormal, theta, name="x").observe(X, mask=mask)
    else:
        if nu0 is None and cov0 is None:
            a0 = 1.0
            b0 = a0 * np.diag(C) / D
        else:
            a0 = 1.0 if nu0 is None else 0.5 * float(nu0)
            b0 = 0.5 * (np.diag(C) if cov0 is None else np.asarray(cov0, dtype=float) * np.ones(D))
        theta = bg.NormalGamma(m0[:, None] * np.ones((D, k)), beta0, a0, b0[:, None] * np.ones((D, k)),
                               plates=(D, k), name="theta")
        z = bg.Categorical(w, plates=(N, 1), name="z")   # one z per row, shared by its D cells
        x = bg.Mixture(z, bg.Normal, theta, name="x").observe(X, mask=mask)

    model = bg.Model(x)
    # full covariance: k-means++ starts; diag: random starts (on iris, k-means++ starts ended in
    # worse optima for 2 of 6 seeds, -467 and -463 against -409; random: -409.5 or -408.9)
    fit_options = {"max_iter": 1000, "tol": 1e-8, "init": "kmeans++" if covariance == "full" else "random"}
    # fit("svi"): minibatches of rows (the data axis of x, shared by z); global steps
    # rho_t = (t + 1)^-0.7; the first minibatch starts from k-means++ seeds
    svi_options = {"batch_size": min(N, 1000), "epochs": 10, "init": "kmeans++"}
    model.meta = {"zoo": NAME, "table": table, "columns": table.numeric, "X": X, "mask": mask,
                  "k": k, "covariance": covariance, "weights": weights, "fit_options": fit_options,
                  "fit_options_by_method": {"svi": svi_options}}
    return model


def components(fit):
    """Posterior per component: weight E[w_k], mean E[mu_k] (K, D), mean_sd (posterior sd
    of mu_k), sd (sqrt of the diagonal of E[Sigma_k]) and the Student-t predictive
    (loc, shape matrix, dof) of each component (docs/math.md §3.4)."""
    model = io.fitted_model(fit, NAME)
    meta = model.meta
    out = {"weight": io.mixture_weights(model)}
    if io.is_point(model, "theta"):
        return _point_components(model, out)
    p = model["theta"].posterior.params
    D = len(meta["columns"])
    if meta["covariance"] == "full":
        m, beta, nu, W = p["mean"], p["beta"], p["dof"], p["scale"]
        Winv = np.linalg.inv(W)
        diag = np.diagonal(Winv, axis1=-2, axis2=-1)
        out["mean"] = m
        out["mean_sd"] = np.sqrt(diag / (beta * (nu - D - 1.0))[:, None])
        out["sd"] = np.sqrt(diag / (nu - D - 1.0)[:, None])
        df = nu + 1.0 - D
        out["predictive"] = (m, Winv * ((1.0 + beta) / (beta * df))[:, None, None], df)
    else:  # parameters have plates (D, K): transpose to (K, D)
        m, kappa, a, b = (p[n].T for n in ("mean", "beta", "shape", "rate"))
        out["mean"] = m
        am1 = np.where(a > 1.0, a - 1.0, np.nan)        # a <= 1: an empty component
        out["mean_sd"] = np.sqrt(b / (kappa * am1))
        out["sd"] = np.sqrt(b / am1)
        out["predictive"] = (m, b * (kappa + 1.0) / (a * kappa), 2.0 * a)   # per-cell t: scale^2
    return out


def _point_components(model, out):
    """Point-mass (EM) components: the MAP mean, no posterior sd (NaN), the spread and
    a Gaussian predictive (dof = inf) from the MAP precision."""
    mu, prec = model["theta"].posterior.point
    if model.meta["covariance"] == "full":
        cov = np.linalg.inv(prec)
        out["sd"] = np.sqrt(np.diagonal(cov, axis1=-2, axis2=-1))
        out["predictive"] = (mu, cov, np.full(len(mu), np.inf))
    else:  # plates (D, K): transpose to (K, D)
        mu, prec = mu.T, prec.T
        out["sd"] = 1.0 / np.sqrt(prec)
        out["predictive"] = (mu, 1.0 / prec, np.full(mu.shape, np.inf))
    out["mean"] = mu
    out["mean_sd"] = np.full(mu.shape, np.nan)
    out["point"] = True
    return out


def predict_proba(fit, X_new):
    """(M, K) probabilities of each component for new rows (a DataFrame with the
    model's columns, or an (M, D) array; NaN cells are marginalised out):
    p(z = k | x) proportional to E[w_k] St(x | component k's posterior predictive)."""
    logp = _log_joint(io.fitted_model(fit, NAME), X_new)
    return np.exp(logp - logsumexp(logp, axis=1, keepdims=True))


def log_predictive(fit, data):
    """(M,) held-out score of each new row (a DataFrame, CSV path or (M, D) array; NaN
    cells are marginalised out): log p(x_row | training data) = log sum_k E[w_k]
    St(x_row | component k's posterior predictive), the exact posterior predictive under
    q (docs/predict.md, "Held-out scores of the zoo"). A row with no observed cell scores 0."""
    return logsumexp(_log_joint(io.fitted_model(fit, NAME), data), axis=1)


def _log_joint(model, X_new):
    """(M, K) log E[w_k] + log St(x_row observed cells | component k)."""
    meta = model.meta
    X = _as_matrix(X_new, meta["columns"])
    comp = components(model)
    K = len(comp["weight"])
    logp = np.tile(np.log(comp["weight"]), (X.shape[0], 1))
    obs = np.isfinite(X)
    if meta["covariance"] == "full":
        loc, shape, df = comp["predictive"]
        for pattern in np.unique(obs, axis=0):
            rows = np.all(obs == pattern, axis=1)
            if not pattern.any():
                continue
            for k in range(K):
                t = stats.multivariate_t(loc=loc[k][pattern], shape=shape[k][np.ix_(pattern, pattern)],
                                         df=df[k])
                logp[rows, k] += np.atleast_1d(t.logpdf(X[rows][:, pattern]))
    else:
        loc, scale2, df = comp["predictive"]
        for k in range(K):
            lp = (stats.norm.logpdf(X, loc=loc[k], scale=np.sqrt(scale2[k])) if np.all(np.isinf(df[k]))
                  else stats.t.logpdf(X, df=df[k], loc=loc[k], scale=np.sqrt(scale2[k])))
            logp[:, k] += np.where(obs, lp, 0.0).sum(axis=1)
    return logp


def _predictive(model, n_rows):
    """The posterior predictive of a new row (engine objects, graph/predictive.py): the
    mixture of the components' Student-t predictives weighted by E[w_k]."""
    from blrgraph.predictive import MixturePredictive, MultivariateT, student_t
    comp = components(model)
    K = len(comp["weight"])
    w = np.broadcast_to(comp["weight"], (n_rows, K))
    loc, shape, df = comp["predictive"]
    if model.meta["covariance"] == "full":
        return MixturePredictive(w, MultivariateT(df, loc, shape, (K,)), (n_rows,))
    D = loc.shape[1]
    ts = student_t(df.T, loc.T, shape.T, (D, K))            # cells (D, K)
    return MixturePredictive(np.broadcast_to(w[:, None, :], (n_rows, D, K)), ts, (n_rows, D))


def impute(fit, X_new):
    """Predictive mean and sd of every cell of new rows given each row's observed cells
    (NaN = missing; observed cells keep their value with sd 0). Full covariance: the
    mixture of the multivariate-t conditionals; diagonal: the mixture of the cells'
    Student-t predictives weighted by p(z | observed cells) (docs/predict.md)."""
    model = io.fitted_model(fit, NAME)
    X = _as_matrix(X_new, model.meta["columns"])
    r = predict_proba(model, X)
    pred = _predictive(model, len(X))
    if model.meta["covariance"] == "full":
        cond = pred.condition(X)
        obs = np.isfinite(X)
        mean, var = np.where(obs, X, cond.mean), np.where(obs, 0.0, cond.var)
    else:
        from blrgraph.predictive import MixturePredictive
        cond = MixturePredictive(np.broadcast_to(r[:, None, :], pred.weights.shape), pred.components,
                                 pred.plates)
        obs = np.isfinite(X)
        mean = np.where(obs, X, cond.mean)
        var = np.where(obs, 0.0, cond.var)
    return mean, np.sqrt(np.maximum(var, 0.0))


def predict_table(fit, data):
    """One row per new row: the most probable ``cluster``, the probabilities ``p0..pK-1``
    and, for columns with missing cells, the imputed value ``<col>_imputed`` (predictive
    mean) and its sd ``<col>_sd``."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    X = _as_matrix(data, model.meta["columns"])
    r = predict_proba(model, X)
    out = pd.DataFrame(r, columns=[f"p{k}" for k in range(r.shape[1])])
    out.insert(0, "cluster", r.argmax(axis=1))
    missing = ~np.isfinite(X)
    if missing.any():
        mean, sd = impute(model, X)
        for j, c in enumerate(model.meta["columns"]):
            if missing[:, j].any():
                out[f"{c}_imputed"] = mean[:, j]
                out[f"{c}_sd"] = sd[:, j]
    return out


def predict(fit, data):
    """(M,) the most probable cluster of each new row (argmax of :func:`predict_proba`;
    every zoo model's ``predict`` is its one-value-per-row prediction, docs/predict.md,
    "What predict means")."""
    return predict_proba(fit, data).argmax(axis=1)


def _as_matrix(X_new, columns):
    if isinstance(X_new, (str, bytes)) or hasattr(X_new, "__fspath__"):
        X_new = io.read_table(X_new)
    if hasattr(X_new, "columns"):
        missing = [c for c in columns if c not in X_new.columns]
        if missing:
            raise ValueError(f"gmm.predict_proba: new rows lack the column(s) {missing}")
        X_new = io.numeric_cells(X_new, columns, NAME)
    try:
        X = np.atleast_2d(np.asarray(X_new, dtype=float))
    except (TypeError, ValueError):
        raise TypeError(f"gmm.predict_proba: new rows must be numbers (NaN = missing cell), got "
                        f"{np.asarray(X_new).dtype} values") from None
    if X.ndim != 2 or X.shape[1] != len(columns):
        raise ValueError(f"gmm.predict_proba: new rows need {len(columns)} columns {columns}, "
                         f"got shape {X.shape}")
    return io.check_finite_rows(X, columns, NAME)


def assignments(fit):
    """(N, K) cluster probabilities of the training rows (a row without any observed
    cell, which the fit leaves out: E[w], from :func:`predict_proba`)."""
    model = io.fitted_model(fit, NAME)
    meta = model.meta
    r = io.responsibilities(model)
    empty = ~meta["mask"].any(axis=1)
    if empty.any():
        r = np.array(r, dtype=float)
        r[empty] = predict_proba(model, np.full((int(empty.sum()), meta["mask"].shape[1]), np.nan))
    return r


def component_covariances(fit):
    """(K, D, D) posterior mean covariance of each component: E[Lambda_k]^-1 = W^-1 / nu
    (full) or diag(b / a) (diagonal), for the ellipses of the cluster plot."""
    model = io.fitted_model(fit, NAME)
    p = model["theta"].posterior.params
    if model.meta["covariance"] == "full":
        return np.linalg.inv(p["scale"]) / p["dof"][:, None, None]
    v = (p["rate"] / p["shape"]).T                              # (K, D)
    return v[:, :, None] * np.eye(v.shape[1])


def summarize(fit):
    """One row per (component, column): weight (E[w_k]), n (expected rows), the
    posterior mean of the component mean, its posterior sd, and the component's sd.
    Point masses (``--method em``) are estimates, not posteriors: the columns are then
    weight (MAP), n, ``estimate`` (the MAP mean) and sd (from the MAP precision),
    with no posterior sd."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    comp = components(model)
    n = assignments(model).sum(axis=0)
    rows = []
    for k in range(model.meta["k"]):
        for j, col in enumerate(model.meta["columns"]):
            rows.append({"component": k, "weight": comp["weight"][k], "n": n[k], "variable": col,
                         "mean": comp["mean"][k, j], "mean_sd": comp["mean_sd"][k, j],
                         "sd": comp["sd"][k, j]})
    df = pd.DataFrame(rows)
    return io.point_table(df) if comp.get("point", False) else df


def write_outputs(fit, out_dir):
    """assignments.csv (cluster probabilities per row) and clusters.png (scatter)."""
    from pathlib import Path

    model = io.fitted_model(fit, NAME)
    meta = model.meta
    r = assignments(model)
    out = [io.write_assignments(r, meta["table"].index, out_dir, label="cluster")]
    from blrgraph import plotting
    X = np.where(meta["mask"], meta["X"], np.nan)
    out.append(plotting.plot_clusters(X, r, Path(out_dir) / "clusters.png", columns=meta["columns"],
                                      means=components(model)["mean"],
                                      covariances=component_covariances(model),
                                      title=f"Gaussian mixture, K = {meta['k']} ({meta['covariance']})"))
    return out
