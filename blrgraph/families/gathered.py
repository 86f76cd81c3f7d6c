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

Contiguous rows (a local round of LDA): when exactly two tables are gathered and the
row array of one of them, a, is sorted (the entries of each of its rows contiguous: a
document's words in CSR order), s is computed per row of a without gathering E_a:
the other table's exponentials at the entries, E_b[rows_b], are laid out once in
zero-padded blocks (rows of a with similar entry counts together, :class:`Segments`)
and each call is one batched product of the blocks with E_a's rows,

    s[entries of row i] = sum_k Eb_pad[i, :, k] E_a[i, k],

which reads one entries x K array instead of gathering a second one and reading both.
The blocks stay in the memo while table b and both row arrays are the same objects
(the topics, fixed during a local fit); the sum over k runs in the same order as the
gathered one's, so s is the same to the last bit.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

TINY = 1e-200


def _take(a, rows):
    return a if rows is None else np.take(a, rows, axis=0)


def is_sorted(rows):
    """True when ``rows`` is non-decreasing (each row's entries contiguous)."""
    rows = np.asarray(rows)
    return len(rows) < 2 or bool(np.all(rows[1:] >= rows[:-1]))


class Segments:
    """The entries of a sorted row array grouped by row, for sums over k per entry
    computed row by row (see the module's docstring).

    Rows with entries are bucketed by entry count, longest first: a bucket of longest
    count L holds the rows with at least ``min(L / ratio, L - slack)`` entries, so the
    padding adds at most ``ratio - 1`` of a bucket's entries (or ``slack`` per row).
    Each bucket is (its rows: an index array, or a slice for all rows in order; L; its
    entries in padded order; their positions in the flattened (rows, L) layout).
    """

    def __init__(self, rows, n_rows, ratio=1.25, slack=4):
        rows = np.asarray(rows)
        self.n, self.n_rows = len(rows), int(n_rows)
        lens = np.bincount(rows, minlength=self.n_rows)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        by_len = np.argsort(-lens, kind="stable")
        by_len = by_len[lens[by_len] > 0]
        desc = lens[by_len]
        self.buckets = []
        i = 0
        while i < len(by_len):
            L = int(desc[i])
            lo = min(L / ratio, L - slack)
            j = i + int(np.searchsorted(-desc[i:], -lo, side="right"))
            docs = np.sort(by_len[i:j])
            valid = np.arange(L)[None, :] < lens[docs][:, None]
            ent = (starts[docs][:, None] + np.arange(L)[None, :])[valid]
            pos = np.flatnonzero(valid.ravel())
            sel = slice(None) if len(docs) == self.n_rows else docs
            self.buckets.append((sel, len(docs), L, ent, pos))
            i = j
        # one bucket of every row in order: its entries are 0..n-1 in order
        self.whole = len(self.buckets) == 1 and isinstance(self.buckets[0][0], slice)
        # the buckets' padded layouts one after the other, and each entry's place there
        self.offsets = np.concatenate([[0], np.cumsum([m * L for _, m, L, _, _ in self.buckets],
                                                      dtype=np.intp)]).astype(np.intp)
        self.place = np.empty(self.n, dtype=np.intp)
        for (_, _, _, ent, pos), off in zip(self.buckets, self.offsets):
            self.place[ent] = pos + off

    def pad_index(self, rows, dummy):
        """For each bucket, ``rows`` at its entries in the padded layout, (bucket rows * L,),
        ``dummy`` in the padding."""
        out = []
        for _, m, L, ent, pos in self.buckets:
            idx = np.full(m * L, dummy, dtype=np.intp)
            idx[pos] = rows if self.whole else rows[ent]
            out.append(idx)
        return out

    def pad(self, table, index):
        """``table`` at the padded index arrays of :meth:`pad_index` (whose ``dummy`` is
        len(table)): [(bucket rows, L, K)], zeros in the padding."""
        ext = np.concatenate([table, np.zeros((1, np.shape(table)[-1]))])
        return [np.take(ext, idx, axis=0).reshape(m, L, -1)
                for idx, (_, m, L, _, _) in zip(index, self.buckets)]

    def rowdot(self, table, blocks):
        """s[n] = sum_k table[row of n, k] * (n's entry of ``blocks``), (n,)."""
        out = np.empty(self.offsets[-1])
        for (sel, m, L, _, _), blk, off in zip(self.buckets, blocks, self.offsets):
            np.einsum("dlk,dk->dl", blk, table[sel], out=out[off:off + m * L].reshape(m, L))
        return np.take(out, self.place)


def gathered_sum(tables, rows, n):
    """lam = sum_j tables[j][rows[j]] as a dense (n, K) array (``rows[j]`` None: a
    one-row table broadcast to every entry)."""
    if rows[0] is None:
        out = np.zeros((n, np.shape(tables[0])[-1]))
        start = 0
    else:  # (0 + x is x: the same sums as from zeros)
        out = np.take(np.asarray(tables[0], dtype=float), rows[0], axis=0)
        start = 1
    for T, r in zip(tables[start:], rows[start:]):
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
    over the entries sharing a row of one table); :meth:`expect` and
    :meth:`entropy_sum` (the ELBO's sums over entries, from scatters).
    """

    def __init__(self, tables, rows, n, memo=None, tiny=TINY):
        self.memo = {} if memo is None else memo
        self.tables, self.rows, self.n = list(tables), list(rows), int(n)
        self.K = np.shape(self.tables[0])[-1]
        self._exp = [self._shifted_exp(j) for j in range(len(self.tables))]
        self._seg = self._segment_plan()
        if self._seg is not None:
            seg, a, blocks = self._seg
            s = seg.rowdot(self._exp[a][0], blocks)
        elif len(self.tables) == 1 and self.rows[0] is not None:
            # one table (z at its prior theta[doc]): the row sums of E, gathered
            s = np.take(np.einsum("rk->r", self._exp[0][0]), self.rows[0])
        else:
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

    def _segment_plan(self):
        """(Segments of table a's rows, a, padded blocks of table b) when exactly two
        tables are gathered, a's row array is sorted and no table is shared; else None.
        The sortedness of a row array and the blocks are memoised on identity."""
        gathered = [j for j, r in enumerate(self.rows) if r is not None]
        if len(gathered) != 2 or len(gathered) != len(self.rows):
            return None
        hit = self.memo.get("segments")
        if hit is not None and all(x is y for x, y in zip(hit[0], self.rows)):
            a, seg = hit[1], hit[2]
        else:
            a = next((j for j in gathered if is_sorted(self.rows[j])), None)
            seg = None if a is None else Segments(self.rows[a], len(self._exp[a][0]))
            self.memo.pop("blocks", None)
            self.memo["segments"] = (tuple(self.rows), a, seg)
        if seg is None:
            return None
        for j in gathered:   # gathers kept by another path are not needed here
            self.memo.pop(("gather", j), None)
        b = gathered[1] if a == gathered[0] else gathered[0]
        Tb, rb = self.tables[b], self.rows[b]
        hit = self.memo.get("blocks")
        if hit is None or hit[0] is not Tb or hit[1] is not seg or hit[2] is not rb:
            index = hit[3] if hit is not None and hit[1] is seg and hit[2] is rb else None
            self.memo.pop("blocks", None)  # free the stale blocks before the new ones
            Eb = self._exp[b][0]
            if index is None:
                index = seg.pad_index(rb, len(Eb))
            hit = (Tb, seg, rb, index, seg.pad(Eb, index))
            self.memo["blocks"] = hit
        return seg, a, hit[4]

    def _gathered(self, j):
        """E_j at the rows of the entries, (n, K) (or (1, K) for a shared row); kept in
        the memo, except with contiguous rows (the blocks replace it there)."""
        T, r = self.tables[j], self.rows[j]
        if r is None:
            return self._exp[j][0]
        if self._seg is not None:
            return np.take(self._exp[j][0], r, axis=0)
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
            if self._seg is not None:   # two gathers, nothing kept
                p = np.take(self._exp[0][0], self.rows[0], axis=0)
                p *= np.take(self._exp[1][0], self.rows[1], axis=0)
            else:
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

    def restricted(self, entries):
        """This q on ``entries`` only (:class:`RestrictedSoftmax`, built when read)."""
        return RestrictedSoftmax(self, np.asarray(entries))

    def scatter_kept(self, idx, weights, n_out):
        """:meth:`scatter`, kept on this q for the same ``idx`` and ``weights`` objects
        (the ELBO and the topics' message ask for the same sums); read-only."""
        kept = self.__dict__.setdefault("_kept", [])
        for i, w, out in kept:
            if i is idx and w is weights:
                return out
        out = self.scatter(idx, weights, n_out)
        if out is not None:
            out.flags.writeable = False
            kept.append((idx, weights, out))
        return out

    def expect(self, table, idx, weights=None):
        """sum_n w_n sum_k p[n, k] table[idx[n], k] without building p: the sum of
        ``table`` times the :meth:`scatter` of p over ``idx`` (one of the row arrays, the
        same object; None: ``table`` is one row shared by every entry, times the column
        sums of a scatter). ``weights`` (n,) or None (ones). None when it cannot be
        computed so (then use p)."""
        if weights is not None and np.shape(weights) != (self.n,):
            return None
        if idx is None:
            j = next((j for j, r in enumerate(self.rows) if r is not None), None)
            if j is None or np.size(table) != self.K:
                return None
            S = self.scatter_kept(self.rows[j], weights, len(self._exp[j][0]))
            return None if S is None else float(np.sum(S.sum(axis=0) * np.reshape(table, -1)))
        S = self.scatter_kept(idx, weights, len(table))
        return None if S is None else float(np.sum(S * table))

    def entropy_sum(self, weights=None):
        """sum_n w_n H[q_n] = sum_n w_n (log Z_n - <p_n, lam_n>), with the inner products
        as :meth:`expect` of each table (no p, no lam); None when one cannot be."""
        if weights is not None and np.shape(weights) != (self.n,):
            return None
        logz = self.log_partition
        total = float(np.sum(logz if weights is None else np.asarray(weights, float) * logz))
        for T, r in zip(self.tables, self.rows):
            e = self.expect(T, r, weights)
            if e is None:
                return None
            total -= e
        return total

    def _pattern(self, a, b, n_out, v):
        """The sparse (n_out, R_b) matrix of v at (rows_a[n], rows_b[n]); its structure
        is kept in the memo (the data are refilled each time)."""
        ra, rb = self.rows[a], self.rows[b]
        hit = self.memo.get(("pattern", a, b))
        if hit is None or hit[0] is not ra or hit[1] is not rb:
            order = None if is_sorted(ra) else np.argsort(ra, kind="stable")  # None: in order
            indptr = np.concatenate([[0], np.cumsum(np.bincount(ra, minlength=n_out))])
            M = sp.csr_matrix((np.ones(self.n), rb if order is None else rb[order], indptr),
                              shape=(n_out, len(self._exp[b][0])))
            hit = (ra, rb, order, M)
            self.memo[("pattern", a, b)] = hit
        order, M = hit[2], hit[3]
        M.data = v if order is None else v[order]
        return M


class RestrictedSoftmax:
    """A :class:`GatheredSoftmax` restricted to some of its entries (a row view of the
    local block, which updates the node before reading it): the dense lam of those
    entries on :meth:`lam`, the full object on any other use, built then."""

    def __init__(self, q, entries):
        self._args = (q.tables, [None if r is None else r[entries] for r in q.rows], len(entries))
        self._q = None

    def lam(self):
        return gathered_sum(*self._args)

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_args", "_q"):
            raise AttributeError(name)
        if self._q is None:
            self._q = GatheredSoftmax(*self._args)
        return getattr(self._q, name)


def gathered_softmax(tables, rows, n, memo=None, tiny=TINY):
    """(p, log Z) of lam = sum_j tables[j][rows[j]] (see :class:`GatheredSoftmax`)."""
    q = GatheredSoftmax(tables, rows, n, memo, tiny)
    return q.p, q.log_partition
