"""Private helpers shared by the scalar / simplex family modules.

Validation messages follow one pattern: ``"<Family> '<where>': <param> must be
<condition>, got <value> (<what to do>)"``, e.g.
``"Gamma 'tau': shape must be > 0, got -1 (pass a positive shape)"``.
"""
from __future__ import annotations

import numpy as np
from scipy.special import betaln, gammaln

from .base import _F8, object_array

# Half-width (in standard deviations, plus a constant) of the window of
# integers summed by :func:`_count_window`.  The tails beyond it are
# far below double precision for binomial and Poisson laws.
_WINDOW_SD = 20.0
_WINDOW_PAD = 20.0


# ---------------------------------------------------------------------------
# natural-parameter tuples
def as_nat(nat, ncomp):
    """Return ``nat`` as a tuple of ``ncomp`` float arrays.

    A bare array is accepted for one-component families."""
    if type(nat) is tuple and len(nat) == ncomp:
        for x in nat:
            if type(x) is not np.ndarray or x.dtype != _F8:
                break
        else:
            return nat   # (already so: q's own natural parameters, every sweep)
    if isinstance(nat, np.ndarray) or np.isscalar(nat):
        nat = (nat,)
    nat = tuple(np.asarray(x, dtype=float) for x in nat)
    if len(nat) != ncomp:
        raise ValueError(f"expected a tuple of {ncomp} natural-parameter arrays, got {len(nat)}")
    return nat


def broadcast_copies(*arrays):
    """Broadcast arrays against each other and return writable float copies."""
    return tuple(np.array(a, dtype=float) for a in np.broadcast_arrays(*[np.asarray(a, dtype=float)
                                                                        for a in arrays]))


def draw_shape(size, plates):
    """``size`` (None, int or tuple) prepended to ``plates``."""
    if size is None:
        size = ()
    elif np.isscalar(size):
        size = (int(size),)
    return tuple(size) + tuple(plates)


def get_rng(rng):
    return np.random.default_rng() if rng is None else rng


def frozen(plates, make):
    """A single frozen scipy distribution (no plates) or an object array of them."""
    plates = tuple(plates)
    if plates == ():
        return make(())
    return object_array(plates, make)


def xmul(a, b):
    """``a * b`` with the convention ``0 * (+-inf) = 0`` (no warnings)."""
    with np.errstate(invalid="ignore"):
        out = np.multiply(a, b)
    return np.where(np.asarray(a) == 0, 0.0, out)


def simplex_mode(alpha):
    """Mode of a Dirichlet(alpha) density on the simplex (last axis), clamped.

    Interior case (all alpha_k > 1): (alpha_k - 1)/(alpha_0 - K).  Otherwise the
    density (w.r.t. Lebesgue measure on the simplex) maximises
    sum_k (alpha_k - 1) log x_k: components with alpha_k <= 1 are put at 0 and
    the rest are proportional to alpha_k - 1; if no alpha_k exceeds 1 the mass
    goes to the largest alpha_k (shared equally on ties, so alpha = 1 gives the
    centre of the simplex)."""
    alpha = np.asarray(alpha, dtype=float)
    c = np.maximum(alpha - 1.0, 0.0)
    s = c.sum(axis=-1, keepdims=True)
    top = (alpha == alpha.max(axis=-1, keepdims=True)).astype(float)
    fallback = top / top.sum(axis=-1, keepdims=True)
    pos = s > 0
    return np.where(pos, c / np.where(pos, s, 1.0), fallback)


def _count_window(mean, sd, upper=None):
    """Integers k (trailing axis) covering ``mean +- (20 sd + 20)``, clipped to [0, upper].

    Returns (k, inside): k is clipped to the window's last point where ``inside``
    is False, so it can be fed to a log-pmf without leaving the support."""
    mean, sd = np.broadcast_arrays(np.asarray(mean, dtype=float), np.asarray(sd, dtype=float))
    if upper is not None:
        mean, sd, upper = np.broadcast_arrays(mean, sd, np.asarray(upper, dtype=float))
    lo = np.floor(np.maximum(mean - _WINDOW_SD * sd - _WINDOW_PAD, 0.0))
    hi = np.ceil(mean + _WINDOW_SD * sd + _WINDOW_PAD)
    if upper is not None:
        hi = np.minimum(hi, upper)
    width = int(np.max(hi - lo, initial=0.0)) + 1
    k = lo[..., None] + np.arange(width)
    inside = k <= hi[..., None]
    return np.minimum(k, hi[..., None]), inside


def _weights(logpmf, k, inside):
    lp = logpmf(k)
    with np.errstate(under="ignore"):
        return lp, np.where(inside, np.exp(lp), 0.0)


def expected_log_factorial(logpmf, mean, sd, upper=None):
    """E[log k!] for an integer-valued k >= 0 with the given log-pmf.

    Summed over the window of :func:`_count_window`, vectorised over the
    broadcast shape of ``mean``/``sd``/``upper``; ``logpmf(k)`` receives k with
    a trailing window axis.  The sum is centred at log(floor(mean))! and
    normalised by the summed pmf, so rounding in the pmf (relative error about
    eps * n log n) is not multiplied by the large log k! values."""
    k, inside = _count_window(mean, sd, upper)
    _, w = _weights(logpmf, k, inside)
    c = gammaln(np.floor(np.asarray(mean, dtype=float)) + 1.0)
    c = np.broadcast_to(c, k.shape[:-1])
    return c + np.sum(w * (gammaln(k + 1.0) - c[..., None]), axis=-1) / np.sum(w, axis=-1)


def entropy_over_counts(logpmf, mean, sd, upper=None):
    """-sum_k pmf(k) log pmf(k) over the window of :func:`_count_window`."""
    k, inside = _count_window(mean, sd, upper)
    lp, w = _weights(logpmf, k, inside)
    return -np.sum(xmul(w, lp), axis=-1)


# ---------------------------------------------------------------------------
# validation
def label(family, where):
    return f"{family} '{where}'" if where is not None else family


def _fmt_bad(arr, bad, what=""):
    arr = np.asarray(arr)
    got = f"got {what}" if what else "got"
    if arr.ndim == 0:
        v = arr.item()
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        return f"{got} {v!r}"
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    v = arr[idx].item()
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    nbad = int(np.count_nonzero(bad))
    more = f" and {nbad - 1} more" if nbad > 1 else ""
    return f"{got} {v!r} at index {idx}{more}"


def to_float(family, pname, value, where):
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{label(family, where)}: {pname} must be numeric, got {value!r}") from None
    return arr


def check_finite(family, pname, value, where):
    arr = to_float(family, pname, value, where)
    bad = ~np.isfinite(arr)
    if np.any(bad):
        raise ValueError(f"{label(family, where)}: {pname} must be finite, {_fmt_bad(arr, bad)} "
                         f"(replace NaN/inf entries)")
    return arr


def check_positive(family, pname, value, where):
    arr = check_finite(family, pname, value, where)
    bad = arr <= 0
    if np.any(bad):
        raise ValueError(f"{label(family, where)}: {pname} must be > 0, {_fmt_bad(arr, bad)} "
                         f"(pass a positive {pname})")
    return arr


def check_probability(family, pname, value, where):
    arr = check_finite(family, pname, value, where)
    bad = (arr < 0) | (arr > 1)
    if np.any(bad):
        raise ValueError(f"{label(family, where)}: {pname} must lie in [0, 1], {_fmt_bad(arr, bad)} "
                         f"(pass a probability)")
    return arr


def check_count(family, pname, value, where):
    arr = check_finite(family, pname, value, where)
    bad = (arr < 0) | (arr != np.round(arr))
    if np.any(bad):
        raise ValueError(f"{label(family, where)}: {pname} must be a non-negative integer, "
                         f"{_fmt_bad(arr, bad)} (pass a whole number of trials)")
    return arr


def check_simplex(family, pname, value, where, tol=1e-8):
    """Probabilities on the last axis: non-negative, summing to 1 within ``tol``."""
    arr = check_finite(family, pname, value, where)
    if arr.ndim < 1 or arr.shape[-1] < 1:
        raise ValueError(f"{label(family, where)}: {pname} must have the K category probabilities "
                         f"on its last axis (shape (..., K)), got shape {arr.shape}")
    bad = arr < 0
    if np.any(bad):
        raise ValueError(f"{label(family, where)}: {pname} must be non-negative, {_fmt_bad(arr, bad)} "
                         f"(pass probabilities)")
    tot = arr.sum(axis=-1)
    bad = np.abs(tot - 1.0) > tol
    if np.any(bad):
        raise ValueError(f"{label(family, where)}: {pname} must sum to 1 on the last axis "
                         f"(tolerance {tol:g}), {_fmt_bad(tot, bad, 'sum')} "
                         f"(normalise, e.g. p / p.sum(-1, keepdims=True))")
    return arr


def split_count_params(family, params, n_instance, where, validate):
    """Binomial/Multinomial take ``(n, p)`` or just ``(p,)``; n must equal the instance's n."""
    if len(params) == 1:
        return params[0]
    if len(params) != 2:
        raise TypeError(f"{family} takes the parameters (n, p) or (p,), got {len(params)} values")
    n, p = params
    if validate:
        n = check_count(family, "n", n, where)
    n = np.asarray(n, dtype=float)
    try:
        same = np.all(np.broadcast_arrays(n, np.asarray(n_instance, dtype=float))[0]
                      == np.asarray(n_instance, dtype=float))
    except ValueError:
        same = False
    if not same:
        raise ValueError(f"{label(family, where)}: n = {n.tolist()!r} does not match the family's "
                         f"n = {np.asarray(n_instance).tolist()!r} (construct {family}(n) with this n)")
    return p


# ---------------------------------------------------------------------------
# finite sums for the non-constant base measures
def binomial_logpmf(k, n, logp, logq):
    """log Bin(k | n, p) given log p and log(1 - p) (0 log 0 = 0). For n >= 100, Loader's
    saddle-point form (:func:`_binomial_logpmf_large`, docs/math.md §6.3) keeps the digits
    the lnΓ difference loses (all of them at n = 1e15)."""
    k, n, logp, logq = np.broadcast_arrays(*(np.asarray(v, dtype=float)
                                             for v in (k, n, logp, logq)))
    small = n < _LGAMMA_LARGE
    ns, ks = np.where(small, n, 0.0), np.where(small, k, 0.0)
    direct = (gammaln(ns + 1.0) - gammaln(ks + 1.0) - gammaln(ns - ks + 1.0)
              + xmul(ks, logp) + xmul(ns - ks, logq))
    if not np.any(~small):
        return direct
    return np.where(small, direct, _binomial_logpmf_large(np.where(small, 1.0, k),
                                                          np.where(small, 200.0, n), logp, logq))


#: stirlerr(n) for n = 1 .. 15 (60-digit arithmetic, rounded once); index 0 is unused
_STIRLERR_TABLE = np.array([
    0.0, 0.08106146679532726, 0.0413406959554093, 0.02767792568499834, 0.020790672103765093,
    0.016644691189821193, 0.013876128823070748, 0.01189670994589177, 0.010411265261972096,
    0.009255462182712733, 0.00833056343336287, 0.007573675487951841, 0.00694284010720953,
    0.006408994188004207, 0.0059513701127588475, 0.005554733551962801])


def _stirlerr(n):
    """lnΓ(n + 1) - [(n + 1/2) ln n - n + ln(2π)/2] for whole n >= 1 (the tail of Stirling's
    series, as lnΓ(n + 1) = ln n + lnΓ(n)): from a table up to 15, beyond from the series
    1/(12n) - 1/(360n³) + 1/(1260n⁵) - 1/(1680n⁷) + 1/(1188n⁹) (the next term is below
    3e-16 of it at n = 16; Loader 2000)."""
    n = np.asarray(n, dtype=float)
    small = n <= 15
    idx = np.clip(np.where(small, n, 0.0), 0, 15).astype(int)
    r = 1.0 / np.where(small, 16.0, n)
    r2 = r * r
    series = r * (1.0 / 12.0 - r2 * (1.0 / 360.0 - r2 * (1.0 / 1260.0 - r2 * (1.0 / 1680.0
                                                                          - r2 / 1188.0))))
    return np.where(small, _STIRLERR_TABLE[idx], series)


#: terms of the series of bd0 near x = M (|v| < 0.1: the 12th term is below 1e-24 of the first)
_BD0_TERMS = 12


def _bd0(x, M):
    """x ln(x / M) + M - x >= 0 (the deviance of a count x from its mean M), without its
    cancellation near x = M: there from the series in v = (x - M) / (x + M),
    (x - M) v + 2x sum_j v^(2j+1) / (2j + 1) (Loader 2000)."""
    x, M = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(M, dtype=float))
    d = x - M
    with np.errstate(divide="ignore", invalid="ignore"):
        v = d / (x + M)
        near = np.abs(d) < 0.1 * (x + M)
        far = xmul(x, np.log(x) - np.log(M)) + M - x
    v = np.where(near, v, 0.0)
    s = d * v
    ej = 2.0 * x * v
    v2 = v * v
    for j in range(1, _BD0_TERMS + 1):
        ej = ej * v2
        s = s + ej / (2 * j + 1)
    return np.where(near, s, far)


def _binomial_logpmf_large(k, n, logp, logq):
    """log Bin(k | n, p) for whole k in [0, n] (Loader 2000, docs/math.md §6.3): for 0 < k < n,
    stirlerr(n) - stirlerr(k) - stirlerr(n - k) - bd0(k, np) - bd0(n - k, nq)
    + ln(n / (2π k (n - k)))/2; n log q at k = 0 and n log p at k = n."""
    p, q = np.exp(logp), np.exp(logq)
    inner = (k > 0) & (k < n)
    ki = np.where(inner, k, 1.0)
    ni = np.where(inner, n, 2.0)
    with np.errstate(divide="ignore"):
        mid = (_stirlerr(ni) - _stirlerr(ki) - _stirlerr(ni - ki)
               - _bd0(ki, ni * p) - _bd0(ni - ki, ni * q)
               + 0.5 * (np.log(ni) - np.log(2.0 * np.pi) - np.log(ki) - np.log(ni - ki)))
    ends = np.where(k <= 0, xmul(n, logq), xmul(n, logp))
    return np.where(inner, mid, ends)


def _binomial_args(n, logp, logq):
    n, logp, logq = np.broadcast_arrays(np.asarray(n, dtype=float), np.asarray(logp, dtype=float),
                                        np.asarray(logq, dtype=float))
    p, q = np.exp(logp), np.exp(logq)
    return ((lambda k: binomial_logpmf(k, n[..., None], logp[..., None], logq[..., None])),
            n * p, np.sqrt(n * p * q), n)


def binomial_expected_log_factorial(n, logp, logq):
    """E[log k!] for k ~ Bin(n, p), vectorised over the broadcast shape of the inputs."""
    return expected_log_factorial(*_binomial_args(n, logp, logq))


def binomial_entropy(n, logp, logq):
    """Entropy of Bin(n, p) by direct summation."""
    return entropy_over_counts(*_binomial_args(n, logp, logq))


def _poisson_args(rate):
    rate = np.asarray(rate, dtype=float)
    logr = np.log(rate)
    return ((lambda k: k * logr[..., None] - rate[..., None] - gammaln(k + 1.0)),
            rate, np.sqrt(rate))


def poisson_expected_log_factorial(rate):
    """E[log k!] for k ~ Poisson(rate), rate > 0."""
    return expected_log_factorial(*_poisson_args(rate))


def poisson_entropy(rate):
    """Entropy of Poisson(rate) by direct summation of -pmf log pmf."""
    return entropy_over_counts(*_poisson_args(rate))


# ---------------------------------------------------------------------------
# log-gamma differences that keep their digits when the arguments are large
#: from here on Stirling's series (four terms) is exact to double precision, and a
#: difference of two lnΓ values (each > 360) would lose digits
_LGAMMA_LARGE = 100.0


def _stirling_tail(x):
    """lnΓ(x) - [(x - 1/2) ln x - x + ln(2π)/2] for x >= _LGAMMA_LARGE (four terms of the
    series; the next, 1/(1188 x^9), is below 1e-21)."""
    r = 1.0 / x
    r2 = r * r
    return r * (1.0 / 12.0 - r2 * (1.0 / 360.0 - r2 * (1.0 / 1260.0 - r2 / 1680.0)))


def lgamma_diff(x, d):
    """lnΓ(x + d) - lnΓ(x), without the cancellation of two large lnΓ values: for x and
    x + d both >= 100 from Stirling's form written around x,
    d ln x + (x + d - 1/2) log1p(d/x) - d + tail(x + d) - tail(x) (docs/math.md §6.2)."""
    x, d = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(d, dtype=float))
    y = x + d
    big = (x >= _LGAMMA_LARGE) & (y >= _LGAMMA_LARGE)
    xs, ds = np.where(big, x, 1.0), np.where(big, d, 0.0)
    stirling = (ds * np.log(xs) + (xs + ds - 0.5) * np.log1p(ds / xs) - ds
                + _stirling_tail(xs + ds) - _stirling_tail(xs))
    with np.errstate(invalid="ignore"):
        direct = gammaln(np.where(big, 1.0, y)) - gammaln(np.where(big, 1.0, x))
    return np.where(big, stirling, direct)


def beta_binomial_logpmf(k, n, a, b):
    """log of the beta-binomial pmf C(n, k) B(k + a, n - k + b) / B(a, b), written as three
    lnΓ differences over nearby arguments (:func:`lgamma_diff`) so that it keeps its digits
    for n up to 2**53 (scipy's betabinom loses them beyond n ~ 1e8): -inf off the support."""
    k, n, a, b = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (k, n, a, b)))
    ok = (k >= 0) & (k <= n) & (k == np.floor(k))
    ks = np.where(ok, k, 0.0)
    out = (-lgamma_diff(n + 1.0, a + b - 1.0) + lgamma_diff(ks + 1.0, a - 1.0)
           + lgamma_diff(n - ks + 1.0, b - 1.0) - betaln(a, b))
    return np.where(ok, out, -np.inf)
