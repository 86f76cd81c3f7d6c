"""Factors with a Dirichlet parent p: Categorical and Multinomial children
(docs/math.md §3.2). The parent's moments are (E[log p],) on the last axis.

Observed labels are never one-hot encoded: E[log p][label] is a gather and
the message to p a bincount, so memory is O(entries x K), not O(entries x V).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.special import gammaln

from ... import rowsplit
from ...predictive import CategoricalPredictive, DirichletMultinomial
from ..plates import broadcast_plates, wsum
from ...families.base import einsum
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

    closed_form_elbo = True

    _onehot = _transposed = None   # memos: the labels one-hot, the last log table transposed
    caches = ("passed",)
    #: (p, sum_n p) from z's last step when it made both in one pass over the rows
    #: (FlatStats.softmax_pass, inference/zstep.py): the counts for that same p
    passed = None

    def n_categories(self):
        p = self.parents[0]
        if p.deterministic:
            from ..deterministic import Gather
            if isinstance(p, Gather):  # the source has the same K, without gathering
                p = p.source
        return p.moments()[0].shape[-1]

    def prior_natural(self, u):
        (lp,), = u
        return (lp,)

    def expected_log_partition(self, u):
        return 0.0

    def expected_loglik(self, x, u):
        (lp,), = u
        if x.value is not None:
            return gather_last(lp, x.value)
        return einsum("...k,...k->...", x.moments[0], lp)

    def weighted_loglik(self, x, u, w):
        """sum_n w_n E[log p(z_n | p)]; for a factored q(z) (families/gathered.py: LDA's
        z) whose p is a gather source[idx] or one shared row, from one scatter of q
        (:meth:`~blrgraph.families.gathered.GatheredSoftmax.expect`), without q's
        entries x K array."""
        fast = self._factored_loglik(w)
        return super().weighted_loglik(x, u, w) if fast is None else fast

    def _factored_loglik(self, w):
        q = self.node._factored
        if q is None or self.node.point:
            return None
        terms = self.prior_terms()
        if terms is None:
            return None
        (table,), (idx,) = terms
        return q.expect(table, idx, w)

    def message(self, i, x, u, w, target):
        K = self.n_categories()
        if x.value is not None:
            fast = self._component_counts(x.value, w, K, target)
            if fast is not None:
                return (fast,)
            return (scatter_last(w, x.value, K, target, x.plates),)
        r = x.moments[0]
        if tuple(target) == x.plates and np.shape(r) == x.plates + (K,):
            return (r if w is None else np.asarray(w)[..., None] * r,)  # nothing to sum
        if w is None and not target and np.shape(r) == x.plates + (K,) and len(x.plates) == 1:
            passed = self.passed
            if passed is not None and passed[0] is r:
                return (passed[1],)
            return (rowsplit.add_rows(r),)   # one prior for every row: the counts
        return (wsum(w, r, subs=("A",), out="A", target_plates=target, full_plates=x.plates),)

    def predictive(self, q, plates, ctx):
        """Categorical(p) with p ~ Dirichlet(alpha): Categorical(alpha / sum(alpha))."""
        if q[0].kind != "q":
            return CategoricalPredictive(q[0].value, plates)
        alpha = q[0].params["alpha"]
        return CategoricalPredictive(alpha / alpha.sum(-1, keepdims=True), plates)

    def factored_message(self, slots, q, w, target):
        """The message to p (its gradient, w_n E[onehot z_n]) of a z whose q is a
        factored Categorical (families/gathered.py), kept factored for a gather to
        scatter (graph/node.py FactoredMessage); None when it must be reduced here."""
        from ..base import FactoredMessage
        if tuple(target) != self.node.plates or (w is not None and np.shape(w) != tuple(target)):
            return None
        return (FactoredMessage(q, w),)

    def _component_counts(self, labels, w, K, target):
        """The message of a mixture of Categoricals to its (C, K) parameters:
        counts[c, k] = sum_n w[n, c] [labels_n = k], labels (n, 1), w (n, C), as one
        sparse product with the (K, n) one-hot matrix of the labels (kept while the
        labels are the same array). None when the shapes are not that."""
        if np.ndim(labels) != 2 or np.shape(labels)[1] != 1 or np.ndim(w) != 2 \
                or len(target) != 1 or np.shape(w) != (np.shape(labels)[0], target[0]):
            return None
        key = labels if labels.base is None else labels.base
        memo = self._onehot
        if memo is None or memo[0] is not key:
            n = labels.shape[0]
            onehot = sp.csr_matrix((np.ones(n), (labels[:, 0], np.arange(n))), shape=(K, n))
            memo = self._onehot = (key, onehot)
        return np.ascontiguousarray((memo[1] @ w).T)

    # ---- gathered tables (families/gathered.py) ------------------------------------
    def prior_terms(self):
        """The child's prior natural parameter E[log p] as gathered tables
        ([table], [rows]) when its entries are rows of a small table: p = source[idx]
        (a gather, as theta[doc_ids] in LDA) or p shared by every entry. None otherwise."""
        from ..deterministic import Gather
        p, plates = self.parents[0], self.node.plates
        if len(plates) != 1:
            return None
        if isinstance(p, Gather):
            src = p.source
            if p.idx.ndim != 1 or len(src.plates) != 1 or p.plates != plates:
                return None
            lp = src.moments()[0]
            return [np.broadcast_to(lp, src.plates + lp.shape[-1:])], [p.idx]
        lp = p.moments()[0]
        if all(s == 1 for s in p.plates):
            return [np.reshape(lp, (1, -1))], [None]
        return None

    def factored_counts(self, q, x, w, target):
        """The message to p (K, V) of a mixture of Categoricals over observed labels x
        whose assignments' q is factored (families/gathered.py):
        counts[k, v] = sum_n w_n q_n(k) [x_n = v], the :meth:`scatter` of q over the
        labels (one sparse product, without q's entries x K array). None unless the
        labels are one of q's row arrays and p has the K components as its one plate
        axis."""
        lp = self.parents[0].moments()[0]
        if x.value is None or np.ndim(lp) != 2 or tuple(target) != np.shape(lp)[:1]:
            return None
        if w is not None and np.shape(w) != (q.n,):
            return None
        S = q.scatter_kept(x.value, w, np.shape(lp)[1])
        return None if S is None else (np.ascontiguousarray(S.T),)

    def loglik_terms(self, x, u, plates):
        """E[log p(x | p_k)] of observed labels x for every component k, as a gathered
        table ([E[log p]^T (V x K)], [labels]), when the K components are the only plate
        axis of p and the labels have the mixture's (one-axis) plates. None otherwise."""
        (lp,), = u
        if x.value is None or np.ndim(lp) != 2 or np.shape(x.value) != tuple(plates) \
                or len(plates) != 1:
            return None
        memo = self._transposed
        if memo is None or memo[0] is not lp:  # one (transposed) table per change of p
            memo = self._transposed = (lp, lp.T)
        return [memo[1]], [x.value]


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

    def predictive(self, q, plates, ctx):
        """Multinomial(n, p) with p ~ Dirichlet(alpha): Dirichlet-multinomial(n, alpha)."""
        if q[0].kind != "q":
            return super().predictive(q, plates, ctx)
        return DirichletMultinomial(self.n, q[0].params["alpha"], plates)
