"""What runs on the Dask workers (docs/scaling.md): one task per partition of the rows
(:func:`task`) and the sum of their reports (:func:`combine`). A task fits the local
block of its partition's model to the global nodes it is given and returns the view's
report (:mod:`~blrgraph.inference.views`): messages to the global nodes, ELBO terms,
counts per component. The driver's side is :mod:`~blrgraph.inference.dask_rows`."""
from __future__ import annotations

import contextlib
import gc
import math
import threading
import time

import numpy as np

from .blr import blr_step, message_from
from .points import check_point
from .saddles import component_counts, split_tied
from .starts import start_partition
from .views import RowView


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


_CACHE = {}
_LOCK = threading.Lock()


def cache_limit():
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


def identity(x):
    return x


def pick(out, j):
    return out[j]


def task(token, blob, p, part, data, rows, start, globals_, fit, spec, it, warm, split=None,
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


def combine(*parts):
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


# ---- the driver's side of the transport (inference/dask_rows.py) ----
#: results reduced this many at a time (the tree of the reduction)
FAN_IN = 8


class _Shape:
    """Stands for a dask source in the pickled model (its shape only)."""

    sequential, dask, weights = False, False, None

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.n = self.shape[0]


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
