"""fit(): run the BLR node by node until the ELBO stops rising."""
from __future__ import annotations

import numpy as np

from ..graph.factors.mixture import MixtureFactor
from .blr import blr_step
from .elbo import elbo
from .methods import get_method
from .result import FitResult


def check_method(model, cfg):
    """Refuse a method the model does not fit, naming the node and the way forward."""
    if not cfg.nonconjugate:
        for n in model.stochastic:
            if not n.factor.conjugate:
                raise ValueError(f"fit({cfg.name!r}): {n.label()} has a non-conjugate factor "
                                 f"({n.factor.describe()}); use fit('ncvmp'), which sends natural-"
                                 f"gradient messages through it")
    if cfg.one_pass:
        for n in model.latent:
            others = model.latent_neighbours(n)
            if others:
                raise ValueError(f"fit('conjugate') needs a model whose posterior is one exact update, "
                                 f"but the update of {n.label()} depends on the latent node(s) "
                                 f"{sorted(o.name for o in others)}; use fit('vmp') (or a joint "
                                 f"NormalGamma/NormalWishart prior)")


def resolve_points(model, cfg, point):
    if point is None:
        if cfg.default_point == "global":
            data_plates = {n.plates for n in model.observed}
            return [n for n in model.latent if n.plates not in data_plates
                    and not _is_assignment(model, n)]
        return []
    out = []
    for p in point:
        n = model[p] if isinstance(p, str) else p
        if n not in model.latent:
            raise ValueError(f"point=: {p!r} is not a latent node of this model")
        if not hasattr(n.family, "mode"):
            raise ValueError(f"point=: {n.label()} has no mode")
        out.append(n)
    return out


def _is_assignment(model, n):
    return any(isinstance(c.factor, MixtureFactor) and c.factor.parents[0] is n
               for c in model.children[n] if c.stochastic)


def initialize(model, rng):
    """q at the prior, in topological order; mixture assignments at random
    responsibilities (breaks the symmetry between components; ``seed`` fixes it)."""
    for n in model.latent:
        n.set_natural(n.prior_natural())
    for n in model.latent:
        if _is_assignment(model, n):
            K = n.nat[0].shape[-1]
            r = rng.dirichlet(np.ones(K), size=n.plates)
            n.set_natural((np.log(np.maximum(r, 1e-300)),))
        n.fitted = False


def node_rho(model, node, cfg, rho):
    """rho for one node: the method's (or user's) step for nodes with a
    non-conjugate message, 1 for conjugate blocks."""
    if not cfg.nonconjugate:
        return 1.0 if rho is None else float(rho)
    nonconj = any(not c.factor.conjugate for c in _stochastic_children(model, node))
    if not nonconj:
        return 1.0
    return cfg.rho if rho is None else float(rho)


def _stochastic_children(model, node):
    out, stack = [], list(model.children[node])
    while stack:
        c = stack.pop()
        if c.deterministic:
            stack.extend(model.children[c])
        else:
            out.append(c)
    return out


def fit(model, method="vmp", *, max_iter=None, tol=1e-8, seed=None, callback=None,
        progress=False, point=None, rho=None, **options):
    """Fit ``model`` by ``method`` ("conjugate", "vmp", "ncvmp", "em", "svi").

    Parameters
    ----------
    max_iter : int, sweeps over the schedule (default 1000; 1 for "conjugate").
    tol : float, relative ELBO change that ends the run.
    seed : int or None, random initialisation of mixture assignments.
    callback : callable(iteration, elbo) -> bool, return True to stop.
    progress : bool, show a tqdm progress bar (if tqdm is installed).
    point : list of nodes or names that are point masses (MAP, delta method).
    rho : float, step size (damping) for nodes with non-conjugate messages.
    """
    cfg = get_method(method)
    if cfg.stochastic:
        from .svi import fit_svi
        return fit_svi(model, cfg, max_iter=max_iter, tol=tol, seed=seed, callback=callback,
                       progress=progress, point=point, rho=rho, **options)
    if options:
        raise TypeError(f"fit({cfg.name!r}) got unexpected options {sorted(options)}")
    check_method(model, cfg)
    points = set(resolve_points(model, cfg, point))
    for n in model.latent:
        n.point = n in points
    if max_iter is None:
        max_iter = 1 if cfg.one_pass else 1000
    if max_iter < 1:
        raise ValueError("max_iter must be >= 1")
    rng = np.random.default_rng(seed)
    initialize(model, rng)
    rhos = {n: node_rho(model, n, cfg, rho) for n in model.schedule}
    trace = []
    converged = False
    bar = _progress(progress, max_iter, cfg.name)
    it = 0
    try:
        for it in range(1, max_iter + 1):
            for n in model.schedule:
                blr_step(model, n, rhos[n], iteration=it)
            L = elbo(model)
            trace.append(L)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(elbo=f"{L:.6g}")
            if callback is not None and callback(it, L):
                break
            if cfg.one_pass:
                converged = True
                break
            if len(trace) > 1 and abs(trace[-1] - trace[-2]) <= tol * abs(trace[-1]):
                converged = True
                break
    finally:
        if bar is not None:
            bar.close()
    for n in model.latent:
        n.fitted = True
    objective = "em_bound" if points else "elbo"
    res = FitResult(elbo=trace[-1], elbo_trace=np.asarray(trace), n_iter=it, converged=converged,
                    method=cfg.name, model=model, objective=objective)
    model.fit_result = res
    return res


def _progress(progress, total, name):
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # optional dependency
        import warnings
        warnings.warn("progress=True needs tqdm (pip install tqdm); continuing without a bar")
        return None
    return tqdm(total=total, desc=f"fit({name!r})", leave=False)
