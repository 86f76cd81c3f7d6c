"""Dirichlet family on the probability simplex (K categories on the last axis).

    Dir(x | alpha) = Gamma(alpha_0) / prod_k Gamma(alpha_k) prod_k x_k^{alpha_k - 1},
    alpha_k > 0, alpha_0 = sum_k alpha_k, x on the simplex

Exponential-family form (docs/math.md §2.9): T(x) = (log x,) (a K-vector),
lam = (alpha - 1,), h = 1 (w.r.t. Lebesgue measure on the simplex),

    A(lam) = sum_k log Gamma(alpha_k) - log Gamma(alpha_0) =: log B(alpha),
    mu_k = E[log x_k] = psi(alpha_k) - psi(alpha_0),
    H = log B(alpha) + (alpha_0 - K) psi(alpha_0) - sum_k (alpha_k - 1) psi(alpha_k),
    KL(Dir(a) || Dir(b)) = log Gamma(a_0) - sum log Gamma(a_k) - log Gamma(b_0)
                           + sum log Gamma(b_k) + sum_k (a_k - b_k)(psi(a_k) - psi(a_0)).

E[x_k] = alpha_k/alpha_0, Var[x_k] = alpha_k (alpha_0 - alpha_k)/(alpha_0^2 (alpha_0 + 1)).
Mode (alpha_k - 1)/(alpha_0 - K) when every alpha_k > 1 (docs/math.md §5); otherwise
clamped: components with alpha_k <= 1 are 0 and the others are proportional to
alpha_k - 1; if no alpha_k exceeds 1 the mass goes to the largest alpha_k
(split equally on ties, so alpha = 1 gives the centre of the simplex).

Reference: Kotz, Balakrishnan & Johnson, *Continuous Multivariate
Distributions* vol. 1 (2000), ch. 49; Bishop (2006), §2.2.1; Minka,
"Estimating a Dirichlet distribution" (2000).
"""
from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import digamma, gammaln, log_softmax

from .base import ExponentialFamily, UnpackMemo, _fsum
from ._scalar_helpers import (as_nat, check_positive, draw_shape, frozen, get_rng, label,
                              simplex_mode)


class Dirichlet(UnpackMemo, ExponentialFamily):
    """Dirichlet(alpha), alpha of shape plates + (K,)."""

    name = "Dirichlet"
    param_names = ("alpha",)
    event_ndims = (1,)
    value_ndim = 1

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        return np.any(x <= 0, axis=-1) | (np.abs(x.sum(-1) - 1) > 1e-8), "points of the open simplex"

    def placeholder(self, event_shape):
        return np.full(event_shape, 1.0 / event_shape[-1])

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, alpha, where=None):
        arr = np.asarray(alpha, dtype=float) if np.ndim(alpha) else None
        if arr is None or arr.shape[-1] < 1:
            raise ValueError(f"{label(self.name, where)}: alpha must have the K concentrations on its "
                             f"last axis (shape (..., K)), got shape {np.shape(alpha)} "
                             f"(pass a vector, e.g. np.ones(K))")
        return (check_positive(self.name, "alpha", alpha, where),)

    def natural_from_params(self, alpha):
        return (np.array(alpha, dtype=float) - 1.0,)

    def params_from_natural(self, nat):
        return {"alpha": self._alpha(nat)}

    def _alpha(self, nat):
        (l1,) = as_nat(nat, 1)
        return l1 + 1.0

    def _alpha_sum(self, nat):
        """(alpha, alpha_0 with its last axis kept) of ``nat``, the last pair kept
        (UnpackMemo: keyed on the array's identity), so that the moments and the
        log-partition of one q share them (a sweep reads both)."""
        return self._unpack(as_nat(nat, 1))

    def _unpack_new(self, nat):
        al = nat[0] + 1.0
        return al, np.add.reduce(al, axis=-1, keepdims=True)

    # ---- exponential-family functions -------------------------------------
    def suff_stats(self, x):
        return (np.log(np.asarray(x, dtype=float)),)

    def log_partition(self, nat):
        al, a0 = self._alpha_sum(nat)
        return np.add.reduce(gammaln(al), axis=-1) - gammaln(a0[..., 0])

    def log_partition_total(self, nat):
        """A(lam) summed over the plate entries, a float (the compiled sweep's ELBO term);
        for one vector of alpha its two pieces as Python floats (the numbers of
        ``_fsum(log_partition(nat))``)."""
        al, a0 = self._alpha_sum(nat)
        if al.ndim == 1:
            return float(np.add.reduce(gammaln(al), axis=None)) - float(gammaln(a0)[0])
        return _fsum(self.log_partition(nat))

    def mean_params(self, nat):
        al, a0 = self._alpha_sum(nat)
        return (digamma(al) - digamma(a0),)

    def entropy(self, nat):
        al = self._alpha(nat)
        a0 = al.sum(axis=-1)
        K = al.shape[-1]
        return (gammaln(al).sum(axis=-1) - gammaln(a0) + (a0 - K) * digamma(a0)
                - ((al - 1.0) * digamma(al)).sum(axis=-1))

    def kl(self, nat1, nat2):
        a, b = np.broadcast_arrays(self._alpha(nat1), self._alpha(nat2))
        a0, b0 = a.sum(axis=-1), b.sum(axis=-1)
        return (gammaln(a0) - gammaln(a).sum(axis=-1) - gammaln(b0) + gammaln(b).sum(axis=-1)
                + ((a - b) * (digamma(a) - digamma(a0)[..., None])).sum(axis=-1))

    def sample(self, nat, rng=None, size=None):
        """Normalised Gamma draws, computed in log space so small alpha does not underflow:
        log G_k = log Ga(alpha_k + 1, 1) + log(U_k)/alpha_k, U_k in (0, 1] (Marsaglia & Tsang 2000)."""
        al = self._alpha(nat)
        rng = get_rng(rng)
        shape = draw_shape(size, al.shape[:-1]) + al.shape[-1:]
        logg = np.log(rng.gamma(al + 1.0, size=shape)) + np.log1p(-rng.random(shape)) / al
        return np.exp(log_softmax(logg, axis=-1))

    def mean(self, nat):
        al = self._alpha(nat)
        return al / al.sum(axis=-1, keepdims=True)

    def var(self, nat):
        al = self._alpha(nat)
        a0 = al.sum(axis=-1, keepdims=True)
        return al * (a0 - al) / (a0 * a0 * (a0 + 1.0))

    def mode(self, nat):
        return simplex_mode(self._alpha(nat))

    def to_scipy(self, nat):
        al = self._alpha(nat)
        return frozen(al.shape[:-1], lambda i: stats.dirichlet(al[i]))
