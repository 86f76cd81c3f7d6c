"""The algorithms as settings of one BLR step (docs/scheduler.md, "Methods as settings").

A :class:`Method` is the whole policy of a fit: the step size of every node (constant,
damped with backtracking, Robbins-Monro), which nodes are point masses (none, the
global ones, all of them), whether the data are visited in minibatches, and which factors
may send non-conjugate messages. Only the planning of a fit reads these fields:
:mod:`blrgraph.inference.fit` (``check_method``, ``plan_run``) and the helpers it calls
(``options.parse_options``, ``steps.initial_rhos``, ``steps.damped_nodes``,
``points.resolve_points``); the loop, the views and the Dask backend read the resulting
:class:`~blrgraph.inference.loop.Plan`. Nothing interprets a method by
name. A new method is one more entry of :data:`METHODS`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

#: step-size schedules a Method may declare
STEPS = ("constant", "damped", "robbins_monro")
#: point-mass policies: none, the global nodes (EM's delta method), every latent node (MAP)
POINTS = ("none", "global", "all")


@dataclass(frozen=True)
class Method:
    """One algorithm as a setting of the BLR step.

    step : "constant" (every node takes ``lam <- (1-rho) lam + rho target``; rho = 1 is
        coordinate ascent), "damped" (nodes with a non-conjugate message take rho and are
        backtracked when a sweep lowers the ELBO; conjugate nodes take rho = 1) or
        "robbins_monro" (global nodes take rho_t = (t + tau)^-kappa on minibatches).
    rho : the constant / initial step (with "constant" it damps every node).
    points : "none", "global" (nodes off the data axis, EM) or "all" (MAP).
    stochastic : minibatches of the data axis with messages scaled by N/|B| (SVI).
    one_pass : the exact posterior in one step (conjugate Bayes).
    tau, kappa : the Robbins-Monro schedule of "robbins_monro".
    description : one line for people (the CLI's ``--method`` help, docs).

    The starts of mixture assignments are not a method's setting: they follow the
    model's structure (docs/scheduler.md, "Starts"; ``fit(init=...)``).
    """

    name: str
    step: str = "constant"
    rho: float = 1.0
    points: str = "none"
    stochastic: bool = False
    nonconjugate: bool = False
    one_pass: bool = False
    tau: float = 1.0
    kappa: float = 0.7
    description: str = ""

    def __post_init__(self):
        if self.step not in STEPS:
            raise ValueError(f"Method {self.name!r}: step={self.step!r}; choose one of {STEPS}")
        if self.points not in POINTS:
            raise ValueError(f"Method {self.name!r}: points={self.points!r}; choose one of {POINTS}")
        if not (isinstance(self.rho, (int, float)) and 0.0 < self.rho <= 1.0):
            raise ValueError(f"Method {self.name!r}: rho must lie in (0, 1], got {self.rho!r}")

    def with_rho(self, rho):
        """The same method with step ``rho`` (``fit(method, rho=...)``)."""
        return self if rho is None else replace(self, rho=float(rho))

    def with_schedule(self, tau=None, kappa=None):
        """The same method with the Robbins-Monro ``tau`` / ``kappa`` given to ``fit``."""
        changes = {k: float(v) for k, v in (("tau", tau), ("kappa", kappa)) if v is not None}
        return replace(self, **changes) if changes else self


METHODS = {
    "conjugate": Method("conjugate", one_pass=True,
                        description="conjugate Bayes: the exact posterior in one BLR step, rho = 1"),
    "vmp": Method("vmp", description="variational message passing: coordinate ascent, rho = 1"),
    "ncvmp": Method("ncvmp", step="damped", rho=0.5, nonconjugate=True,
                    description="non-conjugate VMP: natural-gradient messages, damped steps "
                                "(rho = 0.5) with backtracking"),
    "em": Method("em", points="global",
                 description="EM: point masses (MAP) for the parameters, exact q for the latents"),
    "map": Method("map", points="all",
                  description="MAP by coordinate ascent: every latent node a point mass"),
    "svi": Method("svi", step="robbins_monro", stochastic=True,
                  description="stochastic VI: local rho = 1, global rho_t = (t + tau)^-kappa "
                              "on minibatches scaled by N/|B|"),
}


def get_method(name):
    """A :class:`Method` from its name (or the Method itself)."""
    if isinstance(name, Method):
        return name
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}; choose one of {sorted(METHODS)} "
                         f"or pass a Method") from None
