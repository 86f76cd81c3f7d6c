"""The scheduler loop: every method is this loop with the settings of its Method.

Each iteration takes a view of the data (all rows, or a minibatch: the data seam,
:mod:`blrgraph.inference.views`), fits the local block to the global nodes in it, then
takes one BLR step of every global node with that view's messages, and evaluates the
view's ELBO. Step sizes (:mod:`~blrgraph.inference.steps`), point masses
(:mod:`~blrgraph.inference.points`), starts (:mod:`~blrgraph.inference.starts`),
convergence, saddle points (:mod:`~blrgraph.inference.saddles`), the callback and the
progress bar live here once.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from . import optimizers
from .blr import blr_step
from .points import check_point
from .saddles import split_tied, tied_components
from .starts import Default, start_assignment
from .steps import Backtracking, initial_rhos, robbins_monro

class ConvergenceWarning(UserWarning):
    """A fit stopped somewhere that is not an optimum (a symmetric saddle point)."""


#: times a fit that stops at a symmetric saddle point is perturbed and continued
MAX_KICKS = 5


@dataclass
class Plan:
    """Everything a run needs, resolved from ``fit()``'s options (:mod:`.fit`)."""

    method: object
    structure: object
    block: object
    rows: object                      # batches.AllRows or batches.Minibatches
    points: set
    starts: dict                      # {assignment node: start}
    max_iter: int
    tol: float = 1e-8
    callback: object = None
    progress: bool = False
    rho: float = None                 # the user's constant step (overrides Robbins-Monro)
    warmup: int = 0                   # rho = 1 rounds on the first minibatch (SVI)
    resume: dict = None               # saved iteration state of a stochastic run
    used_starts: dict = None          # {assignment node: start actually used, after any
                                      # fallback}, for FitResult.start (also on Dask)
    trace: list = field(default_factory=list)


class Run:
    """One run of the loop from a start (or a resumed state)."""

    def __init__(self, model, plan, rng):
        self.model, self.plan, self.rng = model, plan, rng
        self.method = plan.method
        self.rhos = initial_rhos(model, plan.method)
        if plan.rho is not None:
            self.rhos = {n: float(plan.rho) for n in self.rhos}
        self.backtrack = Backtracking(model, plan.method, self.rhos)
        # gradient descent moves the delta-method nodes' means (Method.update); every
        # other node takes the BLR step of its natural parameters
        self.updates = {n: (self.method.update if n in plan.points and
                            self.method.points == "nonconjugate" else "natural")
                        for n in model.schedule}
        self.updates = optimizers.bind(self.updates, self.method, plan, rng)  # adam, vogn, ...
        self.trace = list(plan.trace)
        self.local_sweeps = []
        self.kicks = 0
        self.saddle = False
        self.it = 0

    # ---- node updates ------------------------------------------------------------
    def _point(self, n):
        if n in self.plan.points and not n.point:
            n.point = True  # a point mass from its first update on (until then: the prior)
        if n.point:
            check_point(n, self.it)

    def update_local(self, n):
        """A local node's step: rho = 1 (or the method's damping), unscaled messages."""
        blr_step(self.model, n, self.rhos[n], iteration=self.it, update=self.updates[n])
        self._point(n)

    def update_globals(self, view, rho=None):
        for g in self.plan.structure.globals:
            view.step(g, self.rhos[g] if rho is None else rho, self.it, update=self.updates[g])
            self._point(g)

    def global_rho(self):
        """Robbins-Monro rho_t for the globals of a stochastic method (None: per node)."""
        if self.method.step != "robbins_monro" or self.plan.rho is not None:
            return None
        return robbins_monro(self.it, self.method.tau, self.method.kappa)

    # ---- one iteration -----------------------------------------------------------
    def begin(self, view):
        """The first iteration: mixture assignments at their start (so the first global
        step sees symmetry-breaking responsibilities); on a minibatch, one full step of
        the globals from them and ``warmup`` rounds of VMP on it."""
        for z, init in self.plan.starts.items():
            rows = getattr(view, "idx", {}).get(z)
            if isinstance(init, np.ndarray) and rows is not None:
                init = init[rows]          # a minibatch: the rows of the given start
            used = start_assignment(self.model, z, self.rng, init)
            if isinstance(used, Default):   # a default's fallback (FitResult.start)
                self.plan.used_starts[z] = used
        if self.plan.rows.stochastic and self.method.warm_start:
            self.update_globals(view, rho=1.0)
            for _ in range(self.plan.warmup):
                view.fit_local(self.plan.block, self.update_local)
                self.update_globals(view, rho=1.0)

    def sweep(self, view):
        """All rows: the globals' step, then the local block fitted to them (so the
        reported ELBO has every local q optimal for the globals). A minibatch: the local
        block on it, then the globals' step with its scaled messages."""
        block = self.plan.block
        if self.plan.rows.stochastic:
            self.local_sweeps.append(view.fit_local(block, self.update_local))
            return self.global_step(view, evaluate=True)
        L = self.global_step(view, evaluate=self.backtrack.active or not block.nodes)
        if block.nodes:
            if self.it == self.plan.max_iter:
                block.finish()
            self.local_sweeps.append(view.fit_local(block, self.update_local))
            L = view.elbo()
        return L

    def global_step(self, view, evaluate):
        """One step of every global node; under damping a step that lowers the ELBO (or
        overflows) is undone and redone with rho halved (:class:`~.steps.Backtracking`)."""
        bt = self.backtrack
        prev = self.trace[-1] if self.trace else None
        if prev is None and bt.active and bt.monotone and evaluate:
            prev = view.elbo()  # the first step must not lower the ELBO of the start either
        while True:
            bt.save()
            try:
                self.update_globals(view, self.global_rho())
                L = view.elbo() if evaluate else None
            except FloatingPointError as err:
                if not bt.active:
                    raise
                bt.reject(self.it, err)
                continue
            if not bt.active or bt.accept(L, prev, self.it):
                return L

    # ---- convergence ---------------------------------------------------------------
    def small_change(self):
        t = self.trace
        return len(t) > 1 and abs(t[-1] - t[-2]) <= self.plan.tol * abs(t[-1]) \
            and self.backtrack.settled()

    def kick(self, view=None):
        """At a symmetric saddle point (tied components carrying data): split them and
        go on (through the view when it holds the rows elsewhere: Dask). Returns True
        when the run should continue."""
        found = False
        tied = getattr(view, "tied_components", None) or (lambda z: tied_components(self.model, z))
        for z in self.plan.structure.assignments:
            groups = tied(z)
            if groups and self.kicks < MAX_KICKS:
                getattr(view, "split_tied", split_tied)(z, groups, self.rng)
                found = True
            elif groups:
                self.saddle = True
        if found:
            self.kicks += 1
            warnings.warn(f"fit({self.method.name!r}) reached a symmetric saddle point (mixture "
                          f"components with identical posteriors) at iteration {self.it}; "
                          f"splitting them at random and continuing", ConvergenceWarning, stacklevel=4)
        elif self.saddle:
            warnings.warn(f"fit({self.method.name!r}) ended at a symmetric saddle point: mixture "
                          f"components with identical posteriors after {MAX_KICKS} random "
                          f"splits; it is not reported as converged. Try restarts= or fewer "
                          f"components", ConvergenceWarning, stacklevel=4)
        return found

    def run(self):
        """Iterate until convergence, the budget, or the callback; returns converged.
        A gradient step (``Method.update == "mean"``) that overflows stops the run with
        the iteration and the fix."""
        try:
            return self._run()
        except FloatingPointError as err:
            if self.method.update in optimizers.OPTIMIZERS:   # undo the step, name the fix
                raise optimizers.refused(err, self.updates, self.it, self.method.name) from None
            if self.method.update != "mean":
                raise
            raise FloatingPointError(f"{err} (at iteration {self.it} of fit({self.method.name!r}): "
                                     f"the gradient step overshot; lower rho)") from None

    def _run(self):
        plan, rows = self.plan, self.plan.rows
        epoch = getattr(rows, "per_epoch", None) if rows.stochastic else None  # bar by epoch
        bar = _progress(plan.progress, plan.max_iter - len(self.trace), self.method.name, epoch)
        start = len(self.trace) if plan.resume is not None else 0
        try:
            for it in range(start + 1, plan.max_iter + 1):
                self.it = it
                view = rows.next_view(self.rng)
                with view:
                    if it == 1:
                        self.begin(view)
                    L = self.sweep(view)
                self.trace.append(L)
                if not rows.stochastic:
                    plan.block.settle(self.trace)
                for n in (plan.structure.globals if rows.stochastic else self.model.latent):
                    n.fitted = True  # the callback may read node.posterior of this iterate
                if bar is not None and (epoch is None or it % epoch == 0 or it == plan.max_iter):
                    bar.update(1)
                    bar.set_postfix(elbo=f"{L:.6g}")
                if plan.callback is not None and plan.callback(it, L):
                    return False
                if self.method.one_pass:
                    return True
                if not rows.stochastic and self.small_change() and not self.kick(view):
                    return not self.saddle
            return False
        finally:
            if bar is not None:
                bar.close()


def _progress(progress, total, name, epoch=None):
    """A tqdm bar of ``total`` sweeps, or of the epochs they make (minibatches)."""
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # optional dependency
        warnings.warn("progress=True needs tqdm (pip install tqdm); continuing without a bar")
        return None
    if epoch:
        return tqdm(total=-(-total // epoch), desc=f"fit({name!r})", unit="epoch", leave=False)
    return tqdm(total=total, desc=f"fit({name!r})", leave=False)
