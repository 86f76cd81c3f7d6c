"""Wishart family W(L | W, nu) over D x D symmetric positive-definite matrices.

Parameterisation (Bishop 2006, §2.3.6 and App. B; docs/math.md §2.5)::

    p(L) = B(W, nu) |L|^{(nu-D-1)/2} exp(-tr(W^{-1} L) / 2),
    log B(W, nu) = -(nu/2) log|W| - (nu D/2) log 2 - log Gamma_D(nu/2),

with scale matrix ``W`` (SPD) and degrees of freedom ``nu > D - 1``, so that
``E[L] = nu W``. This is the convention of ``scipy.stats.wishart(df=nu, scale=W)``
(BayesPy's ``V`` is ``W^{-1}``; sklearn's ``covariance_prior`` is ``W^{-1}`` too).

Exponential-family form (h = 1)::

    T(L) = (L, log|L|),    lam = (-W^{-1}/2, (nu - D - 1)/2),    event_ndims = (2, 0)
    A(lam) = (nu/2) log|W| + (nu D/2) log 2 + log Gamma_D(nu/2)
    mu = (nu W, E[log|L|]),  E[log|L|] = psi_D(nu/2) + D log 2 + log|W|

Gradients with respect to the matrix component treat all D^2 entries as
independent (docs/math.md §0); matrix natural parameters are symmetrised before use.

This module also holds the small batched linear-algebra helpers shared with the
MultivariateNormal and NormalWishart modules.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import digamma, gammaln

from .base import (ExponentialFamily, UnpackMemo, above, broadcast_nat, check_spd, einsum,
                   object_array)

LOG2 = np.log(2.0)
_LOG2 = float(LOG2)
_sum = np.add.reduce   # (ndarray.sum without its Python wrapper: the same reduction)
_all = np.logical_and.reduce   # (ndarray.all without its Python wrapper)
LOG2PI = np.log(2.0 * np.pi)
LOGPI = np.log(np.pi)


# ---------------------------------------------------------------------------
# batched helpers (private; shared by multivariate_normal / normal_wishart)
def _prefix(family, where):
    """Message prefix: "Wishart 'Lam'" (or just the family name)."""
    return f"{family.name} {where!r}" if where is not None else family.name


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
    for k in range(n):
        ck = buf[k].T
        inv, info = _dpotri(ck, 0, 1)   # uplo U of c^T = the lower triangle of buf[k]
        if info:   # pragma: no cover (c has a positive diagonal: never singular)
            return _inv_from_chol(c)[0]
        if inv is not ck:   # pragma: no cover (f2py hands back its argument when it
            ck[...] = inv   # works in place; a build that copied: the result copied back)
    idx = _MIRROR.get(d)
    if idx is None:   # (the flat index of (max(i, j), min(i, j)) for each (i, j))
        i, j = np.indices((d, d))
        idx = _MIRROR[d] = (np.maximum(i, j) * d + np.minimum(i, j)).ravel()
    # the triangle mirrored by one take (the same numbers: a selection)
    return buf.reshape(n, d * d).take(idx, axis=1).reshape(c.shape)


_MIRROR = {}   # {D: for each flat (i, j), the flat index of its entry in the lower triangle}

try:
    from scipy.linalg.lapack import dpotrf as _dpotrf
except ImportError:   # pragma: no cover
    _dpotrf = None


#: Most matrices :func:`_spd_inv_logdet_few` takes (two f2py calls each): above about ten,
#: the Cholesky gufunc on the stack and :func:`_spd_inv` cost less (docs/benchmarks.md
#: §12.23: 10 x (8 x 8) 1.09x, 64 x (8 x 8) 1.54x the time of that path)
FEW_MAX_COUNT = 8

_MIRROR_UP = {}   # {D: for each flat (i, j), the flat index of its entry in the upper triangle}


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
    for k in range(n):
        ak = buf[k].T
        inv, info = _dpotri(ak, 1, 1)   # A_k^{-1} in the lower triangle of ak
        if info:   # pragma: no cover (L has a positive diagonal: never singular)
            return None
        if inv is not ak:   # pragma: no cover (a build that copied)
            ak[...] = inv
    idx = _MIRROR_UP.get(d)
    if idx is None:   # (the flat index of (min(i, j), max(i, j)) for each (i, j))
        i, j = np.indices((d, d))
        idx = _MIRROR_UP[d] = (np.minimum(i, j) * d + np.maximum(i, j)).ravel()
    inv = buf.reshape(n, d * d).take(idx, axis=1)
    return inv.reshape(a.shape), (logdet.reshape(a.shape[:-2]) if flat else logdet)


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


def _spd_inv_logdet(a, what="matrix", who="family"):
    """(A^{-1}, log|A|) for a stack of SPD matrices, via Cholesky."""
    c = _chol(a, what, who)
    inv, _ = _inv_from_chol(c)
    return inv, _chol_logdet(c)


def _matvec(a, x):
    """Batched A x (A: (..., D, D), x: (..., D))."""
    return einsum("...ij,...j->...i", a, x)


def _quad(a, x):
    """Batched x^T A x."""
    return einsum("...i,...ij,...j->...", x, a, x)


def _outer(x, y=None):
    y = x if y is None else y
    return x[..., :, None] * y[..., None, :]


def _trace_prod(a, b):
    """tr(A^T B) = sum_ij A_ij B_ij over the last two axes."""
    return np.sum(a * b, axis=(-2, -1))


def mvdigamma(a, d):
    """Multivariate digamma psi_D(a) = sum_{i=1..D} psi(a + (1 - i)/2)."""
    a = np.asarray(a, dtype=float)
    return _sum(digamma(a[..., None] + 0.5 * (1.0 - np.arange(1, d + 1))), axis=-1)


_HALVES = {}   # {D: [0, 1/2, ..., (D - 1)/2]}


def _gammaln_digamma_d(a, d):
    """(log Gamma_D(a), psi_D(a)) from one array of the arguments a - j/2, j = 0..D-1
    (the same numbers as :func:`_multigammaln` and :func:`mvdigamma`: a + (1 - i)/2 is
    a - j/2 exactly)."""
    h = _HALVES.get(d)
    if h is None:
        h = _HALVES[d] = 0.5 * np.arange(d)
    t = np.asarray(a, dtype=float)[..., None] - h
    lg = 0.25 * d * (d - 1) * LOGPI + _sum(gammaln(t), axis=-1)
    return (lg if lg.ndim else float(lg)), _sum(digamma(t), axis=-1)


def _multigammaln(a, d):
    """log Gamma_D(a) = D(D-1)/4 log pi + sum_{j=0..D-1} log Gamma(a - j/2), for a > (D-1)/2
    (scipy's ``multigammaln`` without its per-call checks and Python loop over j: the
    callers pass dof already checked)."""
    a = np.asarray(a, dtype=float)
    out = 0.25 * d * (d - 1) * LOGPI + _sum(gammaln(a[..., None] - 0.5 * np.arange(d)), axis=-1)
    return out if a.ndim else float(out)


def _size_tuple(size):
    if size is None:
        return ()
    if isinstance(size, (int, np.integer)):
        return (int(size),)
    return tuple(int(s) for s in size)


def _rng(rng):
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _safe_logdet(x):
    """(log|X|, is_pd) for a stack of symmetric matrices; log|X| := 0 where X is not PD."""
    x = np.asarray(x, dtype=float)
    try:
        return _chol_logdet(np.linalg.cholesky(x)), np.ones(x.shape[:-2], dtype=bool)
    except np.linalg.LinAlgError:
        eig = np.linalg.eigvalsh(x)
        ok = eig.min(axis=-1) > 0
        return np.sum(np.log(np.where(ok[..., None], eig, 1.0)), axis=-1), ok


def _check_dof(prefix, dof, d, name="dof"):
    dof = np.asarray(dof, dtype=float)
    if not np.all(np.isfinite(dof)):
        raise ValueError(f"{prefix}: {name} must be finite, got {dof!r}")
    bad = dof <= d - 1
    if np.any(bad):
        got = float(dof) if dof.ndim == 0 else float(dof[bad].min())
        raise ValueError(f"{prefix}: {name} must be > D - 1 = {d - 1}, got {got:g}"
                         + ("" if dof.ndim == 0 else " (smallest offending entry)")
                         + f"; pass {name} > {d - 1} for a {d}x{d} scale matrix")
    return dof


def _check_broadcast(prefix, *shapes_and_names):
    try:
        return np.broadcast_shapes(*(s for s, _ in shapes_and_names))
    except ValueError:
        desc = ", ".join(f"{n} plates {s}" for s, n in shapes_and_names)
        raise ValueError(f"{prefix}: parameter plate shapes do not broadcast ({desc}); "
                         f"give the parameters compatible leading (plate) axes") from None


def bartlett_factor(rng, nu, shape, d):
    """Lower-triangular Bartlett factors A (``shape + (D, D)``): A A^T ~ W(I, nu).

    A_ii = sqrt(chi2(nu - i)) (i = 0..D-1), A_ij ~ N(0, 1) below the diagonal."""
    nu = np.broadcast_to(np.asarray(nu, dtype=float), shape)
    df = nu[..., None] - np.arange(d)
    diag = np.sqrt(rng.chisquare(df, size=shape + (d,)))
    a = np.tril(rng.standard_normal(shape + (d, d)), -1)
    return a + diag[..., :, None] * np.eye(d)


def wishart_sample(rng, nu, w_factor, shape):
    """Bartlett draws: ``shape + (D, D)`` Wishart(nu, F F^T) matrices.

    ``nu`` broadcasts against ``shape``; ``w_factor`` (any F with F F^T = W) against
    ``shape + (D, D)``."""
    fa = w_factor @ bartlett_factor(rng, nu, shape, w_factor.shape[-1])
    return _sym(fa @ np.swapaxes(fa, -1, -2))


def wishart_var(nu, w):
    """Elementwise Var[L_ij] = nu (W_ij^2 + W_ii W_jj)."""
    dg = np.diagonal(w, axis1=-2, axis2=-1)
    return np.asarray(nu)[..., None, None] * (w ** 2 + dg[..., :, None] * dg[..., None, :])


# ---------------------------------------------------------------------------
class Wishart(UnpackMemo, ExponentialFamily):
    """Wishart W(L | W, nu): ``Wishart().natural_from_params(dof, scale)``.

    ``dof``: shape plates, ``nu > D - 1``; ``scale``: shape plates + (D, D), SPD.
    ``E[L] = dof * scale`` (scipy.stats.wishart convention). See the module
    docstring and docs/math.md §2.5 for the natural parameters and formulas.
    """

    name = "Wishart"
    memos = UnpackMemo.memos + ("_logs_memo",)   # (the expected logs)
    param_names = ("dof", "scale")
    event_ndims = (2, 0)
    value_ndim = 2
    symmetric_values = True

    def check_support(self, x, components=False, categories=None):
        x = np.asarray(x, dtype=float)
        scale = np.maximum(np.abs(x).max(axis=(-2, -1)), np.finfo(float).tiny)
        asym = np.abs(x - np.swapaxes(x, -1, -2)).max(axis=(-2, -1)) > 1e-10 * scale
        sym = 0.5 * (x + np.swapaxes(x, -1, -2))
        bad = asym | (np.linalg.eigvalsh(sym)[..., 0] <= 0)
        return bad, "symmetric positive definite matrices"

    def placeholder(self, event_shape):
        return np.eye(event_shape[-1])
    symmetric_stats = (0,)  # Lambda

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, dof, scale, where=None):
        prefix = _prefix(self, where)
        scale = check_spd("scale", scale, prefix)
        d = scale.shape[-1]
        dof = _check_dof(prefix, dof, d)
        _check_broadcast(prefix, (dof.shape, "dof"), (scale.shape[:-2], "scale"))
        return dof, scale

    def natural_from_params(self, dof, scale):
        dof = np.asarray(dof, dtype=float)
        scale = np.asarray(scale, dtype=float)
        d = scale.shape[-1]
        prec, _ = _spd_inv_logdet(scale, "scale", self.name)
        plates = np.broadcast_shapes(dof.shape, scale.shape[:-2])
        lam1 = np.array(np.broadcast_to(-0.5 * prec, plates + (d, d)))
        lam2 = np.array(np.broadcast_to(0.5 * (dof - d - 1.0), plates))
        return lam1, lam2

    # _unpack(nat) -> (nu, W, log|W|, W^{-1}, c) with c c^T = W^{-1} (None when factorised
    # by _spd_small or _spd_inv_logdet_few: formed when sampling), read-only
    # (UnpackMemo: the last two q's are remembered, e.g. a prior and a posterior)
    MEMO_SIZE = 2

    def _unpack_new(self, nat):
        lam1, lam2 = broadcast_nat(nat, self.event_ndims)
        d = lam1.shape[-1]
        if lam2.size <= 64:   # a few entries: the same numbers from their list
            one = lam2.ndim == 1   # (one plate axis: no ravel or reshape)
            nl = [2.0 * a + d + 1.0 for a in (lam2 if one else lam2.ravel()).tolist()]
            ok = above(nl, d - 1) if nl else True
            nu = np.array(nl) if one else np.array(nl).reshape(lam2.shape)
        else:
            nu = 2.0 * lam2 + d + 1.0
            ok = _all(nu > d - 1, axis=None)
        if not ok:
            raise ValueError(f"{self.name}: natural parameter gives dof nu = 2*lam2 + D + 1 "
                             f"<= D - 1 = {d - 1}; outside the natural parameter space")
        prec = _sym_m2(lam1)
        if d <= SMALL_D:   # (c is formed when sampling)
            small = _spd_small(prec)
            if small is not None:
                w, logdet = small
                return nu, w, np.negative(logdet, out=logdet), prec, None
        few = _spd_inv_logdet_few(prec, -2.0)   # (c is formed when sampling)
        if few is not None:
            return nu, few[0], few[1], prec, None
        c = _chol(prec, "-2 * lam1 (the inverse scale)", self.name, symmetric=True)
        return nu, _spd_inv(c), _chol_logdet(c, -2.0), prec, c

    def params_from_natural(self, nat):
        nu, w, _, _, _ = self._unpack(nat)
        return {"dof": nu, "scale": w}

    # ---- exponential-family functions ---------------------------------------
    def suff_stats(self, x):
        x = np.asarray(x, dtype=float)
        logdet, ok = _safe_logdet(x)
        return x, np.where(ok, logdet, -np.inf)

    #: up to this many entries :meth:`_logs` combines its pieces as Python lists (for ten
    #: entries, the N=200 GMM, seven in-place array operations take about 22k instructions
    #: against 59k for the lists and the two arrays built from them)
    LOGS_LIST_MAX = 4

    def _logs(self, nat):
        """(A(lam), E[log|L|]) of q, computed once per factorisation (``_unpack``'s
        memo: mean parameters, entropy and log partition of one q share them)."""
        u = self._unpack(nat)
        memo = self.__dict__.get("_logs_memo")
        if memo is not None and memo[0] is u:
            return memo[1]
        nu, _, logdet_w, _, _ = u
        d = nat[0].shape[-1]
        h = 0.5 * nu
        lg, psi = _gammaln_digamma_d(h, d)
        if type(lg) is np.ndarray and 0 < lg.size <= self.LOGS_LIST_MAX:
            # a few entries: the same float operations on their lists (no array calls)
            one = lg.ndim == 1   # (one plate axis: no ravel or reshape)
            hl, ll, gl, pl = (a.tolist() if one else a.ravel().tolist()
                              for a in (h, logdet_w, lg, psi))
            c = d * _LOG2
            out = (np.array([a * b + a * d * _LOG2 + g for a, b, g in zip(hl, ll, gl)]),
                   np.array([p + c + b for p, b in zip(pl, ll)]))
            if not one:
                out = (out[0].reshape(lg.shape), out[1].reshape(lg.shape))
        else:   # (the same float operations in the same order, in place)
            a = h * logdet_w
            t = h * d
            t *= _LOG2
            a += t
            a += lg
            e = psi + d * _LOG2
            e += logdet_w
            out = (a, e)
        self._logs_memo = (u, out)
        return out

    def log_partition(self, nat):
        return self._logs(nat)[0]

    def _expected_logdet(self, nu, logdet_w, d):
        return mvdigamma(0.5 * nu, d) + d * LOG2 + logdet_w

    def expected_logdet(self, nat):
        """E[log|L|] = psi_D(nu/2) + D log 2 + log|W|."""
        return self._logs(nat)[1]

    def mean_params(self, nat):
        nu, w, _, _, _ = self._unpack(nat)
        return nu[..., None, None] * w, self._logs(nat)[1]

    def entropy(self, nat):
        """H = -log B(W, nu) - ((nu-D-1)/2) E[log|L|] + nu D/2 (docs/math.md §2.5)."""
        nu = self._unpack(nat)[0]
        d = nat[0].shape[-1]
        a, elogdet = self._logs(nat)
        return a - 0.5 * (nu - d - 1.0) * elogdet + 0.5 * nu * d

    def kl(self, nat1, nat2):
        """Closed form (docs/math.md §2.5): log B1 - log B2 + ((nu1-nu2)/2) E1[log|L|]
        - nu1 D/2 + (nu1/2) tr(W2^{-1} W1)."""
        nu1, w1, ld1, _, _ = self._unpack(nat1)
        nu2, _, ld2, prec2, _ = self._unpack(nat2)
        d = w1.shape[-1]
        a1 = 0.5 * nu1 * ld1 + 0.5 * nu1 * d * LOG2 + _multigammaln(0.5 * nu1, d)
        a2 = 0.5 * nu2 * ld2 + 0.5 * nu2 * d * LOG2 + _multigammaln(0.5 * nu2, d)
        return (a2 - a1 + 0.5 * (nu1 - nu2) * self._expected_logdet(nu1, ld1, d)
                - 0.5 * nu1 * d + 0.5 * nu1 * _trace_prod(prec2, w1))

    def logpdf(self, x, nat):
        """log p(L); -inf where L is not positive definite."""
        x = np.asarray(x, dtype=float)
        logdet, ok = _safe_logdet(x)
        out = (np.sum(nat[0] * x, axis=(-2, -1)) + nat[1] * logdet) - self.log_partition(nat)
        return np.where(ok, out, -np.inf)

    def sample(self, nat, rng=None, size=None):
        """Bartlett decomposition; shape size + plates + (D, D)."""
        rng = _rng(rng)
        nu, _, _, prec, c = self._unpack(nat)
        if c is None:   # (factorised by _spd_small or _spd_inv_logdet_few)
            c = _chol(prec, "-2 * lam1 (the inverse scale)", self.name, symmetric=True)
        shape = _size_tuple(size) + nu.shape
        return wishart_sample(rng, nu, np.swapaxes(_chol_inv_factor(c), -1, -2), shape)

    def mean(self, nat):
        nu, w, _, _, _ = self._unpack(nat)
        return nu[..., None, None] * w

    def var(self, nat):
        nu, w, _, _, _ = self._unpack(nat)
        return wishart_var(nu, w)

    def mode(self, nat):
        """(nu - D - 1) W, clamped at the zero matrix when nu < D + 1 (docs/math.md §5)."""
        nu, w, _, _, _ = self._unpack(nat)
        d = w.shape[-1]
        return np.maximum(nu - d - 1.0, 0.0)[..., None, None] * w

    def to_scipy(self, nat):
        from scipy import stats
        nu, w, _, _, _ = self._unpack(nat)
        if nu.shape == ():
            return stats.wishart(df=float(nu), scale=w)
        return object_array(nu.shape, lambda i: stats.wishart(df=float(nu[i]), scale=w[i]))
