"""Softmax of a sum of gathered tables, without exponentiating the entries x K array.

A Categorical q whose natural parameter is a sum of rows of small tables,

    lam[n, k] = sum_j T_j[rows_j[n], k]        (T_j of shape (R_j, K), R_j << n),

has p = softmax(lam) = prod_j E_j[rows_j[n], k] / Z_n with E_j = exp(T_j - m_j),
m_j the row maxima of T_j, and log Z_n = log sum_k prod_j E_j[rows_j[n], k]
+ sum_j m_j[rows_j[n]]. Only the small tables are exponentiated; each entry then
costs one gather and one product per table (Hoffman, Blei & Bach 2010 use this for
LDA: exp(E log theta) and exp(E log beta)). A row whose product underflows (sum
below ``tiny``: tables far apart in scale) is recomputed by the max-shifted
log-sum-exp, so the result equals softmax(lam) to rounding in every case.
"""
from __future__ import annotations

import numpy as np

TINY = 1e-200


def _shifted_exp(table):
    """(exp(T - m), m) with m the finite row maxima of T (0 where a row has none)."""
    m = np.max(table, axis=-1)
    m = np.where(np.isfinite(m), m, 0.0)
    return np.exp(table - m[:, None]), m


def _take(a, rows):
    return a if rows is None else np.take(a, rows, axis=0)


def gathered_sum(tables, rows, n):
    """lam = sum_j tables[j][rows[j]] as a dense (n, K) array (``rows[j]`` None: a
    one-row table broadcast to every entry)."""
    out = np.zeros((n, tables[0].shape[-1]))
    for T, r in zip(tables, rows):
        out += _take(T, r)
    return out


def gathered_softmax(tables, rows, n, memo=None, tiny=TINY):
    """(p, log Z) of lam = sum_j tables[j][rows[j]]: p (n, K) the softmax over the last
    axis, log Z (n,) its log partition.

    tables : 2-d arrays (R_j, K); rows : integer arrays (n,) or None (R_j = 1).
    memo : optional dict kept by the caller between calls; the gathered E_j of a table
        passed again (the same array object with the same rows) is reused, so a table
        that did not change since the last call is neither exponentiated nor gathered.
    """
    memo = {} if memo is None else memo
    gathered, shift = [], np.zeros(n)
    for j, (T, r) in enumerate(zip(tables, rows)):
        hit = memo.get(j)
        if hit is not None and hit[0] is T and hit[1] is r:
            G, mrow = hit[2], hit[3]
        else:
            E, m = _shifted_exp(np.asarray(T, dtype=float))
            G, mrow = _take(E, r), _take(m, r)
            memo[j] = (T, r, G, mrow)
        gathered.append(G)
        shift = shift + mrow
    p = np.empty((n, tables[0].shape[-1]))
    if len(gathered) == 1:
        p[...] = gathered[0]
    else:
        np.multiply(gathered[0], gathered[1], out=p)
        for G in gathered[2:]:
            p *= G
    s = np.einsum("nk->n", p)
    bad = ~(s >= tiny)
    if np.any(bad):  # underflow: these rows by the max-shifted log-sum-exp
        idx = np.flatnonzero(bad)
        lam = gathered_sum(tables, [None if r is None else r[idx] for r in rows], len(idx))
        m = np.max(lam, axis=-1, keepdims=True)
        e = np.exp(lam - m)
        se = e.sum(-1, keepdims=True)
        p[idx] = e / se
        s[idx] = 1.0
        shift[idx] = (m + np.log(se))[:, 0]
    p /= s[:, None]
    return p, np.log(s) + shift
