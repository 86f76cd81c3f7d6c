"""Factors whose random parent is a Gamma rate: Gamma, Exponential and Poisson
children (docs/math.md §3.2). The rate's moments are (E[log b], E[b])."""
from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from ...predictive import beta_prime, lomax, negative_binomial
from ..plates import wsum
from .base import Conditional


class GammaFactor(Conditional):
    """x ~ Gamma(shape a (fixed), rate b); message to b in (log b, b): (a, -E[x])."""

    closed_form_elbo = True   # <E eta, T(x)> - E[A] in x's own family, log h = 0

    def __init__(self, node, parents, slots, shape):
        self.shape = np.asarray(shape, dtype=float)
        super().__init__(node, parents, slots)

    def fixed_plates(self):
        return np.shape(self.shape)

    def prior_natural(self, u):
        (_, b), = u
        return (self.shape - 1.0 + 0.0 * b, -b + 0.0 * self.shape)

    def expected_log_partition(self, u):
        (lb, _), = u
        return gammaln(self.shape) - self.shape * lb

    def message(self, i, x, u, w, target):
        _, x2 = x.moments
        kw = dict(target_plates=target, full_plates=x.plates)
        return (wsum(w, self.shape, **kw), -wsum(w, x2, **kw))

    def predictive(self, q, plates, ctx):
        """Gamma(k, r) with r ~ Gamma(a, b): beta-prime(k, a, scale b)."""
        if q[0].kind != "q":
            return super().predictive(q, plates, ctx)
        p = q[0].params
        return beta_prime(self.shape, p["shape"], p["rate"], plates)


class ExponentialFactor(Conditional):
    """x ~ Exponential(rate); T(x) = (x,), lam = (-rate,)."""

    def prior_natural(self, u):
        (_, b), = u
        return (-b,)

    def expected_log_partition(self, u):
        (lb, _), = u
        return -lb

    def message(self, i, x, u, w, target):
        x1, = x.moments
        kw = dict(target_plates=target, full_plates=x.plates)
        return (wsum(w, **kw), -wsum(w, x1, **kw))

    def predictive(self, q, plates, ctx):
        """Exponential(r) with r ~ Gamma(a, b): Lomax(a, scale b)."""
        if q[0].kind != "q":
            return super().predictive(q, plates, ctx)
        p = q[0].params
        return lomax(p["shape"], p["rate"], plates)


class PoissonFactor(Conditional):
    """x ~ Poisson(rate); T(x) = (x,), lam = (log rate,), A = rate."""

    def prior_natural(self, u):
        (lb, _), = u
        return (lb,)

    def expected_log_partition(self, u):
        (_, b), = u
        return b

    def message(self, i, x, u, w, target):
        x1, = x.moments
        kw = dict(target_plates=target, full_plates=x.plates)
        return (wsum(w, x1, **kw), -wsum(w, **kw))

    def predictive(self, q, plates, ctx):
        """Poisson(r) with r ~ Gamma(a, b): negative binomial (n = a, p = b / (b + 1))."""
        if q[0].kind != "q":
            return super().predictive(q, plates, ctx)
        p = q[0].params
        return negative_binomial(p["shape"], p["rate"], plates)
