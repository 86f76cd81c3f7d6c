"""Factors with a Dirichlet parent p: Categorical and Multinomial children
(MATH.md §3.2). The parent's moments are (E[log p],) on the last axis.

Observed labels are never one-hot encoded: E[log p][label] is a gather and
the message to p a bincount, so memory is O(entries x K), not O(entries x V).
"""
from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from ..plates import broadcast_plates, wsum
from .base import Conditional


def _plate_index(plates, out):
    """Broadcast index arrays selecting, for every entry of ``out`` plates, the
    entry of an array with (right-aligned) ``plates``."""
    n = len(out)
    pad = (1,) * (n - len(plates)) + tuple(plates)
    idx = []
    for j in range(n - len(plates), n):
        if pad[j] == 1:
            idx.append(np.zeros((1,) * n, dtype=np.intp))
        else:
            shape = [1] * n
            shape[j] = pad[j]
            idx.append(np.arange(pad[j]).reshape(shape))
    return idx


def gather_last(table, labels):
    """table[..., labels] with the plates of ``table[..., 0]`` and ``labels`` broadcast."""
    tp = table.shape[:-1]
    out = broadcast_plates(tp, np.shape(labels))
    return table[tuple(_plate_index(tp, out)) + (np.asarray(labels, dtype=np.intp),)]


def scatter_last(weights, labels, K, target, full=()):
    """sum over entries of weights * onehot(labels, K), reduced to ``target`` plates."""
    out = broadcast_plates(np.shape(weights) if weights is not None else (), np.shape(labels),
                           tuple(target), tuple(full))
    n = len(out)
    tpad = (1,) * (n - len(target)) + tuple(target)
    flat = np.zeros((1,) * n, dtype=np.intp)
    for j in range(n):
        if tpad[j] != 1:
            shape = [1] * n
            shape[j] = tpad[j]
            flat = flat * tpad[j] + np.arange(tpad[j]).reshape(shape)
    flat = flat * K + np.asarray(labels, dtype=np.intp)
    flat = np.broadcast_to(flat, out)
    w = np.ones(out) if weights is None else np.broadcast_to(np.asarray(weights, dtype=float), out)
    size = int(np.prod(target)) * K
    res = np.bincount(flat.ravel(), weights=w.ravel(), minlength=size)
    return res.reshape(tuple(target) + (K,))


class CategoricalFactor(Conditional):
    """z ~ Categorical(p): lam = E[log p] (overcomplete log-potentials), A = 0."""

    def n_categories(self):
        return self.parents[0].moments()[0].shape[-1]

    def prior_natural(self, u):
        (lp,), = u
        return (lp,)

    def expected_log_partition(self, u):
        return 0.0

    def expected_loglik(self, x, u):
        (lp,), = u
        if x.value is not None:
            return gather_last(lp, x.value)
        return np.einsum("...k,...k->...", x.moments[0], lp)

    def message(self, i, x, u, w, target):
        K = self.n_categories()
        if x.value is not None:
            return (scatter_last(w, x.value, K, target, x.plates),)
        return (wsum(w, x.moments[0], subs=("A",), out="A", target_plates=target,
                     full_plates=x.plates),)


class MultinomialFactor(Conditional):
    """x ~ Multinomial(n fixed, p): lam = E[log p], A = 0, h = n!/prod x_k!."""

    def __init__(self, node, parents, slots, n):
        self.n = np.asarray(n, dtype=float)
        super().__init__(node, parents, slots)

    def fixed_plates(self):
        return np.shape(self.n)

    def n_categories(self):
        return self.parents[0].moments()[0].shape[-1]

    def prior_natural(self, u):
        (lp,), = u
        return (lp,)

    def expected_log_partition(self, u):
        return 0.0

    def log_base_measure(self, x):
        if x.value is None:
            return 0.0
        v = np.asarray(x.value, dtype=float)
        return gammaln(v.sum(-1) + 1.0) - gammaln(v + 1.0).sum(-1)

    def message(self, i, x, u, w, target):
        return (wsum(w, x.moments[0], subs=("A",), out="A", target_plates=target,
                     full_plates=x.plates),)
