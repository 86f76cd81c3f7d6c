"""Model: the user's handle on a factor graph: ``Model(y).fit("vmp")``, ``save``, ``load``.

It sits above the inference layer (families <- graph <- inference <- Model), so the
graph package needs nothing from inference.
"""
from __future__ import annotations

from .graph.model import FactorGraph
from .inference import checkpoint
from .inference.fit import fit as _fit


class Model(FactorGraph):
    """Collects ``nodes`` and their ancestors, validates the graph and derives a
    deterministic update schedule (topological order of the latent nodes, ties broken
    by creation order); ``schedule=`` overrides it (nodes or names)."""

    def fit(self, method="vmp", **options):
        """Run inference; see :func:`blrgraph.inference.fit.fit` and docs/api.md."""
        try:
            return _fit(self, method, **options)
        finally:   # per-fit work arrays (e.g. a mixture's statistics matrix) are not kept
            for n in self.nodes:
                if n.stochastic:
                    n.release()

    def draw(self, path=None, engine=None):
        """The model as a picture: variables as circles (observed ones shaded),
        deterministic nodes as diamonds, plates as boxes labelled with their size. Returns
        the matplotlib Figure (written to ``path`` if given), or with Graphviz (``engine=
        "graphviz"``, the default when ``dot`` is installed and a path is given) the path
        written. See :mod:`blrgraph.drawing` and docs/api.md, "Drawing a model"."""
        from .drawing import draw
        return draw(self, path, engine)

    def save(self, path):
        """Write every latent node's posterior (natural parameters) and the fit state
        (SVI step counter, RNG state) to ``path`` (.npz with JSON metadata, no pickle)."""
        return checkpoint.save(self, path)

    def load(self, path):
        """Restore a checkpoint written by :meth:`save` for a model declared the same
        way; ``fit("svi", resume=True)`` then continues the run exactly. A corrupt file
        or one of another model raises ValueError and leaves this model unchanged."""
        return checkpoint.load(self, path)
