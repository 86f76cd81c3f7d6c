"""The local block: the nodes along the data axis, fitted to the global nodes.

Batch VB (docs/scheduler.md, "The local block"): each sweep the local nodes start again
from their priors (given the current globals) and are swept until every entry has
converged, then the global nodes take their step. Mixture assignments are updated
first (after a restart they hold only their prior), the other local nodes after them,
and the assignments once more at the end, so that the globals see assignments fitted
to the final local parameters. When no local node reads another (a mixture's z alone),
one update is the exact local optimum.

The local budget follows the globals (batch fits, ``adaptive``): while the global nodes
still move (the relative change of their natural parameters since the last local fit is
large, as in the first sweeps from a start), full local convergence is wasted on globals
that the next step replaces; the block then runs ``SCALE / movement`` sweeps, at least
:data:`EARLY_ITERS` and at most ``iters`` (the first fit of a run: :data:`EARLY_ITERS`).
Once the globals move by less than ``SCALE / iters`` (0.5% by default) every entry is
fitted to convergence again (docs/scheduler.md, "The local block").

Per-entry convergence (as scikit-learn's LDA stops each document on its own): an entry
of the data axis whose watched natural parameters changed by less than ``tol`` (mean
absolute change over its values) stops; once fewer than half of the entries of the
current view are active, the block goes on in a view of the active rows only
(:class:`~blrgraph.inference.views.RowView`), writing their q back when it ends.
"""
from __future__ import annotations

import numpy as np

from .blr import reset_to_prior
from .views import RowView

#: local sweeps at most, and the per-entry change that ends them (scikit-learn's LDA:
#: max_doc_update_iter=100, mean_change_tol=1e-3)
ITERS, TOL = 100, 1e-3
#: by default the local block restarts from its priors until the ELBO's relative change
#: per sweep falls below this, then goes on warm (each sweep a coordinate ascent, so the
#: trace is monotone from there and can converge to any tolerance)
WARM_AFTER = 1e-4
#: the adaptive budget (batch fits with the default ``iters``): ``SCALE / movement``
#: sweeps, clipped to [EARLY_ITERS, iters], where movement is the globals' relative change
#: (sum |delta nat| / sum |nat|) since the previous local fit
EARLY_ITERS, SCALE = 10, 0.5


class LocalBlock:
    """``structure.local`` fitted to the globals: ``iters`` sweeps at most, each entry
    until its change is below ``tol``; ``restart``: from the priors each time;
    ``adaptive`` (with the default ``iters``): fewer sweeps while the globals move."""

    def __init__(self, model, structure, iters=None, tol=None, restart=None, adaptive=False):
        self.model, self.structure = model, structure
        self.nodes = list(structure.local)
        inner = structure.has_inner_dependence()
        self.iters = (ITERS if inner else 1) if iters is None else int(iters)
        if not inner:
            self.iters = 1
        self.adaptive = bool(adaptive) and inner and iters is None
        self.final = False     # the run's last local fit: the full budget (finish())
        self._seen = None      # the globals' natural parameters at the last local fit
        self.tol = TOL if tol is None else float(tol)
        self.restart = inner if restart is None else bool(restart)
        self.auto_restart = restart is None and inner
        assign = [n for n in self.nodes if n in structure.assignments]
        others = [n for n in self.nodes if n not in assign]
        # after a restart the assignments hold only their prior: they go first, and once
        # more at the end; warm, the other local nodes read the current assignments first
        iterate = self.restart or self.iters > 1
        self.order = assign + others if iterate else others + assign
        self.watch = others or list(self.nodes)
        self.last = assign if (others and iterate) else []
        # per-entry convergence needs every watched node on the data axis itself
        self.per_entry = inner and all(
            n is structure.root or structure.links.get(n, (None,))[0] == "same"
            for n in self.watch) and all(n.restrictable for n in structure.links)

    def settle(self, trace):
        """After a sweep: a default (restarting) block goes on warm once the ELBO's
        relative change is below :data:`WARM_AFTER`."""
        if self.auto_restart and self.restart and len(trace) > 1 and \
                abs(trace[-1] - trace[-2]) <= WARM_AFTER * abs(trace[-1]):
            self.restart = False

    def fit(self, view, update):
        """Fit the local nodes in ``view``; returns the number of sweeps."""
        if not self.nodes:
            return 0
        if self.restart:
            for n in self.nodes:
                reset_to_prior(n)
        sweeps = self._sweeps(view, update, self.budget())
        for n in self.last:
            update(n)
        return sweeps

    def finish(self):
        """The next fit is the run's last (``max_iter``): it gets the full budget, since its
        q is what the fit reports."""
        self.final = True

    def budget(self):
        """Local sweeps allowed now: ``iters``, or with ``adaptive`` the share that the
        globals' movement since the last fit warrants."""
        if not self.adaptive or self.final:
            return self.iters
        now = [tuple(np.array(a, dtype=float) for a in g.nat) for g in self.structure.globals]
        seen, self._seen = self._seen, now
        if seen is None:
            return min(EARLY_ITERS, self.iters)
        change = sum(float(np.sum(np.abs(a - b))) for x, y in zip(now, seen) for a, b in zip(x, y))
        size = sum(float(np.sum(np.abs(a))) for x in now for a in x)
        if change <= SCALE / self.iters * size:
            return self.iters
        return int(np.clip(SCALE * size / change, EARLY_ITERS, self.iters))

    def _sweeps(self, view, update, budget):
        if budget <= 0:
            return 0
        n_rows = self.structure.root.plates[0]
        active = np.ones(n_rows, dtype=bool)
        for k in range(1, budget + 1):
            before = [n.nat for n in self.watch]
            for n in self.order:
                update(n)
            if self.iters == 1:
                return k
            if not self.per_entry:
                change = max(float(np.mean(np.abs(a - b))) for n, old in zip(self.watch, before)
                             for a, b in zip(n.nat, old))
                if change < self.tol:
                    return k
                continue
            if not active.all():
                self._freeze(before, ~active)
            active &= self._change(before) >= self.tol
            n_active = int(np.count_nonzero(active))
            if n_active == 0:
                return k
            if n_active <= n_rows // 2 and k < budget:
                rows = np.flatnonzero(active)
                with RowView(self.model, self.structure, rows, keep=self.watch):
                    return k + self._sweeps(view, update, budget - k)
        return budget

    def _freeze(self, before, rows):
        """Entries that had converged keep the values they stopped at."""
        for n, old in zip(self.watch, before):
            n.set_natural(tuple(np.where(rows.reshape(rows.shape + (1,) * (np.ndim(a) - 1)), b, a)
                                for a, b in zip(n.nat, old)))

    def _change(self, before):
        """Per entry of the data axis: the largest, over watched nodes, of the mean
        absolute change of its natural parameters."""
        out = None
        for n, old in zip(self.watch, before):
            for a, b in zip(n.nat, old):
                d = np.abs(np.asarray(a) - np.asarray(b))
                d = d.reshape(d.shape[0], -1).mean(axis=1) if d.ndim > 1 else d
                out = d if out is None else np.maximum(out, d)
        return out
