"""Softmax of a sum of gathered tables, without exponentiating the entries x K array.

A Categorical q whose natural parameter is a sum of rows of small tables,

    lam[n, k] = sum_j T_j[rows_j[n], k]        (T_j of shape (R_j, K), R_j << n),

has p = softmax(lam) = prod_j E_j[rows_j[n], k] / s_n with E_j = exp(T_j - m_j),
m_j the row maxima of T_j, s_n = sum_k prod_j E_j[rows_j[n], k] and
log Z_n = log s_n + sum_j m_j[rows_j[n]]. Only the small tables are exponentiated.
Sums of p over the entries that share a row of one table need not build p either:

    sum_{n: rows_a[n] = i} w_n p_n = E_a[i] * sum_{n: rows_a[n] = i} (w_n / s_n) E_b[rows_b[n]]
                                   = E_a[i] * (M E_b)[i],   M[i, j] = sum of w_n / s_n
                                     over the entries with (rows_a, rows_b) = (i, j),

one sparse product (Hoffman, Blei & Bach 2010 compute LDA's E-step so, with
exp(E log theta) and exp(E log beta)). A row whose product underflows (s_n below
``tiny``: tables far apart in scale) is computed exactly by the max-shifted
log-sum-exp instead, so every result equals the dense softmax to rounding.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

TINY = 1e-200


def _take(a, rows):
    return a if rows is None else np.take(a, rows, axis=0)


def gathered_sum(tables, rows, n):
    """lam = sum_j tables[j][rows[j]] as a dense (n, K) array (``rows[j]`` None: a
    one-row table broadcast to every entry)."""
    out = np.zeros((n, np.shape(tables[0])[-1]))
    for T, r in zip(tables, rows):
        out += _take(T, r)
    return out


class GatheredSoftmax:
    """q = softmax(sum_j tables[j][rows[j]]) over the last axis, for n entries.

    tables : 2-d arrays (R_j, K); rows : integer arrays (n,), or None for a one-row
        table shared by every entry.
    memo : optional dict kept by the caller between instances: a table passed again
        (the same array object, with the same rows) is neither exponentiated nor
        gathered again, and the sparse pattern of two index arrays is built once.

    Attributes: ``log_partition`` (n,); ``p`` (n, K), built on first use;
    :meth:`lam` (the dense natural parameter); :meth:`scatter` (weighted sums of p
    over the entries sharing a row of one table).
    """

    def __init__(self, tables, rows, n, memo=None, tiny=TINY):
        self.memo = {} if memo is None else memo
        self.tables, self.rows, self.n = list(tables), list(rows), int(n)
        self.K = np.shape(self.tables[0])[-1]
        self._exp = [self._shifted_exp(j) for j in range(len(self.tables))]
        G = [self._gathered(j) for j in range(len(self.tables))]
        if len(G) == 1:
            s = np.einsum("nk->n", np.broadcast_to(G[0], (self.n, self.K)))
        elif len(G) == 2:
            s = np.einsum("nk,nk->n", *np.broadcast_arrays(G[0], G[1]))
        else:
            s = np.einsum("nk->n", self._product(G))
        self.fixed = None  # (entries, exact p rows) where the product underflowed
        if not s.min() >= tiny:
            idx = np.flatnonzero(~(s >= tiny))
            lam = gathered_sum(self.tables, [None if r is None else r[idx] for r in self.rows],
                               len(idx))
            m = np.max(lam, axis=-1, keepdims=True)
            e = np.exp(lam - m)
            se = e.sum(-1, keepdims=True)
            self.fixed = (idx, e / se, (m + np.log(se))[:, 0])
            s[idx] = np.inf  # their products contribute nothing (1/s = 0)
        self.s = s
        self._p = None
        self._log_partition = None

    @property
    def log_partition(self):
        """log sum_k exp(lam[n, k]), (n,)."""
        if self._log_partition is None:
            out = np.log(np.where(np.isinf(self.s), 1.0, self.s))
            for j, r in enumerate(self.rows):
                out += _take(self._exp[j][1], r)
            if self.fixed is not None:
                out[self.fixed[0]] = self.fixed[2]
            self._log_partition = out
        return self._log_partition

    # ---- tables ---------------------------------------------------------------------
    def _shifted_exp(self, j):
        """(exp(T - m), m) for table j, m its finite row maxima (0 where none)."""
        T = self.tables[j]
        hit = self.memo.get(("exp", j))
        if hit is not None and hit[0] is T:
            return hit[1]
        Ta = np.asarray(T, dtype=float)
        m = np.max(Ta, axis=-1)
        m = np.where(np.isfinite(m), m, 0.0)
        out = (np.exp(Ta - m[:, None]), m)
        self.memo[("exp", j)] = (T, out)
        return out

    def _gathered(self, j):
        """E_j at the rows of the entries, (n, K) (or (1, K) for a shared row)."""
        T, r = self.tables[j], self.rows[j]
        if r is None:
            return self._exp[j][0]
        hit = self.memo.get(("gather", j))
        if hit is not None and hit[0] is T and hit[1] is r:
            return hit[2]
        self.memo.pop(("gather", j), None)  # free the stale (n, K) array before the new one
        G = np.take(self._exp[j][0], r, axis=0)
        self.memo[("gather", j)] = (T, r, G)
        return G

    def _product(self, G):
        out = np.empty((self.n, self.K))
        out[...] = G[0]
        for g in G[1:]:
            out *= g
        return out

    # ---- results --------------------------------------------------------------------
    @property
    def p(self):
        if self._p is None:
            p = self._product([self._gathered(j) for j in range(len(self.tables))])
            p *= (1.0 / self.s)[:, None]
            if self.fixed is not None:
                p[self.fixed[0]] = self.fixed[1]
            self._p = p
        return self._p

    def lam(self):
        return gathered_sum(self.tables, self.rows, self.n)

    def scatter(self, idx, weights, n_out):
        """out[i] = sum over entries n with idx[n] = i of weights[n] p[n], (n_out, K),
        when ``idx`` is the row array of one of the tables (the same object), without
        building p; None otherwise. ``weights``: (n,) or None (ones)."""
        a = next((j for j, r in enumerate(self.rows) if r is idx), None)
        if a is None or len(self._exp[a][0]) != n_out:
            return None
        v = 1.0 / self.s if weights is None else np.asarray(weights, dtype=float) / self.s
        others = [j for j in range(len(self.tables)) if j != a]
        shared = [j for j in others if self.rows[j] is None]
        gathered = [j for j in others if self.rows[j] is not None]
        if not gathered:
            acc = np.bincount(idx, weights=v, minlength=n_out)[:, None] * np.ones((1, self.K))
        elif len(gathered) == 1:
            acc = self._pattern(a, gathered[0], n_out, v) @ self._exp[gathered[0]][0]
        else:
            prod = self._product([self._gathered(j) for j in gathered])
            prod *= v[:, None]
            S = sp.csr_matrix((np.ones(self.n), (idx, np.arange(self.n))), shape=(n_out, self.n))
            acc = S @ prod
        out = np.asarray(acc) * self._exp[a][0]
        for j in shared:
            out *= self._exp[j][0]
        if self.fixed is not None:
            rows, exact = self.fixed[:2]
            wf = np.ones(len(rows)) if weights is None else np.asarray(weights, dtype=float)[rows]
            np.add.at(out, idx[rows], wf[:, None] * exact)
        return out

    def _pattern(self, a, b, n_out, v):
        """The sparse (n_out, R_b) matrix of v at (rows_a[n], rows_b[n]); its structure
        is kept in the memo (the data are refilled each time)."""
        ra, rb = self.rows[a], self.rows[b]
        hit = self.memo.get(("pattern", a, b))
        if hit is None or hit[0] is not ra or hit[1] is not rb:
            order = np.argsort(ra, kind="stable")
            indptr = np.concatenate([[0], np.cumsum(np.bincount(ra, minlength=n_out))])
            M = sp.csr_matrix((np.ones(self.n), rb[order], indptr),
                              shape=(n_out, len(self._exp[b][0])))
            hit = (ra, rb, order, M)
            self.memo[("pattern", a, b)] = hit
        order, M = hit[2], hit[3]
        M.data = v[order]
        return M


def gathered_softmax(tables, rows, n, memo=None, tiny=TINY):
    """(p, log Z) of lam = sum_j tables[j][rows[j]] (see :class:`GatheredSoftmax`)."""
    q = GatheredSoftmax(tables, rows, n, memo, tiny)
    return q.p, q.log_partition
