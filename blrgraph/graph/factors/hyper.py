"""Hyperprior factors: a Wishart whose inverse scale is a Wishart node (conjugate).

Lambda ~ Wishart(n, B^-1) (scipy's convention: E[Lambda] = n B^-1) with B random:

    log p(Lambda | B) = (n - D - 1)/2 log|Lambda| - tr(B Lambda)/2 + (n/2) log|B|
                        - (n D/2) log 2 - log Gamma_D(n/2)

is linear in B's sufficient statistics (B, log|B|), so a Wishart q(B) is conjugate: the
message to B is (-E[Lambda]/2, n/2) summed over Lambda's plates (docs/hyperpriors.md).
It is the matrix version of a Gamma's random rate.
"""
from __future__ import annotations

import numpy as np

from ...families.wishart import LOG2, _multigammaln
from ..plates import wsum
from .base import Conditional


class WishartRateFactor(Conditional):
    """Lambda ~ Wishart(dof n (fixed), inverse scale B); slot rate: Wishart moments
    (E[B], E[log|B|])."""

    def __init__(self, node, parents, slots, dof):
        self.dof = np.asarray(dof, dtype=float)
        super().__init__(node, parents, slots)

    def fixed_plates(self):
        return np.shape(self.dof)

    def prior_natural(self, u):
        (B, _), = u
        d = np.shape(B)[-1]
        return (-0.5 * np.asarray(B) + 0.0 * self.dof[..., None, None],
                0.5 * (self.dof - d - 1.0) + 0.0 * np.zeros(np.shape(B)[:-2]))

    def expected_log_partition(self, u):
        (B, lb), = u
        d = np.shape(B)[-1]
        n = self.dof
        return -0.5 * n * lb + 0.5 * n * d * LOG2 + _multigammaln(0.5 * n, d)

    def message(self, i, x, u, w, target):
        x1 = x.moments[0] if x.value is None else x.value
        kw = dict(target_plates=target, full_plates=x.plates)
        return (-0.5 * wsum(w, x1, subs=("AB",), out="AB", **kw),
                0.5 * wsum(w, self.dof + np.zeros(x.plates), **kw))
