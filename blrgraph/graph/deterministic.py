"""Deterministic nodes: gathers (``node[idx]``) and linear predictors (``Dot``).

A deterministic node publishes moments computed from its parent's moments and
maps messages back (the adjoint): a gather scatters them with one sparse
product, a dot product contracts them with the design matrix.
"""
from __future__ import annotations

import numpy as np

from ..families.multivariate_normal import MultivariateNormal as MVNFamily
from ..families.normal import Normal as NormalFamily
from .node import Node
from .plates import Scatter, broadcast_plates, wsum


class Deterministic(Node):
    deterministic = True

    def backward(self, msg, parent):
        raise NotImplementedError


class Gather(Deterministic):
    """``source[idx]``: entries of the source's first plate axis picked by an integer array."""

    def __init__(self, source, idx, name=None):
        if isinstance(idx, tuple) or isinstance(idx, slice):
            raise TypeError(f"{source.label()}[...]: index with one integer array "
                            f"(e.g. theta[doc_ids]), not {idx!r}")
        idx = np.asarray(idx)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"{source.label()}[idx]: idx must be an integer array, got dtype {idx.dtype}")
        if not source.plates:
            raise ValueError(f"{source.label()}[idx]: the node has no plates to gather from")
        n = source.plates[0]
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"{source.label()}[idx]: indices must lie in 0..{n - 1}, "
                             f"got range {idx.min()}..{idx.max()}")
        super().__init__(name or f"{source.name}[idx]", idx.shape + source.plates[1:])
        self.idx = idx
        self.source = source
        self.provides = source.provides
        self.parents = [source]
        source._add_child(self)
        self._scatter = Scatter(idx, n)

    def moments(self):
        """The source's moments at the gathered entries. Kept until the source's
        moments change (they are replaced, never modified in place), so the several
        readers in one sweep (prior, ELBO) share one gather of entries x K."""
        src = self.source.moments()
        cached = getattr(self, "_cache", None)
        if cached is not None and cached[0] is src and cached[1] is self.idx:
            return cached[2]
        out = tuple(np.take(np.broadcast_to(m, self.source.plates + np.shape(m)[np.ndim(m) - k:]),
                            self.idx, axis=0)
                    for m, k in zip(src, self.provides.event_ndims))
        self._cache = (src, self.idx, out)
        return out

    def restrict(self, rows, cut, source_rows=None):
        state = super().restrict(rows, cut)
        state.update(idx=self.idx, _scatter=self._scatter)
        self.idx = source_rows
        self._scatter = Scatter(self.idx, self.source.plates[0])  # the source is restricted first
        return state

    def backward(self, msg, parent):
        if len(msg) == 1 and hasattr(msg[0], "scatter") and self.idx.ndim == 1:
            out = msg[0].scatter(self.idx, self.source.plates[0])  # factored: no entries x K
            if out is not None:
                return (out,)
        return tuple(self._scatter(np.broadcast_to(m, self.plates + np.shape(m)[len(self.plates):]),
                                   self.idx.ndim) for m in msg)


class Dot(Deterministic):
    """a = X w: X an array (plates + (D,)), w a MultivariateNormal node.

    Publishes Normal moments (E[a], E[a^2]) = (X E[w], diag(X E[w w^T] X^T));
    a message (c1, c2) on a maps to (X^T c1, X^T diag(c2) X) on w."""

    def __init__(self, X, w, name=None):
        if isinstance(X, Node):
            raise TypeError("Dot(X, w): X must be an array (the design matrix), w the node")
        if not isinstance(w, Node) or not isinstance(getattr(w, "provides", None), MVNFamily):
            raise TypeError(f"Dot(X, w): w must be a MultivariateNormal node, got {w!r}")
        X = np.asarray(X, dtype=float)
        if X.ndim < 1 or not np.all(np.isfinite(X)):
            raise ValueError(f"Dot(X, {w.name}): X must be a finite array of shape (..., D); "
                             f"mask or impute missing covariates first")
        D = np.shape(w.moments()[0])[-1]
        super().__init__(name or f"dot({w.name})", broadcast_plates(X.shape[:-1], w.plates))
        self.X = X
        self.w = w
        self.provides = NormalFamily()
        self.parents = [w]
        w._add_child(self)
        if D != X.shape[-1]:
            raise ValueError(f"Dot(X, {w.name}): X has {X.shape[-1]} columns but w has dimension {D}")

    def restrict(self, rows, cut, source_rows=None):
        state = super().restrict(rows, cut)
        state["X"] = self.X
        self.X = self.X[rows] if self.X.ndim > 1 else self.X
        return state

    def moments(self):
        m, mm = self.w.moments()
        X = self.X
        mean = np.einsum("...d,...d->...", X, m)
        second = np.einsum("...d,...de,...e->...", X, mm, X, optimize=True)
        return (mean, second)

    def backward(self, msg, parent):
        c1, c2 = msg
        kw = dict(target_plates=parent.plates, full_plates=self.plates)
        return (wsum(c1, self.X, subs=("A",), out="A", **kw),
                wsum(c2, self.X, self.X, subs=("A", "B"), out="AB", **kw))
