"""fit(): run the BLR node by node until the ELBO stops rising."""
from __future__ import annotations

import numpy as np

from ..graph.deterministic import Gather
from ..graph.factors.mixture import MixtureFactor
from ..graph.node import Constant, Node
from .blr import blr_step, reset_to_prior
from .elbo import elbo
from .methods import get_method
from .result import FitResult


def check_method(model, cfg):
    """Refuse a method the model does not fit, naming the node and the way forward."""
    if not cfg.stochastic:
        for n in model.observed:
            if getattr(n, "source", None) is not None:
                raise ValueError(f"fit({cfg.name!r}): {n.label()} observes streamed data (a memory-"
                                 f"mapped array or Stream); fit it with fit('svi'), which reads it "
                                 f"batch by batch, or load the data into memory")
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
    """The point-mass (MAP, delta-method) nodes: ``point=`` (nodes or names), or for
    a method whose default is "global" (EM) every latent node that neither carries
    the data axis (see :func:`data_local`) nor is a mixture assignment."""
    if point is None:
        if cfg.default_point == "global":
            local = data_local(model)
            return [n for n in model.latent if n not in local and not _is_assignment(model, n)]
        return []
    if isinstance(point, (str, Node)):
        point = [point]
    out = []
    for p in point:
        n = model[p] if isinstance(p, str) else p
        if n not in model.latent:
            raise ValueError(f"point=: {p!r} is not a latent node of this model")
        try:
            n.family.mode(n.prior_natural())
        except NotImplementedError:
            raise ValueError(f"point=: {n.label()} has no mode ({n.family.name}); it cannot be a "
                             f"point mass") from None
        if n not in out:
            out.append(n)
    return out


def data_local(model):
    """Latent nodes that carry the data axis: the first plate axis of an observed node,
    followed up through the parents (numpy broadcasting aligns plates on the right; a
    mixture's component parameters drop their last, component, axis; a gather
    ``source[idx]`` whose index axes hold the data axis makes the source's first axis
    local, as theta[doc_ids] in LDA). EM keeps these as distributions (E-step); the
    rest are parameters (M-step)."""
    seen = set()
    stack = [(o, 0) for o in model.observed if o.plates and o.plates[0] != 1]
    local = set()
    while stack:
        c, i = stack.pop()
        if (c, i) in seen:
            continue
        seen.add((c, i))
        if c.stochastic and not c.observed:
            local.add(c)
        size = c.plates[i]
        if isinstance(c, Gather):
            j = 0 if i < c.idx.ndim else i - c.idx.ndim + 1
            stack.append((c.source, j))
            continue
        mixture = c.stochastic and isinstance(c.factor, MixtureFactor)
        for k, p in enumerate(c.parents):
            if isinstance(p, Constant):
                continue
            plates = p.plates[:-1] if (mixture and k > 0) else p.plates
            j = i - (len(c.plates) - len(plates))
            if j >= 0 and plates[j] == size:
                stack.append((p, j))
    return local


def _is_assignment(model, n):
    return any(isinstance(c.factor, MixtureFactor) and c.factor.parents[0] is n
               for c in model.children[n] if c.stochastic)


INITS = ("random", "kmeans++", "diffuse")

#: Dirichlet concentration of the responsibilities drawn by init="diffuse"
DIFFUSE = 10.0


def initialize(model, rng, init="random", strict=True):
    """q at the prior, in topological order; mixture assignments at random
    responsibilities, Dirichlet(1) draws (breaks the symmetry between components;
    ``seed`` fixes it), or with ``init="kmeans++"`` one-hot responsibilities to the
    nearest of K data points seeded as in k-means++ (Arthur & Vassilvitskii 2007).
    With ``strict=False`` (a method's default, not the user's choice) an assignment
    that k-means++ cannot seed falls back to random responsibilities."""
    if init is None:
        init = "random"
    if init not in INITS:
        raise ValueError(f"init={init!r}: choose one of {list(INITS)}")
    for n in model.latent:
        n.set_natural(n.prior_natural())
    for n in model.nodes:
        n.start(rng)  # declared hook (Node.start), e.g. Dot of two latent vectors
    for n in model.latent:
        if _is_assignment(model, n):
            try:
                start_assignment(model, n, rng, init)
            except ValueError:  # k-means++ has no data to seed this assignment from
                if strict:
                    raise
                start_assignment(model, n, rng, "random")
        n.fitted = False


def start_assignment(model, z, rng, init):
    """Set a mixture assignment node to initial responsibilities (``init``)."""
    K = z.nat[0].shape[-1]
    if init == "kmeans++":
        r = _kmeanspp_responsibilities(model, z, K, rng)
    elif init == "diffuse":
        r = rng.dirichlet(np.full(K, DIFFUSE), size=z.plates)
    else:
        r = rng.dirichlet(np.ones(K), size=z.plates)
    z.set_natural((np.log(np.maximum(r, 1e-300)),))


def _assignment_features(z, y):
    """Rows (one per entry of z) of y's first sufficient statistic, with a 0/1 cell mask.

    y's plates broadcast z's: axes where z has size 1 and y does not (columns sharing
    one z, repeated draws) become feature columns, as does the value's event."""
    Pz, Py = z.plates, y.plates
    Pz = (1,) * (len(Py) - len(Pz)) + tuple(Pz)
    if len(Pz) != len(Py) or any(a not in (1, b) for a, b in zip(Pz, Py)):
        return None, None
    if y.value is not None and type(y.family).__name__ != "Categorical":
        t1 = np.asarray(y.value, dtype=float)  # x itself: never build x x^T for vectors
    else:
        t1 = np.asarray(y.moments()[0], dtype=float)
    ev = t1.ndim - len(Py)
    mask = np.ones(Py) if y.mask is None else np.broadcast_to(y.mask, Py).astype(float)
    if y.replicates is not None:
        mask = mask * np.broadcast_to(y.replicates, Py)
    entry = [j for j in range(len(Py)) if Pz[j] == Py[j]]
    feat = [j for j in range(len(Py)) if Pz[j] != Py[j]]
    n = int(np.prod([Py[j] for j in entry])) if entry else 1
    X = np.transpose(t1, entry + feat + list(range(len(Py), t1.ndim))).reshape(n, -1)
    M = np.transpose(mask, entry + feat).reshape(n, -1)
    M = np.repeat(M, X.shape[1] // M.shape[1], axis=1) if ev else M
    return X, M


def _kmeanspp_responsibilities(model, z, K, rng):
    """One-hot responsibilities: each data point goes to the nearest of K seeds drawn
    by k-means++ (first uniformly, then with probability proportional to the squared
    distance to the nearest seed so far; counts weight the draws). The features are the
    first sufficient statistic of the observed mixture children (x itself for Normal,
    MultivariateNormal, Poisson, Bernoulli, Multinomial; one-hot for Categorical),
    standardised per column; several children sharing z (table columns) are
    concatenated and missing cells take their column's mean."""
    data = [c for c in model.children[z] if c.stochastic and c.observed
            and isinstance(c.factor, MixtureFactor) and c.factor.parents[0] is z]
    if not data:
        raise ValueError(f"init='kmeans++': mixture assignment {z.label()} has no observed "
                         f"Mixture child to seed from; use init='random'")
    cols, masks = [], []
    for y in data:
        X, M = _assignment_features(z, y)
        if X is None:
            raise ValueError(f"init='kmeans++': {y.label()} has plates {y.plates}, which do not "
                             f"extend the assignments' plates {z.plates}; use init='random'")
        cnt = M.sum(0)
        mean = (X * M).sum(0) / np.maximum(cnt, 1)
        X = np.where(M > 0, X, mean)
        sd = np.sqrt(((X - mean) ** 2 * M).sum(0) / np.maximum(cnt, 1))
        cols.append((X - mean) / np.where(sd > 0, sd, 1.0))
        masks.append(M)
    X = np.concatenate(cols, axis=1)
    n = X.shape[0]
    w = (np.concatenate(masks, axis=1).max(axis=1) > 0).astype(float)
    if np.count_nonzero(w) < K:
        raise ValueError(f"init='kmeans++': {data[0].label()} has fewer than K={K} observed entries")
    centres = np.empty((K, X.shape[1]))
    centres[0] = X[rng.choice(n, p=w / w.sum())]
    d2 = np.sum((X - centres[0]) ** 2, axis=1)
    for k in range(1, K):
        p = w * d2
        if p.sum() <= 0:  # fewer distinct points than components: draw among the observed
            p = w
        centres[k] = X[rng.choice(n, p=p / p.sum())]
        d2 = np.minimum(d2, np.sum((X - centres[k]) ** 2, axis=1))
    dist = (np.sum(X ** 2, 1)[:, None] - 2.0 * X @ centres.T + np.sum(centres ** 2, 1)[None, :])
    r = np.zeros((n, K))
    r[np.arange(n), np.argmin(dist, axis=1)] = 1.0
    r[w == 0] = 1.0 / K  # unobserved entries carry no information
    return r.reshape(z.plates + (K,))


def first_sweep_order(model, schedule):
    """The first sweep updates the mixture assignments after every other node, so the
    first M-step (or VMP update of the parameters) sees the symmetry-breaking
    initial responsibilities instead of assignments recomputed from the prior."""
    assign = [n for n in schedule if _is_assignment(model, n)]
    return [n for n in schedule if n not in assign] + assign


def node_rho(model, node, cfg, rho):
    """rho for one node: the method's (or user's) step for nodes with a
    non-conjugate message, 1 for conjugate blocks."""
    if not cfg.nonconjugate:
        return 1.0 if rho is None else float(rho)
    if not _nonconjugate_child(model, node):
        return 1.0
    return cfg.rho if rho is None else float(rho)


def _nonconjugate_child(model, node):
    """Does ``node`` receive a non-conjugate message (NCVMP's damped nodes)?"""
    return any(not c.factor.conjugate for c in _stochastic_children(model, node))


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
        progress=False, point=None, rho=None, init=None, local_iters=None, local_tol=None,
        local_restart=None, **options):
    """Fit ``model`` by ``method`` ("conjugate", "vmp", "ncvmp", "em", "svi").

    Parameters
    ----------
    max_iter : int, sweeps over the schedule (default 1000; 1 for "conjugate").
    tol : float, relative ELBO change that ends the run.
    seed : int or None, random initialisation of mixture assignments.
    callback : callable(iteration, elbo) -> bool, return True to stop.
    progress : bool, show a tqdm progress bar (if tqdm is installed).
    point : list of nodes or names that are point masses (MAP, delta method); for
        "em" the default is every latent node without the data axis (the parameters).
    rho : float, step size (damping) for nodes with non-conjugate messages.
    init : "random" (Dirichlet(1) responsibilities), "diffuse" (Dirichlet(10): close
        to uniform, so the components start nearly equal and the data pull them apart;
        the LDA zoo's default, measured in docs/benchmarks.md) or "kmeans++" (one-hot
        responsibilities to k-means++ seeds): how mixture assignments start. The
        default (None) is the method's: "kmeans++" for "em" (falling back to random
        for an assignment it cannot seed; measured in docs/em.md), "random" for the
        others ("svi" uses "kmeans++" on its first minibatch).

    Until its first update a point-mass node publishes its prior expectations (q is
    the prior, as in VMP), not T(prior mode): a prior mode on the boundary (a Wishart
    with dof D + 1 has mode 0) would otherwise feed a degenerate value to the first
    sweep. The first sweep updates the mixture assignments last (see
    :func:`first_sweep_order`). The objective is the ELBO, or with point masses the
    lower bound on log p(data, points) (docs/em.md); the callback may read
    ``node.posterior`` of the current iterate.
    """
    cfg = get_method(method)
    if cfg.stochastic:
        from .svi import fit_svi
        local = {k: v for k, v in (("local_iters", local_iters), ("local_tol", local_tol))
                 if v is not None}
        if local_restart is not None:
            raise TypeError("fit('svi') always starts a minibatch's local nodes from their "
                            "priors; local_restart= is an option of the full-batch methods")
        return fit_svi(model, cfg, max_iter=max_iter, tol=tol, seed=seed, callback=callback,
                       progress=progress, point=point, rho=rho, init=init, **local, **options)
    if options:
        raise TypeError(f"fit({cfg.name!r}) got unexpected options {sorted(options)}")
    check_method(model, cfg)
    local_block = _local_block(model, cfg, local_iters, local_tol, local_restart)
    points = set(resolve_points(model, cfg, point))
    for n in model.latent:
        n.point = False  # point masses publish their prior expectations until first updated
    if max_iter is None:
        max_iter = 1 if cfg.one_pass else 1000
    if max_iter < 1:
        raise ValueError("max_iter must be >= 1")
    rng = np.random.default_rng(seed)
    initialize(model, rng, cfg.init if init is None else init, strict=init is not None)
    rhos = {n: node_rho(model, n, cfg, rho) for n in model.schedule}
    # nodes with non-conjugate messages: their damped steps are backtracked (see _Damping)
    damping = _Damping(model, [n for n in model.schedule if cfg.nonconjugate and
                               _nonconjugate_child(model, n)],
                       rhos, monotone=not any(getattr(n.factor, "elbo_is_estimate", False)
                                              for n in model.stochastic))
    local_sweeps = []
    trace = []
    converged = False
    bar = _progress(progress, max_iter, cfg.name)
    it = 0
    try:
        def update(n, it):
            blr_step(model, n, rhos[n], iteration=it)
            if it == 1 and n in points:  # a point from its first update on; until then
                n.point = True           # it published its prior expectations
            if n.point:
                check_point(n, it)

        for it in range(1, max_iter + 1):
            prev = trace[-1] if trace else None
            if local_block is not None:
                # the local fit (restarted from the priors, it may lower the ELBO by itself)
                # is not a damped step: backtracking judges the global updates after it
                local_sweeps.append(local_block.fit_locals(it, update))
                prev = elbo(model) if damping.active else None
            while True:
                damping.save()
                try:
                    if local_block is None:
                        for n in (first_sweep_order(model, model.schedule) if it == 1
                                  else model.schedule):
                            update(n, it)
                    else:
                        local_block.update_globals(it, update)
                    L = elbo(model)
                except FloatingPointError as err:
                    if not damping.active:
                        raise
                    damping.reject(it, err)
                    continue
                if damping.accept(L, prev, it):
                    break
            for n in model.latent:
                n.fitted = True  # the callback may read node.posterior of this iterate
            trace.append(L)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(elbo=f"{L:.6g}")
            if callback is not None and callback(it, L):
                break
            if cfg.one_pass:
                converged = True
                break
            if len(trace) > 1 and abs(trace[-1] - trace[-2]) <= tol * abs(trace[-1]) and \
                    damping.settled():
                converged = True
                break
    finally:
        if bar is not None:
            bar.close()
    for n in model.latent:
        n.point = n in points
        n.fitted = True
    objective = "em_bound" if points else "elbo"
    res = FitResult(elbo=trace[-1], elbo_trace=np.asarray(trace), n_iter=it, converged=converged,
                    method=cfg.name, model=model, objective=objective,
                    local_sweeps=None if local_block is None else local_sweeps)
    model.fit_result = res
    return res


class _Damping:
    """Backtracking of the damped steps of non-conjugate VMP.

    NCVMP is not a coordinate ascent: a step on a node with a non-conjugate message can
    overshoot and lower the ELBO (Newton far from the optimum, e.g. a logistic regression
    on raw covariates of scale 1e5). A sweep whose ELBO falls below the previous one (by
    more than rounding, 1e-9 relative), or that produces non-finite numbers, is undone
    and redone with those nodes' rho halved; after an accepted sweep rho doubles back
    towards its initial value. So the NCVMP trace never decreases. Conjugate nodes and
    the other methods are not affected.

    With a Monte Carlo factor (a Potential: ``elbo_is_estimate``) the damped iteration's
    fixed point is not the maximiser of the estimated ELBO, which then drifts down by
    ~1e-9 per sweep near it; there only non-finite numbers trigger the backtracking.
    With ``fit(local_iters=...)`` the local fit (restarted from the priors, it may lower
    the ELBO by itself) comes first and is kept; the check compares the ELBO after it
    with the ELBO after the global updates. The run counts as converged only while
    every damped node is back at its initial rho."""

    MIN_FACTOR = 2.0 ** -30

    def __init__(self, model, nodes, rhos, monotone=True):
        self.model, self.nodes, self.rhos = model, list(nodes), rhos
        self.monotone = monotone
        self.rho0 = {n: rhos[n] for n in self.nodes}
        self.active = bool(self.nodes)
        self.state = None

    def save(self):
        if self.active:
            self.state = [(n, n.nat, n.point) for n in self.model.latent]

    def _restore_and_halve(self):
        for n, nat, point in self.state:
            n.set_natural(nat)
            n.point = point
        for n in self.nodes:
            self.rhos[n] *= 0.5
        return all(self.rhos[n] >= self.MIN_FACTOR * self.rho0[n] for n in self.nodes)

    def reject(self, it, err):
        if not self._restore_and_halve():
            raise FloatingPointError(
                f"non-conjugate VMP cannot make progress at iteration {it}: even with rho "
                f"halved 30 times the update of {', '.join(n.label() for n in self.nodes)} "
                f"fails ({err})") from err

    def settled(self):
        """Every damped node back at its initial rho: only then may a small ELBO change
        mean convergence (with rho halved, small changes say nothing)."""
        return all(self.rhos[n] >= self.rho0[n] for n in self.nodes)

    def accept(self, L, prev, it):
        """True to keep the sweep; False after undoing it (rho halved)."""
        if not self.active:
            return True
        if self.monotone and prev is not None and L < prev - 1e-9 * abs(prev):
            if not self._restore_and_halve():
                raise FloatingPointError(
                    f"non-conjugate VMP cannot raise the ELBO at iteration {it} even with rho "
                    f"halved 30 times for {', '.join(n.label() for n in self.nodes)}; "
                    f"standardise the covariates or use a stronger prior")
            return False
        for n in self.nodes:
            self.rhos[n] = min(self.rho0[n], 2.0 * self.rhos[n])
        return True


def local_order(model, local):
    """(order, watched, last) of a local block: mixture assignments first (after a
    restart they hold only their prior, no data), the other local nodes after them
    (their natural parameters are watched for convergence; all nodes if there are no
    others), and the assignments once more at the end, so that the global nodes see
    assignments fitted to the final local parameters."""
    assign = [n for n in local if _is_assignment(model, n)]
    others = [n for n in local if n not in assign]
    return assign + others, others or list(local), (assign if others else [])


def fit_locals(model, local, iters, tol, restart, update):
    """Fit the ``local`` nodes to the current global ones: from their priors if
    ``restart``, sweeps of ``update(node)`` (:func:`local_order`) until the mean
    absolute change of the watched natural parameters is below ``tol``, at most
    ``iters`` sweeps (one when no local node depends on another). Returns the number
    of sweeps."""
    order, watch, last = local_order(model, local)
    if not any(model.latent_neighbours(n) & set(local) for n in local):
        iters = 1
    if restart:
        for n in local:
            reset_to_prior(n)
    k = 0
    for k in range(1, iters + 1):
        before = [n.nat for n in watch]
        for n in order:
            update(n)
        if iters > 1:
            change = max(float(np.mean(np.abs(a - b))) for n, old in zip(watch, before)
                         for a, b in zip(n.nat, old))
            if change < tol:
                break
    for n in last:
        update(n)
    return k


class LocalBlock:
    """fit(local_iters=...): the local nodes fitted to the globals, then the globals."""

    def __init__(self, model, local, iters, tol, restart):
        self.model = model
        self.local = local
        self.globals = [n for n in model.schedule if n not in local]
        self.iters, self.tol, self.restart = iters, tol, restart

    def fit_locals(self, it, update):
        """The first half of an iteration: the local nodes fitted to the globals; returns
        the number of local sweeps it ran."""
        if it == 1:  # the globals' first update sees the initial responsibilities
            for g in self.globals:
                update(g, it)
        return fit_locals(self.model, self.local, self.iters, self.tol, self.restart,
                          lambda n: update(n, it))

    def update_globals(self, it, update):
        """The second half: one update of each global node."""
        for g in self.globals:
            update(g, it)


def _local_block(model, cfg, iters, tol, restart):
    """The local-iteration schedule of ``fit(local_iters=...)``, or None."""
    if iters is None:
        if tol is not None or restart is not None:
            raise TypeError(f"fit({cfg.name!r}): local_tol= and local_restart= go with "
                            f"local_iters= (local sweeps per sweep)")
        return None
    if cfg.one_pass:
        raise ValueError(f"fit({cfg.name!r}) is one exact update; local_iters= is an option of "
                         f"the iterative methods ('vmp', 'ncvmp', 'em')")
    if isinstance(iters, bool) or not isinstance(iters, (int, np.integer)) or iters < 1:
        raise ValueError(f"fit({cfg.name!r}): local_iters must be an integer >= 1, got {iters!r}")
    tol = 1e-3 if tol is None else float(tol)
    if not tol >= 0:
        raise ValueError(f"fit({cfg.name!r}): local_tol must be >= 0, got {tol!r}")
    restart = True if restart is None else bool(restart)
    dl = data_local(model)
    local = [n for n in model.schedule if n in dl]
    if not local:
        raise ValueError(f"fit({cfg.name!r}, local_iters=...): no latent node lies on the data "
                         f"axis (the first plate axis of the observed nodes), so there is no "
                         f"local block to iterate; drop local_iters")
    return LocalBlock(model, local, int(iters), tol, restart)


def check_point(node, it):
    """A point mass on the boundary of its support (a zero weight, rate or probability,
    a singular matrix) has log T = -inf; the next update would turn it into NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        moments = node.moments()
    for a in moments:
        if not np.all(np.isfinite(a)):
            raise FloatingPointError(
                f"the point mass {node.label()} reached the boundary of its support at iteration "
                f"{it} (its MAP sets a weight, rate or probability to 0, or a matrix singular; "
                f"log T = -inf): an empty or degenerate component. Give it a prior that keeps the "
                f"mode inside (Dirichlet/Beta concentrations > 1, Gamma shape > 1, Wishart "
                f"dof > D + 1), use fewer components, or another seed")


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
