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
        if data.ndim > 1 and any(len(c) > 1 for c in data.chunks[1:]):
            data = data.rechunk({i: -1 for i in range(1, data.ndim)})
        if not np.issubdtype(data.dtype, np.number) and data.dtype != bool:
            raise ValueError(f"observe(): the dask array has dtype {data.dtype}; encode text "
                             f"columns as numbers first (blrgraph.io_dask.read_table)")
        self.arr = data
        self.shape = tuple(int(s) for s in data.shape)
        self.n = self.shape[0]
        self.bounds = np.concatenate([[0], np.cumsum(data.chunks[0])]).astype(np.int64)

    def partitions(self):
        """(lo, hi) row ranges of the chunks."""
        return [(int(a), int(b)) for a, b in zip(self.bounds[:-1], self.bounds[1:])]

    def read(self, rows):
        """Rows ``rows`` as a float array (an SVI minibatch: computed from the chunks)."""
        rows = np.asarray(rows)
        order = np.argsort(rows, kind="stable")
        got = np.asarray(self.arr[rows[order]].compute(), dtype=float)
        out = np.empty_like(got)
        out[order] = got
        return out

    def __getstate__(self):   # a model is shipped to the workers without its data
        raise TypeError("a DaskSource is not pickled; the workers get their chunks from Dask")


class ChunkSource:
    """Rows ``lo..lo + len(data) - 1`` of a dask source, in memory on a worker."""

    sequential = False
    dask = False

    def __init__(self, data, lo, shape):
        self.data, self.lo, self.shape = data, int(lo), tuple(shape)
        self.n = self.shape[0]

    def read(self, rows):
        return np.asarray(self.data[np.asarray(rows) - self.lo], dtype=float)
