"""FactorGraph: the graph (a networkx DiGraph) of some nodes and all their ancestors.

The user-facing :class:`blrgraph.Model` adds ``fit`` / ``save`` / ``load`` on top of it
(``blrgraph/model.py``): the graph layer imports nothing from inference."""
from __future__ import annotations

import networkx as nx

from .node import Constant, Node


class FactorGraph:
    """Collects ``nodes`` and their ancestors, validates the graph and derives
    a deterministic update schedule (topological order of the latent nodes,
    ties broken by creation order). ``schedule=`` overrides it (nodes or names).
    """

    #: where an SVI fit stopped (step count, rows' state, rng), for a checkpoint; None
    svi_state = None

    def __init__(self, *nodes, schedule=None):
        if not nodes:
            raise ValueError("Model() needs at least one node, e.g. Model(y)")
        for n in nodes:
            if not isinstance(n, Node):
                raise TypeError(f"Model(...) takes nodes, got {n!r}")
        g = nx.DiGraph()
        stack, seen = list(nodes), set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            g.add_node(n)
            for p in n.parents:
                if isinstance(p, Constant):
                    continue
                g.add_edge(p, n)
                stack.append(p)
        if not nx.is_directed_acyclic_graph(g):
            cyc = nx.find_cycle(g)
            raise ValueError("the graph has a cycle: " + " -> ".join(a.name for a, _ in cyc))
        self.graph = g
        order = list(nx.lexicographical_topological_sort(g, key=lambda n: n.id))
        self.nodes = order
        names = {}
        for n in order:
            if n.name in names:
                raise ValueError(f"two nodes are named '{n.name}' ({names[n.name].label()} and "
                                 f"{n.label()}); give them distinct name= values")
            names[n.name] = n
        self._by_name = names
        members = set(order)
        self.children = {n: [c for c in n.children if c in members] for n in order}
        self.stochastic = [n for n in order if n.stochastic]
        self.observed = [n for n in self.stochastic if n.observed]
        self.latent = [n for n in self.stochastic if not n.observed]
        if not self.observed:
            raise ValueError("the model has no observed node: call node.observe(data) on the data "
                             "node(s) before building the Model")
        self._propagate_replicates()
        from .centring import centre_model
        centre_model(self)  # location shifts of Gaussian nodes (docs/dev/numerics.md)
        self.schedule = self._resolve(schedule) if schedule is not None else list(self.latent)
        self.fit_result = None

    def _resolve(self, schedule):
        out = []
        for s in schedule:
            n = self[s] if isinstance(s, str) else s
            if n not in self.latent:
                raise ValueError(f"schedule entry {s!r} is not a latent node of this model")
            out.append(n)
        missing = [n.name for n in self.latent if n not in out]
        if missing:
            raise ValueError(f"schedule leaves out latent node(s) {missing}; every latent node "
                             f"must be updated")
        return out

    def _propagate_replicates(self):
        """Counts (``weights=``) of an observed node stand for identical copies of the
        latent nodes on the same plates above it (LDA: a word type's tokens and their z)."""
        for n in self.latent:
            n.replicates = None
        for obs in self.observed:
            if obs.weights is None:
                continue
            stack = [obs]
            while stack:
                c = stack.pop()
                for p in c.parents:
                    if not p.stochastic or p.observed or p.plates != obs.plates:
                        continue
                    if p.replicates is not None and p.replicates is not obs.weights:
                        raise ValueError(f"{p.label()} has children with different weights= "
                                         f"(counts); they must describe the same copies")
                    p.replicates = obs.weights
                    stack.append(p)

    def __getitem__(self, name):
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no node named {name!r}; nodes: {sorted(self._by_name)}") from None

    def __contains__(self, name):
        return name in self._by_name

    def latent_neighbours(self, node):
        """Latent stochastic nodes whose moments enter ``node``'s update."""
        out = set()

        def up(n):
            for p in n.parents:
                if isinstance(p, Constant):
                    continue
                if p.deterministic:
                    up(p)
                elif not p.observed:
                    out.add(p)

        up(node)
        for c in self.children[node]:
            stack = [c]
            while stack:
                d = stack.pop()
                if d.deterministic:
                    stack.extend(self.children[d])
                else:
                    if not d.observed:
                        out.add(d)
                    up(d)
        out.discard(node)
        return out

    def __repr__(self):
        return (f"<Model: {len(self.latent)} latent, {len(self.observed)} observed nodes: "
                f"{', '.join(n.name for n in self.stochastic)}>")
