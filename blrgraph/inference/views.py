"""The data seam: what the scheduler loop asks of "some of the data".

A view answers three questions for the rows it holds: fit the local block to the
current global nodes (:meth:`DataView.fit_local`), take a BLR step of a global node
with this view's messages (:meth:`DataView.step`: lam0 + the sum of the messages from
its rows, scaled to stand for the whole data), and this view's ELBO
(:meth:`DataView.elbo`). Implementations:

* :class:`WholeData`: every row in memory (the batch methods);
* :class:`RowView`: the model restricted to some rows of the data axis, scaled by
  N / rows (an SVI minibatch, a block of a memory-mapped file or stream, or the active
  entries of a local block); the nodes restrict and restore themselves
  (``Node.restrict`` / ``Node.restore``).

A partition of the rows on another process is one more implementation of the same
three questions.
"""
from __future__ import annotations

import numpy as np

from .blr import blr_step
from .elbo import elbo


class DataView:
    """Base class: the model seen through some rows of the data axis."""

    scale = 1.0

    def __init__(self, model, structure):
        self.model = model
        self.structure = structure
        self.restricted = frozenset()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def scale_of(self, child):
        """The factor a child's message is multiplied by (N/|B| for restricted rows)."""
        return self.scale if child in self.restricted else 1.0

    def step(self, node, rho, iteration=None, update="natural"):
        """One BLR step of ``node`` with this view's messages."""
        scale = None if self.scale == 1.0 else self.scale_of
        return blr_step(self.model, node, rho, iteration=iteration, scale=scale, update=update)

    def fit_local(self, block, update):
        """Fit the local block to the global nodes on these rows; returns its sweeps."""
        return block.fit(self, update)

    def elbo(self):
        """The ELBO of these rows (restricted rows' terms scaled to stand for all rows)."""
        if self.scale == 1.0:
            return elbo(self.model)
        total = sum(self.scale * n.elbo_term() if n in self.restricted else n.elbo_term()
                    for n in self.model.stochastic)
        if not np.isfinite(total):
            bad = [n.label() for n in self.model.stochastic if not np.isfinite(n.elbo_term())]
            raise FloatingPointError(f"the minibatch ELBO is {total}: the terms of "
                                     f"{', '.join(bad)} are not finite; check the data scale "
                                     f"and the priors, or lower kappa's first steps (tau=)")
        return total


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
        self.restricted = frozenset(self.idx)
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
        return False
