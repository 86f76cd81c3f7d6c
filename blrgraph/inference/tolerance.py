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
#: a Normal / MultivariateNormal q whose rounding alone can move it by more than this KL
#: (nats: its mean by 0.14 posterior sds) is never settled by rounding (:func:`q_steps`)
ROUNDING_CAP = 1e-2


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


# ---- has q stopped moving? (the second half of the convergence test) -----------------
def q_snapshot(nodes):
    """{node: its natural parameters} of the latent nodes with a q (not point masses).
    Natural parameters are replaced, never modified in place, so references suffice."""
    return {n: n.nat for n in nodes
            if n.stochastic and not n.observed and not n.point and n.nat is not None}


def q_steps(prev, now):
    """{node: (kl, rounding)} for the nodes whose q changed between two snapshots: the
    largest KL(q_now || q_prev) over a node's entries (nats; unit-free, so a Gaussian
    mean that moved delta posterior sds counts delta^2 / 2 whatever the data's scale or
    offset) and its rounding: the family's ``kl_rounding`` where its KL is a closed form
    (Normal, MultivariateNormal), else ``ULPS`` eps x the magnitude of the Bregman form's
    pieces A(lam_prev), A(lam_now), <lam, mu>. A family without a KL is left out."""
    out = {}
    for n, nat in (now or {}).items():
        old = (prev or {}).get(n)
        if old is None or old is nat:
            continue
        fam = n.family
        try:
            with np.errstate(all="ignore"):
                kl = np.asarray(fam.kl(nat, old), dtype=float)
                own = getattr(fam, "kl_rounding", None)
                if own is not None:     # a KL in closed form: the rounding of its own terms
                    rnd = own(nat, old, ULPS * EPS)
                    # where rounding alone can move q by more than ROUNDING_CAP nats (a q
                    # sharper than doubles resolve, as after a first NCVMP step from a
                    # vague prior: precision 1e200) no step is put down to rounding
                    rnd = np.where(rnd <= ROUNDING_CAP, rnd, 0.0)
                else:
                    mu = fam.mean_params(nat)
                    rnd = ULPS * EPS * (np.abs(fam.log_partition(nat))
                                        + np.abs(fam.log_partition(old))
                                        + _abs_inner(nat, mu, fam.event_ndims)
                                        + _abs_inner(old, mu, fam.event_ndims))
        except (NotImplementedError, AttributeError, TypeError, ValueError,
                np.linalg.LinAlgError):
            continue   # the ELBO's change alone decides for this node
        if not np.all(np.isfinite(kl)):
            out[n] = (np.inf, 0.0)
            continue
        rnd = np.broadcast_to(rnd, np.shape(kl))
        if np.any(kl < -rnd):    # a KL below 0 beyond its rounding was not computed: a q
            out[n] = (np.inf, 0.0)   # beyond double resolution (precision 1e300) moved
            continue
        k = int(np.argmax(kl - rnd)) if np.ndim(kl) else 0
        out[n] = (float(np.ravel(kl)[k]), float(np.ravel(rnd)[k]))
    return out


def q_unsettled(steps, last, tol):
    """The nodes whose q is still on its way (``steps``: this sweep's :func:`q_steps`,
    ``last``: the previous sweep's). A sweep's KL alone says little when the iterates
    crawl (mean-field coordinate ascent on correlated nodes moves each one by a fraction
    1 - r of its distance per sweep), so the distance left is extrapolated from the rate
    r = sqrt(kl_t / kl_{t-1}) of the last two steps (a geometric series):
    KL left ~ kl_t (r / (1 - r))^2. Settled: this step within rounding, or both this step
    and what is left below ``q_tolerance(tol)`` (an increasing step counts as is; a
    first step, without a rate, does not settle)."""
    bound = q_tolerance(tol)
    out = []
    for n, (kl, rnd) in steps.items():
        if kl <= rnd and np.isfinite(rnd):   # (an overflowing bound settles nothing)
            continue
        prev = (last or {}).get(n)
        if prev is None:    # one step: no rate to judge the distance left by
            out.append(n)
            continue
        left = kl
        if prev[0] > kl:
            r = np.sqrt(kl / prev[0])
            left = kl * (r / (1.0 - r)) ** 2
        if max(kl, left) > bound:
            out.append(n)
    return out


def q_tolerance(tol):
    """The KL per entry below which a node's q counts as settled (its last step and the
    distance left, :func:`q_unsettled`): sqrt(tol) (tol = 1e-8: a Gaussian mean within
    0.014 posterior sds of where its iterates are heading), at least 1e-13."""
    return max(float(np.sqrt(tol)), 1e-13) if tol > 0 else 0.0
