"""The data seam: what the scheduler loop asks of "some of the data".

A view holds some rows of the data axis. Given the global nodes' current parameters it
fits its local block (:meth:`DataView.fit_local`) and REPORTS; it never updates a global
node. What it reports (docs/dev/architecture.md, "The seam"):

* :meth:`DataView.messages`: for a global node, the sum of the messages of its children,
  the rows' children scaled by :attr:`DataView.scale` (N / rows) to stand for every row;
* :meth:`DataView.row_terms`: the sum of the ELBO terms of the nodes on its rows
  (:attr:`DataView.on_rows`), unscaled;
* :meth:`DataView.counts`: the (weighted) entries per component of a mixture's
  assignments (the saddle-point check).

The loop alone takes the step, lam <- (1 - rho) lam + rho (lam0 + messages)
(:func:`~blrgraph.inference.blr.blr_update`), and the ELBO is assembled in one place
(:func:`~blrgraph.inference.elbo.view_elbo`). Implementations:

* :class:`WholeData`: every row in memory (the batch methods);
* :class:`RowView`: the model restricted to some rows of the data axis, scaled by
  N / rows (an SVI minibatch, a block of a memory-mapped file or stream, or the active
  entries of a local block); the nodes restrict and restore themselves
  (``Node.restrict`` / ``Node.restore``);
* :class:`~blrgraph.inference.dask_rows.DaskView`: partitions of the rows on Dask
  workers, whose tasks send the same report.

In memory the messages are computed when the loop asks for them, so a global node's
step reads the globals stepped before it in the sweep (as coordinate ascent does).
"""
from __future__ import annotations

import numpy as np

from .blr import incoming
from .saddles import component_counts, split_tied


class DataView:
    """Base class: the model seen through some rows of the data axis. Subclasses hold
    rows elsewhere by overriding the report (:meth:`messages`, :meth:`row_terms`,
    :meth:`counts`) and the two things they do on their rows (:meth:`fit_local`,
    :meth:`split_tied`)."""

    #: the factor the rows' messages and ELBO terms are multiplied by
    scale = 1.0
    #: the nodes whose messages and ELBO terms are the view's rows' (scaled); the other
    #: nodes' terms are read in memory
    on_rows = frozenset()
    #: {node: the entries of its first axis that the view holds} (empty: every entry)
    idx = {}
    #: every row's q is also the model's own (a sweep may run on the model directly)
    rows_in_model = False
    #: the loop's iteration (set by the loop before each sweep)
    it = 0

    def __init__(self, model, structure):
        self.model = model
        self.structure = structure

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def scale_of(self, child):
        """The factor a child's message is multiplied by (N/|B| for restricted rows)."""
        return self.scale if child in self.on_rows else 1.0

    # ---- what a view does on its rows ----------------------------------------------
    def fit_local(self, block, update):
        """Fit the local block to the global nodes on these rows (``update``: the local
        step); returns its sweeps."""
        return block.fit(self, update)

    def row_split(self):
        """The :class:`~blrgraph.rowsplit.RowSplit` under which a compiled sweep on these
        rows runs its row kernels, or None (one thread)."""
        return None

    def split_tied(self, z, groups, rng):
        """Share the responsibilities of tied components of ``z`` at random on these rows
        (:func:`~blrgraph.inference.saddles.split_tied`)."""
        split_tied(z, groups, rng)

    # ---- what a view reports -------------------------------------------------------
    def messages(self, node):
        """The sum of the messages ``node`` receives (its rows' children scaled by
        :attr:`scale`), in node's T coordinates; None when it receives none."""
        return incoming(self.model, node, None if self.scale == 1.0 else self.scale_of)

    def row_terms(self):
        """The sum of the ELBO terms of the nodes in :attr:`on_rows`, unscaled."""
        total = 0.0
        for n in self.model.stochastic:
            if n in self.on_rows:
                total += n.elbo_term()
        return total

    def counts(self, z):
        """The (weighted) number of entries per component of assignments ``z``."""
        return component_counts(z)


class WholeData(DataView):
    """Every row, in memory."""


class RowView(DataView):
    """The model restricted to ``rows`` of the data axis. ``scale`` multiplies the
    restricted children's messages and ELBO terms (N / len(rows) for a minibatch, 1 for
    the active entries of a local block). On exit the restricted q of the ``keep``
    nodes is written back into their full arrays (the others get their q back)."""

    def __init__(self, model, structure, rows, scale=1.0, keep=()):
        super().__init__(model, structure)
        self.rows = np.asarray(rows)
        self.scale = float(scale)
        self.keep = tuple(keep)
        self.idx, self.remap = structure.indices(self.rows)
        self.saved = {}
        self.on_rows = frozenset()

    def __enter__(self):
        sliced = {}

        def cut(arr, rows):
            if arr is None:
                return None
            key = (id(arr), id(rows))
            if key not in sliced:
                sliced[key] = np.asarray(arr)[rows]
            return sliced[key]

        for n in self.structure.order:
            rows = self.idx[n]
            self.saved[n] = n.restrict(rows, cut, self.remap.get(n))
        for c, n in self.structure.constants.items():
            self.saved[c] = c.restrict(self.idx[n], cut)
        self.on_rows = frozenset(self.idx)
        return self

    def __exit__(self, *exc):
        for n in self.keep:
            state = self.saved[n]
            if "nat" not in state:   # a factored q, kept factored by restrict: now dense
                lam = state.pop("_factored").lam()
                state.pop("_nat", None)
                state["nat"] = (lam.reshape(state["plates"] + (-1,)),)
            full = [np.array(np.broadcast_to(a, state["plates"] + np.shape(a)[np.ndim(a) - k:]))
                    for a, k in zip(state["nat"], n.family.event_ndims)]
            for arr, a in zip(full, n.nat):
                arr[self.idx[n]] = a
            state["nat"] = tuple(full)
            state["_moments"] = None
        for n in reversed(self.structure.order):
            n.restore(self.saved[n])
        for c in self.structure.constants:
            c.restore(self.saved[c])
        return False
