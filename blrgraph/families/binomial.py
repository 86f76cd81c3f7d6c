"""Binomial family with a fixed number of trials n (kept on the instance).

    Bin(x | n, p) = C(n, x) p^x (1 - p)^{n-x},   x in {0, ..., n}, 0 <= p <= 1

Exponential-family form (docs/math.md §2.12): T(x) = (x,), lam = (logit p,),
h(x) = C(n, x) (not constant),

    A(lam) = n log(1 + e^lam),   mu = (n p,),
    H = n [-p log p - (1 - p) log(1 - p)] - E[log C(n, x)],
    E[log h] = log n! - E[log x!] - E[log (n - x)!]     (finite sums over x),
    KL(p1 || p2) = n KL_Bernoulli(p1 || p2)              (same n).

``n`` is an integer array that broadcasts against the plates of ``lam``.  Mean
n p, variance n p (1 - p), mode floor((n + 1) p) (clamped to n).

Reference: Johnson, Kemp & Kotz, *Univariate Discrete Distributions*, 3rd ed.
(2005), ch. 3; Bishop (2006), §2.1.
"""
from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import expit, gammaln, log_expit, logit, rel_entr

from .base import ExponentialFamily, per_entry, plates_of
from ._scalar_helpers import (as_nat, binomial_entropy, binomial_expected_log_factorial,
                              binomial_logpmf, check_count, check_probability, draw_shape, frozen,
                              get_rng, split_count_params)


class Binomial(ExponentialFamily):
    """Binomial(n, p) with n fixed: ``Binomial(n)``; the natural parameter is logit p.

    ``validate_params`` / ``natural_from_params`` accept either ``(n, p)`` (n must
    then equal the instance's n) or just ``(p,)``."""

    name = "Binomial"
    discrete = True
    natural_unconstrained = True
    param_names = ("n", "p")
    event_ndims = (0,)
    value_ndim = 0

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        n = per_entry(self.n, x.shape, components)
        return (x < 0) | (x != np.round(x)) | (x > n), "integer counts between 0 and n"

    def placeholder(self, event_shape):
        return np.zeros(event_shape)

    def __init__(self, n):
        self.n = check_count(self.name, "n", n, None).astype(np.int64)
        self._nf = self.n.astype(float)

    def __repr__(self):
        return f"Binomial(n={self.n.tolist()!r})"

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, *params, where=None):
        p = split_count_params(self.name, params, self.n, where, validate=True)
        p = check_probability(self.name, "p", p, where)
        return (self._nf.copy(), p) if len(params) == 2 else (p,)

    def natural_from_params(self, *params):
        p = split_count_params(self.name, params, self.n, None, validate=False)
        return (np.asarray(logit(np.asarray(p, dtype=float)), dtype=float),)

    def params_from_natural(self, nat):
        eta = self._eta(nat)
        shape = np.broadcast_shapes(eta.shape, self.n.shape)
        return {"n": np.broadcast_to(self.n, shape).copy(),
                "p": np.broadcast_to(expit(eta), shape).copy()}

    def _eta(self, nat):
        return as_nat(nat, 1)[0]

    def _plates(self, nat):
        return np.broadcast_shapes(plates_of(as_nat(nat, 1), self.event_ndims), self.n.shape)

    # ---- exponential-family functions -------------------------------------
    def suff_stats(self, x):
        return (np.asarray(x, dtype=float),)

    def log_base_measure(self, x):
        x = np.asarray(x, dtype=float)
        n = self._nf
        return gammaln(n + 1.0) - gammaln(x + 1.0) - gammaln(n - x + 1.0)

    def log_partition(self, nat):
        return self._nf * np.logaddexp(0.0, self._eta(nat))

    def mean_params(self, nat):
        return (self._nf * expit(self._eta(nat)),)

    def expected_log_base_measure(self, nat):
        eta = self._eta(nat)
        n = self._nf
        return (gammaln(n + 1.0) - binomial_expected_log_factorial(n, log_expit(eta), log_expit(-eta))
                - binomial_expected_log_factorial(n, log_expit(-eta), log_expit(eta)))

    def entropy(self, nat):
        # direct -sum pmf log pmf (equal to n H_Bernoulli - E[log h] without its cancellation)
        eta = self._eta(nat)
        return binomial_entropy(self._nf, log_expit(eta), log_expit(-eta))

    def kl(self, nat1, nat2):
        e1, e2 = self._eta(nat1), self._eta(nat2)
        return self._nf * (rel_entr(expit(e1), expit(e2)) + rel_entr(expit(-e1), expit(-e2)))

    def logpdf(self, x, nat):
        x = np.asarray(x, dtype=float)
        eta = self._eta(nat)
        n = self._nf
        ok = (x >= 0) & (x <= n) & (x == np.round(x))
        xc = np.clip(x, 0.0, n)
        return np.where(ok, binomial_logpmf(xc, n, log_expit(eta), log_expit(-eta)), -np.inf)

    def sample(self, nat, rng=None, size=None):
        shape = draw_shape(size, self._plates(nat))
        return get_rng(rng).binomial(self.n, expit(self._eta(nat)), size=shape)

    def mean(self, nat):
        return self.mean_params(nat)[0]

    def var(self, nat):
        eta = self._eta(nat)
        return self._nf * expit(eta) * expit(-eta)

    def mode(self, nat):
        n = self._nf
        return np.minimum(np.floor((n + 1.0) * expit(self._eta(nat))), n)

    def to_scipy(self, nat):
        plates = self._plates(nat)
        p = np.broadcast_to(expit(self._eta(nat)), plates)
        n = np.broadcast_to(self.n, plates)
        return frozen(plates, lambda i: stats.binom(int(n[i]), p[i]))
