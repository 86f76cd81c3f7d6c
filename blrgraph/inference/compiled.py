"""A sweep resolved once per fit (issue 26, "no per-sweep overhead").

The loop's generic sweep asks, at every step of every node, which children send it
messages, through which slots, with which weights (masks, counts, entries that integrate
out), and how each node's ELBO term is assembled. For a batch fit with every row in memory,
rho = 1 and no weights, those answers are the same in every sweep: :func:`compile_sweep`
resolves them once (a :class:`Route` per child and slot, the fixed data a factor reads,
the prior natural parameters of a node whose parents are fixed) and :class:`CompiledSweep`
replays them, calling the factors' own ``message`` and the one step
:func:`~.blr.blr_update`; the iterates are the generic sweep's (tests/test_compiled.py).
A deterministic child (``Dot(W, x)`` of PCA, ``Add``, a gather) is a :class:`PassRoute`:
the routes of its own children to it, mapped back by its ``backward``.

The ELBO term of a latent node whose factor declares ``closed_form_elbo`` (its expected
log-likelihood is <E eta, E T(x)> - E[A] + E log h(x) in the node's own family) is taken
in one expression from what the sweep already has (docs/math.md §3.1):

    E[log p(x | parents)] + H[q] = <lam0 - lam, E T(x)> + A(lam) - E[A0],

E log h cancelling; A(lam) is read from the family's factorisation of q (Cholesky and
log-determinants shared with the moments). Other nodes use their ``elbo_term``.

Anything the compiled sweep does not cover (minibatches, rows in threads or on Dask,
damping or backtracking, point masses, gradient or optimizer steps, masks, counts,
partly observed vectors, factored assignments, a local block that iterates) runs the
generic sweep: :func:`compile_sweep` returns None. Steps between sweeps (the rotations
of ``Dot(W, x)``, inference/rotations.py) run as with the generic sweep: they set q
through ``set_natural``, which the compiled sweep reads afresh.
"""
from __future__ import annotations

import math

import numpy as np

from .. import rowsplit
from ..graph.base import _LazyMoments
from ..graph.plates import add_compact, compact
from ..families.base import _F8, ExponentialFamily, _fsum, vdot as _vdot
from .blr import _finite, blr_update, target_terms
from .views import WholeData

_sum = np.add.reduce   # (ndarray.sum without its Python wrapper: the same reduction)

#: False: every fit runs the generic sweep (the compiled one's reference in the tests)
ENABLED = True

#: steps tried before NodeStep, each ``make(model, node, routes)`` -> a step or None
#: (inference/zstep.py adds a mixture's assignments in one pass over the rows)
STEP_MAKERS = []


def _plus(total, m):
    """A sum of message tuples, None for none so far."""
    return m if total is None else tuple(a + b for a, b in zip(total, m))


class Route:
    """The messages of one child to one parent: the child's factor, the slots the parent
    fills, and for observed data the factor's own resolved messages (``route``)."""

    __slots__ = ("child", "factor", "slots", "target", "fns")

    def __init__(self, child, parent):
        self.child = child
        f = self.factor = child.factor
        self.slots = tuple(i for i, p in enumerate(f.parents) if p is parent)
        self.target = parent.plates
        self.fns = None
        if child.observed:
            x = child.child_data()
            self.fns = [f.route(i, x, self.target) for i in self.slots]

    def message(self):
        f = self.factor
        u = _LazyMoments(f.parents)
        total = None
        if self.fns is not None:
            for fn in self.fns:
                m = fn(u)
                total = _plus(total, m)
            return total
        x = self.child.child_data()   # a latent child: its moments, read when asked
        for i in self.slots:
            m = f.message(i, x, u, None, self.target)
            total = _plus(total, m)
        return total


class PassRoute:
    """The messages of a deterministic child (``Dot``, ``Add``, a gather) to one parent:
    the routes of its own children to it, summed, mapped back by its ``backward`` (the
    generic sweep's :func:`~.blr.message_from`, its routes resolved once)."""

    __slots__ = ("child", "parent", "back", "routes")

    def __init__(self, model, child, parent):
        self.child, self.parent, self.back = child, parent, child.backward_to(parent)
        self.routes = [route(model, c, child) for c in model.children[child]]

    def message(self):
        total = None
        for r in self.routes:
            m = r.message()
            if m is not None:
                total = _plus(total, m)
        return None if total is None else self.back(total)


def route(model, child, parent):
    """A :class:`Route`, or a :class:`PassRoute` through a deterministic child."""
    return PassRoute(model, child, parent) if child.deterministic else Route(child, parent)


def _prior(node, broadcast=True):
    """lam0 of a node whose parents move (:meth:`Stochastic.prior_natural` without its
    memo, which keeps only fixed priors): the factor's natural parameters at the parents'
    moments, broadcast to the node's plates (``broadcast=False``: as the factor gives
    them, for a sum with messages of the full shape)."""
    f = node.factor
    lam0 = f.prior_natural([p.moments() for p in f.parents])
    if not broadcast:
        return tuple(a if type(a) is np.ndarray else np.asarray(a) for a in lam0)
    out = []
    for a, k in zip(lam0, node.family.event_ndims):
        a = np.asarray(a)
        shape = node.plates + a.shape[a.ndim - k:]
        out.append(a if a.shape == shape else np.broadcast_to(a, shape))
    return tuple(out)


def _moving_target(node, total):
    """lam0 + the messages for a node whose parents move, as :func:`~.blr.target_from`
    adds them: a message with every entry of its own plus lam0 at its compact shape,
    which for an unbroadcast lam0 is numpy's broadcasting sum (the same numbers)."""
    if total is None:
        return _prior(node)
    lam0 = _prior(node, broadcast=False)
    plates, nd = node.plates, node.family.event_ndims
    out = []
    for a, m, k in zip(lam0, total, nd):
        shape = plates + a.shape[a.ndim - k:]
        if type(m) is np.ndarray and m.shape == shape and a.ndim <= m.ndim and \
                (a.shape == shape[len(shape) - a.ndim:] or
                 all(x == 1 or x == y for x, y in zip(a.shape[::-1], shape[::-1]))):
            if 0 in a.strides:
                a = compact(a)
            if 0 not in m.strides:
                out.append(rowsplit.add(a, m))   # (rows over the cores)
            else:   # one matrix for every entry (the loadings' precision): one sum
                out.append(_spread_to(a + _compact(m), shape))
        else:
            out.append(add_compact(np.broadcast_to(a, shape), m))
    if len(lam0) == len(out):
        return tuple(out)
    return tuple(out) + tuple(np.broadcast_to(a, plates + a.shape[a.ndim - k:])
                              for a, k in zip(lam0[len(total):], nd[len(total):]))


class NodeStep:
    """One node's step: lam <- lam0 + the sum of its routes' messages (rho = 1); lam0
    kept when the node's parents are fixed (:func:`~.blr.target_from`'s sum)."""

    __slots__ = ("node", "routes", "lam0", "compact0", "last", "msg", "pd", "zeros")

    def __init__(self, node, routes):
        self.node, self.routes = node, routes
        fam = node.family   # the PD test of a family with a precision (blr_update's), or None
        self.pd = fam.precision_is_pd if type(fam).precision_is_pd is not \
            ExponentialFamily.precision_is_pd else None
        self.zeros = {}     # {size: zeros} for _all_finite
        self.lam0 = node.prior_natural() if node.prior_is_fixed() else None
        self.compact0 = None if self.lam0 is None else [compact(a) for a in self.lam0]
        self.last = None   # the last step's lam when it was its target (FusedTerm)
        self.msg = None    # and then its messages' sum when lam0 is kept (ClosedTerm)

    def _target(self, total):
        """lam0 + the messages, as :func:`~.blr.target_from` adds them (a message with
        every entry of its own: lam0 added at its compact shape)."""
        lam0 = self.lam0
        out = []
        for a, c, m in zip(lam0, self.compact0, total):
            if type(m) is np.ndarray and m.shape == a.shape:
                # a message with every entry of its own, or one matrix for every entry
                # (a product's plan: the scores' precision): added at the compact shape
                out.append(c + m if 0 not in m.strides else _spread_to(c + _compact(m), a.shape))
            else:
                out.append(add_compact(a, m))
        return tuple(out) + tuple(lam0[len(total):])

    def step(self, it):
        routes = self.routes
        if len(routes) == 1:
            total = routes[0].message()
        else:
            total = None
            for r in routes:
                m = r.message()
                if m is not None:
                    total = _plus(total, m)
        node, lam0 = self.node, self.lam0
        if lam0 is None:
            target = _moving_target(node, total)
        elif total is None:
            target = lam0
        else:
            target = self._target(total)
        # rho = 1: the step is its target when every entry is finite and a precision is
        # positive definite (blr_update's checks, one product per component); otherwise
        # blr_update itself (rho halved, or the error naming the node and the fix)
        if _all_finite(target, self.zeros) and (self.pd is None or self.pd(target)):
            new = target
        else:
            new = blr_update(node, node.nat, target, 1.0, it)
        self.last = new if new is target else None
        self.msg = total if lam0 is not None and new is target else None
        node.set_natural(new)


def _compact(a):
    """:func:`~blrgraph.graph.plates.compact` of an ndarray, without its per-axis loop when
    the stride-0 axes lead (a one-matrix spread: the product's plan's messages)."""
    st = a.strides
    k = st.count(0)
    if k == 0:
        return a
    if st[:k] == (0,) * k:
        return a[(slice(0, 1),) * k]
    return compact(a)


def _spread_to(s, shape):
    """``np.broadcast_to(s, shape)`` of a new C-contiguous ``s`` in one call (a read-only
    view, stride 0 along the axes ``s`` has of size 1)."""
    if s.shape == shape:
        return s
    if not s.flags.c_contiguous:   # (a sum in a prior's permuted memory order)
        return np.broadcast_to(s, shape)
    lead = len(shape) - s.ndim
    if lead == 0 and s.shape[0] == 1 and s.shape[1:] == shape[1:]:
        st = (0,) + s.strides[1:]   # (one matrix for every entry of one plate axis)
    else:
        st = (0,) * lead + tuple(0 if n == 1 and t != 1 else d
                                 for n, t, d in zip(s.shape, shape[lead:], s.strides))
    v = np.ndarray(shape, s.dtype, s, 0, st)
    v.flags.writeable = False
    return v


#: arrays up to this size are tested by one product with kept zeros (_all_finite)
SUM_CHECK = 1 << 16


def _all_finite(arrays, zeros):
    """Is every entry of every array finite? One product with zeros per contiguous float
    array (its compact view: one matrix for every entry is tested once) of at most
    ``SUM_CHECK`` entries (0 x inf and 0 x nan are nan: the product is 0 exactly when
    every entry is finite, and it cannot overflow); :func:`~.blr._finite` for any other
    array (a larger one: one sum, no kept zeros)."""
    for a in arrays:
        if type(a) is np.ndarray and a.dtype == _F8:
            if not a.flags.c_contiguous:   # (the common case, contiguous, goes straight on)
                if 0 in a.strides:
                    a = _compact(a)
                if not a.flags.c_contiguous and a.flags.f_contiguous:
                    a = a.T   # (z's log-likelihoods come transposed: FlatStats.dot)
            if a.flags.c_contiguous and 0 < a.size <= SUM_CHECK:
                z = zeros.get(a.size)
                if z is None:
                    z = zeros[a.size] = np.zeros(a.size)
                if not _vdot(a, z) == 0.0:
                    return False
                continue
        if not _finite(compact(a)):
            return False
    return True


class ClosedTerm:
    """A latent node's ELBO term as <lam0 - lam, E T> + A(lam) - E[A0] (module docstring);
    lam0 and E[A0] summed over the entries kept when the parents are fixed (constants,
    data). When q is still the node's last step at rho = 1 from that lam0 (``step``),
    lam0 - lam is minus the step's messages: <lam0 - lam, E T> = -<messages, E T>."""

    __slots__ = ("node", "lam0", "ea0", "parts0", "step")

    def __init__(self, node, step=None):
        self.node = node
        fixed = node.prior_is_fixed()
        self.lam0 = node.prior_natural() if fixed else None
        self.ea0 = self._ea0() if fixed else None
        self.parts0 = None if self.lam0 is None or \
            getattr(node.family, "shared_sums", None) is None else _shared_prior(self.lam0)
        self.step = step

    def _ea0(self):
        n = self.node
        f = n.factor
        ea0 = f.expected_log_partition([p.moments() for p in f.parents])
        if type(ea0) is float or (type(ea0) is np.float64 or
                                  (type(ea0) is np.ndarray and ea0.ndim == 0)):
            return float(ea0) * math.prod(n.plates)   # (one number for every entry)
        return float(_sum(np.broadcast_to(ea0, n.plates), axis=None))

    def expected_a0(self):
        """E[A0]: kept when the parents are fixed, else at their current moments."""
        return self._ea0() if self.ea0 is None else self.ea0

    def __call__(self):
        n = self.node
        lam = n.nat
        lam0 = _prior(n) if self.lam0 is None else self.lam0
        shared = _shared_term(n, lam0, lam, self.parts0)
        if shared is not None:
            return shared - self.expected_a0()
        fam = n.family
        total = fam.log_partition_total(lam) if hasattr(fam, "log_partition_total") else \
            _fsum(fam.log_partition(lam))
        st = self.step
        msg = None if st is None or st.last is None or st.last[0] is not lam[0] else st.msg
        if msg is not None and all(type(d) is np.ndarray and d.shape == a.shape
                                   for d, a in zip(msg, lam)):
            # lam = lam0 + msg (lam0 alone in the components past msg's)
            for d, m in zip(msg, n.moments()):
                total -= _inner(d, m)
            return total - self.expected_a0()
        for a0, a, m in zip(lam0, lam, n.moments()):
            total += _inner(a0 - a, m)
        return total - self.expected_a0()


def _inner(d, m):
    """<d, m> summed over every entry (one dot product when the shapes agree)."""
    return float(_vdot(d, m)) if type(m) is np.ndarray and d.shape == m.shape else \
        float(_sum(d * m, axis=None))


def _shared_prior(lam0):
    """(lam0_1 as one vector or None, lam0_2 as one flat matrix) when lam0 has one second
    component for every entry (:func:`_shared_term`), else None."""
    if len(lam0) != 2 or np.ndim(lam0[1]) < 2:
        return None
    b = compact(lam0[1])
    K = b.shape[-1]
    if b.shape[-2] != K or any(k != 1 for k in b.shape[:-2]) or np.shape(lam0[0])[-1:] != (K,):
        return None
    a = compact(lam0[0])
    return (a.reshape(K) if a.size == K else None), b.reshape(K * K)


def _shared_term(node, lam0, lam, parts0=None):
    """<lam0, E T> + H[q] (the same as <lam0 - lam, E T> + A(lam) when log h = 0, without
    their two large terms m^T L m that cancel) for a Gaussian q whose entries share one
    covariance Sigma (the family's ``shared_sums``: PCA's scores and ARD loadings) and a
    lam0 with one second component for every entry: <lam0_1, E[V]> + <lam0_2, S> with
    S = n Sigma + E[V]^T E[V] (the product's plan reads the same S) + n H of one entry,
    without the (entries, D, D) stack of E[v v^T] (None otherwise)."""
    fam = node.family
    f = getattr(fam, "shared_sums", None)
    if f is None or len(lam) != 2 or type(fam).expected_log_base_measure is not \
            ExponentialFamily.expected_log_base_measure:
        return None
    parts0 = _shared_prior(lam0) if parts0 is None else parts0
    if parts0 is None:
        return None
    parts = f(lam)
    if parts is None:
        return None
    V, _, S = parts
    a, b = parts0
    first = float(_sum(V @ a, axis=None)) if a is not None else \
        float(_sum(lam0[0] * V.reshape(lam0[0].shape), axis=None))
    return first + float(_vdot(b, S)) + fam.entropy_total(lam)


class FusedTerm:
    """The ELBO terms of the sweep's last-stepped node and of its children whose terms
    are <their message, E T(node)> + a rest that does not depend on the node
    (``Conditional.term_rest``; 0 when ``term_is_message``: a mixture's data and its
    assignments z; the Normal data of PCA's ``Dot(W, x)``, through the product, whose
    moments are linear in W's): with lam = lam0 + those messages (this sweep's step at
    rho = 1, nothing changed since) they add up to A(lam) - E[A0] + the rests (for z:
    the sum of the log-sum-exps of its softmax). Otherwise the terms one by one."""

    __slots__ = ("step", "closed", "children", "rests")

    def __init__(self, step, closed, children, rests=()):
        self.step, self.closed, self.children, self.rests = step, closed, children, rests

    def __call__(self):
        st = self.step
        last, n = st.last, st.node
        nat = n.nat
        if last is None or nat[0] is not last[0]:
            return self.closed() + sum(t() for t in self.children)
        fam = n.family
        lpt = getattr(fam, "log_partition_total", None)
        total = (lpt(nat) if lpt is not None else _fsum(fam.log_partition(nat))) - \
            self.closed.expected_a0()
        for factor, rest in self.rests:
            total += rest(_LazyMoments(factor.parents))
        return total


def _rest(r):
    """(the observed child, its factor's ``term_rest``) for a route whose child's ELBO
    term is <the route's message, E T(node)> + that rest, else None: an observed child
    filling one slot, directly or through one deterministic node whose ``backward`` is
    linear in the node's moments and which has that child alone."""
    if type(r) is PassRoute:
        d = r.child
        if len(r.routes) != 1 or type(r.routes[0]) is not Route or \
                not d.backward_is_linear(r.parent):
            return None
        r = r.routes[0]
    c = r.child
    if not c.observed or len(r.slots) != 1:
        return None
    rest = c.factor.term_rest(r.slots[0], c.child_data())
    return None if rest is None else (c, rest)


class ObservedTerm:
    """An observed node's ELBO term, E[log p(data | parents)], its data fixed."""

    __slots__ = ("factor", "x")

    def __init__(self, node):
        self.factor = node.factor
        self.x = node.child_data()

    def __call__(self):
        f = self.factor
        return f.weighted_loglik(self.x, _LazyMoments(f.parents), None)


class CompiledSweep:
    """The sweep of :func:`compile_sweep`: the globals' steps in schedule order, the
    local nodes' single steps, then the ELBO (the generic sweep's order)."""

    def __init__(self, model, steps, local_steps, terms):
        self.model = model
        self.steps = steps
        self.local_steps = local_steps
        self.terms = terms
        # the routes hold the data they were built from: a node re-observed during the
        # run (a callback's ``observe``) makes the sweep stale
        self._data = [(n, n.value, n.mask) for n in model.observed]

    def stale(self):
        """Was a data array or mask replaced since this sweep was built?"""
        return any(n.value is not v or n.mask is not m for n, v, m in self._data)

    def sweep(self, it):
        for s in self.steps:
            s.step(it)
        for s in self.local_steps:
            s.step(it)
        return self.elbo()

    def elbo(self):
        total = 0.0
        for t in self.terms:
            total += t()
        if not math.isfinite(total):   # the generic assembly names the node and the fix
            from .elbo import elbo
            return elbo(self.model)
        return total


def compile_sweep(run, view):
    """A :class:`CompiledSweep` for this run's sweeps, or None when the generic sweep is
    needed (module docstring)."""
    plan, model = run.plan, run.model
    block = plan.block
    if (not ENABLED or not (type(view) is WholeData or view.rows_in_model) or plan.rows.stochastic
            or run.backtrack.active or any(u != "natural" for u in run.updates.values())
            or plan.points or plan.delta or run.own_objective is not None
            or any(r != 1.0 for r in run.rhos.values())
            or (block.nodes and (block.iters != 1 or block.last))):
        return None
    if not _plain(model):
        return None
    local = list(block.order) if block.nodes else []
    if any(target_terms(model, n) is not None for n in local):
        return None
    nodes = list(plan.structure.globals) + local
    if set(nodes) != set(model.latent):
        return None
    steps = []
    for n in nodes:
        routes = [route(model, c, n) for c in model.children[n]]
        step = None
        for make in STEP_MAKERS:
            step = step or make(model, n, routes)
        steps.append(step or NodeStep(n, routes))
    step_of = {s.node: s for s in steps}
    terms = {}
    for n in model.stochastic:
        if n.observed:
            terms[n] = ObservedTerm(n)
        else:
            closed = ClosedTerm(n, step_of.get(n)) if n.factor.closed_form_elbo else None
            terms[n] = closed if closed is not None and _agrees(closed, n) else n.elbo_term
    last = steps[-1]
    rests = [_rest(r) for r in last.routes]
    if isinstance(terms[last.node], ClosedTerm) and rests and all(rests) and \
            len({c for c, _ in rests}) == len(rests):
        terms[last.node] = FusedTerm(last, terms[last.node], [terms.pop(c) for c, _ in rests],
                                     [(c.factor, rest) for c, rest in rests])
    k = len(plan.structure.globals)
    return CompiledSweep(model, steps[:k], steps[k:], list(terms.values()))


def _agrees(term, node):
    """The closed form checked once against the node's own term at the start (a family
    without ``log_partition``, or whose pieces do not fit together, keeps its own)."""
    try:
        got, want = term(), node.elbo_term()
    except (NotImplementedError, ValueError, FloatingPointError, np.linalg.LinAlgError):
        return False
    scale = max(1.0, abs(want))
    return math.isfinite(got) and abs(got - want) <= 1e-9 * scale


def _plain(model):
    """Every node stochastic, no point masses, no weights (masks, counts, entries that
    integrate out), no streamed or partly observed data, no factored or mixture q."""
    from .mixture_q import mixture_of
    for n in model.stochastic:
        if n.point or n.replicates is not None or n._observed_parent_mask() is not None:
            return False
        if not n.factor.conjugate:
            return False
        if n.observed:
            if n.source is not None or n.mask is not None or n.cells() is not None:
                return False
        elif n.observed_entries() is not None or n._factored is not None or \
                mixture_of(n) is not None or n.nat is None:
            return False
    return True
