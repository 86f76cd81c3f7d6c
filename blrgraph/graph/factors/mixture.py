"""The mixture (gate) factor: p(x | z, theta) = prod_k p(x | theta_k)^{z_k}
(MATH.md §3.3). Components live on the last plate axis of the component
parameters; any conjugate factor can be the component.
"""
from __future__ import annotations

import numpy as np

from ..plates import broadcast_plates, reduce_to
from .base import Conditional


class MixtureFactor(Conditional):
    """Slots: z (Categorical) then the component factor's slots."""

    def __init__(self, node, parents, slots, component, component_slots, **fixed):
        self.node = node
        z = parents[0]
        from ..node import Node
        if not isinstance(z, Node) or type(getattr(z, "provides", None)).__name__ != "Categorical":
            raise TypeError(f"{node.label()}: the first argument of Mixture must be a Categorical "
                            f"node (the assignments z), got {z!r}")
        self.component = component(node, parents[1:], component_slots, **fixed)
        self.slots = list(slots[:1]) + self.component.slots
        self.fixed = fixed
        self.parents = [z] + self.component.parents
        cplates = self.component.plates()
        if len(cplates) == 0:
            raise ValueError(f"{node.label()}: the component parameters have no plates; put the "
                             f"K components on their last plate axis (e.g. plates=(K,))")
        self.K = cplates[-1]
        Kz = (z.nat if getattr(z, "nat", None) is not None else z.moments())[0].shape[-1]
        if Kz != self.K:
            raise ValueError(f"{node.label()}: z '{z.name}' has {Kz} categories but the component "
                             f"parameters have {self.K} entries on their last plate axis")

    def plates(self):
        cplates = self.component.plates()[:-1]
        try:
            return broadcast_plates(self.parents[0].plates, cplates)
        except ValueError:
            raise ValueError(f"{self.node.label()}: z plates {self.parents[0].plates} and component "
                             f"plates {cplates} (without the component axis) do not broadcast") from None

    def n_categories(self):
        return self.component.n_categories()

    def _split(self, u):
        return u[0][0], u[1:]

    def _component_loglik(self, x, ucomp):
        """E[log p(x | theta_k)] for every entry and component (entries x K). It is
        needed twice per sweep (message to z, then the ELBO) with the same moments,
        so the last result is kept, keyed on the identity of its inputs (moment
        tuples are replaced, never modified, when a node is updated)."""
        refs = (x.value if x.value is not None else x.moments,) + tuple(ucomp)
        cached = getattr(self, "_ll_cache", None)
        if cached is not None and len(cached[0]) == len(refs) and \
                all(a is b for a, b in zip(cached[0], refs)):
            return cached[1]
        xe = x.expand(self.node.family.event_ndims)
        ll = self.component.expected_loglik(xe, ucomp)
        self._ll_cache = (refs, ll)
        return ll

    def prior_natural(self, u):
        r, ucomp = self._split(u)
        out = []
        for a, k in zip(self.component.prior_natural(ucomp), self.node.family.event_ndims):
            rr = r.reshape(r.shape + (1,) * k)
            out.append(np.sum(rr * a, axis=-(k + 1)))
        return tuple(out)

    def expected_log_partition(self, u):
        r, ucomp = self._split(u)
        return np.sum(r * self.component.expected_log_partition(ucomp), axis=-1)

    def expected_loglik(self, x, u):
        r, ucomp = self._split(u)
        return np.einsum("...k,...k->...", r, self._component_loglik(x, ucomp))

    def message(self, i, x, u, w, target):
        r, ucomp = self._split(u)
        if i == 0:
            ll = self._component_loglik(x, ucomp)
            return (reduce_to(ll, 1, target, weights=w),)
        wr = r if w is None else np.asarray(w)[..., None] * r
        xe = x.expand(self.node.family.event_ndims)
        return self.component.message(i - 1, xe, ucomp, wr, target)

    def message_terms(self, i, x, u, w, target):
        """The message to z as gathered tables (families/gathered.py), when the
        component can give its log-likelihoods so (a Categorical of observed labels:
        LDA's words) and no mask weights them; None otherwise."""
        terms = getattr(self.component, "loglik_terms", None)
        if i != 0 or w is not None or terms is None or tuple(target) != self.node.plates:
            return None
        return terms(x, u[1:], self.node.plates)  # (not z's moments: u[0])
