"""The graph's base nodes: ``Node`` (what every node publishes), ``Constant``, the data a
child hands its factor (``ChildData``), a node's fitted q as scipy sees it (``Posterior``),
and the deterministic base with the gather ``node[idx]`` every node supports.

A node publishes *moments*: the mean parameters E[T(x)] of the family named by
``node.provides`` (a family object). Stochastic nodes (``graph/node.py``) own a conditional
factor (``graph/factors``) that knows p(x | parents) in terms of the parents' moments.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from .inputs import check_seed, check_size
from .plates import Scatter

_ids = itertools.count()


class Node:
    """Base class of every graph node."""

    deterministic = False
    stochastic = False
    #: can the node become a view of some entries of its first plate axis (``restrict``)?
    restrictable = True
    # What every node answers; a stochastic node sets its own in ``_init_state``.
    #: the family of the moments the node publishes
    provides = None
    #: its conditional p(x | parents) (stochastic nodes), with ``family`` the family of q
    factor = None
    family = None
    observed = False
    point = False
    fitted = False
    #: why the node has no posterior after a fit (streamed or Dask rows), or None
    unfitted_reason = None
    #: where its rows are read from when they are not in memory (graph/stream.py)
    source = None
    #: q's start given by ``start_from`` (natural parameters), or None
    _start = None
    #: a Categorical q kept in factored form (``set_natural_terms``), or None
    _factored = None
    #: the moments a node keeps until its parents' moments change
    _cache = None
    #: a deterministic node's map of its parents' values to its own (``forward(*values)``,
    #: used by predictive draws), or None
    forward = None
    #: q's natural parameters (stochastic nodes)
    nat = None
    #: what a Gaussian node computes without its per-entry moments (``Dot``, ``Add``):
    #: ``parts()``, ``first_moment()``, ``moment_sums(...)``; None: read ``moments()``
    parts = first_moment = moment_sums = None

    def __init__(self, name, plates):
        self.id = next(_ids)
        self.name = name if name is not None else f"{type(self).__name__.lower()}{self.id}"
        self.plates = tuple(int(p) for p in plates)
        self.parents = []
        self.children = []
        self.replicates = None  # counts of identical copies per plate entry (bag-of-words)

    def label(self):
        return f"{type(self).__name__} '{self.name}'"

    def __repr__(self):
        return f"<{self.label()} plates={self.plates}>"

    def __getitem__(self, idx):
        return Gather(self, idx)

    def moments(self):
        raise NotImplementedError

    def start(self, rng):
        """Hook called by the fit after every latent q is set to its prior: a node may
        move its own or its parents' q to a better starting point (``Dot`` of two
        latent vectors breaks their symmetry). Default: nothing."""

    def selector(self):
        """The Categorical node this deterministic node selects components by (``Gate``),
        or None; the fit treats it as a mixture assignment (its start, its place in the
        local block). Stochastic nodes answer through their factor's ``selector()``."""
        return None

    # ---- views of some entries of the first plate axis (minibatches, active rows) ----
    def restrict(self, rows, cut, source_rows=None):
        """Become the view of entries ``rows`` of the first plate axis; returns what
        :meth:`restore` needs to undo it. ``cut(array, rows)`` slices an array once per
        view (arrays shared by several nodes are sliced once); a gather also gets the
        remapped indices ``source_rows`` into its restricted source."""
        state = {"plates": self.plates, "replicates": self.replicates}
        self.plates = (len(rows),) + self.plates[1:]
        self.replicates = cut(self.replicates, rows)
        return state

    def aligned_plates(self, parent):
        """``parent``'s plates as they line up (right-aligned, numpy broadcasting) with
        this node's plates: without the component axis where ``parent`` holds a
        mixture's components."""
        return tuple(parent.plates)

    def restore(self, state):
        """Undo :meth:`restrict`."""
        for k, v in state.items():
            setattr(self, k, v)

    def _add_child(self, child):
        if child not in self.children:
            self.children.append(child)

    def reached_entries(self):
        """Which entries of this node some observed entry below depends on: a bool array
        of its plates, or None (every entry, or it cannot be told entry by entry)."""
        if not self.deterministic:
            w = self.mask if self.observed else self.observed_entries()
            return None if w is None else np.broadcast_to(np.asarray(w) != 0, self.plates)
        seen = np.zeros(self.plates, dtype=bool)
        for c in self.children:
            if c.deterministic:
                got = c.entries_reached_in(self)
            elif c.stochastic:
                own = c.reached_entries()
                pm = c._observed_parent_mask()
                nz = np.ones(c.plates, dtype=bool) if own is None else own
                if pm is not None:
                    nz = nz & (np.asarray(pm) != 0)
                got = _entries_reached(c, self, nz)
            else:
                got = None
            if got is None:
                return None
            seen |= got
        return seen

    def entries_reached_in(self, parent):
        """For a deterministic node: the entries of ``parent`` its observed entries depend
        on (bool, parent's plates), or None when it cannot tell (the default)."""
        return None


class Constant(Node):
    """A fixed value in a parent slot, published as the slot family's T(value)."""

    def __init__(self, value, family, name=None):
        value = np.asarray(value, dtype=float)
        super().__init__(name or "constant", value.shape[: value.ndim - family.value_ndim])
        self.value = value
        self.provides = family
        self._moments = family.suff_stats(family.centre(value))

    def set_family(self, family):
        """Publish T of the value under ``family`` (a location shift, graph/centring.py)."""
        self.provides = family
        self._moments = family.suff_stats(family.centre(self.value))

    def moments(self):
        return self._moments

    def moment_plates(self):
        """The plate shape of the moments it publishes: its own plates, or more when its
        location shift c varies where the value does not (T(value - c) per row)."""
        m = self._moments[0]
        return np.shape(m)[:np.ndim(m) - self.provides.event_ndims[0]]

    def restrict(self, rows, cut, source_rows=None):
        """One value per row (a prior mean per data point): the rows' values. A constant
        whose value is not per row (a scalar, one value per column, plates (1,)) but whose
        T(value - c) is (its location shift c is) keeps its value and plates; its moments
        are cut."""
        state = {"plates": self.plates, "value": self.value, "_moments": self._moments}
        batch = self.moment_plates()
        if self.plates and len(self.plates) == len(batch) and self.plates[0] == batch[0]:
            state.update(super().restrict(rows, cut))
            self.value = cut(self.value, rows)
        self._moments = tuple(cut(m, rows) for m in self._moments)
        return state


class _LazyMoments(Sequence):
    """The parents' moment tuples, each computed when first read."""

    def __init__(self, parents):
        self._parents = parents
        self._moments = [None] * len(parents)

    def __len__(self):
        return len(self._parents)

    def __getitem__(self, i):
        m = self._moments
        if isinstance(i, slice):
            for j in range(*i.indices(len(m))):
                if m[j] is None:
                    m[j] = self._parents[j].moments()
            return m[i]
        if m[i] is None:
            m[i] = self._parents[i].moments()
        return m[i]


class FactoredMessage:
    """The message w_n p_n of a factored Categorical q (families/gathered.py) to a
    gather of its table rows: the gather scatters it without building it
    (:meth:`scatter`); anything else reads it as the dense (n, K) array."""

    __array_priority__ = 100

    def __init__(self, q, weights):
        self.q = q
        self.weights = weights

    def dense(self):
        p = self.q.p
        return p if self.weights is None else np.asarray(self.weights)[:, None] * p

    def scatter(self, idx, n_out):
        return self.q.scatter(idx, self.weights, n_out)

    def __array__(self, dtype=None, copy=None):
        a = self.dense()
        return a if dtype is None else a.astype(dtype)

    def __add__(self, other):
        return self.dense() + np.asarray(other)

    __radd__ = __add__

    def __mul__(self, other):
        return self.dense() * np.asarray(other)

    __rmul__ = __mul__


class ChildData:
    """What a factor sees of its child: observed value and/or moments.

    ``moments`` may be computed lazily (``make_moments``): an observed
    Categorical child is used through its labels, and its one-hot T(x)
    (entries x K, e.g. tokens x vocabulary) is only built if a factor asks."""

    __slots__ = ("value", "_moments", "_make", "plates", "value_ndim", "cells")

    def __init__(self, value, moments, plates, value_ndim, make_moments=None, cells=None):
        self.value = value
        self._moments = moments
        self._make = make_moments
        self.plates = tuple(plates)
        self.value_ndim = value_ndim
        # per-coordinate observed flags of partly observed vectors (None: every entry whole);
        # a factor completes such data with Conditional.complete before using it
        self.cells = cells

    @property
    def moments(self):
        if self._moments is None and self._make is not None:
            self._moments = self._make()
        return self._moments

    def expand(self, event_ndims):
        """Insert a size-1 component axis after the plates (for mixtures)."""
        def ins(a, k):
            a = np.asarray(a)
            return np.expand_dims(a, a.ndim - k)
        value = None if self.value is None else ins(self.value, self.value_ndim)
        cells = None if self.cells is None else ins(self.cells, self.value_ndim)
        if self._moments is None and self._make is not None:
            return ChildData(value, None, self.plates + (1,), self.value_ndim, make_moments=lambda: tuple(
                ins(m, k) for m, k in zip(self.moments, event_ndims)), cells=cells)
        moments = None if self._moments is None else tuple(
            ins(m, k) for m, k in zip(self._moments, event_ndims))
        return ChildData(value, moments, self.plates + (1,), self.value_ndim, cells=cells)


class Posterior:
    """The fitted q of a node, answering scipy.stats' questions.

    ``mean``/``var`` have shape plates + event shape; ``params`` uses the node
    constructor's parameter names; ``to_scipy()`` gives frozen scipy objects."""

    def __init__(self, node):
        self.node = node
        self.family = node.family
        self.natural = tuple(np.array(a) for a in node.nat)
        self.is_point = node.point

    @property
    def mean_params(self):
        """E[T(x)] (for a point mass: T at the point)."""
        if self.is_point:
            return self.family.point_stats(self.natural)
        return self.family.mean_params(self.natural)

    @property
    def point(self):
        return self.family.mode(self.natural)

    @property
    def mean(self):
        if self.is_point:
            return self.point
        return self.family.mean(self.natural)

    @property
    def var(self):
        if self.is_point:
            m = self.point
            return tuple(np.zeros_like(a) for a in m) if isinstance(m, tuple) else np.zeros_like(m)
        return self.family.var(self.natural)

    @property
    def cov(self):
        if not hasattr(self.family, "cov"):
            raise AttributeError(f"{self.node.label()}: posterior.cov exists for vector nodes only")
        if self.is_point:   # a point mass has no spread (its stored precision is a pseudo-q's)
            return np.zeros_like(self.family.cov(self.natural))
        return self.family.cov(self.natural)

    @property
    def params(self):
        return self.family.params_from_natural(self.natural)

    def to_scipy(self):
        if self.is_point:
            raise TypeError(f"{self.node.label()} is a point mass (EM); use posterior.point")
        return self.family.to_scipy(self.natural)

    def entropy(self):
        return self.family.entropy(self.natural)

    def sample(self, size=None, seed=None):
        """Draws from q: shape (size,) + plates + event (a pair of arrays for a joint
        NormalGamma / NormalWishart node; labels for a Categorical; the point, repeated,
        for a point mass)."""
        where = f"{self.node.label()}.posterior.sample"
        size, seed = check_size(where, size), check_seed(where, seed)
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        if self.is_point:
            v = self.family.point_value(self.natural)
            lead = () if size is None else ((int(size),) if np.ndim(size) == 0 else tuple(size))
            rep = lambda a: np.broadcast_to(a, lead + np.shape(a)).copy()  # noqa: E731
            return tuple(rep(a) for a in v) if isinstance(v, tuple) else rep(v)
        return self.family.sample(self.natural, rng, size)

    def __repr__(self):
        kind = "point mass" if self.is_point else self.family.name
        return f"<Posterior of {self.node.label()}: {kind}, plates={self.node.plates}>"


class Deterministic(Node):
    deterministic = True

    def backward(self, msg, parent):
        raise NotImplementedError

    def backward_is_linear(self, parent):
        """Is <backward(c, parent), E T(parent)> equal to <c, E T(self)> summed over the
        entries, for every message c (the node's moments linear in the parent's, the
        other parents fixed)? Then a child's ELBO term that is <c, E T(self)> + rest is
        <backward(c), E T(parent)> + rest (inference/compiled.py). Default: False."""
        return False

    def backward_to(self, parent):
        """``msg -> backward(msg, parent)`` for a whole fit, its plates fixed (the compiled
        sweep resolves it once, inference/compiled.py); a node may resolve here what
        depends only on its layout."""
        return lambda msg: self.backward(msg, parent)


class Gather(Deterministic):
    """``source[idx]``: entries of the source's first plate axis picked by an integer array."""

    def __init__(self, source, idx, name=None):
        if isinstance(idx, tuple) or isinstance(idx, slice):
            raise TypeError(f"{source.label()}[...]: index with one integer array "
                            f"(e.g. theta[doc_ids]), not {idx!r}")
        idx = np.asarray(idx)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"{source.label()}[idx]: idx must be an integer array, got dtype {idx.dtype}")
        if not source.plates:
            raise ValueError(f"{source.label()}[idx]: the node has no plates to gather from")
        n = source.plates[0]
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"{source.label()}[idx]: indices must lie in 0..{n - 1}, "
                             f"got range {idx.min()}..{idx.max()}")
        super().__init__(name or f"{source.name}[idx]", idx.shape + source.plates[1:])
        self.idx = idx
        self.source = source
        self.provides = source.provides
        self.parents = [source]
        source._add_child(self)
        self._scatter = Scatter(idx, n)

    def moments(self):
        """The source's moments at the gathered entries. Kept until the source's
        moments change (they are replaced, never modified in place), so the several
        readers in one sweep (prior, ELBO) share one gather of entries x K."""
        src = self.source.moments()
        cached = self._cache
        if cached is not None and cached[0] is src and cached[1] is self.idx:
            return cached[2]
        out = tuple(np.take(np.broadcast_to(m, self.source.plates + np.shape(m)[np.ndim(m) - k:]),
                            self.idx, axis=0)
                    for m, k in zip(src, self.provides.event_ndims))
        self._cache = (src, self.idx, out)
        return out

    def restrict(self, rows, cut, source_rows=None):
        state = super().restrict(rows, cut)
        state.update(idx=self.idx, _scatter=self._scatter)
        self.idx = source_rows
        self._scatter = Scatter(self.idx, self.source.plates[0])  # the source is restricted first
        return state

    def backward(self, msg, parent):
        if len(msg) == 1 and isinstance(msg[0], FactoredMessage) and self.idx.ndim == 1:
            out = msg[0].scatter(self.idx, self.source.plates[0])  # factored: no entries x K
            if out is not None:
                return (out,)
        return tuple(self._scatter(np.broadcast_to(m, self.plates + np.shape(m)[len(self.plates):]),
                                   self.idx.ndim) for m in msg)


def _entries_reached(child, node, seen):
    """The entries of ``node`` (a parent of ``child``) that some entry of ``child`` marked
    in ``seen`` (bool, child's plates) depends on, as a bool array of node's plates; None
    when that cannot be told entry by entry (then every entry counts as reached)."""
    cplates = tuple(child.plates)
    seen = np.broadcast_to(seen, cplates)
    mixture = child.factor.component is not None
    out = None
    for i, p in enumerate(child.factor.parents):
        if p is not node:
            continue
        if mixture and i > 0:   # component parameters: every row may belong to component k
            got = np.full(node.plates, bool(seen.any()))
        elif child.aligned_plates(node) != tuple(node.plates):
            return None         # a plate axis of the parent is not the child's (a category axis)
        else:
            got = reduce_seen(seen, node.plates)
            if got is None:
                return None
        out = got if out is None else out | got
    return out


def reduce_seen(seen, plates):
    """``seen`` (bool, a child's plates) reduced to ``plates`` aligned on the right (an
    entry is reached when any child entry broadcast from it is); None when ``plates`` do
    not broadcast to the child's."""
    cplates, plates = tuple(np.shape(seen)), tuple(plates)
    if len(plates) > len(cplates):
        return None
    pad = (1,) * (len(cplates) - len(plates)) + plates
    if any(a not in (1, b) for a, b in zip(pad, cplates)):
        return None
    axes = tuple(j for j, (a, b) in enumerate(zip(pad, cplates)) if a != b)
    return seen.any(axis=axes, keepdims=True).reshape(plates) if axes else seen.reshape(plates)


def _weighted_sum(values, w, plates):
    """sum over entries of w * values (entries with weight 0 contribute nothing, even NaN)."""
    v = values if type(values) is np.ndarray else np.asarray(values)
    if v.shape != tuple(plates):
        v = np.broadcast_to(v, plates)
    if w is not None:
        v = np.where(w != 0, v, 0.0) * w
    return float(v.sum())


def _stochastic_sources(node):
    """The stochastic nodes a node's value depends on through deterministic nodes only."""
    if not node.deterministic:
        return {node}
    out = set()
    for p in node.parents:
        out |= _stochastic_sources(p)
    return out
