"""Independent VB Gaussian-mixture formulas for the tests (Bishop PRML §10.2,
docs/math.md §3.4 and §7.1). Written from the book, in plain numpy/scipy; nothing
here imports blrgraph.

Parameterisation: q(pi) = Dir(alpha); q(mu_k, Lam_k) = NW(m_k, beta_k, W_k, nu_k)
with E[Lam_k] = nu_k W_k; r = responsibilities (N, K).
"""
from __future__ import annotations

import numpy as np
from scipy.special import digamma, gammaln, logsumexp, multigammaln


def log_dirichlet_norm(alpha):
    """log C(alpha) = log Gamma(sum alpha) - sum log Gamma(alpha_k)  (Bishop B.23)."""
    alpha = np.asarray(alpha, float)
    return gammaln(alpha.sum(-1)) - gammaln(alpha).sum(-1)


def log_wishart_B(W, nu):
    """log B(W, nu) (Bishop B.79): -(nu/2) log|W| - (nu D/2) log 2 - log Gamma_D(nu/2)."""
    W = np.asarray(W, float)
    D = W.shape[-1]
    _, logdet = np.linalg.slogdet(W)
    nu = np.asarray(nu, float)
    return -0.5 * nu * logdet - 0.5 * nu * D * np.log(2.0) - np.vectorize(
        lambda a: multigammaln(a, D))(0.5 * nu)


def e_log_det(W, nu):
    """E[log|Lam|] under W(W, nu)  (Bishop 10.65)."""
    W = np.asarray(W, float)
    D = W.shape[-1]
    nu = np.asarray(nu, float)
    _, logdet = np.linalg.slogdet(W)
    i = np.arange(1, D + 1)
    return digamma(0.5 * (nu[..., None] + 1 - i)).sum(-1) + D * np.log(2.0) + logdet


def wishart_entropy(W, nu):
    """H[W(W, nu)] (Bishop B.82)."""
    D = np.shape(W)[-1]
    nu = np.asarray(nu, float)
    return -log_wishart_B(W, nu) - 0.5 * (nu - D - 1) * e_log_det(W, nu) + 0.5 * nu * D


def stats(X, r):
    """N_k, xbar_k, S_k (Bishop 10.51-10.53)."""
    Nk = r.sum(0)
    xbar = (r.T @ X) / Nk[:, None]
    diff = X[None, :, :] - xbar[:, None, :]                    # K, N, D
    S = np.einsum("nk,kni,knj->kij", r, diff, diff) / Nk[:, None, None]
    return Nk, xbar, S


def full_elbo(X, r, alpha, m, beta, nu, W, alpha0, m0, beta0, nu0, W0, parts=False):
    """The full VB-GMM ELBO, Bishop 10.70-10.77, term by term (docs/math.md §3.4).

    Valid for any q (r need not be optimal for the parameters or vice versa)."""
    X = np.asarray(X, float)
    r = np.asarray(r, float)
    N, D = X.shape
    K = r.shape[1]
    alpha = np.asarray(alpha, float)
    alpha0 = np.broadcast_to(np.asarray(alpha0, float), (K,))
    W0inv = np.linalg.inv(W0)
    Nk, xbar, S = stats(X, r)
    elogpi = digamma(alpha) - digamma(alpha.sum())
    elogdet = e_log_det(W, nu)
    dx = xbar - m
    dm = m - m0
    quad_x = np.einsum("ki,kij,kj->k", dx, W, dx)
    quad_m = np.einsum("ki,kij,kj->k", dm, W, dm)
    trSW = np.einsum("kij,kji->k", S, W)
    trW0W = np.einsum("ij,kji->k", W0inv, W)

    e_px = 0.5 * np.sum(Nk * (elogdet - D / beta - nu * trSW - nu * quad_x - D * np.log(2 * np.pi)))
    e_pz = np.sum(r * elogpi)
    e_ppi = log_dirichlet_norm(alpha0) + np.sum((alpha0 - 1) * elogpi)
    e_pml = 0.5 * np.sum(D * np.log(beta0 / (2 * np.pi)) + elogdet - D * beta0 / beta
                         - beta0 * nu * quad_m) \
        + K * log_wishart_B(W0, nu0) + 0.5 * (nu0 - D - 1) * np.sum(elogdet) - 0.5 * np.sum(nu * trW0W)
    with np.errstate(divide="ignore", invalid="ignore"):
        e_qz = np.sum(np.where(r > 0, r * np.log(r), 0.0))
    e_qpi = np.sum((alpha - 1) * elogpi) + log_dirichlet_norm(alpha)
    e_qml = np.sum(0.5 * elogdet + 0.5 * D * np.log(beta / (2 * np.pi)) - 0.5 * D
                   - wishart_entropy(W, nu))
    total = e_px + e_pz + e_ppi + e_pml - e_qz - e_qpi - e_qml
    if parts:
        return total, dict(px=e_px, pz=e_pz, ppi=e_ppi, pml=e_pml, qz=e_qz, qpi=e_qpi, qml=e_qml)
    return total


def e_step(X, alpha, m, beta, nu, W):
    """Responsibilities r_nk (Bishop 10.46-10.49, 10.64-10.66)."""
    N, D = X.shape
    elogpi = digamma(alpha) - digamma(np.sum(alpha))
    elogdet = e_log_det(W, nu)
    diff = X[:, None, :] - m[None, :, :]
    maha = D / beta + nu * np.einsum("nki,kij,nkj->nk", diff, W, diff)
    logrho = elogpi + 0.5 * elogdet - 0.5 * D * np.log(2 * np.pi) - 0.5 * maha
    return np.exp(logrho - logsumexp(logrho, axis=1, keepdims=True))


def m_step(X, r, alpha0, m0, beta0, nu0, W0):
    """q(pi), q(mu, Lam) for responsibilities r (Bishop 10.58-10.63)."""
    Nk, xbar, S = stats(X, r)
    alpha = alpha0 + Nk
    beta = beta0 + Nk
    m = (beta0 * m0 + Nk[:, None] * xbar) / beta[:, None]
    nu = nu0 + Nk
    dx = xbar - m0
    Winv = np.linalg.inv(W0) + Nk[:, None, None] * S \
        + (beta0 * Nk / (beta0 + Nk))[:, None, None] * np.einsum("ki,kj->kij", dx, dx)
    return alpha, m, beta, nu, np.linalg.inv(Winv)


def sklearn_constant(N, D, K, alpha0, beta0, nu0, W0):
    """docs/math.md §7.1: full ELBO = BayesianGaussianMixture.lower_bound_ + C
    (covariance_type='full', dirichlet_distribution prior, reg_covar=0)."""
    return (-0.5 * N * D * np.log(2 * np.pi)
            + K * (0.5 * D * np.log(beta0) + log_wishart_B(W0, nu0) + D * (D - 1) / 4 * np.log(np.pi))
            + gammaln(K * alpha0) - K * gammaln(alpha0))
