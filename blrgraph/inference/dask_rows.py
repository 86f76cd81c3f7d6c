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

import uuid

import numpy as np

from .batches import Minibatches, Rows
from .blr import message_from
from .dask_tasks import (_nbytes, _near, _reduce_tree, _Shape, cache_limit, combine, identity,
                         pick, task)
from .partitions import data_children, held_rows, partitions
from .starts import minibatch_starts, partition_starts, slice_start
from .views import DataView

def uses_dask(model):
    """Does an observed node hold a dask array?"""
    return any((n.source is not None and n.source.dask) for n in model.observed)


def adopt(model, plan):
    """``fit()``'s plan for data on Dask: the rows source becomes :class:`DaskRows`
    (batch methods) or shuffled minibatches fitted where their rows are (SVI)."""
    if plan.structure.constants:
        # (the workers' copies were measured 2% off the fit in memory: refused, not guessed)
        node = next(iter(plan.structure.constants.values()))
        raise ValueError(f"{node.label()} has a parameter with one value per row of the data "
                         f"axis, which fits on dask data do not support yet: observe the rows "
                         f"in memory (np.asarray(data)) for this model")
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


class DaskRows(Rows):
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
        self.dasked = held_rows(model, structure)
        self.parts = partitions(structure, self.dasked)
        self.data_children = data_children(model, structure)
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
        local step: :func:`~.dask_tasks.task`)."""
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
        run, add = delayed(task, pure=True), delayed(combine, pure=True)
        groups, level = self._groups(), []
        self.rounds += 1
        for p, rows in groups:
            data = {name: c[p] for name, c in chunks.items()}
            s = None if start is None else self._part_start(start, p)
            with _near(self.where, p):
                level.append(run(token, ref, p, self.parts[p], data, rows, s, g, fit, self.spec,
                                  self.it, self._warm(), split, dask_key_name=f"blrgraph-part-"
                                  f"{token}-{self.it}-{self.rounds}-{p}-{uuid.uuid4().hex[:8]}"))
        out = _reduce_tree(level, add)
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
        return (model, self.structure, self.block, self.data_children, cache_limit())

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
        ref = delayed(identity, pure=True)(blob, dask_key_name=f"blrgraph-model-{token}")
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
            out = delayed(task, pure=True, nout=None)(token, ref, p, part, data, None, None, g,
                                                       True, self.spec, self.it + 1,
                                                       self.it + 1 > 1, None, name)
            rows = part[1] - part[0] if node in self.structure.links and \
                self._on_rows(node) else part[3] - part[2]
            for j, shp in enumerate(one):
                col = delayed(pick, pure=True)(out, j)
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


def _one_entry(n):
    """The natural parameters of the first entry of ``n`` (every plate axis cut to 1)."""
    return tuple(np.array(np.broadcast_to(a, n.plates + np.shape(a)[np.ndim(a) - e:])
                          [(slice(0, 1),) * len(n.plates)])
                 for a, e in zip(n.nat, n.family.event_ndims))
