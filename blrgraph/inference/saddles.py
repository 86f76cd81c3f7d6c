"""Symmetric saddle points of mixtures: two components that carry data and are the
same distribution. Coordinate ascent cannot leave such a point by itself (the
gradient separating the two is zero), so a fit that stops there has not found an
optimum. The scheduler splits the responsibilities of the tied components at random
and goes on (docs/scheduler.md, "Saddle points")."""
from __future__ import annotations

import numpy as np

#: relative difference under which two components' natural parameters are "the same"
TIE_TOL = 1e-6
#: a component carrying less than this many (weighted) entries is empty, not tied
MIN_COUNT = 1.0


def _component_params(model, z):
    """(node, axis) of the latent parameter nodes of the mixtures that ``z`` selects, the
    axis holding the K components: the last plate axis the component factor does not
    line up with its own event axes (a Gamma precision per coordinate of a vector
    component has plates (K, D): K is at -2). Nodes shared by all components are left out."""
    K = np.shape(z.nat[0])[-1]       # (not z's moments: on Dask z's rows are elsewhere)
    out, seen = [], set()
    for c in model.children[z]:
        if not (c.stochastic and c.factor.selector() is z):
            continue
        comp = c.factor.component
        for j, p in enumerate(c.factor.parents[1:]):
            if p in seen or p not in model.graph or not p.stochastic or p.observed:
                continue
            extra = comp.draw_ndim(j, 0) if comp is not None else 0
            axis = len(p.plates) - 1 - extra
            if axis >= 0 and p.plates[axis] == K:
                out.append((p, axis))
                seen.add(p)
    return out


def _flat_by_component(node, ax):
    rows = []
    for a, k in zip(node.nat, node.family.event_ndims):
        a = np.broadcast_to(a, tuple(node.plates) + np.shape(a)[np.ndim(a) - k:])
        rows.append(np.moveaxis(a, ax, 0).reshape(node.plates[ax], -1))
    return np.concatenate(rows, axis=1)


def component_counts(z):
    """The (weighted) number of entries each component of ``z`` carries."""
    r = np.asarray(z.moments()[0])
    if z.replicates is not None:
        r = r * np.broadcast_to(z.replicates, z.plates)[..., None]
    return r.reshape(-1, r.shape[-1]).sum(0)


def tied_components(model, z, counts=None):
    """Groups (lists of component indices, each of length >= 2) of components of the
    mixtures selected by ``z`` that carry data and have equal parameters (``counts``:
    a function returning :func:`component_counts`, e.g. a view's report when z's rows
    are elsewhere; called only when z selects component parameters)."""
    params = _component_params(model, z)
    if not params:
        return []
    counts = component_counts(z) if counts is None else counts()
    F = np.concatenate([_flat_by_component(p, ax) for p, ax in params], axis=1)
    K = F.shape[0]
    scale = np.max(np.abs(F), axis=0) + 1e-300
    groups, seen = [], set()
    for j in range(K):
        if j in seen or counts[j] < MIN_COUNT:
            continue
        same = [k for k in range(j + 1, K) if k not in seen and counts[k] >= MIN_COUNT
                and np.max(np.abs(F[j] - F[k]) / scale) < TIE_TOL]
        if same:
            groups.append([j] + same)
            seen.update(same)
    return groups


def split_tied(z, groups, rng):
    """Share each entry's responsibility for a tied group among its members at random
    (Dirichlet(1) weights): the next global step sees distinct components."""
    r = np.array(z.moments()[0], dtype=float)
    for g in groups:
        s = r[..., g].sum(-1, keepdims=True)
        r[..., g] = s * rng.dirichlet(np.ones(len(g)), size=r.shape[:-1])
    z.set_natural((np.log(np.maximum(r, 1e-300)),))
