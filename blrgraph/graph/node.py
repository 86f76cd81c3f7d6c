"""Stochastic nodes: a random variable with an exponential-family q (or a point mass, or
data), its observation, its messages to its parents and its ELBO term. The base classes
(``Node``, ``Constant``, ``ChildData``, ``Posterior``) are in ``graph/base.py``.
"""
from __future__ import annotations

import functools
import weakref

import numpy as np

from ..families.gathered import GatheredSoftmax
from .base import ChildData, Node, Posterior, _entries_reached, _LazyMoments, _weighted_sum
from .base import Constant, FactoredMessage, reduce_seen  # noqa: F401 (read from here too)
from .inputs import check_observation, check_plates, check_stream_shape
from .plates import broadcast_plates
from .predictive import node_predictive


#: {node: (factor, plates, parents' moments, lam0)}: :meth:`Stochastic.prior_natural`'s
#: last fixed prior, kept outside the node (a pickled or copied model, e.g. the Dask
#: template whose local q are cut to one entry, carries no broadcast lam0 of all entries)
_PRIOR_MEMO = weakref.WeakKeyDictionary()

_as_float = functools.partial(np.asarray, dtype=float)


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
            shapes = ", ".join(f"{s.name}: {tuple(np.shape(p.moments()[0]))}"
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
        if self._start is not None and not self.observed:
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
                if source.dask and weights is not None and mask is None:
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
        comp = f.component
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
        q = None if self.observed or self._nat is not None else self._factored
        nat = None if self.observed or q is not None else self.nat
        state = super().restrict(rows, cut)
        shift = self.family.shift
        if shift is not None and np.ndim(shift) == len(state["plates"]) + self.family.value_ndim \
                and np.shape(shift)[0] == state["plates"][0] != 1:
            # a location shift per row (a per-row constant prior mean): the rows' shifts
            state.update(family=self.family, provides=self.provides)
            self.family = self.family.with_shift(cut(shift, rows))
            if state["provides"] is state["family"]:
                self.provides = self.family
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
        if self.value is None or self.family.shift is None:
            return self.value
        cached = self._centred
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
            if v is not None and self.family.cell_masks:
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
            if self.family.is_label and self.family.K is None:
                self._obs_moments = self.family.suff_stats(self.value, K=self.factor.n_categories())
            else:
                self._obs_moments = self.family.suff_stats(self.centred_value())
        return self._obs_moments

    def moments(self):
        if self.observed:
            return self._observed_moments()
        if self._moments is None:
            if not self.point and self._factored is not None:
                self._moments = (self._factored.p,)
            else:
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
        if self._nat is None and self._factored is not None:
            self._nat = (self._factored.lam().reshape(self.plates + (-1,)),)
        return self._nat

    @nat.setter
    def nat(self, value):
        self._nat = value
        self._factored = None

    def set_natural(self, nat):
        self.nat = tuple(map(_as_float, nat))
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
        """Drop per-fit work arrays: the factor's, the last prior (:meth:`prior_natural`)
        and the gathered tables of a factored Categorical (rebuilt on demand)."""
        _PRIOR_MEMO.pop(self, None)
        self.factor.release()
        self.family.release()   # a family's memo of the last q (MultivariateNormal's factorisation)
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
        q = self._factored
        if q is not None:
            return q.log_partition - np.einsum("nk,nk->n", self.moments()[0], self.nat[0])
        return self.family.entropy(self.nat)

    @property
    def posterior(self):
        if self.observed:
            raise AttributeError(f"{self.label()} is observed; it has data, not a posterior")
        if not self.fitted:
            if self.unfitted_reason:
                raise AttributeError(f"{self.label()} has no posterior: {self.unfitted_reason}")
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
        return node_predictive(self, inputs, samples=samples, seed=seed)

    # ---- messages -----------------------------------------------------------
    def _observed_parent_mask(self):
        """The masks of this node's observed parents (an entry whose observed parent, e.g.
        a class label, is missing informs no parameter: its parent has no value there)."""
        out = None
        for p in self.factor.parents:
            if p.observed and p.stochastic and p.mask is not None:
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
        q = self._factored
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

    def prior_is_fixed(self):
        """Are the factor's parents all fixed (constants, data), so that lam0 stays the
        same for a whole fit?"""
        return all(p.observed or not (p.stochastic or p.deterministic)
                   for p in self.factor.parents)

    def prior_natural(self):
        """lam0: the factor's natural parameters at the parents' moments, broadcast to the
        node's plates. A prior whose parents are all fixed (constants, data) is kept while
        their moment tuples (replaced, never modified) are the same objects: computed once
        a fit."""
        f = self.factor
        u = [p.moments() for p in f.parents]
        memo = _PRIOR_MEMO.get(self)
        if memo is not None and memo[0]() is f and memo[1] == self.plates and \
                len(memo[2]) == len(u) and all(a is b for a, b in zip(memo[2], u)):
            return memo[3]
        nat = f.prior_natural(u)
        out = tuple(np.broadcast_to(a, self.plates + np.shape(a)[np.ndim(a) - k:])
                    for a, k in zip(nat, self.family.event_ndims))
        if self.prior_is_fixed():
            # the factor held weakly: f.node is the key, so a strong reference would keep
            # the node (and a model built but never fitted) alive in the weak dictionary
            _PRIOR_MEMO[self] = (weakref.ref(f), self.plates, u, out)
        return out

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
            q = self._factored   # a factored q: from scatters, without p
            h = None if q is None else q.entropy_sum(w)
            total += _weighted_sum(self.entropy(), w, self.plates) if h is None else h
        return total
