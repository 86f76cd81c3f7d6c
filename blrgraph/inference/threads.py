"""The rows of a batch fit in partitions on this machine's cores (``fit(..., n_jobs=)``).

One more view behind the data seam (:mod:`~blrgraph.inference.views`,
docs/dev/architecture.md): :class:`ThreadView` holds the data axis as ``n_jobs``
contiguous partitions of rows. Each partition is a copy of the model restricted to its
rows (:class:`~blrgraph.inference.views.RowView`, built once per fit; the data arrays and
the start are shared with the model, not copied), fitted in its own thread: numpy and
BLAS release the GIL in the products and the elementwise work that make up a sweep, and
BLAS is held at one thread meanwhile (threadpoolctl) so that the partitions do not
oversubscribe the cores. Each partition fits its local block to the global nodes and
REPORTS (its messages to the global nodes, its ELBO terms, its counts per component);
the reports are summed in partition order and the loop takes the one step of every
global node with them, as for every view.

A global node's messages from the rows are one round over the partitions at the current
globals (a global step reads the globals stepped before it, as in memory), so the
iterates are those of one thread up to the order of the sums (tests/test_threads.py:
GMM, HMM, LDA to 1e-12). Fits with damped or gradient steps, models whose local nodes
lie off the data axis or whose data reach a global node through a deterministic node
off it, fits with rotations between sweeps (they rotate the model's own local q), and
tables too small to gain (below :data:`MIN_ENTRIES` observed entries when
``n_jobs`` is not given) run in one thread
(:class:`~blrgraph.inference.views.WholeData`).

A fit that the compiled sweep runs (compiled.py: rho = 1, no weights, every node
stochastic) does not build the partitions: its rows stay in the model and its row
kernels are split over the same number of threads (:mod:`blrgraph.rowsplit`,
:meth:`ThreadView.row_split`), which leaves the sweep one thread's to rounding.

``n_jobs=1`` keeps the whole fit to one core, BLAS included (:func:`blas_for`).
"""
from __future__ import annotations

import contextlib
import contextvars
import copy
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import rowsplit
from ..graph.plates import add_compact
from .batches import Rows
from .blr import blr_step, message_from
from .partitions import _below
from .points import check_point
from .saddles import component_counts
from .views import DataView, RowView

#: without ``n_jobs=``, rows are split over the cores only when the observed nodes on the
#: data axis hold at least this many entries (below, the threads cost more than they save)
MIN_ENTRIES = 20_000


def cores():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        return os.cpu_count() or 1


def resolve_jobs(n_jobs):
    """``n_jobs`` as a number of partitions (None or -1: every core)."""
    if n_jobs is None or n_jobs == -1:
        return cores()
    return int(n_jobs)


def adopt(model, plan, method, n_jobs):
    """``plan.rows`` becomes :class:`ThreadRows` when the fit can run its rows in
    partitions (see the module docstring) and it is worth it; else it is left as it is."""
    jobs = resolve_jobs(n_jobs)
    structure, block = plan.structure, plan.block
    if jobs < 2 or plan.rows.stochastic or not block.nodes or structure.root is None:
        return plan
    if method.update != "natural" or method.points == "nonconjugate" or plan.damped or \
            plan.one_pass or any(not n.factor.conjugate for n in model.stochastic):
        return plan
    if plan.between_sweeps:   # rotations move the model's local q between sweeps, which
        return plan           # the partitions' copies would not see (rotations.py)
    links = structure.links
    if any(n not in links for n in structure.local) or \
            any(not n.restrictable for n in links) or \
            any(n.source is not None for n in model.observed):
        return plan
    if block.iters > 1 and not block.per_entry:
        return plan     # the block's stopping rule reads every row at once
    for g in structure.globals:   # a deterministic child off the data axis would read
        for c in model.children[g]:  # the model's (stale) rows
            if c.deterministic and c not in links and _below(model, c, links):
                return plan
    jobs = min(jobs, structure.N)
    if jobs < 2:
        return plan
    if n_jobs is None:
        entries = sum(int(np.prod(n.plates)) for n in model.observed if n in links)
        if entries < MIN_ENTRIES:
            return plan
    plan.rows = ThreadRows(model, plan, jobs)
    return plan


class ThreadRows(Rows):
    """Every sweep sees all the rows, in ``jobs`` partitions fitted in threads."""

    stochastic = False

    def __init__(self, model, plan, jobs):
        self.view = ThreadView(model, plan, jobs)

    def next_view(self, rng):
        return self.view

    def finish(self, model):
        self.view.finish()

    def sync(self, model):
        """Before a callback: the partitions' local q written into the model, so that the
        callback (``node.posterior``, ``bg.elbo(model)``, ``model.save``) sees this iterate."""
        if self.view.parts is not None:
            self.view._pull()

    def abort(self, model):
        """The fit stopped on an error: as :meth:`finish`, the error goes on."""
        try:
            self.view.finish()
        except Exception:       # (the fit's own error is the one to see)
            self.view.release()


class ThreadView(DataView):
    """All rows of the data axis in partitions, each a restricted copy of the model in
    its own thread (see the module docstring)."""

    def __init__(self, model, plan, jobs):
        structure = plan.structure
        super().__init__(model, structure)
        self.plan, self.block = plan, plan.block
        self.on_rows = frozenset(structure.links)
        bounds = np.linspace(0, structure.N, jobs + 1).round().astype(int)
        self.rows = [np.arange(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
        self.parts = None      # [Part] built at the first local fit
        self.report = None     # the last local fit's ELBO terms and counts (None: in memory)
        self.pool = self.limiter = None
        self.rounds = 0
        self.split = None      # rowsplit.RowSplit while a compiled sweep runs the rows

    @property
    def rows_in_model(self):
        """Until the partitions are built, every row's q is the model's own: a compiled
        sweep (compiled.py) runs on the model and splits its row kernels instead."""
        return self.parts is None

    def row_split(self):
        """The compiled sweep's row kernels over ``n_jobs`` threads (rowsplit.py), BLAS
        held at one thread; None when the rows are too few to split."""
        if self.split is None:
            if self.structure.N < 2 * rowsplit.MIN_ROWS:
                return None
            self.split = rowsplit.RowSplit(len(self.rows))
            self.limiter = _one_blas_thread()
        return self.split

    # ---- the report (views.py) ------------------------------------------------------
    def messages(self, node):
        """The partitions' messages to ``node`` (one round at the current globals: a
        global step reads the globals stepped before it, as in memory) plus those of its
        children off the data axis (in memory). The partitions are built at the first
        call (their local q is the model's, as after a split of tied components), so the
        model's own rows never build their per-fit arrays (a mixture's statistics matrix)."""
        if self.parts is None:
            self._build()
        kids = [c.name for c in self.model.children[node] if c in self.on_rows]
        msg = None
        if kids:
            for m in self._round(_messages_part, node.name, kids):
                msg = _add(msg, m)
        for c in self.model.children[node]:
            if c not in self.on_rows:
                msg = _add(msg, message_from(self.model, c, node))
        return msg

    def row_terms(self):
        if self.report is None:
            return sum(n.elbo_term() for n in self.model.stochastic if n in self.on_rows)
        return self.report["elbo"]

    def counts(self, z):
        if self.report is None:
            return component_counts(z)
        return self.report["counts"][z.name]

    # ---- on the rows -------------------------------------------------------------------
    def fit_local(self, block, update):
        """The local block fitted on every partition to the current globals, in parallel;
        each partition reports its ELBO terms and counts."""
        if self.parts is None:
            self._build()
        spec = {n.name: (self.plan.rhos[n], n in self.plan.points) for n in self.structure.local}
        outs = self._round(_fit_part, spec, (block.restart, block.final), self.it)
        self.report = {"elbo": 0.0, "counts": {}, "sweeps": 0}
        for r in outs:      # summed in partition order
            self.report["elbo"] += r["elbo"]
            self.report["sweeps"] = max(self.report["sweeps"], r["sweeps"])
            for z, c in r["counts"].items():
                self.report["counts"][z] = c + self.report["counts"].get(z, 0.0)
        self.rounds += 1
        return self.report["sweeps"]

    def split_tied(self, z, groups, rng):
        """Split tied components on the model's rows (the draws of one thread); the
        partitions take the split q, and the next step reads the model's rows."""
        if self.parts is None:     # (a compiled sweep: the rows are the model's)
            super().split_tied(z, groups, rng)
            return
        self._pull()
        super().split_tied(z, groups, rng)
        self._push()
        self.report = None

    def finish(self):
        """After the fit: the local nodes' q written back into the model; the threads,
        the partitions and the BLAS limit released."""
        try:
            if self.parts is not None:
                self._pull()
        finally:
            self.release()

    def release(self):
        """The threads, the partitions and the BLAS limit released."""
        if self.pool is not None:
            self.pool.shutdown()
        if self.split is not None:
            self.split.shutdown()
        if self.limiter is not None:
            self.limiter.restore_original_limits()
        self.parts = self.pool = self.limiter = self.report = self.split = None

    # ---- partitions --------------------------------------------------------------------
    def _build(self):
        """One restricted copy of the model per partition, sharing the model's arrays
        (arrays are replaced, never modified in place), with its local q at the model's."""
        model = self.model
        for n in model.nodes:
            if n.stochastic:
                n.release()      # no per-fit work arrays in the copies
        shared = {}
        for n in model.nodes:
            for v in vars(n).values():
                for a in (v if isinstance(v, tuple) else (v,)):
                    if isinstance(a, np.ndarray):
                        shared[id(a)] = a
        extra = {k: model.__dict__.pop(k) for k in ("fit_result", "svi_state", "dask_view")
                 if k in model.__dict__}
        self.parts = []
        try:
            for rows in self.rows:
                m, s, b = copy.deepcopy((model, self.structure, self.block), dict(shared))
                view = RowView(m, s, rows).__enter__()
                self.parts.append(Part(m, s, b, {n.name: n for n in m.nodes}, view))
        finally:
            model.__dict__.update(extra)
        if len(self.parts) > 1:
            self.pool = ThreadPoolExecutor(len(self.parts) - 1, thread_name_prefix="blrgraph")
        if self.limiter is None:   # (row_split may have set it)
            self.limiter = _one_blas_thread()

    def _round(self, fn, *args):
        """``fn(part, *args)`` on every partition (the first in this thread, the others in
        the pool; numpy's error state goes with them), after the global nodes that
        changed since the last round are set there; the results in partition order."""
        globals_ = [(g.name, g.nat, g.point) for g in self.structure.globals]
        futures = [self.pool.submit(contextvars.copy_context().run, p.call, globals_, fn, args)
                   for p in self.parts[1:]]
        first = self.parts[0].call(globals_, fn, args)
        return [first] + [f.result() for f in futures]

    def _pull(self):
        """The partitions' local q written into the model's local nodes."""
        for n in self.structure.local:
            full = [np.array(np.broadcast_to(a, n.plates + np.shape(a)[np.ndim(a) - k:]))
                    for a, k in zip(_dense(n), n.family.event_ndims)]
            for p in self.parts:
                mine = p.nodes[n.name]
                idx = p.view.idx[mine]
                for arr, a, k in zip(full, _dense(mine), n.family.event_ndims):
                    arr[idx] = np.broadcast_to(a, mine.plates + np.shape(a)[np.ndim(a) - k:])
            n.set_natural(tuple(full))
            n.point = n.point or any(p.nodes[n.name].point for p in self.parts)

    def _push(self):
        """The model's local q cut into the partitions."""
        for n in self.structure.local:
            dense = _dense(n)
            for p in self.parts:
                mine = p.nodes[n.name]
                idx = p.view.idx[mine]
                mine.set_natural(tuple(
                    np.broadcast_to(a, n.plates + np.shape(a)[np.ndim(a) - k:])[idx]
                    for a, k in zip(dense, n.family.event_ndims)))


class Part:
    """A partition: the model's copy restricted to its rows (``view``), its nodes by
    name, and the global parameters it was last given."""

    def __init__(self, model, structure, block, nodes, view):
        self.model, self.structure, self.block = model, structure, block
        self.nodes, self.view = nodes, view
        self.seen = {}

    def call(self, globals_, fn, args):
        for name, nat, point in globals_:
            g = self.nodes[name]
            g.point = point
            if self.seen.get(name) is not nat:
                g.set_natural(nat)
                self.seen[name] = nat
        return fn(self, *args)


def _messages_part(p, name, kids):
    """A partition's summed messages to global node ``name`` from its children ``kids``."""
    total = None
    for c in kids:
        total = _add(total, message_from(p.model, p.nodes[c], p.nodes[name]))
    return total


def _fit_part(p, spec, state, it):
    """A partition's local block fitted to the globals (``spec``: {name: (rho, point)},
    ``state``: the model's block's (restart, final)); its ELBO terms and counts."""
    p.block.restart, p.block.final = state

    def update(n):
        rho, point = spec[n.name]
        blr_step(p.model, n, rho, iteration=it)
        if point and not n.point:
            n.point = True     # a point mass from its first update on, as in memory
        if n.point:
            check_point(n, it)
    sweeps = p.block.fit(p.view, update)
    L = sum(n.elbo_term() for n in p.model.stochastic if n in p.structure.links)
    return {"elbo": L, "sweeps": sweeps,
            "counts": {z.name: component_counts(z) for z in p.structure.assignments}}


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    # at the compact shapes: the partitions' messages of one value for every entry (the
    # scores' shared precision in PCA, a broadcast view) stay one value (plates.add_compact)
    return tuple(add_compact(x, y) for x, y in zip(a, b))


def _dense(n):
    """A node's natural parameters as arrays (a factored Categorical q built dense)."""
    if n.nat is not None:
        return n.nat
    return (n._factored.lam().reshape(n.plates + (-1,)),)


def blas_for(n_jobs):
    """The BLAS threads of a whole fit: with ``n_jobs`` given as one job (``1``, or ``-1``
    on one core), the fit keeps to one core, BLAS held at one thread (threadpoolctl) as in
    every worker of ``n_jobs`` > 1; otherwise BLAS as configured (a split sweep holds it at
    one thread itself). A context manager."""
    limiter = _one_blas_thread() if n_jobs is not None and resolve_jobs(n_jobs) == 1 else None
    return contextlib.nullcontext() if limiter is None else limiter


class _BlasHold:
    """One holder of "BLAS at one thread". threadpoolctl's limits are the process's, so
    fits that run at once in a user's threads share one limit: the first holder sets it,
    the last to let go restores what was there before the first (each restoring its own
    would leave the process at the limit of whichever fit started second). While any
    holder holds it, every thread of the process runs BLAS at one thread."""

    _lock = threading.Lock()
    _count = 0
    _limiter = None

    def __init__(self, threadpool_limits):
        with _BlasHold._lock:
            if _BlasHold._count == 0:
                _BlasHold._limiter = threadpool_limits(limits=1, user_api="blas")
            _BlasHold._count += 1
        self.held = True

    def restore_original_limits(self):
        """Let go (once); the last holder restores the limits."""
        with _BlasHold._lock:
            if not self.held:
                return
            self.held = False
            _BlasHold._count -= 1
            if _BlasHold._count == 0:
                limiter, _BlasHold._limiter = _BlasHold._limiter, None
                limiter.restore_original_limits()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.restore_original_limits()


def _one_blas_thread():
    """BLAS held at one thread (a :class:`_BlasHold`) while a fit or its partitions run
    (threadpoolctl; without it the threads run with BLAS as configured)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    return _BlasHold(threadpool_limits)
