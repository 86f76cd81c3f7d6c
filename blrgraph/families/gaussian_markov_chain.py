"""Gaussian Markov chain: a Gaussian over a whole sequence x_1..x_T (x_t in R^D)
whose precision is block tridiagonal (the posterior of a linear-Gaussian
state-space model; docs/kalman.md).

The last plate axis is time (length T); the axes before it are independent
sequences. Exponential-family form (h = 1), per step t (0-based below)::

    T(x) = (x_t, x_t x_t^T, x_t x_{t-1}^T)        event_ndims = (1, 2, 2)
    lam  = (h_t, -J_tt / 2, C_t)                  C_0 is unused (kept 0)

so that <lam, T(x)> = sum_t h_t.x_t - x_t^T J_tt x_t / 2 + x_t^T C_t x_{t-1}, i.e.
q(x) prop. to exp(-x^T J x / 2 + h^T x) with diagonal blocks J_tt and off-diagonal
blocks J_{t,t-1} = -C_t.

Every quantity is computed by eliminating x_1, x_2, ... in turn (the
information-form Kalman filter; a block-tridiagonal Cholesky factorisation):

    Jf_0 = J_00,  hf_0 = h_0
    Jf_t = J_tt - C_t Jf_{t-1}^{-1} C_t^T,   hf_t = h_t + C_t Jf_{t-1}^{-1} hf_{t-1}

then backwards (the RTS smoother: x_{t-1} | x_t ~ N(Jf_{t-1}^{-1}(hf_{t-1} + C_t^T x_t),
Jf_{t-1}^{-1})):

    m_{T-1} = Jf^{-1} hf,  S_{T-1} = Jf^{-1};  G = Jf_{t-1}^{-1} C_t^T
    m_{t-1} = Jf_{t-1}^{-1} hf_{t-1} + G m_t,   S_{t-1} = Jf_{t-1}^{-1} + G S_t G^T,
    Cov(x_t, x_{t-1}) = S_t G^T.

The log partition, the entropy and log|J| = sum_t log|Jf_t| split into one term
per step, so every per-entry result has shape plates (sequences x T) and sums to
the sequence's value: A_t = hf_t^T Jf_t^{-1} hf_t / 2 - log|Jf_t| / 2 + (D/2) log 2 pi,
H_t = (D/2)(1 + log 2 pi) - log|Jf_t| / 2. Cost O(T D^3) per sequence, vectorised
over the sequences, one Python step per time step.
"""
from __future__ import annotations

import numpy as np

from .base import ExponentialFamily, broadcast_nat, object_array
from ._spd import _sym
from .wishart import LOG2PI, _matvec, _outer, _rng, _size_tuple


class GaussianMarkovChain(ExponentialFamily):
    """A Gaussian over sequences with a block-tridiagonal precision (see the module
    docstring). ``natural_from_params(mean0, precision0, A, noise_precision, length)``
    gives the prior of x_1 ~ N(mean0, inv(precision0)), x_t ~ N(A x_{t-1}, inv(noise_precision))."""

    name = "GaussianMarkovChain"
    param_names = ("mean0", "precision0", "A", "noise_precision")
    event_ndims = (1, 2, 2)
    value_ndim = 1

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        return np.zeros(x.shape[:-1], bool), "real state vectors"

    def placeholder(self, event_shape):
        return np.zeros(event_shape)

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, mean0, precision0, A, noise_precision, length, where=None):
        """(mean0 (..., D), precision0 (D, D), A (D, D), noise precision as a (D, D) matrix,
        length): a diagonal noise precision may be given as a number or a (D,) vector."""
        where = where or self.name
        m0, P0, A, Q = (np.asarray(a, dtype=float) for a in (mean0, precision0, A, noise_precision))
        D = m0.shape[-1] if m0.ndim else 0
        if Q.ndim <= 1:
            Q = np.broadcast_to(Q, (D,))[..., :, None] * np.eye(D)
        bad = [n for n, a in (("precision0", P0), ("A", A), ("noise_precision", Q))
               if a.shape[-2:] != (D, D)]
        if D < 1 or bad:
            raise ValueError(f"{where}: mean0 must have shape (..., D) and {', '.join(bad) or 'the '}"
                             f"matrices shape (D, D) with D = {D}")
        if not all(np.all(np.isfinite(a)) for a in (m0, P0, A, Q)):
            raise ValueError(f"{where}: the parameters must be finite")
        for n, a in (("precision0", P0), ("noise_precision", Q)):
            if np.any(np.linalg.eigvalsh(0.5 * (a + np.swapaxes(a, -1, -2))) <= 0):
                raise ValueError(f"{where}: {n} must be symmetric positive definite")
        if isinstance(length, bool) or int(length) != length or length < 1:
            raise ValueError(f"{where}: length must be an integer >= 1, got {length!r}")
        return m0, P0, A, Q, int(length)

    # a location shift c (D,) (docs/dev/numerics.md) makes this the family of x_t - c, which
    # is the same chain with mean0 - c only when A c = c (graph/centring.py checks it)
    def centre(self, x):
        return self._minus_c(x)

    def natural_from_params(self, mean0, precision0, A, noise_precision, length):
        m0 = self._minus_c(np.asarray(mean0, dtype=float))
        P0 = np.asarray(precision0, dtype=float)
        A = np.asarray(A, dtype=float)
        Q = np.asarray(noise_precision, dtype=float)
        AtQA = np.swapaxes(A, -1, -2) @ Q @ A
        return chain_natural(_matvec(P0, m0), P0, Q, Q @ A, AtQA, int(length))

    def params_from_natural(self, nat):
        m, S, cross = self._smooth(nat)[:3]
        return {"mean": self._plus_c(m), "cov": S, "cross_cov": cross}

    # ---- the filter / smoother -----------------------------------------------
    def _filter(self, nat, scan=None):
        """Forward elimination: (hf, Jf^{-1}, log|Jf|, C) per step. A long chain (or
        ``scan=True``) by the blocked scans (:func:`_filter_by_scan`); otherwise, or where the
        scan meets a singular matrix, by the recursions: one loop over T for the
        precisions (they do not depend on h), one for hf; each step a few batched matrix
        products over the sequences (time is moved to the front for the loops)."""
        h, n2, C = broadcast_nat(nat, self.event_ndims)
        T = h.shape[-2]
        if T == 0:
            raise ValueError(f"{self.name}: a chain needs at least one step")
        if use_scan(T, h.shape[-1], int(np.prod(h.shape[:-2]))) if scan is None else scan:
            out = _filter_by_scan(h, n2, C)
            if out is not None:
                return out
        if h.shape[-1] == 1:
            return self._filter_scalar(h, n2, C)
        mm, inv = np.matmul, np.linalg.inv
        Jd = _front(-(n2 + np.swapaxes(n2, -1, -2)), 2)
        Cf = _front(C, 2)
        CTf = np.swapaxes(Cf, -1, -2)
        Jf = np.empty(Jd.shape)
        Jinv = np.empty(Jd.shape)
        Jf[0] = Jd[0]
        try:
            Jinv[0] = inv(Jd[0])
            for t in range(1, T):
                Jf[t] = Jd[t] - mm(mm(Cf[t], Jinv[t - 1]), CTf[t])
                Jinv[t] = inv(Jf[t])
            c = np.linalg.cholesky(_sym(Jf))
        except np.linalg.LinAlgError:
            bad = [t for t in range(T) if not np.all(np.linalg.eigvalsh(_sym(Jf[t])) > 0)]
            raise ValueError(f"{self.name}: the filtered precision at step "
                             f"{bad[0] if bad else '?'} is not positive definite; the natural "
                             f"parameters are outside the natural parameter space") from None
        logdet = 2.0 * np.sum(np.log(np.diagonal(c, axis1=-2, axis2=-1)), axis=-1)
        Jinv = _sym(Jinv)
        CJ = mm(Cf[1:], Jinv[:-1])  # C_t Jf_{t-1}^{-1}
        hf = np.empty(Jd.shape[:-1] + (1,))
        hf[...] = _front(h, 1)[..., None]
        for t in range(1, T):
            hf[t] += mm(CJ[t - 1], hf[t - 1])
        return _back(hf[..., 0], 1), _back(Jinv, 2), _back(logdet, 0), C

    def _filter_scalar(self, h, n2, C):
        """D = 1: the same recursions in scalar arithmetic on rows over the sequences
        (Python floats for one sequence, which is several times faster than numpy's
        per-call cost on 1 x 1 matrices)."""
        T = h.shape[-2]
        jd, c, h0 = _rows(-2.0 * _front(n2[..., 0, 0], 0)), _rows(_front(C[..., 0, 0], 0)), \
            _rows(_front(h[..., 0], 0))
        jf, ji, hf = [jd[0]], [], [h0[0]]
        try:
            ji.append(1.0 / jd[0])
            for t in range(1, T):
                f = jd[t] - c[t] * c[t] * ji[t - 1]
                jf.append(f)
                ji.append(1.0 / f)
                hf.append(h0[t] + c[t] * ji[t - 1] * hf[t - 1])
        except ZeroDivisionError:
            jf.append(0.0)
        shape = h.shape[:-1]
        jf = _back(np.array(jf, dtype=float).reshape((-1,) + shape[:-1]), 0)
        if jf.shape[-1] != T or not np.all(jf > 0):
            bad = int(np.argmax(np.any(np.reshape(~(jf > 0), (-1, jf.shape[-1])), axis=0)))
            raise ValueError(f"{self.name}: the filtered precision at step {bad} is not "
                             f"positive definite; the natural parameters are outside the "
                             f"natural parameter space")
        Jinv = _back(np.array(ji, dtype=float).reshape((T,) + shape[:-1]), 0)[..., None, None]
        hf = _back(np.array(hf, dtype=float).reshape((T,) + shape[:-1]), 0)[..., None]
        return hf, Jinv, np.log(jf), C

    def _smooth_scalar(self, nat):
        hf, Jinv, logdet, C = self._filter(nat, False)
        T = hf.shape[-2]
        shape = hf.shape[:-2]
        ji, hr = _rows(_front(Jinv[..., 0, 0], 0)), _rows(_front(hf[..., 0], 0))
        c = _rows(_front(np.broadcast_to(C[..., 0, 0], shape + (T,)), 0))
        m, S, cross = [0.0] * T, [0.0] * T, [0.0] * T
        m[T - 1], S[T - 1] = ji[T - 1] * hr[T - 1], ji[T - 1]
        for t in range(T - 1, 0, -1):
            g = ji[t - 1] * c[t]
            m[t - 1] = ji[t - 1] * hr[t - 1] + g * m[t]
            cross[t] = S[t] * g
            S[t - 1] = ji[t - 1] + g * cross[t]

        def arr(v, k):  # rows (floats, or arrays with cross[0] = 0.0) -> plates + (T,) + event
            if int(np.prod(shape)) == 1:   # rows are floats
                a = np.array(v, dtype=float).reshape((T,) + shape)
            else:
                a = np.array([np.broadcast_to(x, shape) for x in v], dtype=float)
            return _back(a, 0).reshape(shape + (T,) + (1,) * k)
        return arr(m, 1), arr(S, 2), arr(cross, 2), hf, Jinv, logdet

    def _smooth(self, nat, scan=None):
        """Backward pass: means, marginal covariances, Cov(x_t, x_{t-1}) (0 at t=0),
        and the filter's hf_t, Jf_t^{-1} and log|Jf_t|; a long chain (or ``scan=True``)
        by the blocked scans (:func:`_smooth_by_scan`)."""
        h, n2, C = broadcast_nat(nat, self.event_ndims)
        if use_scan(*h.shape[-2:], int(np.prod(h.shape[:-2]))) if scan is None else scan:
            filtered = _filter_by_scan(h, n2, C)
            if filtered is not None:
                return _smooth_by_scan(*filtered)
        if np.shape(nat[0])[-1] == 1:
            return self._smooth_scalar(nat)
        hf, Jinv, logdet, C = self._filter(nat, False)
        mm = np.matmul
        Ji = _front(Jinv, 2)
        T = Ji.shape[0]
        G = mm(Ji[:-1], _front(np.swapaxes(C, -1, -2), 2)[1:])   # G_{t-1} = Jf_{t-1}^{-1} C_t^T
        GT = np.swapaxes(G, -1, -2)
        m = mm(Ji, _front(hf, 1)[..., None])                    # Jf_t^{-1} hf_t, then smoothed
        S = np.empty(Ji.shape)
        cross = np.zeros(Ji.shape)
        S[T - 1] = Ji[T - 1]
        for t in range(T - 1, 0, -1):
            m[t - 1] += mm(G[t - 1], m[t])
            cross[t] = mm(S[t], GT[t - 1])
            S[t - 1] = Ji[t - 1] + mm(G[t - 1], cross[t])
        return (_back(m[..., 0], 1), _back(_sym(S), 2), _back(cross, 2), hf, Jinv, logdet)

    # ---- exponential-family functions ---------------------------------------
    def suff_stats(self, x):
        x = np.asarray(x, dtype=float)
        lag = np.zeros(x.shape[:-1] + (x.shape[-1], x.shape[-1]))
        lag[..., 1:, :, :] = _outer(x[..., 1:, :], x[..., :-1, :])
        return x, _outer(x), lag

    def log_partition(self, nat):
        """A(lam) split per step (shape plates; the sequence's A is the sum over T)."""
        hf, Jinv, logdet, _ = self._filter(nat)
        D = hf.shape[-1]
        return 0.5 * np.einsum("...i,...ij,...j->...", hf, Jinv, hf) - 0.5 * logdet \
            + 0.5 * D * LOG2PI

    def mean_params(self, nat):
        m, S, cross = self._smooth(nat)[:3]
        lag = cross.copy()
        lag[..., 1:, :, :] += _outer(m[..., 1:, :], m[..., :-1, :])
        return m, S + _outer(m), lag

    def moments_and_entropy(self, nat):
        """(mean_params(nat), entropy(nat)) from one filter/smoother pass."""
        m, S, cross, _, _, logdet = self._smooth(nat)
        lag = cross.copy()
        lag[..., 1:, :, :] += _outer(m[..., 1:, :], m[..., :-1, :])
        D = m.shape[-1]
        return (m, S + _outer(m), lag), 0.5 * D * (1.0 + LOG2PI) - 0.5 * logdet

    def entropy(self, nat):
        """H[q] split per step: (D/2)(1 + log 2 pi) - log|Jf_t| / 2 (sums to the sequence's)."""
        _, _, logdet, _ = self._filter(nat)
        D = np.shape(nat[0])[-1]
        return 0.5 * D * (1.0 + LOG2PI) - 0.5 * logdet

    def sample(self, nat, rng=None, size=None):
        """Backward sampling: x_T ~ N(Jf^{-1} hf, Jf^{-1}), then x_{t-1} | x_t; shape
        size + plates + (D,)."""
        rng = _rng(rng)
        hf, Jinv, _, C = self._filter(nat)
        T = hf.shape[-2]
        out = np.empty(_size_tuple(size) + hf.shape)
        L = np.linalg.cholesky(_sym(Jinv))
        z = rng.standard_normal(out.shape)
        if use_scan(T, hf.shape[-1], int(np.prod(out.shape[:-2]))):
            return self._plus_c(_sample_by_scan(hf, Jinv, L, C, z))
        mean = _matvec(Jinv[..., T - 1, :, :], hf[..., T - 1, :])
        out[..., T - 1, :] = mean + _matvec(L[..., T - 1, :, :], z[..., T - 1, :])
        for t in range(T - 1, 0, -1):
            lin = hf[..., t - 1, :] + np.einsum("...ji,...j->...i", C[..., t, :, :], out[..., t, :])
            out[..., t - 1, :] = _matvec(Jinv[..., t - 1, :, :], lin) + \
                _matvec(L[..., t - 1, :, :], z[..., t - 1, :])
        return self._plus_c(out)

    def mean(self, nat):
        return self._plus_c(self._smooth(nat)[0])

    def centred_point_value(self, nat):
        return self._smooth(nat)[0]

    def cov(self, nat):
        """Marginal covariances Cov(x_t), shape plates + (D, D)."""
        return self._smooth(nat)[1]

    def cross_cov(self, nat):
        """Cov(x_t, x_{t-1}) (zero at t = 0), shape plates + (D, D)."""
        return self._smooth(nat)[2]

    def var(self, nat):
        return np.diagonal(self.cov(nat), axis1=-2, axis2=-1).copy()

    def mode(self, nat):
        return self.mean(nat)

    def to_scipy(self, nat):
        """The marginals of the steps: an object array (plates) of frozen
        scipy.stats.multivariate_normal."""
        from scipy import stats
        m, S = self._smooth(nat)[:2]
        m = self._plus_c(m)
        return object_array(m.shape[:-1], lambda i: stats.multivariate_normal(mean=m[i], cov=S[i]))


def _rows(a):
    """Rows of a (T, ...) array: Python floats when each row holds one number."""
    if a.size == a.shape[0]:
        return a.reshape(-1).tolist()
    return list(a)


def _front(a, event):
    """Move the time axis (the last plate axis) to the front."""
    return np.moveaxis(a, a.ndim - event - 1, 0)


def _back(a, event):
    """Inverse of :func:`_front`."""
    return np.moveaxis(a, 0, a.ndim - event - 1)


# ---- the blocked scans over time (long sequences) ---------------------------------------------
#: _filter and _smooth take the blocked scans for chains of at least this many steps
SCAN_MIN_STEPS = 64
#: ... and where every step's tr(J_tt) tr(Jf_t^{-1}) is at most this (:func:`_filter_by_scan`)
SCAN_MAX_COND = 1e3


def use_scan(T, D=2, n=2):
    """Whether the filter and the smoother of n chains of T steps in R^D run as blocked
    scans (:func:`riccati_scan`, :func:`affine_scan`) rather than one Python step per
    time step. One chain with D = 1 keeps the recursions in Python floats, which are
    faster up to T of some 10,000 (docs/benchmarks.md)."""
    return T >= SCAN_MIN_STEPS and (D > 1 or n > 1)


def scan_block(T):
    """The block length of the scans: about sqrt(T), so that the loop within the blocks and
    the loop over the block boundaries take about as many Python steps each."""
    return max(2, int(round(np.sqrt(T))))


#: up to this dimension the scans multiply and invert their (D, D) matrices by elementwise
#: arithmetic over all steps at once (numpy's stacked matmul and inv take about a
#: microsecond per small matrix, more than the arithmetic)
SMALL_D = 8
#: ... and for stacks of at least this many matrices (fewer: numpy's, in fewer calls)
SMALL_N = 256


def _mm(a, b):
    """a @ b for stacks of small matrices (broadcasting like np.matmul)."""
    if a.shape[-1] > SMALL_D or max(a.size, b.size) < SMALL_N * a.shape[-1] ** 2:
        return np.matmul(a, b)
    out = a[..., :, 0:1] * b[..., 0:1, :]
    for k in range(1, a.shape[-1]):
        out = out + a[..., :, k:k + 1] * b[..., k:k + 1, :]
    return out


def _inv_pd(M):
    """(M^{-1}, log|M|) of a stack of symmetric positive definite matrices: Gauss-Jordan
    elimination without pivoting, whose pivots (positive for such M) multiply to |M|;
    raises LinAlgError where a pivot is not positive (M not positive definite)."""
    D = M.shape[-1]
    if D > SMALL_D or M.size < SMALL_N * D * D:
        c = np.linalg.cholesky(_sym(M))
        return np.linalg.inv(M), 2.0 * np.sum(np.log(np.diagonal(c, axis1=-2, axis2=-1)), -1)
    A = np.array(M, dtype=float)
    logdet = np.zeros(A.shape[:-2])
    for k in range(D):
        p = A[..., k, k].copy()
        if not np.all(p > 0):
            raise np.linalg.LinAlgError("not positive definite")
        logdet += np.log(p)
        A[..., k, k] = 1.0
        A[..., k, :] /= p[..., None]
        f = A[..., :, k].copy()
        f[..., k] = 0.0
        A[..., :, k] *= (np.arange(D) == k)
        A -= f[..., :, None] * A[..., None, k, :]
    return A, logdet


def _filter_by_scan(h, n2, C):
    """:meth:`GaussianMarkovChain._filter`'s results by the scans: the precisions Jf by
    :func:`riccati_scan`, then hf_t = Phi_t hf_{t-1} + h_t with Phi_t = C_t Jf_{t-1}^{-1}
    by :func:`affine_scan`. None where a matrix is singular or a filtered precision not
    positive definite (the recursions then run, and name the step), and where some
    tr(J_tt) tr(Jf_t^{-1}) (a bound on the condition of the step) exceeds SCAN_MAX_COND:
    the scan's rounding grows with the blocks' lengths in such chains (a diffuse start
    with weak data), and the recursions keep their results to the last digits."""
    Jd, Cf = _front(-(n2 + _swap(n2)), 2), _front(C, 2)
    try:
        with np.errstate(all="ignore"):
            Jinv, logdet = _inv_pd(riccati_scan(Jd, Cf))
            cond = np.max(np.trace(Jd, axis1=-2, axis2=-1) * np.trace(Jinv, axis1=-2, axis2=-1))
            if not cond <= SCAN_MAX_COND:
                return None
            hf = affine_scan(_phi(Cf, Jinv), _front(h, 1)[..., None])[0]
    except np.linalg.LinAlgError:
        return None
    if not (np.all(np.isfinite(logdet)) and np.all(np.isfinite(hf))):
        return None
    return _back(hf[..., 0], 1), _back(_sym(Jinv), 2), _back(logdet, 0), C


def _phi(Cf, Ji):
    """Phi_t = C_t Jf_{t-1}^{-1} (0 at t = 0), time in front."""
    Phi = np.zeros(Ji.shape)
    Phi[1:] = _mm(Cf[1:], Ji[:-1])
    return Phi


def _smooth_by_scan(hf, Jinv, logdet, C):
    """:meth:`GaussianMarkovChain._smooth`'s results from the filter's: the backward map
    x_t = G_t x_{t+1} + Jf_t^{-1} hf_t + e_t, e_t ~ N(0, Jf_t^{-1}), G_t = Jf_t^{-1}
    C_{t+1}^T (0 at the last step), by :func:`affine_scan` from the last step back;
    Cov(x_t, x_{t-1}) = S_t G_{t-1}^T."""
    Ji = _front(Jinv, 2)
    G = np.zeros(Ji.shape)
    G[:-1] = _mm(Ji[:-1], _swap(_front(C, 2)[1:]))
    m, S = affine_scan(G[::-1], _mm(Ji, _front(hf, 1)[..., None])[::-1], Ji[::-1])
    m, S = m[::-1], S[::-1]
    cross = np.zeros(S.shape)
    cross[1:] = _mm(S[1:], _swap(G[:-1]))
    return (_back(m[..., 0], 1), _back(_sym(S), 2), _back(cross, 2), hf, Jinv, logdet)


def _sample_by_scan(hf, Jinv, L, C, z):
    """Backward sampling as an affine scan from the last step back: x_t = G_t x_{t+1} +
    Jf_t^{-1} hf_t + L_t z_t (L_t L_t^T = Jf_t^{-1}, G_t = Jf_t^{-1} C_{t+1}^T, 0 at the
    last step) with the draws z (size + plates + (D,)); the same draws as the loop."""
    k = z.ndim - hf.ndim                                    # the leading draw axes
    Ji, Lf = _front(Jinv, 2), _front(L, 2)
    G = np.zeros(Ji.shape)
    G[:-1] = _mm(Ji[:-1], _swap(_front(C, 2)[1:]))
    lift = (slice(None),) + (None,) * k                     # (T, 1.., plates.., D, D)
    g = _mm(Ji, _front(hf, 1)[..., None])[lift] + _mm(Lf[lift], np.moveaxis(z, -2, 0)[..., None])
    x = affine_scan(G[lift][::-1], g[::-1])[0][::-1]
    return np.moveaxis(x[..., 0], 0, -2)


def _blocks(a, b, fill=0.0):
    """(T, ...) -> a new (nb, b, ...) array, step t at [t // b, t % b]; padded with fill."""
    T = a.shape[0]
    nb = -(-T // b)
    out = np.empty((nb * b,) + a.shape[1:])
    out[:T] = a
    out[T:] = fill
    return out.reshape((nb, b) + a.shape[1:])


def _unblock(a, T):
    return a.reshape((-1,) + a.shape[2:])[:T]


def riccati_scan(Jd, C, block=None):
    """The information filter's precisions Jf_t (Jf_0 = J_00, Jf_t = J_tt - C_t
    Jf_{t-1}^{-1} C_t^T) by a blocked scan; Jd, C (T, ..., D, D), time in front.
    Eliminating the steps inside a block s..e from the block's potential leaves a
    Gaussian in its left neighbour u = x_{s-1} and its step v = x_e with precision
    [[-P, -Q^T], [-Q, R]] (over (u, v)), and taking in the next step (W = R^{-1}) gives

        R' = J_{e+1} - C_{e+1} W C_{e+1}^T,  Q' = C_{e+1} W Q,  P' = P + Q^T W Q

    (from R = J_ss, Q = C_s, P = 0; P enters with a minus sign). Every block at once, one
    loop over the block length; then Jf at the blocks' ends, one step per block (with
    the Jf of the step before the block: Jf_e = R - Q (Jf_{s-1} - P)^{-1} Q^T); then the
    same formula at every step at once. Padding after the last step (J = I, C = 0)
    changes nothing before it. Raises LinAlgError where a matrix to invert is not
    positive definite."""
    mm, sw = _mm, _swap
    T = Jd.shape[0]
    b = min(int(block) if block else scan_block(T), T)
    eye = np.eye(Jd.shape[-1])
    Jb, Cb = _blocks(Jd, b, eye), _blocks(C, b)
    Cb[0, 0] = 0.0                                  # x_{-1} does not exist
    R, Q, P = Jb, np.empty(Jb.shape), np.empty(Jb.shape)
    Q[:, 0], P[:, 0] = Cb[:, 0], 0.0
    for j in range(1, b):
        W = _inv_pd(R[:, j - 1])[0]
        CW = mm(Cb[:, j], W)
        R[:, j] -= mm(CW, sw(Cb[:, j]))
        Q[:, j] = mm(CW, Q[:, j - 1])
        P[:, j] = P[:, j - 1] + mm(mm(sw(Q[:, j - 1]), W), Q[:, j - 1])
    Jp = np.empty(Jb.shape[:1] + Jb.shape[2:])
    Jp[0] = eye                                     # any: block 0 has Q = 0
    for k in range(1, Jp.shape[0]):
        Jp[k] = _absorb(Jp[k - 1], R[k - 1, -1], Q[k - 1, -1], P[k - 1, -1])
    return _unblock(_absorb(Jp[:, None], R, Q, P), T)


def _absorb(Jp, R, Q, P):
    """Jf at a block's step from Jf of the step before the block (see :func:`riccati_scan`)."""
    return R - _mm(Q, _mm(_inv_pd(Jp - P)[0], _swap(Q)))


def affine_scan(Phi, g=None, L=None, block=None):
    """(m, S) of the recursions m_t = Phi_t m_{t-1} + g_t and S_t = Phi_t S_{t-1} Phi_t^T
    + L_t from m_{-1} = 0, S_{-1} = 0 (either g or L may be None, its result is then None)
    by a blocked scan; Phi, L (T, ..., D, D), g (T, ..., D, 1), time in front. Within a
    block the maps from the step before the block compose as (E, f, K) -> (Phi E, Phi f +
    g, Phi K Phi^T + L): every block at once, one loop over the block length; then m and
    S at the blocks' ends, one step per block; then every step at once (m = E m' + f,
    S = E S' E^T + K)."""
    mm, sw = _mm, _swap
    T = Phi.shape[0]
    b = min(int(block) if block else scan_block(T), T)
    E = _blocks(Phi, b)
    f = None if g is None else _blocks(g, b)
    K = None if L is None else _blocks(L, b)
    for j in range(1, b):
        Pj = E[:, j].copy()
        E[:, j] = mm(Pj, E[:, j - 1])
        if f is not None:
            f[:, j] += mm(Pj, f[:, j - 1])
        if K is not None:
            K[:, j] += mm(mm(Pj, K[:, j - 1]), sw(Pj))
    nb = E.shape[0]
    m0 = None if f is None else np.zeros(f.shape[:1] + f.shape[2:])
    S0 = None if K is None else np.zeros(K.shape[:1] + K.shape[2:])
    for k in range(1, nb):                          # m0[k], S0[k]: at the end of block k - 1
        Ek = E[k - 1, -1]
        if f is not None:
            m0[k] = mm(Ek, m0[k - 1]) + f[k - 1, -1]
        if K is not None:
            S0[k] = mm(mm(Ek, S0[k - 1]), sw(Ek)) + K[k - 1, -1]
    m = None if f is None else _unblock(mm(E, m0[:, None]) + f, T)
    S = None if K is None else _unblock(mm(mm(E, S0[:, None]), sw(E)) + K, T)
    return m, S


def _swap(a):
    return np.swapaxes(a, -1, -2)


def chain_natural(h0, P0, Q, QA, AtQA, T):
    """Natural parameters of the chain prior x_1 ~ N(P0^{-1} h0, P0^{-1}),
    x_t | x_{t-1} ~ N(A x_{t-1}, Q^{-1}), from (expected) h0 = P0 m0, P0, Q, Q A and
    A^T Q A (each with its own batch shape); shapes batch + (T, D[, D])."""
    h0, P0, Q, QA, AtQA = (np.asarray(a, dtype=float) for a in (h0, P0, Q, QA, AtQA))
    D = P0.shape[-1]
    batch = np.broadcast_shapes(h0.shape[:-1], P0.shape[:-2], Q.shape[:-2], QA.shape[:-2],
                                AtQA.shape[:-2])
    h = np.zeros(batch + (T, D))
    h[..., 0, :] = h0
    J = np.empty(batch + (T, D, D))
    J[..., :, :, :] = (Q + AtQA)[..., None, :, :]
    J[..., 0, :, :] = P0 + AtQA
    J[..., T - 1, :, :] = Q if T > 1 else P0
    C = np.zeros(batch + (T, D, D))
    C[..., 1:, :, :] = QA[..., None, :, :]
    return h, -0.5 * J, C
