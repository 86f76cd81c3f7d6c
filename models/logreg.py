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

Input (read by ``blrgraph.io.design_matrix``, shared with linreg and
poisson_reg): a DataFrame or CSV path with ``target=`` the response column and
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

import numpy as np
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
    d = io.design_matrix(data, target, columns, intercept=intercept, target_kind="binary",
                         standardize=standardize, name=NAME, what="logistic regression")
    P = len(d.terms)
    w = bg.MultivariateNormal(np.zeros(P), _prior(P, prior, prior_precision, a0, b0), name="w")
    y = bg.Bernoulli(logits=bg.Dot(d.X_fit, w, name="eta"), name="y").observe(d.y_fit,
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


def predict_proba(fit, X_new):
    """P(y = 1 | x, data) = E_q[sigmoid(x . w)] (Gauss-Hermite), one per new row.
    For a two-level text target, "1" is the second level (``meta['design']['target_levels']``)."""
    m, v = linear_predictor(fit, X_new)
    t, wt = np.polynomial.hermite.hermgauss(GH_NODES)
    return expit(m[:, None] + np.sqrt(2.0 * v)[:, None] * t) @ wt / np.sqrt(np.pi)


def predict(fit, X_new):
    """(M,) the more probable class of each new row (P(y = 1) > 1/2; a two-level text
    target gives its levels; docs/predict.md, "What predict means")."""
    p = predict_proba(fit, X_new)
    levels = io.fitted_model(fit, NAME).meta["design"].get("target_levels")
    cls = (p > 0.5).astype(int)
    return np.asarray(levels, dtype=object)[cls] if levels else cls


def log_predictive(fit, data):
    """(M,) held-out score of each new row (a DataFrame or CSV with the predictor and
    target columns, or a pair (X, y) of arrays without the intercept column):
    log p(y | x, training data) = log E_q[sigmoid((2y - 1) x.w)] (Gauss-Hermite, as
    :func:`predict_proba`). A row with a missing target scores 0 (docs/predict.md,
    "Held-out scores of the zoo")."""
    m, v, y, obs = io.held_out(io.fitted_model(fit, NAME), data)
    sign = np.where(obs & (y == 0), -1.0, 1.0)
    t, wt = np.polynomial.hermite.hermgauss(GH_NODES)
    a = sign[:, None] * (m[:, None] + np.sqrt(2.0 * v)[:, None] * t)
    from scipy.special import log_expit, logsumexp
    out = logsumexp(log_expit(a) + np.log(wt / np.sqrt(np.pi)), axis=1)
    return np.where(obs, out, 0.0)


def predict_table(fit, data, level=0.95):
    """One row per new row (a DataFrame or CSV with the predictor columns): P(y = 1)
    (``probability``, E_q[sigmoid(x.w)]), the central ``level`` credible interval of
    sigmoid(x.w) (``p_q2.5``, ``p_q97.5``) and the more probable class (``predicted``)."""
    from scipy import stats
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    if isinstance(data, str) or hasattr(data, "__fspath__"):
        data = io.read_table(data)
    m, v = linear_predictor(model, data)
    p = predict_proba(model, data)
    zq = stats.norm.ppf(0.5 + level / 2)
    lo_name, hi_name = io.interval_names(level)
    levels = model.meta["design"].get("target_levels")
    predicted = (p > 0.5).astype(int)
    out = pd.DataFrame({"probability": p, f"p_{lo_name}": expit(m - zq * np.sqrt(v)),
                        f"p_{hi_name}": expit(m + zq * np.sqrt(v))})
    out["predicted"] = [levels[i] for i in predicted] if levels else predicted
    return out


def summarize(fit, level=0.95):
    """One row per weight: posterior mean, sd, central ``level`` interval, the odds
    ratio exp(mean) (the posterior median of exp(w_j)) and the prior sd (with a Gamma
    precision, at its posterior mean), all on the original scale of the columns."""
    model = io.fitted_model(fit, NAME)
    m, S = io.weights_posterior(model)
    return io.weights_summary(model.meta["terms"], m, S, level, odds_ratio=np.exp(m),
                              prior_sd=io.prior_sd(model))


def write_outputs(fit, out_dir):
    """predictions.csv: the target and P(y = 1) per row (rows with a missing target
    get a prediction too; rows with a missing predictor get none)."""
    model = io.fitted_model(fit, NAME)
    return [io.write_predictions(model, out_dir,
                                 predicted_probability=io.training_predictions(model, predict_proba))]
