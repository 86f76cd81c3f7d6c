"""Hyperprior factors: a Wishart whose inverse scale is a Wishart node (conjugate), a
Gamma whose shape is a Gamma node, and a Dirichlet whose concentration is a Gamma node
(one scale, or a vector of K concentrations) (non-conjugate, fit("ncvmp"); at the end of
this file).

Lambda ~ Wishart(n, B^-1) (scipy's convention: E[Lambda] = n B^-1) with B random:

    log p(Lambda | B) = (n - D - 1)/2 log|Lambda| - tr(B Lambda)/2 + (n/2) log|B|
                        - (n D/2) log 2 - log Gamma_D(n/2)

is linear in B's sufficient statistics (B, log|B|), so a Wishart q(B) is conjugate: the
message to B is (-E[Lambda]/2, n/2) summed over Lambda's plates (docs/hyperpriors.md).
It is the matrix version of a Gamma's random rate.
"""
from __future__ import annotations

import numpy as np
from scipy.special import digamma, expit, gammaln, polygamma

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
    return (G,) + mu_gradient(alpha, beta, ga, gb)


def mu_gradient(alpha, beta, ga, gb):
    """A gradient in a Gamma's (alpha, beta) turned into its mean parameters mu = (E log a,
    E a): solve J^T g_mu = g_(alpha, beta) with J = d mu / d(alpha, beta)."""
    alpha, beta = np.broadcast_arrays(np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float),
                                      ga)[:2]
    j11, j12 = polygamma(1, alpha), -1.0 / beta     # d mu1 / d(alpha, beta)
    j21, j22 = 1.0 / beta, -alpha / beta ** 2       # d mu2 / d(alpha, beta)
    det = j11 * j22 - j12 * j21
    # [j11 j21; j12 j22] [g1; g2] = [ga; gb]
    g1 = (j22 * ga - j21 * gb) / det
    g2 = (-j12 * ga + j11 * gb) / det
    return g1, g2


def point_lgamma_mu_gradient(x, scale=1.0):
    """(log Gamma(c x), g1, g2) for a point mass at x (a Gamma node under ``point=``): the
    limit of :func:`expected_lgamma_mu_gradient` as q(x) concentrates on x,
    g1 = -c^2 psi'(c x) x^2, g2 = c psi(c x) + c^2 psi'(c x) x. As a message in (log x, x)
    these match log Gamma(c x) to second order at x: a Newton step (docs/hyperpriors.md)."""
    x, c = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(scale, dtype=float))
    cx = c * x
    t1 = polygamma(1, cx) * c * c
    return gammaln(cx), -t1 * x * x, c * digamma(cx) + t1 * x


def is_point(la, a):
    """Are Gamma moments (E log x, E x) those of a point mass (or data): log E x = E log x?
    (A Gamma q has log E x - E log x = log alpha - psi(alpha) > 0.)"""
    return bool(np.all(np.log(np.asarray(a, dtype=float)) - np.asarray(la, dtype=float) <= 0))


def lgamma_mu_gradient(la, a, scale=1.0, grad=True):
    """(E[log Gamma(c x)],) or (E[log Gamma(c x)], g1, g2) for x with Gamma moments
    (la, a) = (E log x, E x): a Gamma q (:func:`expected_lgamma_mu_gradient`) or a point
    mass (:func:`point_lgamma_mu_gradient`)."""
    if is_point(la, a):
        out = point_lgamma_mu_gradient(a, scale)
    else:
        alpha, beta = gamma_from_moments(la, a)
        out = expected_lgamma_mu_gradient(alpha, beta, scale) if grad else \
            expected_lgamma(alpha, beta, scale)
    return out if grad else out[:1]


#: trapezoid spacing in u = log t for :func:`expected_lgamma_sum` (the integrand is analytic
#: in the strip |Im u| < pi/2, so the error is ~exp(-pi^2 / h): ~1e-21 at h = 0.2)
SUM_STEP = 0.2


def expected_lgamma_sum(alpha, beta):
    """G = E[log Gamma(S)], S = sum_k a_k, a_k ~ Gamma(alpha_k, beta_k) independent (the K
    categories on the last axis), and its gradient (dG/dalpha_k, dG/dbeta_k). S is not a
    Gamma variable, but its Laplace transform is closed-form,
    L(t) = E[e^{-tS}] = prod_k (1 + t/beta_k)^{-alpha_k}, and Malmsten's integral
    log Gamma(z) = int_0^inf [(z - 1) e^{-t} - (e^{-t} - e^{-zt}) / (1 - e^{-t})] dt/t
    (Re z > 0) is linear in e^{-zt}, so

        G = int_0^inf [(E S - 1) e^{-t} - (e^{-t} - L(t)) / (1 - e^{-t})] dt/t,

    a 1-D integral for every K, computed by the trapezoid rule in u = log t (exponentially
    convergent), vectorised over the leading axes; the gradient differentiates L under
    the integral (docs/hyperpriors.md)."""
    alpha, beta = np.broadcast_arrays(np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float))
    shape, K = alpha.shape, alpha.shape[-1]
    a, b = alpha.reshape(-1, K), beta.reshape(-1, K)
    A, m = a.sum(1), (a / b).sum(1)
    # ends: the integrand is O(t) as t -> 0 and ~ L(t) <= (1 + t/beta_max)^-A as t -> inf
    lo = -45.0 - 2.0 * np.log1p(m + 1.0 / b.min(1))
    tail = (50.0 + 2.0 * np.maximum(0.0, -np.log(A))) / A
    hi = np.maximum(np.log(60.0), np.log(b.max(1)) + np.where(
        tail > 700.0, tail, np.log(np.expm1(np.minimum(tail, 700.0)))))
    n = int(np.max((hi - lo) / SUM_STEP)) + 2 if a.size else 2
    u = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, n)     # entries x points
    h = ((hi - lo) / (n - 1))[:, None]
    t = np.exp(np.minimum(u, 700.0))
    lb = np.log(b)[:, None, :]
    l1 = np.logaddexp(0.0, u[:, :, None] - lb)                          # log(1 + t/beta_k)
    logL = -np.einsum("enk,ek->en", l1, a)
    L = np.exp(logL)
    et = np.exp(-np.minimum(t, 800.0))
    om = -np.expm1(-t)                                                  # 1 - e^{-t}
    small = t < 1.0                                                     # (e^-t - L)/(1 - e^-t)
    r = np.where(small, et * np.expm1(np.where(small, logL + t, 0.0)) / np.where(small, -om, 1.0),
                 (et - L) / np.where(small, 1.0, om))
    G = np.sum(h * ((m[:, None] - 1.0) * et - r), axis=1)
    Lo = (L / om)[:, :, None]
    ga = np.sum(h[:, :, None] * (et[:, :, None] / b[:, None, :] - l1 * Lo), axis=1)
    gb = np.sum(h[:, :, None] * ((a / b)[:, None, :] * (expit(u[:, :, None] - lb) * Lo
                                                        - et[:, :, None] / b[:, None, :])), axis=1)
    return G.reshape(shape[:-1]), ga.reshape(shape), gb.reshape(shape)


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
        return lgamma_mu_gradient(la, a, grad=False)[0] - a * lb

    def message(self, i, x, u, w, target):
        lx, ex = x.moments
        kw = dict(target_plates=target, full_plates=x.plates)
        (la, a), (lb, _) = u
        if i == 1:
            return (wsum(w, a + 0.0 * np.asarray(lx), **kw), -wsum(w, ex, **kw))
        _, g1, g2 = lgamma_mu_gradient(la, a)
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
        ls, s = np.asarray(ls)[..., None], np.asarray(s)[..., None]
        M = self.base.sum(-1, keepdims=True)
        whole = lgamma_mu_gradient(ls, s, M, grad)              # E lgG(s M) (+ gradient)
        parts = lgamma_mu_gradient(ls, s, self.base, grad)      # E lgG(s m_k)
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


# ---- a vector of random Dirichlet concentrations (NCVMP) ----------------------------------
class DirichletAlphaFactor(Conditional):
    """p ~ Dirichlet(alpha) with alpha a Gamma node whose last plate axis holds the K
    concentrations (BayesPy's ``Concentration``; non-conjugate: fit("ncvmp")). Every leading
    plate axis of alpha broadcasts against p's plates, so many Dirichlets (LDA's per-document
    theta) share one alpha vector.

    log p(p | alpha) = sum_k (alpha_k - 1) log p_k + log Gamma(sum_k alpha_k)
                       - sum_k log Gamma(alpha_k)

    is linear in E[alpha_k] except the log-Gamma terms. With q(alpha_k) = Gamma(a_k, b_k)
    independent, E[log Gamma(alpha_k)] is :func:`expected_lgamma` and E[log Gamma(sum_k
    alpha_k)] is :func:`expected_lgamma_sum` (Malmsten's integral over the closed-form
    Laplace transform of the sum): the ELBO term and its gradient in alpha's mean parameters
    (E log alpha_k, E alpha_k), the message, are exact to rounding:

        (0, sum_n w_n E[log p_nk]) - (sum_n w_n) grad_mu_k (sum_j E lgG(alpha_j) - E lgG(sum_j alpha_j))

    With alpha a point mass (``point=``) the same terms at the point, and the limit of the
    gradient (:func:`point_lgamma_mu_gradient`): a Newton step whose fixed point is the MAP,
    Minka's fixed point for a flat prior (docs/hyperpriors.md)."""

    conjugate = False
    caches = ("_memo",)   # the last (moments, terms): the ELBO and the message share them
    _memo = None

    def describe(self):
        return f"Dirichlet(alpha={self.parents[0].name}) of {self.node.label()}"

    def plates(self):
        return tuple(self.parents[0].plates[:-1])

    def predictive_plates(self, q):
        return tuple(q[0].plates[:-1])

    def draw_ndim(self, i, n):
        return n + 1                  # alpha's last plate axis is the Dirichlet's category axis

    def prior_natural(self, u):
        (_, a), = u
        return (np.asarray(a) - 1.0,)

    def _terms(self, u):
        """(E[A], g1, g2): E[log B(alpha)] = sum_k E lgG(alpha_k) - E lgG(sum alpha) and its
        gradient in each alpha_k's (E log alpha_k, E alpha_k); shapes lead, lead + (K,)."""
        (la, a), = u
        la, a = np.asarray(la, dtype=float), np.asarray(a, dtype=float)
        memo = self._memo
        if memo is not None and np.array_equal(memo[0], la) and np.array_equal(memo[1], a):
            return memo[2]
        if is_point(la, a):           # a point mass (or data): T at the point
            A = a.sum(-1, keepdims=True)
            parts = point_lgamma_mu_gradient(a)
            t1 = polygamma(1, A)            # the limit for f = log Gamma(sum_j alpha_j):
            whole = (gammaln(A), -t1 * a * a, digamma(A) + t1 * a)   # -f_kk a_k^2, f_k + f_kk a_k
        else:
            alpha, beta = gamma_from_moments(la, a)
            parts = expected_lgamma_mu_gradient(alpha, beta)
            G, ga, gb = expected_lgamma_sum(alpha, beta)
            whole = (G[..., None],) + mu_gradient(alpha, beta, ga, gb)
        out = (parts[0].sum(-1) - whole[0][..., 0], parts[1] - whole[1], parts[2] - whole[2])
        self._memo = (la.copy(), a.copy(), out)
        return out

    def expected_log_partition(self, u):
        return self._terms(u)[0]

    def message(self, i, x, u, w, target):
        (lp,) = x.moments
        kw = dict(target_plates=tuple(target[:-1]), full_plates=x.plates)
        _, g1, g2 = self._terms(u)
        W = wsum(w, **kw)[..., None]
        return (-W * g1, wsum(w, np.asarray(lp), subs=("A",), out="A", **kw) - W * g2)
