"""Priors whose parameters are all constants (Beta, Dirichlet, Wishart,
Normal-Gamma, Normal-Wishart, and any family given numbers only)."""
from __future__ import annotations

import numpy as np

from ...families.base import plates_of
from .base import Conditional


class FixedPrior(Conditional):
    """p(x) = the family at fixed constructor parameters: lam0 = natural_from_params."""

    def __init__(self, node, parents, slots, **fixed):
        self.node = node
        self.slots = []
        self.parents = []
        self.fixed = fixed
        fam = node.family
        params = fam.validate_params(*parents, where=node.name)
        self.nat0 = tuple(np.asarray(a, dtype=float) for a in fam.natural_from_params(*params))
        self.A0 = fam.log_partition(self.nat0)

    def fixed_plates(self):
        return plates_of(self.nat0, self.node.family.event_ndims)

    def plates(self):
        return self.fixed_plates()

    def prior_natural(self, u):
        return self.nat0

    def expected_log_partition(self, u):
        return self.A0
