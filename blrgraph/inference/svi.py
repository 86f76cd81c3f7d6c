"""Stochastic variational inference: the same BLR step on minibatches.

Local nodes (those on the data axis of ``batch_over``, directly or below a
gather) get rho = 1 on each minibatch; global nodes get
rho_t = (t + tau)^-kappa with the minibatch's messages scaled by N/|B|
(Hoffman et al. 2013; MATH.md §1.3(d), §1.4). Nothing here is a second
engine: a minibatch is the model *restricted* to some entries of the data
axis, and every update is ``blr_step``.
"""
from __future__ import annotations

import math

import numpy as np

from ..graph.deterministic import Dot, Gather
from ..graph.plates import Scatter
from .blr import blr_step, reset_to_prior
from .fit import (INITS, _is_assignment, _progress, check_method, check_point, fit_locals,
                  resolve_points, start_assignment)
from .result import FitResult


class DataAxis:
    """The data axis of ``batch_over`` and the nodes that live on it."""

    def __init__(self, model, batch_over=None, local=None):
        if batch_over is None:
            cands = [n for n in model.observed if n.plates]
            if not cands:
                raise ValueError("fit('svi'): no observed node has plates to batch over")
            batch_over = cands[0]
        elif isinstance(batch_over, str):
            batch_over = model[batch_over]
        if batch_over not in model.graph:
            raise ValueError(f"fit('svi'): batch_over={batch_over!r} is not a node of this model")
        if not batch_over.plates:
            raise ValueError(f"fit('svi'): batch_over {batch_over.label()} has no plates; "
                             f"its first plate axis is the data axis")
        self.root = batch_over
        self.N = batch_over.plates[0]
        self.links = {batch_over: None}  # node -> (kind, via)
        frontier = [batch_over]
        while frontier:
            X = frontier.pop()
            for nb in list(model.children[X]) + [p for p in X.parents if p in model.graph]:
                if nb in self.links:
                    continue
                if isinstance(nb, Gather):
                    if nb.source is X:
                        if nb.idx.ndim != 1:
                            raise ValueError(f"fit('svi'): batching through {nb.label()} needs a "
                                             f"one-dimensional index array")
                        self.links[nb] = ("gather", X)
                        frontier.append(nb)
                        continue
                    raise ValueError(f"fit('svi'): the data axis of {batch_over.label()} reaches the "
                                     f"gather {nb.label()} from below; batch over its source "
                                     f"(batch_over={nb.source.name!r}) so that every entry of a "
                                     f"local node sees all its data")
                if nb.plates and X.plates and nb.plates[0] == X.plates[0]:
                    self.links[nb] = ("same", X)
                    frontier.append(nb)
        if local is not None:
            wanted = {model[n] if isinstance(n, str) else n for n in local}
            extra = wanted - set(self.links)
            if extra:
                raise ValueError(f"fit('svi'): local={sorted(n.name for n in extra)} are not on the "
                                 f"data axis of {batch_over.label()}")
        # in discovery order (dict order): each node after the node it was reached from
        # (a latent parent reached through a deterministic child: PCA's x via Dot(W, x))
        self.order = list(self.links)
        self.local_latent = [n for n in model.schedule if n in self.links]
        self.global_latent = [n for n in model.schedule if n not in self.links]

    def indices(self, b):
        """Entries of every local node's first axis for batch ``b`` of the data axis,
        and the remapped gather indices."""
        idx = {self.root: np.asarray(b)}
        remap = {}
        for n in self.order:
            if n is self.root:
                continue
            kind, via = self.links[n]
            if kind == "same":
                idx[n] = idx[via]
            else:
                src = idx[via]
                inv = np.full(n.source.plates[0], -1, dtype=np.intp)
                inv[src] = np.arange(len(src))
                pos = np.flatnonzero(inv[n.idx] >= 0)
                idx[n] = pos
                remap[n] = inv[n.idx[pos]]
        return idx, remap


class Restriction:
    """Context manager: the model restricted to one minibatch (state swapped in place)."""

    def __init__(self, axis, b):
        self.axis = axis
        self.idx, self.remap = axis.indices(b)
        self.saved = {}

    def __enter__(self):
        sliced = {}

        def cut(arr, rows):
            if arr is None:
                return None
            key = id(arr)
            if key not in sliced:
                sliced[key] = np.asarray(arr)[rows]
            return sliced[key]

        for n, rows in self.idx.items():
            state = {"plates": n.plates}
            n.plates = (len(rows),) + n.plates[1:]
            if isinstance(n, Gather):
                state.update(idx=n.idx, _scatter=n._scatter)
                n.idx = self.remap[n]
                n._scatter = Scatter(n.idx, len(self.idx[self.axis.links[n][1]]))
            elif isinstance(n, Dot) and n.X is not None:
                state.update(X=n.X)
                n.X = n.X[rows] if n.X.ndim > 1 else n.X
            elif n.stochastic:
                state.update(replicates=n.replicates, nat=n.nat, _moments=n._moments)
                n.replicates = cut(n.replicates, rows)
                if n.observed:
                    state.update(value=n.value, mask=n.mask, weights=n.weights,
                                 _obs_moments=n._obs_moments)
                    if n.source is not None:
                        n.value, n.mask, n.weights = n.read_batch(rows)
                    else:
                        n.value = cut(n.value, rows)
                        n.mask = cut(n.mask, rows)
                        n.weights = cut(n.weights, rows)
                    n._obs_moments = None
                else:
                    n.nat = tuple(np.broadcast_to(a, state["plates"] + np.shape(a)[np.ndim(a) - k:])[rows]
                                  for a, k in zip(n.nat, n.family.event_ndims))
                    n._moments = None
            self.saved[n] = state
        return self

    def __exit__(self, *exc):
        for n, state in self.saved.items():
            for k, v in state.items():
                setattr(n, k, v)
        return False


def _global_step(model, g, rho, t, scale, points):
    """BLR step of a global node; a point mass (online EM) from its first update on."""
    blr_step(model, g, rho, iteration=t, scale=scale)
    if g in points:
        g.point = True
        check_point(g, t)


def robbins_monro(t, tau, kappa):
    """rho_t = (t + tau)^-kappa, t = 1, 2, ..."""
    return (t + tau) ** (-kappa)


def _local_pass(model, axis, first_step, rng, local_iters, local_tol, reset=True, init="random"):
    """Local nodes at rho = 1 fitted to the globals (:func:`~blrgraph.inference.fit.fit_locals`:
    until their natural parameters settle). On the first minibatch the mixture
    assignments start at ``init`` and the other local nodes are updated once from them
    (the first global step then sees the starting responsibilities)."""
    nodes = axis.local_latent
    if first_step:
        if reset:
            for n in nodes:
                reset_to_prior(n)
        assign = [n for n in nodes if _is_assignment(model, n)]
        for n in assign:
            start_assignment(model, n, rng, init)
        for n in nodes:
            if n not in assign:
                blr_step(model, n, 1.0)
        return
    fit_locals(model, nodes, local_iters, local_tol, reset, lambda n: blr_step(model, n, 1.0))


def fit_svi(model, cfg, *, max_iter=None, tol=None, seed=None, callback=None, progress=False,
            point=None, rho=None, batch_size=None, epochs=None, max_steps=None, tau=1.0,
            kappa=0.7, batch_over=None, local=None, local_iters=100, local_tol=1e-3,
            resume=False, final_local_pass=True, warmup=20, init=None):
    """fit("svi"): see :func:`blrgraph.inference.fit`; options

    batch_size : minibatch size on the data axis (default min(N, 256)).
    epochs / max_steps : budget (default 5 epochs); ``max_iter`` is an alias of max_steps.
    tau, kappa : rho_t = (t + tau)^-kappa for global nodes, kappa in (0.5, 1].
    batch_over : node (or name) whose first plate axis is the data axis.
    resume : continue a fit saved with ``model.save`` / restored with ``model.load``.
    init : "kmeans++" (default), "random" or "diffuse": the first minibatch's mixture responsibilities.
    warmup : on the first minibatch, alternate local and global updates (rho = 1)
        this many times before the Robbins-Monro steps: VMP on one minibatch,
        which separates mixture components early.
    local_iters, local_tol : local sweeps per minibatch stop when the mean absolute
        change of the local nodes' natural parameters is below local_tol (those of the
        local nodes that are not mixture assignments, if any: for LDA the change of
        theta's concentrations, scikit-learn's ``mean_change_tol``).
    """
    check_method(model, cfg)
    init = "kmeans++" if init is None else init
    if init not in INITS:
        raise ValueError(f"init={init!r}: choose one of {list(INITS)}")
    if not (0.5 < kappa <= 1.0):
        raise ValueError(f"fit('svi'): kappa must lie in (0.5, 1] (Robbins-Monro), got {kappa}")
    if tau < 0:
        raise ValueError(f"fit('svi'): tau must be >= 0, got {tau}")
    axis = DataAxis(model, batch_over, local)
    N = axis.N
    if batch_size is None:
        batch_size = min(N, 256)
    batch_size = int(batch_size)
    if not 1 <= batch_size <= N:
        raise ValueError(f"fit('svi'): batch_size must be between 1 and N = {N}, got {batch_size}")
    per_epoch = math.ceil(N / batch_size)
    streamed = [n for n in model.observed if n.source is not None]
    # in-memory data: a fresh permutation of the rows each epoch; a memory-mapped
    # file: contiguous blocks in random order (O(N / batch_size) memory, sequential
    # reads); a Stream: blocks in arrival order
    if any(n.source.sequential for n in streamed):
        mode = "sequential"
    elif streamed:
        mode = "blocks"
    else:
        mode = "shuffle"
    if streamed and any(n not in axis.links for n in streamed):
        raise ValueError(f"fit('svi'): streamed data must lie on the data axis of "
                         f"{axis.root.label()}")
    if max_iter is not None and max_steps is None:
        max_steps = max_iter
    if max_steps is None:
        max_steps = (5 if epochs is None else int(epochs)) * per_epoch
    elif epochs is not None:
        raise ValueError("fit('svi'): give epochs or max_steps, not both")
    points = set(resolve_points(model, cfg, point))
    state = getattr(model, "svi_state", None) if resume else None
    if resume and state is None:
        raise ValueError("fit('svi', resume=True): the model has no saved SVI state; fit or load first")
    rng = np.random.default_rng(seed)
    if state is None:
        for n in model.latent:
            n.point = False  # a point mass publishes its prior expectations until updated
            n.set_natural(n.prior_natural())
            n.fitted = False
        for n in model.nodes:
            n.start(rng)  # declared hook (Node.start), e.g. Dot of two latent vectors
        t, perm, pos, trace = 0, None, 0, []
    else:
        if state["batch_size"] != batch_size or state["N"] != N:
            raise ValueError(f"fit('svi', resume=True): the saved run used batch_size="
                             f"{state['batch_size']} on N={state['N']}; resume with the same")
        rng.bit_generator.state = state["rng"]
        t, perm, pos = state["t"], state["perm"], state["pos"]
        trace = list(state.get("trace", []))
    bar = _progress(progress, max_steps - t, "svi")
    try:
        while t < max_steps:
            if perm is None or pos >= len(perm):
                n_blocks = math.ceil(N / batch_size)
                if mode == "shuffle":
                    perm = rng.permutation(N)
                elif mode == "blocks":
                    perm = rng.permutation(n_blocks)
                else:
                    perm = np.arange(n_blocks)
                pos = 0
            if mode == "shuffle":
                b = perm[pos: pos + batch_size]
                pos += len(b)
            else:
                start = int(perm[pos]) * batch_size
                b = np.arange(start, min(start + batch_size, N))
                pos += 1
            t += 1
            scale = N / len(b)
            with Restriction(axis, b) as batch:
                locals_ = set(batch.idx)

                def scaled(c):
                    return scale if c in locals_ else 1.0

                _local_pass(model, axis, t == 1, rng, local_iters, local_tol, init=init)
                for n in axis.local_latent:   # a local point mass (hard EM) from its first update on
                    if n in points:
                        n.point = True
                if t == 1:
                    for _ in range(int(warmup)):
                        for g in axis.global_latent:
                            _global_step(model, g, 1.0, t, scaled, points)
                        _local_pass(model, axis, False, rng, local_iters, local_tol, reset=False)
                rho_t = robbins_monro(t, tau, kappa) if rho is None else float(rho)
                for g in axis.global_latent:
                    _global_step(model, g, rho_t, t, scaled, points)
                L = 0.0
                for n in model.stochastic:
                    term = n.elbo_term()
                    L += scale * term if n in locals_ else term
            trace.append(L)
            if bar is not None:
                bar.update(1)
            if callback is not None and callback(t, L):
                break
    finally:
        if bar is not None:
            bar.close()
    model.svi_state = {"t": t, "perm": perm, "pos": pos, "rng": rng.bit_generator.state,
                       "batch_size": batch_size, "N": N, "trace": list(trace),
                       "batch_over": axis.root.name}
    for n in axis.global_latent:
        n.fitted = True
    if final_local_pass and not streamed:
        _fill_locals(model, axis, batch_size, local_iters, local_tol)
    elif streamed:
        for n in axis.local_latent:
            n.unfitted_reason = ("its data are streamed: SVI keeps no per-row posterior (memory "
                                 "would grow with N); fit the rows you need with the global "
                                 "posterior, e.g. a model on an in-memory slice")
    res = FitResult(elbo=trace[-1] if trace else float("nan"), elbo_trace=np.asarray(trace),
                    n_iter=t, converged=False, method="svi", model=model,
                    objective="elbo", estimate=True)
    model.fit_result = res
    return res


def _fill_locals(model, axis, batch_size, local_iters, local_tol):
    """One pass over all data, batch by batch, fitting the local nodes given the
    globals, so that e.g. ``z.posterior`` holds every responsibility."""
    full = {n: [np.array(np.broadcast_to(a, n.plates + np.shape(a)[np.ndim(a) - k:]))
                for a, k in zip(n.nat, n.family.event_ndims)] for n in axis.local_latent}
    rng = np.random.default_rng(0)
    for start in range(0, axis.N, batch_size):
        b = np.arange(start, min(start + batch_size, axis.N))
        with Restriction(axis, b) as batch:
            _local_pass(model, axis, False, rng, local_iters, local_tol)
            for n in axis.local_latent:
                rows = batch.idx[n]
                for arr, a in zip(full[n], n.nat):
                    arr[rows] = a
    for n in axis.local_latent:
        n.set_natural(tuple(full[n]))
        n.fitted = True
