"""fit(): check the model and the options, plan the run, run the loop (with restarts)."""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from . import dask_rows, threads
from .batches import AllRows, Minibatches
from .elbo import elbo
from .local import LocalBlock
from .loop import ConvergenceWarning, Plan, Run
from .methods import get_method
from . import optimizers
from .mixture_q import MixtureGaussian
from .optimizers import HYPER
from .options import parse_options
from .points import resolve_points
from .result import FitResult
from .rotations import plan_rotations
from .steps import damped_nodes, initial_rhos
from .starts import (SCREEN_STARTS, SCREEN_SWEEPS, Default, check_init, default_start,
                     restart_start)
from .structure import Structure


def check_method(model, method):
    """Refuse a method the model does not fit, naming the node and the way forward."""
    if not method.stochastic:
        for n in model.observed:
            if n.source is not None and not n.source.dask:
                raise ValueError(f"fit({method.name!r}): {n.label()} observes streamed data (a "
                                 f"memory-mapped array or Stream); fit it with fit('svi'), which "
                                 f"reads it batch by batch, or load the data into memory")
    for n in model.stochastic:
        n.factor.check_fit(method.name)
    if not method.nonconjugate:
        for n in model.stochastic:
            if not n.factor.conjugate:
                raise ValueError(f"fit({method.name!r}): {n.label()} has a non-conjugate factor "
                                 f"({n.factor.describe()}); use fit('ncvmp'), which sends natural-"
                                 f"gradient messages through it")
    if method.one_pass:
        for n in model.latent:
            others = model.latent_neighbours(n)
            if others:
                raise ValueError(f"fit('conjugate') needs a model whose posterior is one exact "
                                 f"update, but the update of {n.label()} depends on the latent "
                                 f"node(s) {sorted(o.name for o in others)}; use fit('vmp') (or a "
                                 f"joint NormalGamma/NormalWishart prior)")


def fit(model, method="vmp", **options):
    """Fit ``model`` by ``method`` ("conjugate", "vmp", "ncvmp", "em", "map", "svi", or a
    :class:`~blrgraph.inference.methods.Method`); the options are listed in docs/api.md
    ("fit"). With ``restarts=R`` the run is repeated from R starts (seeds ``seed``,
    ``seed + 1``, ...; a mixture over data with no ``init=`` starts restart 0 from
    k-means, then random and screened starts in turn: docs/scheduler.md "Restarts"), the
    best ELBO is kept, the nodes are left at it, and ``FitResult.restart_elbos`` lists
    every restart's ELBO (``restart_seeds`` and ``restart_starts`` the seed and start
    that repeat it alone)."""
    method = get_method(method)
    opts = parse_options(method, dict(options))
    method = method.with_rho(opts.rho) if not method.stochastic else \
        method.with_schedule(opts.tau, opts.kappa)
    method = method.with_hyper(**{k: getattr(opts, k) for k in HYPER})
    if opts.resume and method.hyper:
        raise ValueError(f"fit({method.name!r}, resume=True): the optimizer's state (moments, "
                         f"curvature, momentum) is not saved with the run; fit again from the "
                         f"start with a larger budget")
    if method.update == "mog" and opts.restarts != 1:
        raise ValueError("fit('mog'): restarts= is not available (the mixture's components "
                         "already start apart); fit with more components=")
    check_method(model, method)
    with threads.blas_for(opts.n_jobs):   # (n_jobs=1: one core, BLAS's threads too)
        return _fit_restarts(model, method, opts)


def _fit_restarts(model, method, opts):
    """The fit from each of ``opts.restarts`` starts, the best kept (see :func:`fit`)."""
    if opts.restarts == 1:
        return _fit_once(model, method, opts, opts.seed)
    seeds = _restart_seeds(opts.seed, opts.restarts)
    screen = _screens(model, method, opts)
    best, best_state, best_r, elbos, starts = None, None, 0, [], []
    for r, s in enumerate(seeds):
        if screen and restart_start(r) == "screened":
            seeds[r], start = _screened_start(model, method, opts, s)
            res = _fit_once(model, method, opts, seeds[r], start=start)
        else:
            res = _fit_once(model, method, opts, s, restart=r)
        score = elbo(model) if res.estimate and not _streamed(model) else res.elbo
        elbos.append(float(score))
        starts.append(res.start)
        # a later restart is kept only when its ELBO is higher beyond rounding: restarts
        # that reach one optimum (with its components' labels permuted, say) keep the
        # earliest, whatever the order of the sums (n_jobs) made of the last bits
        if best is None or score > elbos[best_r] + TIE * abs(elbos[best_r]):
            best, best_r = res, r
            best_state = [(n, n.snapshot()) for n in model.latent]
    for n, state in best_state:
        n.restore_snapshot(state)
    best.restart_elbos = elbos
    best.restart_seeds = seeds
    best.restart_starts = starts
    best.best_restart = best_r
    model.fit_result = best
    return best


#: restarts whose ELBOs differ by at most this (relative) are one optimum: the earliest is kept
TIE = 1e-12


def _screens(model, method, opts):
    """Restarts may screen their starts (docs/scheduler.md "Restarts"): in a batch fit in
    memory of a model whose every mixture assignment is over data (default start
    k-means), when no ``init=`` is given. Elsewhere a "screened" restart is random."""
    if opts.init is not None or method.stochastic or opts.resume or dask_rows.uses_dask(model):
        return False
    structure = Structure(model, opts.batch_over, strict=False)
    return bool(structure.assignments) and all(
        default_start(structure, z) == "kmeans" for z in structure.assignments)


def _screened_start(model, method, opts, seed):
    """(seed, start) of one restart: the start of SCREEN_STARTS, each with its own seed
    (seed * len(SCREEN_STARTS) + j), whose fit has the highest ELBO after SCREEN_SWEEPS
    sweeps (or at convergence, if sooner; candidates whose ELBOs agree to 1e-12, e.g. two
    k-means starts that found the same clusters, count as a tie, won by the earlier). The
    candidates are not the fit's runs: the callback and the progress bar do not see them."""
    short = dataclasses.replace(opts, max_iter=min(SCREEN_SWEEPS, opts.max_iter or SCREEN_SWEEPS),
                                callback=None, progress=False)
    best = None
    for j, start in enumerate(SCREEN_STARTS):
        s = int(seed) * len(SCREEN_STARTS) + j
        with warnings.catch_warnings():   # a candidate's saddle or budget: not the fit's
            warnings.simplefilter("ignore", ConvergenceWarning)
            score = _fit_once(model, method, short, s, start=start).elbo
        if np.isfinite(score) and (best is None or score > best[0] + 1e-12 * abs(best[0])):
            best = (score, s, start)     # (a tie to rounding keeps the earlier candidate)
    return (seed, SCREEN_STARTS[0]) if best is None else best[1:]


def _restart_seeds(seed, R):
    if seed is None:
        return [int(s) for s in np.random.SeedSequence().generate_state(R)]
    return [int(seed) + r for r in range(R)]


def _start_name(starts):
    """The start of a run as fit(init=...) would take it: a name when every mixture
    assignment started the same way ("given" for an explicit array), else {node: name}."""
    names = {z.name: "given" if isinstance(v, np.ndarray) else str(v) for z, v in starts.items()}
    if not names:
        return None
    return next(iter(names.values())) if len(set(names.values())) == 1 else names


def _streamed(model):
    return any(n.source is not None for n in model.observed)


#: the stateful optimizers' classes by ``Method.update`` (bound per run by optimizers.bind)
OPTIMIZER_CLASSES = {"adam": optimizers.Adam, "ogn": optimizers.GaussNewton,
                     "vogn": optimizers.GaussNewton, "ivon": optimizers.IVON,
                     "mog": MixtureGaussian}


def plan_run(model, method, opts, structure, restart=0, start=None):
    """The :class:`~blrgraph.inference.loop.Plan` of one run (``restart``: its index
    among the restarts, which picks the default start of a mixture over data;
    ``start``: that default start by name, chosen by a screening restart)."""
    if opts.local_iters is not None and not structure.local:
        raise ValueError(f"fit({method.name!r}, local_iters=...): no latent node lies on the data "
                         f"axis (the first plate axis of the observed nodes), so there is no "
                         f"local block to iterate; drop local_iters")
    on_dask = dask_rows.uses_dask(model)
    if on_dask:
        _check_dask(model, method, opts)
    batch = not method.stochastic and not on_dask  # (local.py, starts.py)
    block = LocalBlock(model, structure, opts.local_iters, opts.local_tol, opts.local_restart,
                       adaptive=batch)
    starts = check_init(model, opts.init, structure.assignments)
    points = set(resolve_points(model, method, opts.point, structure))
    for z, init in starts.items():
        if init is None:
            # the structure's start (kmeans / documents / diffuse; the restarts of a batch
            # fit: starts.restart_start, or the screened ``start``); a default start that
            # cannot work on the model falls back (starts.Default, starts.FALLBACK)
            starts[z] = Default(start or default_start(
                structure, z, 0 if method.stochastic else restart, batch))
            if points:
                starts[z] = starts[z].softened()
    if method.stochastic:
        rows = _minibatches(model, structure, opts, method.name)
        budget = opts.max_steps or opts.max_iter or (opts.epochs or 5) * rows.per_epoch
        warmup = opts.warmup if opts.warmup is not None else \
            (0 if any(isinstance(v, str) and v == "diffuse" for v in starts.values()) else 20)
    else:
        rows, warmup = AllRows(model, structure), 0
        budget = opts.max_iter or (1 if method.one_pass else 1000)
    plan = Plan(name=method.name, structure=structure, block=block, rows=rows,
                points=points,
                starts=starts, max_iter=budget, tol=opts.tol, callback=opts.callback,
                progress=opts.progress, rho=opts.rho if method.stochastic else None,
                warmup=warmup, used_starts=dict(starts), rhos=initial_rhos(model, method),
                damped=damped_nodes(model, method), one_pass=method.one_pass,
                schedule=(method.tau, method.kappa) if method.step == "robbins_monro" else None,
                updates={n: method.update for n in points} if method.points == "nonconjugate"
                else {}, warm_start=method.warm_start,
                delta=tuple(points) if method.points == "nonconjugate" else (),
                between_sweeps=plan_rotations(model, method, opts, points, on_dask))
    if on_dask:  # rows on a Dask cluster (docs/scaling.md)
        driver = [v for v in starts.values() if isinstance(v, str) and v in ("topics", "documents")]
        if driver:
            raise ValueError(f"init={driver[0]!r} sets the topics on the driver and needs every "
                             f"row's assignments there; with Dask-backed data use init='diffuse'")
        plan = dask_rows.adopt(model, plan)
    elif not method.stochastic:   # rows in partitions on this machine's cores (n_jobs)
        plan = threads.adopt(model, plan, method, opts.n_jobs)
    return plan


def _check_dask(model, method, opts):
    """Refuse what rows on Dask cannot do (docs/scaling.md)."""
    if method.update != "natural" or method.points == "nonconjugate":
        raise ValueError(f"fit({method.name!r}) on dask data: the delta-method and gradient "
                         f"steps run on data in memory; fit Dask-backed data with 'vmp', 'em' "
                         f"or 'svi'")
    if damped_nodes(model, method) or any(not n.factor.conjugate for n in model.stochastic) \
            or (method.step == "damped" and method.points != "all"):
        raise ValueError(f"fit({method.name!r}) on dask data: damped, backtracked steps need "
                         f"the ELBO of a trial step before the local block moves; fit with "
                         f"'vmp' or 'em', or compute the data into memory")
    if not method.stochastic and opts.local_restart is False:
        raise ValueError(f"fit({method.name!r}, local_restart=False) on dask data: every sweep's "
                         f"tasks refit the local block from the globals (a pure function of the "
                         f"partition and the globals); drop local_restart=False")


def _minibatches(model, structure, opts, name="svi"):
    if structure.root is None:
        raise ValueError(f"fit({name!r}): no observed node has plates to batch over")
    N = structure.N
    size = min(N, 256) if opts.batch_size is None else opts.batch_size
    if not 1 <= size <= N:
        raise ValueError(f"fit({name!r}): batch_size must be between 1 and N = {N}, got {size}")
    return Minibatches(model, structure, size)


def _start(model, plan, opts, rng):
    """Every latent q at its prior (or the saved state of a resumed SVI run)."""
    if opts.resume:
        state = model.svi_state
        if state is None:
            raise ValueError("fit('svi', resume=True): the model has no saved SVI state; fit "
                             "or load first")
        if state["batch_size"] != plan.rows.batch_size or state["N"] != plan.rows.N:
            raise ValueError(f"fit('svi', resume=True): the saved run used batch_size="
                             f"{state['batch_size']} on N={state['N']}; resume with the same")
        rng.bit_generator.state = state["rng"]
        plan.rows.set_state(state["perm"], state["pos"])
        plan.trace = list(state.get("trace", []))
        plan.resume = state
        return
    for n in model.latent:
        # (a point mass publishes its prior expectations until first updated)
        n.restore_snapshot((n.prior_natural(), False, False))
    for n in model.nodes:
        n.start(rng)  # declared hook (Node.start): a given start, Dot symmetry breaking
    for n in plan.delta:   # the delta method from the first step: q's mean is the point
        n.point = True


def _fit_once(model, method, opts, seed, restart=0, start=None):
    structure = Structure(model, opts.batch_over, strict=method.stochastic)
    plan = plan_run(model, method, opts, structure, restart, start)
    rng = np.random.default_rng(seed)
    _start(model, plan, opts, rng)
    plan.updates = optimizers.bind(plan.updates, method, plan, rng, OPTIMIZER_CLASSES)
    run = Run(model, plan, rng)
    converged = run.run()
    if method.stochastic:
        _finish_stochastic(model, plan, run, rng, opts)
    log_evidence = laplace_finish(model, plan) if method.laplace else None
    for n in model.latent:
        n.point = n in plan.points and not (method.laplace or method.variational)
        n.fitted = n.fitted or not method.stochastic
    plan.rows.finish(model)     # (rows on Dask: the local posteriors stay on the workers)
    trace = run.trace
    res = FitResult(elbo=trace[-1] if trace else float("nan"), elbo_trace=np.asarray(trace),
                    n_iter=run.it if not method.stochastic else len(trace),
                    converged=converged and not method.stochastic, method=method.name,
                    model=model, objective=_objective(plan, method, run),
                    estimate=method.stochastic,
                    local_sweeps=run.local_sweeps if structure.local else None)
    res.seed = seed
    res.start = _start_name(plan.used_starts)
    res.log_evidence = log_evidence
    model.fit_result = res
    return res


def _objective(plan, method, run):
    """What the trace holds: the ELBO, or the EM bound (log p(D, point) + the other
    terms) of a run with point masses; vogn and ivon reporting their own objective
    (optimizers.own_objective) add H[q] of their q: an estimate of the ELBO."""
    if not plan.points or method.update == "mog" or (
            method.variational and run.own_objective is not None):
        return "elbo"
    return "em_bound"


def laplace_finish(model, plan):
    """The Laplace approximation at the mode m the run reached (docs/blr.md): each
    delta-method node's precision becomes the curvature there, H(m) = lam0's precision -
    E[hess log f] (the BLR target's precision at m, m unchanged), and the Laplace
    estimate of the evidence is log p(D, m) + sum_k (d_k/2 log 2 pi - 1/2 log |H_k|)
    (with the other nodes' q as fitted: their ELBO terms)."""
    from .blr import blr_target
    total = 0.0
    for n in plan.points:
        e1, e2 = n.nat
        t1, t2 = blr_target(model, n)
        if np.ndim(e2) > np.ndim(e1):
            P = -2.0 * np.asarray(t2)
            m = np.linalg.solve(-2.0 * np.asarray(e2), np.asarray(e1)[..., None])[..., 0]
            sign, logdet = np.linalg.slogdet(P)
            new = (np.einsum("...ij,...j->...i", P, m), np.asarray(t2))
            d = P.shape[-1]
        else:
            P = -2.0 * np.asarray(t2)
            m = np.asarray(e1) / (-2.0 * np.asarray(e2))
            sign, logdet = np.sign(P), np.log(np.abs(P))
            new = (P * m, np.asarray(t2))
            d = 1
        if np.any(sign <= 0):
            raise FloatingPointError(f"fit('laplace'): the curvature of log p at the mode of "
                                     f"{n.label()} is not negative definite (the mode is a saddle "
                                     f"or the likelihood is not log-concave there); use "
                                     f"fit('ncvmp') or a stronger prior")
        n.set_natural(new)
        total += float(np.sum(0.5 * d * np.log(2 * np.pi) - 0.5 * logdet))
    return elbo(model) + total


def _finish_stochastic(model, plan, run, rng, opts):
    """Save the run's state (``resume=True`` continues it) and fit every row's local q
    to the final globals (not for streamed data: memory would grow with N)."""
    from .views import RowView
    rows, structure = plan.rows, plan.structure
    model.svi_state = {"t": len(run.trace), **rows.state(), "rng": rng.bit_generator.state,
                       "batch_size": rows.batch_size, "N": rows.N, "trace": list(run.trace),
                       "batch_over": structure.root.name}
    for n in structure.globals:
        n.fitted = True
    if rows.streamed:
        for n in structure.local:
            n.unfitted_reason = ("its data are streamed: SVI keeps no per-row posterior (memory "
                                 "would grow with N); fit the rows you need with the global "
                                 "posterior, e.g. a model on an in-memory slice")
        return
    if not opts.final_local_pass:
        return
    for r in rows.blocks():
        with RowView(model, structure, r, keep=structure.local) as view:
            view.fit_local(plan.block, run.update_local)
    for n in structure.local:
        n.fitted = True
