"""Bayesian linear regression with unknown noise precision and optional ARD
(docs/models/linreg.md). Copy this file and adapt it. The model::

    alpha ~ Gamma(a0, b0)            plates (P,): one precision per weight (ARD)
                                     plates ():   one shared precision (isotropic)
    w     ~ MultivariateNormal(zeros(P), alpha)      (precision diag(alpha))
    tau   ~ Gamma(a0, b0)                            noise precision
    y_n   ~ Normal(x_n . w, tau)                     y = Normal(Dot(X, w), tau)

Mean-field VMP gives q(w) = N(m, S), q(tau) and q(alpha) Gamma (docs/math.md §6).
ARD drives the precision of an irrelevant weight up, so its posterior shrinks
towards zero; ``prior_precision`` in the summary shows it.

Input (read by ``blrgraph.io.design_matrix``, shared with logreg and
poisson_reg): a DataFrame or CSV path with ``target=`` the response column and
``columns=`` the predictors (default: every other column), or a pair of arrays
``(X, y)``. A categorical predictor becomes 0/1 indicator columns (the first
level is the reference). Missing targets are masked (the row is kept and gets
a prediction); rows with a missing predictor are masked with a warning, since
``Dot(X, w)`` needs complete covariates.

With ``standardize=True`` (the default, as in logreg and poisson_reg) numeric predictors
with more than two distinct values are centred and scaled for the fit, so the prior
(and ARD) applies to the standardised coefficients: a column on a scale of 1e-8 with a
coefficient of 3e8 is no longer shrunk to zero by a prior that is vague only on the
scale of 1. Summaries and predictions are on the original scale (w = A w_std, an exact
linear map of the Gaussian posterior); the summary's prior_precision is on the fit scale.

    import linreg
    model = linreg.build(df, target="price", columns=["area", "rooms"])
    fit = model.fit("vmp", **model.meta["fit_options"])
    linreg.summarize(fit)                      # one row per weight, plus the noise
    linreg.predict(fit, new_rows)              # (M,) predictive means
    mean, var = linreg.predictive_moments(fit, new_rows)   # posterior predictive
    linreg.predict_table(fit, new_rows)        # mean, sd and 95% predictive interval per row

``hyper="evidence"`` is scikit-learn's BayesianRidge (``ard=False``) and ARDRegression
(``ard=True``): the precisions alpha and tau are point estimates that maximise the
evidence p(y | alpha, tau) (w integrated out) times Gamma hyperpriors on their log
scale, MacKay's type-II maximum likelihood; the intercept is unpenalised (the columns
and the target are centred, intercept = y-bar - x-bar . m). In the graph the precisions
are point masses of fit("em") whose Gamma prior has shape a + 1: the mode of
Gamma(a + 1 + P/2, b + E[w.w]/2) is scikit-learn's fixed point (docs/models/linreg.md)::

    model = linreg.build((X, y), ard=False, hyper="evidence", standardize=False,
                         weight_prior=(1e-6, 1e-6), noise_prior=(1e-6, 1e-6))
    fit = model.fit("em", **model.meta["fit_options_by_method"]["em"])
"""
from __future__ import annotations

import numpy as np
from scipy import stats

import blrgraph as bg
from blrgraph import io

NAME = "linreg"
DEFAULT_METHOD = "vmp"
DESCRIPTION = "Bayesian linear regression, Gamma noise precision, optional ARD (target=)"


def build(data, target=None, columns=None, ard=True, intercept=True, a0=1e-3, b0=1e-3,
          standardize=True, hyper="vb", weight_prior=None, noise_prior=None):
    """Linear regression of ``target`` on ``columns`` (see the module docstring).
    ``weight_prior`` / ``noise_prior``: the (shape, rate) of the Gamma hyperpriors of
    the weights' precision alpha and of the noise precision tau (default ``(a0, b0)``
    for both). ``hyper="vb"``: q(alpha) q(tau) Gamma (mean-field VB, fit("vmp"));
    ``"evidence"``: alpha and tau are type-II maximum-likelihood point estimates, as
    scikit-learn's BayesianRidge / ARDRegression (fit("em"), options in
    ``model.meta["fit_options_by_method"]["em"]``)."""
    if hyper not in ("vb", "evidence"):
        raise ValueError(f"linreg: hyper must be 'vb' (Gamma posteriors, mean-field VB) or "
                         f"'evidence' (type-II ML as scikit-learn's BayesianRidge), got {hyper!r}")
    (la, lb), (na, nb) = (_gamma_prior(p, a0, b0, what)
                          for p, what in ((weight_prior, "weight_prior"), (noise_prior, "noise_prior")))
    evidence = hyper == "evidence"
    d = io.design_matrix(data, target, columns, intercept=intercept, target_kind="numeric",
                         standardize=standardize and not evidence, name=NAME,
                         what="linear regression")
    meta = d.meta()
    if evidence:       # Gamma(a + 1, b): its mode on the precision is the log-scale MAP
        X_fit, y_fit, meta["to_original"], meta["offset"] = _centred(d, standardize)
        la, na = la + 1.0, na + 1.0
    else:
        X_fit, y_fit = d.X_fit, d.y_fit
    P = X_fit.shape[1]

    alpha = bg.Gamma(la, lb, plates=(P,) if ard else (), name="alpha")
    w = bg.MultivariateNormal(np.zeros(P), alpha, name="w")
    tau = bg.Gamma(na, nb, name="tau")
    # masked rows get placeholder covariates (X_fit) and targets (y_fit)
    yv = bg.Normal(bg.Dot(X_fit, w), tau, name="y").observe(y_fit, mask=d.observed)

    model = bg.Model(yv)
    fit_options = {"max_iter": 2000, "tol": 1e-10}
    model.meta = {"zoo": NAME, **meta, "ard": ard, "hyper": hyper, "fit_options": fit_options,
                  "fit_options_by_method": {"em": {**fit_options, "point": ["alpha", "tau"]}}}
    return model


def _gamma_prior(prior, a0, b0, what):
    a, b = (a0, b0) if prior is None else prior
    if not (np.isfinite(a) and np.isfinite(b) and a > 0 and b > 0):
        raise ValueError(f"linreg: {what} must be a pair (shape, rate) of positive numbers, "
                         f"got {prior!r}")
    return float(a), float(b)


def _centred(d, standardize):
    """scikit-learn's centring for ``hyper="evidence"``: the predictors (and, with an
    intercept, the target) minus their means over the fitted rows, the predictors
    scaled by their sd if ``standardize`` (columns with more than two values). Returns
    (X_fit, y_fit, A, offset) with the weights on the original scale A m + offset:
    the intercept (first) is y-bar - x-bar . m, unpenalised."""
    rows, k = d.observed, int(d.recipe["intercept"])
    X = d.X[:, k:]
    xbar = X[rows].mean(axis=0) if k else np.zeros(X.shape[1])
    s = np.ones(X.shape[1])
    if standardize:
        for j in range(X.shape[1]):
            col = X[rows, j]
            if len(np.unique(col)) > 2 and np.std(col) > 0:
                s[j] = np.std(col)
    ybar = d.y[rows].mean() if k else 0.0
    X_fit = np.where(np.isfinite(X), (X - xbar) / s, 0.0)
    y_fit = np.where(rows, d.y - ybar, 0.0)
    A = np.diag(1.0 / s)
    offset = np.zeros(X.shape[1])
    if k:
        A = np.vstack([-xbar / s, A])
        offset = np.concatenate([[ybar], offset])
    return X_fit, y_fit, A, offset


def _noise_variance(model):
    """E[1/tau] = b / (a - 1) under q(tau) = Gamma(a, b); 1/tau for a point estimate."""
    if io.is_point(model, "tau"):
        return 1.0 / model["tau"].posterior.point
    p = model["tau"].posterior.params
    return p["rate"] / (p["shape"] - 1.0)


def predictive_moments(fit, X_new):
    """Posterior predictive mean and variance of y for new rows (a DataFrame with
    the predictor columns, or an array without the intercept column):
    E[y] = x.m,  Var[y] = x^T S x + E[1/tau]   (under q(w) q(tau))."""
    model = io.fitted_model(fit, NAME)
    mean, var = io.linear_predictor(model, X_new)
    return mean, var + _noise_variance(model)


def predict(fit, X_new):
    """(M,) the predictive mean E[y | x, data] = x.m of each new row (docs/predict.md,
    "What predict means"; :func:`predictive_moments` adds the variance)."""
    return predictive_moments(fit, X_new)[0]


def log_predictive(fit, data):
    """(M,) held-out score of each new row (a DataFrame or CSV with the predictor and
    target columns, or a pair (X, y) of arrays without the intercept column):
    log p(y | x, training data) = log E_q(tau)[N(y | x.m, x^T S x + 1/tau)] under q(w)
    q(tau), a one-dimensional integral over log tau (a trapezoid rule on a grid that
    covers q(tau) and, for an outlying y, the small tau that explain it; 1e-12 against
    a brute-force integral in tests/test_heldout.py). A row with a missing target scores 0
    (docs/predict.md, "Held-out scores of the zoo")."""
    model = io.fitted_model(fit, NAME)
    m, v, y, obs = io.held_out(model, data)
    p = model["tau"].posterior.params
    out = np.zeros(len(m))
    if obs.any():
        out[obs] = _normal_gamma_scale_logpdf(y[obs], m[obs], v[obs], float(p["shape"]),
                                              float(p["rate"]))
    return out


def _normal_gamma_scale_logpdf(y, m, v, a, b, max_cells=2_000_000):
    """log int N(y | m, v + 1/tau) Gamma(tau | a, b) dtau per entry, by the trapezoid rule
    in u = log tau: from below q(tau)'s 1e-15 quantile and the tau = 1/((y-m)^2 - v) at
    which an outlier is most likely (less 40/(a - 1/2): the integrand falls at least as
    tau^(a - 1/2) below both) to above its 1 - 1e-15 quantile, with about 8 points per sd
    of q(log tau) (1/sqrt(a)). The integrand is smooth and vanishes at both ends, where
    the trapezoid rule converges faster than any power of the step."""
    from scipy.special import gammaln, logsumexp
    g = stats.gamma(a, scale=1.0 / b)
    d = (y - m) ** 2
    lo_g, hi = np.log(g.ppf(1e-15)), np.log(g.isf(1e-15)) + 1.0
    star = -np.log(np.maximum(d - v, 1e-300))
    lo = np.minimum(lo_g, np.minimum(star, hi)) - 40.0 / max(a - 0.5, 0.5)
    lo = np.maximum(lo, lo_g - 200.0)
    n = int(np.clip(8.0 * np.max(hi - lo) * np.sqrt(a), 1024, 262144))
    t = np.linspace(0.0, 1.0, n)
    logw = np.log(np.r_[0.5, np.ones(n - 2), 0.5])
    out = np.empty(len(y))
    chunk = max(1, max_cells // n)
    for s in range(0, len(y), chunk):
        sl = slice(s, s + chunk)
        u = lo[sl, None] + (hi - lo[sl, None]) * t
        var = v[sl, None] + np.exp(-u)
        f = (-0.5 * np.log(2.0 * np.pi * var) - 0.5 * d[sl, None] / var
             + a * np.log(b) - gammaln(a) + a * u - b * np.exp(u))
        out[sl] = logsumexp(f + logw, axis=1) + np.log((hi - lo[sl]) / (n - 1))
    return out


def predictive_interval(fit, X_new, level=0.95, n_tau=256):
    """Central ``level`` interval of y for new rows under q(w) q(tau): y = x.w + e is a
    normal scale mixture, F(y) = E_tau[Phi((y - x.m) / sqrt(x S x + 1/tau))], averaged over
    ``n_tau`` quantiles of q(tau) (midpoints in probability) and inverted by bisection."""
    model = io.fitted_model(fit, NAME)
    m, v = io.linear_predictor(model, X_new)
    if io.is_point(model, "tau"):                                  # hyper="evidence": tau fixed
        tau = np.atleast_1d(model["tau"].posterior.point)
    else:
        p = model["tau"].posterior.params
        tau = stats.gamma.ppf((np.arange(n_tau) + 0.5) / n_tau, p["shape"], scale=1.0 / p["rate"])
    sd = np.sqrt(v[:, None] + 1.0 / tau[None, :])                  # (M, n_tau)

    def cdf(y):
        return stats.norm.cdf((y[:, None] - m[:, None]) / sd).mean(axis=1)

    out = []
    for q in (0.5 - level / 2, 0.5 + level / 2):
        lo = m - 40.0 * sd.max(axis=1)
        hi = m + 40.0 * sd.max(axis=1)
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            below = cdf(mid) < q
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        out.append(0.5 * (lo + hi))
    return tuple(out)


def predict_table(fit, data, level=0.95):
    """One row per new row (a DataFrame or CSV with the predictor columns): the predictive
    ``mean`` and ``sd`` of y and its central ``level`` interval (``q2.5``, ``q97.5``)."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    if isinstance(data, str) or hasattr(data, "__fspath__"):
        data = io.read_table(data)
    mean, var = predictive_moments(model, data)
    lo, hi = predictive_interval(model, data, level)
    lo_name, hi_name = io.interval_names(level)
    return pd.DataFrame({"mean": mean, "sd": np.sqrt(var), lo_name: lo, hi_name: hi})


def summarize(fit, level=0.95):
    """One row per weight: posterior mean, sd, central ``level`` interval and the
    prior precision E[alpha]; a last row for the noise precision tau."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    m, S = io.weights_posterior(model)
    prec = io.prior_precision(model)
    if len(prec) < len(m):                   # hyper="evidence": the intercept is unpenalised
        prec = np.concatenate([[0.0], prec])
    weights = io.weights_summary(model.meta["terms"], m, S, level, prior_precision=prec)
    lo_name, hi_name = io.interval_names(level)
    if io.is_point(model, "tau"):            # a type-II ML estimate: no spread
        t = float(model["tau"].posterior.point)
        tau = {"term": "noise precision (tau)", "mean": t, "sd": 0.0, lo_name: t, hi_name: t,
               "prior_precision": np.nan}
        return pd.concat([weights, pd.DataFrame([tau])], ignore_index=True)
    p = model["tau"].posterior.params
    g = stats.gamma(p["shape"], scale=1.0 / p["rate"])
    tau = {"term": "noise precision (tau)", "mean": g.mean(), "sd": g.std(),
           lo_name: g.ppf(0.5 - level / 2), hi_name: g.ppf(0.5 + level / 2),
           "prior_precision": np.nan}
    return pd.concat([weights, pd.DataFrame([tau])], ignore_index=True)


def write_outputs(fit, out_dir):
    """predictions.csv: the target, the posterior predictive mean and sd per row
    (rows with a missing target get a prediction too); predictive.png: the predictive
    mean and 95% band against the single numeric predictor (or against the predicted
    mean when there are several), with the observed targets."""
    from pathlib import Path
    model = io.fitted_model(fit, NAME)
    mean, var = io.training_predictions(model, predictive_moments)
    out = [io.write_predictions(model, out_dir, predicted_mean=mean, predicted_sd=np.sqrt(var))]
    from blrgraph import plotting
    recipe = model.meta["design"]
    X = model.meta["X"]
    ok = np.all(np.isfinite(X), axis=1)
    inputs = X[ok][:, int(recipe["intercept"]):]
    lo, hi = io.training_predictions(model, lambda m, r: predictive_interval(m, r))
    target = model.meta["target"]
    if inputs.shape[1] == 1:
        x, xlabel = inputs[:, 0], model.meta["terms"][-1]
    else:
        x, xlabel = mean[ok], f"predictive mean of {target}"
    out.append(plotting.plot_predictive_band(x, mean[ok], lo[ok], hi[ok], Path(out_dir) / "predictive.png",
                                             y=model.meta["y"][ok], x_label=xlabel, y_label=target,
                                             title=f"linear regression of {target}: posterior "
                                                   f"predictive, 95% interval"))
    return out
