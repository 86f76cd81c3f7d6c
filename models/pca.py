"""Bayesian PCA with automatic relevance determination (docs/models/pca.md).
Copy this file and adapt it. The model (Bishop 1999), for a table of N rows and D
numeric columns, with K latent components::

    alpha_k ~ Gamma(a0, b0)                        k = 1..K   one precision per component (ARD)
    W_d     ~ N(0, diag(alpha)^-1)                 plates (D,)     row d of the loading matrix
    x_n     ~ N(0, I_K)                            plates (N, 1)   the scores of row n
    mu_d    ~ N(0, 1 / prior_precision)            plates (D,)     column offsets (after centring)
    tau     ~ Gamma(a0, b0)                        noise precision (one per column: noise="diagonal")
    y_nd    ~ N(W_d . x_n + mu_d, 1 / tau)         bg.Normal(bg.Add(bg.Dot(W, x), mu), tau)

q(W) q(x) q(mu) q(alpha) q(tau) is fitted by VMP. A component the data do not need
gets a large E[alpha_k]: its loadings shrink to 0 (ARD switches it off), so K is an
upper bound on the dimension of the subspace, not a guess of it. Missing cells are
masked.

    import pca
    model = pca.build(df, k=5)
    fit = model.fit("vmp", seed=0, **model.meta["fit_options"])
    pca.summarize(fit)       # one row per component: alpha, variance, active
    pca.loadings(fit)        # (D, K) E[W]; pca.scores(fit): (N, K) E[x]
"""
from __future__ import annotations

import numpy as np

import blrgraph as bg
from blrgraph import io

NAME = "pca"
DEFAULT_METHOD = "vmp"
DESCRIPTION = "Bayesian PCA with ARD (a Gamma precision per component) on numeric columns"

#: a component is active when its expected squared loadings are at least this
#: fraction of the largest component's (switched-off components fall far below)
ACTIVE_FRACTION = 1e-3


def build(data, k=5, columns=None, noise="isotropic", standardize=False, a0=1e-3, b0=1e-3,
          prior_precision=1e-3):
    """Bayesian PCA with up to ``k`` components over the numeric ``columns`` of ``data``.

    ``noise``: "isotropic" (one noise precision, probabilistic PCA) or "diagonal"
    (one per column: factor analysis). ``standardize``: divide each column by its
    standard deviation first. The columns are centred by their observed means; mu
    fits the offset that remains (with missing cells the observed mean is not the
    fitted one)."""
    k = int(k)
    if k < 1:
        raise ValueError(f"pca: k must be >= 1, got {k}")
    if noise not in ("isotropic", "diagonal"):
        raise ValueError(f"pca: noise must be 'isotropic' or 'diagonal', got {noise!r}")
    table = io.encode_table(data, columns)
    table.require_numeric("Bayesian PCA (pca)")
    Y, mask = table.numeric_array(), table.mask()
    N, D = Y.shape
    if D < 2:
        raise ValueError(f"pca: needs at least 2 numeric columns, got {D} ({table.names})")
    if k > D:
        raise ValueError(f"pca: k = {k} components for {D} columns; k must be at most the "
                         f"number of columns (ARD prunes the components the data do not need)")
    for d in range(D):
        if mask[:, d].sum() < 2:
            raise ValueError(f"pca: column {table.names[d]!r} has fewer than 2 observed cells; "
                             f"leave it out")
    # centred by the observed column means (mu fits what remains): a mean left in the
    # data is a direction a component can take, and mean-field q(mu) q(W) q(x) moves it
    # to mu only slowly
    center = np.array([np.mean(Y[mask[:, d], d]) for d in range(D)])
    scale = np.ones(D)
    if standardize:
        scale = np.array([np.std(Y[mask[:, d], d]) for d in range(D)])
        scale[scale == 0] = 1.0
    Y = np.where(mask, Y - center, 0.0) / scale

    alpha = bg.Gamma(a0, b0, plates=(k,), name="alpha")
    W = bg.MultivariateNormal(np.zeros(k), alpha, plates=(D,), name="W")
    x = bg.MultivariateNormal(np.zeros(k), np.eye(k), plates=(N, 1), name="x")
    # start q(x) at the whitened scores of classical PCA (missing cells at the column
    # mean): the VB updates then only rotate and prune the components, instead of
    # untangling a random start (measured in docs/models/pca.md)
    x.start_from(_svd_scores(Y, k)[:, None, :], np.eye(k))
    # mu is declared (so updated) before tau: at its broad prior E[mu^2] = 1 / prior_precision,
    # and a tau updated first would read the data as all noise and switch off every component
    mu = bg.Normal(0.0, prior_precision, plates=(D,), name="mu")
    tau = bg.Gamma(a0, b0, plates=(D,) if noise == "diagonal" else (), name="tau")
    y = bg.Normal(bg.Add(bg.Dot(W, x), mu), tau, name="y").observe(Y, mask=mask)

    model = bg.Model(y)
    model.meta = {"zoo": NAME, "table": table, "columns": table.names, "k": k, "center": center, "scale": scale,
                  "noise": noise, "fit_options": {"max_iter": 1000, "tol": 1e-7}}
    return model


def _svd_scores(Y, k):
    """(N, k) sqrt(N) U_k of the SVD Y = U S V^T (unit variance per column, as x's prior)."""
    U = np.linalg.svd(Y, full_matrices=False)[0]
    out = np.zeros((Y.shape[0], k))
    r = min(k, U.shape[1])
    out[:, :r] = np.sqrt(Y.shape[0]) * U[:, :r]
    return out


def loadings(fit):
    """(D, K) posterior mean loadings E[W] (in the units of the data, times ``scale``
    when standardised)."""
    model = io.fitted_model(fit, NAME)
    return model["W"].posterior.mean * model.meta["scale"][:, None]


def scores(fit):
    """(N, K) posterior mean scores E[x_n]."""
    model = io.fitted_model(fit, NAME)
    return model["x"].posterior.mean[:, 0, :]


def component_variance(fit):
    """(K,) sum_d E[W_dk^2]: the variance component k adds to the data (x_nk has
    variance 1); about 0 for a switched-off component."""
    model = io.fitted_model(fit, NAME)
    second = model["W"].posterior.mean_params[1]            # (D, K, K) E[W_d W_d^T]
    return np.einsum("dkk->k", second * model.meta["scale"][:, None, None] ** 2)


def active(fit, fraction=ACTIVE_FRACTION):
    """(K,) booleans: the components ARD kept."""
    v = component_variance(fit)
    return v >= fraction * v.max()


def subspace(fit):
    """(D, A) orthonormal basis of the span of the active loadings."""
    W = loadings(fit)[:, active(fit)]
    q, _ = np.linalg.qr(W)
    return q


def _new_rows(model, data):
    """New rows (a DataFrame or CSV with the model's columns, or an (M, D) array; NaN =
    missing), centred and scaled as in the fit, and their observed cells."""
    cols = model.meta["columns"]
    if isinstance(data, np.ndarray):
        Y = np.atleast_2d(np.asarray(data, dtype=float))
        if Y.shape[1] != len(cols):
            raise ValueError(f"{NAME}: new rows need {len(cols)} columns {cols}, got shape {Y.shape}")
    else:
        Y = io.new_rows(data, cols, NAME)[cols].to_numpy(dtype=float, na_value=np.nan)
    obs = np.isfinite(Y)
    return np.where(obs, (Y - model.meta["center"]) / model.meta["scale"], 0.0), obs


def _new_scores(model, Z, obs):
    """q(x) of new rows with W, mu and tau fixed at the fit (the VB update of x):
    precision I + sum_d(observed) E[tau_d] E[W_d W_d^T], mean its inverse times
    sum_d(observed) E[tau_d] E[W_d] (y_d - E[mu_d]). Returns means (M, K), covariances (M, K, K)."""
    qW = model["W"].posterior
    EW, EWW = qW.mean, qW.mean_params[1]                      # (D, K), (D, K, K)
    D, K = EW.shape
    tau = np.broadcast_to(model["tau"].posterior.mean, (D,))
    mu = model["mu"].posterior.mean
    prec = np.eye(K) + np.einsum("nd,d,dkl->nkl", obs.astype(float), tau, EWW)
    rhs = np.einsum("nd,d,dk->nk", np.where(obs, Z - mu, 0.0), tau, EW)
    cov = np.linalg.inv(prec)
    return np.einsum("nkl,nl->nk", cov, rhs), cov


def transform(fit, data):
    """(M, K) the posterior mean scores of new rows given their observed cells (as
    scikit-learn's ``transform``; PCA has no ``predict``: docs/predict.md, "What predict
    means")."""
    model = io.fitted_model(fit, NAME)
    return _new_scores(model, *_new_rows(model, data))[0]


def predict_table(fit, data):
    """One row per new row: the posterior mean scores ``pc0..pcK-1`` given its observed
    cells (loadings, offsets and noise fixed at the fit) and, for columns with missing
    cells, the reconstruction ``<col>_imputed`` = E[W_d] . E[x] + E[mu_d] (in the data's
    units) with its predictive sd ``<col>_sd`` (from Var[W_d . x], Var[mu_d] and E[1/tau_d])."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    Z, obs = _new_rows(model, data)
    m, C = _new_scores(model, Z, obs)
    meta = model.meta
    out = pd.DataFrame(m, columns=[f"pc{j}" for j in range(m.shape[1])])
    missing = ~obs
    if missing.any():
        qW = model["W"].posterior
        EW, EWW = qW.mean, qW.mean_params[1]
        Exx = C + m[:, :, None] * m[:, None, :]
        recon = m @ EW.T + model["mu"].posterior.mean
        var = (np.einsum("dkl,nlk->nd", EWW, Exx) - (m @ EW.T) ** 2 + model["mu"].posterior.var
               + np.broadcast_to(1.0 / _tau_mean_inverse(model), (EW.shape[0],)))
        for j, c in enumerate(meta["columns"]):
            if missing[:, j].any():
                out[f"{c}_imputed"] = np.where(missing[:, j], recon[:, j] * meta["scale"][j]
                                               + meta["center"][j], np.nan)
                out[f"{c}_sd"] = np.where(missing[:, j], np.sqrt(var[:, j]) * meta["scale"][j], np.nan)
    return out


def _tau_mean_inverse(model):
    """1 / E[1/tau] = (a - 1) / b under q(tau) = Gamma(a, b)."""
    p = model["tau"].posterior.params
    return (p["shape"] - 1.0) / p["rate"]


def log_predictive(fit, data, samples=2000, seed=0):
    """(M,) held-out score of each new row (a DataFrame or CSV with the model's columns, or
    an (M, D) array; NaN cells are marginalised out): log p(y_row | training data) =
    log E_q[N(y_o | mu_o, W_o W_o^T + diag(1/tau_o))] with the row's scores integrated out
    exactly and q(W) q(mu) q(tau) by Monte Carlo (``samples`` draws, ``seed``; the mean
    of the densities, in log space), in the data's units. A row with no observed cell
    scores 0 (docs/predict.md, "Held-out scores of the zoo")."""
    from scipy.special import logsumexp
    model = io.fitted_model(fit, NAME)
    Z, obs = _new_rows(model, data)
    rng = np.random.default_rng(seed)
    W = model["W"].posterior.sample(samples, seed=rng)                  # (S, D, K)
    mu = model["mu"].posterior.sample(samples, seed=rng)                # (S, D)
    tau = model["tau"].posterior.sample(samples, seed=rng)              # (S,) or (S, D)
    D = W.shape[1]
    noise = 1.0 / np.broadcast_to(np.reshape(tau, (samples, -1)), (samples, D))
    out = np.zeros(len(Z))
    log_scale = np.log(model.meta["scale"])
    for pattern in np.unique(obs, axis=0):
        if not pattern.any():
            continue
        rows = np.all(obs == pattern, axis=1)
        Wo = W[:, pattern]
        cov = Wo @ np.swapaxes(Wo, 1, 2) + noise[:, pattern][:, :, None] * np.eye(int(pattern.sum()))
        L = np.linalg.cholesky(cov)                                     # (S, d, d)
        r = Z[rows][:, pattern][None] - mu[:, None, pattern]            # (S, n, d)
        sol = np.linalg.solve(L[:, None], r[..., None])[..., 0]         # (S, n, d)
        logdet = 2.0 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(axis=1)
        d = int(pattern.sum())
        ll = -0.5 * (np.sum(sol ** 2, axis=2) + logdet[:, None] + d * np.log(2.0 * np.pi))
        out[rows] = logsumexp(ll, axis=0) - np.log(samples) - log_scale[pattern].sum()
    return out


def summarize(fit):
    """One row per component: E[alpha_k] (the ARD precision), the variance it adds
    (sum_d E[W_dk^2]) and its share, active (kept by ARD), and the noise sd."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    v = component_variance(model)
    keep = active(model)
    noise_sd = np.sqrt(1.0 / np.atleast_1d(model["tau"].posterior.mean)) * model.meta["scale"]
    rows = [{"component": j, "alpha": float(model["alpha"].posterior.mean[j]), "variance": v[j],
             "share": v[j] / v.sum(), "active": bool(keep[j]),
             "noise_sd": float(np.mean(noise_sd))}
            for j in np.argsort(-v)]
    return pd.DataFrame(rows)


def write_outputs(fit, out_dir):
    """loadings.csv (column x component E[W]) and scores.csv (row x component E[x])."""
    pd = io.require_pandas()
    from pathlib import Path
    model = io.fitted_model(fit, NAME)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [f"pc{j}" for j in range(model.meta["k"])]
    p1 = out / "loadings.csv"
    pd.DataFrame(loadings(model), index=model.meta["columns"], columns=names).to_csv(
        p1, index_label="variable")
    p2 = out / "scores.csv"
    pd.DataFrame(scores(model), index=model.meta["table"].index, columns=names).to_csv(
        p2, index_label="row")
    return [p1, p2]
