"""Hyperprior factors: a Wishart whose inverse scale is a Wishart node (conjugate), and a
Gamma whose shape is a Gamma node (non-conjugate, fit("ncvmp"); at the end of this file).

Lambda ~ Wishart(n, B^-1) (scipy's convention: E[Lambda] = n B^-1) with B random:

    log p(Lambda | B) = (n - D - 1)/2 log|Lambda| - tr(B Lambda)/2 + (n/2) log|B|
                        - (n D/2) log 2 - log Gamma_D(n/2)

is linear in B's sufficient statistics (B, log|B|), so a Wishart q(B) is conjugate: the
message to B is (-E[Lambda]/2, n/2) summed over Lambda's plates (docs/hyperpriors.md).
It is the matrix version of a Gamma's random rate.
"""
from __future__ import annotations

import numpy as np
from scipy.special import digamma, gammaln, polygamma

from ...families.wishart import LOG2, _multigammaln
from ..plates import wsum
from .base import Conditional


class WishartRateFactor(Conditional):
    """Lambda ~ Wishart(dof n (fixed), inverse scale B); slot rate: Wishart moments
    (E[B], E[log|B|])."""

    def __init__(self, node, parents, slots, dof):
        self.dof = np.asarray(dof, dtype=float)
        super().__init__(node, parents, slots)

    def fixed_plates(self):
        return np.shape(self.dof)

    def prior_natural(self, u):
        (B, _), = u
        d = np.shape(B)[-1]
        return (-0.5 * np.asarray(B) + 0.0 * self.dof[..., None, None],
                0.5 * (self.dof - d - 1.0) + 0.0 * np.zeros(np.shape(B)[:-2]))

    def expected_log_partition(self, u):
        (B, lb), = u
        d = np.shape(B)[-1]
        n = self.dof
        return -0.5 * n * lb + 0.5 * n * d * LOG2 + _multigammaln(0.5 * n, d)

    def message(self, i, x, u, w, target):
        x1 = x.moments[0] if x.value is None else x.value
        kw = dict(target_plates=target, full_plates=x.plates)
        return (-0.5 * wsum(w, x1, subs=("AB",), out="AB", **kw),
                0.5 * wsum(w, self.dof + np.zeros(x.plates), **kw))


# ---- a random Gamma shape (NCVMP) ---------------------------------------------------------
#: trapezoid spacing in v = log(beta a) (the integrands are analytic in the strip |Im v| < pi,
#: so the error is ~exp(-2 pi^2 / h): below 1e-15 for h <= 0.25)
SHAPE_STEP = 0.25
SHAPE_MIN_POINTS = 512


def gamma_from_moments(la, a):
    """(alpha, beta) of the Gamma with E[log x] = la and E[x] = a: log(alpha) - psi(alpha)
    = log(a) - la > 0 solved by Newton from Minka's start (monotone, ~5 steps)."""
    la, a = np.broadcast_arrays(np.asarray(la, dtype=float), np.asarray(a, dtype=float))
    s = np.log(a) - la
    if np.any(~(s > 0)):
        raise ValueError("Gamma moments need E[log x] < log E[x] (Jensen); got moments "
                         "outside the Gamma family's mean-parameter space")
    alpha = (3.0 - s + np.sqrt((s - 3.0) ** 2 + 24.0 * s)) / (12.0 * s)
    for _ in range(50):
        f = np.log(alpha) - digamma(alpha) - s
        step = f / (1.0 / alpha - polygamma(1, alpha))
        new = np.where(alpha - step > 0, alpha - step, 0.5 * alpha)
        if np.all(np.abs(new - alpha) <= 1e-15 * alpha):
            alpha = new
            break
        alpha = new
    return alpha, alpha / a


def _lgamma_of_exp(v):
    """log Gamma(e^v) without underflow of e^v (log Gamma(a) = -log a - gamma a + O(a^2))."""
    a = np.exp(v)
    small = v < -30.0
    return np.where(small, -v - np.euler_gamma * a, gammaln(np.where(small, 1.0, a)))


def expected_lgamma(alpha, beta, scale=1.0):
    """G = E[log Gamma(c a)] for a ~ Gamma(alpha, beta) and a constant c > 0 (``scale``),
    and its gradient (dG/dalpha, dG/dbeta), by the trapezoid rule in v = log(beta a)
    (exponentially convergent: the integrand is smooth and decays at both ends);
    vectorised over entries (alpha, beta and c broadcast)."""
    alpha, beta, scale = np.broadcast_arrays(np.asarray(alpha, dtype=float),
                                             np.asarray(beta, dtype=float),
                                             np.asarray(scale, dtype=float))
    shape = alpha.shape
    al, lb = alpha.ravel(), np.log(beta.ravel()) - np.log(scale.ravel())  # log(c a) = v - lb
    lo = np.minimum(np.log(al) - 12.0 / np.sqrt(al), (-45.0 + gammaln(al)) / al)
    hi = np.log(al + 50.0 + 12.0 * np.sqrt(al))
    n = int(max(SHAPE_MIN_POINTS, np.max(hi - lo) / SHAPE_STEP + 1)) if al.size else 1
    t = np.linspace(0.0, 1.0, n)
    v = lo[:, None] + (hi - lo)[:, None] * t                  # entries x points
    logw = al[:, None] * v - np.exp(v) - gammaln(al)[:, None]
    w = np.exp(logw)
    w /= w.sum(axis=1, keepdims=True)                          # the trapezoid weights, normalised
    u = v - lb[:, None]                                        # log(c a)
    f = _lgamma_of_exp(u)
    G = np.sum(w * f, axis=1)
    vbar = np.sum(w * v, axis=1, keepdims=True)
    a = np.exp(v - np.log(beta.ravel())[:, None])              # a
    abar = np.sum(w * a, axis=1, keepdims=True)
    dG_da = np.sum(w * (f - G[:, None]) * (v - vbar), axis=1)          # Cov(f, d log p / d alpha)
    dG_db = np.sum(w * (f - G[:, None]) * (abar - a), axis=1)          # Cov(f, d log p / d beta)
    return G.reshape(shape), dG_da.reshape(shape), dG_db.reshape(shape)


def expected_lgamma_mu_gradient(alpha, beta, scale=1.0):
    """(G, dG/dmu1, dG/dmu2): the gradient of G = E[log Gamma(c a)] in the Gamma's mean
    parameters mu = (E[log a], E[a]) = (psi(alpha) - log beta, alpha / beta), via the
    Jacobian J = d mu / d(alpha, beta): J^T g_mu = g_(alpha, beta)."""
    G, ga, gb = expected_lgamma(alpha, beta, scale)
    alpha, beta = np.broadcast_arrays(np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float),
                                      G)[:2]
    j11, j12 = polygamma(1, alpha), -1.0 / beta     # d mu1 / d(alpha, beta)
    j21, j22 = 1.0 / beta, -alpha / beta ** 2       # d mu2 / d(alpha, beta)
    det = j11 * j22 - j12 * j21
    # [j11 j21; j12 j22] [g1; g2] = [ga; gb]
    g1 = (j22 * ga - j21 * gb) / det
    g2 = (-j12 * ga + j11 * gb) / det
    return G, g1, g2


class GammaShapeFactor(Conditional):
    """x ~ Gamma(shape a, rate b) with the shape a a Gamma node (non-conjugate: fit("ncvmp")).

    log p(x | a, b) = (a - 1) log x - b x + a log b - log Gamma(a): every term is linear in
    the moments of q(a) = Gamma(alpha, beta) except E[log Gamma(a)] = G(alpha, beta). The
    message to a is the exact gradient in a's mean parameters mu = (E log a, E a):

        (0, sum_n w_n (E log x_n + E log b)) - (sum_n w_n) grad_mu G

    with G and its gradient by a trapezoid rule accurate to rounding (docs/hyperpriors.md).
    The rate b may be a Gamma node (conjugate message (E[a], -E[x]) per entry)."""

    conjugate = False

    def describe(self):
        return f"Gamma(shape={self.parents[0].name}, ...) of {self.node.label()}"

    def prior_natural(self, u):
        (_, a), (_, b) = u
        return (a - 1.0, -np.asarray(b) + 0.0 * a)

    def expected_log_partition(self, u):
        (la, a), (lb, _) = u
        alpha, beta = gamma_from_moments(la, a)
        return expected_lgamma(alpha, beta)[0] - a * lb

    def message(self, i, x, u, w, target):
        lx, ex = x.moments
        kw = dict(target_plates=target, full_plates=x.plates)
        (la, a), (lb, _) = u
        if i == 1:
            return (wsum(w, a + 0.0 * np.asarray(lx), **kw), -wsum(w, ex, **kw))
        alpha, beta = gamma_from_moments(la, a)
        _, g1, g2 = expected_lgamma_mu_gradient(alpha, beta)
        n = wsum(w, **kw)
        c = wsum(w, np.asarray(lx) + lb, **kw)
        return (-n * g1 + 0.0 * c, c - n * g2)


# ---- a random Dirichlet concentration (NCVMP) -----------------------------------------------
class DirichletConcentrationFactor(Conditional):
    """p ~ Dirichlet(s m): a fixed base vector m (last axis = the K categories) times a
    concentration s, a Gamma node (non-conjugate: fit("ncvmp")).

    log p(p | s) = sum_k (s m_k - 1) log p_k + log Gamma(s M) - sum_k log Gamma(s m_k), M = sum m:
    linear in E[s] except the log-Gamma terms, whose expectations under q(s) = Gamma(alpha,
    beta) and their mu-gradients come from :func:`expected_lgamma_mu_gradient`. The message
    to s (in (E log s, E s)) is

        (0, sum_n w_n sum_k m_k E[log p_nk]) + (sum_n w_n) grad_mu (E lgG(s M) - sum_k E lgG(s m_k))

    (docs/hyperpriors.md)."""

    conjugate = False

    def __init__(self, node, parents, slots, base):
        self.base = np.asarray(base, dtype=float)
        super().__init__(node, parents, slots)

    def fixed_plates(self):
        return self.base.shape[:-1]

    def describe(self):
        return f"Dirichlet(concentration={self.parents[0].name}) of {self.node.label()}"

    def prior_natural(self, u):
        (_, s), = u
        return (np.asarray(s)[..., None] * self.base - 1.0,)

    def _terms(self, u, grad):
        (ls, s), = u
        alpha, beta = gamma_from_moments(ls, s)
        alpha, beta = alpha[..., None], beta[..., None]
        M = self.base.sum(-1, keepdims=True)
        f = expected_lgamma_mu_gradient if grad else (lambda a, b, c: expected_lgamma(a, b, c)[:1])
        whole = f(alpha, beta, M)                       # E lgG(s M) (+ gradient)
        parts = f(alpha, beta, self.base)               # E lgG(s m_k)
        return [p.sum(-1) - w[..., 0] for p, w in zip(parts, whole)]   # E[A] and its gradient

    def expected_log_partition(self, u):
        return self._terms(u, grad=False)[0]

    def message(self, i, x, u, w, target):
        (lp,) = x.moments
        kw = dict(target_plates=target, full_plates=x.plates)
        _, g1, g2 = self._terms(u, grad=True)
        n = wsum(w, **kw)
        return (-wsum(w, g1, **kw) + 0.0 * n,
                wsum(w, np.sum(self.base * np.asarray(lp), axis=-1), **kw) - wsum(w, g2, **kw))
