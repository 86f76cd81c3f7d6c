"""Bernoulli family.

    Bern(x | p) = p^x (1 - p)^{1-x},   x in {0, 1}, 0 <= p <= 1

Exponential-family form (docs/math.md §2.10): T(x) = (x,), lam = (logit p,), h = 1,

    A(lam) = log(1 + e^lam) = -log(1 - p),   mu = (p,),
    H = -p log p - (1 - p) log(1 - p),
    KL(p1 || p2) = p1 log(p1/p2) + (1 - p1) log((1 - p1)/(1 - p2)).

p = 0 or 1 is allowed (lam = -inf / +inf); entropy, KL and logpdf are then
evaluated with 0 log 0 = 0.  Mean p, variance p(1 - p), mode 1 if p > 1/2 else 0.

Reference: Bishop (2006), §2.1; Wainwright & Jordan (2008), Example 3.1.
"""
from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import entr, expit, log_expit, logit, rel_entr

from .base import ExponentialFamily
from ._scalar_helpers import as_nat, check_probability, draw_shape, frozen, get_rng


class Bernoulli(ExponentialFamily):
    """Bernoulli(p), p = P(x = 1)."""

    name = "Bernoulli"
    discrete = True
    natural_unconstrained = True
    param_names = ("p",)
    event_ndims = (0,)
    value_ndim = 0

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        return (x != 0) & (x != 1), "0/1 values"

    def placeholder(self, event_shape):
        return np.zeros(event_shape)

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, p, where=None):
        return (check_probability(self.name, "p", p, where),)

    def natural_from_params(self, p):
        return (np.asarray(logit(np.asarray(p, dtype=float)), dtype=float),)

    def params_from_natural(self, nat):
        return {"p": self._p(nat)}

    def _eta(self, nat):
        return as_nat(nat, 1)[0]

    def _p(self, nat):
        return np.asarray(expit(self._eta(nat)), dtype=float)

    # ---- exponential-family functions -------------------------------------
    def suff_stats(self, x):
        return (np.asarray(x, dtype=float),)

    def log_partition(self, nat):
        return np.logaddexp(0.0, self._eta(nat))

    def mean_params(self, nat):
        return (self._p(nat),)

    def entropy(self, nat):
        eta = self._eta(nat)
        return entr(expit(eta)) + entr(expit(-eta))

    def kl(self, nat1, nat2):
        e1, e2 = self._eta(nat1), self._eta(nat2)
        return rel_entr(expit(e1), expit(e2)) + rel_entr(expit(-e1), expit(-e2))

    def logpdf(self, x, nat):
        x = np.asarray(x, dtype=float)
        eta = self._eta(nat)
        return np.where(x == 1, log_expit(eta), np.where(x == 0, log_expit(-eta), -np.inf))

    def sample(self, nat, rng=None, size=None):
        p = self._p(nat)
        return (get_rng(rng).random(draw_shape(size, p.shape)) < p).astype(np.int64)

    def mean(self, nat):
        return self._p(nat)

    def var(self, nat):
        eta = self._eta(nat)
        return expit(eta) * expit(-eta)

    def mode(self, nat):
        return (self._eta(nat) > 0).astype(float)

    def to_scipy(self, nat):
        p = self._p(nat)
        return frozen(p.shape, lambda i: stats.bernoulli(p[i]))
