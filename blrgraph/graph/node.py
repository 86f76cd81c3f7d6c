"""Graph nodes: constants, stochastic (exponential-family) nodes, their posteriors.

A node publishes *moments*: the mean parameters E[T(x)] of the family named by
``node.provides`` (a family object). Stochastic nodes own a conditional factor
(``graph/factors``) that knows p(x | parents) in terms of the parents' moments.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from ..families.gathered import GatheredSoftmax, gathered_sum
from .inputs import check_observation, check_plates, check_seed, check_size, check_stream_shape
from .plates import broadcast_plates

_ids = itertools.count()


class Node:
    """Base class of every graph node."""

    deterministic = False
    stochastic = False
    #: can the node become a view of some entries of its first plate axis (``restrict``)?
    restrictable = True

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
        from .deterministic import Gather
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


class _LazyMoments(Sequence):
    """The parents' moment tuples, each computed when first read."""

    def __init__(self, parents):
        self._parents = parents
        self._moments = [None] * len(parents)

    def __len__(self):
        return len(self._parents)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if self._moments[i] is None:
            self._moments[i] = self._parents[i].moments()
        return self._moments[i]


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


class Stochastic(Node):
    """A random variable with an exponential-family q (or a point mass, or data)."""

    stochastic = True
    # True: q's starting point (the prior) is computed on first use, not at construction.
    # A Mixture's prior natural parameters sum_k r_k eta_k are built as plates x K x event
    # (tokens x topics x vocabulary for LDA) and an observed mixture never needs them.
    defer_prior = False

    def __init__(self, family, factor_cls, parents, slots, plates=None, name=None, **fixed):
        self.family = family
        self.provides = family
        super().__init__(name, ())
        self.factor = factor_cls(self, parents, slots, **fixed)
        implied = self.factor.plates()
        if plates is None:
            plates = implied
        else:
            plates = check_plates(self, plates)
            try:
                full = broadcast_plates(implied, plates)
            except ValueError:
                raise ValueError(f"{self.label()}: plates={plates} do not broadcast with its "
                                 f"parents' plates {implied}; give plates that extend them") from None
            if full != plates:
                raise ValueError(f"{self.label()}: plates={plates} are smaller than its parents' "
                                 f"plates {implied}; use plates={full}")
        self.plates = tuple(plates)
        nat0 = self._check_parameter_shapes()
        for p in self.factor.parents:
            self.parents.append(p)
            p._add_child(self)
        self._init_state()
        if not self.defer_prior:
            self.set_natural(nat0)  # q starts at the prior

    def _check_parameter_shapes(self):
        """The prior natural parameters (None if deferred), computed before the node is
        linked to its parents: parameters whose event shapes do not fit together (a
        length-3 mean with a 2x2 precision) are refused here, naming the node."""
        comp = self.factor.component
        try:
            if not self.defer_prior:
                return self.prior_natural()
            if comp is not None:
                comp.prior_natural([p.moments() for p in self.factor.parents[1:]])
            return None
        except ValueError:
            shapes = ", ".join(f"{getattr(s, 'name', i)}: {tuple(np.shape(p.moments()[0]))}"
                               for i, (s, p) in enumerate(zip(self.factor.slots, self.factor.parents)))
            raise ValueError(f"{self.label()}: the shapes of its parameters do not fit together "
                             f"({shapes}); a vector's length must match the matrix dimension "
                             f"and the number of categories") from None

    def _init_state(self, observed=False):
        """No data, no q yet (``observed=True``: a log-factor such as Potential)."""
        self.observed = observed
        self.source = None
        self.value = None
        self.mask = None
        self.weights = None
        self.point = False
        self.fitted = False
        self._moments = None
        self._obs_moments = None
        self._centred = None
        self.nat = None

    # ---- start ----------------------------------------------------------------
    def start_from(self, *params):
        """Start every fit's q of this node at ``Family(*params)`` (the constructor's
        parameters of the node's family, e.g. ``x.start_from(means, np.eye(K))`` for a
        MultivariateNormal) instead of at the prior; broadcast to the node's plates.
        ``start_from()`` with no arguments goes back to the prior. Returns the node."""
        if not params:
            self._start = None
            return self
        where = f"{self.label()}.start_from"
        try:
            nat = self.family.natural_from_params(*self.family.validate_params(*params, where=where))
            nat = tuple(np.broadcast_to(a, self.plates + np.shape(a)[np.ndim(a) - k:]).copy()
                        for a, k in zip(nat, self.family.event_ndims))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: give the parameters {self.family.param_names} of a "
                             f"{self.family.name} with plates {self.plates} ({err})") from None
        self._start = nat
        return self

    def start(self, rng):
        """q at the start given by :meth:`start_from`, if any (see :meth:`Node.start`)."""
        if getattr(self, "_start", None) is not None and not self.observed:
            self.set_natural(self._start)

    # ---- data ---------------------------------------------------------------
    def observe(self, data, mask=None, weights=None):
        """Attach data; returns the node. ``mask`` marks observed entries (True =
        observed), ``weights`` are counts of identical observations. A memory-mapped
        array or a :class:`~blrgraph.graph.stream.Stream` is read batch by batch
        (``fit("svi")``), so memory does not grow with the number of rows."""
        from .data import prepare_observation
        from .stream import as_source
        before = dict(self.__dict__)     # a refused observe leaves the node as it was
        try:
            source = as_source(data)
            if source is not None:
                if getattr(source, "dask", False) and weights is not None and mask is None:
                    source.attach_weights(weights, self.label())   # dask counts of the rows
                    weights = None
                if mask is not None or weights is not None:
                    raise ValueError(f"{self.label()}: streamed data takes no mask= or weights=; "
                                     f"stream complete (NaN-free) chunks, or load the data into "
                                     f"memory to mask or weight it")
                plates = check_stream_shape(self, source.shape)
                value, m, w = None, None, None
            else:
                data, weights = check_observation(self, data, mask, weights)
                value, m, w = prepare_observation(self, data, mask, weights)
                plates = self.plates
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise
        self.source, self.plates = source, plates
        self.value, self.mask, self.weights = value, m, w
        self.observed = True
        self.replicates = self.weights
        self._obs_moments = None
        self.release()   # work arrays built from the previous data (the array may be reused)
        return self

    def aligned_plates(self, parent):
        f = self.factor
        sel = f.selector()
        comp = getattr(f, "component", None)
        plates = tuple(parent.plates)
        for i, p in enumerate(f.parents):
            if p is not parent:
                continue
            # trailing plate axes the factor lines up with its own event axes (a Gamma
            # precision per coordinate of a vector, a Dirichlet's concentrations)
            if sel is not None and p is not sel and comp is not None and i > 0:
                extra = comp.draw_ndim(i - 1, 0) + 1   # and a mixture's K axis
            else:
                extra = f.draw_ndim(i, 0)
            return plates[:len(plates) - extra] if extra else plates
        return plates

    def restrict(self, rows, cut, source_rows=None):
        q = None if self.observed or self._nat is not None else getattr(self, "_factored", None)
        nat = None if self.observed or q is not None else self.nat
        state = super().restrict(rows, cut)
        if self.observed:
            state.update(value=self.value, mask=self.mask, weights=self.weights,
                         _obs_moments=self._obs_moments)
            if self.source is not None:
                self.value, self.mask, self.weights = self.read_batch(rows)
            else:
                self.value = cut(self.value, rows)
                self.mask = cut(self.mask, rows)
                self.weights = cut(self.weights, rows)
            self._obs_moments = None
        elif q is not None:   # a factored q stays factored: its rows, built if read
            state.update(_nat=None, _factored=q, _moments=self._moments)
            self._factored = q.restricted(rows)
            self._moments = None
        else:
            state.update(nat=nat, _moments=self._moments)
            self.nat = tuple(np.broadcast_to(a, state["plates"] + np.shape(a)[np.ndim(a) - k:])[rows]
                             for a, k in zip(nat, self.family.event_ndims))
            self._moments = None
        return state

    def restore(self, state):
        nat = state.pop("nat", None)
        super().restore(state)
        if nat is not None:
            self.nat = nat

    def read_batch(self, rows):
        """Validated data of entries ``rows`` of the first plate axis (streamed data); errors
        give the source's row numbers."""
        from .inputs import check_batch
        return check_batch(self, rows)

    def centred_value(self):
        """The data in the family's centred coordinates (x - c, graph/centring.py): built
        once per data array (kept while ``self.value`` is the same object); masked entries
        hold 0. Without a shift, the data themselves."""
        if self.value is None or getattr(self.family, "shift", None) is None:
            return self.value
        cached = getattr(self, "_centred", None)
        if cached is not None and cached[0] is self.value and cached[1] is self.family:
            return cached[2]
        v = self.family.centre(self.value)
        if self.mask is not None:
            m = np.asarray(self.mask) != 0
            m = m.reshape(m.shape + (1,) * (np.ndim(v) - m.ndim))
            v = np.where(m, v, 0.0)
        self._centred = (self.value, self.family, v)
        return v

    def cells(self):
        """Per-coordinate observed flags (plates + (D,)) of data whose vectors are partly
        observed (``observe(X, mask)`` with a mask of X's shape stores their missing
        coordinates as NaN), or None. Kept while the data array is the same."""
        v = self.value
        memo = self.__dict__.get("_cells_memo")
        if memo is None or memo[0] is not v:
            c = None
            if v is not None and getattr(self.family, "cell_masks", False):
                nan = np.isnan(v)
                c = ~nan if nan.any() else None
            self._cells_memo = memo = (v, c)
        return memo[1]

    def child_data(self):
        if self.observed:
            return ChildData(self.centred_value(), self._obs_moments, self.plates,
                             self.family.value_ndim, make_moments=self._observed_moments,
                             cells=self.cells())
        if self.point:
            return ChildData(self.family.centred_point_value(self.nat),
                             self.family.point_stats(self.nat), self.plates, self.family.value_ndim)
        return ChildData(None, None, self.plates, self.family.value_ndim,   # read when needed
                         make_moments=self.moments)

    def _observed_moments(self):
        """T(data), built on first use (a Categorical takes K from its parent)."""
        if self._obs_moments is None:
            if self.cells() is not None:
                raise ValueError(f"{self.label()}: its vectors are partly observed (a per-coordinate "
                                 f"mask); their statistics depend on the parameters, so they are "
                                 f"only used as the data of its own factor, not as a parent's value")
            if self.family.is_label and getattr(self.family, "K", None) is None:
                self._obs_moments = self.family.suff_stats(self.value, K=self.factor.n_categories())
            else:
                self._obs_moments = self.family.suff_stats(self.centred_value())
        return self._obs_moments

    def moments(self):
        if self.observed:
            return self._observed_moments()
        if self._moments is None and not self.point and getattr(self, "_factored", None) is not None:
            self._moments = (self._factored.p,)
        if self._moments is None:
            if self.nat is None:
                self.set_natural(self.prior_natural())
            if self.point:
                self._moments = self.family.point_stats(self.nat)
            else:
                self._moments = self.family.mean_params(self.nat)
        return self._moments

    # q's natural parameters: an array tuple, or (after :meth:`set_natural_terms`) built
    # from their factored form on first read
    @property
    def nat(self):
        if self._nat is None and getattr(self, "_factored", None) is not None:
            self._nat = (self._factored.lam().reshape(self.plates + (-1,)),)
        return self._nat

    @nat.setter
    def nat(self, value):
        self._nat = value
        self._factored = None

    def set_natural(self, nat):
        self.nat = tuple(np.asarray(a, dtype=float) for a in nat)
        self._moments = None

    # ---- q's state: the one way to save it and put it back (restarts, backtracking,
    # checkpoints, the Dask template) ----
    def snapshot(self):
        """q's state (natural parameters, point mass?, fitted?), for :meth:`restore_snapshot`
        (natural parameters are replaced, never modified in place: no copy is needed)."""
        return (self.nat, self.point, self.fitted)

    def restore_snapshot(self, state):
        """Put back a state of :meth:`snapshot` (through :meth:`set_natural`, so a node
        that derives more from its q, e.g. a chain, rebuilds it)."""
        nat, self.point, self.fitted = state
        self.set_natural(nat)

    def release(self):
        """Drop per-fit work arrays: the factor's, and the gathered tables of a factored
        Categorical (rebuilt on demand)."""
        self.factor.release()
        drop = getattr(self.family, "release", None)
        if drop is not None:
            drop()   # a family's memo of the last q (MultivariateNormal's factorisation)
        memo = self.__dict__.get("_gather_memo")
        if memo:
            memo.clear()

    def set_natural_terms(self, tables, rows):
        """A Categorical q whose natural parameter is a sum of gathered tables,
        lam[n] = sum_j tables[j][rows[j][n]] (one plate axis): its moments come from
        the factored softmax (:func:`~blrgraph.families.gathered.gathered_softmax`),
        which exponentiates only the tables; the dense lam is built only if read."""
        memo = self.__dict__.setdefault("_gather_memo", {})
        q = GatheredSoftmax(tables, rows, self.plates[0], memo=memo)
        self.nat = None
        self._factored = q
        self._moments = None  # p is built when first read (a gather's scatter needs none)

    def entropy(self):
        """H[q] per plate entry (for a factored Categorical, log Z - <p, lam>, which
        needs no log of p)."""
        q = getattr(self, "_factored", None)
        if q is not None:
            return q.log_partition - np.einsum("nk,nk->n", self.moments()[0], self.nat[0])
        return self.family.entropy(self.nat)

    @property
    def posterior(self):
        if self.observed:
            raise AttributeError(f"{self.label()} is observed; it has data, not a posterior")
        if not self.fitted:
            why = getattr(self, "unfitted_reason", None)
            if why:
                raise AttributeError(f"{self.label()} has no posterior: {why}")
            raise AttributeError(f"{self.label()} has no posterior yet: call Model(...).fit() first")
        mix = getattr(self, "q_mixture", None)   # fit("mog"): a mixture while q is its own
        if mix is not None and mix.nat is self.nat:
            return mix.posterior()
        return Posterior(self)

    # ---- entries that integrate out -----------------------------------------
    def observed_entries(self):
        """Which entries of a latent node have an observed descendant: a 0/1 float array
        of its plates, or None when every entry has one (or for data and point masses).

        An entry none of whose descendants is observed (a fully masked row's mixture
        assignment, a latent leaf) integrates out exactly: sum_x p(x | parents) = 1. It
        sends no message to its parents and adds nothing to the ELBO (weight 0 in
        :meth:`message_weight` and :meth:`elbo_term`; its KL from the prior is exactly 0
        rather than rounded to 0), so a masked entry is the same as an entry left out.
        An entry counts as observed when a child reaches it through a mixture's component
        slot or a deterministic node that cannot tell entry by entry (Gather, Dot:
        conservative); a Gate tells its selector's entries (``entries_reached_in``)."""
        if self.observed or self.point or not self.factor.independent_entries:
            return None
        key = [self.plates]
        parts, through = [], []
        for c in self.children:
            if c.deterministic:
                got = c.entries_reached_in(self)
                if got is None:
                    return None
                through.append(got)
                continue
            if not c.stochastic:
                return None
            # the factors of c's message weight to self (message_weight), without building it
            own = c.mask if c.observed else c.observed_entries()
            rep = c.replicates if c.replicates is not None and c.replicates is not self.replicates \
                else None
            pm = c._observed_parent_mask()
            if own is None and rep is None and pm is None:
                return None
            key += [own, rep, pm]
            parts.append((c, (own, rep, pm)))
        memo = self.__dict__.get("_observed_memo")
        if not through and memo is not None and len(memo[0]) == len(key) and \
                memo[0][0] == key[0] and all(a is b for a, b in zip(memo[0][1:], key[1:])):
            return memo[1]
        seen = np.zeros(self.plates, dtype=bool)
        for got in through:
            seen |= got
        for c, factors in parts:
            nz = np.ones(c.plates, dtype=bool)
            for a in factors:
                if a is not None:
                    nz = nz & (np.asarray(a) != 0)
            got = _entries_reached(c, self, nz)
            if got is None:
                seen = None
                break
            seen |= got
        out = None if seen is None or seen.all() else seen.astype(float)
        if not through:
            self._observed_memo = (key, out)
        return out

    # ---- predictions (graph/predictive.py, docs/predict.md) --------------------------------
    def predictive(self, inputs=None, *, samples=2000, seed=0):
        """The posterior predictive E_q[p(x | parents)] of every entry, after a fit: a
        :class:`~blrgraph.graph.predictive.Predictive` with ``mean``, ``var`` (``cov``),
        ``logpdf``, ``sample`` and ``to_scipy``. Exact for conjugate parents; Monte Carlo
        over q (``samples`` draws, ``seed``) otherwise. Masked entries of observed data get
        their imputation. ``inputs``: new design rows of a ``Dot(X, w)`` parent, new rows of
        a Mixture (NaN = missing cells), or ``{name: new values}`` (docs/predict.md)."""
        from .predictive import node_predictive
        return node_predictive(self, inputs, samples=samples, seed=seed)

    # ---- messages -----------------------------------------------------------
    def _observed_parent_mask(self):
        """The masks of this node's observed parents (an entry whose observed parent, e.g.
        a class label, is missing informs no parameter: its parent has no value there)."""
        out = None
        for p in self.factor.parents:
            if getattr(p, "observed", False) and p.stochastic and p.mask is not None:
                m = np.asarray(p.mask, dtype=float)
                out = m if out is None else out * m
        return out

    def message_weight(self, parent):
        """Per-entry weight of this node's messages to ``parent``: mask x counts
        (counts are left out when the parent stands for the same copies), x the masks
        of observed parents; for a latent node, 0 on the entries that integrate out
        (:meth:`observed_entries`)."""
        w = self.mask if self.observed else self.observed_entries()
        pm = self._observed_parent_mask()
        if pm is not None:
            w = pm if w is None else w * pm
        if self.replicates is not None and parent.replicates is not self.replicates:
            w = self.replicates if w is None else w * self.replicates
        return w

    def message_to(self, parent):
        """Sum of this node's messages to ``parent`` (over every slot it fills),
        reduced to ``parent.plates``, in the parent's T coordinates."""
        u = _LazyMoments(self.factor.parents)  # a message often needs only some of them
        w = self.message_weight(parent)
        q = getattr(self, "_factored", None)
        if q is not None and not self.point:
            slots = [i for i, p in enumerate(self.factor.parents) if p is parent]
            m = self.factor.factored_message(slots, q, w, parent.plates) if len(slots) == 1 else None
            if m is not None:
                return m
        x, _ = self.factor.complete(self.child_data(), u)
        total = None
        for i, p in enumerate(self.factor.parents):
            if p is parent:
                m = self.factor.message(i, x, u, w, parent.plates)
                total = m if total is None else tuple(a + b for a, b in zip(total, m))
        return total

    def message_terms_to(self, parent):
        """This node's message to ``parent`` as gathered tables (tables, rows) (see
        :meth:`set_natural_terms`), or None when its factor cannot give it so."""
        f = self.factor
        slots = [i for i, p in enumerate(f.parents) if p is parent]
        if len(slots) != 1:
            return None
        u = _LazyMoments(f.parents)
        return f.message_terms(slots[0], self.child_data(), u, self.message_weight(parent),
                               parent.plates)

    def prior_natural(self):
        u = [p.moments() for p in self.factor.parents]
        nat = self.factor.prior_natural(u)
        return tuple(np.broadcast_to(a, self.plates + np.shape(a)[np.ndim(a) - k:])
                     for a, k in zip(nat, self.family.event_ndims))

    def elbo_term(self):
        """This node's part of the ELBO: E[log p(x | parents)] (+ H[q] when latent),
        summed over entries with weights mask x counts."""
        u = _LazyMoments(self.factor.parents)   # a factor may not need every parent's moments
        x = self.child_data()
        w = self.mask if self.observed else self.observed_entries()
        pm = self._observed_parent_mask()
        if pm is not None:
            w = pm if w is None else w * pm
        if self.replicates is not None:
            w = self.replicates if w is None else w * self.replicates
        total = self.factor.weighted_loglik(x, u, w)
        if not self.observed and not self.point:
            q = getattr(self, "_factored", None)   # a factored q: from scatters, without p
            h = None if q is None else q.entropy_sum(w)
            total += _weighted_sum(self.entropy(), w, self.plates) if h is None else h
        return total


def _entries_reached(child, node, seen):
    """The entries of ``node`` (a parent of ``child``) that some entry of ``child`` marked
    in ``seen`` (bool, child's plates) depends on, as a bool array of node's plates; None
    when that cannot be told entry by entry (then every entry counts as reached)."""
    cplates = tuple(child.plates)
    seen = np.broadcast_to(seen, cplates)
    mixture = getattr(child.factor, "component", None) is not None
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
    v = np.broadcast_to(values, plates)
    if w is not None:
        v = np.where(w != 0, v, 0.0) * w
    return float(np.sum(v))
