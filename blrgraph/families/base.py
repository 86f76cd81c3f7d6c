"""The exponential-family interface shared by every family module.

A family is written ``q(x) = h(x) exp(<lam, T(x)> - A(lam))`` (docs/math.md §0).
Natural parameters ``lam`` and mean parameters ``mu = E[T(x)]`` are *tuples of
arrays*, one array per component of ``T``; every array has shape
``plates + event_shape_of_that_component`` (``event_ndims[i]`` trailing axes).
All functions are vectorised over the leading plate axes and are pure: no
graph, no inference.

The inner product ``<lam, mu>`` sums each component over its event axes and
adds the components: see :func:`inner`.
"""
from __future__ import annotations

import math

import numpy as np

try:   # np.einsum without optimize= is this C function behind a Python wrapper
    from numpy._core.multiarray import c_einsum as einsum
except ImportError:   # (numpy < 2)
    einsum = np.einsum
try:   # np.vdot is this C function behind a Python dispatcher
    from numpy._core._multiarray_umath import vdot
except ImportError:   # pragma: no cover
    vdot = np.vdot

_F8 = np.dtype(float)   # (compared on hot paths, where np.asarray would cost a call)


def _fsum(a):
    """The sum of an array's entries as a float: a few entries as Python's sum of their
    list (no reduction's setup; rounding aside, numpy's sum)."""
    if type(a) is float:
        return a
    if type(a) is not np.ndarray:
        a = np.asarray(a)
    if a.size <= 64:
        try:
            return math.fsum((a if a.ndim == 1 else a.ravel()).tolist())
        except (ValueError, OverflowError):   # inf - inf, or beyond the largest float:
            pass                              # numpy's nan / inf, for the caller to name
    return float(np.add.reduce(a, axis=None))


def above(values, bound):
    """Is every number of a list above ``bound``? (nan is not; Python's min alone can step
    over a nan, their sum cannot)"""
    return min(values) > bound and not math.isnan(sum(values))


class ExponentialFamily:
    """Base class: subclasses implement the methods below.

    Families are small objects. Most are stateless (``Gamma()``); a family with a
    fixed, non-natural parameter keeps it as an attribute (``Binomial(n)``,
    ``Multinomial(n)``, where ``n`` broadcasts against the plates).

    Attributes
    ----------
    name : str
        Display name ("Gamma").
    param_names : tuple of str
        Constructor parameter names, in order (("shape", "rate")).
    event_ndims : tuple of int
        Number of trailing event axes of each natural/mean-parameter component.
        May depend on nothing but the family (e.g. MultivariateNormal: (1, 2)).
    value_ndim : int
        Number of trailing event axes of a value x (Normal 0, MVN 1, Wishart 2,
        Dirichlet 1, Categorical 0 -- its value is an integer label).
    """

    name = "ExponentialFamily"
    param_names: tuple = ()
    event_ndims: tuple = ()
    value_ndim = 0
    #: indices of statistics that are symmetric matrices (only their upper triangle is stored
    #: in a flat statistics matrix, graph/suffstats.py)
    symmetric_stats: tuple = ()
    #: False when T(x) is sparse (one-hot): data are then never expanded to T(x) rows
    dense_stats = True
    #: the indices of T = (x, x x^T) when the family says so (graph/suffstats.py then builds
    #: them from x without the D x D outer products; None: it does not)
    value_outer_stats = None
    #: ``shared_covariance(nat)``: the covariance shared by every entry, where a family can
    #: tell (MultivariateNormal); None: not declared
    shared_covariance = None

    # ---- value facts (what data of this family look like; graph/data.py asks) ----------
    #: False for a family whose values cannot be data (a joint (mu, precision) pair:
    #: observe its child instead)
    observable = True
    #: True when a value is a category label 0..K-1 (stored as integers; T(x) one-hot,
    #: K from the parameters; its first statistic is not the value)
    is_label = False
    #: True when a value is a symmetric matrix (Wishart): observe refuses asymmetric data
    #: with a message of its own (graph/inputs.py). (Whether natural parameters hold a
    #: positive-definite precision is the method :meth:`precision_is_pd`.)
    symmetric_values = False
    #: True when a vector's coordinates may be missing one by one (a mask of the data's
    #: shape; MultivariateNormal)
    cell_masks = False
    #: the number of categories of a label family (None: not fixed by the family; the
    #: factor's ``n_categories()`` tells)
    K = None
    #: True when values are counts or labels (a probability mass function, not a density)
    discrete = False
    #: True when every real natural parameter is valid (logits, log-rates): a checkpoint's
    #: natural parameters then need no check against the parameter space
    natural_unconstrained = False

    def check_support(self, x, components=False, categories=None):
        """Which values of ``x`` (shape plates + value shape, every entry finite) are not
        values of this family: ``(bad, what)`` with ``bad`` a bool array that broadcasts
        to x's plates and ``what`` the support in words ("positive values").

        ``components=True``: the family's fixed arrays (Binomial/Multinomial n) belong to a
        Mixture and carry its component axis last; a value must lie in the support of
        every component. ``categories``: the number of categories K of a label family.
        A family must declare it (there is no safe default): observe() then refuses."""
        raise NotImplementedError(f"{self.name} does not declare the values it takes "
                                  f"(ExponentialFamily.check_support), so its data cannot be "
                                  f"checked; implement check_support and placeholder")

    def placeholder(self, event_shape):
        """A value of this family (array of ``event_shape``) that stands in the slot of a
        masked entry: it contributes nothing, but must keep every formula finite."""
        raise NotImplementedError(f"{self.name} does not declare a placeholder for masked "
                                  f"entries (ExponentialFamily.placeholder)")

    #: location shift c of a Gaussian family (docs/dev/numerics.md): None, or an array
    #: broadcasting against plates + the location's event shape. With c set, the family is
    #: that of the *centred* variable: T, lam, A, mu, entropy and KL are those of x - c,
    #: while the public values (natural_from_params / params_from_natural, mean, mode,
    #: point_value, sample, logpdf, to_scipy) are in the data's coordinates.
    shift = None
    #: True for the families that take a location shift (Normal, MultivariateNormal,
    #: NormalGamma, NormalWishart)
    locational = False

    def release(self):
        """Drop a memo of the last q (MultivariateNormal's factorisation); default: none."""

    # ---- location shift (identity for families without one) -----------------
    def with_shift(self, shift):
        """A copy of this family with location shift ``shift`` (None: no shift)."""
        import copy
        f = copy.copy(self)
        f.shift = None if shift is None else np.asarray(shift, dtype=float)
        return f

    def centre(self, x):
        """A value in the data's coordinates -> the centred value T is taken of."""
        return x

    def _minus_c(self, x):
        """x - c (the location component of a value; x itself without a shift)."""
        if self.shift is None:
            return x
        return np.asarray(x, dtype=float) - self.shift

    def _plus_c(self, y):
        """y + c: a centred location back in the data's coordinates."""
        if self.shift is None:
            return y
        return np.asarray(y, dtype=float) + self.shift

    def centred_point_value(self, nat):
        """The mode in centred coordinates (what the engine feeds to T)."""
        return self.point_value(nat)

    # ---- parameterisations -------------------------------------------------
    def validate_params(self, *params, where=None):
        """Raise ValueError naming ``where`` (a node name) if params are invalid.

        Returns the parameters as float arrays (broadcast is not required)."""
        raise NotImplementedError

    def natural_from_params(self, *params):
        """Constructor parameters (positional, in ``param_names`` order) -> lam."""
        raise NotImplementedError

    def params_from_natural(self, nat):
        """lam -> dict {param_name: array} (inverse of natural_from_params)."""
        raise NotImplementedError

    # ---- the exponential-family functions ---------------------------------
    def suff_stats(self, x):
        """T(x) as a tuple of arrays (plates + event shapes)."""
        raise NotImplementedError

    def log_base_measure(self, x):
        """log h(x), shape plates (0 for families with constant h)."""
        return np.zeros(np.shape(x)[: np.ndim(x) - self.value_ndim])

    def log_partition(self, nat):
        """A(lam), shape plates."""
        raise NotImplementedError

    def mean_params(self, nat):
        """mu = grad A(lam) = E[T(x)], tuple like nat."""
        raise NotImplementedError

    def entropy(self, nat):
        """H[q] = A(lam) - <lam, mu> - E[log h], shape plates."""
        return self.log_partition(nat) - inner(nat, self.mean_params(nat), self.event_ndims) \
            - self.expected_log_base_measure(nat)

    def expected_log_base_measure(self, nat):
        """E_q[log h(x)], shape plates (0 for constant h)."""
        return np.zeros(plates_of(nat, self.event_ndims))

    def kl(self, nat1, nat2):
        """KL(q1 || q2) = A(lam2) - A(lam1) - <lam2 - lam1, mu1> (Bregman form)."""
        mu1 = self.mean_params(nat1)
        diff = tuple(b - a for a, b in zip(nat1, nat2))
        return self.log_partition(nat2) - self.log_partition(nat1) - inner(diff, mu1, self.event_ndims)

    def logpdf(self, x, nat):
        """log q(x) = log h(x) + <lam, T(x)> - A(lam)."""
        x = self.centre(x)
        return self.log_base_measure(x) + inner(nat, self.suff_stats(x), self.event_ndims) \
            - self.log_partition(nat)

    def sample(self, nat, rng=None, size=None):
        """Draws; ``size`` is prepended to the plate shape (None: one draw per plate entry)."""
        raise NotImplementedError

    def mean(self, nat):
        """E[x] (for joint families the tuple of the components' means)."""
        raise NotImplementedError

    def var(self, nat):
        """Elementwise variance of x."""
        raise NotImplementedError

    def mode(self, nat):
        """argmax of h(x) exp(<lam, T(x)>) (the MAP point used by EM)."""
        raise NotImplementedError

    def precision_is_pd(self, nat):
        """Do natural parameters ``nat`` hold a positive-definite precision? (the BLR
        step's safeguard: a non-log-concave factor can send an indefinite expected
        Hessian). True for families that carry no precision."""
        return True

    def point_value(self, nat):
        """The mode as a value (what data of this family look like)."""
        return self.mode(nat)

    def point_stats(self, nat):
        """T at the mode: the moments a point mass (EM) publishes."""
        return self.suff_stats(self.centred_point_value(nat))

    def to_scipy(self, nat):
        """Frozen scipy.stats distribution; with plates, an object array of them."""
        raise NotImplementedError


# ---------------------------------------------------------------------------
def per_entry(fixed, plates, components=False):
    """A fixed family array (Binomial/Multinomial n) as one value per entry of ``plates``;
    with ``components=True`` its last axis is a Mixture's component axis and the smallest
    value over the components is taken (a value must be possible under each of them)."""
    a = np.asarray(fixed)
    if components and a.ndim:
        a = a.min(axis=-1)
    return np.broadcast_to(a, tuple(plates))


def inner(a, b, event_ndims):
    """<a, b>: sum over each component's event axes, plus over components.

    Components broadcast against each other over their plate axes."""
    total = 0.0
    for x, y, k in zip(a, b, event_ndims):
        prod = np.multiply(x, y)
        if k:
            prod = prod.sum(axis=tuple(range(-k, 0)))
        total = total + prod
    return total


def plates_of(nat, event_ndims):
    """The broadcast plate shape of a natural/mean-parameter tuple."""
    shapes = [np.shape(x)[: np.ndim(x) - k] for x, k in zip(nat, event_ndims)]
    return np.broadcast_shapes(*shapes)


def broadcast_nat(nat, event_ndims, plates=None):
    """Broadcast every component to a common plate shape (copy-free views)."""
    if plates is None:
        first = None
        for x, k in zip(nat, event_ndims):
            if type(x) is not np.ndarray or x.dtype != _F8:
                break
            s = x.shape[:x.ndim - k]
            if first is None:
                first = s
            elif s != first:
                break
        else:
            return tuple(nat)   # (q's parameters: already at one plate shape)
    p = plates_of(nat, event_ndims) if plates is None else tuple(plates)
    return tuple(np.broadcast_to(np.asarray(x, dtype=float),
                                 p + np.shape(x)[np.ndim(x) - k:])
                 for x, k in zip(nat, event_ndims))


def object_array(shape, make):
    """Object array of ``shape`` whose entry at index i is ``make(i)`` (for to_scipy)."""
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        out[idx] = make(idx)
    return out


def check_positive(name, value, where, what="positive"):
    """Refuse non-finite or non-positive values with a ValueError naming ``where``."""
    arr = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{where}: {name} must be finite, got {value!r}")
    if np.any(arr <= 0):
        raise ValueError(f"{where}: {name} must be {what} (> 0), got {value!r}")
    return arr


def check_spd(name, value, where):
    """Refuse a matrix (stack) that is not symmetric positive definite."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim < 2 or arr.shape[-1] != arr.shape[-2]:
        raise ValueError(f"{where}: {name} must be a square matrix (shape (..., D, D)), "
                         f"got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{where}: {name} must be finite")
    if not np.allclose(arr, np.swapaxes(arr, -1, -2), rtol=1e-10, atol=1e-12 * max(1.0, np.abs(arr).max())):
        raise ValueError(f"{where}: {name} must be symmetric")
    try:
        np.linalg.cholesky(arr)
    except np.linalg.LinAlgError:
        raise ValueError(f"{where}: {name} must be positive definite "
                         f"(its Cholesky factorisation failed); pass an SPD matrix") from None
    return arr


class UnpackMemo:
    """A family whose q's factorisation (``_unpack_new(nat)``: Cholesky, inverse, log
    determinant) is read several times a sweep (moments, ELBO, KL) remembers the last
    ``MEMO_SIZE`` q's, keyed by the identity of their natural parameters (replaced, never
    modified). The remembered arrays are read-only: they are shared by every reader."""

    MEMO_SIZE = 1

    def _unpack(self, nat):
        memo = self.__dict__.get("_unpack_memo") or ()
        n = len(nat)
        for key, out in memo:
            if len(key) == n and key[0] is nat[0] and (n == 1 or key[1] is nat[1]) and \
                    (n <= 2 or all(a is b for a, b in zip(key[2:], nat[2:]))):
                return out
        out = self._unpack_new(nat)
        for a in out:
            if isinstance(a, np.ndarray):   # shared by the readers of this q (setflags: no
                a.setflags(write=False)     # flags object built, as a.flags.writeable does)
        self._unpack_memo = ((tuple(nat), out),) + tuple(memo[:self.MEMO_SIZE - 1])
        return out

    def _unpack_new(self, nat):
        raise NotImplementedError

    #: the attributes that hold memos of the last q (a subclass adds its own)
    memos = ("_unpack_memo",)

    def release(self):
        """Forget the remembered factorisations (a fit has ended)."""
        for name in self.memos:
            self.__dict__.pop(name, None)

    def __getstate__(self):
        state = dict(self.__dict__)
        for name in self.memos:   # work caches, not part of the family
            state.pop(name, None)
        return state
