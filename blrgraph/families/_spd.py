"""Small batched linear algebra of SPD matrices for the Gaussian and Wishart families: the
Cholesky factor and its refusals, log-determinants, inverses (LAPACK's potrf and potri on a
few matrices, closed forms for 2 x 2), and :func:`_spd_factor`, the cheapest of those ways
for one q's factorisation (docs/benchmarks.md §12.16, §12.19, §12.23; these lived in
families/wishart.py until that module outgrew the 600-line limit)."""
from __future__ import annotations

import math

import numpy as np

_sum = np.add.reduce   # (ndarray.sum without its Python wrapper: the same reduction)


def _sym(a):
    """Symmetric part of a stack of square matrices."""
    return 0.5 * (a + a.swapaxes(-1, -2))


def _sym_m2(a):
    """``_sym(-2 a)`` as -(a + a^T): the same numbers (scaling by 2 and by 1/2 is exact),
    one array operation fewer."""
    s = a + a.swapaxes(-1, -2)
    return np.negative(s, out=s)


try:   # the LAPACK gufuncs behind np.linalg.cholesky / inv (their Python wrappers check
    # the arguments and set up an error state on every call: most of a small call's time)
    from numpy.linalg import _umath_linalg as _lapack
except ImportError:   # pragma: no cover
    _lapack = None


try:   # numpy's error state as a context variable, set without np.errstate's object and
    # argument parsing (about a sixth of a small Cholesky's cost); np.errstate otherwise
    from numpy._core._ufunc_config import _extobj_contextvar as _errvar, _make_extobj
    _NO_INVALID = _make_extobj(invalid="ignore")
except Exception:   # pragma: no cover (a numpy without them, or with another signature)
    _errvar = None


def _cholesky(a):
    """np.linalg.cholesky (the same gufunc) of a float64 stack, LinAlgError when an entry is
    not positive definite (the gufunc returns that entry as NaN)."""
    if _lapack is None or type(a) is not np.ndarray or a.dtype != np.float64 or a.ndim < 2:
        return np.linalg.cholesky(a)
    if _errvar is not None:   # (np.errstate(invalid="ignore"): the same state, set directly)
        token = _errvar.set(_NO_INVALID)
        try:
            c = _lapack.cholesky_lo(a, signature="d->d")
        finally:
            _errvar.reset(token)
    else:   # pragma: no cover
        with np.errstate(invalid="ignore"):
            c = _lapack.cholesky_lo(a, signature="d->d")
    if a.size:
        # the last diagonal entry, >= 0 or nan: nan when the gufunc refused the matrix (it
        # fills it with nan) and when a nan entry went through (a nan anywhere in the lower
        # triangle reaches it: every later column's pivot reads the earlier ones); a few
        # entries summed as a list, without a reduction
        d = c[..., -1, -1]
        if math.isnan(sum(d.ravel().tolist())) if d.size <= 64 else np.isnan(d).any():
            raise np.linalg.LinAlgError("Matrix is not positive definite")
    return c


def _chol(a, what="matrix", who="family", symmetric=False):
    """Lower Cholesky factor of a stack of SPD matrices (symmetrised first, unless
    ``symmetric``: already exactly symmetric)."""
    try:
        return _cholesky(a if symmetric else _sym(a))
    except np.linalg.LinAlgError:
        raise ValueError(f"{who}: {what} is not positive definite; the natural "
                         f"parameters are outside the natural parameter space") from None


def _chol_logdet(c, scale=2.0):
    """log|A| from the Cholesky factor c of A (``scale=-2.0``: -log|A|, the same numbers
    as its negation without a second array operation)."""
    return np.multiply(_sum(np.log(c.diagonal(axis1=-2, axis2=-1)), axis=-1), scale)


def _chol_inv_factor(c):
    """c^{-1} for a stack of lower-triangular Cholesky factors (numpy's ``inv`` is LAPACK's
    gesv against the identity, as ``solve(c, I)`` is: the same numbers, without building
    and checking the broadcast identity; its gufunc called directly: a factor with a
    positive diagonal is never singular)."""
    if _lapack is None or type(c) is not np.ndarray or c.dtype != np.float64 or c.ndim < 2:
        return np.linalg.inv(c)
    return _lapack.inv(c, signature="d->d")


def _inv_from_chol(c):
    """A^{-1} = c^{-T} c^{-1} (exactly symmetric) from A = c c^T; also returns c^{-1}."""
    ci = _chol_inv_factor(c)
    return ci.swapaxes(-1, -2) @ ci, ci


#: Smallest D, and the largest number of matrices, for which :func:`_spd_inv` inverts
#: matrix by matrix with LAPACK's potri (docs/benchmarks.md §12.16: at D = 13 the batched
#: gufunc ``inv`` of c, an LU with pivoting of each triangular factor, and c^{-T} c^{-1}
#: take 56k instructions a matrix, potri about 20k with its call; below D = 6 the batched
#: path is cheaper)
POTRI_MIN_D = 8
POTRI_MAX_COUNT = 256

try:
    from scipy.linalg.lapack import dpotri as _dpotri
except ImportError:   # pragma: no cover
    _dpotri = None


def _spd_inv(c):
    """A^{-1} (exactly symmetric) from the lower Cholesky factor c of A = c c^T (a stack).

    For a few matrices of D >= ``POTRI_MIN_D``: LAPACK's potri on each (on c^T, upper, in
    Fortran order: c's own memory read as such), its triangle mirrored; else
    :func:`_inv_from_chol`'s c^{-T} c^{-1}."""
    d = c.shape[-1]
    n = c.size // (d * d) if d else 0
    if _dpotri is None or d < POTRI_MIN_D or not 0 < n <= POTRI_MAX_COUNT or \
            type(c) is not np.ndarray or c.dtype != np.float64:
        return _inv_from_chol(c)[0]
    buf = np.array(c, order="C").reshape(n, d, d)   # (a copy: potri works in place)
    inv = _potri_mirrored(buf, lower=False)   # (uplo U of c^T = the lower triangle of buf[k])
    if inv is None:   # pragma: no cover (c has a positive diagonal: never singular)
        return _inv_from_chol(c)[0]
    return inv.reshape(c.shape)


def _potri_mirrored(buf, lower):
    """LAPACK's potri on each matrix of the C-ordered stack ``buf`` (n, D, D) of Cholesky
    factors, read in Fortran order (buf[k].T: with ``lower``, L in buf[k]'s upper triangle,
    else U = L^T in its lower one), in place; the inverses' triangle mirrored by one take
    (the same numbers: a selection), as (n, D, D). None when potri reports a singular
    factor."""
    n, d = buf.shape[0], buf.shape[-1]
    flag = 1 if lower else 0
    for k in range(n):
        ak = buf[k].T
        inv, info = _dpotri(ak, flag, 1)
        if info:
            return None
        if inv is not ak:   # pragma: no cover (f2py hands back its argument when it
            ak[...] = inv   # works in place; a build that copied: the result copied back)
    memo = _MIRROR_UP if lower else _MIRROR
    idx = memo.get(d)
    if idx is None:   # (the flat index of the kept triangle's entry for each (i, j))
        i, j = np.indices((d, d))
        hi, lo = np.maximum(i, j), np.minimum(i, j)
        idx = memo[d] = ((lo * d + hi) if lower else (hi * d + lo)).ravel()
    return buf.reshape(n, d * d).take(idx, axis=1).reshape(n, d, d)


_MIRROR = {}      # {D: for each flat (i, j), the flat index of its entry in the lower triangle}
_MIRROR_UP = {}   # {D: for each flat (i, j), the flat index of its entry in the upper triangle}

try:
    from scipy.linalg.lapack import dpotrf as _dpotrf
except ImportError:   # pragma: no cover
    _dpotrf = None


#: Most matrices :func:`_spd_inv_logdet_few` takes (two f2py calls each): above about ten,
#: the Cholesky gufunc on the stack and :func:`_spd_inv` cost less (docs/benchmarks.md
#: §12.23: 10 x (8 x 8) 1.09x, 64 x (8 x 8) 1.54x the time of that path)
FEW_MAX_COUNT = 8


def _spd_inv_logdet_few(a, scale=2.0):
    """(A^{-1} exactly symmetric, ``scale``/2 log|A|) of a float64 stack of at most
    ``FEW_MAX_COUNT`` exactly symmetric D x D matrices, D >= ``POTRI_MIN_D``, by LAPACK's
    potrf and potri on each in place: one copy of the stack, no gufunc call
    (docs/benchmarks.md §12.23: for three 13 x 13 matrices the Cholesky gufunc and
    :func:`_spd_inv` take about 130k instructions, the Cholesky alone 50k, most of it the
    gufunc's copies and set-up). potrf runs on the lower triangle, as numpy's Cholesky
    does: the same factor to the bit, so a matrix is accepted or refused as by that path.
    None when the stack is not such, or a matrix is not positive definite or not finite:
    the caller then factorises as before (and refuses such a matrix with its message).
    The Cholesky factor itself is not kept (overwritten by the inverse)."""
    d = a.shape[-1]
    n = a.size // (d * d) if d else 0
    if _dpotrf is None or _dpotri is None or d < POTRI_MIN_D or \
            not 0 < n <= FEW_MAX_COUNT or type(a) is not np.ndarray or \
            a.dtype != np.float64 or a.shape[-2] != d:
        return None
    flat = a.ndim != 3   # (a stack (n, d, d) as it is: no reshapes)
    buf = np.array(a, order="C")   # (a copy: LAPACK works in place)
    if flat:
        buf = buf.reshape(n, d, d)
    for k in range(n):
        ak = buf[k].T   # A_k itself in Fortran order (symmetric): L L^T = A_k in its lower
        c, info = _dpotrf(ak, 1, 0, 1)   # triangle, i.e. L^T in buf[k]'s upper one
        if info:   # not positive definite: the caller's Cholesky refuses it
            return None
        if c is not ak:   # pragma: no cover (a build that copied)
            ak[...] = c
    logdet = _chol_logdet(buf, scale)
    if not math.isfinite(sum(logdet.tolist())):
        return None   # (a NaN or an infinity: the caller's Cholesky, as before)
    inv = _potri_mirrored(buf, lower=True)   # (A_k^{-1} in the lower triangle of buf[k].T)
    if inv is None:   # pragma: no cover (L has a positive diagonal: never singular)
        return None
    return (inv.reshape(a.shape) if flat else inv), \
        (logdet.reshape(a.shape[:-2]) if flat else logdet)


#: Largest D whose SPD matrices :func:`_spd_small` inverts in closed form (docs/benchmarks.md
#: §12.19: for ten 2 x 2 matrices the Cholesky, its inverse and log-determinant by the LAPACK
#: gufuncs take about 120k instructions, the closed form about 35k)
SMALL_D = 2
_SIGN2 = np.array([1.0, -1.0, -1.0, 1.0])   # adj([[a, b], [b, d]]) = [[d, -b], [-b, a]]
_BIG, _TINY = 1e150, 1e-290   # (_spd_small's range: products within 1e300, |A| normal)


def _spd_small(a):
    """(A^{-1}, log|A|) of a float64 stack of exactly symmetric 2 x 2 matrices in closed form:
    A^{-1} = adj(A) / |A| (exactly symmetric), |A| = a11 a22 - a21^2; None (the caller's
    Cholesky then goes the LAPACK way, refusing as before) for a stack that is not such, has
    an entry that is not finite or not within +-1e150 (no product can overflow), or is not
    positive definite with a normal |A|: a11 > 0 and |A| > 1e-290."""
    if type(a) is not np.ndarray or a.dtype != np.float64 or a.shape[-1] != 2 or \
            a.ndim < 2 or not a.flags.c_contiguous:
        return None
    n = a.size >> 2
    if n == 0:
        return None
    p = a.reshape(n, 4)
    if n <= 64:   # a few entries: the tests on their lists, without reductions
        pl = p.ravel().tolist()
        if not (-_BIG < min(pl) and max(pl) < _BIG and math.isfinite(sum(pl)) and
                min(pl[0::4]) > 0.0):
            return None
    elif not (np.maximum.reduce(np.abs(p), axis=None) < _BIG and
              np.minimum.reduce(p[:, 0]) > 0.0):
        return None
    x, y = p[:, 0], p[:, 1]
    det = x * p[:, 3]
    det -= y * y
    if not (min(det.tolist()) if n <= 64 else np.minimum.reduce(det)) > _TINY:
        return None
    inv = p[:, ::-1] * _SIGN2
    inv /= det[:, None]
    return inv.reshape(a.shape), np.log(det).reshape(a.shape[:-2])


def _spd_factor(a, what, who, scale=2.0):
    """(A^{-1} exactly symmetric, ``scale``/2 log|A|, its lower Cholesky factor or None) of
    a stack of exactly symmetric matrices, the cheapest way that applies: in closed form
    (D <= ``SMALL_D``, :func:`_spd_small`), by potrf and potri on a few matrices
    (:func:`_spd_inv_logdet_few`), else the Cholesky gufunc and :func:`_spd_inv`, which
    refuses a matrix that is not positive definite (ValueError naming ``who`` and
    ``what``). The factor is None from the first two (formed when sampling)."""
    if a.shape[-1] <= SMALL_D:
        small = _spd_small(a)
        if small is not None:
            inv, logdet = small
            if scale != 2.0:   # (scale = -2: the same numbers negated)
                np.multiply(logdet, 0.5 * scale, out=logdet)
            return inv, logdet, None
    few = _spd_inv_logdet_few(a, scale)
    if few is not None:
        return few[0], few[1], None
    c = _chol(a, what, who, symmetric=True)
    return _spd_inv(c), _chol_logdet(c, scale), c

def _spd_inv_logdet(a, what="matrix", who="family"):
    """(A^{-1}, log|A|) for a stack of SPD matrices, via Cholesky."""
    c = _chol(a, what, who)
    inv, _ = _inv_from_chol(c)
    return inv, _chol_logdet(c)
