"""Categorical family over K labels, with overcomplete log-potentials.

    Cat(x | pi) = pi_x,   x in {0, ..., K-1}, pi on the simplex (last axis)

Exponential-family form (docs/math.md §2.11): T(x) = (onehot_K(x),),
lam = (log pi,) (K overcomplete log-potentials, pi = softmax(lam); adding a
constant to lam changes nothing), h = 1,

    A(lam) = log sum_k e^{lam_k},   mu = (softmax(lam),),
    H = -sum_k pi_k log pi_k,   KL(pi1 || pi2) = sum_k pi1_k log(pi1_k / pi2_k).

A value x is an integer label (value_ndim 0).  Zero probabilities are allowed
(lam_k = -inf) and handled with 0 log 0 = 0.  ``mean``, ``var`` and ``mode``
refer to the one-hot representation: mean = pi, var = pi (1 - pi), mode = the
one-hot vector of argmax pi (first index on ties), all of shape plates + (K,).

``suff_stats`` needs the number of categories: pass it to the constructor
(``Categorical(K)``) or as ``suff_stats(x, K=...)``.  Every method taking
``nat`` reads K from the last axis of lam.

Reference: Bishop (2006), §2.2; Wainwright & Jordan (2008), Example 3.5.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats
from scipy.special import entr, log_softmax, rel_entr, softmax

from .. import rowsplit
from .base import _F8, ExponentialFamily, _fsum, einsum
from ._scalar_helpers import as_nat, check_simplex, draw_shape, frozen, get_rng


def _rowmax(a):
    """max over the last axis; for few categories a loop over columns (K passes of
    np.maximum) is several times faster than numpy's reduction along a short axis."""
    K = a.shape[-1]
    if K == 0 or K > 16:
        return np.max(a, axis=-1)
    m = a[..., 0].copy()
    for k in range(1, K):
        np.maximum(m, a[..., k], out=m)
    return m


def _labels(x, K, who):
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        xf = np.asarray(x, dtype=float)
        if np.any(xf != np.round(xf)):
            raise ValueError(f"{who}: labels must be integers in 0..K-1, got non-integer values")
        x = xf.astype(np.int64)
    if np.any((x < 0) | (x >= K)):
        raise ValueError(f"{who}: labels must lie in 0..{K - 1} (K = {K}), "
                         f"got values in [{x.min()}, {x.max()}]")
    return x


class Categorical(ExponentialFamily):
    """Categorical(p), p of shape plates + (K,); values are integer labels."""

    name = "Categorical"
    discrete = True
    natural_unconstrained = True
    param_names = ("p",)
    event_ndims = (1,)
    value_ndim = 0
    dense_stats = False  # T(x) is one-hot: factors use the labels (gathers), not T
    is_label = True

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        K = self.K if categories is None else int(categories)
        return (x < 0) | (x != np.round(x)) | (x >= K), f"integer categories 0..{K - 1}"

    def placeholder(self, event_shape):
        return np.zeros(event_shape)

    def __init__(self, K=None):
        self.K = None if K is None else int(K)

    def __repr__(self):
        return "Categorical()" if self.K is None else f"Categorical(K={self.K})"

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, p, where=None):
        return (check_simplex(self.name, "p", p, where, tol=1e-8),)

    def natural_from_params(self, p):
        with np.errstate(divide="ignore"):
            return (np.log(np.asarray(p, dtype=float)),)

    def params_from_natural(self, nat):
        return {"p": self._p(nat)}

    def _eta(self, nat):
        return as_nat(nat, 1)[0]

    def _p(self, nat):
        return self._lse_and_p(nat)[1]

    def _lse_and_p(self, nat):
        """(log-sum-exp of lam, softmax(lam)) of ``nat``; the last result is kept (keyed
        on the array's identity: natural parameters are replaced, never modified in
        place), so the moments and the entropy of one q share one softmax."""
        eta = self._eta(nat)
        memo = getattr(self, "_memo", None)
        if memo is not None and memo[0] is eta:
            return memo[1], memo[2]
        blocks = rowsplit.active(eta.shape[0]) if eta.ndim == 2 else None
        if blocks is None:
            lse, p = self._softmax(eta)
        else:   # rows over the cores (rowsplit.py): each block with its own shift
            lse, p = np.empty(eta.shape[:-1]), np.empty(eta.shape)

            def block(a, b):
                lse[a:b], p[a:b] = self._softmax(eta[a:b])
            blocks.run(block)
        self._memo = (eta, lse, p)
        return lse, p

    def keep_softmax(self, eta, lse, p):
        """Remember (lse, p) as the log-sum-exps and softmax of the natural parameter
        array ``eta`` (computed elsewhere: inference/zstep.py's pass), so that the
        moments and the entropy of the q with that ``eta`` read them."""
        self._memo = (eta, lse, p)

    @staticmethod
    def _softmax(eta):
        """(log sum_k e^lam_k, p) with one shift for the whole array (a contiguous max)
        instead of a max per row; rows lying so far below the shift that their sum
        underflows are redone with their own max. One entries x K array is allocated."""
        if type(eta) is not np.ndarray or eta.dtype != _F8:
            eta = np.asarray(eta, dtype=float)
        if eta.size == 0:
            return np.zeros(eta.shape[:-1]), np.zeros(eta.shape)
        c = float(np.maximum.reduce(eta, axis=None))
        safe = math.isfinite(c)   # (then p <= 1 and, with no low row, s >= 1e-280: p / s is safe)
        if not safe:
            c = 0.0
        p = np.subtract(eta, c)
        np.exp(p, out=p)
        s = einsum("...k->...", p)
        if type(s) is not np.ndarray:   # (one row: a number)
            s = np.asarray(s)
        if np.fmin.reduce(s, axis=None) < 1e-280:   # far below the shift: exact per-row lse there
            low = s < 1e-280
            safe = False
            sub = eta[low]
            m = _rowmax(sub)
            m[~np.isfinite(m)] = 0.0
            e = np.exp(sub - m[..., None])
            se = einsum("...k->...", e)
            p[low] = e
            s[low] = se
            lse = np.asarray(c + np.log(np.where(low, 1.0, s)))
            with np.errstate(divide="ignore"):   # a row of -inf only: no category possible
                lse[low] = m + np.log(se)
        elif safe and s.ndim:   # (the common case: s is not needed past p, its log is lse)
            p /= s[..., None]
            lse = np.log(s, s)
            lse += c
            return lse, p
        else:
            lse = c + np.log(s)
        with np.errstate(invalid="ignore", divide="ignore"):
            p /= s[..., None]
        return lse, p

    # ---- exponential-family functions -------------------------------------
    def suff_stats(self, x, K=None):
        K = self.K if K is None else int(K)
        if K is None:
            raise ValueError("Categorical.suff_stats: the number of categories K is unknown; "
                             "construct Categorical(K) or call suff_stats(x, K=K)")
        x = _labels(x, K, "Categorical.suff_stats")
        return ((x[..., None] == np.arange(K)).astype(float),)

    def log_partition(self, nat):
        return self._lse_and_p(nat)[0]   # (the softmax's, kept with the moments)

    def log_partition_total(self, nat):
        """A(lam) summed over the plate entries, a float (the compiled sweep's ELBO term:
        ``_fsum(log_partition(nat))``, the log-sum-exps kept with the moments)."""
        return _fsum(self._lse_and_p(nat)[0])

    def mean_params(self, nat):
        return (self._p(nat),)

    def entropy(self, nat):
        """H = log sum_k e^lam_k - sum_k p_k lam_k (no entries x K log p array); a
        category with lam_k = -inf (p_k = 0) contributes 0 log 0 = 0."""
        lse, p = self._lse_and_p(nat)
        eta = self._eta(nat)
        h = lse - einsum("...k,...k->...", p, eta)
        if not np.isfinite(h).all():
            with np.errstate(invalid="ignore"):
                logp = eta - lse[..., None]
            h = -einsum("...k,...k->...", p, np.where(p > 0, logp, 0.0))
        return h

    def kl(self, nat1, nat2):
        return rel_entr(self._p(nat1), self._p(nat2)).sum(axis=-1)

    def logpdf(self, x, nat):
        logp = log_softmax(self._eta(nat), axis=-1)
        K = logp.shape[-1]
        x = _labels(x, K, "Categorical.logpdf")
        shape = np.broadcast_shapes(x.shape, logp.shape[:-1])
        logp = np.broadcast_to(logp, shape + (K,))
        idx = np.broadcast_to(x, shape)[..., None]
        return np.take_along_axis(logp, idx, axis=-1)[..., 0]

    def sample(self, nat, rng=None, size=None):
        """Inverse-CDF draws; a zero-probability label is never returned."""
        p = self._p(nat)
        cdf = np.cumsum(p, axis=-1)
        u = get_rng(rng).random(draw_shape(size, p.shape[:-1])) * cdf[..., -1]
        return (cdf <= u[..., None]).sum(axis=-1).astype(np.int64)

    def mean(self, nat):
        return self._p(nat)

    def var(self, nat):
        p = self._p(nat)
        return p * (1.0 - p)

    def mode(self, nat):
        eta = self._eta(nat)
        K = eta.shape[-1]
        return (np.argmax(eta, axis=-1)[..., None] == np.arange(K)).astype(float)

    def point_value(self, nat):
        """The most probable label (values are labels; ``mode`` is its one-hot vector)."""
        return np.argmax(self._eta(nat), axis=-1)

    def point_stats(self, nat):
        return (self.mode(nat),)

    def to_scipy(self, nat):
        """Frozen ``scipy.stats.rv_discrete`` on the labels 0..K-1."""
        p = self._p(nat)
        ks = np.arange(p.shape[-1])
        return frozen(p.shape[:-1], lambda i: stats.rv_discrete(values=(ks, p[i]))())
