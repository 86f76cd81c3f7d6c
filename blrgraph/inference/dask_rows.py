"""Rows on a Dask cluster: one more view behind the data seam (docs/scaling.md).

When an observed node holds a dask array (``observe(dask_array)``, a
:class:`~blrgraph.graph.dask_source.DaskSource`), a batch fit sees the data through a
:class:`DaskView`. One sweep is a map-reduce over the chunks of rows (partitions):

* each task gets its chunk (persisted on the workers once), the model restricted to
  the chunk's rows (pickled once per fit, unpickled once per worker thread, restricted
  with :class:`~blrgraph.inference.views.RowView`) and the global nodes' natural
  parameters; it fits the local block to them and returns its messages to the global
  nodes ({name: tuple of arrays}) and its ELBO terms;
* the results are summed as a tree; the driver takes the BLR steps of the global
  nodes, lam <- (1 - rho) lam + rho (lam0 + sum of messages), and adds the global
  nodes' ELBO terms.

Each task is a pure function of (chunk, global parameters): the local block restarts
each sweep (or, for a mixture's assignments alone, is one exact update), so a lost
worker's tasks are recomputed and the driver holds only the global posteriors. This is
exact when every global node's messages from the data depend on no other global node
(GMM, LDA, Poisson mixtures: the globals are conditionally independent given the
local nodes); other models are refused. Local posteriors come back as dask arrays on
demand (:func:`local_moments`).
"""
from __future__ import annotations

import gc
import math
import threading
import time
import uuid

import numpy as np

from .blr import MAX_HALVINGS, blr_step, message_from, precision_is_pd
from .points import check_point
from .saddles import component_counts, split_tied, tied_components
from .steps import initial_rhos
from .batches import Minibatches
from .views import DataView, RowView

#: results reduced this many at a time (the tree of the reduction)
FAN_IN = 8
#: rows read to the driver for the k-means start
KMEANS_SAMPLE = 4096


def uses_dask(model):
    """Does an observed node hold a dask array?"""
    return any(getattr(n.source, "dask", False) for n in model.observed)


def adopt(model, method, plan, opts):
    """``fit()``'s plan for data on Dask: the rows source becomes :class:`DaskRows`
    (batch methods) or shuffled minibatches read from the chunks (SVI)."""
    if method.stochastic:
        # minibatches drawn as in memory (the same rows for the same seed), fitted on the
        # workers that hold them: only their indices travel (DaskMinibatches)
        plan.rows = DaskMinibatches(model, plan)
        plan.starts = {}                     # the first minibatch's start: DaskBatchView
        return plan
    if method.nonconjugate or method.step == "damped":
        raise ValueError(f"fit({method.name!r}) on dask data: damped, backtracked steps need "
                         f"the ELBO of a trial step before the local block moves; fit with "
                         f"'vmp' or 'em', or compute the data into memory")
    if opts.local_restart is False:
        raise ValueError(f"fit({method.name!r}, local_restart=False) on dask data: every sweep's "
                         f"tasks refit the local block from the globals (a pure function of the "
                         f"partition and the globals); drop local_restart=False")
    plan.block.auto_restart = False           # the block restarts every sweep (see above)
    plan.rows = DaskRows(model, plan)
    plan.starts = {}                         # the starts are taken on the workers
    return plan


class DaskRows:
    """Every sweep sees all the rows, partition by partition on the Dask workers."""

    stochastic = False

    def __init__(self, model, plan):
        self.view = DaskView(model, plan)
        model.dask_view = self.view       # (its .stats: what the last sweep moved)

    def next_view(self, rng):
        self.view.rng = rng
        return self.view

    def finish(self, model):
        self.view.finish(model)


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


class DaskView(DataView):
    """All rows of the data axis, on the Dask workers (see the module docstring)."""

    def __init__(self, model, plan):
        structure = plan.structure
        super().__init__(model, structure)
        self.plan, self.block = plan, plan.block
        self.links = set(structure.links)
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
        rhos = initial_rhos(model, plan.method)
        self.spec = {n.name: (float(rhos[n]), n in plan.points) for n in structure.local}
        self.starts = {z.name: init for z, init in plan.starts.items()}
        self.result, self.version, self.it = None, 0, 0
        self.rng = None
        self._setup = None
        self._splits = {}
        self.where = {}

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

    # ---- the map-reduce ------------------------------------------------------------
    def _template(self):
        """(model, structure, block, data children) without the data and with every
        local node's q cut to one entry (the tasks restrict it to their rows)."""
        model, saved = self.model, {}
        for n in self.dasked:
            saved[n] = ("source", n.source)
            n.source = _Shape(n.source.shape)
        for n in self.structure.local:
            saved.setdefault(n, ("nat", n.nat, n._moments))
            k = len(n.plates)
            n.nat = tuple(np.array(np.broadcast_to(a, n.plates + np.shape(a)[np.ndim(a) - e:])
                                   [(slice(0, 1),) * k]) for a, e in zip(n.nat, n.family.event_ndims))
            n._moments = None
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

    def _run(self, start, fit_globals, eval_globals, split=None):
        from dask import delayed
        chunks, ref, token, _ = self._shipped()
        task = delayed(_task, pure=True)
        combine = delayed(_combine, pure=True)
        if eval_globals is fit_globals:
            eval_globals = None                    # (the tasks read "the same")
        holders = self._holders()
        level = []
        for p, part in enumerate(self.parts):
            data = {name: c[p] for name, c in chunks.items()}
            s = None if start is None else {z: _slice_start(v, *part[2:]) for z, v in start.items()}
            with _near(holders, p):
                level.append(task(token, ref, p, part, data, s, fit_globals, eval_globals,
                                  self.spec, self.it, None, split,
                                  dask_key_name=f"blrgraph-part-{token}-{self.it}-"
                                  f"{self.version}-{p}-{uuid.uuid4().hex[:8]}"))
        out = _reduce_tree(level, combine)
        self.result = dict(out, version=self.version)
        self.where.update(out["where"])
        # what travelled: the globals to every task, each task's messages back
        self.stats = {"partitions": len(self.parts), "task_seconds": out["seconds"],
                      "task_cpu": out["cpu"], "rebuilt_cpu": out["rebuilt_cpu"],
                      "rebuilt_rows": out["rebuilt_rows"],
                      "bytes_to_tasks": _nbytes((fit_globals, eval_globals)) * len(self.parts),
                      "bytes_from_tasks": (_nbytes(out["msgs"]) + 16) * len(self.parts),
                      "model_bytes": self._setup[3]}
        return self.result

    def _holders(self):
        """{partition: the worker whose task fitted it last}: the scheduler places the
        first sweep's tasks (near their chunks, balancing the workers); from then on each
        partition stays where its restricted model is kept."""
        return self.where

    def _undo_template(self):
        saved, extra = self._restore_template
        for n, s in saved.items():
            if s[0] == "source":
                n.source = s[1]
            else:
                n.nat, n._moments = s[1], s[2]
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
        saved, k = (node.nat, node._moments), len(node.plates)
        try:   # the shapes of one entry's moments
            node.nat = tuple(np.array(np.broadcast_to(a, node.plates + np.shape(a)[np.ndim(a) - e:])
                                      [(slice(0, 1),) * k])
                             for a, e in zip(node.nat, node.family.event_ndims))
            node._moments = None
            one = [np.shape(m) for m in node.moments()]
        finally:
            node.nat, node._moments = saved
        chunks, ref, token, _ = self._setup
        g = self._globals()
        cols = [[] for _ in one]
        for p, part in enumerate(self.parts):
            data = {nm: c[p] for nm, c in chunks.items()}
            out = delayed(_task, pure=True, nout=None)(token, ref, p, part, data, None, g, g,
                                                       self.spec, self.it + 1, name)
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

    def _starts(self):
        """{assignment name: start} for the tasks: an array (sliced per partition),
        ("random", concentration, seed) drawn per partition from the fit's rng, or
        ("kmeans", centres, scaling): k-means on a sample of rows read to the driver,
        each partition's rows then assigned to the nearest centre."""
        from .starts import DIFFUSE, Default
        out = {}
        for name, init in self.starts.items():
            if isinstance(init, np.ndarray):
                out[name] = init
                continue
            kind = str(init)
            if kind in ("kmeans", "kmeans++"):
                try:
                    out[name] = self._kmeans(self.model[name], lloyd=kind == "kmeans")
                    continue
                except ValueError:
                    if not isinstance(init, Default):
                        raise
                    kind = "random"
                    self.plan.used_starts[self.model[name]] = Default(kind)  # FitResult.start
            conc = DIFFUSE if kind == "diffuse" else 1.0
            out[name] = ("random", conc, int(self.rng.integers(2 ** 63)))
        return out

    def _kmeans(self, z, lloyd):
        """Centres of k-means (k-means++ seeds, then Lloyd's iterations) on
        :data:`KMEANS_SAMPLE` rows drawn at random (read from the chunks), with the
        standardisation of their features."""
        from .starts import kmeans
        N, K = self.structure.N, z.nat[0].shape[-1]
        rows = np.sort(self.rng.choice(N, min(N, KMEANS_SAMPLE), replace=False))
        with RowView(self.model, self.structure, rows):
            X, M, scale = _features(self.model, z)
        w = (M.max(axis=1) > 0).astype(float)
        if np.count_nonzero(w) < K:
            raise ValueError(f"init='kmeans': {z.label()} has fewer than K={K} observed entries "
                             f"in the sample; use init='random' or fewer components")
        _, C = kmeans(X, M, w, K, self.rng, lloyd)
        return ("kmeans", C, scale)

    # ---- saddle points (the loop's kick) ----------------------------------------------
    def tied_components(self, z):
        """Tied components of ``z``'s mixtures: the global parameters are on the driver,
        the counts of entries per component come with the last sweep's results."""
        return tied_components(self.model, z, counts=self.result["counts"][z.name])

    def split_tied(self, z, groups, rng):
        """Split tied components on the workers: the partitions refit the local block to
        the current globals and share the tied responsibilities at random, drawn from a
        seed taken from the fit's rng and the partition's number (reproducible, also when
        a lost task is recomputed); the next global step reads their messages."""
        self._splits[z.name] = ([list(map(int, g)) for g in groups], int(rng.integers(2 ** 63)))
        g = self._globals()
        self._run(None, g, g, split=dict(self._splits))

    # ---- the three questions of the seam ----------------------------------------------
    def step(self, node, rho, iteration=None, update="natural"):
        """One BLR step of a global node with the messages the partitions sent."""
        _natural_only(update)
        if iteration is not None:
            self.it = iteration
        if self.result is None:     # the first sweep: messages from the starts
            g = self._globals()
            self._run(self._starts(), g, g)
        return self._step(node, rho, iteration, self.result["msgs"].get(node.name))

    def _step(self, node, rho, iteration, msg):
        """lam <- (1 - rho) lam + rho (lam0 + msg + the messages of children off the data
        axis), rho halved while a precision is not positive definite."""
        self._splits = {}
        for c in self.model.children[node]:
            if c not in self.links:
                m = message_from(self.model, c, node)
                msg = m if msg is None else (msg if m is None else tuple(a + b for a, b in zip(msg, m)))
        target = node.prior_natural()
        if msg is not None:
            target = tuple(a + m for a, m in zip(target, msg)) + tuple(target[len(msg):])
        new = target if rho == 1.0 else tuple((1.0 - rho) * a + rho * t
                                              for a, t in zip(node.nat, target))
        at = f" at iteration {iteration}" if iteration is not None else ""
        for a in new:
            if not np.all(np.isfinite(a)):
                raise FloatingPointError(f"the update of {node.label()} produced non-finite "
                                         f"natural parameters{at}; check the data scale and the "
                                         f"priors")
        r = rho
        for _ in range(MAX_HALVINGS):
            if precision_is_pd(node, new):
                break
            r *= 0.5
            new = tuple((1.0 - r) * a + r * t for a, t in zip(node.nat, target))
        node.set_natural(new)
        self.version += 1
        return new

    def fit_local(self, block, update):
        """The local block fitted on every partition to the current globals (and their
        messages and ELBO terms gathered for the next step and :meth:`elbo`)."""
        g = self._globals()
        return self._run(None, g, g)["sweeps"]

    def elbo(self):
        """The partitions' ELBO terms (with the current globals) plus the global nodes'."""
        if self.result is None or self.result["version"] != self.version:
            if self.block.nodes:
                raise RuntimeError("DaskView.elbo(): the local block was not fitted to the "
                                   "current globals")
            g = self._globals()
            self._run(None, None, g)
        return self.result["elbo"] + _driver_terms(self.model, self.links)


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


class _Assignments:
    """Stands for a mixture assignment restricted to a minibatch's entries while its
    start is drawn on the driver (:func:`~.starts.start_assignment` reads the plates and
    K, and sets the natural parameters)."""

    def __init__(self, z, n):
        K = z.nat[0].shape[-1]
        self.plates = (int(n),) + tuple(z.plates[1:])
        self.nat = (np.zeros(self.plates + (K,)),)
        self.replicates = None

    def set_natural(self, nat):
        self.nat = tuple(nat)


class DaskBatchView(DaskView):
    """An SVI minibatch of rows held on Dask (see :class:`DaskMinibatches`). The driver
    sums the tasks' messages, scales them by N / |B| and takes the Robbins-Monro steps
    of the global nodes; the minibatch's ELBO after the step is its ELBO at the globals
    the local block was fitted to plus sum_g <message to g, E'[T_g] - E[T_g]> (each row's
    terms are linear in every global node's moments: the message is the coefficient),
    so one round of tasks per step suffices."""

    def __init__(self, model, plan):
        super().__init__(model, plan)
        self.batch_starts = dict(plan.starts)
        self.groups, self.idx, self.scale = [], {}, 1.0
        self.fits = 0

    def batch(self, rows, rng):
        """The next minibatch: ``rows`` of the data axis, grouped by partition."""
        rows = np.asarray(rows)
        self.rows, self.rng, self.result = rows, rng, None
        self.scale = self.structure.N / len(rows)
        self.idx, _ = self.structure.indices(rows)
        first = np.array([part[0] for part in self.parts])
        owner = np.searchsorted(first, rows, "right") - 1
        self.groups = [(int(p), rows[owner == p] - first[p]) for p in np.unique(owner)]

    def _batch_start(self):
        """The starts of the minibatch's assignments drawn on the driver as in memory
        (the same rng draws): a random start needs the entries' count only; a k-means
        start reads the minibatch's rows (|B| rows, once per fit)."""
        from .starts import Default, start_assignment
        out = {}
        for z, init in self.batch_starts.items():
            if isinstance(init, np.ndarray):
                init = init[self.idx[z]]
            if not isinstance(init, np.ndarray) and str(init) in ("kmeans", "kmeans++"):
                with RowView(self.model, self.structure, self.rows):
                    used = start_assignment(self.model, z, self.rng, init)
                    out[z.name] = np.array(z.nat[0])
            else:
                stub = _Assignments(z, len(self.idx[z]))
                used = start_assignment(self.model, stub, self.rng, init)
                out[z.name] = np.asarray(stub.nat[0])
            if isinstance(used, Default):
                self.plan.used_starts[z] = used      # a fallback (FitResult.start)
        return out

    def _run_batch(self, start=None):
        from dask import delayed
        chunks, ref, token, _ = self._shipped()
        g = self._globals()
        task, combine = delayed(_batch_task, pure=True), delayed(_combine, pure=True)
        level = []
        holders = self._holders()
        for p, rows in self.groups:
            part = self.parts[p]
            data = {name: c[p] for name, c in chunks.items()}
            s = None if start is None else {z: nat[self._in_part(self.model[z], part)]
                                            for z, nat in start.items()}
            with _near(holders, p):
                level.append(task(token, ref, p, part, data, rows, s, g, self.spec, self.it,
                                  self.fits > 0, dask_key_name=f"blrgraph-batch-{token}-"
                                  f"{self.it}-{self.version}-{p}-{uuid.uuid4().hex[:8]}"))
        out = _reduce_tree(level, combine)
        self.result = dict(out, version=self.version)
        self.where.update(out["where"])
        self.at = {n.name: tuple(np.array(m) for m in n.moments()) for n in self.structure.globals}
        self.stats = {"partitions": len(self.groups), "task_seconds": out["seconds"],
                      "task_cpu": out["cpu"], "rebuilt_cpu": out["rebuilt_cpu"],
                      "rebuilt_rows": out["rebuilt_rows"],
                      "bytes_to_tasks": _nbytes(g) * len(self.groups) + 8 * len(self.rows),
                      "bytes_from_tasks": (_nbytes(out["msgs"]) + 16) * len(self.groups),
                      "model_bytes": self._setup[3]}
        return self.result

    def _in_part(self, node, part):
        """The minibatch's entries of ``node`` that lie in partition ``part``."""
        pos = self.idx[node]
        lo, hi = part[:2] if self._on_rows(node) else part[2:]
        return (pos >= lo) & (pos < hi)

    def step(self, node, rho, iteration=None, update="natural"):
        _natural_only(update)
        if iteration is not None:
            self.it = iteration
        if self.result is None:      # the first minibatch: messages from its start
            self._run_batch(self._batch_start())
        msg = self.result["msgs"].get(node.name)
        if msg is not None:
            msg = tuple(self.scale * a for a in msg)
        return self._step(node, rho, iteration, msg)

    def fit_local(self, block, update):
        self._run_batch()
        self.fits += 1
        return self.result["sweeps"]

    def elbo(self):
        """The minibatch's terms (scaled by N / |B|) at the current globals, plus the
        global nodes' terms."""
        L = self.result["elbo"]
        for n in self.structure.globals:
            msg = self.result["msgs"].get(n.name)
            if msg is not None:
                L += sum(float(np.sum(a * (new - old)))
                         for a, new, old in zip(msg, n.moments(), self.at[n.name]))
        total = self.scale * L + _driver_terms(self.model, self.links)
        if not math.isfinite(total):
            raise FloatingPointError(f"the minibatch ELBO is {total}; check the data scale and "
                                     f"the priors, or lower kappa's first steps (tau=)")
        return total


class _Shape:
    """Stands for a dask source in the pickled model (its shape only)."""

    sequential, dask = False, False

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.n = self.shape[0]


def _client():
    try:
        from distributed import get_client
        return get_client()
    except (ImportError, ValueError):
        return None


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


def _slice_start(v, lo, hi):
    if isinstance(v, np.ndarray):
        return ("array", v[lo:hi])
    return v


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


def _driver_terms(model, links):
    """The ELBO terms of the nodes off the data axis (the globals), on the driver."""
    total = 0.0
    for n in model.stochastic:
        if n not in links:
            term = n.elbo_term()
            if not math.isfinite(term):
                raise FloatingPointError(f"the ELBO term of {n.label()} is {term}")
            total += term
    return total


def _reduce_tree(level, combine):
    """The partitions' results summed as a tree of FAN_IN-way ``combine`` tasks, computed."""
    import dask
    while len(level) > 1:
        level = [combine(*level[i:i + FAN_IN]) for i in range(0, len(level), FAN_IN)]
    (out,) = dask.compute(level[0])
    return out


def _natural_only(update):
    if update != "natural":
        raise ValueError("gradient-descent steps (fit('gd'), fit('sgd')) run on data in memory; "
                         "fit Dask-backed data with fit('vmp'), 'ncvmp', 'em' or 'svi'")


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


def _task(token, blob, p, part, data, start, fit_globals, eval_globals, spec, it, moments=None,
          split=None):
    """One partition: fit the local block to ``fit_globals`` (or set the assignments'
    start), then its messages to the globals and its ELBO terms at ``eval_globals``
    (None: the same); with ``moments`` the local node's moments instead. ``split``:
    {assignment name: (groups, seed)} tied components whose responsibilities are then
    shared at random (:func:`~.saddles.split_tied`, drawn from (seed, partition))."""
    lo, hi, dlo, dhi = part
    t0, c0 = time.perf_counter(), time.thread_time()
    try:
        (model, structure, block, children, nodes, view), fresh = _partition_model(
            token, blob, p, part, data)
        sweeps = 0
        if fit_globals is not None:
            _set_globals(nodes, fit_globals)
        if start is not None:
            for name, s in start.items():
                _start(model, nodes[name], s, p)
        elif fit_globals is not None and block.nodes:
            sweeps = _fit_block(model, block, view, nodes, spec, it, it > 1)
        for name, (groups, seed) in (split or {}).items():
            split_tied(nodes[name], groups, np.random.default_rng([seed, p]))
        if moments is not None:      # the local posterior (local_moments)
            n = nodes[moments]
            return tuple(np.array(np.broadcast_to(m, n.plates + np.shape(m)[np.ndim(m) - e:]))
                         for m, e in zip(n.moments(), n.family.event_ndims))
        if eval_globals is not None:
            _set_globals(nodes, eval_globals)
        return dict(_report(model, structure, children, nodes), sweeps=sweeps,
                    **_timings(p, t0, c0, fresh, hi - lo))
    except Exception as e:
        raise _named(e, p, dlo, dhi) from e


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


def _batch_task(token, blob, p, part, data, rows, start, globals_, spec, it, warm):
    """One partition's share of an SVI minibatch: ``rows`` (numbered from the partition's
    first row) with the local block fitted to ``globals_`` (or the assignments set to
    ``start``: {name: natural parameters of these rows}); returns their unscaled
    messages to the global nodes and ELBO terms. ``warm``: a local point mass is one
    already (it was updated in an earlier minibatch)."""
    lo, hi, dlo, dhi = part
    t0, c0 = time.perf_counter(), time.thread_time()
    try:
        (model, structure, block, children, nodes, _), fresh = _partition_model(
            token, blob, p, part, data)
        _set_globals(nodes, globals_)
        sweeps = 0
        with RowView(model, structure, rows) as view:
            if start is not None:
                for name, nat in start.items():
                    nodes[name].set_natural((nat,))
            elif block.nodes:
                sweeps = _fit_block(model, block, view, nodes, spec, it, warm)
            out = _report(model, structure, children, nodes)
        return dict(out, sweeps=sweeps, **_timings(p, t0, c0, fresh, len(rows)))
    except Exception as e:
        raise _named(e, p, lo + int(np.min(rows)), lo + int(np.max(rows)) + 1) from e


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


def _start(model, z, s, p):
    """The assignment's start on this partition's rows."""
    K = z.nat[0].shape[-1]
    if s[0] == "array":
        r = s[1]
    elif s[0] == "kmeans":
        from .starts import _nearest
        X, M, _ = _features(model, z, s[2])
        labels = _nearest(M * X, (M * X * X).sum(1), M, s[1])
        r = np.zeros((X.shape[0], K))
        r[np.arange(X.shape[0]), labels] = 1.0
        r[M.max(axis=1) == 0] = 1.0 / K
        r = r.reshape(tuple(z.plates) + (K,))
    else:
        _, conc, seed = s
        rng = np.random.default_rng([seed, p])
        r = rng.dirichlet(np.full(K, conc), size=z.plates)
    z.set_natural((np.log(np.maximum(r, 1e-300)),))


def _features(model, z, scale=None):
    """(X, M, scale): the k-means features of z's entries (its observed mixture
    children's first statistic, as :func:`~.starts.assignment_features`), standardised
    with ``scale`` ([(mean, sd)] per child; from these rows when None)."""
    from .starts import _child_features
    data = [c for c in model.children[z] if c.stochastic and c.observed
            and c.factor.selector() is z]
    if not data:
        raise ValueError(f"init='kmeans': mixture assignment {z.label()} has no observed "
                         f"Mixture child to seed from; use init='random'")
    cols, masks, used = [], [], []
    for j, y in enumerate(data):
        X, M = _child_features(z, y)
        if X is None:
            raise ValueError(f"init='kmeans': {y.label()} has plates {y.plates}, which do not "
                             f"extend the assignments' plates {z.plates}; use init='random'")
        if scale is None:
            cnt = M.sum(0)
            mean = (X * M).sum(0) / np.maximum(cnt, 1)
            sd = np.sqrt(((np.where(M > 0, X, mean) - mean) ** 2 * M).sum(0) / np.maximum(cnt, 1))
        else:
            mean, sd = scale[j]
        X = np.where(M > 0, X, mean)
        cols.append((X - mean) / np.where(sd > 0, sd, 1.0))
        masks.append(M)
        used.append((mean, sd))
    return np.concatenate(cols, axis=1), np.concatenate(masks, axis=1), used


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
