"""Deterministic nodes: inner products (``Dot``) and sums (``Add``). Gates are in
``graph/gate.py``; the gather ``node[idx]`` (``Gather``) and the base class in ``graph/base.py``.

A deterministic node publishes moments computed from its parent's moments and
maps messages back (the adjoint): a gather scatters them with one sparse
product, a dot product contracts them with the design matrix.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..families.multivariate_normal import MultivariateNormal as MVNFamily
from ..families.normal import Normal as NormalFamily
from .base import Constant, Deterministic, Gather, Node, _stochastic_sources  # noqa: F401 (Gather)
from .bilinear import plan_of
from .data import numpy_of
from .gate import Gate  # noqa: F401 (read from here too)
from .plates import broadcast_plates, wsum



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
            if not isinstance(v.provides, MVNFamily):
                raise TypeError(f"Dot(X, w): the operand {v.label()} must be a MultivariateNormal "
                                f"node (vector moments E[v], E[v v^T]); got "
                                f"{v.provides.name if v.provides is not None else 'no moments'}")
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
            raw = numpy_of(X)
            if np.asarray(raw).dtype.kind not in "biuf":
                raise TypeError(f"Dot(X, {w.name}): X must be an array of numbers (shape (..., D)), "
                                f"got {np.asarray(raw).dtype} values; encode text columns first "
                                f"(blrgraph.io.design_matrix)")
            X = np.asarray(raw, dtype=float)
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

    def restrict(self, rows, cut, source_rows=None):
        state = super().restrict(rows, cut)
        state["X"] = self.X
        if self.X is not None and self.X.ndim > 1:
            self.X = self.X[rows]
        return state

    def moments(self):
        srcs = tuple(p.moments() for p in self.operands)
        cached = self._cache
        if cached is not None and all(a is b for a, b in zip(cached[0], srcs)) \
                and cached[1] is self.X:
            return cached[2]
        if self.X is not None and self._shifted():
            mean, var = self.parts()[1:]
            second = var + mean * mean
        elif self.X is not None:
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

    def _shifted(self):
        """Does a location shift (graph/centring.py) enter: the product's own (its child's
        coordinates) or its operand's?"""
        return _shift(self) is not None or _shift(self.w) is not None

    def _offset(self):
        """d = X . c_w - c_a: the centred product is a - c_a = X . (w - c_w) + d."""
        cw, ca = _shift(self.w), _shift(self)
        d = 0.0 if cw is None else np.einsum("...d,...d->...", self.X, np.broadcast_to(
            cw, np.shape(self.w.moments()[0])))
        return d if ca is None else d - ca

    def parts(self):
        """(c, E[a] - c, Var[a]) with c the product's location shift (0 without one),
        for a design matrix X: E[a] - c = X . E[w - c_w] + (X . c_w - c) and
        Var[a] = X^T Cov[w] X, each of the size of the spread, so data far from zero
        (y = 1e8 + X w + noise) keep their digits (docs/dev/numerics.md)."""
        m, cov = _vector_parts(self.w)
        X = self.X
        mean = np.einsum("...d,...d->...", X, m) + self._offset()
        var = np.einsum("...d,...de,...e->...", X, cov, X, optimize=True)
        c = _shift(self)
        return (0.0 if c is None else c), mean, var

    def first_moment(self):
        """E[a] alone (an ``Add`` parent's message to its other operand needs no E[a^2])."""
        if self.X is not None:
            return self.moments()[0]
        ma, mb = (_first_moment(p) for p in self.operands)
        return wsum(None, ma, mb, subs=("A", "A"), out="", target_plates=self.plates,
                    full_plates=self.plates)

    def moment_sums(self, coef, y, target_plates, plates=(), second=True, scaled=None):
        """(sum coef y E[a], sum coef E[a^2]) over the entries, reduced to ``target_plates``,
        without the per-entry moments of :meth:`moments` (docs/latent_products.md, "Sums
        over the entries"); None for a design-matrix operand (the caller then reads
        :meth:`moments`). ``coef`` and ``y`` are plate arrays (or None: 1, and no first
        sum); ``plates``: the entries' plates (the child's), broadcast with the product's;
        ``second=False``: the first sum only (None in place of the second); ``scaled``:
        (c, c1) with c1 = c y, a message's coefficients whose products the plan may have
        kept (graph/bilinear.py: ``Bilinear.sums``).

        E[a^2] = tr(E[w w^T] E[x x^T]) is contracted by einsum without the (entries)
        array: with coef constant (no mask, one noise precision) the sums over each
        operand's own entries come first, K x K work after them; an operand whose
        entries share one covariance (:func:`_second_terms`) adds its E[x] E[x]^T and
        Sigma parts separately, so its (entries, K, K) stack is never built. The first
        sum is one product of the data with an operand's means.

        The last result is kept for the same arguments and operand q's (PCA: the ELBO's
        sums are the noise precision's next message)."""
        if self.X is not None:
            return None
        plan = _plan(self, coef)
        same = tuple(plates) == self.plates or broadcast_plates(self.plates, plates) == self.plates
        if plan is not None and same and (not target_plates or max(target_plates) == 1):
            s1, s2 = plan.sums(self, y, second, scaled)   # one number c for every cell: c x the sums
            c = 1.0 if coef is None else float(coef)
            shape = tuple(target_plates)
            full = np.asarray if not shape else lambda v: np.full(shape, v)
            return (None if s1 is None else full(c * s1), None if s2 is None else full(c * s2))
        key = (tuple(_operand_state(p) for p in self.operands), coef, y,
               tuple(target_plates), tuple(plates), second)
        memo = _SUMS_MEMO.get(self)
        if memo is not None and _same_sums_key(memo[0], key):
            return memo[1]
        (ma, ta), (mb, tb) = (_second_terms(p, not second or _factorises(coef, p.plates))
                              for p in self.operands)
        kw = dict(target_plates=target_plates, full_plates=broadcast_plates(self.plates, plates))
        s1 = None if y is None else wsum(coef, y, ma, mb, subs=("", "A", "A"), out="", **kw)
        s2 = None if not second else \
            sum(wsum(coef, *a, *b, subs=sa + sb, out="", **kw) for a, sa in ta for b, sb in tb)
        _SUMS_MEMO[self] = (key, (s1, s2))
        return s1, s2

    def backward(self, msg, parent):
        c1, c2 = msg
        kw = dict(target_plates=parent.plates, full_plates=self.plates)
        if self.X is not None:
            if self._shifted():    # a - c_a = X . (w - c_w) + d: c1 + 2 c2 d on X . (w - c_w)
                c1 = np.asarray(c1, dtype=float) + 2.0 * np.asarray(c2, dtype=float) * self._offset()
            return (wsum(c1, self.X, subs=("A",), out="A", **kw),
                    wsum(c2, self.X, self.X, subs=("A", "B"), out="AB", **kw))
        plan = _plan(self, c2)
        if plan is not None:   # one c2 for every cell: matrix products (graph/bilinear.py)
            return plan.message(self, c1, float(c2), 0 if parent is self.operands[0] else 1)
        other = self.operands[1] if parent is self.operands[0] else self.operands[0]
        m, terms = _second_terms(other, _factorises(c2, other.plates))
        return (wsum(c1, m, subs=("A",), out="A", **kw),
                self._constant_along(c2, m, terms, parent.plates))

    def backward_is_linear(self, parent):
        """Two latent operands without location shifts: E[a] = E[w] . E[x] and
        E[a^2] = <E[w w^T], E[x x^T]> are linear in each operand's moments."""
        return self.X is None and parent in self.operands and not self._shifted_pair()

    def _shifted_pair(self):
        return any(_shift(n) is not None for n in (self, *self.operands))

    def backward_to(self, parent):
        """:meth:`backward` to ``parent`` with the matrix plan resolved once (its plates
        are fixed for a fit): one coefficient c2 for every cell goes straight to the
        plan's products, anything else through :meth:`backward`."""
        plan = plan_of(self) if self.X is None else None
        if plan is None:
            return super().backward_to(parent)
        i = 0 if parent is self.operands[0] else 1

        def back(msg):
            c1, c2 = msg
            if (c2.ndim if type(c2) in (np.ndarray, np.float64) else np.ndim(c2)) != 0:
                return self.backward(msg, parent)
            return plan.message(self, c1, float(c2), i)
        return back

    def _constant_along(self, c, m, terms, target):
        """sum c E[other other^T] (the sum of ``terms``, :func:`_second_terms`) reduced to
        ``target`` (the parent's plates). A parent axis along which neither c nor the
        other operand varies (the scores' axis in PCA when the noise precision is one
        number) is not filled in: the sum is computed once and returned as a read-only
        broadcast view (all scores then share one precision matrix, which the
        MultivariateNormal family factorises once)."""
        full, n = self.plates, len(target)
        shapes = [np.shape(c)[:np.ndim(c)], np.shape(m)[:np.ndim(m) - 1]]
        keep = [target[j] == 1 or any(len(s) >= n - j and s[len(s) - (n - j)] != 1 for s in shapes)
                for j in range(n)]   # an axis of size 1 is the parent's own: nothing to fill
        t2 = tuple(t if k else 1 for t, k in zip(target, keep))
        f2 = list(full)
        for j, k in enumerate(keep):     # the parent's axes, right-aligned with the product's
            if not k:
                f2[len(full) - n + j] = 1
        res = sum(wsum(c, *a, subs=sa, out="AB", target_plates=t2, full_plates=tuple(f2))
                  for a, sa in terms)
        return res if all(keep) else np.broadcast_to(res, tuple(target) + res.shape[-2:])

    def start(self, rng):
        """Two latent operands with zero-mean priors are a saddle point of the ELBO
        (each one's message to the other is 0, so VMP never leaves E[x] = E[w] = 0):
        each latent operand starts at q = N(a draw from its prior, the prior's
        covariance), as BayesPy's ``initialize_from_random``, unless it has a start given
        by ``node.start_from`` (whichever operand the schedule updates first must see a
        nonzero partner). ``fit(seed=...)`` fixes the draw (operands in creation order,
        so Dot(W, x) = Dot(x, W))."""
        if self.X is not None:
            return
        for p in sorted(self.operands, key=lambda n: n.id):
            if p._start is not None:
                continue   # a given start (``node.start_from``)
            if not isinstance(p.family, MVNFamily):
                continue   # a chain (BayesPy's LSSM): the other operand's draw breaks the tie
            if p.stochastic and not p.observed and p.nat is not None:
                p.set_natural(_random_mean(p, rng))


#: {Dot: (arguments and operand states, the sums)}: moment_sums' last, kept outside the
#: node (a pickled model, e.g. the Dask template, carries no operand's q through it)
_SUMS_MEMO = weakref.WeakKeyDictionary()


def _operand_state(node):
    """What an operand's moments are a function of: a latent q's natural parameters (and
    whether it is a point mass), else its moment tuple (replaced, never modified)."""
    if node.stochastic and not node.observed:
        return node.nat, bool(node.point)
    return node.moments(), None


def _same_sums_key(a, b):
    """Do two :meth:`Dot.moment_sums` keys name the same sums (arrays by identity)?"""
    (sa, ca, ya, ta, pa, qa), (sb, cb, yb, tb, pb, qb) = a, b
    return ca is cb and ya is yb and ta == tb and pa == pb and qa == qb and \
        all(x[0] is y[0] and x[1] == y[1] for x, y in zip(sa, sb))


def _plan(dot, c):
    """The matrix plan of a product of two vector operands (graph/bilinear.py) when the
    coefficient ``c`` of E[a^2] is one number for every cell, else None."""
    if c is not None and np.ndim(c) != 0:
        return None
    return plan_of(dot)


def _shift(node):
    """A node's location shift (graph/centring.py), None without one."""
    return None if node.provides is None else node.provides.shift


def _vector_parts(node):
    """(E[v] - c, Cov[v]) of a vector operand with location shift c: the covariance from
    q's precision where there is one (E[v v^T] - E[v] E[v]^T would lose it when v is far
    from zero), else from the moments (centred when c is set)."""
    m, mm = node.moments()
    fam = node.family
    if node.stochastic and not node.observed and not node.point \
            and node.nat is not None and isinstance(fam, MVNFamily):
        return m, fam.cov(node.nat)
    return m, mm - m[..., :, None] * m[..., None, :]


def _scalar_parts(node):
    """(c, E[v] - c, Var[v]) of a scalar Gaussian operand with location shift c (0 without
    one; a constant is its own c). Its moments are those of v - c, so the variance keeps
    its digits when v is far from zero."""
    if isinstance(node, Constant):
        return node.value, 0.0, 0.0
    parts = node.parts
    if parts is not None and (not isinstance(node, Dot) or node.X is not None):
        return parts()
    m1, m2 = node.moments()
    c = _shift(node)
    c = 0.0 if c is None else c
    fam = node.family
    if node.stochastic and not node.observed and not node.point \
            and node.nat is not None and isinstance(fam, NormalFamily):
        return c, m1, fam.var(node.nat)    # (E[v^2] - E[v]^2 would lose it far from zero)
    return c, m1, m2 - m1 * m1


def _factorises(c, plates):
    """Is the coefficient c (None, a number or a plate array) constant along every axis on
    which an operand with ``plates`` has several entries (right-aligned)? Then a sum of
    c E[v v^T] over those entries is c (N Sigma + sum E[v] E[v]^T) for shared covariances;
    otherwise the per-entry stack is the cheaper operand."""
    cs = () if c is None else np.shape(c)
    n = max(len(cs), len(plates))
    cs, ps = (1,) * (n - len(cs)) + tuple(cs), (1,) * (n - len(plates)) + tuple(plates)
    return all(a == 1 or b == 1 for a, b in zip(cs, ps))


def _first_moment(node):
    """E[v] of an operand without its second moments where it can: a ``Dot``'s mean alone,
    a latent q with a shared covariance its mean (no (entries, D, D) stack)."""
    f = node.first_moment
    if f is not None:
        return f()
    if node.stochastic and not node.observed and not node.point \
            and node.nat is not None:
        g = node.family.shared_covariance
        parts = None if g is None else g(node.nat)
        if parts is not None:
            return parts[0]
    return node.moments()[0]


def _second_terms(node, shared=True):
    """(E[v], terms) of a vector operand: E[v v^T] as a sum of wsum terms (arrays, subs).
    A latent MultivariateNormal q whose entries share one covariance Sigma (the family's
    ``shared_covariance``: the scores of PCA without missing cells) gives
    [((Sigma,), ("AB",)), ((E[v], E[v]), ("A", "B"))], E[v v^T] = Sigma + E[v] E[v]^T,
    so the (entries, D, D) stack is never built; otherwise (or ``shared=False``) the
    per-entry array [((E[v v^T],), ("AB",))]."""
    parts = None
    if shared and node.stochastic and not node.observed and not node.point \
            and node.nat is not None:
        f = node.family.shared_covariance
        parts = None if f is None else f(node.nat)
    if parts is None:
        m, S = node.moments()
        return m, [((S,), ("AB",))]
    m, cov = parts
    return m, [((cov,), ("AB",)), ((m, m), ("A", "B"))]


def _random_mean(node, rng):
    """q's natural parameters with the mean replaced by a draw from q (same precision)."""
    lam1, lam2 = node.nat
    x = node.family.sample(node.nat, rng=rng)
    x = np.broadcast_to(x, np.shape(lam1))
    P = -2.0 * np.asarray(lam2)
    return (np.einsum("...ij,...j->...i", P, x), np.asarray(lam2))


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
                if not isinstance(v.provides, NormalFamily):
                    raise TypeError(f"Add(a, b): {v.label()} must publish Normal moments (a Normal "
                                    f"node, bg.Dot or bg.Add), got "
                                    f"{v.provides.name if v.provides is not None else 'no moments'}")
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

    def _shifted(self):
        """Does a location shift enter (the sum's own, an operand's, or a constant operand
        that the sum's child is centred about)?"""
        return _shift(self) is not None or any(_shift(p) is not None for p in self.operands
                                               if not isinstance(p, Constant))

    def parts(self):
        """(c, E[s] - c, Var[s]) with c the sum's location shift (0 without one):
        E[s] - c = E[a - c_a] + E[b - c_b] + (c_a + c_b - c), Var[s] = Var[a] + Var[b],
        each of the size of the spread (docs/dev/numerics.md)."""
        (ca, ma, va), (cb, mb, vb) = (_scalar_parts(p) for p in self.operands)
        c = _shift(self)
        c = 0.0 if c is None else c
        mean = ma + mb + ((ca + cb) - c)
        return c, np.broadcast_to(mean, self.plates), np.broadcast_to(va + vb, self.plates)

    def moments(self):
        if self._shifted():
            _, mean, var = self.parts()
            return mean, var + mean * mean
        (ma, sa), (mb, sb) = (p.moments() for p in self.operands)
        return (np.broadcast_to(ma + mb, self.plates),
                np.broadcast_to(sa + 2.0 * ma * mb + sb, self.plates))

    def moment_sums(self, coef, y, target_plates, plates=(), second=True, scaled=None):
        """(sum coef y E[s], sum coef E[s^2]) reduced to ``target_plates`` (see
        :meth:`Dot.moment_sums`) from the operands' own sums when one of them gives them
        (``Add(Dot(W, x), mu)``: probabilistic PCA with column offsets), else None:

            sum c y E[s]   = sum c y E[a] + sum c y E[b]
            sum c E[s^2]   = sum c E[a^2] + 2 sum c E[b] E[a] + sum c E[b^2]

        the cross term as the first sum of the operand that gives its sums, with the
        other's mean in place of y."""
        if self._shifted():
            return None
        full = broadcast_plates(self.plates, plates)
        kw = dict(target_plates=target_plates, full_plates=full)

        def own(op, yy, sec):
            f = op.moment_sums
            return None if f is None else f(coef, yy, target_plates, full, second=sec)

        got = [own(op, y, second) for op in self.operands]
        if all(g is None for g in got):
            return None
        mine = [g is not None for g in got]
        for i, op in enumerate(self.operands):
            if got[i] is None:
                m1, m2 = op.moments()
                got[i] = (None if y is None else wsum(coef, y, m1, **kw),
                          wsum(coef, m2, **kw) if second else None)
        s1 = None if y is None else got[0][0] + got[1][0]
        if not second:
            return s1, None
        i = mine.index(True)
        cross = own(self.operands[i], _first_moment(self.operands[1 - i]), False)[0]
        return s1, got[0][1] + 2.0 * cross + got[1][1]

    def backward(self, msg, parent):
        c1, c2 = msg
        kw = dict(target_plates=parent.plates, full_plates=self.plates)
        total = None
        for i, p in enumerate(self.operands):
            if p is not parent:
                continue
            if self._shifted():    # s - c = (a - c_a) + (b - c_b) + (c_a + c_b - c)
                ca, _, _ = _scalar_parts(p)
                cb, mo, _ = _scalar_parts(self.operands[1 - i])
                c = _shift(self)
                mo = mo + ((ca + cb) - (0.0 if c is None else c))
            else:
                mo = _first_moment(self.operands[1 - i])
            # nothing to sum (a Dot operand): the coefficient of E[a^2] at its own shape, so
            # one noise precision stays one number (the Dot's summed paths need it so)
            same = tuple(parent.plates) == tuple(self.plates)
            m = (wsum(None, c1 + 2.0 * np.asarray(c2) * mo, **kw),
                 np.asarray(c2, dtype=float) if same else wsum(c2, **kw))
            total = m if total is None else tuple(x + y for x, y in zip(total, m))
        return total
