"""Truncated Dirichlet-process weights by stick breaking (docs/math.md §3.6).

    v_k ~ Beta(1, gamma)                              k = 1..K-1  (v_K = 1)
    pi_k = v_k prod_{j<k} (1 - v_j)

``StickBreaking(gamma, K)`` is a deterministic node over one Beta node ``v`` (the
sticks). It publishes Dirichlet moments, E[log pi_k] = E[log v_k] + sum_{j<k}
E[log(1 - v_j)], so it stands wherever a Dirichlet node does (the weights of a
Categorical, a Mixture's assignments). A child's message on pi, the counts N_k
(the coefficients of E[log pi_k]), maps to the sticks as

    (coefficient of E[log v_k], of E[log(1 - v_k)]) = (N_k, sum_{j>k} N_j),

so q(v_k) = Beta(1 + N_k, gamma + sum_{j>k} N_j) (Blei & Jordan 2006). The ELBO
terms are those of the Beta node, E[log p(v)] + H[q(v)] = -KL(q(v) || p(v)).

``truncated=False`` keeps a K-th Beta stick (E[log pi_K] includes E[log v_K], so the
weights sum to less than 1): scikit-learn's BayesianGaussianMixture with
``weight_concentration_prior_type="dirichlet_process"``.
"""
from __future__ import annotations

import numpy as np

from ..families.dirichlet import Dirichlet as DirichletFamily
from .base import Node
from .deterministic import Deterministic


class StickBreaking(Deterministic):
    """StickBreaking(gamma, K): truncated Dirichlet-process weights over K components,
    a drop-in for ``Dirichlet(alpha * ones(K))`` (``z = Categorical(w, plates=(N,))``).

    ``gamma`` > 0 is the concentration (small: few components used). ``truncated=True``
    sets the last stick to 1 (K-1 Beta sticks, weights summing to 1); ``False`` gives
    every component a Beta stick, as scikit-learn does. The sticks are the Beta node
    ``w.sticks`` (named ``<name>.sticks``); ``w.posterior.mean`` is E[pi]."""

    def __init__(self, gamma, K, name=None, truncated=True):
        from .nodes import Beta
        if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
            raise ValueError(f"StickBreaking '{name}': K must be an integer >= 1 (the number of "
                             f"components), got {K!r}")
        if truncated and K < 2:
            raise ValueError(f"StickBreaking '{name}': a truncated stick-breaking prior needs K >= 2 "
                             f"(with K = 1 the weight is 1; use truncated=False or a constant)")
        g = np.asarray(gamma, dtype=float) if not isinstance(gamma, Node) else None
        if g is None or g.ndim != 0 or not np.isfinite(g) or g <= 0:
            raise ValueError(f"StickBreaking '{name}': gamma must be one positive number (the "
                             f"concentration), got {gamma!r}")
        super().__init__(name, ())
        self.K = int(K)
        self.gamma = float(g)
        self.truncated = bool(truncated)
        n = self.K - 1 if truncated else self.K
        self.sticks = Beta(np.ones(n), np.full(n, self.gamma), name=f"{self.name}.sticks")
        self.provides = DirichletFamily()
        self.parents = [self.sticks]
        self.sticks._add_child(self)

    def _pad(self, a, value):
        """Append the fixed last stick (log 1 = 0 for v_K, or log(1 - v_K) = -inf unused)."""
        return np.concatenate([a, [value]]) if self.truncated else a

    def moments(self):
        src = self.sticks.moments()
        cached = self._cache
        if cached is not None and cached[0] is src:
            return cached[1]
        elog_v, elog_1mv = src
        elog_v = np.broadcast_to(elog_v, self.sticks.plates)
        elog_1mv = np.broadcast_to(elog_1mv, self.sticks.plates)
        before = np.concatenate([[0.0], np.cumsum(elog_1mv)[:self.K - 1]])
        out = (self._pad(elog_v, 0.0) + before,)
        self._cache = (src, out)
        return out

    def backward(self, msg, parent):
        (c,) = msg
        c = np.asarray(c, dtype=float)
        if c.ndim > 1:       # a message with plates: the weights have none, sum them
            c = c.reshape(-1, c.shape[-1]).sum(axis=0)
        n = self.sticks.plates[0]
        after = np.cumsum(c[::-1])[::-1]                       # sum_{j>=k} c_j
        tail = np.concatenate([after[1:], [0.0]])              # sum_{j>k} c_j
        return (c[:n].copy(), tail[:n].copy())

    @property
    def posterior(self):
        return StickPosterior(self)


class StickPosterior:
    """The fitted weights: ``mean`` = E[pi_k] = E[v_k] prod_{j<k} E[1 - v_j] (the sticks
    are independent under q), ``params`` = the sticks' Beta parameters (a, b)."""

    is_point = False

    def __init__(self, node):
        self.node = node
        post = node.sticks.posterior
        self.params = post.params
        self.is_point = post.is_point

    @property
    def mean(self):
        node = self.node
        ev = np.broadcast_to(self.node.sticks.posterior.mean, node.sticks.plates)
        rest = np.concatenate([[1.0], np.cumprod(1.0 - ev)[:node.K - 1]])
        return node._pad(ev, 1.0) * rest

    def __repr__(self):
        return f"<Posterior of {self.node.label()}: stick-breaking weights, K={self.node.K}>"
