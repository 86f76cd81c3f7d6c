"""Bayesian Poisson regression (log link) with a full-covariance Gaussian posterior,
fitted by NCVMP (docs/ncvmp.md). Copy this file and adapt it. The model::

    w   ~ MultivariateNormal(zeros(P), prior)     prior = prior_precision * I   (prior="fixed")
                                                  or diag(alpha), alpha ~ Gamma(a0, b0)
                                                  shared (prior="gamma") or per weight ("ard")
    y_n ~ Poisson(exp(x_n . w))                   y = Poisson(log_rate=Dot(X, w))

q(w) = N(m, S) is the exact Gaussian-VI optimum: E[exp(a)] = exp(m + v/2) in
closed form, so the ELBO is the true one. A Gamma
precision alpha is conjugate and is updated in closed form (rho = 1) inside the
same fit; w takes damped steps (rho = 0.5).

Input (read by ``blrgraph.io.design_matrix``, shared with linreg and
logreg): a DataFrame or CSV path with ``target=`` the response column and
``columns=`` the predictors (default: every other column), or a pair of arrays
``(X, y)``. The target holds counts (non-negative integers). A categorical predictor
becomes 0/1 indicator columns (the first level is the reference). Missing
targets are masked (the row is kept and gets a prediction); rows with a missing
predictor are masked with a warning, since ``Dot(X, w)`` needs complete covariates.

With ``standardize=True`` (the default) numeric predictors with more than two
distinct values are centred and scaled for the fit, so the prior applies to the
standardised coefficients and the first sweep never meets huge linear predictors
(for the Poisson model E[exp(x . w)] under the prior would overflow with raw
covariates such as ages or incomes). Summaries and predictions are on the
original scale: w = A w_std is an exact linear map of the Gaussian posterior.

    import poisson_reg
    model = poisson_reg.build(df, target="claims", columns=["age", "urban"])
    fit = model.fit(poisson_reg.DEFAULT_METHOD, **model.meta["fit_options"])
    poisson_reg.summarize(fit)                # one row per weight; rate ratio exp(mean)
    poisson_reg.predict_rate(fit, new_rows)   # E[y | x, data] = E_q[exp(x . w)]
"""
from __future__ import annotations

import numpy as np

import blrgraph as bg
from blrgraph import io

NAME = "poisson_reg"
DEFAULT_METHOD = "ncvmp"
DESCRIPTION = ("Bayesian Poisson regression (log link), full-covariance Gaussian posterior by "
               "NCVMP (target= a count column)")


def build(data, target=None, columns=None, intercept=True, prior="fixed", prior_precision=1.0,
          a0=1e-2, b0=1e-2, standardize=True):
    """Poisson regression of ``target`` on ``columns`` (see the module docstring)."""
    d = io.design_matrix(data, target, columns, intercept=intercept, target_kind="counts",
                         standardize=standardize, name=NAME, what="Poisson regression")
    P = len(d.terms)
    w = bg.MultivariateNormal(np.zeros(P), _prior(P, prior, prior_precision, a0, b0), name="w")
    y = bg.Poisson(log_rate=bg.Dot(d.X_fit, w, name="eta"), name="y").observe(d.y_fit,
                                                                              mask=d.observed)
    model = bg.Model(y)
    model.meta = {"zoo": NAME, **d.meta(), "prior": prior,
                  "fit_options": {"max_iter": 2000, "tol": 1e-10}}
    return model


def _prior(P, prior, prior_precision, a0, b0):
    """The weights' precision: a fixed matrix, or a Gamma node (shared or one per weight)."""
    if prior == "fixed":
        return float(prior_precision) * np.eye(P)
    if prior in ("gamma", "ard"):
        return bg.Gamma(a0, b0, plates=(P,) if prior == "ard" else (), name="alpha")
    raise ValueError(f"{NAME}: prior={prior!r}; choose 'fixed', 'gamma' or 'ard'")


# ---- results (original scale of the columns: blrgraph.io undoes the standardisation) --------
def linear_predictor(fit, X_new):
    """Mean and variance of a = x . w under q for new rows (a DataFrame with the
    predictor columns, or an array without the intercept column)."""
    return io.linear_predictor(io.fitted_model(fit, NAME), X_new)


def predict_rate(fit, X_new):
    """E[y | x, data] = E_q[exp(x . w)] = exp(m + v/2), one per new row."""
    m, v = linear_predictor(fit, X_new)
    return np.exp(m + 0.5 * v)


def predict(fit, X_new):
    """(M,) the expected count E[y | x, data] of each new row (:func:`predict_rate`;
    docs/predict.md, "What predict means")."""
    return predict_rate(fit, X_new)


def log_predictive(fit, data, nodes=64):
    """(M,) held-out score of each new row (a DataFrame or CSV with the predictor and
    target columns, or a pair (X, y) of arrays without the intercept column):
    log p(y | x, training data) = log E_q[Poisson(y | exp(x.w))], with x.w ~ N(m, v)
    under q, by Gauss-Hermite quadrature (``nodes`` points) in log space. A row with
    a missing target scores 0 (docs/predict.md, "Held-out scores of the zoo")."""
    from scipy.special import gammaln, logsumexp
    m, v, y, obs = io.held_out(io.fitted_model(fit, NAME), data)
    t, wt = np.polynomial.hermite.hermgauss(nodes)
    eta = m[:, None] + np.sqrt(2.0 * v)[:, None] * t
    yy = np.where(obs, y, 0.0)[:, None]
    with np.errstate(over="ignore"):
        ll = yy * eta - np.exp(eta) - gammaln(yy + 1.0)
    out = logsumexp(ll + np.log(wt / np.sqrt(np.pi)), axis=1)
    return np.where(obs, out, 0.0)


def predict_table(fit, data, level=0.95):
    """One row per new row (a DataFrame or CSV with the predictor columns): the expected
    count ``mean`` = E_q[exp(x.w)] and the central ``level`` credible interval of the
    rate exp(x.w) (``rate_q2.5``, ``rate_q97.5``)."""
    from scipy import stats
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    if isinstance(data, str) or hasattr(data, "__fspath__"):
        data = io.read_table(data)
    m, v = linear_predictor(model, data)
    zq = stats.norm.ppf(0.5 + level / 2)
    lo_name, hi_name = io.interval_names(level)
    return pd.DataFrame({"mean": np.exp(m + 0.5 * v), f"rate_{lo_name}": np.exp(m - zq * np.sqrt(v)),
                         f"rate_{hi_name}": np.exp(m + zq * np.sqrt(v))})


def summarize(fit, level=0.95):
    """One row per weight: posterior mean, sd, central ``level`` interval, the rate
    ratio exp(mean) (the posterior median of exp(w_j)) and the prior sd (with a Gamma
    precision, at its posterior mean), all on the original scale of the columns."""
    model = io.fitted_model(fit, NAME)
    m, S = io.weights_posterior(model)
    return io.weights_summary(model.meta["terms"], m, S, level, rate_ratio=np.exp(m),
                              prior_sd=io.prior_sd(model))


def write_outputs(fit, out_dir):
    """predictions.csv: the target and the expected count per row (rows with a missing target
    get a prediction too; rows with a missing predictor get none)."""
    model = io.fitted_model(fit, NAME)
    return [io.write_predictions(model, out_dir,
                                 predicted_rate=io.training_predictions(model, predict_rate))]
