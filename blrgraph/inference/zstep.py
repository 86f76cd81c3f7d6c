"""A mixture's assignments z in one pass over the rows (issue 26, item 1).

In a batch fit's compiled sweep (compiled.py) on 16,384 rows or more, split over the
cores (``fit(n_jobs=)``, rowsplit.py) or not (:data:`PASS_ALONE`), the step of a
mixture's z whose data are kept as flat statistics (graph/suffstats.py) is
:class:`ZStep`: lam = E[log pi] + Phi coef, its softmax and log-sum-exps, and the next
sweep's messages from z (the components' statistics p^T Phi and pi's counts) come from one
pass over the rows (``FlatStats.softmax_pass``), each block of Phi read once from cache
(docs/benchmarks.md §12.18).
"""
from __future__ import annotations

import sys

import numpy as np

from .. import rowsplit
from ..graph.plates import compact
from .blr import _finite, blr_update
from .compiled import STEP_MAKERS, NodeStep, Route, _prior

#: True: a mixture's z takes its one-pass step (ZStep) on 16,384 rows or more also when the
#: rows are not split (``n_jobs=1``): with BLAS at one thread, a median 0.89 of NodeStep's
#: CPU a sweep (0.81 to 1.15 in 14 idle comparisons, 20,000 x 2 to 400,000 x 10;
#: docs/benchmarks.md §12.20)
PASS_ALONE = True


class ZStep(NodeStep):
    """The step of a mixture's assignments z (Categorical, one plate axis of N rows) whose
    one child is a mixture of observed data kept as flat statistics, on 16,384 rows or
    more: lam = E[log pi] + Phi coef, its softmax and log-sum-exps, and the next sweep's
    messages from z (the components' statistics p^T Phi and pi's counts) in one pass over
    the rows (:meth:`~blrgraph.graph.suffstats.FlatStats.softmax_pass`): Phi is read once a
    sweep from cache, and while the rows are split over the cores (``n_jobs``,
    rowsplit.py) the pass runs on all of them when its work is enough
    (``suffstats.PASS_SPLIT_WORK``). The messages wait in
    the factors (``passed``) and are read for that same p. The iterates are NodeStep's to
    rounding (docs/benchmarks.md §12.18, §12.20)."""

    __slots__ = ("mix", "x", "kept")

    def __init__(self, node, routes, mix, x):
        super().__init__(node, routes)
        self.mix, self.x = mix, x
        self.kept = []   # the arrays of earlier steps' lam, p and lse, to write into again

    def _arrays(self, K, E):
        """Arrays for lam, p (K, E) and lse (E,): an earlier step's that nothing else
        holds any more (the node, the memos and any caller's reference let go of them),
        else new ones. New arrays cost a pass at 400,000 x 10, K=8 14 to 22 ms of page
        faults (docs/benchmarks.md §12.18)."""
        kept = self.kept
        for i, arrays in enumerate(kept):
            if arrays[0].shape == (K, E) and _unheld(arrays):
                return kept.pop(i)
        return np.empty((K, E)), np.empty((K, E)), np.empty(E)

    def step(self, it):
        mix, node, x = self.mix, self.node, self.x
        plan = mix._flat(x.child_data(), node.moments()[0], None)
        fs = None if plan is None or plan[2] != 1 else plan[0]
        if fs is None or fs.Phi is None or (rowsplit.active(fs.E) is None and not (
                PASS_ALONE and fs.E >= 2 * rowsplit.MIN_ROWS)):
            return NodeStep.step(self, it)
        lam0 = self.lam0 if self.lam0 is not None else _prior(node, broadcast=False)
        off = compact(lam0[0])
        K = off.shape[-1]
        if off.size != K:   # a prior with its own rows: NodeStep's sum
            return NodeStep.step(self, it)
        # (a copy: its column 0 is written next)
        Mt = np.array(mix._coef_lead(fs, [p.moments() for p in mix.parents[1:]]))
        Mt[:, 0] += off.reshape(K)   # (Phi's column 0 is 1: E[log pi] enters lam there)
        arrays = self._arrays(Mt.shape[0], fs.E)
        lam, lse, p, S, counts, bounded = fs.softmax_pass(Mt, arrays)
        self.kept = self.kept[-1:] + [arrays]
        self.msg = None   # (ClosedTerm then takes lam0 - lam: no messages' sum was kept)
        if not (bounded or _finite(lam)):   # blr_update's checks name the node and the fix
            new = blr_update(node, node.nat, (lam,), 1.0, it)
            self.last = None
            node.set_natural(new)
            return
        node.set_natural((lam,))
        node.family.keep_softmax(node.nat[0], lse, p)
        S.flags.writeable = counts.flags.writeable = False   # (messages, read as they are)
        mix.passed = (fs, p, S)
        node.factor.passed = (p, counts)
        self.last = node.nat


def _unheld(arrays):
    """Does nothing but the caller's tuple hold these arrays? (CPython's reference count:
    the tuple's reference, getrefcount's argument and nothing else; a view, such as the
    node's lam = lam_KE.T, holds its base)"""
    count = getattr(sys, "getrefcount", None)   # (CPython's; elsewhere: never reused)
    return count is not None and all(count(arrays[i]) == 2 for i in range(len(arrays)))


def zstep(model, node, routes):
    """A :class:`ZStep` for this node when it is a mixture's assignments over flat
    statistics (its one child an observed mixture, z in its first slot) on rows enough to
    split (``2 * rowsplit.MIN_ROWS``), else None."""
    from ..families.categorical import Categorical
    from ..graph.factors.categorical import CategoricalFactor
    from ..graph.factors.mixture import MixtureFactor
    if type(node.family) is not Categorical or len(node.plates) != 1 or len(routes) != 1 or \
            type(node.factor) is not CategoricalFactor:
        return None
    r = routes[0]
    if type(r) is not Route or r.slots != (0,) or not r.child.observed or \
            type(r.factor) is not MixtureFactor or tuple(r.target) != tuple(r.child.plates) or \
            tuple(r.child.plates) != tuple(node.plates):
        return None
    if node.plates[0] < 2 * rowsplit.MIN_ROWS:   # never split nor passed: NodeStep itself
        return None
    return ZStep(node, routes, r.factor, r.child)


STEP_MAKERS.append(zstep)
