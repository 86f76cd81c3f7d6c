"""Rows of the BLR table (docs/blr.md, Table 1) that are not Methods of the engine:
BayesBiNN and its delta method STE (a Bernoulli q over binary weights), and dropout (a
mixture q whose delta method is SGD with dropout masks). Their q is not a family of a
graph node (a Potential's parents are Gaussian), so each is a worked iteration of the
one step on a user's loss, written as Khan & Rue (2023, §4.3, §4.5) derive it.

The loss is given by its gradient: ``grad(w, rows)`` returns the gradient of the mean
loss over the data rows ``rows`` (an index array) at the weights w (D,); N is the number
of rows, so N x mean loss is -log p(D | w).
"""
from __future__ import annotations

import numpy as np


def _check(rho, N, batch_size, steps):
    if not (isinstance(rho, (int, float)) and 0.0 < rho <= 1.0):
        raise ValueError(f"rho must lie in (0, 1], got {rho!r}")
    if not 1 <= batch_size <= N:
        raise ValueError(f"batch_size must be between 1 and N = {N}, got {batch_size}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")


def _logcosh(x):
    x = np.abs(x)
    return x + np.log1p(np.exp(-2.0 * x)) - np.log(2.0)


def _batches(rng, N, B):
    while True:
        perm = rng.permutation(N)
        for a in range(0, N - B + 1, B):
            yield perm[a:a + B]


def bayesbinn(grad, lam0, N, rho=0.01, tau=1.0, batch_size=None, steps=1000, lam=None,
              seed=0):
    """BayesBiNN (Meng, Bachmann & Khan, ICML 2020, Algorithm 1): q(w) = prod_j
    exp(lam_j w_j) / (2 cosh lam_j) over w in {-1, +1}^D (mean tanh lam), the BLR step

        lam <- (1 - rho) lam + rho (lam0 - s * g),    s = N (1 - w_r^2) / (tau (1 - tanh^2 lam))

    with g = grad(w_r, batch) at the Gumbel-softmax relaxed draw w_r = tanh((lam +
    delta) / tau), delta = log(u / (1 - u)) / 2, u ~ U(0, 1): s * g estimates the
    gradient of E_q[-log p(D | w)] in the mean tanh lam. Returns lam (D,) after ``steps``
    steps (``lam`` the start, default lam0)."""
    lam0 = np.asarray(lam0, dtype=float)
    B = N if batch_size is None else int(batch_size)
    _check(rho, N, B, steps)
    if not tau > 0:
        raise ValueError(f"tau (the relaxation's temperature) must be > 0, got {tau!r}")
    rng = np.random.default_rng(seed)
    lam = lam0.copy() if lam is None else np.array(lam, dtype=float)
    rows = _batches(rng, N, B)
    for t in range(steps):
        u = rng.uniform(size=lam.shape)
        delta = 0.5 * np.log(u / (1.0 - u))
        w_r = np.tanh((lam + delta) / tau)
        g = grad(w_r, next(rows))
        # (1 - w_r^2) / (1 - tanh^2 lam) = cosh^2 lam / cosh^2 ((lam + delta) / tau), in logs
        s = N / tau * np.exp(2.0 * (_logcosh(lam) - _logcosh((lam + delta) / tau)))
        lam = (1.0 - rho) * lam + rho * (lam0 - s * g)
        if not np.all(np.isfinite(lam)):
            raise FloatingPointError(f"bayesbinn: lam is not finite at step {t + 1}; lower rho "
                                     f"or raise tau")
    return lam


def ste(grad, N, rho=0.01, batch_size=None, steps=1000, theta=None, D=None, seed=0):
    """The straight-through estimator, BayesBiNN's delta method (Khan & Rue §4.5): the
    real latent weights theta take the gradient step at their signs,
    theta <- theta - rho N grad(sign(theta), batch); the binary weights are sign(theta).
    Returns theta."""
    B = N if batch_size is None else int(batch_size)
    _check(rho, N, B, steps)
    rng = np.random.default_rng(seed)
    theta = 1e-3 * rng.standard_normal(D) if theta is None else np.array(theta, dtype=float)
    rows = _batches(rng, N, B)
    for _ in range(steps):
        w = np.where(theta >= 0, 1.0, -1.0)
        theta = theta - rho * N * grad(w, next(rows))
    return theta


def dropout(grad, m, N, keep=0.5, prior_precision=1.0, rho=0.01, batch_size=None, steps=1000,
            seed=0, average_from=None):
    """Dropout as the delta method of a mixture q (Khan & Rue §4.3): q(w) = prod_j
    (keep N(w_j | m_j, s^2) + (1 - keep) N(w_j | 0, s^2)) with s -> 0, the prior
    N(0, 1/prior_precision); the BLR step of the mean with a unit precision,

        m <- m - rho (z * N grad(z * m, batch) + prior_precision m),   z_j ~ Bernoulli(keep)

    (one draw of the dropout mask z per step: dropout SGD). ``average_from``: return
    the average of the iterates from that step on (Polyak), else the last one."""
    m = np.array(m, dtype=float)
    B = N if batch_size is None else int(batch_size)
    _check(rho, N, B, steps)
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep (the probability a weight is kept) must lie in (0, 1], got {keep!r}")
    rng = np.random.default_rng(seed)
    rows = _batches(rng, N, B)
    total, count = np.zeros_like(m), 0
    for t in range(steps):
        z = (rng.uniform(size=m.shape) < keep).astype(float)
        m = m - rho * (z * N * grad(z * m, next(rows)) + prior_precision * m)
        if average_from is not None and t + 1 >= average_from:
            total += m
            count += 1
    return total / count if count else m
