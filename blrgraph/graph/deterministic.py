"""Deterministic nodes: gathers (``node[idx]``), inner products (``Dot``) and sums (``Add``).

A deterministic node publishes moments computed from its parent's moments and
maps messages back (the adjoint): a gather scatters them with one sparse
product, a dot product contracts them with the design matrix.
"""
from __future__ import annotations

import numpy as np

from ..families.multivariate_normal import MultivariateNormal as MVNFamily
from ..families.normal import Normal as NormalFamily
from .node import Constant, Node
from .plates import Scatter, broadcast_plates, wsum


class Deterministic(Node):
    deterministic = True

    def backward(self, msg, parent):
        raise NotImplementedError


class Gather(Deterministic):
    """``source[idx]``: entries of the source's first plate axis picked by an integer array."""

    def __init__(self, source, idx, name=None):
        if isinstance(idx, tuple) or isinstance(idx, slice):
            raise TypeError(f"{source.label()}[...]: index with one integer array "
                            f"(e.g. theta[doc_ids]), not {idx!r}")
        idx = np.asarray(idx)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"{source.label()}[idx]: idx must be an integer array, got dtype {idx.dtype}")
        if not source.plates:
            raise ValueError(f"{source.label()}[idx]: the node has no plates to gather from")
        n = source.plates[0]
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"{source.label()}[idx]: indices must lie in 0..{n - 1}, "
                             f"got range {idx.min()}..{idx.max()}")
        super().__init__(name or f"{source.name}[idx]", idx.shape + source.plates[1:])
        self.idx = idx
        self.source = source
        self.provides = source.provides
        self.parents = [source]
        source._add_child(self)
        self._scatter = Scatter(idx, n)

    def moments(self):
        """The source's moments at the gathered entries. Kept until the source's
        moments change (they are replaced, never modified in place), so the several
        readers in one sweep (prior, ELBO) share one gather of entries x K."""
        src = self.source.moments()
        cached = getattr(self, "_cache", None)
        if cached is not None and cached[0] is src and cached[1] is self.idx:
            return cached[2]
        out = tuple(np.take(np.broadcast_to(m, self.source.plates + np.shape(m)[np.ndim(m) - k:]),
                            self.idx, axis=0)
                    for m, k in zip(src, self.provides.event_ndims))
        self._cache = (src, self.idx, out)
        return out

    def backward(self, msg, parent):
        if len(msg) == 1 and hasattr(msg[0], "scatter") and self.idx.ndim == 1:
            out = msg[0].scatter(self.idx, self.source.plates[0])  # factored: no entries x K
            if out is not None:
                return (out,)
        return tuple(self._scatter(np.broadcast_to(m, self.plates + np.shape(m)[len(self.plates):]),
                                   self.idx.ndim) for m in msg)


class Dot(Deterministic):
    """a = x . w: the inner product of two vectors along their last axis.

    Each operand is an array (a design matrix, plates + (D,)) or a node publishing
    MultivariateNormal moments (E[v], E[v v^T]); at least one is a node. Publishes
    Normal moments (docs/math.md, "Products of latent variables"):

        E[a]   = E[x] . E[w]
        E[a^2] = tr(E[x x^T] E[w w^T])      (x and w independent under q)

    and maps a child's message (c1, c2) on a (the coefficients of E[a], E[a^2] in
    the child's expected log-likelihood) to one operand as
    (sum c1 E[other], sum c2 E[other other^T]) over the plates the operand does not
    have. With an array X this is (X^T c1, X^T diag(c2) X): ``Dot(X, w)`` is the
    linear predictor of a regression. With two latent operands (probabilistic PCA:
    loadings W with plates (D,), scores x with plates (N, 1)) the product is
    bilinear and VMP updates W and x in turn; :meth:`start` breaks the symmetry of
    their zero-mean priors."""

    def __init__(self, X, w, name=None):
        a_node, b_node = isinstance(X, Node), isinstance(w, Node)
        if a_node and not b_node:   # Dot(w, X): the array goes first internally
            X, w = w, X
            a_node, b_node = False, True
        if not b_node:
            raise TypeError("Dot(X, w): give at least one node (a MultivariateNormal node, or a "
                            "node publishing its moments such as a gather of one); both are arrays")
        for v in ((X, w) if a_node else (w,)):
            if not isinstance(getattr(v, "provides", None), MVNFamily):
                raise TypeError(f"Dot(X, w): the operand {v.label()} must be a MultivariateNormal "
                                f"node (vector moments E[v], E[v v^T]); got "
                                f"{getattr(getattr(v, 'provides', None), 'name', 'no moments')}")
        D = np.shape(w.moments()[0])[-1]
        if a_node:
            if X is w:
                raise ValueError(f"Dot({X.name}, {w.name}): the two operands are the same node; "
                                 f"E[(w.w)^2] is not tr(E[w w^T]^2) (they are not independent). "
                                 f"Use two nodes")
            shared = _stochastic_sources(X) & _stochastic_sources(w)
            if shared:
                raise ValueError(f"Dot({X.name}, {w.name}): both operands depend on "
                                 f"{sorted(n.name for n in shared)} through deterministic nodes; "
                                 f"the product's moments need independent operands")
            if np.shape(X.moments()[0])[-1] != D:
                raise ValueError(f"Dot({X.name}, {w.name}): the operands have dimensions "
                                 f"{np.shape(X.moments()[0])[-1]} and {D}; they must be equal")
            try:
                plates = broadcast_plates(X.plates, w.plates)
            except ValueError:
                raise ValueError(f"Dot({X.name}, {w.name}): plates {X.plates} and {w.plates} do not "
                                 f"broadcast; e.g. loadings W with plates (D,) and scores x with "
                                 f"plates (N, 1) give a product with plates (N, D)") from None
            super().__init__(name or f"dot({X.name},{w.name})", plates)
            self.X = None      # no design matrix: both operands are nodes
            self.operands = [X, w]
        else:
            X = np.asarray(X, dtype=float)
            if X.ndim < 1 or not np.all(np.isfinite(X)):
                raise ValueError(f"Dot(X, {w.name}): X must be a finite array of shape (..., D); "
                                 f"mask or impute missing covariates first")
            super().__init__(name or f"dot({w.name})", broadcast_plates(X.shape[:-1], w.plates))
            self.X = X
            self.operands = [w]
            if D != X.shape[-1]:
                raise ValueError(f"Dot(X, {w.name}): X has {X.shape[-1]} columns but w has "
                                 f"dimension {D}")
        self.w = w
        self.provides = NormalFamily()
        self.parents = list(self.operands)
        for p in self.operands:
            p._add_child(self)

    def moments(self):
        srcs = tuple(p.moments() for p in self.operands)
        cached = getattr(self, "_cache", None)
        if cached is not None and all(a is b for a, b in zip(cached[0], srcs)) \
                and cached[1] is self.X:
            return cached[2]
        if self.X is not None:
            m, mm = srcs[0]
            X = self.X
            mean = np.einsum("...d,...d->...", X, m)
            second = np.einsum("...d,...de,...e->...", X, mm, X, optimize=True)
        else:
            (ma, Sa), (mb, Sb) = srcs
            kw = dict(target_plates=self.plates, full_plates=self.plates)
            mean = wsum(None, ma, mb, subs=("A", "A"), out="", **kw)
            second = wsum(None, Sa, Sb, subs=("AB", "AB"), out="", **kw)
        out = (mean, second)
        self._cache = (srcs, self.X, out)
        return out

    def backward(self, msg, parent):
        c1, c2 = msg
        kw = dict(target_plates=parent.plates, full_plates=self.plates)
        if self.X is not None:
            return (wsum(c1, self.X, subs=("A",), out="A", **kw),
                    wsum(c2, self.X, self.X, subs=("A", "B"), out="AB", **kw))
        other = self.operands[1] if parent is self.operands[0] else self.operands[0]
        m, S = other.moments()
        return (wsum(c1, m, subs=("A",), out="A", **kw),
                wsum(c2, S, subs=("AB",), out="AB", **kw))

    def start(self, rng):
        """Two latent operands with zero-mean priors are a saddle point of the ELBO
        (each one's message to the other is 0, so VMP never leaves E[x] = E[w] = 0):
        each latent operand starts at q = N(a draw from its prior, the prior's
        covariance), as BayesPy's ``initialize_from_random``. ``fit(seed=...)``
        fixes the draw (operands in creation order, so Dot(W, x) = Dot(x, W))."""
        if self.X is not None or any(getattr(p, "_start", None) is not None for p in self.operands):
            return  # a given start (``node.start_from``) has broken the symmetry already
        for p in sorted(self.operands, key=lambda n: n.id):
            if p.stochastic and not p.observed and p.nat is not None:
                p.set_natural(_random_mean(p, rng))


def _random_mean(node, rng):
    """q's natural parameters with the mean replaced by a draw from q (same precision)."""
    lam1, lam2 = node.nat
    x = node.family.sample(node.nat, rng=rng)
    x = np.broadcast_to(x, np.shape(lam1))
    P = -2.0 * np.asarray(lam2)
    return (np.einsum("...ij,...j->...i", P, x), np.asarray(lam2))


def _stochastic_sources(node):
    """The stochastic nodes a node's value depends on through deterministic nodes only."""
    if not node.deterministic:
        return {node}
    out = set()
    for p in node.parents:
        out |= _stochastic_sources(p)
    return out


class Add(Deterministic):
    """s = a + b of scalar Gaussian quantities: each a node publishing Normal moments
    (a Normal node, a ``Dot``, another ``Add``) or an array; at least one a node.

    Publishes E[s] = E[a] + E[b], E[s^2] = E[a^2] + 2 E[a] E[b] + E[b^2] (a and b
    independent under q); a child's message (c1, c2) on s maps to a as
    (c1 + 2 c2 E[b], c2), summed over the plates a does not have (the gradient of the
    child's expected log-likelihood in a's moments; docs/math.md)."""

    def __init__(self, a, b, name=None):
        ops = []
        for v in (a, b):
            if isinstance(v, Node):
                if not isinstance(getattr(v, "provides", None), NormalFamily):
                    raise TypeError(f"Add(a, b): {v.label()} must publish Normal moments (a Normal "
                                    f"node, bg.Dot or bg.Add), got "
                                    f"{getattr(getattr(v, 'provides', None), 'name', 'no moments')}")
                ops.append(v)
            else:
                try:
                    value = np.asarray(v, dtype=float)
                except (TypeError, ValueError):
                    raise TypeError(f"Add(a, b): operands must be nodes or arrays, got "
                                    f"{type(v).__name__}") from None
                if not np.all(np.isfinite(value)):
                    raise ValueError("Add(a, b): an array operand must be finite")
                ops.append(Constant(value, NormalFamily(), name="add.constant"))
        nodes = [v for v in ops if not isinstance(v, Constant)]
        if not nodes:
            raise TypeError("Add(a, b): give at least one node; both are arrays")
        if len(nodes) == 2:
            shared = _stochastic_sources(nodes[0]) & _stochastic_sources(nodes[1])
            if shared:
                raise ValueError(f"Add({nodes[0].name}, {nodes[1].name}): both operands depend on "
                                 f"{sorted(n.name for n in shared)}; E[s^2] needs independent "
                                 f"operands (write the sum inside one node instead)")
        try:
            plates = broadcast_plates(*(v.plates for v in ops))
        except ValueError:
            raise ValueError(f"Add(a, b): plates {ops[0].plates} and {ops[1].plates} do not "
                             f"broadcast") from None
        super().__init__(name or "add(" + ",".join(v.name for v in nodes) + ")", plates)
        self.operands = ops
        self.provides = NormalFamily()
        self.parents = ops
        for p in nodes:
            p._add_child(self)

    def moments(self):
        (ma, sa), (mb, sb) = (p.moments() for p in self.operands)
        return (np.broadcast_to(ma + mb, self.plates),
                np.broadcast_to(sa + 2.0 * ma * mb + sb, self.plates))

    def backward(self, msg, parent):
        c1, c2 = msg
        kw = dict(target_plates=parent.plates, full_plates=self.plates)
        total = None
        for i, p in enumerate(self.operands):
            if p is not parent:
                continue
            mo = self.operands[1 - i].moments()[0]
            m = (wsum(None, c1 + 2.0 * np.asarray(c2) * mo, **kw), wsum(c2, **kw))
            total = m if total is None else tuple(x + y for x, y in zip(total, m))
        return total
