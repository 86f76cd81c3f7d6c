"""The plan of ``Dot(A, B)`` of two vector operands whose plate axes are disjoint
(probabilistic PCA: loadings W with plates (D, 1), scores x with plates (N,)).

Each plate axis of the product then belongs to one operand, so the product's cells form
an (n_1, n_2) matrix (the first operand's entries by the second's, in the order their axes
come) and everything ``Dot`` sends or sums is a matrix product (docs/latent_products.md,
"The plan of a product"):

    message to the first operand:    (C E[V_2],  c2 S_2)      C: the (n_1, n_2) matrix of c1
    message to the second operand:   (C^T E[V_1], c2 S_1)
    sum_cells c y E[a]    = c sum((Y E[V_2]) * E[V_1])
    sum_cells c E[a^2]    = c <S_1, S_2>

with E[V_i] the (n_i, K) means and S_i = sum_n E[v_n v_n^T] (n Sigma + E[V]^T E[V] when
the entries share one covariance), for one coefficient c2 (c) for every cell (one noise
precision, no mask). The plan is built once per plate layout; each operand's (E[V], S) once
per q (keyed on the identity of its natural parameters, which are replaced, never modified),
and the product of the data with an operand's means once per (data, q): a PCA sweep's
noise-precision message and its ELBO term share it. Any other layout or coefficient is
``None`` here and ``Dot`` takes its general contractions (``plates.wsum``).
"""
from __future__ import annotations

import weakref

import numpy as np

from ..families.base import vdot as _vdot   # (np.vdot without its Python dispatcher)


#: {Dot: its plan}, kept outside the node (a pickled model carries no operand's q)
_PLANS = weakref.WeakKeyDictionary()


def plan_of(dot):
    """The :class:`Bilinear` plan of ``dot`` for its operands' current plates, or None
    when their plate axes are not disjoint (or follow each other interleaved)."""
    pa, pb = (tuple(p.plates) for p in dot.operands)
    key = (tuple(dot.plates), pa, pb)
    plan = _PLANS.get(dot)
    if plan is None or plan.key != key:
        plan = Bilinear(key)
        _PLANS[dot] = plan
    return plan if plan.ok else None


class Bilinear:
    """The layout of a product of two vector operands as an (n_1, n_2) matrix of cells,
    with its operands' per-q statistics (:meth:`stats`)."""

    def __init__(self, key):
        self.key = key
        full, pa, pb = key
        n = len(full)
        pa, pb = (1,) * (n - len(pa)) + pa, (1,) * (n - len(pb)) + pb
        ja = [j for j in range(n) if pa[j] > 1]
        jb = [j for j in range(n) if pb[j] > 1]
        self.ok = not set(ja) & set(jb) and \
            (not ja or not jb or max(ja) < min(jb) or max(jb) < min(ja))
        self.order = (0, 1) if not jb or not ja or (ja and max(ja) < min(jb)) else (1, 0)
        self.sizes = (int(np.prod(pa, dtype=int)), int(np.prod(pb, dtype=int)))
        self.full = tuple(full)
        self._stats = [None, None]       # per operand: (state, E[V] (n, K), S (K, K))
        self._data = [None, None]        # per operand: (y, state, y contracted with E[V])
        self._fresh = 0                  # the operand whose q was seen new most recently

    def cells(self, c):
        """A cell array (broadcastable to the product's plates) as the (n_1, n_2) matrix."""
        i, j = self.order
        if type(c) is not np.ndarray or c.shape != self.full:
            c = np.broadcast_to(c, self.full)
        return c.reshape(self.sizes[i], self.sizes[j])

    def stats(self, dot, i):
        """(E[V_i] as (n_i, K), S_i = sum_n E[v_n v_n^T]) of operand i, once per q."""
        node = dot.operands[i]
        state = _state(node)
        got = self._stats[i]
        if got is not None and got[0][0] is state[0] and got[0][1] == state[1]:
            return got[1], got[2]
        sums = _shared(node)
        n = self.sizes[i]
        if sums is not None and sums[0].shape[0] == n:
            m, _, S = sums   # (the family's, once per q: the compiled ELBO term reads S too)
        elif sums is not None:   # (q's entries broadcast along a plate axis of the node)
            m, cov = node.family.shared_covariance(node.nat)
            m = np.broadcast_to(m, tuple(node.plates) + m.shape[-1:]).reshape(n, -1)
            S = n * sums[1] + m.T @ m
        else:
            m, mm = node.moments()
            K = m.shape[-1]
            m = np.broadcast_to(m, tuple(node.plates) + (K,)).reshape(n, K)
            S = np.broadcast_to(mm, tuple(node.plates) + (K, K)).reshape(n, K * K).sum(0)
            S = S.reshape(K, K)
        self._stats[i] = (state, m, S)
        self._fresh = i
        return m, S

    def message(self, dot, c1, c2, i):
        """The message (sum c1 E[other], c2 S_other) to operand i, with c2 one number; the
        product of c1 with the other operand's means is kept (per c1 and q), where
        :meth:`sums` finds it when told c1 = c y (``scaled``)."""
        other = 1 - i
        m, S = self.stats(dot, other)
        plates = tuple(dot.operands[i].plates)
        return self._product(c1, other, m).reshape(plates + m.shape[-1:]), \
            _spread(c2 * S, plates)

    def _product(self, y, j, m):
        """Y E[V_j] (a cell array as the cells' matrix, contracted with operand j's means
        m), kept per array and q of operand j."""
        state = self._stats[j][0][0]
        got = self._data[j]
        if got is not None and got[0] is y and got[1] is state:
            return got[2]
        Y = self.cells(y)
        prod = Y @ m if self.order[1] == j else Y.T @ m
        self._data[j] = (y, state, prod)
        return prod

    def sums(self, dot, y, second, scaled=None):
        """(sum_cells y E[a], sum_cells E[a^2]) (None for an absent y; second=False: None).
        ``scaled``: (c, c1) with c1 = c y for a number c != 0 (a message's coefficients,
        kept by the data's factor): a kept product of c1 with an operand's means then
        gives the first sum as <c1 E[V_j], E[V_i]> / c, without a product of y."""
        (m0, S0), (m1, S1) = self.stats(dot, 0), self.stats(dot, 1)
        s1 = None if y is None else self._first_sum(dot, y, (m0, m1), scaled)
        s2 = float(_vdot(S0, S1)) if second else None
        return s1, s2

    def _first_sum(self, dot, y, means, scaled=None):
        """sum((Y E[V_j]) * E[V_i]): a kept product of Y (or of c1 = c Y, divided by c) with
        the means of either operand at its current q, else Y times the means of the
        operand whose q is newest (the other operand is the next to change)."""
        for j in (self._fresh, 1 - self._fresh):
            got = self._data[j]
            if got is None or got[1] is not self._stats[j][0][0]:
                continue
            if got[0] is y:
                return float(_vdot(got[2], means[1 - j]))
            if scaled is not None and got[0] is scaled[1]:
                return float(_vdot(got[2], means[1 - j])) / scaled[0]
        j = self._fresh
        return float(_vdot(self._product(y, j, means[j]), means[1 - j]))


def _spread(a, lead):
    """``np.broadcast_to(a, lead + a.shape)`` of a new C-contiguous array ``a`` in one
    call: a read-only view with stride 0 along the ``lead`` axes (one K x K precision
    for every entry)."""
    v = np.ndarray(lead + a.shape, a.dtype, a, 0, (0,) * len(lead) + a.strides)
    v.flags.writeable = False
    return v


def _state(node):
    """What an operand's moments are a function of (as ``deterministic._operand_state``)."""
    if node.stochastic and not node.observed:
        return node.nat, bool(node.point)
    return node.moments(), None


def _shared(node):
    """(E[V] (entries, K), Sigma, S) of a latent q whose entries share one covariance
    (the family's ``shared_sums``), else None."""
    if node.stochastic and not node.observed and not node.point and node.nat is not None:
        f = getattr(node.family, "shared_sums", None)
        if f is not None:
            return f(node.nat)
    return None
