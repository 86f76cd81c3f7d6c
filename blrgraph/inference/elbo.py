"""The ELBO, assembled per node (MATH.md §3.1):
sum over factors of E_q[log f] plus the entropies of the non-point latent nodes.
With point masses (EM) it is the lower bound on log p(data, points) of MATH.md §5."""
from __future__ import annotations

import math


def elbo(model):
    for node in model.observed:
        if node.value is None and getattr(node, "source", None) is not None:
            raise ValueError(f"the ELBO over {node.label()} needs its data in memory, but it is "
                             f"streamed; fit('svi') reports a minibatch estimate "
                             f"(fit_result.elbo_trace), or observe an in-memory array")
    total = 0.0
    for node in model.stochastic:
        term = node.elbo_term()
        if not math.isfinite(term):
            raise FloatingPointError(f"the ELBO term of {node.label()} is {term}; "
                                     f"check its data and priors")
        total += term
    return total


def elbo_by_node(model):
    """{node name: its ELBO contribution}; useful to see which part dominates."""
    return {node.name: node.elbo_term() for node in model.stochastic}
