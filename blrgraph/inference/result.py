"""FitResult: what a fit reports."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class FitResult:
    """``elbo`` (float; for ``"conjugate"`` the exact log evidence; for ``"em"`` the
    bound on log p(data, points)), ``elbo_trace`` (one value per iteration),
    ``n_iter``, ``converged``, ``method``; ``local_sweeps`` lists the local sweeps run in
    each iteration when the local block iterates (how hard it worked); with
    ``fit(restarts=R)``, ``restart_elbos`` / ``restart_seeds`` list every start's ELBO and
    seed, ``restart_starts`` the start of each (docs/scheduler.md "Restarts") and
    ``best_restart`` is the index of the one kept; ``seed`` and ``start`` are the seed
    and the start of the run whose result this is."""

    elbo: float
    elbo_trace: np.ndarray
    n_iter: int
    converged: bool
    method: str
    model: object = field(repr=False, default=None)
    objective: str = "elbo"
    estimate: bool = False  # SVI: the ELBO is a stochastic estimate
    local_sweeps: list = field(repr=False, default=None)
    restart_elbos: list = field(repr=False, default=None)
    restart_seeds: list = field(repr=False, default=None)
    best_restart: int = field(repr=False, default=None)
    seed: object = field(repr=False, default=None)
    start: object = field(repr=False, default=None)
    restart_starts: list = field(repr=False, default=None)
    log_evidence: float = field(repr=False, default=None)  # fit("laplace"): Laplace's log p(D)

    def __repr__(self):
        est = " (estimate)" if self.estimate else ""
        return (f"FitResult(method={self.method!r}, {self.objective}={self.elbo:.10g}{est}, "
                f"n_iter={self.n_iter}, converged={self.converged})")
