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

This module also holds small batched helpers shared with the MultivariateNormal and
NormalWishart modules; their SPD factorisations are in families/_spd.py.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import digamma, gammaln

from ._spd import (_chol, _chol_inv_factor, _chol_logdet, _spd_factor, _spd_inv_logdet, _sym,
                   _sym_m2)
from .base import (ExponentialFamily, UnpackMemo, above, broadcast_nat, check_spd, einsum,
                   object_array)

LOG2 = np.log(2.0)
_LOG2 = float(LOG2)
_sum = np.add.reduce   # (ndarray.sum without its Python wrapper: the same reduction)
_all = np.logical_and.reduce   # (ndarray.all without its Python wrapper)
LOG2PI = np.log(2.0 * np.pi)
LOGPI = np.log(np.pi)


# ---------------------------------------------------------------------------
# batched helpers (private; shared by multivariate_normal / normal_wishart; the SPD
# factorisations are in _spd.py)
def _prefix(family, where):
    """Message prefix: "Wishart 'Lam'" (or just the family name)."""
    return f"{family.name} {where!r}" if where is not None else family.name


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

    # _unpack(nat) -> (nu, W, log|W|, W^{-1}, c) with c c^T = W^{-1} (None when _spd_factor
    # kept none: formed when sampling), read-only
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
        w, logdet_w, c = _spd_factor(prec, "-2 * lam1 (the inverse scale)", self.name, -2.0)
        return nu, w, logdet_w, prec, c

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
        if c is None:   # (_spd_factor kept none)
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
