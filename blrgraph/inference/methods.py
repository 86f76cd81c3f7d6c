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

from .optimizers import OPTIMIZERS, check_hyper

#: step-size schedules a Method may declare
STEPS = ("constant", "damped", "robbins_monro")
#: point-mass policies: none, the global nodes (EM's delta method), every latent node (MAP),
#: the Gaussian nodes fed by non-conjugate factors (the delta-method rows of the BLR table)
POINTS = ("none", "global", "all", "nonconjugate")
#: how a step moves a delta-method Gaussian node: its natural parameters (the BLR step:
#: Newton / Laplace) or only its mean along the gradient, precision fixed (gradient descent)
UPDATES = ("natural", "mean") + OPTIMIZERS


@dataclass(frozen=True)
class Method:
    """One algorithm as a setting of the BLR step.

    step : "constant" (every node takes ``lam <- (1-rho) lam + rho target``; rho = 1 is
        coordinate ascent), "damped" (nodes with a non-conjugate message take rho and are
        backtracked when a sweep lowers the ELBO; conjugate nodes take rho = 1) or
        "robbins_monro" (global nodes take rho_t = (t + tau)^-kappa on minibatches).
    rho : the constant / initial step (with "constant" it damps every node).
    points : "none", "global" (nodes off the data axis, EM), "all" (MAP) or "nonconjugate"
        (the Normal/MultivariateNormal nodes fed by non-conjugate factors, point masses from
        the start: every expectation is the value at the mean -- the delta method).
    update : "natural" (the BLR step of the natural parameters; with delta-method messages
        S <- (1-rho) S + rho H(m), m <- m + rho S^-1 grad: Newton for rho = 1) or "mean"
        (the delta-method nodes keep their precision and m <- m + rho grad log p(D, m):
        gradient descent), or an optimizer of the deep-learning rows ("adam", "ogn", "vogn",
        "ivon": :mod:`~blrgraph.inference.optimizers`, a diagonal Gaussian stepped with its
        own state; "mog": a mixture of Gaussians, :mod:`~blrgraph.inference.mixture_q`;
        ``hyper`` holds its settings).
    variational : report the stepped nodes' q = N(m, diag(1/S)) at the end, not the point
        (vogn, ivon).
    hyper : ((name, value), ...) of the optimizer (``fit(..., beta1=, beta2=, ess=, ...)``).
    laplace : report the delta-method nodes as N(m, H(m)^-1) at the end, and the Laplace
        estimate of log p(D) as ``FitResult.log_evidence``.
    warm_start : a stochastic method's first minibatch takes a full step (rho = 1) from the
        start, and ``warmup`` rounds of VMP (SVI); off for gradient steps.
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
    update: str = "natural"
    laplace: bool = False
    variational: bool = False
    hyper: tuple = ()
    warm_start: bool = True
    tau: float = 1.0
    kappa: float = 0.7
    description: str = ""

    def __post_init__(self):
        if self.step not in STEPS:
            raise ValueError(f"Method {self.name!r}: step={self.step!r}; choose one of {STEPS}")
        if self.points not in POINTS:
            raise ValueError(f"Method {self.name!r}: points={self.points!r}; choose one of {POINTS}")
        if self.update not in UPDATES:
            raise ValueError(f"Method {self.name!r}: update={self.update!r}; choose one of {UPDATES}")
        if not (isinstance(self.rho, (int, float)) and 0.0 < self.rho <= 1.0):
            raise ValueError(f"Method {self.name!r}: rho must lie in (0, 1], got {self.rho!r}")

    def with_rho(self, rho):
        """The same method with step ``rho`` (``fit(method, rho=...)``)."""
        return self if rho is None else replace(self, rho=float(rho))

    def with_hyper(self, **given):
        """The same method with the optimizer settings given to ``fit`` (checked, with the
        defaults filled in; docs/blr.md)."""
        hyper = check_hyper(self.name, self.update, given)
        return replace(self, hyper=tuple(sorted(hyper.items()))) if hyper else self

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
    "map": Method("map", points="all", step="damped", rho=1.0, nonconjugate=True,
                  description="MAP by coordinate ascent: every latent node a point mass (Newton "
                              "steps, backtracked, through non-conjugate factors)"),
    "laplace": Method("laplace", points="nonconjugate", step="damped", rho=1.0,
                      nonconjugate=True, laplace=True,
                      description="Laplace: Newton steps of the delta method (rho = 1, "
                                  "backtracked) to the MAP, then q = N(MAP, H^-1) and the "
                                  "Laplace log evidence"),
    "gd": Method("gd", points="nonconjugate", update="mean", rho=1e-3, nonconjugate=True,
                 description="gradient descent: m <- m + rho grad log p(D, m), covariance fixed"),
    "sgd": Method("sgd", points="nonconjugate", update="mean", rho=1e-3, nonconjugate=True,
                  stochastic=True, warm_start=False,
                  description="stochastic gradient descent: gd on minibatches scaled by N/|B|"),
    "adam": Method("adam", points="nonconjugate", update="adam", rho=1e-3, nonconjugate=True,
                   stochastic=True, warm_start=False,
                   description="the BLR's Adam: delta method, diagonal Gaussian, squared-gradient "
                               "curvature, square-root scaling, momentum (beta1 0.9, beta2 0.999)"),
    "ogn": Method("ogn", points="nonconjugate", update="ogn", rho=0.1, nonconjugate=True,
                  stochastic=True, warm_start=False,
                  description="online Gauss-Newton: the BLR step of a diagonal Gaussian at its "
                              "mean with the Gauss-Newton curvature (squared per-row gradients)"),
    "vogn": Method("vogn", points="nonconjugate", update="vogn", rho=0.1, nonconjugate=True,
                   stochastic=True, warm_start=False, variational=True,
                   description="variational online Gauss-Newton: ogn at draws of q, "
                               "q = N(m, diag(1/S)) reported"),
    "ivon": Method("ivon", points="nonconjugate", update="ivon", rho=0.1, nonconjugate=True,
                   stochastic=True, warm_start=False, variational=True,
                   description="IVON (Shen et al. 2024): Price Hessian estimate at draws of q, "
                               "momentum, Hessian initialisation, ess = N"),
    "mog": Method("mog", points="nonconjugate", update="mog", rho=0.2, nonconjugate=True,
                  variational=True,
                  description="mixture of K Gaussians (Lin, Khan & Schmidt 2019): each "
                              "component takes the BLR step weighted by its responsibilities, "
                              "the weights theirs (components=K, default 2)"),
    "svi": Method("svi", step="robbins_monro", stochastic=True, nonconjugate=True,
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
