"""Beta family.

    Beta(x | a, b) = x^{a-1} (1 - x)^{b-1} / B(a, b),   0 < x < 1, a > 0, b > 0

Exponential-family form (docs/math.md §2.8): T(x) = (log x, log(1 - x)),
lam = (a - 1, b - 1), h = 1 (w.r.t. Lebesgue measure on (0, 1)),

    A(lam) = log B(a, b) = log Gamma(a) + log Gamma(b) - log Gamma(a + b),
    mu = (psi(a) - psi(a + b), psi(b) - psi(a + b)),
    H = log B(a, b) - (a - 1) psi(a) - (b - 1) psi(b) + (a + b - 2) psi(a + b),
    KL = log B(a2, b2) - log B(a1, b1) + (a1 - a2) psi(a1) + (b1 - b2) psi(b1)
         + (a2 - a1 + b2 - b1) psi(a1 + b1).

Mean a/(a+b), variance ab/((a+b)^2 (a+b+1)).  Mode (a-1)/(a+b-2) for a, b > 1
(docs/math.md §5); on the boundary it is clamped: 0 if a <= 1 < b, 1 if b <= 1 < a,
and, when a, b <= 1, the end where the density diverges faster: 0 if a < b,
1 if a > b, 1/2 if a == b (for the uniform a = b = 1 every point is a mode).
This is the K = 2 case of the Dirichlet rule.

Reference: Johnson, Kotz & Balakrishnan, *Continuous Univariate
Distributions* vol. 2 (1995), ch. 25; Bishop (2006), §2.1.1.
"""
from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import betaln, digamma

from .base import ExponentialFamily
from ._scalar_helpers import (as_nat, broadcast_copies, check_positive, draw_shape, frozen, get_rng,
                              simplex_mode)


class Beta(ExponentialFamily):
    """Beta(a, b) on (0, 1)."""

    name = "Beta"
    param_names = ("a", "b")
    event_ndims = (0, 0)
    value_ndim = 0

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        return (x <= 0) | (x >= 1), "values strictly between 0 and 1"

    def placeholder(self, event_shape):
        return np.full(event_shape, 0.5)

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, a, b, where=None):
        return (check_positive(self.name, "a", a, where), check_positive(self.name, "b", b, where))

    def natural_from_params(self, a, b):
        a, b = broadcast_copies(a, b)
        return (a - 1.0, b - 1.0)

    def params_from_natural(self, nat):
        a, b = broadcast_copies(*self._ab(nat))
        return {"a": a, "b": b}

    def _ab(self, nat):
        l1, l2 = as_nat(nat, 2)
        return l1 + 1.0, l2 + 1.0

    # ---- exponential-family functions -------------------------------------
    def suff_stats(self, x):
        x = np.asarray(x, dtype=float)
        return (np.log(x), np.log1p(-x))

    def log_partition(self, nat):
        return betaln(*self._ab(nat))

    def mean_params(self, nat):
        a, b = self._ab(nat)
        dab = digamma(a + b)
        return (digamma(a) - dab, digamma(b) - dab)

    def entropy(self, nat):
        a, b = self._ab(nat)
        return (betaln(a, b) - (a - 1.0) * digamma(a) - (b - 1.0) * digamma(b)
                + (a + b - 2.0) * digamma(a + b))

    def kl(self, nat1, nat2):
        a1, b1 = self._ab(nat1)
        a2, b2 = self._ab(nat2)
        return (betaln(a2, b2) - betaln(a1, b1) + (a1 - a2) * digamma(a1) + (b1 - b2) * digamma(b1)
                + (a2 - a1 + b2 - b1) * digamma(a1 + b1))

    def sample(self, nat, rng=None, size=None):
        a, b = np.broadcast_arrays(*self._ab(nat))
        return get_rng(rng).beta(a, b, size=draw_shape(size, a.shape))

    def mean(self, nat):
        a, b = self._ab(nat)
        return a / (a + b)

    def var(self, nat):
        a, b = self._ab(nat)
        s = a + b
        return a * b / (s * s * (s + 1.0))

    def mode(self, nat):
        a, b = np.broadcast_arrays(*self._ab(nat))
        return simplex_mode(np.stack([a, b], axis=-1))[..., 0]

    def to_scipy(self, nat):
        a, b = np.broadcast_arrays(*self._ab(nat))
        return frozen(a.shape, lambda i: stats.beta(a[i], b[i]))
