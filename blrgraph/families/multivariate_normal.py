"""Multivariate normal family N(x | m, L^{-1}) with mean m and precision matrix L.

Parameterisation (Bishop 2006, §2.3; docs/math.md §2.2): ``mean`` of shape
plates + (D,), ``precision`` L = Sigma^{-1} of shape plates + (D, D), SPD.

Exponential-family form (h = 1)::

    T(x) = (x, x x^T),    lam = (L m, -L/2),    event_ndims = (1, 2)
    A(lam) = m^T L m / 2 - log|L| / 2 + (D/2) log 2 pi
           = -lam1^T lam2^{-1} lam1 / 4 - log|-2 lam2| / 2 + (D/2) log 2 pi
    mu = (m, Sigma + m m^T)

The matrix component's gradient treats all D^2 entries as independent
(docs/math.md §0); ``lam2`` is symmetrised before use. All linear algebra goes
through one batched Cholesky factorisation of L per call.
"""
from __future__ import annotations

import math

import numpy as np

from .base import (ExponentialFamily, UnpackMemo, _fsum, broadcast_nat, check_spd, einsum,
                   object_array, vdot)
from ._spd import (_chol, _chol_inv_factor, _chol_logdet, _inv_from_chol, _spd_factor,
                   _spd_inv, _sym, _sym_m2)
from .wishart import (LOG2PI, _check_broadcast, _matvec, _outer, _prefix, _quad, _rng,
                      _size_tuple, _trace_prod)


class MultivariateNormal(UnpackMemo, ExponentialFamily):
    """N(x | mean, precision^{-1}): ``MultivariateNormal().natural_from_params(mean, precision)``.

    See the module docstring (and docs/math.md §2.2) for the natural parameters.
    Extra method: :meth:`cov`.
    """

    name = "MultivariateNormal"
    memos = UnpackMemo.memos + ("_sums_memo",)   # (shared_sums)
    locational = True
    param_names = ("mean", "precision")
    event_ndims = (1, 2)
    value_ndim = 1
    symmetric_stats = (1,)  # x x^T
    value_outer_stats = (0, 1)  # T = (x, x x^T): graph/suffstats.py builds them from x directly
    #: a value's coordinates may be missing one by one (observe(X, mask) with a mask of X's
    #: shape): the missing ones are latent, see :meth:`complete_cells`
    cell_masks = True

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        return np.zeros(x.shape[:-1], bool), "real vectors"

    def placeholder(self, event_shape):
        return np.zeros(event_shape)

    def complete_cells(self, x, cells, nat):
        """Expected statistics of partly observed vectors, their missing coordinates
        latent (Ghahramani & Jordan 1994; docs/api.md "Masks").

        ``x`` (plates + (D,)) holds the observed coordinates where ``cells`` is True;
        ``nat`` = (eta1, eta2) are the natural parameters E[eta] that the vector's factor
        gives it (plates broadcasting with x's). The optimal q(x_m) is proportional to
        exp(<eta, T(x)>) with x_o fixed: Gaussian with precision P = -2 eta2[m, m] and
        mean P^-1 (eta1[m] + 2 eta2[m, o] x_o). Returns (E[x], E[x x^T], H[q(x_m)]) over
        the broadcast plates; complete entries give (x, x x^T, 0). The inverses are
        computed once per missing pattern (and per entry of ``nat``), then the rows of
        that pattern are filled in one vectorised step."""
        eta1, eta2 = (np.asarray(a, dtype=float) for a in nat)
        x = np.asarray(x, dtype=float)
        cells = np.asarray(cells, dtype=bool)
        D = x.shape[-1]
        B = np.broadcast_shapes(x.shape[:-1], eta1.shape[:-1], eta2.shape[:-2])
        xf = np.where(cells, x, 0.0)
        Ex = np.array(np.broadcast_to(xf, B + (D,)))
        H = np.zeros(B)
        cov = np.zeros(B + (D, D))
        inc = ~cells.all(axis=-1)
        if inc.any():
            cells_B = np.broadcast_to(cells, B + (D,))
            inc_B = np.broadcast_to(inc, B)
            for pattern in np.unique(cells[inc], axis=0):
                m, o = np.flatnonzero(~pattern), np.flatnonzero(pattern)
                sel = inc_B & (cells_B == pattern).all(axis=-1)
                P = -2.0 * eta2[..., m[:, None], m[None, :]]       # nat plates, once per pattern
                c = _chol(_sym(P), "the precision of the missing coordinates", self.name)
                Pinv, _ = _inv_from_chol(c)
                logdet = _chol_logdet(c)
                rows = Ex[sel]                                           # (n, D) selected
                e2 = np.broadcast_to(eta2[..., m[:, None], o[None, :]], B + (len(m), len(o)))[sel]
                h = np.broadcast_to(eta1[..., m], B + (len(m),))[sel] + \
                    2.0 * einsum("nij,nj->ni", e2, rows[:, o])
                Pi = np.broadcast_to(Pinv, B + (len(m), len(m)))[sel]
                rows[:, m] = einsum("nij,nj->ni", Pi, h)
                Ex[sel] = rows
                blk = cov[sel]
                blk[:, m[:, None], m[None, :]] = Pi
                cov[sel] = blk
                H[sel] = np.broadcast_to(0.5 * len(m) * (1.0 + LOG2PI) - 0.5 * logdet, B)[sel]
        Exx = einsum("...i,...j->...ij", Ex, Ex) + cov
        return Ex, Exx, H

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, mean, precision, where=None):
        prefix = _prefix(self, where)
        mean = np.asarray(mean, dtype=float)
        if mean.ndim < 1:
            raise ValueError(f"{prefix}: mean must have a trailing event axis of length D "
                             f"(shape (..., D)), got a scalar; pass e.g. np.atleast_1d(mean)")
        if not np.all(np.isfinite(mean)):
            raise ValueError(f"{prefix}: mean must be finite")
        precision = check_spd("precision", precision, prefix)
        if mean.shape[-1] != precision.shape[-1]:
            raise ValueError(f"{prefix}: mean has D = {mean.shape[-1]} but precision is "
                             f"{precision.shape[-1]}x{precision.shape[-1]}; pass mean of shape "
                             f"(..., D) and precision of shape (..., D, D) with the same D")
        _check_broadcast(prefix, (mean.shape[:-1], "mean"), (precision.shape[:-2], "precision"))
        return mean, precision

    def natural_from_params(self, mean, precision):
        mean = np.asarray(self._minus_c(mean), dtype=float)
        precision = np.asarray(precision, dtype=float)
        d = precision.shape[-1]
        plates = np.broadcast_shapes(mean.shape[:-1], precision.shape[:-2])
        mean = np.broadcast_to(mean, plates + (d,))
        precision = np.broadcast_to(precision, plates + (d, d))
        return _matvec(precision, mean), -0.5 * precision

    # _unpack(nat) -> (m, L, Sigma, log|L|, c) with c c^T = L (None when _spd_factor kept
    # none: formed when sampling), read-only (UnpackMemo: the last q is remembered). When
    # every plate entry has the same precision (the scores of probabilistic PCA without
    # missing cells: I + sum_d E[tau] E[w_d w_d^T] for every row) it is factorised once; L,
    # Sigma, log|L| and c are then broadcast views.

    def _unpack_new(self, nat):
        lam1, lam2 = broadcast_nat(nat, self.event_ndims)
        plates = lam2.shape[:-2]
        one = _shared_matrix(lam2)
        prec = _sym_m2(lam2 if one is None else one)
        if one is None:
            cov, logdet, c = _spd_factor(prec, "-2 * lam2 (the precision)", self.name)
            return _matvec(cov, lam1), prec, cov, logdet, c
        c = _chol(prec, "-2 * lam2 (the precision)", self.name, symmetric=True)
        cov = _spd_inv(c)
        logdet = _chol_logdet(c)
        if type(lam1) is not np.ndarray or lam1.shape[:-1] != plates:
            lam1 = np.broadcast_to(lam1, plates + cov.shape[-1:])
        m = lam1 @ cov   # Sigma symmetric: one GEMM
        return m, _spread(prec, plates), _spread(cov, plates), _spread(logdet, plates), \
            _spread(c, plates)

    def shared_covariance(self, nat):
        """(E[x], Sigma) when a stack of two or more entries has one covariance Sigma for
        every entry (the scores of probabilistic PCA without missing cells; see
        :meth:`_unpack`), so that E[x x^T] = Sigma + E[x] E[x]^T can be used without
        building the (entries, D, D) stack (docs/latent_products.md); Sigma with size-1
        plate axes. None otherwise."""
        m, _, cov, _, _ = self._unpack(nat)
        k = cov.ndim - 2
        if k == 0 or math.prod(cov.shape[:k]) <= 1 or (any(cov.strides[:k]) and not all(
                st == 0 or n == 1 for st, n in zip(cov.strides[:k], cov.shape[:k]))):
            return None
        return m, cov[(slice(0, 1),) * k]

    def shared_sums(self, nat):
        """(E[V] as (n, D), Sigma (D, D), S = sum_n E[v_n v_n^T] = n Sigma + E[V]^T E[V])
        for a q of :meth:`shared_covariance` (else None), once per q: the product's plan
        (graph/bilinear.py) and the compiled sweep's ELBO term read the same S."""
        memo = self.__dict__.get("_sums_memo")
        if memo is not None and memo[0] is nat[0] and memo[1] is nat[1]:
            return memo[2]
        parts = self.shared_covariance(nat)
        out = None
        if parts is not None:
            m, cov = parts
            D = m.shape[-1]
            V = m.reshape(-1, D)
            cov = cov.reshape(D, D)
            S = V.shape[0] * cov + V.T @ V
            S.flags.writeable = False
            out = (V, cov, S)
        self._sums_memo = (nat[0], nat[1], out)
        return out

    def params_from_natural(self, nat):
        m, prec, _, _, _ = self._unpack(nat)
        return {"mean": np.array(self._plus_c(m)), "precision": np.array(prec)}

    def centre(self, x):
        return self._minus_c(x)

    # ---- exponential-family functions (of the centred variable) ---------------
    def suff_stats(self, x):
        x = np.asarray(x, dtype=float)
        return x, _outer(x)

    def log_partition(self, nat):
        m, _, _, logdet_prec, _ = self._unpack(nat)
        lam1 = nat[0] if type(nat[0]) is np.ndarray and nat[0].shape == m.shape else \
            np.broadcast_to(nat[0], m.shape)
        d = m.shape[-1]
        return 0.5 * np.add.reduce(lam1 * m, axis=-1) - 0.5 * logdet_prec + 0.5 * d * LOG2PI

    def log_partition_total(self, nat):
        """A(lam) summed over the plate entries, a float (the compiled sweep's ELBO term):
        lam1 . m / 2 by one product, the log-determinants by one sum."""
        m, _, _, logdet_prec, _ = self._unpack(nat)
        lam1 = nat[0]
        if type(lam1) is np.ndarray and lam1.shape == m.shape and type(m) is np.ndarray:
            s = float(vdot(lam1, m))
        else:
            s = float(np.add.reduce(np.broadcast_to(lam1, m.shape) * m, axis=None))
        d = m.shape[-1]
        return 0.5 * s - 0.5 * _fsum(logdet_prec) + 0.5 * d * LOG2PI * (m.size // d)

    def mean_params(self, nat):
        m, _, cov, _, _ = self._unpack(nat)
        mm = einsum("...i,...j->...ij", m, m)   # a new array: Sigma added in place
        if mm.shape != cov.shape and mm.shape != np.broadcast_shapes(mm.shape, cov.shape):
            return m, cov + mm
        mm += cov       # (not cov + mm: a broadcast Sigma against the stack is 2-3x slower)
        return m, mm

    def entropy(self, nat):
        """H = (D/2)(1 + log 2 pi) - log|L| / 2."""
        m, _, _, logdet_prec, _ = self._unpack(nat)
        d = m.shape[-1]
        return 0.5 * d * (1.0 + LOG2PI) - 0.5 * logdet_prec

    def entropy_total(self, nat):
        """H summed over the plate entries, a float: n H of one entry when they share one
        precision (a stride-0 log-determinant, :meth:`_unpack`)."""
        m, _, _, ld, _ = self._unpack(nat)
        d = m.shape[-1]
        if ld.ndim and not any(ld.strides):
            return ld.size * (0.5 * d * (1.0 + LOG2PI) - 0.5 * float(ld[(0,) * ld.ndim]))
        return float(np.add.reduce(0.5 * d * (1.0 + LOG2PI) - 0.5 * ld, axis=None))

    def kl(self, nat1, nat2):
        """KL = [tr(L2 S1) + (m2-m1)^T L2 (m2-m1) - D + log|L1| - log|L2|] / 2."""
        m1, _, cov1, ld1, _ = self._unpack(nat1)
        m2, prec2, _, ld2, _ = self._unpack(nat2)
        d = m1.shape[-1]
        diff = m2 - m1
        return 0.5 * (_trace_prod(prec2, cov1) + _quad(prec2, diff) - d + ld1 - ld2)

    def kl_rounding(self, nat1, nat2, unit):
        """How far rounding alone can move :meth:`kl` (``unit``: the rounding unit allowed
        per unit of magnitude): ``unit`` x the magnitude of its terms, plus the KL that the
        rounding of the means alone gives, (unit^2 / 2) |lam1|^2 tr(Sigma) for each q
        (m = Sigma lam1 keeps lam1's relative rounding only up to L's condition). Far
        tighter than the magnitude of the Bregman form's pieces, which is unit x m^T L m: a
        q of precision 1e23 (a first step from a vague prior) would hide a KL of 1e8."""
        m1, _, cov1, ld1, _ = self._unpack(nat1)
        m2, prec2, cov2, ld2, _ = self._unpack(nat2)
        d = m1.shape[-1]
        diff = m2 - m1
        terms = (np.abs(_trace_prod(prec2, cov1)) + np.abs(_quad(prec2, diff)) + d
                 + np.abs(ld1) + np.abs(ld2))
        l1, l2 = np.asarray(nat1[0], dtype=float), np.asarray(nat2[0], dtype=float)
        tr1 = np.trace(cov1, axis1=-2, axis2=-1)
        tr2 = np.trace(cov2, axis1=-2, axis2=-1)
        with np.errstate(over="ignore"):   # |lam1| sqrt(tr Sigma) is m's size in sds
            r1 = np.linalg.norm(l1, axis=-1) * np.sqrt(tr1)
            r2 = np.linalg.norm(l2, axis=-1) * np.sqrt(tr2)
        means = 0.5 * unit * unit * (r1 * r1 + r2 * r2)
        return unit * terms + means

    def sample(self, nat, rng=None, size=None):
        """x = m + c^{-T} z with c c^T = L; shape size + plates + (D,)."""
        rng = _rng(rng)
        m, prec, _, _, c = self._unpack(nat)
        if c is None:   # (_spd_factor kept none)
            c = _chol(prec, "-2 * lam2 (the precision)", self.name, symmetric=True)
        z = rng.standard_normal(_size_tuple(size) + m.shape)
        # one factor for the entries that share it (stride 0: a shared precision)
        one = tuple(slice(0, 1) if st == 0 and n > 1 else slice(None)
                    for st, n in zip(c.strides[:-2], c.shape[:-2]))
        return self._plus_c(m + einsum("...ji,...j->...i", _chol_inv_factor(c[one]), z))

    def mean(self, nat):
        return np.array(self._plus_c(self._unpack(nat)[0]))

    def cov(self, nat):
        """Covariance matrix Sigma = L^{-1}, shape plates + (D, D)."""
        return np.array(self._unpack(nat)[2])

    def var(self, nat):
        """Marginal variances diag(Sigma), shape plates + (D,)."""
        return np.diagonal(self._unpack(nat)[2], axis1=-2, axis2=-1).copy()

    def mode(self, nat):
        return self.mean(nat)

    def centred_point_value(self, nat):
        return self._unpack(nat)[0]

    def precision_is_pd(self, nat):
        # the factorisation of q (equal precisions, PCA's scores: one), kept by
        # UnpackMemo: the new q's moments then reuse this Cholesky factor
        try:
            self._unpack(nat)
        except ValueError:   # (_chol: not positive definite)
            return False
        return True

    def to_scipy(self, nat):
        from scipy import stats
        m, _, cov, _, _ = self._unpack(nat)
        m = np.broadcast_to(self._plus_c(m), m.shape)
        plates = m.shape[:-1]
        if plates == ():
            return stats.multivariate_normal(mean=m, cov=cov)
        return object_array(plates, lambda i: stats.multivariate_normal(mean=m[i], cov=cov[i]))


def _spread(a, lead):
    """``np.broadcast_to(a, lead + a.shape)`` in one call (a read-only view with stride 0
    along the ``lead`` axes) for a C-contiguous ``a``; ``np.broadcast_to`` otherwise."""
    if type(a) is not np.ndarray:
        a = np.asarray(a)     # (a number: a 0-d array)
    if not a.flags.c_contiguous:
        return np.broadcast_to(a, lead + a.shape)
    v = np.ndarray(lead + a.shape, a.dtype, a, 0, (0,) * len(lead) + a.strides)
    v.flags.writeable = False
    return v


def _shared_matrix(a):
    """The one (D, D) matrix of a stack ``a`` (plates + (D, D)) whose plate entries are all
    equal (None when they are not, or when there is at most one entry)."""
    k = a.ndim - 2
    if math.prod(a.shape[:-2]) <= 1:
        return None
    first = a[(0,) * k]
    if not any(a.strides[:k]) or all(st == 0 or n == 1 for st, n in zip(a.strides[:k], a.shape[:k])):
        return first   # a broadcast view of one matrix: equal without looking
    last = a[(-1,) * k]
    if last[0, 0] != first[0, 0] or last[-1, -1] != first[-1, -1]:
        return None    # cheap exits for distinct matrices: two entries, then the last matrix
    if not np.logical_and.reduce(last == first, axis=None):
        return None
    if not np.array_equal(a, np.broadcast_to(first, a.shape)):
        return None
    return first
