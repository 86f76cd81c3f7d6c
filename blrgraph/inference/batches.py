"""Where each sweep of the loop looks: all the data, or the next minibatch.

:class:`AllRows` gives the whole data each sweep (batch methods); :class:`Minibatches`
gives views of ``batch_size`` rows of the data axis scaled by N/|B| (SVI): a fresh
permutation of the rows each epoch for in-memory data, contiguous blocks in random
order for a memory-mapped file (O(N / batch_size) memory, sequential reads), blocks in
arrival order for a Stream. Its state (position, permutation) is part of a checkpoint,
so a resumed run continues exactly.
"""
from __future__ import annotations

import math

import numpy as np

from .views import RowView, WholeData


class Rows:
    """Which view each sweep sees (``next_view``), and the hooks the loop calls on it;
    the defaults are for rows held in the model."""

    stochastic = False

    def next_view(self, rng):
        raise NotImplementedError

    def finish(self, model):
        """After the fit (rows held elsewhere leave their local posteriors there)."""

    def abort(self, model):
        """The fit stopped on an error (rows held elsewhere give their resources back)."""

    def sync(self, model):
        """Before a callback: the model shows the current iterate (rows held elsewhere
        write their local q back)."""


class AllRows(Rows):
    """Every sweep sees all the data (batch VB, EM, NCVMP, MAP, conjugate)."""

    stochastic = False

    def __init__(self, model, structure):
        self.view = WholeData(model, structure)

    def next_view(self, rng):
        return self.view


class Minibatches(Rows):
    """Minibatches of the data axis, ``batch_size`` rows each."""

    stochastic = True

    def __init__(self, model, structure, batch_size):
        self.model, self.structure = model, structure
        self.N = structure.N
        self.batch_size = int(batch_size)
        self.per_epoch = math.ceil(self.N / self.batch_size)
        streamed = [n for n in model.observed if n.source is not None]
        self.streamed = bool(streamed)
        if any(n.source.sequential for n in streamed):
            self.mode = "sequential"
        elif streamed:
            self.mode = "blocks"
        else:
            self.mode = "shuffle"
        if streamed and any(n not in structure.links for n in streamed):
            raise ValueError(f"fit('svi'): streamed data must lie on the data axis of "
                             f"{structure.root.label()}")
        fixed = [n.label() for n in structure.links if not n.restrictable]
        if fixed:
            raise ValueError(f"fit('svi'): {', '.join(fixed)} cannot be cut into minibatches of "
                             f"the data axis; fit the model with fit('vmp')")
        self.perm, self.pos = None, 0

    def state(self):
        return {"perm": self.perm, "pos": self.pos}

    def set_state(self, perm, pos):
        self.perm, self.pos = perm, pos

    def _rows(self, rng):
        if self.perm is None or self.pos >= len(self.perm):
            if self.mode == "shuffle":
                self.perm = rng.permutation(self.N)
            elif self.mode == "blocks":
                self.perm = rng.permutation(self.per_epoch)
            else:
                self.perm = np.arange(self.per_epoch)
            self.pos = 0
        if self.mode == "shuffle":
            rows = self.perm[self.pos: self.pos + self.batch_size]
            self.pos += len(rows)
            return rows
        start = int(self.perm[self.pos]) * self.batch_size
        self.pos += 1
        return np.arange(start, min(start + self.batch_size, self.N))

    def next_view(self, rng):
        rows = self._rows(rng)
        return RowView(self.model, self.structure, rows, scale=self.N / len(rows))

    def blocks(self):
        """Views of consecutive blocks covering every row once (scale 1)."""
        for start in range(0, self.N, self.batch_size):
            rows = np.arange(start, min(start + self.batch_size, self.N))
            yield rows
