"""Factors with a Beta parent p: Bernoulli and Binomial children (docs/math.md §3.2).
The parent's moments are (E[log p], E[log(1-p)])."""
from __future__ import annotations

import numpy as np

from ...predictive import beta_binomial
from ..plates import wsum
from .base import Conditional


class BernoulliFactor(Conditional):
    """x ~ Bernoulli(p): lam = (logit p,), A = -log(1-p)."""

    def prior_natural(self, u):
        (lp, l1p), = u
        return (lp - l1p,)

    def expected_log_partition(self, u):
        (_, l1p), = u
        return -l1p

    def message(self, i, x, u, w, target):
        x1, = x.moments
        kw = dict(target_plates=target, full_plates=x.plates)
        return (wsum(w, x1, **kw), wsum(w, 1.0 - x1, **kw))

    def predictive(self, q, plates, ctx):
        """Bernoulli(p) with p ~ Beta(a, b): Beta-Binomial(1, a, b), i.e. Bernoulli(a/(a+b))."""
        if q[0].kind != "q":
            return super().predictive(q, plates, ctx)
        p = q[0].params
        return beta_binomial(1.0, p["a"], p["b"], plates)


class BinomialFactor(Conditional):
    """x ~ Binomial(n fixed, p): lam = (logit p,), A = -n log(1-p), h = C(n, x)."""

    def __init__(self, node, parents, slots, n):
        self.n = np.asarray(n, dtype=float)
        super().__init__(node, parents, slots)

    def fixed_plates(self):
        return np.shape(self.n)

    def prior_natural(self, u):
        (lp, l1p), = u
        return (lp - l1p + 0.0 * self.n,)

    def expected_log_partition(self, u):
        (_, l1p), = u
        return -self.n * l1p

    def message(self, i, x, u, w, target):
        x1, = x.moments
        kw = dict(target_plates=target, full_plates=x.plates)
        return (wsum(w, x1, **kw), wsum(w, self.n - x1, **kw))

    def predictive(self, q, plates, ctx):
        """Binomial(n, p) with p ~ Beta(a, b): Beta-Binomial(n, a, b)."""
        if q[0].kind != "q":
            return super().predictive(q, plates, ctx)
        p = q[0].params
        return beta_binomial(self.n, p["a"], p["b"], plates)
