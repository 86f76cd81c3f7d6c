"""Gamma family, shape-rate parameterisation.

    Ga(x | a, b) = b^a / Gamma(a) x^{a-1} exp(-b x),   x > 0, shape a > 0, rate b > 0

(numpy / scipy use the *scale* 1/b).  Exponential-family form (docs/math.md §2.3):
T(x) = (log x, x), lam = (a - 1, -b), h = 1,

    A(lam) = log Gamma(lam1 + 1) - (lam1 + 1) log(-lam2) = log Gamma(a) - a log b,
    mu = (psi(a) - log b, a/b),
    H = a - log b + log Gamma(a) + (1 - a) psi(a),
    KL(Ga(a1,b1) || Ga(a2,b2)) = (a1 - a2) psi(a1) - log Gamma(a1) + log Gamma(a2)
                                 + a2 (log b1 - log b2) + a1 (b2 - b1)/b1.

Mean a/b, variance a/b^2, mode (a - 1)/b for a >= 1 (clamped to 0 for a < 1,
where the density is unbounded at 0; docs/math.md §5).

Reference: Bishop, *Pattern Recognition and Machine Learning* (2006), §2.3.6
and Appendix B; Johnson, Kotz & Balakrishnan, *Continuous Univariate
Distributions* vol. 1 (1994), ch. 17.
"""
from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import digamma, gammaln

from .base import _F8, ExponentialFamily
from ._scalar_helpers import as_nat, broadcast_copies, check_positive, draw_shape, frozen, get_rng

_min = np.minimum.reduce
_ARRAYS = (np.ndarray, np.float64)   # (a 0-d sum comes back as a numpy scalar)


class Gamma(ExponentialFamily):
    """Gamma(shape a, rate b)."""

    name = "Gamma"
    param_names = ("shape", "rate")
    event_ndims = (0, 0)
    value_ndim = 0

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        return x <= 0, "positive values"

    def placeholder(self, event_shape):
        return np.ones(event_shape)

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, shape, rate, where=None):
        a = check_positive(self.name, "shape", shape, where)
        b = check_positive(self.name, "rate", rate, where)
        return a, b

    def natural_from_params(self, shape, rate):
        a, b = broadcast_copies(shape, rate)
        return (a - 1.0, -b)

    def params_from_natural(self, nat):
        a, b = broadcast_copies(*self._ab(nat))
        return {"shape": a, "rate": b}

    def _ab(self, nat):
        if type(nat) is tuple and len(nat) == 2:
            l1, l2 = nat
            if type(l1) in _ARRAYS and type(l2) in _ARRAYS and \
                    l1.dtype == _F8 and l2.dtype == _F8:   # (q's own: every sweep)
                return l1 + 1.0, -l2
        l1, l2 = as_nat(nat, 2)
        return l1 + 1.0, -l2

    # ---- exponential-family functions -------------------------------------
    def suff_stats(self, x):
        x = np.asarray(x, dtype=float)
        return (np.log(x), x)

    def log_partition(self, nat):
        a, b = self._ab(nat)
        return gammaln(a) - a * np.log(b)

    def mean_params(self, nat):
        a, b = self._ab(nat)
        if a.shape != b.shape:
            a, b = np.broadcast_arrays(a, b)
        return (digamma(a) - np.log(b), a / b)

    def entropy(self, nat):
        a, b = self._ab(nat)
        return a - np.log(b) + gammaln(a) + (1.0 - a) * digamma(a)

    def kl(self, nat1, nat2):
        a1, b1 = self._ab(nat1)
        a2, b2 = self._ab(nat2)
        return ((a1 - a2) * digamma(a1) - gammaln(a1) + gammaln(a2)
                + a2 * (np.log(b1) - np.log(b2)) + a1 * (b2 - b1) / b1)

    def sample(self, nat, rng=None, size=None):
        a, b = np.broadcast_arrays(*self._ab(nat))
        return get_rng(rng).gamma(a, 1.0 / b, size=draw_shape(size, a.shape))

    def mean(self, nat):
        a, b = self._ab(nat)
        return a / b

    def var(self, nat):
        a, b = self._ab(nat)
        return a / (b * b)

    def mode(self, nat):
        a, b = self._ab(nat)
        return np.maximum(a - 1.0, 0.0) / b

    def precision_is_pd(self, nat):
        """A proper Gamma (shape > 0, rate > 0): the BLR step halves rho until it is. A
        non-conjugate target (a random shape or concentration, docs/hyperpriors.md) can
        have a rate <= 0; conjugate targets never do."""
        a, b = self._ab(nat)   # (min > 0: nan fails as in np.all(a > 0); one C call each)
        inf = np.inf
        return bool(_min(a, axis=None, initial=inf) > 0 and _min(b, axis=None, initial=inf) > 0)

    def to_scipy(self, nat):
        a, b = np.broadcast_arrays(*self._ab(nat))
        return frozen(a.shape, lambda i: stats.gamma(a[i], scale=1.0 / b[i]))
