"""``node.predictive(inputs)`` (docs/predict.md): each parent of the node's factor as the
factor sees it (:func:`parent_dist`), new inputs sorted, then ``factor.predictive(q, plates,
ctx)``; an assignment conditioned on its Mixture children's cells, partly observed vectors
on their observed coordinates. The distributions themselves are in ``blrgraph/predictive/``.
"""
from __future__ import annotations

import numpy as np

from ..predictive import (CategoricalPredictive, Context, FamilyPredictive, MixturePredictive,
                          MonteCarloPredictive, MultivariateT, ParentDist, PartlyObserved,
                          dot_parent)
from ..predictive.parents import aligned
from ..predictive.partial import _gaussian_mean_conditional, _monte_carlo_conditional
from ..predictive import student_t  # noqa: F401  (graph.predictive's names before the move)
from .deterministic import Add, Dot, Gather
from .factors.gaussian import DiagonalGammaFactor, MultivariateNormalFactor
from .inputs import check_count, check_seed
from .base import Constant, Node


# ---------------------------------------------------------------------------------------
# node.predictive(): the parents as the factor sees them, new inputs, assignments
def parent_dist(p, dots=None):
    """The ParentDist of node ``p`` under the fitted q (``dots``: {Dot node: new X})."""
    dots = dots or {}
    if isinstance(p, Constant):
        return ParentDist(p, "fixed", p.plates, family=p.provides, value=p.value)
    if p.deterministic:
        if isinstance(p, Dot) and p.X is not None:
            return dot_parent(dots.get(p, p.X), parent_dist(p.w, dots), node=None if p in dots else p)
        if isinstance(p, Gather):
            return parent_dist(p.source, dots).take(p.idx)
        if isinstance(p, (Dot, Add)):     # x . w of two latent vectors, or a + b
            return _combined_parent(p, dots)
        forward = p.forward
        if forward is None:
            raise TypeError(f"{p.label()}: a predictive through this deterministic node needs its "
                            f"forward(values) map; it has none")
        srcs = [parent_dist(a, dots) for a in p.parents]

        def draw(S, rng, cache):
            return forward(*[s.draw(S, rng, cache) for s in srcs])
        return ParentDist(p, "derived", p.plates, draw=draw)
    if p.observed:
        if p.value is None:
            raise ValueError(f"{p.label()} holds streamed data; a predictive needs its values in "
                             f"memory")
        return ParentDist(p, "fixed", p.plates, family=p.family, value=p.value, mask=p.mask)
    if p.point:
        return ParentDist(p, "fixed", p.plates, family=p.family, value=p.family.point_value(p.nat),
                          nat=tuple(np.asarray(a) for a in p.nat))
    if not p.fitted:
        why = p.unfitted_reason
        raise AttributeError(f"{p.label()} has no posterior{': ' + why if why else ' yet'}; fit the "
                             f"model (model.fit(...) or model.load(path)) before asking for "
                             f"predictions")
    return ParentDist(p, "q", p.plates, family=p.family, nat=tuple(np.asarray(a) for a in p.nat))


def _combined_parent(p, dots):
    """The ParentDist of ``Dot(x, w)`` of two latent vectors (sum over the last axis of
    their draws' product) or of ``Add(a, b)`` (the draws' sum): independent under q."""
    srcs = [parent_dist(a, dots) for a in p.parents]
    ev = 1 if isinstance(p, Dot) else 0

    def draw(S, rng, cache):
        a, b = (aligned(s.draw(S, rng, cache), p.plates, ev) for s in srcs)
        return np.sum(a * b, axis=-1) if ev else a + b
    return ParentDist(p, "derived", p.plates, draw=draw)


def _is_mixture(node):
    return node.factor is not None and node.factor.selector() is not None


def _assignment_children(node):
    return [c for c in node.children if _is_mixture(c) and c.factor.selector() is node]


def _resolve_inputs(node, inputs):
    """Sort ``inputs`` into new design rows of Dot parents, new values of the node itself
    (a mixture: new rows) and new values of mixture children (an assignment)."""
    dots, values, kids = {}, None, {}
    dot_parents = [p for p in node.factor.parents if isinstance(p, Dot)]
    children = _assignment_children(node)
    if not isinstance(inputs, dict):
        if _is_mixture(node):
            return dots, inputs, kids
        if len(dot_parents) == 1:
            return {dot_parents[0]: inputs}, None, kids
        if children:
            raise TypeError(f"{node.label()}.predictive(inputs=...): give a dict of new values of "
                            f"its mixture children {[c.name for c in children]}")
        raise TypeError(f"{node.label()}.predictive(inputs=...): the node has no Dot(X, w) parent "
                        f"and is not a Mixture, so there is no input to replace; give a dict "
                        f"{{node name: new values}}")
    named = {d.name: d for d in dot_parents}
    named.update({c.name: c for c in children})
    for key, v in inputs.items():
        name = key if isinstance(key, str) else (key.name if isinstance(key, Node) else key)
        if name == node.name:
            values = v
        elif name in named and named[name] in dot_parents:
            dots[named[name]] = v
        elif name in named:
            kids[named[name]] = v
        else:
            raise KeyError(f"{node.label()}.predictive(inputs=...): {name!r} is neither this node, "
                           f"a Dot parent ({[d.name for d in dot_parents]}) nor a mixture child "
                           f"({[c.name for c in children]})")
    return dots, values, kids


def _new_assignments(z, M, ctx):
    """The predictive of the assignment z of M new rows (from z's parents alone)."""
    qz = [parent_dist(p) for p in z.factor.parents]
    for pd in qz:
        if len(pd.plates) == len(z.plates) and z.plates and pd.plates[0] != 1:
            raise ValueError(f"{z.label()}: its prior varies along the data axis ({pd.plates}), "
                             f"so new rows have no prior assignment probabilities (LDA: fit the "
                             f"new documents' topic mixtures instead, see docs/predict.md)")
    plates = (M,) + tuple(z.plates[1:])
    pred = z.factor.predictive(qz, plates, ctx)
    with np.errstate(divide="ignore"):
        logp = np.log(np.asarray(pred.probs, dtype=float))
    return ParentDist(None, "q", plates, family=z.family, nat=(logp,))


def _check_rows(node, values, what):
    where = f"{node.label()}.predictive(inputs=...)"
    try:
        v = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: {what} must be numbers (NaN = missing), got "
                        f"{np.asarray(values).dtype} values") from None
    inf = np.isinf(v)
    if inf.any():
        raise ValueError(f"{where}: {what} hold an infinite value ({_first_bad(inf)}); give "
                         f"finite numbers (NaN marks a missing cell)")
    vnd = node.family.value_ndim
    tail = tuple(node.plates[1:])
    if v.ndim != len(node.plates) + vnd or tuple(v.shape[1:len(node.plates)]) != tail:
        ev = tuple(np.shape(node.value)[len(node.plates):]) if node.value is not None else ()
        raise ValueError(f"{node.label()}.predictive(inputs=...): {what} must have shape "
                         f"(M,) + {tail + ev} (M new rows; NaN = missing), got {v.shape}")
    return v


def node_predictive(node, inputs=None, samples=2000, seed=0):
    """See :meth:`Stochastic.predictive`."""
    factor = node.factor
    if factor is None or node.family is None:
        raise TypeError(f"{node.label()} has no predictive distribution")
    where = f"{node.label()}.predictive"
    ctx = Context(check_count(where, "samples", samples), check_seed(where, seed))
    dots, values, kids = ({}, None, {}) if inputs is None else _resolve_inputs(node, inputs)
    dots = {d: _check_design(node, d, X) for d, X in dots.items()}
    q = [parent_dist(p, dots) for p in factor.parents]
    plates = tuple(node.plates)
    if values is not None:
        if not _is_mixture(node):
            raise TypeError(f"{node.label()}.predictive(inputs=...): new values of the node itself "
                            f"are taken by mixtures only")
        v = _check_rows(node, values, "the new rows")
        M = v.shape[0]
        z = factor.parents[0]
        zq = _new_assignments(z, M, ctx)
        q[0] = zq
        plates = (M,) + tuple(node.plates[1:])
        ctx.values = v
    elif dots:
        plates = tuple(factor.predictive_plates(q))
    pred = factor.predictive(q, plates, ctx)
    if values is None and not dots:
        pred = condition_partial_rows(node, q, pred)
    children = _assignment_children(node)
    if kids or (children and node.observed):
        pred = _condition_assignment(node, pred, kids, ctx)
    pred.where = f"{node.label()}.predictive()"
    return pred


def _first_bad(bad):
    """(row, column) of the first True of a (M, ..., D) array, as a readable location."""
    idx = np.argwhere(bad)[0]
    return f"row {idx[0]}" + (f", column {idx[-1]}" if len(idx) > 1 else "")


def _check_design(node, dot, X):
    """New design rows of ``dot = Dot(X, w)``: numbers, D columns, every cell finite (a
    covariate cannot be missing, as in ``Dot(X, w)`` itself: NaN would give NaN means)."""
    where = f"{node.label()}.predictive(inputs=...)"
    try:
        v = np.asarray(X, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: the new rows of {dot.label()} must be numbers, got "
                        f"{np.asarray(X).dtype} values such as {str(np.ravel(X)[:1])[:40]}") \
            from None
    D = np.shape(dot.X)[-1]
    if v.ndim == 0 or v.shape[-1] != D:
        raise ValueError(f"{where}: the new rows of {dot.label()} must have the {D} columns of "
                         f"its X (shape (M, {D})), got shape {v.shape}")
    bad = ~np.isfinite(v)
    if bad.any():
        if np.isinf(v).any():
            bad, what, fix = np.isinf(v), "an infinite value", "give finite numbers"
        else:
            what, fix = "NaN", "a covariate cannot be missing: impute it or leave the row out"
        raise ValueError(f"{where}: the new rows of {dot.label()} hold {what} ({_first_bad(bad)}); "
                         f"{fix}")
    return v


def _condition_assignment(z, pred, kids, ctx):
    """An assignment (a Categorical that picks the components of Mixture children) given
    its children's observed cells: p(z = k | cells) proportional to p(z = k) prod_cells
    p_k(cell) with the components' predictives (exact under q of the parameters).
    ``kids``: {child: new values} for new rows; otherwise the children's own data."""
    probs = np.asarray(pred.probs, dtype=float)
    if kids:
        Ms = {np.shape(v)[0] for v in kids.values()}
        if len(Ms) != 1:
            raise ValueError(f"{z.label()}.predictive(inputs=...): the children's new rows differ in "
                             f"number ({sorted(Ms)})")
        M = Ms.pop()
        zplates = (M,) + tuple(z.plates[1:])
        zq = _new_assignments(z, M, ctx)
        logw = np.broadcast_to(zq.nat[0], zplates + zq.nat[0].shape[-1:])
        items = [(c, _check_rows(c, v, f"inputs[{c.name!r}]")) for c, v in kids.items()]
    else:
        zplates = tuple(z.plates)
        with np.errstate(divide="ignore"):
            logw = np.log(np.broadcast_to(probs, zplates + probs.shape[-1:]))
        items = []
        for c in _assignment_children(z):
            if not c.observed or c.value is None:
                continue
            v = np.asarray(c.value, dtype=float)
            if c.mask is not None:
                m = np.broadcast_to(np.asarray(c.mask, bool), c.plates)
                v = np.where(m.reshape(m.shape + (1,) * c.family.value_ndim), v, np.nan)
            items.append((c, v))
    ll = 0.0
    for c, v in items:
        qc = [parent_dist(p) for p in c.factor.parents]
        comp = c.factor.component_predictive(qc, ctx)
        part, _ = c.factor.assignment_loglik(comp, v, zplates)
        ll = ll + part
    lw = logw + ll
    lw = lw - lw.max(axis=-1, keepdims=True)
    r = np.exp(lw)
    r /= r.sum(axis=-1, keepdims=True)
    return CategoricalPredictive(r, zplates)


def log_predictive(node, values, mask=None, inputs=None, samples=2000, seed=0):
    """sum over entries of log p(values | data) under the fitted q: held-out scoring
    (``node.predictive(inputs).log_predictive(values, mask)``)."""
    return node.predictive(inputs=inputs, samples=samples, seed=seed).log_predictive(values, mask)



def _partial_rows(node):
    """(rows, x): ``rows`` a bool over the node's plates marking the observed entries with
    some but not all coordinates observed, ``x`` (n, D) their values, NaN where missing;
    None when there is no such entry."""
    fam = node.family
    if fam is None or fam.value_ndim != 1 or not node.observed:
        return None
    cells = node.cells()
    if cells is None:
        return None
    plates = tuple(node.plates)
    v = np.asarray(node.value, dtype=float)
    D = v.shape[-1]
    v = np.broadcast_to(v, plates + (D,))
    cells = np.broadcast_to(cells, plates + (D,))
    rows = cells.any(-1) & ~cells.all(-1)
    if node.mask is not None:
        rows = rows & np.broadcast_to(np.asarray(node.mask, bool), plates)
    if not rows.any():
        return None
    return rows, np.where(cells[rows], v[rows], np.nan)


def condition_partial_rows(node, q, pred):
    """``pred`` with each partly observed entry of ``node`` replaced by the predictive of its
    missing coordinates given its observed ones, E_q[p(x_m | x_o, parents)]
    (docs/predict.md, docs/math.md §6.1): the row's own cells are already in the fitted
    q, so they are not counted a second time. A mixture entry keeps its fitted q(z_n)
    (the responsibilities given its observed coordinates) and mixes its components'
    conditionals (Monte Carlo: over the draws of ``pred``)."""
    part = _partial_rows(node)
    if part is None:
        return pred
    rows, x = part
    factor = node.factor
    sub = pred[rows]
    if _is_mixture(node):
        K = sub.weights.shape[-1]
        comps = _conditional(factor.component, q[1:], sub.components, x[:, None, :], rows,
                             tuple(node.plates) + (K,), node)
        cond = MixturePredictive(sub.weights, comps, sub.plates)
    else:
        cond = _conditional(factor, q, sub, x, rows, tuple(node.plates), node)
    return PartlyObserved(pred, cond, rows, x)


def _conditional(factor, q, sub, x, rows, full, node):
    """The conditional predictive of the missing coordinates of ``x`` (NaN) given the
    others under the predictive ``sub`` of the same entries (plates (n,) or (n, K))."""
    if isinstance(sub, FamilyPredictive):          # every parent fixed: a Gaussian
        sub = MultivariateT(np.inf, sub.centred_mean, sub.cov, sub.plates, shift=sub.shift)
    if isinstance(sub, MultivariateT):
        mean = q[0]
        if (np.all(np.isinf(sub.df)) and mean.kind == "q"
                and isinstance(factor, (MultivariateNormalFactor, DiagonalGammaFactor))):
            D = sub.cloc.shape[-1]
            if isinstance(factor, MultivariateNormalFactor):
                noise = np.linalg.inv(np.asarray(q[1].value, dtype=float))
            else:
                t = np.asarray(q[1].value, dtype=float)
                t = np.broadcast_to(t, t.shape[:-1] + (D,)) if t.ndim else np.full(D, float(t))
                noise = np.eye(D) / t[..., None, :]
            S = np.broadcast_to(mean.cov, full + (D, D))[rows]
            noise = np.broadcast_to(noise, full + (D, D))[rows]
            return _gaussian_mean_conditional(sub, S, noise, x)
        # a fixed mean, NormalWishart, a fixed mean + Wishart: the t-conditional is
        # E_q[p(x_m | x_o, parents)] itself (docs/math.md §6.1)
        return sub.condition(x)[1]
    if isinstance(sub, MonteCarloPredictive):
        return _monte_carlo_conditional(sub, x)
    raise NotImplementedError(f"{node.label()}: no conditional predictive of partly observed "
                              f"vectors for a {type(sub).__name__}")


