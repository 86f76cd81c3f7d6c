"""Point masses (the BLR's delta method, docs/em.md): which nodes, and their checks."""
from __future__ import annotations

import numpy as np

from ..graph.node import Node


def resolve_points(model, method, point, structure):
    """The point-mass nodes: ``point=`` (nodes or names), else the Method's policy:
    "none", "global" (every latent node off the data axis that is not a mixture
    assignment: EM's parameters) or "all" (MAP)."""
    if point is None:
        if method.points == "global":
            local = set(structure.links)
            candidates = [n for n in model.latent if n not in local
                          and n not in structure.assignments]
        elif method.points == "all":
            candidates = list(model.latent)
        elif method.points == "nonconjugate":
            candidates = delta_nodes(model, method)
        else:
            return []
        point = candidates
    elif isinstance(point, (str, Node)):
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


def delta_nodes(model, method):
    """The Normal/MultivariateNormal latent nodes fed by non-conjugate factors: the nodes
    of the delta-method rows of the BLR table (gd, sgd, laplace). Refuses a model with
    none, or with another kind of node fed by a non-conjugate factor, naming it."""
    from ..families.multivariate_normal import MultivariateNormal
    from ..families.normal import Normal
    from .steps import nonconjugate_child
    fed = [n for n in model.latent if nonconjugate_child(model, n)]
    other = [n for n in fed if not isinstance(n.family, (Normal, MultivariateNormal))]
    if other:
        raise ValueError(f"fit({method.name!r}) takes delta-method steps on Normal and "
                         f"MultivariateNormal nodes; {other[0].label()} ({other[0].family.name}) "
                         f"receives a non-conjugate message. Use fit('ncvmp') for this model")
    if not fed:
        raise ValueError(f"fit({method.name!r}) steps the Normal/MultivariateNormal nodes fed by "
                         f"non-conjugate factors (a Potential, Bernoulli(logits=...), "
                         f"Poisson(log_rate=...), Categorical(logits=...)); this model has none. "
                         f"Its posterior is conjugate: use fit('vmp') or fit('conjugate')")
    return fed


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
