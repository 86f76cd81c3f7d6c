"""Observed data as one matrix of sufficient statistics (docs/math.md §3.1, §3.3).

For a conjugate factor and observed x, everything a factor needs of the data is
linear in T(x):

* E[log p(x_n | theta_k)] = <E[eta_k], T(x_n)> - E[A_k] + log h(x_n), for every
  entry n and component k at once: one matrix product ``Phi @ coef`` with
  ``Phi = [1, log h(x), flat T(x)]`` (entries x P) built once;
* a message to a parent is affine in the child's moments, so with weights
  W (entries x K) it equals the message of K pseudo-entries whose moments are
  the weighted means ``(W^T Phi) / sum_n W`` and whose weights are ``sum_n W``:
  one matrix product ``W^T Phi`` replaces every per-entry product.

A symmetric matrix statistic (MVN's x x^T, a Wishart's Lambda) keeps its upper
triangle only: D(D+1)/2 columns, the off-diagonal coefficients doubled.
``Phi`` is kept while the data do not change, as far as it fits in ``MAX_BYTES``:
the rows beyond are rebuilt chunk by chunk whenever a product needs them
(``FlatStats.dot``, ``FlatStats.tdot``, ``FlatStats.blocks``), so memory stays
O(MAX_BYTES + chunk x P) and the per-row cost stays close to the cached one
(docs/benchmarks.md §1). With ``STREAM = False`` data above the cap use the
per-entry formulas instead (same result, O(entries x D) memory).
"""
from __future__ import annotations

import numpy as np

from .. import rowsplit
from ..families.base import _F8, above

#: Largest Phi (entries x P x 8 bytes) kept per observed node. Larger data keep the first
#: rows that fit and rebuild the rest in chunks of ``_STREAM_ROWS`` rows when needed.
MAX_BYTES = 1 << 30

#: Whether data above ``MAX_BYTES`` stream Phi in chunks (True) or use the per-entry
#: formulas of the factors (False: O(entries x D) memory instead of O(chunk x P)).
STREAM = True

_ROWS_PER_CHUNK = 1 << 15      # rows built at once into the cached Phi

#: Products of a small kept Phi (at most ``MATVEC_MAX_SIZE`` entries) with at most
#: ``MATVEC_MAX_COLS`` columns of weights or coefficients run as one stacked matrix-vector
#: product (numpy's matmul: one BLAS gemv per column, Phi read as it is stored) instead of
#: one gemm, which packs Phi into its panels on every call: 118k instructions against 54k
#: for W^T Phi on the wine table (178 x 105, three columns; docs/benchmarks.md §12.16)
MATVEC_MAX_COLS = 4
MATVEC_MAX_SIZE = 1 << 16
_STREAM_ROWS = 1 << 10         # rows of one rebuilt chunk (docs/benchmarks.md §1.1)

#: rows of one block of ``FlatStats.softmax_pass`` (its columns of Phi, P x 8 bytes each,
#: stay in cache between the pass's two products; docs/benchmarks.md §12.18)
PASS_ROWS = 1 << 13

#: ``FlatStats.softmax_pass`` goes over the threads of an active split only when its work,
#: rows x K x (2 P + 70) (each entry of lam: two products of P multiply-adds, and about 70
#: more for its exp and softmax), is this or more: below, the threads cost more than they
#: save (docs/benchmarks.md §12.20: split, 20,000 x 10, K=8 (3.2e7) and 64,000 x 2, K=5
#: (2.6e7) ran 0.86x and 0.78x of one thread; 100,000 x 2, K=5 (4.1e7) 1.12x, 30,000 x 10,
#: K=8 (4.8e7) 1.38x)
PASS_SPLIT_WORK = 36e6

#: a bound on |lam| below this: no entry of lam overflows (softmax_pass)
_NO_OVERFLOW = 1e300


class Layout:
    """Where each statistic of a family lives in the columns of Phi."""

    def __init__(self, family, shapes, has_logh):
        self.family = family
        self.shapes = [tuple(s) for s in shapes]        # event shape of each statistic
        sym = set(family.symmetric_stats)
        self.blocks = []
        self._sym_index = {}   # symmetric block j: flat (i, j) of the upper triangle, the
        # halving of the diagonal (d, d), and each flat (i, j)'s column in the triangle
        col = 2 if has_logh else 1
        for j, s in enumerate(self.shapes):
            if j in sym and len(s) == 2 and s[0] == s[1]:
                iu = np.triu_indices(s[0])
                n = len(iu[0])
                self.blocks.append((j, slice(col, col + n), iu))
                d = s[0]
                col_of = np.empty((d, d), dtype=np.intp)   # the column of each (i, j)
                col_of[iu] = col_of[iu[1], iu[0]] = np.arange(n)
                halves = np.ones((d, d))
                halves[np.diag_indices(d)] = 0.5
                self._sym_index[j] = (iu[0] * d + iu[1], halves, col_of.ravel())
            else:
                n = int(np.prod(s, dtype=int))
                self.blocks.append((j, slice(col, col + n), None))
            col += n
        self.has_logh = has_logh
        self.P = col

    def flatten_natural(self, nat, lead, head=None):
        """Natural parameters with plates ``lead`` (e.g. (K,)) as (lead..., P) coefficients
        of Phi's statistic columns (column 0 and log h are left for the caller, zeros; or
        ``head``, lead + (1,): column 0 when there is no log h column, the whole joined
        by one concatenation)."""
        lead = tuple(lead)
        out = np.zeros(lead + (self.P,)) if head is None else None
        parts = [head]
        for (j, sl, iu), a in zip(self.blocks, nat):
            shape = lead + self.shapes[j]
            if type(a) is not np.ndarray or a.dtype != _F8 or a.shape != shape:
                a = np.broadcast_to(np.asarray(a, dtype=float), shape)
            if iu is not None:   # (a_ij + a_ji), halved on the diagonal, of the triangle
                ij, halves, _ = self._sym_index[j]
                t = a + a.swapaxes(-1, -2)
                t *= halves
                t = t.reshape(lead + (-1,))
                if out is None:
                    parts.append(t.take(ij, axis=-1))
                else:
                    t.take(ij, axis=-1, out=out[..., sl])
            elif out is None:
                parts.append(a.reshape(lead + (-1,)))
            else:
                out[..., sl] = a.reshape(lead + (-1,))
        return out if out is not None else np.concatenate(parts, axis=-1)

    def means(self, S, plates):
        """Weighted sums S (rows, P) -> (totals, moment tuple of weighted means), with the
        rows laid out as ``plates``; a row with zero total gets zero moments."""
        tot = S[:, 0]   # (a view: S is not kept)
        t = tot.tolist() if 0 < tot.size <= 64 else None
        if t is not None and above(t, 0.0):   # (no zero total)
            M = S / tot[:, None]
        else:
            M = S / np.where(tot > 0, tot, 1.0)[:, None]
        plates = tuple(plates)
        return tot.reshape(plates), self.unflatten(M, plates)

    def unflatten(self, S, plates=None):
        """Rows of column sums/means (n, P) back to the family's moment tuple (with the
        rows laid out as ``plates`` when given)."""
        lead = (S.shape[0],) if plates is None else tuple(plates)
        out = []
        for j, sl, iu in self.blocks:
            block = S[:, sl]
            if iu is not None:   # the triangle read back into both halves
                block = block.take(self._sym_index[j][2], axis=1)
            out.append(block.reshape(lead + self.shapes[j]))
        return tuple(out)


class FlatStats:
    """Phi = [1, (log h), flat T(x)] of an observed node's data, entries x P.

    ``Phi`` is the whole matrix when it fits in ``MAX_BYTES`` (else None): the first
    ``cached`` rows are kept, the others are rebuilt in chunks by ``blocks``. Use
    ``dot`` / ``tdot`` / ``blocks`` rather than ``Phi`` to serve both cases. The kept rows
    are stored transposed (``_headT``, P x entries; ``Phi`` is its transpose, a
    Fortran-ordered view): the products with a few columns of coefficients or weights,
    ``M^T Phi^T`` and ``W^T Phi``, then read each statistic as one contiguous row and run
    about twice as fast as on a row-major Phi (docs/benchmarks.md §12.1)."""

    def __init__(self, family, value, plates):
        value = np.asarray(value)
        E = int(np.prod(plates, dtype=int))
        flat = value.reshape((E,) + value.shape[len(plates):])
        logh = np.broadcast_to(np.asarray(family.log_base_measure(flat), dtype=float), (E,))
        has_logh = bool(np.ptp(logh) != 0.0)     # a constant log h folds into column 0
        self.logh_value = 0.0 if has_logh else float(logh[0])
        probe = family.suff_stats(flat[:1])
        self.layout = Layout(family, [np.shape(t)[1:] for t in probe], has_logh)
        self.plates = tuple(plates)
        self.family, self.E = family, E
        self._flat_value = flat
        self._logh = logh if has_logh else None
        self.cached = min(E, MAX_BYTES // (8 * self.layout.P))
        headT = np.empty((self.layout.P, self.cached))
        for a in range(0, self.cached, _ROWS_PER_CHUNK):
            b = min(self.cached, a + _ROWS_PER_CHUNK)
            self._build(a, b, headT[:, a:b])
        self._headT = headT
        self._head = headT.T
        self._colmax = None   # the largest |Phi| per column (softmax_pass), when first asked
        self.Phi = self._head if self.cached == E else None
        if self.Phi is not None:     # everything is kept: the data are no longer needed
            self._flat_value = self._logh = None

    def _build(self, a, b, out):
        """Rows a:b of Phi, transposed, written into ``out`` (P, b - a): each statistic
        fills contiguous rows (several times faster than filling the columns of a
        row-major block); the kept rows are stored this way (``_headT``)."""
        out[0] = 1.0
        if self._logh is not None:
            out[1] = self._logh[a:b]
        x = self._flat_value[a:b]
        outer = self.family.value_outer_stats
        if outer is not None and self.layout.blocks[outer[1]][2] is not None:
            # T(x) = (x, x x^T), the upper triangle kept: products of rows of x^T
            (_, sl, _), (_, sl2, iu) = (self.layout.blocks[j] for j in outer)
            xt = out[sl]
            xt[...] = x.T
            c = sl2.start
            for i in range(xt.shape[0]):
                n = xt.shape[0] - i
                np.multiply(xt[i], xt[i:], out=out[c:c + n])
                c += n
            return
        stats = self.family.suff_stats(x)
        for (j, sl, iu), t in zip(self.layout.blocks, stats):
            t = np.asarray(t, dtype=float).reshape((b - a,) + self.layout.shapes[j])
            out[sl] = (t[:, iu[0], iu[1]] if iu is not None else t.reshape(b - a, -1)).T

    def blocks(self, step=1):
        """Yield (a, b, rows a:b of Phi) covering all entries, a and b multiples of ``step``
        (the ``step`` entries of one row of a multi-column mixture stay together; a rebuilt
        block holds ``_STREAM_ROWS`` such rows). The kept rows
        come as one block; a rebuilt block is a reused buffer, valid until the next one."""
        a = self.cached - self.cached % step if self.Phi is None else self.E
        if a > 0:
            yield 0, a, self._head[:a]
        rows = _STREAM_ROWS * step     # _STREAM_ROWS rows of a multi-column mixture
        buf = np.empty((self.layout.P, min(rows, self.E - a))) if a < self.E else None
        while a < self.E:
            b = min(self.E, a + rows)
            self._build(a, b, buf[:, :b - a])
            yield a, b, buf[:, :b - a].T
            a = b

    def dot(self, M):
        """Phi @ M, (entries, m), for M (P, m): computed as (M^T Phi^T)^T, the kept rows being
        stored transposed (the product with a few columns runs twice as fast that way), so
        the result is the transpose of a C-ordered (m, entries) array."""
        return self.dot_rows(np.ascontiguousarray(M.T))

    def dot_rows(self, Mt):
        """Phi @ Mt^T, (entries, m), for C-ordered coefficients ``Mt`` (m, P), one row per
        column of the result (:meth:`dot` of ``Mt.T``; a mixture's (K, P) coefficients as
        they are made)."""
        if self.Phi is not None:
            blocks = rowsplit.active(self.E)
            if blocks is None:
                m = Mt.shape[0]
                if m <= MATVEC_MAX_COLS and self._headT.size <= MATVEC_MAX_SIZE:
                    return np.matmul(Mt[:, None, :], self._headT).reshape(m, self.E).T
                return (Mt @ self._headT).T
            out = np.empty((Mt.shape[0], self.E))   # rows over the cores (rowsplit.py)
            blocks.run(lambda a, b: np.matmul(Mt, self._headT[:, a:b], out=out[:, a:b]))
            return out.T
        out = np.empty((Mt.shape[0], self.E))
        for a, b, blk in self.blocks():
            np.matmul(Mt, blk.T, out=out[:, a:b])
        return out.T

    def tdot(self, W):
        """W^T Phi, (m, P), for W (entries, m)."""
        if self.Phi is not None:
            blocks = rowsplit.active(self.E)
            if blocks is None:
                m = W.shape[1]
                if m <= MATVEC_MAX_COLS and self._headT.size <= MATVEC_MAX_SIZE:
                    Wt = np.ascontiguousarray(W.T)
                    return np.matmul(self._headT, Wt[:, :, None]).reshape(m, self.layout.P)
                return W.T @ self.Phi
            return blocks.sum(lambda a, b: W[a:b].T @ self.Phi[a:b])   # (rows over the cores)
        S = np.zeros((W.shape[1], self.layout.P))
        for a, b, blk in self.blocks():
            S += W[a:b].T @ blk
        return S

    def softmax_pass(self, Mt, out=None):
        """One pass over the kept rows for a mixture's assignments z (inference/zstep.py),
        for coefficients ``Mt`` (K, P) of Phi's columns (E[log pi] folded into
        the constant column): lam = Phi Mt^T, the log-sum-exp and the softmax p of its rows,
        the statistics p^T Phi (K, P) and the counts sum_n p (K,). The rows go in blocks
        of ``PASS_ROWS``, each block's columns of Phi read once for both products while
        they are in cache (``dot`` and ``tdot`` each stream the whole of Phi from memory),
        the blocks taken in turn by the active :class:`~blrgraph.rowsplit.RowSplit`'s
        threads (``Blocks.each``), their sums added in row order: the numbers of one
        thread's pass, bit for bit. Each row has its own shift (its largest lam).

        Returns (lam, lse, p, S, counts, bounded): lam and p (entries, K) are transposes of
        C-ordered (K, entries) arrays (``out``: those two and lse's (entries,) array to
        write into; else new ones); ``bounded``: every entry of lam is finite by a bound
        on |lam| (the largest |Phi| per column, kept, times |Mt|); when False, the caller
        tests lam itself (zstep.py: inference.blr's finiteness test)."""
        if self.Phi is None:
            raise ValueError("FlatStats.softmax_pass needs every row kept (self.Phi)")
        K, E = Mt.shape[0], self.E
        H = self._headT
        if self._colmax is None:
            colmax = np.zeros(H.shape[0])
            for a in range(0, E, _ROWS_PER_CHUNK):
                np.maximum(colmax, np.maximum.reduce(np.abs(H[:, a:a + _ROWS_PER_CHUNK]), axis=1),
                           out=colmax)
            self._colmax = colmax
        lam, p, lse = (np.empty((K, E)), np.empty((K, E)), np.empty(E)) if out is None else out

        def block(i, j, out=None):
            Hb, L, q = H[:, i:j], lam[:, i:j], p[:, i:j]
            np.matmul(Mt, Hb, out=L)
            m = np.maximum.reduce(L, axis=0)
            np.subtract(L, m, out=q)
            np.exp(q, out=q)
            s = np.add.reduce(q, axis=0)
            np.divide(q, s, out=q)
            np.log(s, out=s)
            np.add(s, m, out=lse[i:j])
            return np.matmul(q, Hb.T, out=out)

        blocks = rowsplit.active(E) if E * K * (2 * H.shape[0] + 70) >= PASS_SPLIT_WORK \
            else None
        S = np.zeros((K, H.shape[0]))
        with np.errstate(invalid="ignore", over="ignore"):   # (finite decides below)
            bound = float(np.maximum.reduce(np.abs(Mt) @ self._colmax))   # (nan: no bound)
            if blocks is None:
                tmp = np.empty_like(S)
                for i in range(0, E, PASS_ROWS):
                    S += block(i, min(E, i + PASS_ROWS), tmp)
            else:   # (the blocks' statistics added in row order: the sum of one thread's)
                for Sb in blocks.each(block, E, PASS_ROWS):
                    S += Sb
        return lam.T, lse, p.T, S, S[:, 0].copy(), bound < _NO_OVERFLOW   # (counts: column 0)

    @staticmethod
    def fits(family, value, plates):
        """Whether Phi of these data is worth using (dense statistics; within MAX_BYTES
        unless STREAM lets larger data rebuild their rows in chunks)."""
        if not family.dense_stats:
            return False
        E = int(np.prod(plates, dtype=int))
        if E == 0:
            return False
        if STREAM:
            return True
        first = np.asarray(value).reshape((E,) + np.shape(value)[len(plates):])[:1]
        P = Layout(family, [np.shape(t)[1:] for t in family.suff_stats(first)], True).P
        return E * P * 8 <= MAX_BYTES
    def coefficients(self, nat, elp, lead):
        """Coefficients of Phi's columns, shape lead + (P,), from E[eta] and E[A] with plates
        ``lead`` (e.g. (K,)): E[log p(x_n | theta)] = Phi[n] @ coefficients."""
        if not self.layout.has_logh:   # log h - E[A] (the same number as -E[A] + log h)
            lead = tuple(lead)
            c0 = np.subtract(self.logh_value, elp)
            if c0.shape != lead:
                c0 = np.broadcast_to(c0, lead)
            return self.layout.flatten_natural(nat, lead, c0.reshape(lead + (1,)))
        coef = self.layout.flatten_natural(nat, lead)
        coef[..., 0] = -np.asarray(elp, dtype=float)   # (broadcast to lead on assignment)
        coef[..., 1] = 1.0
        return coef
