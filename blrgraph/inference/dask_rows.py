"""Rows on a Dask cluster: one more view behind the data seam (docs/scaling.md).

When an observed node holds a dask array (``observe(dask_array)``, a
:class:`~blrgraph.graph.dask_source.DaskSource`), a fit sees the data through a
:class:`DaskView`. This module is transport only: a round of tasks is a map-reduce over
the chunks of rows (partitions):

* each task gets its chunk (persisted on the workers once), the model restricted to
  the chunk's rows (pickled once per fit, unpickled once per worker thread, restricted
  with :class:`~blrgraph.inference.views.RowView`; the rows of a minibatch: a view
  nested in it) and the global nodes' natural parameters; it fits the local block to
  them and returns the view's report (views.py): its messages to the global nodes
  ({name: tuple of arrays}), its ELBO terms and its counts per component;
* the reports are summed as a tree. The loop takes the steps of the global nodes with
  them (:meth:`~blrgraph.inference.loop.Run.step`, the one step of every fit) and
  assembles the ELBO (:func:`~blrgraph.inference.elbo.view_elbo`).

Each task is a pure function of (chunk, global parameters): the local block restarts
each sweep (or, for a mixture's assignments alone, is one exact update), so a lost
worker's tasks are recomputed and the driver holds only the global posteriors. This is
exact when every global node's messages from the data depend on no other global node
(GMM, LDA, Poisson mixtures: the globals are conditionally independent given the
local nodes); other models are refused. Local posteriors come back as dask arrays on
demand (:func:`~blrgraph.io_dask.local_moments`). The starts of partitions are
:func:`~blrgraph.inference.starts.partition_starts` and
:func:`~blrgraph.inference.starts.minibatch_starts`.
"""
from __future__ import annotations

import contextlib
import math
import gc
import threading
import time
import uuid

import numpy as np

from .batches import Minibatches
from .blr import blr_step, message_from
from .points import check_point
from .saddles import component_counts, split_tied
from .starts import minibatch_starts, partition_starts, slice_start, start_partition
from .views import DataView, RowView

#: results reduced this many at a time (the tree of the reduction)
FAN_IN = 8


def uses_dask(model):
    """Does an observed node hold a dask array?"""
    return any(getattr(n.source, "dask", False) for n in model.observed)


def adopt(model, plan):
    """``fit()``'s plan for data on Dask: the rows source becomes :class:`DaskRows`
    (batch methods) or shuffled minibatches fitted where their rows are (SVI)."""
    if plan.rows.stochastic:
        # minibatches drawn as in memory (the same rows for the same seed), fitted on the
        # workers that hold them: only their indices travel (DaskMinibatches)
        plan.rows = DaskMinibatches(model, plan)
        plan.starts = {}                     # the first minibatch's start: DaskBatchView
        return plan
    plan.block.auto_restart = False           # the block restarts every sweep (see above)
    plan.rows = DaskRows(model, plan)
    plan.starts = {}                         # the starts are taken on the workers
    return plan


class DaskRows:
    """Every sweep sees all the rows, partition by partition on the Dask workers."""

    stochastic = False

    def __init__(self, model, plan):
        self.view = DaskView(model, plan)
        model.dask_view = self.view       # (its .stats: what the last round moved)

    def next_view(self, rng):
        self.view.rng = rng
        return self.view

    def finish(self, model):
        self.view.finish(model)


class DaskMinibatches(Minibatches):
    """SVI minibatches of rows held on Dask. The rows of each minibatch are drawn on the
    driver exactly as in memory (a permutation of the N rows per epoch from the fit's
    rng: the same rows for the same seed); only their indices travel: one task per
    partition the minibatch touches fits the local block on its rows, on the worker
    that holds them (:class:`DaskBatchView`)."""

    def __init__(self, model, plan):
        super().__init__(model, plan.structure, plan.rows.batch_size)
        self.mode = "shuffle"
        self.view = DaskBatchView(model, plan)
        model.dask_view = self.view

    def next_view(self, rng):
        self.view.batch(self._rows(rng), rng)
        return self.view

    def finish(self, model):
        self.view.finish(model)


class DaskView(DataView):
    """All rows of the data axis, on the Dask workers (see the module docstring)."""

    minibatch = False

    def __init__(self, model, plan):
        structure = plan.structure
        super().__init__(model, structure)
        self.plan, self.block = plan, plan.block
        self.links = set(structure.links)
        self.on_rows = frozenset(structure.links)
        dasked = [n for n in model.observed if getattr(n.source, "dask", False)]
        for n in dasked:
            if n not in self.links:
                raise ValueError(f"{n.label()} holds a dask array but is not on the data axis of "
                                 f"{structure.root.label()}; observe an in-memory array there")
        for n in structure.local:
            if n not in self.links:
                raise ValueError(f"fit on dask data: the local node {n.label()} lies on another "
                                 f"data axis than {structure.root.label()}'s; one data axis only")
        for n in structure.links:
            if n.stochastic and n.observed and not getattr(n.source, "dask", False):
                raise ValueError(f"{n.label()} is on the data axis with {dasked[0].label()}, whose "
                                 f"rows are a dask array; give it a dask array chunked the same way")
        self.dasked = dasked
        self.parts = self._partitions(structure, dasked)
        self._check_globals(model)
        self.spec = {n.name: (float(plan.rhos[n]), n in plan.points) for n in structure.local}
        self.starts = dict(plan.starts)
        self.result, self.seen, self.rounds, self.fits = None, None, 0, 0
        self.rng = None
        self._setup = None
        self._splits = {}
        self.where = {}

    # ---- the report (views.py) ------------------------------------------------------
    def messages(self, node):
        """The partitions' messages to ``node`` (scaled by N / |B| for a minibatch), plus
        those of its children off the data axis (in memory)."""
        if self.result is None:      # the first sweep (minibatch): messages from the starts
            self._run(start=self._first_start())
        self._splits = {}
        msg = self.result["msgs"].get(node.name)
        if msg is not None and self.minibatch:
            msg = tuple(self.scale * a for a in msg)
        for c in self.model.children[node]:
            if c not in self.links:
                m = message_from(self.model, c, node)
                msg = m if msg is None else (msg if m is None else tuple(a + b for a, b in zip(msg, m)))
        return msg

    def row_terms(self):
        """The partitions' ELBO terms at the current globals (without a local block,
        a round of tasks evaluates them after a step)."""
        if self.result is None or not self._current():
            if self.block.nodes:
                raise RuntimeError("DaskView.row_terms(): the local block was not fitted to the "
                                   "current globals")
            self._run(fit=False)
        return self.result["elbo"]

    def counts(self, z):
        """The counts of entries per component, sent with the last round's reports."""
        return self.result["counts"][z.name]

    # ---- on the rows -------------------------------------------------------------------
    def fit_local(self, block, update):
        """The local block fitted on every partition to the current globals (the tasks'
        local step: :func:`_fit_block`)."""
        out = self._run()
        self.fits += 1
        return out["sweeps"]

    def split_tied(self, z, groups, rng):
        """Split tied components on the workers: the partitions refit the local block to
        the current globals and share the tied responsibilities at random, drawn from a
        seed taken from the fit's rng and the partition's number (reproducible, also when
        a lost task is recomputed); the next global step reads their messages."""
        self._splits[z.name] = ([list(map(int, g)) for g in groups], int(rng.integers(2 ** 63)))
        self._run(split=dict(self._splits))

    # ---- rounds of tasks ---------------------------------------------------------------
    def _groups(self):
        """[(partition, its rows in this view or None: all)]."""
        return [(p, None) for p in range(len(self.parts))]

    def _first_start(self):
        return partition_starts(self.model, self.structure, self.starts, self.rng,
                                self.plan.used_starts)

    def _part_start(self, start, p):
        return {z: slice_start(v, *self.parts[p][2:]) for z, v in start.items()}

    def _warm(self):
        """Are the local point masses points already (updated in an earlier sweep)?"""
        return self.it > 1

    def _current(self):
        """Was the last round run at the current globals?"""
        return self.seen is not None and all(
            g.nat is s for g, s in zip(self.structure.globals, self.seen))

    def _run(self, start=None, fit=True, split=None):
        from dask import delayed
        chunks, ref, token, _ = self._shipped()
        g = self._globals()
        task, combine = delayed(_task, pure=True), delayed(_combine, pure=True)
        groups, level = self._groups(), []
        self.rounds += 1
        for p, rows in groups:
            data = {name: c[p] for name, c in chunks.items()}
            s = None if start is None else self._part_start(start, p)
            with _near(self.where, p):
                level.append(task(token, ref, p, self.parts[p], data, rows, s, g, fit, self.spec,
                                  self.it, self._warm(), split, dask_key_name=f"blrgraph-part-"
                                  f"{token}-{self.it}-{self.rounds}-{p}-{uuid.uuid4().hex[:8]}"))
        out = _reduce_tree(level, combine)
        self.result, self.seen = out, [n.nat for n in self.structure.globals]
        self.where.update(out["where"])
        # what travelled: the globals to every task (and a minibatch's rows), the reports back
        self.stats = {"partitions": len(groups), "task_seconds": out["seconds"],
                      "task_cpu": out["cpu"], "rebuilt_cpu": out["rebuilt_cpu"],
                      "rebuilt_rows": out["rebuilt_rows"],
                      "bytes_to_tasks": _nbytes(g) * len(groups) + sum(
                          8 * len(r) for _, r in groups if r is not None),
                      "bytes_from_tasks": (_nbytes(out["msgs"]) + 16) * len(groups),
                      "model_bytes": self._setup[3]}
        return out

    def _template(self):
        """(model, structure, block, data children) without the data and with every
        local node's q cut to one entry (the tasks restrict it to their rows)."""
        model, saved = self.model, {}
        for n in self.dasked:
            saved[n] = ("source", n.source)
            n.source = _Shape(n.source.shape)
        for n in self.structure.local:
            saved.setdefault(n, ("q", n.snapshot()))
            n.set_natural(_one_entry(n))
        extra = {k: model.__dict__.pop(k) for k in ("fit_result", "svi_state", "dask_view")
                 if k in model.__dict__}
        self._restore_template = (saved, extra)
        return (model, self.structure, self.block, self.data_children, _cache_limit())

    def _shipped(self):
        """(chunks, model task, token, model bytes): shipped at the first call of a fit."""
        import cloudpickle
        if self._setup is None:
            # the template is pickled while the model is cut (see _template)
            try:
                blob = cloudpickle.dumps(self._template())
            finally:
                self._undo_template()
            self._setup = self._ship(blob)
        return self._setup

    def _undo_template(self):
        saved, extra = self._restore_template
        for n, s in saved.items():
            if s[0] == "source":
                n.source = s[1]
            else:
                n.restore_snapshot(s[1])
        self.model.__dict__.update(extra)

    def _ship(self, blob):
        """The chunks persisted (on the workers under a distributed client) and the
        template made a persisted task of its own: both are recomputed from their
        graphs if a worker is lost (scattered data would not be)."""
        import dask
        from dask import delayed
        token = uuid.uuid4().hex
        srcs = [n.source for n in self.dasked] + [n.source.weights for n in self.dasked
                                                  if n.source.weights is not None]
        ref = delayed(_identity, pure=True)(blob, dask_key_name=f"blrgraph-model-{token}")
        *arrs, ref = dask.persist(*[s.arr for s in srcs], ref)
        for s, a in zip(srcs, arrs):
            s.arr = a
        P = len(self.parts)
        chunks = {n.name: list(zip(n.source.arr.to_delayed().ravel(),
                                   n.source.weights.arr.to_delayed().ravel()
                                   if n.source.weights is not None else [None] * P))
                  for n in self.dasked}
        return chunks, ref, token, len(blob)

    def finish(self, model):
        """After the fit: the local nodes' q live on the workers; their posteriors are
        read as dask arrays (:func:`blrgraph.io_dask.local_moments`)."""
        for n in self.structure.local:
            n.fitted = False
            n.unfitted_reason = (f"its rows live on the Dask workers; read them as dask arrays "
                                 f"with blrgraph.io_dask.local_moments(model, {n.name!r})")
        model.dask_view = self

    def local_moments(self, name):
        """The moments E[T] of local node ``name`` fitted to the current globals, one
        dask array per statistic, computed partition by partition on demand."""
        import dask.array as da
        from dask import delayed
        node = self.model[name]
        if node not in self.structure.local:
            raise ValueError(f"local_moments: {node.label()} is not a local node of the data "
                             f"axis; its posterior is in memory (node.posterior)")
        if self._setup is None:
            raise ValueError("local_moments: fit the model first")
        saved = node.snapshot()
        try:   # the shapes of one entry's moments
            node.set_natural(_one_entry(node))
            one = [np.shape(m) for m in node.moments()]
        finally:
            node.restore_snapshot(saved)
        chunks, ref, token, _ = self._setup
        g = self._globals()
        cols = [[] for _ in one]
        for p, part in enumerate(self.parts):
            data = {nm: c[p] for nm, c in chunks.items()}
            out = delayed(_task, pure=True, nout=None)(token, ref, p, part, data, None, None, g,
                                                       True, self.spec, self.it + 1,
                                                       self.it + 1 > 1, None, name)
            rows = part[1] - part[0] if node in self.structure.links and \
                self._on_rows(node) else part[3] - part[2]
            for j, shp in enumerate(one):
                col = delayed(_pick, pure=True)(out, j)
                cols[j].append(da.from_delayed(col, shape=(rows,) + shp[1:], dtype=float))
        return tuple(da.concatenate(c, axis=0) for c in cols)

    def _on_rows(self, node):
        """Is ``node`` reached from the data axis without a gather (one entry per row)?"""
        while self.structure.links.get(node) is not None:
            kind, node = self.structure.links[node]
            if kind == "gather":
                return False
        return True

    def _globals(self):
        return {g.name: (tuple(np.asarray(a) for a in g.nat), bool(g.point))
                for g in self.structure.globals}

    @staticmethod
    def _partitions(structure, dasked):
        """(first row, end row of the data axis, first row, end row of the dask arrays)
        of every partition. Through a gather (LDA: documents -> entries) the entries must
        be sorted by the gathered row; chunk boundaries move to the next row's first entry
        so that no row of the data axis is split."""
        first = dasked[0].source
        gathers, n = [], dasked[0]
        while structure.links.get(n) is not None:
            kind, via = structure.links[n]
            if kind == "gather":
                gathers.append(n)
            n = via
        if not gathers:
            parts = [(lo, hi, lo, hi) for lo, hi in first.partitions()]
        elif len(gathers) == 1 and gathers[0].source is structure.root:
            idx = np.asarray(gathers[0].idx)
            if idx.size and np.any(np.diff(idx) < 0):
                raise ValueError(f"fit on dask data: the entries of {dasked[0].label()} must be "
                                 f"sorted by their row of {structure.root.label()} (the index of "
                                 f"{gathers[0].label()}), e.g. document by document")
            b = [int(np.searchsorted(idx, idx[e], "left")) for e in first.bounds[1:-1]]
            bounds = sorted(set([0] + b + [len(idx)]))
            if bounds != [int(e) for e in first.bounds]:
                sizes = tuple(np.diff(bounds).tolist())
                for n in dasked:
                    n.source.rechunk(sizes)
            rows = [0] + [int(idx[e]) for e in bounds[1:-1]] + [structure.N]
            parts = [(rows[i], rows[i + 1], bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
        else:
            raise ValueError(f"fit on dask data: the data axis reaches {dasked[0].label()} "
                             f"through {len(gathers)} gathers; one gather from the data axis "
                             f"(theta[doc_ids]) at most")
        chunks0 = first.arr.chunks[0]
        for n in dasked[1:]:
            if n.source.arr.chunks[0] != chunks0:
                n.source.rechunk(chunks0)
        return parts

    def _check_globals(self, model):
        """Refuse a global node whose data messages read another global node (then the
        messages gathered before the sweep's steps would be stale)."""
        self.data_children = {}
        for g in self.structure.globals:
            kids = []
            for c in model.children[g]:
                if c in self.links:
                    kids.append(c)
                    others = [p for p in _latent_parents(c) if p is not g and p not in self.links]
                    if others:
                        raise ValueError(f"fit on dask data: the messages of {c.label()} to "
                                         f"{g.label()} read the global node(s) "
                                         f"{sorted(o.name for o in others)}, updated in the same "
                                         f"sweep; use a joint prior (NormalWishart, NormalGamma) "
                                         f"or compute the data into memory")
                elif c.deterministic and _below(model, c, self.links):
                    raise ValueError(f"fit on dask data: {g.label()} reaches the data through "
                                     f"the deterministic node {c.label()}, which is off the data "
                                     f"axis; compute the data into memory")
            self.data_children[g.name] = [c.name for c in kids]


class DaskBatchView(DaskView):
    """An SVI minibatch of rows held on Dask (see :class:`DaskMinibatches`): one task per
    partition it touches. Its rows' ELBO after the step is their ELBO at the globals the
    local block was fitted to plus sum_g <message to g, E'[T_g] - E[T_g]> (each row's
    terms are linear in every global node's moments: the message is the coefficient),
    so one round of tasks per step suffices."""

    minibatch = True

    def __init__(self, model, plan):
        super().__init__(model, plan)
        self.groups, self.idx, self.scale = [], {}, 1.0

    def batch(self, rows, rng):
        """The next minibatch: ``rows`` of the data axis, grouped by partition."""
        rows = np.asarray(rows)
        self.rows, self.rng, self.result = rows, rng, None
        self.scale = self.structure.N / len(rows)
        self.idx, _ = self.structure.indices(rows)
        first = np.array([part[0] for part in self.parts])
        owner = np.searchsorted(first, rows, "right") - 1
        self.groups = [(int(p), rows[owner == p] - first[p]) for p in np.unique(owner)]

    def _groups(self):
        return self.groups

    def _first_start(self):
        return minibatch_starts(self.model, self.structure, self.starts, self.rows, self.idx,
                                self.rng, self.plan.used_starts)

    def _part_start(self, start, p):
        return {z: ("nat", nat[self._in_part(self.model[z], self.parts[p])])
                for z, nat in start.items()}

    def _warm(self):
        return self.fits > 0

    def _run(self, start=None, fit=True, split=None):
        out = super()._run(start, fit, split)
        self.at = {n.name: tuple(np.array(m) for m in n.moments()) for n in self.structure.globals}
        return out

    def _in_part(self, node, part):
        """The minibatch's entries of ``node`` that lie in partition ``part``."""
        pos = self.idx[node]
        lo, hi = part[:2] if self._on_rows(node) else part[2:]
        return (pos >= lo) & (pos < hi)

    def row_terms(self):
        """The minibatch's terms (unscaled) at the current globals."""
        L = self.result["elbo"]
        for n in self.structure.globals:
            msg = self.result["msgs"].get(n.name)
            if msg is not None:
                L += sum(float(np.sum(a * (new - old)))
                         for a, new, old in zip(msg, n.moments(), self.at[n.name]))
        return L


def _latent_parents(c):
    """The latent stochastic nodes whose moments ``c``'s factor reads (through
    deterministic nodes)."""
    out, stack = set(), list(c.parents)
    while stack:
        p = stack.pop()
        if getattr(p, "deterministic", False):
            stack.extend(p.parents)
        elif getattr(p, "stochastic", False) and not p.observed:
            out.add(p)
    return out


def _below(model, node, links):
    """Does a deterministic ``node`` feed a node in ``links``?"""
    stack = list(model.children[node])
    while stack:
        c = stack.pop()
        if c in links:
            return True
        if c.deterministic:
            stack.extend(model.children[c])
    return False


class _Shape:
    """Stands for a dask source in the pickled model (its shape only)."""

    sequential, dask = False, False

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.n = self.shape[0]


def _one_entry(n):
    """The natural parameters of the first entry of ``n`` (every plate axis cut to 1)."""
    return tuple(np.array(np.broadcast_to(a, n.plates + np.shape(a)[np.ndim(a) - e:])
                          [(slice(0, 1),) * len(n.plates)])
                 for a, e in zip(n.nat, n.family.event_ndims))


def _near(holders, p):
    """Place partition ``p``'s task on the worker that keeps its restricted model (a
    loose restriction: any worker when that one is gone). Without it the scheduler may
    move the chunk to an idle worker, which then rebuilds the partition's model."""
    import contextlib
    import dask
    addr = holders.get(p)
    if addr is None:
        return contextlib.nullcontext()
    return dask.annotate(workers=[addr], allow_other_workers=True)


def _nbytes(obj):
    if obj is None:
        return 0
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(v) for v in obj)
    return 8


def _reduce_tree(level, combine):
    """The partitions' results summed as a tree of FAN_IN-way ``combine`` tasks, computed."""
    import dask
    while len(level) > 1:
        level = [combine(*level[i:i + FAN_IN]) for i in range(0, len(level), FAN_IN)]
    (out,) = dask.compute(level[0])
    return out


def _fit_block(model, block, view, nodes, spec, it, points):
    """Fit the local block of a partition's model (``spec``: {name: (rho, point)}; the
    point masses are points already when ``points``, else they become points in their
    first update, as in memory). Returns the local sweeps."""
    for name, (rho, point) in spec.items():
        nodes[name].point = point and points

    def update(n):
        blr_step(model, n, spec[n.name][0], iteration=it)
        if spec[n.name][1] and not n.point:
            n.point = True
        if n.point:
            check_point(n, it)
    return block.fit(view, update)


# ---- on the workers ------------------------------------------------------------------
_CACHE = {}
_LOCK = threading.Lock()


def _cache_limit():
    """Restricted models a worker thread keeps (dask config ``blrgraph.partition-cache``,
    read on the driver and shipped with the model; None: every partition it fits). A
    partition kept costs about 0.85 kB per row for a GMM with D = 10; one not kept is
    rebuilt from its chunk by every task (the data's statistics again)."""
    import dask
    limit = dask.config.get("blrgraph.partition-cache", None)
    if limit is not None and (isinstance(limit, bool) or int(limit) < 0):
        raise ValueError(f"dask config blrgraph.partition-cache={limit!r}: give the number of "
                         f"partitions a worker thread keeps (0: none), or None for all")
    return None if limit is None else int(limit)


def _partition_model(token, blob, p, part, data):
    """The model restricted to partition ``p``'s rows, built once per worker thread and
    kept (with its data and the statistics derived from them) for the next sweeps.
    Tasks do not depend on what it holds between them: every local node is set from
    the start or refitted from the globals (a lost worker's copy is simply rebuilt)."""
    import cloudpickle
    key = (token, p, threading.get_ident())
    with _LOCK:
        got = _CACHE.get(key)
    if got is not None:
        return got, False
    model, structure, block, children, limit = cloudpickle.loads(blob)
    nodes = {n.name: n for n in model.nodes}
    lo, hi, dlo, _ = part
    for name, (X, W) in data.items():
        n = nodes[name]
        n.source = _chunk(X, W, dlo, n.source.shape)
    view = RowView(model, structure, np.arange(lo, hi)).__enter__()
    for name in data:              # in memory now: nested views cut the arrays
        nodes[name].source = None
        _replicate(nodes[name])
    got = (model, structure, block, children, nodes, view)
    with _LOCK:
        old = [k for k in _CACHE if k[0] != token]     # an earlier fit's
        for k in old:
            del _CACHE[k]
        # the first ``limit`` partitions are kept, the others rebuilt each time (with
        # the partitions visited in turn every sweep, evicting would rebuild them all)
        if limit is None or sum(k[2] == key[2] for k in _CACHE) < limit:
            _CACHE[key] = got
    if old:
        gc.collect()           # a model is a graph of cycles: free its arrays now
    return got, True


def _set_globals(nodes, values):
    for name, (nat, point) in values.items():
        n = nodes[name]
        n.point = point
        n.set_natural(tuple(nat))


def _replicate(obs):
    """Counts read with the rows stand for identical copies of the latent nodes on the
    same plates above them (as ``Model`` sets up for in-memory weights)."""
    if obs.weights is None:
        return
    obs.replicates = obs.weights
    stack = [obs]
    while stack:
        c = stack.pop()
        for p in c.parents:
            if p.stochastic and not p.observed and p.plates == obs.plates:
                p.replicates = obs.weights
                stack.append(p)


def _identity(x):
    return x


def _pick(out, j):
    return out[j]


def _task(token, blob, p, part, data, rows, start, globals_, fit, spec, it, warm, split=None,
          moments=None):
    """One partition (``rows``: the rows of a minibatch in it, numbered from its first
    row; None: all): the globals set to ``globals_``, then the assignments set to
    ``start`` or (with ``fit``) the local block fitted; ``split``: {assignment name:
    (groups, seed)} tied components whose responsibilities are then shared at random
    (:func:`~.saddles.split_tied`, drawn from (seed, partition)). Returns the view's
    report (:func:`_report`), or with ``moments`` the local node's moments."""
    lo, hi, dlo, dhi = part
    t0, c0 = time.perf_counter(), time.thread_time()
    try:
        (model, structure, block, children, nodes, view), fresh = _partition_model(
            token, blob, p, part, data)
        _set_globals(nodes, globals_)
        sweeps = 0
        with contextlib.nullcontext(view) if rows is None else RowView(model, structure, rows) as v:
            if start is not None:
                for name, s in start.items():
                    start_partition(model, nodes[name], s, p)
            elif fit and block.nodes:
                sweeps = _fit_block(model, block, v, nodes, spec, it, warm)
            for name, (groups, seed) in (split or {}).items():
                split_tied(nodes[name], groups, np.random.default_rng([seed, p]))
            if moments is not None:      # the local posterior (local_moments)
                n = nodes[moments]
                return tuple(np.array(np.broadcast_to(m, n.plates + np.shape(m)[np.ndim(m) - e:]))
                             for m, e in zip(n.moments(), n.family.event_ndims))
            out = _report(model, structure, children, nodes)
        return dict(out, sweeps=sweeps, **_timings(p, t0, c0, fresh,
                                                   hi - lo if rows is None else len(rows)))
    except Exception as e:
        where = (dlo, dhi) if rows is None else (lo + int(np.min(rows)), lo + int(np.max(rows)) + 1)
        raise _named(e, p, *where) from e


def _report(model, structure, children, nodes):
    """The rows' messages to the global nodes ({name: tuple of arrays}, unscaled) and
    their ELBO terms, at the current local and global q."""
    msgs = {}
    for g, kids in children.items():
        total = None
        for c in kids:
            m = message_from(model, nodes[c], nodes[g])
            if m is not None:
                total = m if total is None else tuple(a + b for a, b in zip(total, m))
        if total is not None:
            msgs[g] = tuple(np.array(a, dtype=float) for a in total)
    L = 0.0
    for n in model.stochastic:
        if n in structure.links:
            term = n.elbo_term()
            if not math.isfinite(term):
                raise FloatingPointError(f"the ELBO term of {n.label()} is {term}")
            L += term
    counts = {z.name: component_counts(z) for z in structure.assignments}
    return {"elbo": L, "msgs": msgs, "counts": counts}


def _timings(p, t0, c0, fresh, rows):
    """The task's wall and thread CPU seconds; the CPU and rows again under rebuilt_* when
    it built its partition's restricted model (the first sweep, or a partition the
    worker does not keep: ``blrgraph.partition-cache``)."""
    cpu = time.thread_time() - c0
    return {"seconds": time.perf_counter() - t0, "cpu": cpu,
            "rebuilt_cpu": cpu if fresh else 0.0, "rebuilt_rows": rows if fresh else 0,
            "where": {p: _worker_address()}}


def _worker_address():
    try:
        from distributed import get_worker
        return get_worker().address
    except (ImportError, ValueError):
        return None


def _chunk(X, W, lo, shape):
    from ..graph.dask_source import ChunkSource
    return ChunkSource(np.asarray(X), lo, shape, None if W is None else np.asarray(W))


def _named(e, p, lo, hi):
    """The exception with the partition and its rows in front of its message."""
    msg = f"dask partition {p} (rows {lo}..{hi - 1}): {e}"
    try:
        out = type(e)(msg)
    except Exception:   # an exception type that takes other arguments
        out = RuntimeError(msg)
    return out


def _combine(*parts):
    """Sum of partition results (one node of the reduction tree)."""
    out = {"elbo": 0.0, "msgs": {}, "counts": {}, "sweeps": 0, "seconds": 0.0, "cpu": 0.0,
           "rebuilt_cpu": 0.0, "rebuilt_rows": 0, "where": {}}
    for r in parts:
        out["where"].update(r["where"])
        out["elbo"] += r["elbo"]
        for k in ("cpu", "rebuilt_cpu", "rebuilt_rows"):
            out[k] += r[k]
        for z, c in r["counts"].items():
            out["counts"][z] = c + out["counts"].get(z, 0.0)
        out["seconds"] += r["seconds"]
        out["sweeps"] = max(out["sweeps"], r["sweeps"])
        for g, m in r["msgs"].items():
            old = out["msgs"].get(g)
            out["msgs"][g] = m if old is None else tuple(a + b for a, b in zip(old, m))
    return out
