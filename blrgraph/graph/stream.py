"""Streamed data: observations read batch by batch, so memory does not grow with N.

``node.observe(np.load("x.npy", mmap_mode="r"))`` (a memory-mapped array) or
``node.observe(Stream(chunks, n=N))`` (chunks arriving in order: arrays or
DataFrames) keeps only a handle; ``fit("svi")`` reads and validates each
minibatch when it needs it. Other methods need the data in memory.
"""
from __future__ import annotations

import numpy as np

from .data import numpy_of


class Stream:
    """Data arriving in chunks along the first axis.

    Parameters
    ----------
    chunks : callable returning an iterator of chunks (re-iterable: one call per
        epoch), or an iterator (then only one pass is possible).
    n : int, total number of rows (needed for the N/|B| scaling of SVI).
    shape : tuple, shape of one row (default: read from the first chunk).
    """

    sequential = True
    #: rows on a Dask cluster (graph/dask_source.py) and counts alongside them: neither
    dask = False
    weights = None

    def __init__(self, chunks, n, shape=None):
        if int(n) != n or n < 1:
            raise ValueError(f"Stream: n must be a positive row count, got {n!r}")
        self.n = int(n)
        self._factory = chunks if callable(chunks) else None
        self._once = None if callable(chunks) else iter(chunks)
        self._it = None
        self._buf = None
        self._start = 0  # global row index of self._buf[0]
        self._row_shape = None if shape is None else tuple(shape)
        if self._row_shape is None:
            it = self._new_iter()
            first = next(it, None)
            if first is None:
                raise ValueError("Stream: the chunks are empty")
            first = numpy_of(first)
            self._row_shape = np.shape(first)[1:]
            self._it, self._buf, self._start = it, self._as_rows(first, 0), 0

    @property
    def shape(self):
        return (self.n,) + self._row_shape

    def _new_iter(self):
        if self._factory is not None:
            return iter(self._factory())
        if self._once is None:
            raise ValueError("Stream: the chunk iterator is exhausted; pass a callable that "
                             "returns a fresh iterator to run several epochs")
        it, self._once = self._once, None
        return it

    def _as_rows(self, chunk, start):
        """A chunk as a float array of rows; ``start``: the global row of its first row."""
        chunk = numpy_of(chunk)
        try:
            rows = np.asarray(chunk, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"Stream: the chunk starting at row {start} is not numeric; encode "
                             f"text columns first") from None
        if rows.ndim < 1 or (self._row_shape is not None and rows.shape[1:] != self._row_shape):
            raise ValueError(f"Stream: the chunk starting at row {start} has rows of shape "
                             f"{rows.shape[1:]}, but the stream's rows have shape {self._row_shape}")
        return rows

    def _peek(self):
        self._it = self._new_iter()
        self._buf = self._as_rows(next(self._it), 0)
        self._start = 0
        return self._buf

    def _next_chunk(self, start):
        """The next chunk (its first row is row ``start``), or None at the end of the chunks."""
        try:
            return self._as_rows(next(self._it), start)
        except StopIteration:
            return None

    def _check_end(self):
        """After row n - 1: the chunks must hold no further row (they are not ignored)."""
        end = self._start + len(self._buf)
        while end <= self.n:
            nxt = self._next_chunk(end)
            if nxt is None:
                return
            self._start, self._buf = end, nxt
            end += len(nxt)
        raise ValueError(f"Stream: the chunks hold more rows than n={self.n} (row {self.n} "
                         f"exists); give n = the total number of rows")

    def read(self, rows):
        """Rows ``rows`` (consecutive, increasing) of the stream, reading chunks in order."""
        rows = np.asarray(rows)
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        if not np.array_equal(rows, np.arange(lo, hi)):
            raise ValueError("Stream: rows must be read in order (SVI does not shuffle a stream)")
        if lo < 0 or hi > self.n:
            raise ValueError(f"Stream: rows {lo}..{hi - 1} requested from a stream of n={self.n} rows")
        if self._buf is None or lo < self._start:
            self._peek()
        out = []
        while lo < hi:
            end = self._start + len(self._buf)
            if lo >= end:
                nxt = self._next_chunk(end)
                if nxt is None:
                    raise ValueError(f"Stream: the chunks hold fewer rows than n={self.n} (they "
                                     f"end after {end} rows)")
                self._start, self._buf = end, nxt
                continue
            take = min(hi, end)
            out.append(self._buf[lo - self._start: take - self._start])
            lo = take
        if hi == self.n:
            self._check_end()
        return np.concatenate(out, axis=0)


class MemmapSource:
    """A memory-mapped array: random access, read per batch."""

    sequential = False
    dask = False
    weights = None

    def __init__(self, arr):
        self.arr = arr
        self.n = arr.shape[0]
        self.shape = arr.shape

    def read(self, rows):
        rows = np.asarray(rows)
        order = np.argsort(rows)  # read the file in order, then restore the batch order
        out = np.empty((len(rows),) + self.shape[1:], dtype=float)
        out[order] = self.arr[rows[order]]
        return out


def as_source(data):
    """A lazy source for ``data``, or None when the data should be read now."""
    if isinstance(data, Stream):
        return data
    if isinstance(data, np.memmap):
        return MemmapSource(data)
    from .dask_source import DaskSource, is_dask
    if is_dask(data):
        return DaskSource(data)
    return None
