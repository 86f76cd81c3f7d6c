"""Normal-Wishart family NW(mu, L | m, beta, W, nu) = N(mu | m, (beta L)^{-1}) W(L | W, nu).

Parameterisation (Bishop 2006, eq. 2.157 and §10.2; docs/math.md §2.7): ``mean`` m of
shape plates + (D,), ``beta`` > 0 (plates), ``dof`` nu > D - 1 (plates) and
``scale`` W (plates + (D, D), SPD), with the Wishart convention E[L] = nu W of
``scipy.stats.wishart(df=nu, scale=W)``.

The value is the pair ``x = (mu, L)``. Exponential-family form (h = 1)::

    T(mu, L) = (L mu, mu^T L mu, L, log|L|),              event_ndims = (1, 0, 2, 0)
    lam = (beta m, -beta/2, -(W^{-1} + beta m m^T)/2, (nu - D)/2)
    A(lam) = (nu/2) log|W| + (nu D/2) log 2 + log Gamma_D(nu/2) - (D/2) log beta + (D/2) log 2 pi
    mu = (nu W m, D/beta + nu m^T W m, nu W, E[log|L|])

Inverse map: beta = -2 lam2, m = lam1/beta, nu = 2 lam4 + D, W^{-1} = -2 lam3 - beta m m^T.
Marginals: L ~ W(W, nu); mu ~ multivariate t(loc m, shape W^{-1}/(beta (nu - D + 1)),
dof nu - D + 1). Joint mode: (m, (nu - D) W) -- not the L-marginal mode (nu - D - 1) W.
"""
from __future__ import annotations

import numpy as np

from .base import (ExponentialFamily, UnpackMemo, broadcast_nat, check_positive, check_spd,
                   object_array)
from ._spd import _chol, _chol_logdet, _inv_from_chol, _sym
from .wishart import (LOG2, LOG2PI, _check_broadcast, _check_dof, _matvec, _multigammaln,
                      _outer, _prefix, _quad, _rng, _safe_logdet, _size_tuple, _trace_prod,
                      bartlett_factor, mvdigamma, wishart_var)


class NormalWishart(UnpackMemo, ExponentialFamily):
    """NW(mu, L | mean, beta, dof, scale): ``NormalWishart().natural_from_params(m, beta, nu, W)``.

    Values, samples, means, variances and modes are pairs ``(mu, L)``;
    :meth:`to_scipy` returns the pair of marginals (multivariate t of mu, Wishart
    of L). Extra method: :meth:`expected_logdet`. See the module docstring and
    docs/math.md §2.7.
    """

    name = "NormalWishart"
    locational = True
    param_names = ("mean", "beta", "dof", "scale")
    event_ndims = (1, 0, 2, 0)
    value_ndim = (1, 2)   # the value is a pair (mu, L)
    #: a joint (mu, precision) node is a prior over a child's parameters, never data
    observable = False

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, mean, beta, dof, scale, where=None):
        prefix = _prefix(self, where)
        mean = np.asarray(mean, dtype=float)
        if mean.ndim < 1:
            raise ValueError(f"{prefix}: mean must have a trailing event axis of length D "
                             f"(shape (..., D)), got a scalar; pass e.g. np.atleast_1d(mean)")
        if not np.all(np.isfinite(mean)):
            raise ValueError(f"{prefix}: mean must be finite")
        beta = check_positive("beta", beta, prefix)
        scale = check_spd("scale", scale, prefix)
        d = scale.shape[-1]
        if mean.shape[-1] != d:
            raise ValueError(f"{prefix}: mean has D = {mean.shape[-1]} but scale is {d}x{d}; "
                             f"pass mean of shape (..., D) and scale of shape (..., D, D) "
                             f"with the same D")
        dof = _check_dof(prefix, dof, d)
        _check_broadcast(prefix, (mean.shape[:-1], "mean"), (beta.shape, "beta"),
                         (dof.shape, "dof"), (scale.shape[:-2], "scale"))
        return mean, beta, dof, scale

    def natural_from_params(self, mean, beta, dof, scale):
        mean, beta, dof, scale = (np.asarray(p, dtype=float)
                                  for p in (self._minus_c(mean), beta, dof, scale))
        d = scale.shape[-1]
        plates = np.broadcast_shapes(mean.shape[:-1], beta.shape, dof.shape, scale.shape[:-2])
        c = _chol(scale, "scale", self.name)
        prec, _ = _inv_from_chol(c)
        mean = np.broadcast_to(mean, plates + (d,))
        beta = np.broadcast_to(beta, plates)
        lam1 = beta[..., None] * mean
        lam2 = -0.5 * beta
        lam3 = -0.5 * (np.broadcast_to(prec, plates + (d, d)) + beta[..., None, None] * _outer(mean))
        lam4 = np.array(np.broadcast_to(0.5 * (dof - d), plates))
        return lam1, lam2, lam3, lam4

    # _unpack(nat) -> (m, beta, nu, W, log|W|, W^{-1}, c^{-1}) with c c^T = W^{-1}, read-only
    # (UnpackMemo: the last two q's are remembered)
    MEMO_SIZE = 2

    def _unpack_new(self, nat):
        lam1, lam2, lam3, lam4 = broadcast_nat(nat, self.event_ndims)
        d = lam1.shape[-1]
        beta = -2.0 * lam2
        nu = 2.0 * lam4 + d
        if not (np.all(beta > 0) and np.all(nu > d - 1)):
            raise ValueError(f"{self.name}: natural parameters outside the natural parameter "
                             f"space (need beta = -2 lam2 > 0 and nu = 2 lam4 + D > D - 1)")
        m = lam1 / beta[..., None]
        prec = _sym(-2.0 * lam3) - beta[..., None, None] * _outer(m)
        c = _chol(prec, "-2 lam3 - beta m m^T (the inverse scale)", self.name)
        w, ci = _inv_from_chol(c)
        return m, beta, nu, w, -_chol_logdet(c), prec, ci

    def params_from_natural(self, nat):
        m, beta, nu, w, _, _, _ = self._unpack(nat)
        return {"mean": np.array(np.broadcast_to(self._plus_c(m), m.shape)), "beta": np.array(beta),
                "dof": np.array(nu), "scale": np.array(w)}

    def centre(self, x):
        mu, lam = x
        return self._minus_c(mu), lam

    # ---- exponential-family functions (of the centred variable) ---------------
    def suff_stats(self, x):
        mu, lam = (np.asarray(v, dtype=float) for v in x)
        logdet, ok = _safe_logdet(lam)
        lmu = _matvec(lam, mu)
        return lmu, np.sum(mu * lmu, axis=-1), lam, np.where(ok, logdet, -np.inf)

    def log_base_measure(self, x):
        return np.zeros(np.broadcast_shapes(np.shape(x[0])[:-1], np.shape(x[1])[:-2]))

    @staticmethod
    def _wishart_a(nu, logdet_w, d):
        return 0.5 * nu * logdet_w + 0.5 * nu * d * LOG2 + _multigammaln(0.5 * nu, d)

    @staticmethod
    def _elogdet(nu, logdet_w, d):
        return mvdigamma(0.5 * nu, d) + d * LOG2 + logdet_w

    def log_partition(self, nat):
        m, beta, nu, w, ldw, _, _ = self._unpack(nat)
        d = m.shape[-1]
        return self._wishart_a(nu, ldw, d) - 0.5 * d * np.log(beta) + 0.5 * d * LOG2PI

    def expected_logdet(self, nat):
        """E[log|L|] = psi_D(nu/2) + D log 2 + log|W|."""
        m, beta, nu, w, ldw, _, _ = self._unpack(nat)
        return self._elogdet(nu, ldw, m.shape[-1])

    def mean_params(self, nat):
        m, beta, nu, w, ldw, _, _ = self._unpack(nat)
        d = m.shape[-1]
        el = nu[..., None, None] * w
        elm = _matvec(el, m)
        return elm, d / beta + np.sum(m * elm, axis=-1), el, self._elogdet(nu, ldw, d)

    def entropy(self, nat):
        """H = H_Wishart(W, nu) + (D/2)(1 + log 2 pi) - (D/2) log beta - E[log|L|]/2."""
        m, beta, nu, w, ldw, _, _ = self._unpack(nat)
        d = m.shape[-1]
        el = self._elogdet(nu, ldw, d)
        h_w = self._wishart_a(nu, ldw, d) - 0.5 * (nu - d - 1.0) * el + 0.5 * nu * d
        return h_w + 0.5 * d * (1.0 + LOG2PI) - 0.5 * d * np.log(beta) - 0.5 * el

    def kl(self, nat1, nat2):
        """Closed form (docs/math.md §2.7): (D/2) log(b1/b2) - D/2
        + (b2/2)(D/b1 + nu1 (m1-m2)^T W1 (m1-m2)) + KL_Wishart(W1, nu1 || W2, nu2)."""
        m1, b1, nu1, w1, ld1, _, _ = self._unpack(nat1)
        m2, b2, nu2, _, ld2, prec2, _ = self._unpack(nat2)
        d = m1.shape[-1]
        kl_w = (self._wishart_a(nu2, ld2, d) - self._wishart_a(nu1, ld1, d)
                + 0.5 * (nu1 - nu2) * self._elogdet(nu1, ld1, d)
                - 0.5 * nu1 * d + 0.5 * nu1 * _trace_prod(prec2, w1))
        diff = m1 - m2
        return (0.5 * d * np.log(b1 / b2) - 0.5 * d
                + 0.5 * b2 * (d / b1 + nu1 * _quad(w1, diff)) + kl_w)

    def logpdf(self, x, nat):
        """log NW(mu, L); -inf where L is not positive definite."""
        mu, lam = (np.asarray(v, dtype=float) for v in self.centre(x))
        logdet, ok = _safe_logdet(lam)
        lmu = _matvec(lam, mu)
        out = (np.sum(nat[0] * lmu, axis=-1) + nat[1] * np.sum(mu * lmu, axis=-1)
               + np.sum(nat[2] * lam, axis=(-2, -1)) + nat[3] * logdet) - self.log_partition(nat)
        return np.where(ok, out, -np.inf)

    def sample(self, nat, rng=None, size=None):
        """Pair (mu, L): L ~ W(W, nu) by Bartlett, then mu ~ N(m, (beta L)^{-1}).

        Shapes size + plates + (D,) and size + plates + (D, D)."""
        # With c c^T = W^{-1} and Bartlett A: L = G G^T, G = c^{-T} A, so
        # (beta L)^{-1/2} z = c A^{-T} z / sqrt(beta) -- no factorisation of the
        # (possibly nearly singular, small-dof) draw L is needed.
        rng = _rng(rng)
        m, beta, nu, _, _, prec, ci = self._unpack(nat)
        d = m.shape[-1]
        shape = _size_tuple(size) + beta.shape
        a = bartlett_factor(rng, nu, shape, d)
        g = np.swapaxes(ci, -1, -2) @ a
        lam = _sym(g @ np.swapaxes(g, -1, -2))
        z = rng.standard_normal(shape + (d,))
        u = np.linalg.solve(np.swapaxes(a, -1, -2), z[..., None])[..., 0]
        c = np.linalg.cholesky(prec)
        mu = m + _matvec(c, u) / np.sqrt(beta)[..., None]
        return self._plus_c(mu), lam

    def mean(self, nat):
        """(E[mu], E[L]) = (m, nu W)."""
        m, beta, nu, w, _, _, _ = self._unpack(nat)
        return np.array(np.broadcast_to(self._plus_c(m), m.shape)), nu[..., None, None] * w

    def var(self, nat):
        """(Var[mu_i], Var[L_ij]): diag(W^{-1}) / (beta (nu - D - 1)) [inf if nu <= D + 1]
        and nu (W_ij^2 + W_ii W_jj)."""
        m, beta, nu, w, _, prec, _ = self._unpack(nat)
        d = m.shape[-1]
        den = beta * (nu - d - 1.0)
        ok = (nu - d - 1.0) > 0
        dg = np.diagonal(prec, axis1=-2, axis2=-1)
        var_mu = np.where(ok[..., None], dg / np.where(ok, den, 1.0)[..., None], np.inf)
        return var_mu, wishart_var(nu, w)

    def centred_point_value(self, nat):
        """The joint mode of (mu - c, L)."""
        m, beta, nu, w, _, _, _ = self._unpack(nat)
        d = m.shape[-1]
        return np.array(m), np.maximum(nu - d, 0.0)[..., None, None] * w

    def mode(self, nat):
        """Joint mode (m, (nu - D) W); L clamped at 0 when nu < D (docs/math.md §5)."""
        mu, lam = self.centred_point_value(nat)
        return np.array(np.broadcast_to(self._plus_c(mu), mu.shape)), lam

    def to_scipy(self, nat):
        """(multivariate_t marginal of mu, wishart marginal of L); object arrays with plates."""
        from scipy import stats
        m, beta, nu, w, _, prec, _ = self._unpack(nat)
        m = np.broadcast_to(self._plus_c(m), m.shape)
        d = m.shape[-1]
        df = nu - d + 1.0
        shape = prec / (beta * df)[..., None, None]

        def t(i):
            return stats.multivariate_t(loc=m[i], shape=shape[i], df=float(df[i]))

        def wi(i):
            return stats.wishart(df=float(nu[i]), scale=w[i])

        if beta.shape == ():
            return t(()), wi(())
        return object_array(beta.shape, t), object_array(beta.shape, wi)
