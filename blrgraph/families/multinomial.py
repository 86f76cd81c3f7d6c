"""Multinomial family with a fixed number of trials n (kept on the instance).

    Mult(x | n, pi) = n! / prod_k x_k! prod_k pi_k^{x_k},   x_k >= 0 integers, sum_k x_k = n

Exponential-family form (docs/math.md §2.13): T(x) = (x,) (the count vector),
lam = (log pi,) (K overcomplete log-potentials, pi = softmax(lam)),
h(x) = n! / prod_k x_k! (not constant),

    A(lam) = n log sum_k e^{lam_k},   mu = (n pi,),
    H = -n sum_k pi_k log pi_k - E[log h],
    E[log h] = log n! - sum_k E[log x_k!],  with x_k ~ Bin(n, pi_k) marginally
               (finite sums, no enumeration of count vectors),
    KL(pi1 || pi2) = n sum_k pi1_k log(pi1_k / pi2_k)        (same n).

``n`` broadcasts against the plates (not the category axis).  Mean n pi,
variance n pi (1 - pi).  Mode: the count vector maximising the pmf, found
exactly by starting from floor(n pi) (a lower bound of the mode) and adding the
remaining units greedily by the largest marginal gain log pi_k - log(x_k + 1)
(the log pmf is separable and concave in the counts).

Reference: Johnson, Kotz & Balakrishnan, *Discrete Multivariate
Distributions* (1997), ch. 35; Finucan, "The mode of a multinomial
distribution", Biometrika 51 (1964).
"""
from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import entr, gammaln, log_softmax, logsumexp, rel_entr, softmax

from .base import ExponentialFamily, per_entry, plates_of
from ._scalar_helpers import (as_nat, binomial_expected_log_factorial, check_count, check_simplex,
                              draw_shape, frozen, get_rng, split_count_params, xmul)


class Multinomial(ExponentialFamily):
    """Multinomial(n, p) with n fixed: ``Multinomial(n)``; p of shape plates + (K,).

    ``validate_params`` / ``natural_from_params`` accept either ``(n, p)`` (n must
    then equal the instance's n) or just ``(p,)``."""

    name = "Multinomial"
    discrete = True
    natural_unconstrained = True
    param_names = ("n", "p")
    event_ndims = (1,)
    value_ndim = 1

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        n = per_entry(self.n, x.shape[:-1], components)
        bad = np.any((x < 0) | (x != np.round(x)), axis=-1) | (x.sum(axis=-1) != n)
        return bad, "non-negative integer count vectors summing to n"

    def placeholder(self, event_shape):
        return np.zeros(event_shape)   # (masked: its count is never compared with n)

    def __init__(self, n):
        self.n = check_count(self.name, "n", n, None).astype(np.int64)
        self._nf = self.n.astype(float)

    def __repr__(self):
        return f"Multinomial(n={self.n.tolist()!r})"

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, *params, where=None):
        p = split_count_params(self.name, params, self.n, where, validate=True)
        p = check_simplex(self.name, "p", p, where, tol=1e-8)
        return (self._nf.copy(), p) if len(params) == 2 else (p,)

    def natural_from_params(self, *params):
        p = split_count_params(self.name, params, self.n, None, validate=False)
        with np.errstate(divide="ignore"):
            return (np.log(np.asarray(p, dtype=float)),)

    def params_from_natural(self, nat):
        p = self._p(nat)
        plates = np.broadcast_shapes(p.shape[:-1], self.n.shape)
        return {"n": np.broadcast_to(self.n, plates).copy(),
                "p": np.broadcast_to(p, plates + p.shape[-1:]).copy()}

    def _eta(self, nat):
        return as_nat(nat, 1)[0]

    def _p(self, nat):
        return softmax(self._eta(nat), axis=-1)

    def _plates(self, nat):
        return np.broadcast_shapes(plates_of(as_nat(nat, 1), self.event_ndims), self.n.shape)

    # ---- exponential-family functions -------------------------------------
    def suff_stats(self, x):
        return (np.asarray(x, dtype=float),)

    def log_base_measure(self, x):
        x = np.asarray(x, dtype=float)
        return gammaln(self._nf + 1.0) - gammaln(x + 1.0).sum(axis=-1)

    def log_partition(self, nat):
        return self._nf * logsumexp(self._eta(nat), axis=-1)

    def mean_params(self, nat):
        return (self._nf[..., None] * self._p(nat),)

    def expected_log_base_measure(self, nat):
        logp = log_softmax(self._eta(nat), axis=-1)
        with np.errstate(divide="ignore"):
            logq = np.log1p(-np.exp(logp))
        n = self._nf
        return gammaln(n + 1.0) - binomial_expected_log_factorial(n[..., None], logp, logq).sum(axis=-1)

    def entropy(self, nat):
        return (self._nf * entr(self._p(nat)).sum(axis=-1)
                - self.expected_log_base_measure(nat))

    def kl(self, nat1, nat2):
        return self._nf * rel_entr(self._p(nat1), self._p(nat2)).sum(axis=-1)

    def logpdf(self, x, nat):
        x = np.asarray(x, dtype=float)
        logp = log_softmax(self._eta(nat), axis=-1)
        n = self._nf
        ok = np.all((x >= 0) & (x == np.round(x)), axis=-1) & (x.sum(axis=-1) == n)
        xc = np.maximum(x, 0.0)
        val = gammaln(n + 1.0) - gammaln(xc + 1.0).sum(axis=-1) + xmul(xc, logp).sum(axis=-1)
        return np.where(ok, val, -np.inf)

    def sample(self, nat, rng=None, size=None):
        p = self._p(nat)
        shape = draw_shape(size, self._plates(nat))
        return get_rng(rng).multinomial(np.broadcast_to(self.n, shape),
                                        np.broadcast_to(p, shape + p.shape[-1:]))

    def mean(self, nat):
        return self.mean_params(nat)[0]

    def var(self, nat):
        p = self._p(nat)
        return self._nf[..., None] * p * (1.0 - p)

    def mode(self, nat):
        logp = log_softmax(self._eta(nat), axis=-1)
        plates = self._plates(nat)
        K = logp.shape[-1]
        logp = np.broadcast_to(logp, plates + (K,))
        n = np.broadcast_to(self._nf, plates)
        # shrink by 1e-12 so that rounding can never push floor() above the true value
        x = np.floor(n[..., None] * np.exp(logp) * (1.0 - 1e-12))
        left = n - x.sum(axis=-1)
        # at most K - 1 greedy steps, each vectorised over all plate entries
        while np.any(left > 0):
            gain = logp - np.log(x + 1.0)
            k = np.argmax(gain, axis=-1)
            add = (k[..., None] == np.arange(K)) & (left > 0)[..., None]
            x = x + add
            left = left - add.any(axis=-1)
        return x

    def to_scipy(self, nat):
        plates = self._plates(nat)
        p = self._p(nat)
        p = np.broadcast_to(p, plates + p.shape[-1:])
        n = np.broadcast_to(self.n, plates)
        return frozen(plates, lambda i: stats.multinomial(int(n[i]), p[i]))
