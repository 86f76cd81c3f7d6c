"""Row kernels split over this machine's cores (``fit(..., n_jobs=)`` on the compiled sweep).

A sweep that the compiled sweep runs (inference/compiled.py) spends nearly all of its time
on large tables in three row kernels: the mixture's log-likelihoods Phi @ coef, the
assignments' softmax, and the components' statistics r^T Phi (graph/suffstats.py,
families/categorical.py). While a fit with ``n_jobs`` > 1 runs such a sweep, a
:class:`RowSplit` is active (a context variable, so other threads and other fits never see
it): each of those kernels cuts its rows into ``jobs`` contiguous blocks, runs the first in
the calling thread and the others in the split's threads (numpy and BLAS release the GIL;
BLAS is held at one thread meanwhile), and joins the blocks in row order, so the result is
one thread's up to the order of a sum over rows (docs/dev/architecture.md, "Rows over the
cores"). Kernels on fewer than ``2 * MIN_ROWS`` rows run whole.
"""
from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: a block of a split kernel holds at least this many rows (below, the threads cost more
#: than they save)
MIN_ROWS = 8192

_ACTIVE = contextvars.ContextVar("blrgraph_rowsplit", default=None)


class RowSplit:
    """``jobs`` threads (the caller's and ``jobs - 1`` in a pool) for the row kernels."""

    def __init__(self, jobs):
        self.jobs = int(jobs)
        self.pool = ThreadPoolExecutor(self.jobs - 1, thread_name_prefix="blrgraph-rows")

    def bounds(self, n):
        """The blocks' row bounds for ``n`` rows (``jobs`` contiguous blocks), or None
        when the rows are too few to split."""
        jobs = min(self.jobs, n // MIN_ROWS)
        if jobs < 2:
            return None
        return np.linspace(0, n, jobs + 1).round().astype(int)

    def run(self, fn, bounds):
        """``fn(a, b)`` on every block; the results in row order."""
        futures = [self.pool.submit(_block_context().run, fn, a, b)
                   for a, b in zip(bounds[1:-1], bounds[2:])]
        first = fn(bounds[0], bounds[1])
        return [first] + [f.result() for f in futures]

    def shutdown(self):
        self.pool.shutdown()

    def __enter__(self):
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc):
        _ACTIVE.reset(self._token)


def _block_context():
    """The caller's context (numpy's error state goes with the blocks) without the active
    split: a kernel inside a block runs whole."""
    ctx = contextvars.copy_context()
    ctx.run(_ACTIVE.set, None)
    return ctx


def active(n):
    """The row bounds of the active :class:`RowSplit` for a kernel on ``n`` rows, with
    the split: ``(split, bounds)``, or None (no split active, or too few rows)."""
    split = _ACTIVE.get()
    if split is None:
        return None
    bounds = split.bounds(n)
    return None if bounds is None else (split, bounds)


def add_rows(a):
    """The sum over the first axis of ``a`` (rows), split over the active
    :class:`RowSplit`'s threads when there is one and the rows are many; the blocks'
    sums added in row order."""
    split = active(a.shape[0])
    if split is None:
        return np.add.reduce(a, axis=0)
    parts = split[0].run(lambda i, j: np.add.reduce(a[i:j], axis=0), split[1])
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def add(a, b):
    """``a + b`` for ``b`` with the rows (``a`` broadcasting against them), split over
    the active :class:`RowSplit`'s threads when there is one and the rows are many."""
    split = active(b.shape[0]) if b.ndim >= 1 else None
    if split is None:
        return a + b
    out = np.empty(np.broadcast_shapes(np.shape(a), b.shape))
    rows = np.ndim(a) == b.ndim and np.shape(a)[0] == b.shape[0] > 1   # a has the rows too

    def block(i, j):
        np.add(a[i:j] if rows else a, b[i:j], out=out[i:j])
    split[0].run(block, split[1])
    return out
