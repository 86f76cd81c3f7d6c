"""The data axis of a model and the nodes that live on it (the one tracer).

The *data axis* is the first plate axis of the observed node (or of ``batch_over``).
Following it through the graph (children and parents whose first plate axis has the
same size, and gathers ``source[idx]`` indexed along it) gives the *local* nodes: the
ones with one entry per data row (mixture assignments, per-document topic mixtures,
their gathers). Every other latent node is *global*. A gather reached from below
(``theta[doc_ids]`` seen from the tokens) moves the data axis up to the gather's
source, so that each entry of a local node sees all of its data: for LDA the data
axis is the documents. One :class:`Structure` serves the local block of batch fits,
EM's default point masses and SVI's minibatches.
"""
from __future__ import annotations

import numpy as np

from ..graph.deterministic import Gather
from ..graph.node import Constant


class _Reroot(Exception):
    def __init__(self, node):
        self.node = node


class Structure:
    """``root`` (the node whose first plate axis is the data axis), ``N`` (its length),
    ``links`` (node -> (kind, via): how the axis reaches it), ``local`` / ``globals``
    (latent nodes on / off the axis, in schedule order), ``on_axis`` (every node on the
    axis of some observed node, deterministic ones too) and ``assignments`` (latent
    Categorical selectors of a mixture)."""

    def __init__(self, model, batch_over=None, strict=False):
        self.model = model
        explicit = batch_over is not None
        self.strict = strict or explicit
        root = self._first_root(model) if batch_over is None else self._node(model, batch_over)
        self.root, self.links = root, {}
        if root is not None:
            for _ in range(len(model.nodes) + 1):
                try:
                    self.links = self._trace(model, root, explicit, self.strict)
                    break
                except _Reroot as r:
                    root = r.node
            self.root = root
        self.N = root.plates[0] if root is not None else 0
        self.order = [n for n in model.nodes if n in self.links]
        # constants with one value per row (a prior mean per data point), or whose
        # T(value - c) is per row because their location group's shift c is (one per
        # sequence of a chain, one per row of a per-row latent), are cut with the node
        # they feed: {constant: the linked node whose rows they follow}
        self.constants = {}
        for n in self.order:
            for p in n.parents:
                if isinstance(p, Constant) and p not in self.constants and (
                        _on_first_axis(n, p) or _rows_in_moments(n, p)):
                    self.constants[p] = n
        on_axis = set(self.links) if explicit else self._all_axes(model, self.links)
        self.on_axis = on_axis   # every node on a data axis (deterministic ones too)
        self.local = [n for n in model.schedule if n in on_axis]
        self.globals = [n for n in model.schedule if n not in on_axis]
        self.assignments = [n for n in model.latent if _is_assignment(model, n)]

    def _all_axes(self, model, links):
        """Nodes on the data axis of any observed node (several observed nodes may have
        axes of their own: a regression and a mixture in one model)."""
        out = set(links)
        for obs in model.observed:
            if obs in out or not obs.plates or obs.plates[0] == 1:
                continue
            root = obs
            for _ in range(len(model.nodes) + 1):
                try:
                    out |= set(self._trace(model, root, False, False))
                    break
                except _Reroot as r:
                    root = r.node
        return out

    @staticmethod
    def _first_root(model):
        for n in model.observed:
            if n.plates and n.plates[0] != 1:
                return n
        return None

    @staticmethod
    def _node(model, node):
        n = model[node] if isinstance(node, str) else node
        if n not in model.graph:
            raise ValueError(f"batch_over={node!r} is not a node of this model")
        if not n.plates:
            raise ValueError(f"batch_over {n.label()} has no plates; its first plate axis is the "
                             f"data axis")
        return n

    @staticmethod
    def _trace(model, root, explicit, strict):
        links = {root: None}
        frontier = [root]
        while frontier:
            X = frontier.pop()
            near = list(model.children[X]) + [p for p in X.parents
                                               if not isinstance(p, Constant) and p in model.graph]
            for nb in near:
                if nb in links:
                    continue
                if isinstance(nb, Gather):
                    if nb.source is X:
                        if nb.idx.ndim != 1 and not strict:
                            continue
                        if nb.idx.ndim != 1:
                            raise ValueError(f"the data axis reaches {nb.label()}, whose index "
                                             f"array is not one-dimensional; gather with a 1-D "
                                             f"index along the data axis")
                        links[nb] = ("gather", X)
                        frontier.append(nb)
                        continue
                    if explicit:
                        raise ValueError(f"the data axis of {root.label()} reaches the gather "
                                         f"{nb.label()} from below; batch over its source "
                                         f"(batch_over={nb.source.name!r}) so that every entry "
                                         f"of a local node sees all its data")
                    raise _Reroot(nb.source)
                if _on_first_axis(X, nb):
                    links[nb] = ("same", X)
                    frontier.append(nb)
        return links

    def indices(self, rows):
        """Entries of each linked node's first axis for ``rows`` of the data axis, and
        the remapped index array of each gather."""
        idx = {self.root: np.asarray(rows)}
        remap = {}
        for n in self.links:  # in the order the axis reached them: ``via`` comes first
            if n is self.root:
                continue
            kind, via = self.links[n]
            if kind == "same":
                idx[n] = idx[via]
            else:
                src = idx[via]
                inv = np.full(n.source.plates[0], -1, dtype=np.intp)
                inv[src] = np.arange(len(src))
                pos = np.flatnonzero(inv[n.idx] >= 0)
                idx[n] = pos
                remap[n] = inv[n.idx[pos]]
        return idx, remap

    def has_inner_dependence(self):
        """Does some local node's update read another local node (LDA's theta and z)?"""
        local = set(self.local)
        return any(self.model.latent_neighbours(n) & local for n in self.local)


def _on_first_axis(X, nb):
    """Does the first plate axis of ``X`` line up with the first plate axis of its
    neighbour ``nb`` (numpy broadcasting aligns plates on the right; a mixture's
    component parameters are seen without their component axis)?"""
    if nb in X.parents:
        a, b = tuple(X.plates), X.aligned_plates(nb)
    else:
        a, b = nb.aligned_plates(X), tuple(nb.plates)
    return bool(a) and len(a) == len(b) and a[0] == b[0] and a[0] != 1


def _rows_in_moments(X, const):
    """Do the moments ``const`` publishes carry ``X``'s first plate axis (a constant
    without plates whose location shift is per row)?"""
    batch = const.moment_plates()
    plates = tuple(X.plates)
    return bool(plates) and len(batch) == len(plates) and batch[0] == plates[0] != 1


def _is_assignment(model, n):
    """Is ``n`` the selector of a mixture child?"""
    return any((c.factor.selector() if c.stochastic else c.selector()) is n
               for c in model.children[n])
