"""Row kernels split over this machine's cores (``fit(..., n_jobs=)`` on the compiled sweep).

A sweep that the compiled sweep runs (inference/compiled.py) spends nearly all of its time
on large tables in row kernels: the mixture's log-likelihoods Phi @ coef, the
assignments' softmax, and the components' statistics r^T Phi (graph/suffstats.py,
families/categorical.py), which a mixture's z step makes in one pass over the rows
(``FlatStats.softmax_pass``, ``inference.zstep.ZStep``; its blocks taken in turn by the
threads, :meth:`Blocks.each`). While a fit with ``n_jobs`` > 1 runs such a sweep, a
:class:`RowSplit` is active (a context variable, so other threads and other fits never see
it): each of those kernels cuts its rows into ``jobs`` contiguous blocks, runs the first in
the calling thread and the others in the split's threads (numpy and BLAS release the GIL;
BLAS is held at one thread meanwhile), and joins the blocks in row order, so the result is
one thread's up to the order of a sum over rows. Between blocks the threads poll for
``SPIN`` seconds before they sleep, as OpenMP runtimes do: a sweep's kernels come a few
milliseconds apart, and waking a sleeping core costs more here (docs/benchmarks.md §12.13).
Kernels on fewer than ``2 * MIN_ROWS`` rows run whole.
"""
from __future__ import annotations

import contextvars
import threading
import time

import numpy as np

#: a block of a split kernel holds at least this many rows (below, the threads cost more
#: than they save)
MIN_ROWS = 8192

#: seconds a thread polls for its next block (or the caller for the blocks' end) before
#: it sleeps: a sweep's kernels follow each other within a millisecond or two, and a
#: core woken from sleep (on a VM, a halted virtual CPU) takes much longer to answer
SPIN = 0.002

_ACTIVE = contextvars.ContextVar("blrgraph_rowsplit", default=None)


def _await(ready, event):
    """Until ``ready()``: polled for ``SPIN`` seconds (releasing the GIL at each poll),
    then asleep on ``event``."""
    end = time.perf_counter() + SPIN
    while not ready():
        if time.perf_counter() > end:
            event.wait()
            event.clear()
            end = time.perf_counter() + SPIN
        else:
            time.sleep(0)


class _Worker:
    """A thread that runs the blocks it is given, one at a time. Each task has a ticket:
    only the latest task's end counts as done (a task given without waiting for it,
    :meth:`RowSplit.start`, may end after a later one was given, or never start)."""

    def __init__(self, name):
        self.task = self.result = None
        self.done = True
        self.ticket = 0
        self.lock = threading.Lock()
        self.wake, self.finished = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def submit(self, ctx, fn, a, b):
        with self.lock:
            self.ticket += 1
            self.done, self.result = False, None
            self.task = (self.ticket, ctx, fn, a, b)
        self.wake.set()

    def wait(self):
        """(True, the block's result) or (False, the exception it raised)."""
        _await(lambda: self.done, self.finished)
        out, self.result = self.result, None
        return out

    def _take(self):
        with self.lock:
            task, self.task = self.task, None
        return task

    def _loop(self):
        while True:
            _await(lambda: self.task is not None, self.wake)
            task = self._take()
            if task is None:
                continue
            if task is _STOP:
                return
            ticket, ctx, fn, a, b = task
            try:
                result = (True, ctx.run(fn, a, b))
            except BaseException as e:   # (raised again in the caller's thread)
                result = (False, e)
            with self.lock:
                if ticket == self.ticket:
                    self.result, self.done = result, True
            self.finished.set()

    def stop(self):
        with self.lock:
            self.task = _STOP
        self.wake.set()
        self.thread.join()


_STOP = object()


class RowSplit:
    """``jobs`` threads (the caller's and ``jobs - 1`` workers) for the row kernels."""

    def __init__(self, jobs):
        self.jobs = int(jobs)
        self.workers = [_Worker(f"blrgraph-rows_{i}") for i in range(self.jobs - 1)]

    def bounds(self, n):
        """The blocks' row bounds for ``n`` rows (``jobs`` contiguous blocks), or None
        when the rows are too few to split."""
        jobs = min(self.jobs, n // MIN_ROWS)
        if jobs < 2:
            return None
        return np.linspace(0, n, jobs + 1).round().astype(int)

    def run(self, fn, bounds):
        """``fn(a, b)`` on every block; the results in row order."""
        busy = []
        for w, a, b in zip(self.workers, bounds[1:-1], bounds[2:]):
            w.submit(_block_context(), fn, a, b)
            busy.append(w)
        try:
            first = fn(bounds[0], bounds[1])
        finally:
            out = [w.wait() for w in busy]   # (every block ends before the arrays go)
        for ok, value in out:
            if not ok:
                raise value
        return [first] + [value for _, value in out]

    def start(self, fn, bounds):
        """``fn(a, b)`` on every block but the first, in the workers, without waiting
        for them (:meth:`Blocks.each` waits for what it needs itself)."""
        for w, a, b in zip(self.workers, bounds[1:-1], bounds[2:]):
            w.submit(_block_context(), fn, a, b)

    def shutdown(self):
        for w in self.workers:
            w.stop()

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


class Blocks:
    """The blocks of one kernel on the active :class:`RowSplit` (:func:`active`)."""

    __slots__ = ("split", "bounds")

    def __init__(self, split, bounds):
        self.split, self.bounds = split, bounds

    def run(self, fn):
        """``fn(a, b)`` on every block; the results in row order."""
        return self.split.run(fn, self.bounds)

    def each(self, fn, n, size):
        """``fn(a, b)`` on the blocks of ``size`` rows of ``n`` rows, each thread taking
        the next block as it ends its last; the results in row order, as the blocks ran
        one after another. A thread that the system holds back takes fewer blocks, and
        one that has not started when the blocks are gone is not waited for: the caller
        waits only for blocks under way (a static split would wait for its half). The
        first error of a block ends the handing out and is raised here."""
        starts = range(0, n, size)
        out = [None] * len(starts)
        state = {"next": 0, "busy": 0, "error": None}
        lock, idle = threading.Lock(), threading.Event()

        def take(ended):
            with lock:
                state["busy"] -= ended
                i = state["next"]
                if i < len(out) and state["error"] is None:
                    state["next"], state["busy"] = i + 1, state["busy"] + 1
                    return i
                if state["busy"] == 0:
                    idle.set()
                return None

        def work(_a=None, _b=None):
            i = take(0)
            while i is not None:
                try:
                    out[i] = fn(starts[i], min(n, starts[i] + size))
                except BaseException as e:   # (raised in the caller, below)
                    with lock:
                        state["error"] = state["error"] or e
                i = take(1)

        self.split.start(work, self.bounds)
        work()
        _await(lambda: state["busy"] == 0, idle)
        if state["error"] is not None:
            raise state["error"]
        return out

    def sum(self, fn):
        """The sum of the blocks' results (new arrays), added in row order."""
        parts = self.run(fn)
        total = parts[0]
        for p in parts[1:]:
            total += p
        return total


def active(n):
    """The :class:`Blocks` of the active :class:`RowSplit` for a kernel on ``n`` rows, or
    None (no split active, or too few rows)."""
    split = _ACTIVE.get()
    if split is None:
        return None
    bounds = split.bounds(n)
    return None if bounds is None else Blocks(split, bounds)


def add_rows(a):
    """The sum over the first axis of ``a`` (rows), split over the active
    :class:`RowSplit`'s threads when there is one and the rows are many; the blocks'
    sums added in row order."""
    blocks = active(a.shape[0])
    if blocks is None:
        return np.add.reduce(a, axis=0)
    return blocks.sum(lambda i, j: np.add.reduce(a[i:j], axis=0))


def add(a, b):
    """``a + b`` for ``b`` with the rows (``a`` broadcasting against them), split over
    the active :class:`RowSplit`'s threads when there is one and the rows are many."""
    blocks = active(b.shape[0]) if b.ndim >= 1 else None
    if blocks is None:
        return a + b
    out = np.empty(np.broadcast_shapes(np.shape(a), b.shape))
    rows = np.ndim(a) == b.ndim and np.shape(a)[0] == b.shape[0] > 1   # a has the rows too

    def block(i, j):
        np.add(a[i:j] if rows else a, b[i:j], out=out[i:j])
    blocks.run(block)
    return out
