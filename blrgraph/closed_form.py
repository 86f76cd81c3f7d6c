"""Exact conjugate posteriors and log marginal likelihoods (test oracles).

Every function takes observed data and the hyperparameters of a conjugate
prior and returns a :class:`ConjugateResult`: the name of the posterior
family, its constructor parameters (``params``, keyed by the parameter names
used by the family modules) and the log evidence ``log p(data)``.

Conventions (docs/math.md §0): Gamma(shape a, rate b); Wishart W(Lambda | W, nu)
with scale matrix W, so E[Lambda] = nu W (Bishop's convention, the same as
``scipy.stats.wishart(df=nu, scale=W)``); Normal and multivariate-Normal nodes
are parameterised by (mean, precision).  The formulas are those of docs/math.md §6.

References
----------
* C. M. Bishop (2006), *Pattern Recognition and Machine Learning* (PRML),
  §2.1–2.3 and §3.3–3.5.
* K. P. Murphy (2007), "Conjugate Bayesian analysis of the Gaussian
  distribution", technical note, UBC.
* A. Gelman et al. (2013), *Bayesian Data Analysis*, 3rd ed., ch. 2–3.

This module depends on numpy and scipy only; it is deliberately independent
of the rest of blrgraph so that it can serve as a reference for it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg as sla
from scipy.special import betaln, gammaln, multigammaln

__all__ = [
    "ConjugateResult",
    "beta_bernoulli",
    "beta_binomial",
    "gamma_poisson",
    "gamma_exponential",
    "dirichlet_categorical",
    "dirichlet_multinomial",
    "normal_known_precision",
    "gamma_known_mean",
    "normal_gamma",
    "mvn_known_precision",
    "wishart_known_mean",
    "normal_wishart",
    "linreg_known_precision",
]

_LOG_2PI = float(np.log(2.0 * np.pi))


@dataclass(frozen=True)
class ConjugateResult:
    """An exact conjugate posterior and the log evidence.

    Attributes
    ----------
    family : str
        Name of the posterior family ("Beta", "Gamma", "Dirichlet", "Normal",
        "MultivariateNormal", "Wishart", "NormalGamma", "NormalWishart").
    params : dict
        Posterior constructor parameters keyed by name (e.g. ``{"shape": .,
        "rate": .}``).  Scalars are Python floats; vectors and matrices are
        read-only float arrays.
    log_evidence : float
        log p(data) = log of the integral of likelihood times prior, including
        every constant (binomial and multinomial coefficients, 1/x!, 2 pi).
    """

    family: str
    params: dict
    log_evidence: float


# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------
def _result(family, log_evidence, **params):
    out = {}
    for k, v in params.items():
        if np.ndim(v) == 0:
            out[k] = float(v)
        else:
            arr = np.array(v, dtype=float, copy=True)
            arr.setflags(write=False)
            out[k] = arr
    return ConjugateResult(family, out, float(log_evidence))


def _scalar(name, v):
    try:
        arr = np.asarray(v, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real scalar, got {v!r}") from exc
    if arr.ndim != 0:
        raise ValueError(f"{name} must be a scalar, got shape {arr.shape}")
    val = float(arr)
    if not np.isfinite(val):
        raise ValueError(f"{name} must be finite, got {val}")
    return val


def _positive(name, v):
    val = _scalar(name, v)
    if val <= 0.0:
        raise ValueError(f"{name} must be positive, got {val}")
    return val


def _finite_array(name, x):
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real array") from exc
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must contain only finite values")
    return arr


def _data_1d(name, x):
    """Scalar observations of any shape, flattened."""
    return _finite_array(name, x).ravel()


def _counts(name, x):
    arr = _finite_array(name, x)
    if np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative (counts), got min {arr.min()}")
    if np.any(arr != np.floor(arr)):
        raise ValueError(f"{name} must contain integer counts")
    return arr


def _vector(name, v, size=None):
    arr = _finite_array(name, v)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D vector, got shape {arr.shape}")
    if size is not None and arr.shape[0] != size:
        raise ValueError(f"{name} must have length {size}, got {arr.shape[0]}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} must not be empty")
    return arr


def _spd(name, M, size):
    """Validate a symmetric positive-definite (size, size) matrix.

    Returns (symmetrised matrix, lower Cholesky factor)."""
    arr = _finite_array(name, M)
    if arr.shape != (size, size):
        raise ValueError(f"{name} must have shape ({size}, {size}), got {arr.shape}")
    scale = max(float(np.max(np.abs(arr))), np.finfo(float).tiny)
    if not np.allclose(arr, arr.T, rtol=0.0, atol=1e-10 * scale):
        raise ValueError(f"{name} must be symmetric")
    arr = 0.5 * (arr + arr.T)
    chol = _cholesky(arr, name)
    return arr, chol


def _cholesky(M, name):
    try:
        return np.linalg.cholesky(M)
    except np.linalg.LinAlgError as exc:
        raise ValueError(f"{name} must be symmetric positive definite") from exc


def _logdet(chol):
    return 2.0 * float(np.sum(np.log(np.diag(chol))))


def _chol_solve(chol, b):
    return sla.cho_solve((chol, True), b)


def _chol_inv(chol):
    inv = _chol_solve(chol, np.eye(chol.shape[0]))
    return 0.5 * (inv + inv.T)


def _data_2d(name, X, D):
    arr = _finite_array(name, X)
    if arr.ndim != 2 or arr.shape[1] != D:
        raise ValueError(f"{name} must have shape (N, {D}), got {arr.shape}")
    return arr


def _mean_and_scatter(X, ref=None):
    """(N, d, S): d = xbar - ref and S = sum_i (x_i - xbar)(x_i - xbar)^T, both computed
    about the first data point c (d = (c - ref) + mean(x_i - c)), so that data far from
    zero relative to their spread keep their digits (x_i - c is exact for data within a
    factor 2 of c); ``ref`` = None gives d = xbar. xbar = 0 if N = 0."""
    N, D = X.shape
    if ref is None:
        ref = np.zeros(D)
    if N == 0:
        return 0, -ref, np.zeros((D, D))
    c = X[0]
    Y = X - c
    ybar = Y.mean(axis=0)
    R = Y - ybar
    return N, (c - ref) + ybar, R.T @ R


def _mean_and_ss(x, ref):
    """1-d :func:`_mean_and_scatter`: (xbar - ref, sum (x_i - xbar)^2)."""
    N, d, S = _mean_and_scatter(x.reshape(-1, 1), np.array([ref]))
    return float(d[0]), float(S[0, 0])


# --------------------------------------------------------------------------
# discrete likelihoods
# --------------------------------------------------------------------------
def beta_bernoulli(x, a, b):
    """Beta(a, b) prior on p, x_i ~ Bernoulli(p) i.i.d.

    With s = sum x_i and N observations (PRML 2.18)::

        posterior   Beta(a + s, b + N - s)
        log p(x)  = log B(a + s, b + N - s) - log B(a, b)

    ``x`` is any array of 0/1 (or booleans); it is flattened.
    """
    x = _data_1d("x", x)
    if np.any((x != 0) & (x != 1)):
        raise ValueError("x must contain only 0/1 values")
    a = _positive("a", a)
    b = _positive("b", b)
    N = x.size
    s = float(x.sum())
    a_n, b_n = a + s, b + N - s
    return _result("Beta", betaln(a_n, b_n) - betaln(a, b), a=a_n, b=b_n)


def beta_binomial(x, n, a, b):
    """Beta(a, b) prior on p, x_i ~ Binomial(n_i, p) independently.

    ``x`` and ``n`` are broadcast together (``n`` may be a scalar)::

        posterior   Beta(a + sum x_i, b + sum (n_i - x_i))
        log p(x)  = sum_i log C(n_i, x_i) + log B(a', b') - log B(a, b)

    A single observation gives the beta-binomial pmf.
    """
    x = _counts("x", x)
    n = _counts("n", n)
    try:
        x, n = np.broadcast_arrays(x, n)
    except ValueError as exc:
        raise ValueError(f"x and n cannot be broadcast: {x.shape} vs {n.shape}") from exc
    if np.any(x > n):
        raise ValueError("x must not exceed n (successes out of n trials)")
    a = _positive("a", a)
    b = _positive("b", b)
    s = float(x.sum())
    f = float((n - x).sum())
    log_binom = float(np.sum(gammaln(n + 1) - gammaln(x + 1) - gammaln(n - x + 1)))
    a_n, b_n = a + s, b + f
    return _result("Beta", log_binom + betaln(a_n, b_n) - betaln(a, b), a=a_n, b=b_n)


def gamma_poisson(x, shape, rate):
    """Gamma(shape a, rate b) prior on lambda, x_i ~ Poisson(lambda) i.i.d.

    ::

        posterior   Gamma(a + sum x, b + N)
        log p(x)  = a log b - log Gamma(a) + log Gamma(a + sum x)
                    - (a + sum x) log(b + N) - sum log x_i!

    Each predictive is negative binomial NB(r = a, p = b / (b + 1)).
    """
    x = _counts("x", x).ravel()
    a = _positive("shape", shape)
    b = _positive("rate", rate)
    N = x.size
    s = float(x.sum())
    a_n, b_n = a + s, b + N
    log_ev = (a * np.log(b) - gammaln(a) + gammaln(a_n) - a_n * np.log(b_n)
              - float(np.sum(gammaln(x + 1))))
    return _result("Gamma", log_ev, shape=a_n, rate=b_n)


def gamma_exponential(x, shape, rate):
    """Gamma(shape a, rate b) prior on lambda, x_i ~ Exponential(rate lambda).

    ::

        posterior   Gamma(a + N, b + sum x)
        log p(x)  = a log b - log Gamma(a) + log Gamma(a + N) - (a + N) log(b + sum x)

    Each predictive is Lomax (Pareto II) with shape a and scale b.
    """
    x = _data_1d("x", x)
    if np.any(x < 0):
        raise ValueError("x must be non-negative (Exponential observations)")
    a = _positive("shape", shape)
    b = _positive("rate", rate)
    N = x.size
    a_n, b_n = a + N, b + float(x.sum())
    log_ev = a * np.log(b) - gammaln(a) + gammaln(a_n) - a_n * np.log(b_n)
    return _result("Gamma", log_ev, shape=a_n, rate=b_n)


def _dirichlet_update(n, alpha):
    """Posterior alpha and log p(sequence) for total counts n (PRML 2.41)."""
    alpha_n = alpha + n
    log_ev = (gammaln(alpha.sum()) - gammaln(alpha_n.sum())
              + float(np.sum(gammaln(alpha_n) - gammaln(alpha))))
    return alpha_n, log_ev


def dirichlet_categorical(x, alpha):
    """Dirichlet(alpha) prior on pi, x_i ~ Categorical(pi), labels 0..K-1.

    With n_k the number of labels k, alpha_0 = sum alpha, N = sum n::

        posterior   Dirichlet(alpha + n)
        log p(x)  = log Gamma(alpha_0) - log Gamma(alpha_0 + N)
                    + sum_k [log Gamma(alpha_k + n_k) - log Gamma(alpha_k)]

    This is the probability of the labelled *sequence* (no multinomial
    coefficient).
    """
    alpha = _vector("alpha", alpha)
    if np.any(alpha <= 0):
        raise ValueError("alpha must be positive")
    K = alpha.size
    x = _counts("x", x).ravel()
    if np.any(x >= K):
        raise ValueError(f"x must contain integer labels in 0..{K - 1}")
    n = np.bincount(x.astype(np.int64), minlength=K).astype(float)
    alpha_n, log_ev = _dirichlet_update(n, alpha)
    return _result("Dirichlet", log_ev, alpha=alpha_n)


def dirichlet_multinomial(counts, alpha):
    """Dirichlet(alpha) prior on pi, counts_i ~ Multinomial(n_i, pi).

    ``counts`` has shape (N, K) (a 1-D vector is one observation).  With
    n = sum_i counts_i::

        posterior   Dirichlet(alpha + n)
        log p     = sum_i [log n_i! - sum_k log counts_ik!]
                    + log Gamma(alpha_0) - log Gamma(alpha_0 + sum n)
                    + sum_k [log Gamma(alpha_k + n_k) - log Gamma(alpha_k)]

    For one row this is the Dirichlet-multinomial pmf.
    """
    alpha = _vector("alpha", alpha)
    if np.any(alpha <= 0):
        raise ValueError("alpha must be positive")
    K = alpha.size
    c = _counts("counts", counts)
    if c.ndim == 1:
        c = c[None, :]
    if c.ndim != 2 or c.shape[1] != K:
        raise ValueError(f"counts must have shape (N, {K}), got {np.shape(counts)}")
    log_coef = float(np.sum(gammaln(c.sum(axis=1) + 1)) - np.sum(gammaln(c + 1)))
    alpha_n, log_ev = _dirichlet_update(c.sum(axis=0), alpha)
    return _result("Dirichlet", log_coef + log_ev, alpha=alpha_n)


# --------------------------------------------------------------------------
# univariate Gaussian likelihoods
# --------------------------------------------------------------------------
def normal_known_precision(x, mean0, precision0, precision):
    """Normal(mean0, precision0) prior on mu, x_i ~ Normal(mu, precision) i.i.d.

    With p0 = precision0, p = precision (PRML 2.141-2.142)::

        posterior   Normal(mean = (p0 m0 + p sum x) / p_N, precision = p_N = p0 + N p)
        log p(x)  = (N/2) log(p / 2 pi) + (1/2) log(p0 / p_N)
                    - (p/2) sum (x_i - xbar)^2 - N p p0 (xbar - m0)^2 / (2 p_N)

    which equals log N(x | m0 1, I/p + 11^T/p0).
    """
    x = _data_1d("x", x)
    m0 = _scalar("mean0", mean0)
    p0 = _positive("precision0", precision0)
    p = _positive("precision", precision)
    N = x.size
    d, ss = _mean_and_ss(x, m0) if N else (0.0, 0.0)    # d = xbar - m0
    p_n = p0 + N * p
    m_n = m0 + N * p * d / p_n
    log_ev = (0.5 * N * (np.log(p) - _LOG_2PI) + 0.5 * np.log(p0 / p_n)
              - 0.5 * p * ss - 0.5 * N * p * p0 * d ** 2 / p_n)
    return _result("Normal", log_ev, mean=m_n, precision=p_n)


def gamma_known_mean(x, mean, shape, rate):
    """Gamma(shape a, rate b) prior on the precision tau, x_i ~ Normal(mean, tau).

    (PRML 2.150-2.151)::

        posterior   Gamma(a + N/2, b + (1/2) sum (x_i - mean)^2)
        log p(x)  = -(N/2) log 2 pi + a log b - log Gamma(a)
                    + log Gamma(a_N) - a_N log b_N

    Each predictive is Student-t(loc mean, scale^2 b/a, dof 2a).
    """
    x = _data_1d("x", x)
    mu = _scalar("mean", mean)
    a = _positive("shape", shape)
    b = _positive("rate", rate)
    N = x.size
    a_n = a + 0.5 * N
    b_n = b + 0.5 * float(np.sum((x - mu) ** 2))
    log_ev = (-0.5 * N * _LOG_2PI + a * np.log(b) - gammaln(a)
              + gammaln(a_n) - a_n * np.log(b_n))
    return _result("Gamma", log_ev, shape=a_n, rate=b_n)


def normal_gamma(x, mean, beta, shape, rate):
    """NormalGamma(m0, beta0, a0, b0) prior: tau ~ Gamma(a0, b0), mu | tau ~ N(m0, (beta0 tau)^-1).

    x_i ~ Normal(mu, precision tau).  (PRML 2.154; Murphy 2007, Normal-Gamma
    prior)::

        beta_N = beta0 + N,   m_N = (beta0 m0 + N xbar) / beta_N,   a_N = a0 + N/2,
        b_N    = b0 + (1/2) sum (x_i - xbar)^2 + beta0 N (xbar - m0)^2 / (2 beta_N)
        log p(x) = log Gamma(a_N) - log Gamma(a0) + a0 log b0 - a_N log b_N
                   + (1/2) log(beta0 / beta_N) - (N/2) log 2 pi

    Each predictive is Student-t(m, b (beta + 1) / (a beta), 2a) (scale^2).
    """
    x = _data_1d("x", x)
    m0 = _scalar("mean", mean)
    k0 = _positive("beta", beta)
    a0 = _positive("shape", shape)
    b0 = _positive("rate", rate)
    N = x.size
    d, ss = _mean_and_ss(x, m0) if N else (0.0, 0.0)    # d = xbar - m0
    k_n = k0 + N
    m_n = m0 + N * d / k_n
    a_n = a0 + 0.5 * N
    b_n = b0 + 0.5 * ss + 0.5 * k0 * N * d ** 2 / k_n
    log_ev = (gammaln(a_n) - gammaln(a0) + a0 * np.log(b0) - a_n * np.log(b_n)
              + 0.5 * np.log(k0 / k_n) - 0.5 * N * _LOG_2PI)
    return _result("NormalGamma", log_ev, mean=m_n, beta=k_n, shape=a_n, rate=b_n)


# --------------------------------------------------------------------------
# multivariate Gaussian likelihoods
# --------------------------------------------------------------------------
def mvn_known_precision(X, mean0, precision0, precision):
    """MultivariateNormal(m0, Lambda0) prior on mu, x_i ~ N(mu, Lambda^-1) i.i.d.

    ``X`` has shape (N, D).  With S = sum (x_i - xbar)(x_i - xbar)^T (PRML
    2.116-2.117 applied to xbar)::

        Lambda_N = Lambda0 + N Lambda,   m_N = Lambda_N^-1 (Lambda0 m0 + Lambda sum x_i)
        log p(X) = -(ND/2) log 2 pi + (N/2) log|Lambda| + (1/2) log|Lambda0|
                   - (1/2) log|Lambda_N| - (1/2) tr(Lambda S)
                   - (1/2) d^T Lambda0 Lambda_N^-1 (N Lambda) d,      d = xbar - m0

    (the last matrix is (Lambda0^-1 + (N Lambda)^-1)^-1).
    """
    m0 = _vector("mean0", mean0)
    D = m0.size
    L0, c0 = _spd("precision0", precision0, D)
    L, c = _spd("precision", precision, D)
    X = _data_2d("X", X, D)
    N, d, S = _mean_and_scatter(X, m0)        # d = xbar - m0
    L_n = L0 + N * L
    c_n = _cholesky(L_n, "posterior precision")
    m_n = m0 + _chol_solve(c_n, N * (L @ d))
    quad = float((L0 @ d) @ _chol_solve(c_n, N * (L @ d))) if N else 0.0
    log_ev = (-0.5 * N * D * _LOG_2PI + 0.5 * N * _logdet(c) + 0.5 * _logdet(c0)
              - 0.5 * _logdet(c_n) - 0.5 * float(np.sum(L * S)) - 0.5 * quad)
    return _result("MultivariateNormal", log_ev, mean=m_n, precision=L_n)


def _wishart_evidence(N, D, nu0, logdet_W0inv, nu_n, logdet_Wninv):
    """log Gamma_D and determinant part shared by the Wishart-type evidences."""
    return (-0.5 * N * D * np.log(np.pi)
            + multigammaln(0.5 * nu_n, D) - multigammaln(0.5 * nu0, D)
            + 0.5 * nu0 * logdet_W0inv - 0.5 * nu_n * logdet_Wninv)


def _check_dof(dof, D):
    nu = _positive("dof", dof)
    if nu <= D - 1:
        raise ValueError(f"dof must exceed D - 1 = {D - 1}, got {nu}")
    return nu


def wishart_known_mean(X, mean, dof, scale):
    """Wishart(dof nu0, scale W0) prior on Lambda, x_i ~ N(mean, Lambda^-1) i.i.d.

    Wishart convention: E[Lambda] = nu W (scipy's).  With
    S_mu = sum (x_i - mean)(x_i - mean)^T (PRML 2.155, Murphy 2007)::

        posterior   Wishart(nu_N = nu0 + N, W_N = (W0^-1 + S_mu)^-1)
        log p(X) = -(ND/2) log pi + log Gamma_D(nu_N/2) - log Gamma_D(nu0/2)
                   + (nu0/2) log|W0^-1| - (nu_N/2) log|W_N^-1|

    For D = 1 this is :func:`gamma_known_mean` with shape nu/2, rate 1/(2W).
    """
    mu = _vector("mean", mean)
    D = mu.size
    nu0 = _check_dof(dof, D)
    _, cW0 = _spd("scale", scale, D)
    X = _data_2d("X", X, D)
    N = X.shape[0]
    R = X - mu
    W0inv = _chol_inv(cW0)
    Wninv = W0inv + R.T @ R
    cWninv = _cholesky(Wninv, "posterior inverse scale")
    nu_n = nu0 + N
    log_ev = _wishart_evidence(N, D, nu0, -_logdet(cW0), nu_n, _logdet(cWninv))
    return _result("Wishart", log_ev, dof=nu_n, scale=_chol_inv(cWninv))


def normal_wishart(X, mean, beta, dof, scale):
    """NormalWishart(m0, beta0, nu0, W0): Lambda ~ W(W0, nu0), mu | Lambda ~ N(m0, (beta0 Lambda)^-1).

    x_i ~ N(mu, Lambda^-1) i.i.d., ``X`` of shape (N, D).  With
    S = sum (x_i - xbar)(x_i - xbar)^T (PRML 2.157; Murphy 2007, Normal-Wishart
    prior)::

        beta_N = beta0 + N,   m_N = (beta0 m0 + N xbar) / beta_N,   nu_N = nu0 + N,
        W_N^-1 = W0^-1 + S + (beta0 N / beta_N) (xbar - m0)(xbar - m0)^T
        log p(X) = -(ND/2) log pi + log Gamma_D(nu_N/2) - log Gamma_D(nu0/2)
                   + (nu0/2) log|W0^-1| - (nu_N/2) log|W_N^-1| + (D/2) log(beta0/beta_N)

    Each predictive is multivariate-t(m, (beta + 1) / (beta (nu - D + 1)) W^-1,
    nu - D + 1).  For D = 1 this is :func:`normal_gamma` with shape nu/2 and
    rate 1/(2W).
    """
    m0 = _vector("mean", mean)
    D = m0.size
    b0 = _positive("beta", beta)
    nu0 = _check_dof(dof, D)
    _, cW0 = _spd("scale", scale, D)
    X = _data_2d("X", X, D)
    N, d, S = _mean_and_scatter(X, m0)        # d = xbar - m0
    b_n = b0 + N
    m_n = m0 + N * d / b_n
    nu_n = nu0 + N
    Wninv = _chol_inv(cW0) + S + (b0 * N / b_n) * np.outer(d, d)
    cWninv = _cholesky(Wninv, "posterior inverse scale")
    log_ev = (_wishart_evidence(N, D, nu0, -_logdet(cW0), nu_n, _logdet(cWninv))
              + 0.5 * D * np.log(b0 / b_n))
    return _result("NormalWishart", log_ev, mean=m_n, beta=b_n, dof=nu_n,
                   scale=_chol_inv(cWninv))


def linreg_known_precision(X, y, mean0, precision0, noise_precision):
    """Bayesian linear regression: w ~ N(m0, Lambda0^-1), y | w ~ N(X w, I / beta).

    ``X`` is the (N, P) design matrix, ``y`` has shape (N,).  (PRML 3.49-3.51
    and 3.86, with a general Gaussian prior)::

        Lambda_N = Lambda0 + beta X^T X,   m_N = Lambda_N^-1 (Lambda0 m0 + beta X^T y)
        log p(y) = (N/2) log(beta / 2 pi) + (1/2) log|Lambda0| - (1/2) log|Lambda_N|
                   - (beta/2) ||y - X m_N||^2 - (1/2) (m_N - m0)^T Lambda0 (m_N - m0)

    which equals log N(y | X m0, I/beta + X Lambda0^-1 X^T).
    """
    m0 = _vector("mean0", mean0)
    P = m0.size
    L0, c0 = _spd("precision0", precision0, P)
    beta = _positive("noise_precision", noise_precision)
    X = _data_2d("X", X, P)
    y = _finite_array("y", y)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},) to match X, got {y.shape}")
    N = X.shape[0]
    L_n = L0 + beta * (X.T @ X)
    c_n = _cholesky(L_n, "posterior precision")
    m_n = _chol_solve(c_n, L0 @ m0 + beta * (X.T @ y))
    r = y - X @ m_n
    dm = m_n - m0
    log_ev = (0.5 * N * (np.log(beta) - _LOG_2PI) + 0.5 * _logdet(c0)
              - 0.5 * _logdet(c_n) - 0.5 * beta * float(r @ r)
              - 0.5 * float(dm @ L0 @ dm))
    return _result("MultivariateNormal", log_ev, mean=m_n, precision=L_n)
