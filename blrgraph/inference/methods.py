"""The algorithms as settings of one BLR step (docs/math.md §1.3).

Each method only decides the step size rho per node, which nodes are point
masses, and whether a single exact pass suffices.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    one_pass: bool = False          # conjugate Bayes: rho = 1, one pass, exact
    rho: float = 1.0                # step size for every node (damping for ncvmp)
    nonconjugate: bool = False      # may non-conjugate factors send messages?
    default_point: str = "none"     # "none" or "global": EM's delta method
    stochastic: bool = False        # SVI: minibatches, Robbins-Monro rho for global nodes
    init: str = "random"            # default start of mixture assignments (fit(init=None))
    description: str = ""


METHODS = {
    "conjugate": Method("conjugate", one_pass=True,
                        description="conjugate Bayes: exact posterior in one BLR step with rho = 1"),
    "vmp": Method("vmp", description="variational message passing: rho = 1 for every node"),
    "ncvmp": Method("ncvmp", rho=0.5, nonconjugate=True,
                    description="non-conjugate VMP: natural-gradient messages, damped (rho = 0.5)"),
    "em": Method("em", default_point="global", init="kmeans++",
                 description="EM: point masses (MAP) for the parameters, exact q for the latents"),
    "svi": Method("svi", stochastic=True,
                  description="stochastic VI: local rho = 1, global rho_t = (t + tau)^-kappa"),
}


def get_method(name):
    if isinstance(name, Method):
        return name
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {sorted(METHODS)}") from None
