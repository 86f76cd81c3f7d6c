"""Gates: ``Gate(z, node, axis)`` picks component z of ``node`` along ``axis`` (the
r-averaged moments; messages r_k c to the node and <c, E[T(node_k)]> to z; see
docs/latent_products.md).
"""
from __future__ import annotations

import numpy as np

from ..families.categorical import Categorical as CategoricalFamily
from .base import Deterministic, Node, _stochastic_sources, reduce_seen
from .plates import broadcast_plates, reduce_to


def _gate_selectors(node):
    """The selectors z of the gates a node's value depends on through deterministic nodes."""
    if not node.deterministic:
        return set()
    out = {node.z} if isinstance(node, Gate) else set()
    for p in node.parents:
        out |= _gate_selectors(p)
    return out


class Gate(Deterministic):
    """x = node[z]: a latent Categorical z selects one of the K entries of ``node`` along its
    plate axis ``axis`` (BayesPy's Gate; ``axis`` is its ``cluster_plate``, default the last).

    ``node`` is any node (stochastic or deterministic, even another Gate: nested mixtures)
    whose plates have the K components at ``axis``; the gate's plates are the node's
    without that axis, broadcast with z's plates. A conjugate child's expected
    log-likelihood is linear in each parent's moments, so with responsibilities r = E[z]

        E_z E[log p(child | node_z)] = sum_k r_k E[log p(child | node_k)]

    is the child's term at the averaged moments u = sum_k r_k E[T(node_k)], which the gate
    publishes. The child's message c maps back by the chain rule: to node_k as r_k c, to z
    as <c, E[T(node_k)]> per k (docs/latent_products.md). The child's other parents must
    not depend on z (two parents gated by the same z are not linear in r)."""

    def __init__(self, z, node, axis=-1, name=None):
        if not isinstance(z, Node) or not isinstance(z.provides, CategoricalFamily):
            raise TypeError(f"Gate(z, node): z must be a Categorical node, got {z!r}")
        if not isinstance(node, Node) or node.provides is None:
            raise TypeError(f"Gate({z.name}, node): node must be a node with moments, got {node!r}")
        if not node.plates:
            raise ValueError(f"Gate({z.name}, {node.name}): the node has no plates; its plate "
                             f"axis {axis} must hold the K components")
        nd = len(node.plates)
        if not -nd <= axis < nd:
            raise ValueError(f"Gate({z.name}, {node.name}): axis={axis} is not a plate axis of "
                             f"plates {node.plates}")
        self.axis = axis % nd
        K = node.plates[self.axis]
        Kz = np.shape(z.moments()[0])[-1]
        if Kz != K:
            raise ValueError(f"Gate({z.name}, {node.name}): z has {Kz} categories but the node's "
                             f"plate axis {axis} has {K} components")
        if z in _stochastic_sources(node) or z in _gate_selectors(node):
            raise ValueError(f"Gate({z.name}, {node.name}): the node depends on z itself")
        rest = node.plates[:self.axis] + node.plates[self.axis + 1:]
        try:
            plates = broadcast_plates(z.plates, rest)
        except ValueError:
            raise ValueError(f"Gate({z.name}, {node.name}): z's plates {z.plates} do not broadcast "
                             f"with the node's plates without the component axis, {rest}") from None
        super().__init__(name or f"gate({z.name},{node.name})", plates)
        self.z, self.node, self.K = z, node, K
        self.provides = node.provides
        self.parents = [z, node]
        z._add_child(self)
        node._add_child(self)

    def aligned_plates(self, parent):
        return tuple(self.rest) if parent is self.node else tuple(parent.plates)

    @property
    def rest(self):
        """The node's plates without the component axis (read each time: a minibatch
        or an active-rows view restricts the node's plates)."""
        return self.node.plates[:self.axis] + self.node.plates[self.axis + 1:]

    def _add_child(self, child):
        others = [p for p in child.parents if p is not self]
        if any(self.z in _stochastic_sources(p) | _gate_selectors(p) for p in others):
            raise ValueError(f"{child.label()}: two of its parents depend on the selector "
                             f"{self.z.label()} (gates on the same z); the expected "
                             f"log-likelihood is then not linear in z's probabilities. Gate the "
                             f"parameters as one node (e.g. a NormalWishart or NormalGamma) or use "
                             f"Mixture(z, ...)")
        super()._add_child(child)

    def _components(self):
        """The node's moments with the K axis moved last: rest plates + event + (K,)."""
        ev = self.provides.event_ndims
        out = []
        for m, k in zip(self.node.moments(), ev):
            m = np.broadcast_to(m, self.node.plates + np.shape(m)[np.ndim(m) - k:])
            out.append(np.moveaxis(m, self.axis, -1))
        return out

    def _r(self, k):
        r = np.asarray(self.z.moments()[0], dtype=float)
        return r.reshape(r.shape[:-1] + (1,) * k + (self.K,))

    def moments(self):
        srcs = (self.z.moments(), self.node.moments())
        cached = self._cache
        if cached is not None and cached[0][0] is srcs[0] and cached[0][1] is srcs[1]:
            return cached[1]
        out = []
        for mk, k in zip(self._components(), self.provides.event_ndims):
            v = np.sum(mk * self._r(k), axis=-1)
            out.append(np.broadcast_to(v, self.plates + v.shape[v.ndim - k:]))
        out = tuple(out)
        self._cache = (srcs, out)
        return out

    def backward(self, msg, parent):
        ev = self.provides.event_ndims
        if parent is self.z:
            total = 0.0
            for c, mk, k in zip(msg, self._components(), ev):
                c = np.asarray(c, dtype=float)[..., None]          # plates + event + (1,)
                prod = c * mk
                total = total + np.sum(prod, axis=tuple(range(prod.ndim - 1 - k, prod.ndim - 1)))
            total = np.broadcast_to(total, broadcast_plates(np.shape(total)[:-1], self.plates)
                                    + (self.K,))
            return (reduce_to(total, 1, self.z.plates),)
        out = []
        for c, k in zip(msg, ev):
            term = np.asarray(c, dtype=float)[..., None] * self._r(k)   # plates + event + (K,)
            term = np.broadcast_to(term, broadcast_plates(term.shape[:term.ndim - k - 1], self.plates)
                                   + term.shape[term.ndim - k - 1:])
            red = reduce_to(term, k + 1, self.rest)                      # rest + event + (K,)
            out.append(np.moveaxis(red, -1, self.axis))
        return tuple(out)

    def entries_reached_in(self, parent):
        """The selector's entries of the observed gated rows (a masked row's z then
        integrates out, as in a Mixture); every component of the node when any row is."""
        seen = self.reached_entries()
        if seen is None:
            return None
        if parent is self.z:
            return reduce_seen(np.broadcast_to(seen, self.plates), self.z.plates)
        return np.full(parent.plates, bool(seen.any()))

    def selector(self):
        """z: the fit treats it as a mixture assignment (started at random
        responsibilities, or ``init=``; updated with the local block)."""
        return self.z
