"""The ELBO, assembled per node (docs/math.md §3.1):
sum over factors of E_q[log f] plus the entropies of the non-point latent nodes.
With point masses (EM) it is the lower bound on log p(data, points) of docs/math.md §5."""
from __future__ import annotations

import math

import numpy as np


def elbo(model):
    for node in model.observed:
        if node.value is None and node.source is not None:
            raise ValueError(f"the ELBO over {node.label()} needs its data in memory, but it is "
                             f"streamed; fit('svi') reports a minibatch estimate "
                             f"(fit_result.elbo_trace), or observe an in-memory array")
    from .mixture_q import model_elbo
    total, covered = model_elbo(model)   # nodes with a mixture q (fit("mog")) and their factors
    for node in model.stochastic:
        if node not in covered:
            total += _term(node)
    return total


def view_elbo(model, view):
    """The ELBO the loop reports for a view of the data (the one place it is assembled):
    ``view.scale`` times the view's rows' terms (:meth:`~.views.DataView.row_terms`; an
    SVI minibatch stands for all N rows) plus the terms of every other stochastic node,
    read in memory. For a view of every row in memory (no ``on_rows``) it is
    :func:`elbo`."""
    if not view.on_rows:
        return elbo(model)
    rows = view.row_terms()
    total = view.scale * rows
    if not math.isfinite(total):
        bad = [n.label() for n in model.stochastic if n in view.on_rows and
               not math.isfinite(n.elbo_term())] or ["the rows"]
        raise FloatingPointError(f"the minibatch ELBO is {total}: the terms of "
                                 f"{', '.join(bad)} are not finite; check the data scale "
                                 f"and the priors")
    for node in model.stochastic:
        if node not in view.on_rows:
            total += _term(node)
    return total


def _term(node):
    term = node.elbo_term()
    if not math.isfinite(term):
        raise FloatingPointError(f"the ELBO term of {node.label()} is {term}{_diagnose(node)}")
    return term


def _diagnose(node):
    """Which parent's moments are non-finite or beyond 1e150 (so that their squares
    overflow), as the tail of the error message."""
    for p in node.factor.parents:
        try:
            mom = p.moments()
        except (FloatingPointError, ValueError, np.linalg.LinAlgError):
            continue
        worst = max((float(np.max(np.abs(a))) if np.size(a) else 0.0 for a in mom), default=0.0)
        if not np.isfinite(worst) or worst > 1e150:
            return (f": the moments of its parent {p.label()} reach {worst:.3g}, so an update "
                    f"upstream diverged (a non-conjugate step overshot, or the data are on a "
                    f"huge scale). Standardise the covariates / rescale the data, or use a "
                    f"stronger prior")
    return "; check its data and priors"


def elbo_by_node(model):
    """{node name: its ELBO contribution}; useful to see which part dominates."""
    return {node.name: node.elbo_term() for node in model.stochastic}
