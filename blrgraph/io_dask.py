"""Tables on a Dask cluster, read without collecting them on the driver (docs/scaling.md).

``read_table(path_or_frame, columns=None)`` gives a ``dask.array.Array`` of floats,
one chunk of rows per partition, ready for ``node.observe(...)``; a fit of the model
then runs its sweeps as Dask tasks (:mod:`blrgraph.inference.dask_rows`).
``local_moments(model, name)`` reads a local node's posterior (the responsibilities of a
mixture's assignments, say) back as dask arrays, computed on demand. Needs the optional
extra ``pip install blrgraph[dask]``.
"""
from __future__ import annotations

import os


def _dask():
    try:
        import dask.array  # noqa: F401
        import dask.dataframe as dd
    except ImportError:
        raise ImportError("blrgraph.io_dask needs dask: pip install 'blrgraph[dask]'") from None
    return dd


def read_frame(source, columns=None):
    """A dask DataFrame from a dask DataFrame, a Parquet file or directory, a CSV file,
    a directory of CSV files, or a glob (``"data/*.csv"``)."""
    dd = _dask()
    if hasattr(source, "to_dask_array"):
        frame = source
    else:
        path = os.fspath(source)
        if os.path.isdir(path):
            names = os.listdir(path)
            if any(n.endswith((".parquet", ".pq")) for n in names) or \
                    "_metadata" in names or not any(n.endswith(".csv") for n in names):
                frame = dd.read_parquet(path)
            else:
                frame = dd.read_csv(os.path.join(path, "*.csv"))
        elif path.endswith((".parquet", ".pq")):
            frame = dd.read_parquet(path)
        elif path.endswith(".csv") or "*" in path:
            frame = dd.read_csv(path)
        else:
            raise ValueError(f"read_table({path!r}): give a Parquet file or directory, a CSV "
                             f"file, a directory of CSV files or a glob such as 'data/*.csv'")
    if columns is not None:
        columns = [columns] if isinstance(columns, str) else list(columns)
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise ValueError(f"read_table: no column(s) {missing}; the table has "
                             f"{list(frame.columns)}")
        frame = frame[columns]
    return frame


def read_table(source, columns=None, dtype="float64"):
    """The numeric ``columns`` (default: all) of a table as a dask array of rows, one
    chunk per partition, its chunk sizes known (counted on the workers; no rows travel
    to the driver). Text columns are refused: encode them first."""
    frame = read_frame(source, columns)
    bad = [c for c, t in frame.dtypes.items() if not (t.kind in "biuf")]
    if bad:
        raise ValueError(f"read_table: column(s) {bad} are not numeric; encode them as numbers "
                         f"(or pick numeric columns with columns=)")
    return frame.to_dask_array(lengths=True).astype(dtype)


def local_moments(model, name):
    """The posterior moments E[T] of the local node ``name`` (one per row of the data
    axis) after a fit on dask data, as a tuple of dask arrays: for a mixture's
    assignments, ``local_moments(model, "z")[0]`` are the responsibilities (N, K)."""
    view = getattr(model, "dask_view", None)
    if view is None:
        raise ValueError("local_moments: the model was not fitted on dask data (its local "
                         "posteriors are in memory: model[name].posterior)")
    return view.local_moments(name)
