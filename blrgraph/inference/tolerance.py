"""How far apart two evaluations of the ELBO may be by rounding alone.

The ELBO is a sum of per-entry terms such as y E[a] - E[exp a] - log y! (a Poisson count
on a log link), each the difference of numbers far larger than the result: with counts
of 5e8 the pieces are ~1e10 per entry while the ELBO is ~-600 in all. Rounding then moves
the ELBO by about eps x (the sum of the pieces' magnitudes), far more than a relative
1e-9 of the ELBO itself. A test "did the ELBO go down?" must allow for that
(``steps.Backtracking.accept``, NCVMP's backtracking; docs/ncvmp.md).
"""
from __future__ import annotations

import numpy as np

from ..graph.node import _weighted_sum

#: a relative change of the ELBO below this is never taken for a decrease
RELATIVE = 1e-9
#: rounding units allowed per unit of the terms' magnitude (several operations per term,
#: then a pairwise sum over the entries)
ULPS = 4.0
EPS = float(np.finfo(float).eps)


def elbo_rounding(model, prev, new=None):
    """The tolerance for ``new < prev - tolerance`` to mean a real decrease of the ELBO:
    ``RELATIVE * |prev|``, raised to ``ULPS * eps * elbo_magnitude(model)`` when that is
    larger. The magnitude costs one pass over the factors, so it is computed only when
    ``new`` (if given) is below ``prev`` by more than the relative part."""
    if not np.isfinite(prev):
        return 0.0
    rel = RELATIVE * abs(prev)
    if new is not None and not new < prev - rel:
        return rel
    mag = elbo_magnitude(model)
    return max(rel, ULPS * EPS * mag) if np.isfinite(mag) else rel


def elbo_magnitude(model):
    """sum over the ELBO's terms of their absolute values, entry by entry and piece by
    piece (<E eta, E T(x)>, E[A], log h(x); A(lam), <lam, mu> for an entropy) with the
    ELBO's weights: the scale of its rounding error. A node whose pieces cannot be read
    so counts with |its ELBO term|."""
    total = 0.0
    for node in model.stochastic:
        try:
            m = _node_magnitude(node)
        except (NotImplementedError, AttributeError, TypeError, ValueError):
            m = float("nan")
        if not np.isfinite(m):
            m = abs(node.elbo_term())
        total += m
    return total


def _abs_inner(a, b, event_ndims):
    out = 0.0
    for x, y, k in zip(a, b, event_ndims):
        p = np.abs(np.multiply(x, y))
        if k:
            p = p.sum(axis=tuple(range(-k, 0)))
        out = out + p
    return out


def _node_magnitude(node):
    f = node.factor
    fam = node.family
    u = [p.moments() for p in f.parents]
    x, H = f.complete(node.child_data(), u)
    w = node.mask if node.observed else node.observed_entries()
    if node.replicates is not None:
        w = node.replicates if w is None else w * node.replicates
    per = _abs_inner(f.prior_natural(u), x.moments, fam.event_ndims) \
        + np.abs(f.expected_log_partition(u)) + np.abs(f.log_base_measure(x))
    if H is not None:
        per = per + np.abs(H)
    if not node.observed and not node.point and node.nat is not None:
        per = per + np.abs(fam.log_partition(node.nat)) \
            + _abs_inner(node.nat, node.moments(), fam.event_ndims)
    return _weighted_sum(per, w, x.plates)
