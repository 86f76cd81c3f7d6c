"""Normal-Gamma family NG(mu, tau | m, beta, a, b) = N(mu | m, (beta tau)^{-1}) Ga(tau | a, b).

Parameterisation (Bishop 2006, eq. 2.154; docs/math.md §2.6): location ``mean`` m,
precision scaling ``beta`` (kappa in docs/math.md §2.6) > 0, Gamma ``shape`` a > 0 and
``rate`` b > 0 (numpy/scipy take scale = 1/b). All four have shape plates.

The value is the pair ``x = (mu, tau)``. Exponential-family form (h = 1)::

    T(mu, tau) = (tau mu, tau mu^2, tau, log tau)
    lam = (beta m, -beta/2, -(b + beta m^2/2), a - 1/2),    event_ndims = (0, 0, 0, 0)
    A(lam) = log Gamma(a) - a log b - log(beta)/2 + log(2 pi)/2
    mu = (a m/b, a m^2/b + 1/beta, a/b, psi(a) - log b)

Inverse map: beta = -2 lam2, m = lam1/beta, b = -lam3 + lam1^2/(4 lam2), a = lam4 + 1/2.
Marginals: tau ~ Ga(a, b); mu ~ Student-t(loc m, scale^2 b/(a beta), dof 2a).
Joint mode (w.r.t. Lebesgue measure on (mu, tau)): (m, (a - 1/2)/b).
"""
from __future__ import annotations

import numpy as np
from scipy.special import digamma, gammaln

from .base import ExponentialFamily, broadcast_nat, check_positive, object_array
from .wishart import LOG2PI, _check_broadcast, _prefix, _rng, _size_tuple


def _gamma_entropy(a, b):
    return a - np.log(b) + gammaln(a) + (1.0 - a) * digamma(a)


def _gamma_kl(a1, b1, a2, b2):
    """KL(Ga(a1, b1) || Ga(a2, b2)), shape/rate (docs/math.md §2.3)."""
    return ((a1 - a2) * digamma(a1) - gammaln(a1) + gammaln(a2)
            + a2 * (np.log(b1) - np.log(b2)) + a1 * (b2 - b1) / b1)


class NormalGamma(ExponentialFamily):
    """NG(mu, tau | mean, beta, shape, rate): ``NormalGamma().natural_from_params(m, beta, a, b)``.

    Values, samples, means, variances and modes are pairs ``(mu, tau)``;
    :meth:`to_scipy` returns the pair of marginals (Student-t of mu, gamma of tau).
    See the module docstring and docs/math.md §2.6.
    """

    name = "NormalGamma"
    locational = True
    param_names = ("mean", "beta", "shape", "rate")
    event_ndims = (0, 0, 0, 0)
    value_ndim = (0, 0)   # the value is a pair (mu, tau) of plate-shaped arrays
    #: a joint (mu, precision) node is a prior over a child's parameters, never data
    observable = False

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, mean, beta, shape, rate, where=None):
        prefix = _prefix(self, where)
        mean = np.asarray(mean, dtype=float)
        if not np.all(np.isfinite(mean)):
            raise ValueError(f"{prefix}: mean must be finite, got {mean!r}")
        beta = check_positive("beta", beta, prefix)
        shape = check_positive("shape", shape, prefix)
        rate = check_positive("rate", rate, prefix)
        _check_broadcast(prefix, (mean.shape, "mean"), (beta.shape, "beta"),
                         (shape.shape, "shape"), (rate.shape, "rate"))
        return mean, beta, shape, rate

    def natural_from_params(self, mean, beta, shape, rate):
        m, k, a, b = np.broadcast_arrays(*(np.asarray(p, dtype=float)
                                           for p in (self._minus_c(mean), beta, shape, rate)))
        return k * m, -0.5 * k, -(b + 0.5 * k * m * m), a - 0.5

    def _unpack(self, nat):
        """-> (m, beta, a, b)."""
        lam1, lam2, lam3, lam4 = broadcast_nat(nat, self.event_ndims)
        k = -2.0 * lam2
        a = lam4 + 0.5
        with np.errstate(divide="ignore", invalid="ignore"):
            m = lam1 / k
            b = -lam3 - 0.5 * k * m * m
        if not (np.all(k > 0) and np.all(a > 0) and np.all(b > 0)):
            raise ValueError(f"{self.name}: natural parameters outside the natural parameter "
                             f"space (need beta = -2 lam2 > 0, a = lam4 + 1/2 > 0, "
                             f"b = -lam3 + lam1^2/(4 lam2) > 0)")
        return m, k, a, b

    def params_from_natural(self, nat):
        m, k, a, b = self._unpack(nat)
        m = np.broadcast_to(self._plus_c(m), k.shape).copy()
        return {"mean": m, "beta": k, "shape": a, "rate": b}

    def centre(self, x):
        mu, tau = x
        return self._minus_c(mu), tau

    # ---- exponential-family functions (of the centred variable) ---------------
    def suff_stats(self, x):
        mu, tau = (np.asarray(v, dtype=float) for v in x)
        with np.errstate(divide="ignore", invalid="ignore"):
            logtau = np.where(tau > 0, np.log(np.where(tau > 0, tau, 1.0)), -np.inf)
        return tau * mu, tau * mu * mu, tau, logtau

    def log_base_measure(self, x):
        return np.zeros(np.broadcast_shapes(np.shape(x[0]), np.shape(x[1])))

    @staticmethod
    def _a_of(m, k, a, b):
        return gammaln(a) - a * np.log(b) - 0.5 * np.log(k) + 0.5 * LOG2PI

    def log_partition(self, nat):
        return self._a_of(*self._unpack(nat))

    def mean_params(self, nat):
        m, k, a, b = self._unpack(nat)
        et = a / b
        return et * m, et * m * m + 1.0 / k, et, digamma(a) - np.log(b)

    def entropy(self, nat):
        """H = H_Gamma(a, b) + (1 + log 2 pi)/2 - log(beta)/2 - (psi(a) - log b)/2."""
        m, k, a, b = self._unpack(nat)
        return (_gamma_entropy(a, b) + 0.5 * (1.0 + LOG2PI) - 0.5 * np.log(k)
                - 0.5 * (digamma(a) - np.log(b)))

    def kl(self, nat1, nat2):
        """Closed form (docs/math.md §2.6): log(k1/k2)/2 - 1/2
        + (k2/2)(1/k1 + (a1/b1)(m1-m2)^2) + KL_Gamma(a1, b1 || a2, b2), k = beta."""
        m1, k1, a1, b1 = self._unpack(nat1)
        m2, k2, a2, b2 = self._unpack(nat2)
        return (0.5 * np.log(k1 / k2) - 0.5 + 0.5 * k2 * (1.0 / k1 + (a1 / b1) * (m1 - m2) ** 2)
                + _gamma_kl(a1, b1, a2, b2))

    def logpdf(self, x, nat):
        """log NG(mu, tau); -inf for tau <= 0."""
        mu, tau = (np.asarray(v, dtype=float) for v in self.centre(x))
        ok = tau > 0
        ts = self.suff_stats((mu, np.where(ok, tau, 1.0)))
        out = sum(l * t for l, t in zip(nat, ts)) - self.log_partition(nat)
        return np.where(ok, out, -np.inf)

    def sample(self, nat, rng=None, size=None):
        """Pair (mu, tau), each of shape size + plates."""
        rng = _rng(rng)
        m, k, a, b = self._unpack(nat)
        shape = _size_tuple(size) + m.shape
        tau = rng.gamma(np.broadcast_to(a, shape), 1.0 / np.broadcast_to(b, shape))
        mu = m + rng.standard_normal(shape) / np.sqrt(k * tau)
        return self._plus_c(mu), tau

    def mean(self, nat):
        """(E[mu], E[tau]) = (m, a/b)."""
        m, k, a, b = self._unpack(nat)
        return np.array(self._plus_c(m)), a / b

    def var(self, nat):
        """(Var[mu], Var[tau]) = (b / (beta (a - 1)) [inf if a <= 1], a / b^2)."""
        m, k, a, b = self._unpack(nat)
        am1 = a - 1.0
        var_mu = np.where(am1 > 0, b / (k * np.where(am1 > 0, am1, 1.0)), np.inf)
        return var_mu, a / b ** 2

    def centred_point_value(self, nat):
        """The joint mode of (mu - c, tau)."""
        m, k, a, b = self._unpack(nat)
        return m.copy(), np.maximum(a - 0.5, 0.0) / b

    def mode(self, nat):
        """Joint mode (m, (a - 1/2)/b); tau clamped at 0 when a < 1/2 (docs/math.md §5)."""
        mu, tau = self.centred_point_value(nat)
        return np.array(self._plus_c(mu)), tau

    def to_scipy(self, nat):
        """(Student-t marginal of mu, gamma marginal of tau); object arrays with plates."""
        from scipy import stats
        m, k, a, b = self._unpack(nat)
        m = np.broadcast_to(self._plus_c(m), k.shape)
        scale = np.sqrt(b / (a * k))

        def t(i):
            return stats.t(df=2.0 * a[i], loc=m[i], scale=scale[i])

        def g(i):
            return stats.gamma(a[i], scale=1.0 / b[i])

        if m.shape == ():
            return t(()), g(())
        return object_array(m.shape, t), object_array(m.shape, g)
