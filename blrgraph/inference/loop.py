"""The scheduler loop: every method is this loop with the settings of its Method.

Each iteration takes a view of the data (all rows, or a minibatch: the data seam,
:mod:`blrgraph.inference.views`), which fits the local block to the global nodes on its
rows and reports their messages; the loop takes the one BLR step of every global node
with them (:meth:`Run.step`, :func:`~blrgraph.inference.blr.blr_update`) and assembles
the ELBO (:func:`~blrgraph.inference.elbo.view_elbo`). Step sizes (:mod:`~blrgraph.inference.steps`), point masses
(:mod:`~blrgraph.inference.points`), starts (:mod:`~blrgraph.inference.starts`),
convergence, saddle points (:mod:`~blrgraph.inference.saddles`), the callback and the
progress bar live here once.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from . import optimizers
from .blr import blr_step, blr_update, target_from
from . import zstep  # noqa: F401 (adds its step to the compiled sweep's STEP_MAKERS)
from .compiled import compile_sweep
from .elbo import view_elbo
from .points import check_point
from .saddles import tied_components
from .starts import Default, start_assignment
from .steps import Backtracking, robbins_monro
from .tolerance import q_snapshot, q_steps, q_unsettled

class ConvergenceWarning(UserWarning):
    """A fit stopped somewhere that is not an optimum (a symmetric saddle point)."""


#: times a fit that stops at a symmetric saddle point is perturbed and continued
MAX_KICKS = 5


@dataclass
class Plan:
    """Everything a run needs, resolved from the Method and ``fit()``'s options by
    :func:`~blrgraph.inference.fit.plan_run` (the one reader of a Method: the loop, the
    views and the Dask backend read the plan)."""

    name: str                         # the method's name (messages, the progress bar)
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
    rhos: dict = None                 # {node: its initial rho} (steps.initial_rhos)
    damped: list = ()                 # nodes whose steps are backtracked (NCVMP)
    schedule: tuple = None            # (tau, kappa): the globals' Robbins-Monro rho_t
    one_pass: bool = False            # the exact posterior in one step (conjugate)
    updates: dict = None              # {node: "mean"} for gradient steps (Method.update)
    warm_start: bool = True           # SVI's first full step and warmup (Method.warm_start)
    delta: tuple = ()                 # point masses from the start (Method.points "nonconjugate")
    between_sweeps: tuple = ()        # steps before every sweep but the first (model -> a
                                      # lower bound on the ELBO's change, >= 0), so each
                                      # reported state is a sweep's: rotations of Dot(W, x)
                                      # (rotations.py)
    trace: list = field(default_factory=list)


class Run:
    """One run of the loop from a start (or a resumed state)."""

    def __init__(self, model, plan, rng):
        self.model, self.plan, self.rng = model, plan, rng
        self.rhos = dict(plan.rhos)
        if plan.rho is not None:
            self.rhos = {n: float(plan.rho) for n in self.rhos}
        self.backtrack = Backtracking(model, plan.damped, self.rhos)
        # gradient descent moves the delta-method nodes' means (Plan.updates); every
        # other node takes the BLR step of its natural parameters
        self.updates = dict(plan.updates or {})
        # the optimizers' own objective (adam, ivon, ...: optimizers.own_objective) or None
        self.own_objective = optimizers.own_objective(model, self.updates)
        self.trace = list(plan.trace)
        self.local_sweeps = []
        self.kicks = 0
        self.saddle = False
        self._q = self._steps = None     # the globals' last q snapshots, steps (small_change)
        self.it = 0
        self.compiled = False            # compiled.CompiledSweep, None (generic), False: not tried

    # ---- node updates ------------------------------------------------------------
    def _point(self, n, check=True):
        if n in self.plan.points and not n.point:
            n.point = True  # a point mass from its first update on (until then: the prior)
        if n.point and check:
            check_point(n, self.it)

    def update_local(self, n):
        """A local node's step: rho = 1 (or the method's damping), unscaled messages."""
        blr_step(self.model, n, self.rhos[n], iteration=self.it,
                 update=self.updates.get(n, "natural"))
        self._point(n)

    def update_globals(self, view, rho=None):
        for g in self.plan.structure.globals:
            r = self.rhos[g] if rho is None else rho
            u = self.updates.get(g, "natural")
            if isinstance(u, str):
                self.step(g, view.messages(g), r)
            else:   # a stateful optimizer (adam, vogn, ...) reads the view's rows itself
                u.step(self.model, g, r, self.it, None if view.scale == 1.0 else view.scale_of)
            self._point(g, check=isinstance(u, str) or not u.checks_q)  # it checks its own q

    def step(self, node, messages, rho):
        """The step of a global node: lam <- (1 - rho) lam + rho (lam0 + messages), where
        ``messages`` is a view's report (its rows' scaled to stand for every row)."""
        node.set_natural(blr_update(node, node.nat, target_from(node, messages), rho, self.it,
                                    self.updates.get(node, "natural")))

    def elbo(self, view):
        # adam, ivon, ...: the value of the step's own forward pass (no second pass)
        L = None if self.own_objective is None else self.own_objective()
        return view_elbo(self.model, view) if L is None else L

    def global_rho(self):
        """Robbins-Monro rho_t for the globals of a stochastic method (None: per node)."""
        if self.plan.schedule is None or self.plan.rho is not None:
            return None
        return robbins_monro(self.it, *self.plan.schedule)

    # ---- one iteration -----------------------------------------------------------
    def begin(self, view):
        """The first iteration: mixture assignments at their start (so the first global
        step sees symmetry-breaking responsibilities); on a minibatch, one full step of
        the globals from them and ``warmup`` rounds of VMP on it."""
        for z, init in self.plan.starts.items():
            rows = view.idx.get(z)
            if isinstance(init, np.ndarray) and rows is not None:
                init = init[rows]          # a minibatch: the rows of the given start
            used = start_assignment(self.model, z, self.rng, init)
            if isinstance(used, Default):   # a default's fallback (FitResult.start)
                self.plan.used_starts[z] = used
        if self.plan.rows.stochastic and self.plan.warm_start:
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
        if self.compiled is False or (self.compiled is not None and self.compiled.stale()):
            # resolved once per run (compiled.py) on its first sweep; again after a
            # callback re-observes data
            self.compiled = compile_sweep(self, view)
        if self.compiled is not None:
            if block.nodes:
                self.local_sweeps.append(1)
            split = view.row_split()   # n_jobs: its row kernels over the cores (rowsplit.py)
            if split is None:
                return self.compiled.sweep(self.it)
            with split:
                return self.compiled.sweep(self.it)
        L = self.global_step(view, evaluate=self.backtrack.active or not block.nodes)
        if block.nodes:
            if self.it == self.plan.max_iter:
                block.finish()
            self.local_sweeps.append(view.fit_local(block, self.update_local))
            L = self.elbo(view)
        return L

    def global_step(self, view, evaluate):
        """One step of every global node; under damping a step that lowers the ELBO (or
        overflows) is undone and redone with rho halved (:class:`~.steps.Backtracking`)."""
        bt = self.backtrack
        prev = self.trace[-1] if self.trace else None
        if prev is None and bt.active and bt.monotone and evaluate:
            prev = self.elbo(view)  # the first step must not lower the ELBO of the start either
        while True:
            bt.save()
            try:
                self.update_globals(view, self.global_rho())
                L = self.elbo(view) if evaluate else None
            except FloatingPointError as err:
                if not bt.active:
                    raise
                bt.reject(self.it, err)
                continue
            if not bt.active or bt.accept(L, prev, self.it):
                return L

    # ---- convergence ---------------------------------------------------------------
    def small_change(self):
        """Converged: the ELBO's relative change below tol, every damped node back at its
        initial rho, and no global q moved by more than tolerance.q_tolerance(tol) in KL
        (a relative test alone passes far from the optimum when |ELBO| is huge there).
        The KL steps (this sweep's and the last one's, from the last three snapshots of
        the globals' q) are computed only when the ELBO's test passes."""
        t = self.trace
        self._q = (self._q or [])[-2:] + [q_snapshot(self.plan.structure.globals)]
        if not (len(t) > 1 and abs(t[-1] - t[-2]) <= self.plan.tol * abs(t[-1])
                and self.backtrack.settled()):
            return False
        q = [None] * (3 - len(self._q)) + self._q
        last = None if q[1] is None else self._q_steps(q[0], q[1])
        return not q_unsettled(self._q_steps(q[1], q[2]), last, self.plan.tol)

    def _q_steps(self, prev, now):
        """:func:`~.tolerance.q_steps` of two snapshots (the last pair's kept: the next
        sweep reads it as its previous step)."""
        if self._steps is not None and self._steps[0] is prev and self._steps[1] is now:
            return self._steps[2]
        out = q_steps(prev, now)
        self._steps = (prev, now, out)
        return out

    def kick(self, view):
        """At a symmetric saddle point (tied components carrying data, counted by the
        view): split them on the view's rows and go on. Returns True when the run
        should continue."""
        found = False
        for z in self.plan.structure.assignments:
            groups = tied_components(self.model, z, counts=lambda: view.counts(z))
            if groups and self.kicks < MAX_KICKS:
                view.split_tied(z, groups, self.rng)
                found = True
            elif groups:
                self.saddle = True
        if found:
            self.kicks += 1
            warnings.warn(f"fit({self.plan.name!r}) reached a symmetric saddle point (mixture "
                          f"components with identical posteriors) at iteration {self.it}; "
                          f"splitting them at random and continuing", ConvergenceWarning, stacklevel=4)
        elif self.saddle:
            warnings.warn(f"fit({self.plan.name!r}) ended at a symmetric saddle point: mixture "
                          f"components with identical posteriors after {MAX_KICKS} random "
                          f"splits; it is not reported as converged. Try restarts= or fewer "
                          f"components", ConvergenceWarning, stacklevel=4)
        return found

    def run(self):
        """Iterate until convergence, the budget, or the callback; returns converged.
        A gradient step (``Method.update == "mean"``) that overflows stops the run with
        the iteration and the fix."""
        try:
            return self._guarded()
        except BaseException:
            # rows in threads (threads.ThreadRows.abort): the local q back in the model,
            # the threads and the BLAS limit released, also when the fit stops on an error
            self.plan.rows.abort(self.model)
            raise

    def _guarded(self):
        try:
            return self._run()
        except FloatingPointError as err:
            if any(not isinstance(u, str) for u in self.updates.values()):
                # an optimizer (adam, vogn, ...): undo the step, name the node and the fix
                raise optimizers.refused(err, self.updates, self.it, self.plan.name) from None
            if "mean" not in self.updates.values():
                raise
            raise FloatingPointError(f"{err} (at iteration {self.it} of fit({self.plan.name!r}): "
                                     f"the gradient step overshot; lower rho)") from None

    def _run(self):
        plan, rows = self.plan, self.plan.rows
        epoch = rows.per_epoch if rows.stochastic else None  # the bar counts epochs
        bar = _progress(plan.progress, plan.max_iter - len(self.trace), self.plan.name, epoch)
        start = len(self.trace) if plan.resume is not None else 0
        try:
            for it in range(start + 1, plan.max_iter + 1):
                self.it = it
                view = rows.next_view(self.rng)
                view.it = it
                with view:
                    if it == 1:
                        self.begin(view)
                    else:
                        for extra in plan.between_sweeps:
                            extra(self.model)
                    L = self.sweep(view)
                self.trace.append(L)
                if not rows.stochastic:
                    plan.block.settle(self.trace)
                for n in (plan.structure.globals if rows.stochastic else self.model.latent):
                    n.fitted = True  # the callback may read node.posterior of this iterate
                if bar is not None and (epoch is None or it % epoch == 0 or it == plan.max_iter):
                    bar.update(1)
                    bar.set_postfix(elbo=f"{L:.6g}")
                if plan.callback is not None:
                    rows.sync(self.model)   # rows held elsewhere: the model shows this iterate
                    if plan.callback(it, L):
                        return False
                if plan.one_pass:
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
