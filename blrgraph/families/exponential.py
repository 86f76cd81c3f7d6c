"""Exponential family member Exponential(rate), i.e. Gamma(1, rate).

    Exp(x | r) = r exp(-r x),   x >= 0, rate r > 0

Exponential-family form (docs/math.md §2.4): T(x) = (x,), lam = (-r,), h = 1,

    A(lam) = -log(-lam) = -log r,   mu = (1/r,),   H = 1 - log r,
    KL(Exp(r1) || Exp(r2)) = log(r1/r2) + r2/r1 - 1.

Mean 1/r, variance 1/r^2, mode 0.  The conjugate prior of the rate is Gamma.

Reference: Johnson, Kotz & Balakrishnan, *Continuous Univariate
Distributions* vol. 1 (1994), ch. 19; Bishop (2006), Appendix B (Gamma with a = 1).
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from .base import ExponentialFamily
from ._scalar_helpers import as_nat, check_positive, draw_shape, frozen, get_rng


class Exponential(ExponentialFamily):
    """Exponential(rate)."""

    name = "Exponential"
    param_names = ("rate",)
    event_ndims = (0,)
    value_ndim = 0

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        return x < 0, "non-negative values"

    def placeholder(self, event_shape):
        return np.zeros(event_shape)

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, rate, where=None):
        return (check_positive(self.name, "rate", rate, where),)

    def natural_from_params(self, rate):
        return (-np.array(rate, dtype=float),)

    def params_from_natural(self, nat):
        return {"rate": self._rate(nat).copy()}

    def _rate(self, nat):
        (l1,) = as_nat(nat, 1)
        return -l1

    # ---- exponential-family functions -------------------------------------
    def suff_stats(self, x):
        return (np.asarray(x, dtype=float),)

    def log_partition(self, nat):
        return -np.log(self._rate(nat))

    def mean_params(self, nat):
        return (1.0 / self._rate(nat),)

    def entropy(self, nat):
        return 1.0 - np.log(self._rate(nat))

    def kl(self, nat1, nat2):
        r1, r2 = self._rate(nat1), self._rate(nat2)
        return np.log(r1 / r2) + r2 / r1 - 1.0

    def sample(self, nat, rng=None, size=None):
        r = self._rate(nat)
        return get_rng(rng).exponential(1.0 / r, size=draw_shape(size, r.shape))

    def mean(self, nat):
        return 1.0 / self._rate(nat)

    def var(self, nat):
        r = self._rate(nat)
        return 1.0 / (r * r)

    def mode(self, nat):
        return np.zeros_like(self._rate(nat))

    def to_scipy(self, nat):
        r = self._rate(nat)
        return frozen(r.shape, lambda i: stats.expon(scale=1.0 / r[i]))
