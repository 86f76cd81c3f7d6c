"""Priors whose parameters are all constants (Beta, Dirichlet, Wishart,
Normal-Gamma, Normal-Wishart, and any family given numbers only)."""
from __future__ import annotations

import numpy as np

from ...families.base import plates_of
from .base import Conditional


class FixedPrior(Conditional):
    """p(x) = the family at fixed constructor parameters: lam0 = natural_from_params."""

    closed_form_elbo = True

    def __init__(self, node, parents, slots, **fixed):
        self.node = node
        self.slots = []
        self.parents = []
        self.fixed = fixed
        fam = node.family
        self.params = fam.validate_params(*parents, where=node.name)
        if fam.locational and np.any(self.params[0] != 0):
            # until the model gives the location group its shift (graph/centring.py), the
            # prior is centred on its own mean: lam3 = -(b + beta m^2/2) would lose b
            fam = fam.with_shift(self.params[0])
            node.family = node.provides = fam
        self.set_family(fam)

    def set_family(self, fam):
        """lam0 from the constructor parameters under ``fam`` (whose location shift,
        graph/centring.py, the natural parameters are relative to)."""
        self.nat0 = tuple(np.asarray(a, dtype=float) for a in fam.natural_from_params(*self.params))
        self.A0 = fam.log_partition(self.nat0)

    def fixed_plates(self):
        return plates_of(self.nat0, self.node.family.event_ndims)

    def plates(self):
        return self.fixed_plates()

    def prior_natural(self, u):
        return self.nat0

    def expected_log_partition(self, u):
        return self.A0
