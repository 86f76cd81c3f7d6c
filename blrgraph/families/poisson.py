"""Poisson family.

    Poi(x | r) = r^x e^{-r} / x!,   x in {0, 1, 2, ...}, rate r > 0

Exponential-family form (docs/math.md §2.14): T(x) = (x,), lam = (log r,),
h(x) = 1/x! (not constant),

    A(lam) = e^lam = r,   mu = (r,),
    H = r (1 - log r) + E[log x!],   E[log h] = -E[log x!]
        (series summed over the window r +- (20 sqrt(r) + 20), where the
        neglected tail is below double precision; each term uses
        exp(k log r - r - log k!), so nothing overflows.  H itself is summed as
        -sum pmf log pmf, which avoids the cancellation of the two r log r terms),
    KL(r1 || r2) = r1 log(r1/r2) - r1 + r2.

Mean = variance = r; mode floor(r) (r itself and r - 1 tie when r is an integer).

Reference: Johnson, Kemp & Kotz, *Univariate Discrete Distributions*, 3rd ed.
(2005), ch. 4.
"""
from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import gammaln

from .base import ExponentialFamily
from ._scalar_helpers import (as_nat, check_positive, draw_shape, frozen, get_rng, poisson_entropy,
                              poisson_expected_log_factorial)


class Poisson(ExponentialFamily):
    """Poisson(rate)."""

    name = "Poisson"
    discrete = True
    natural_unconstrained = True
    param_names = ("rate",)
    event_ndims = (0,)
    value_ndim = 0

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        return (x < 0) | (x != np.round(x)), "non-negative integer counts"

    def placeholder(self, event_shape):
        return np.zeros(event_shape)

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, rate, where=None):
        return (check_positive(self.name, "rate", rate, where),)

    def natural_from_params(self, rate):
        return (np.log(np.asarray(rate, dtype=float)),)

    def params_from_natural(self, nat):
        return {"rate": np.exp(self._eta(nat))}

    def _eta(self, nat):
        return as_nat(nat, 1)[0]

    # ---- exponential-family functions -------------------------------------
    def suff_stats(self, x):
        return (np.asarray(x, dtype=float),)

    def log_base_measure(self, x):
        return -gammaln(np.asarray(x, dtype=float) + 1.0)

    def log_partition(self, nat):
        return np.exp(self._eta(nat))

    def mean_params(self, nat):
        return (np.exp(self._eta(nat)),)

    def expected_log_base_measure(self, nat):
        return -poisson_expected_log_factorial(np.exp(self._eta(nat)))

    def entropy(self, nat):
        # direct -sum pmf log pmf: the closed form r(1 - log r) + E[log x!] cancels
        # two numbers of size r log r for large r
        return poisson_entropy(np.exp(self._eta(nat)))

    def kl(self, nat1, nat2):
        e1, e2 = self._eta(nat1), self._eta(nat2)
        r1, r2 = np.exp(e1), np.exp(e2)
        return r1 * (e1 - e2) - r1 + r2

    def logpdf(self, x, nat):
        x = np.asarray(x, dtype=float)
        eta = self._eta(nat)
        ok = (x >= 0) & (x == np.round(x))
        xc = np.maximum(x, 0.0)
        return np.where(ok, xc * eta - np.exp(eta) - gammaln(xc + 1.0), -np.inf)

    def sample(self, nat, rng=None, size=None):
        r = np.exp(self._eta(nat))
        return get_rng(rng).poisson(r, size=draw_shape(size, r.shape))

    def mean(self, nat):
        return np.exp(self._eta(nat))

    def var(self, nat):
        return np.exp(self._eta(nat))

    def mode(self, nat):
        return np.floor(np.exp(self._eta(nat)))

    def to_scipy(self, nat):
        r = np.exp(self._eta(nat))
        return frozen(r.shape, lambda i: stats.poisson(r[i]))
