"""Data held in a Dask array, chunked along the data axis (docs/scaling.md).

``node.observe(X)`` with ``X`` a ``dask.array.Array`` (or a dask DataFrame) keeps a
:class:`DaskSource`: the rows stay where Dask keeps them (on the workers of a
``distributed`` cluster). Batch fits run one task per chunk of rows
(:mod:`blrgraph.inference.dask_rows`); ``fit("svi")`` reads its minibatches from it.
"""
from __future__ import annotations

import numpy as np


def is_dask(data):
    """Is ``data`` a dask collection (without importing dask when it is not)?"""
    mod = type(data).__module__ or ""
    return mod.startswith("dask.") and hasattr(data, "__dask_graph__")


class DaskSource:
    """A dask array of rows: ``arr`` chunked along axis 0 only (other axes one chunk),
    ``bounds`` the first row of every chunk and N at the end."""

    sequential = False
    dask = True

    def __init__(self, data):
        import dask.array as da
        if not isinstance(data, da.Array):
            if hasattr(data, "to_dask_array"):   # a dask DataFrame or Series
                data = data.to_dask_array(lengths=True)
            else:
                raise TypeError(f"observe(): a dask {type(data).__name__} is not an array; pass "
                                f"a dask.array.Array or a dask DataFrame")
        if data.ndim == 0:
            raise ValueError("observe(): a dask array of rows needs at least one axis")
        if any(np.isnan(c) for c in data.chunks[0]):
            data = data.compute_chunk_sizes()
        if 0 in data.chunks[0] and data.shape[0] > 0:   # an empty partition is no task
            data = data.rechunk({0: tuple(c for c in data.chunks[0] if c)})
        if data.ndim > 1 and any(len(c) > 1 for c in data.chunks[1:]):
            data = data.rechunk({i: -1 for i in range(1, data.ndim)})
        if not np.issubdtype(data.dtype, np.number) and data.dtype != bool:
            raise ValueError(f"observe(): the dask array has dtype {data.dtype}; encode text "
                             f"columns as numbers first (blrgraph.io_dask.read_table)")
        self.arr = data
        self.shape = tuple(int(s) for s in data.shape)
        self.n = self.shape[0]
        self.bounds = np.concatenate([[0], np.cumsum(data.chunks[0])]).astype(np.int64)
        self.weights = None

    def attach_weights(self, weights, label):
        """Counts of identical observations per row (LDA's counts), a dask array with
        one entry per row, chunked as the rows."""
        from .dask_source import is_dask
        if not is_dask(weights):
            raise TypeError(f"{label}: the rows are a dask array, so weights= must be one too "
                            f"(chunked along the same rows)")
        w = DaskSource(weights)
        if w.shape != self.shape[:len(w.shape)] or len(w.shape) != 1:
            raise ValueError(f"{label}: weights of shape {w.shape} do not match the rows "
                             f"{self.shape}; give one count per row")
        self.weights = w

    def rechunk(self, chunks):
        """The rows (and weights) cut into chunks of the sizes ``chunks``."""
        self.arr = self.arr.rechunk({0: tuple(chunks)})
        self.bounds = np.concatenate([[0], np.cumsum(chunks)]).astype(np.int64)
        if self.weights is not None:
            self.weights.rechunk(chunks)

    def partitions(self):
        """(lo, hi) row ranges of the chunks."""
        return [(int(a), int(b)) for a, b in zip(self.bounds[:-1], self.bounds[1:])]

    def read(self, rows):
        """Rows ``rows`` as a float array (an SVI minibatch: computed from the chunks)."""
        return self._read(self.arr, rows)

    def read_weights(self, rows):
        return self._read(self.weights.arr, rows)

    @staticmethod
    def _read(arr, rows):
        rows = np.asarray(rows)
        order = np.argsort(rows, kind="stable")
        got = np.asarray(arr[rows[order]].compute(), dtype=float)
        out = np.empty_like(got)
        out[order] = got
        return out

    def __getstate__(self):   # a model is shipped to the workers without its data
        raise TypeError("a DaskSource is not pickled; the workers get their chunks from Dask")


class ChunkSource:
    """Rows ``lo..lo + len(data) - 1`` of a dask source, in memory on a worker."""

    sequential = False
    dask = False

    def __init__(self, data, lo, shape, weights=None):
        self.data, self.lo, self.shape = data, int(lo), tuple(shape)
        self.n = self.shape[0]
        self.weights = weights

    def read(self, rows):
        return np.asarray(self.data[np.asarray(rows) - self.lo], dtype=float)

    def read_weights(self, rows):
        return np.asarray(self.weights[np.asarray(rows) - self.lo], dtype=float)
