"""Potential(logp, *parents, data=...): a user log-factor over Gaussian nodes (docs/blr.md).

    w = bg.MultivariateNormal(np.zeros(D), np.eye(D), name="w")
    def loglik(w, X, y):                           # autograd.numpy; w is (D,) or (S, D)
        a = w @ X.T                                # (..., rows)
        return y * a - anp.logaddexp(0.0, a)       # one log-factor per row
    lik = bg.Potential(loglik, w, data=(X, y), name="lik")
    bg.Model(lik).fit("ncvmp")                     # or "laplace", "gd", "sgd", "map", "svi"

Design. A Potential is a factor with no variable of its own. It is a node of the
graph (so ``Model(lik)`` finds its parents) and counts as *observed* data: it is
never scheduled, it has no posterior, it contributes E_q[logp] to the ELBO and
sends each parent the natural-gradient (mu-gradient) message of docs/math.md §4.1:

    g = E_q[grad logp],  H = E_q[hess logp]         (Bonnet / Price)
    message = (g - H m, H / 2)                      (in T-coordinates (x, x x^T))

Data. With ``data=(A1, A2, ...)`` (arrays sharing their leading axis: the rows),
``logp(*values, *data)`` returns one log-factor per row and the Potential has plates
(N,): the scheduler knows N, masks rows (``mask=``, and rows holding NaN), weights them
(``weights=``), cuts minibatches scaled by N/|B| (``fit("svi")``, ``fit("sgd")``) exactly
as for an observed node. Without data, ``logp(*values)`` returns one number.

Expectations. Over a fixed set of S standard-normal draws (common random numbers:
drawn once per fit, so the estimate is a smooth deterministic function of q and the
damped iteration has a fixed point): antithetic pairs (z, -z) whitened so that their
second moment is exactly the identity (when S/2 exceeds the number of coordinates n;
else each coordinate is standardised). Such a rule integrates every polynomial of
degree <= 3 exactly, so for a quadratic logp the answer is exact and the error is of
fourth order in the posterior spread. S defaults to max(64, 2 n + 2), at most 512.

Curvature. E[hess logp] comes from gradients alone by Stein's lemma,
E[hess f] = E[grad f (x - m)^T] Sigma^{-1}, with Sigma the draws' own covariance: one
reverse pass over all draws and rows (vectorised), exact for a quadratic logp, O(S N)
memory -- never a reverse pass per coordinate. A point-mass parent (the delta method:
``fit("laplace")``, ``"gd"``, ``"map"``, EM) has no spread: the expectations are values
at the point and the Hessian is exact, from one reverse-over-reverse pass over n copies
of the point (in chunks bounded by ``CHUNK`` numbers).

Speed. ``logp`` receives one array per parent, shaped like the parent's value (plates
+ event), with a leading axis of draws when it accepts one (write it with ``...`` and
``axis=-1``); a probe decides (``vectorized=None``) or ``vectorized=True/False`` says.
Otherwise draws are evaluated one by one. ``value_and_grad=f`` (optional) skips
autograd's trace where only gradients are needed (the Stein messages, the optimizers):
``f(*values, *data, weights)`` returns the weighted row sum of logp and its gradient in
each value (a network whose backward pass is written by hand, models/mlp.py); it is
checked against logp and autograd at the start of every fit.

Parents must be Normal or MultivariateNormal stochastic nodes (any plates); under
mean field each plate entry is an independent Gaussian, and the message keeps the
plate-diagonal blocks of H.
"""
from __future__ import annotations

import numpy as np

from ..families.multivariate_normal import MultivariateNormal as MVNFamily
from ..families.normal import Normal as NormalFamily
from .factors.base import Conditional, Slot
from .node import Node, Stochastic
from .potential_draws import _Parent, _sqrt_cov, standard_draws  # noqa: F401 (re-exported)

#: draws: max(MIN_SAMPLES, 2 n + 2) up to MAX_AUTO_SAMPLES unless ``samples=`` is given
MIN_SAMPLES = 64
MAX_AUTO_SAMPLES = 512
#: at most this many numbers (draws x rows) in one evaluation of logp (memory O(S N))
CHUNK = 4_000_000
_GAUSSIAN = (NormalFamily, MVNFamily)


class RowSource:
    """A Potential's memory-mapped data arrays, read block by block by ``fit("svi")`` /
    ``fit("sgd")`` (O(block) memory; the scheduler reads contiguous blocks in random
    order, as for a memory-mapped observed node)."""

    sequential = False
    dask = False

    def __init__(self, n):
        self.shape = (int(n),)


class PotentialFactor(Conditional):
    """The factor of a Potential: E[logp], its Bonnet/Price messages, by autograd."""

    conjugate = False

    def __init__(self, node, parents, logp, samples, seed, vectorized):
        self.logp = logp
        self.requested = None if samples is None else int(samples) + int(samples) % 2
        self.seed = seed
        self.vectorized = vectorized
        slots = [Slot(f"arg{i}", p.provides) for i, p in enumerate(parents)]
        super().__init__(node, parents, slots)
        self._z = None
        self._cache = None
        self._rows_cache = None
        self._point_cache = None

    @property
    def elbo_is_estimate(self):
        """E[logp] is a draw average unless every parent is a point mass (then exact)."""
        return not all(p.point for p in self.parents)

    def n_draws(self, n):
        """S for parents with n coordinates in all: ``samples=`` or max(64, 2 n + 2) <= 512."""
        if self.requested is not None:
            return self.requested
        S = min(max(MIN_SAMPLES, 2 * n + 2), MAX_AUTO_SAMPLES)
        return S + S % 2

    def _wrap(self, p, slot):
        where = self.node.label()
        if not isinstance(p, Node):
            raise TypeError(f"{where}: parents must be Normal or MultivariateNormal nodes, got "
                            f"{type(p).__name__}; put constants inside logp or pass them as data=")
        fam = p.provides
        if not isinstance(p, Stochastic) or not isinstance(fam, _GAUSSIAN) or isinstance(p, Potential):
            raise TypeError(f"{where}: parent {p.label()} must be a Normal or MultivariateNormal "
                            f"stochastic node (a deterministic node such as Dot or a gather has "
                            f"correlated entries; pass its source node and compute inside logp)")
        return p

    def plates(self):
        return ()

    def describe(self):
        fn = getattr(self.logp, "__name__", "logp")
        return f"Potential {fn}({', '.join(p.name for p in self.parents)})"

    def invalidate(self):
        """Forget the cached evaluations (the rows changed: a minibatch, new data)."""
        self._cache = None
        self._rows_cache = None
        self._point_cache = None

    def release(self):
        self.invalidate()
        self._z = None

    # ---- rows ----------------------------------------------------------------------
    def rows(self):
        """(data arrays of the rows that count, their weights or None): masked rows and
        rows of weight 0 are left out of every evaluation."""
        if self._rows_cache is None:
            node = self.node
            data = tuple(node.data)
            w = node.row_weights()
            if w is not None and data:
                keep = w != 0
                if not keep.all():
                    data = tuple(a[keep] for a in data)
                    w = w[keep]
                if np.all(w == 1.0):
                    w = None
            self._rows_cache = (data, w)
        return self._rows_cache

    # ---- draws -------------------------------------------------------------------
    def draws(self):
        """One :class:`_Parent` per parent; cached while the parents' moments are the same
        objects. With every parent a point mass there is one draw: the point."""
        moms = [p.moments() for p in self.parents]
        if self._cache is not None and all(a is b for a, b in zip(self._cache["moms"], moms)):
            return self._cache["parents"]
        points = all(p.point for p in self.parents)
        shapes = [(tuple(p.plates) + (np.shape(mom[0])[-1],)) if isinstance(p.provides, MVNFamily)
                  else tuple(p.plates) for p, mom in zip(self.parents, moms)]
        sizes = [int(np.prod(s, dtype=int)) for s in shapes]
        if points:
            z = np.zeros((1, sum(sizes)))
        else:
            S = self.n_draws(sum(sizes))
            if self._z is None or self._z.shape != (S, sum(sizes)):
                self._z = standard_draws(S, sum(sizes), self.seed)
            z = self._z
        cuts = np.cumsum([0] + sizes)
        out = [_Parent(p, mom, z[:, a:b]) for p, mom, a, b in
               zip(self.parents, moms, cuts[:-1], cuts[1:])]
        self._cache = {"moms": moms, "parents": out}
        return out

    # ---- evaluation --------------------------------------------------------------
    def _call(self, xs, data):
        return self.logp(*xs, *data)

    def _batched(self, xs, data):
        """Does logp accept a leading batch axis of draws? Decided once, by a probe on
        three (perturbed) draws compared with three single-draw calls."""
        if self.vectorized is not None:
            return self.vectorized
        probe = [np.stack([x[0] * (1.0 + 0.01 * s) + 0.01 * s for s in range(3)]) for x in xs]
        try:
            vals = np.asarray(self._call(probe, data), dtype=float)
            one = np.stack([np.asarray(self._call([x[s] for x in probe], data), dtype=float)
                            for s in range(3)])
            ok = vals.shape == one.shape and np.allclose(vals, one, rtol=1e-10, atol=1e-10)
        except Exception:  # noqa: BLE001 -- any failure means "not batch-aware"
            ok = False
        self.vectorized = bool(ok)
        return self.vectorized

    def user_value_and_grad(self, xs, data, w):
        """(totals, gradients) from ``Potential(value_and_grad=f)``: f(*xs, *data, w) with
        w the rows' weights (None: every row once); totals shaped like the values' leading
        axes of draws, one gradient per parent shaped like its values."""
        total, grads = self.node.value_and_grad(*xs, *data, w)
        return np.asarray(total, dtype=float), [np.asarray(g, dtype=float) for g in grads]

    def _totals(self, xs, data, w, anp):
        """Per draw, the weighted sum of the rows' log-factors (an autograd expression)."""
        v = self._call(xs, data)
        if not data:
            return v
        return anp.sum(v if w is None else v * w, axis=-1)

    def _means(self):
        """Each parent's mean, shaped like its value (plates + event): no draws are made
        (a delta-method fit never needs them)."""
        out = []
        for p in self.parents:
            m = np.asarray(p.moments()[0], dtype=float)
            shape = tuple(p.plates) + (m.shape[-1:] if isinstance(p.provides, MVNFamily) else ())
            out.append(np.array(np.broadcast_to(m, shape)))
        return out

    def check_fit(self, method="fit"):
        """Refuse a logp (or value_and_grad) of the wrong shape, not finite, or disagreeing
        with autograd at the start, naming the node and the fix (:mod:`.potential_checks`)."""
        from .potential_checks import check_fit
        check_fit(self, method)

    def _chunks(self, S, N):
        """Slices of the draws so that draws x rows stays under CHUNK."""
        c = max(1, CHUNK // max(N, 1))
        return [slice(a, min(a + c, S)) for a in range(0, S, c)]

    def value_and_grads(self):
        """(E[logp], per parent the gradients at every draw, (S,) + value shape), cached
        while the parents' moments are the same objects: one forward and one reverse pass
        over all draws and rows (in chunks of at most ``CHUNK`` numbers)."""
        import autograd.numpy as anp
        from autograd import make_vjp
        ps = self.draws()
        if "grads" in self._cache:
            return self._cache["value"], self._cache["grads"]
        data, w = self.rows()
        xs = [p.x for p in ps]
        S = xs[0].shape[0]
        if self._batched(xs, data):
            N = len(data[0]) if data else 1
            pieces = [[x[sl] for x in xs] for sl in self._chunks(S, N)]
            one = False
        else:
            pieces = [[x[s] for x in xs] for s in range(S)]
            one = True
        vals, grads = [], [[] for _ in xs]
        user = self.node.value_and_grad is not None
        for part in pieces:
            if user:
                v, g = self.user_value_and_grad(part, data, w)
            else:
                vjp, v = make_vjp(lambda a: self._totals(list(a), data, w, anp))(tuple(part))
                g = vjp(np.ones_like(v))
            vals.append(np.atleast_1d(np.asarray(v, dtype=float)))
            for k, gk in enumerate(g):
                gk = np.asarray(gk, dtype=float)
                grads[k].append(gk[None] if one else gk)
        values = np.concatenate(vals)
        if values.shape != (S,):
            raise ValueError(f"{self.node.label()}: logp returned {values.size // S} values per "
                             f"draw; it must return one number per draw"
                             + (" after summing the rows" if data else ""))
        self._cache["value"] = float(np.mean(values))
        self._cache["grads"] = [np.concatenate(gk) for gk in grads]
        return self._cache["value"], self._cache["grads"]

    def expected_loglik(self, x, u):
        if self.elbo_is_estimate:
            return self.value_and_grads()[0]
        return self.point_value()

    def point_value(self):
        """logp at the point (every parent a point mass): one forward pass at the
        parents' means, no draws and no gradient (cached while the parents' moments
        are the same objects)."""
        moms = [p.moments() for p in self.parents]
        pc = self._point_cache
        if pc is not None and all(a is b for a, b in zip(pc[0], moms)):
            return pc[1]
        import autograd.numpy as anp
        data, w = self.rows()
        xs = self._means()
        if self._batched([x[None] for x in xs], data):
            v = self._totals([x[None] for x in xs], data, w, anp)
        else:
            v = self._totals(xs, data, w, anp)
        value = float(np.mean(np.asarray(v, dtype=float)))
        self._point_cache = (moms, value)
        return value

    def _exact_hessian(self, k):
        """E over the draws of the exact Hessian of logp in parent k, (n, n), from
        reverse-over-reverse passes over copies of each draw (in chunks)."""
        import autograd
        import autograd.numpy as anp
        ps = self.draws()
        data, w = self.rows()
        xs = [p.x for p in ps]
        S, n, shape = xs[0].shape[0], ps[k].n, ps[k].shape
        if not self._batched(xs, data):
            H = np.zeros((n, n))
            for s in range(S):
                def f(xk, s=s):
                    full = [x[s] for x in xs]
                    full[k] = xk
                    return anp.sum(self._totals(full, data, w, anp))
                H += np.asarray(autograd.hessian(f)(xs[k][s]), dtype=float).reshape(n, n)
            return H / S
        N = len(data[0]) if data else 1
        c = max(1, min(n, CHUNK // max(N * S, 1)))
        H = np.zeros((n, n))
        for j0 in range(0, n, c):
            cols = np.arange(j0, min(j0 + c, n))
            E = np.zeros((S, len(cols), n))
            E[:, np.arange(len(cols)), cols] = 1.0
            E = E.reshape((S * len(cols),) + shape)
            rep = [np.repeat(x, len(cols), axis=0) for x in xs]

            def grad_sum(xk):
                full = list(rep)
                full[k] = xk
                return anp.sum(self._totals(full, data, w, anp))

            gfun = autograd.grad(grad_sum)
            rows = autograd.grad(lambda xk: anp.sum(gfun(xk) * E))(rep[k])
            H[cols] = np.asarray(rows, dtype=float).reshape(S, len(cols), n).mean(0)
        return H

    def grad_hess(self, k):
        """(E[grad], plate-diagonal blocks of E[hess]) of logp in parent k: Normal parent
        (plates, plates); MVN parent (plates + (D,), plates + (D, D))."""
        ps = self.draws()
        p = ps[k]
        _, grads = self.value_and_grads()
        G = grads[k]
        S = G.shape[0]
        n_pl, D = p.n // p.D, p.D
        if self.parents[k].point:
            H = self._exact_hessian(k).reshape(n_pl, D, n_pl, D)
            H = H[np.arange(n_pl), :, np.arange(n_pl), :]
        else:  # Stein: E[hess] = E[grad (x - m)^T] Sigma^{-1}, per plate entry, with the
            # draws' own covariance (a regression of grad on x - m: exact for a quadratic)
            Gr = G.reshape(S, n_pl, D)
            dx = (p.x - p.m).reshape(S, n_pl, D)
            C = np.einsum("spi,spj->pij", Gr, dx) / S
            Sig = np.einsum("spi,spj->pij", dx, dx) / S
            H = C @ np.linalg.pinv(Sig, hermitian=True)
        H = 0.5 * (H + np.swapaxes(H, -1, -2))
        g = G.mean(0)
        if p.mvn:
            return g, H.reshape(p.shape + (D,))
        return g, H.reshape(p.shape)

    def message(self, i, x, u, w, target):
        g, H = self.grad_hess(i)
        m = self.draws()[i].m
        if isinstance(self.parents[i].provides, MVNFamily):
            return (g - np.einsum("...ij,...j->...i", H, m), 0.5 * H)
        return (g - H * m, 0.5 * H)


class Potential(Stochastic):
    """Potential(logp, *parents, data=None, mask=None, weights=None, name=None,
    samples=None, seed=0, vectorized=None, per_row=None, value_and_grad=None).

    A user log-factor written with autograd.numpy over Normal / MultivariateNormal
    nodes; see the module docstring. ``data=(A1, A2, ...)``: arrays whose leading axis
    is the rows; then ``logp(*values, *data)`` returns one log-factor per row (shape
    (rows,)), ``mask`` (bool per row, True = use) and ``weights`` (counts per row) weight
    them, and rows holding NaN are masked. The non-conjugate methods accept it
    (``fit("ncvmp")``, ``"laplace"``, ``"gd"``, ``"map"``, and on minibatches ``"svi"``,
    ``"sgd"``, ``"adam"``, ``"ogn"``, ``"vogn"``, ``"ivon"``). ``per_row(*values, *data)``
    (optional) is logp with one copy of each value per data row (leading axis the rows),
    returning (rows,): the per-row gradients of fit("vogn"/"ogn") in one reverse pass.

    ``value_and_grad(*values, *data, weights)`` (optional) returns ``(total, grads)``:
    total = sum over the rows of weights_r * logp_r (weights: None when every row
    counts once, else one per row; the data and weights are those of the rows in use,
    a minibatch's), shaped like the values' leading axes of draws (() for one draw),
    and grads one gradient of total per parent, shaped like that parent's values. It
    takes the values as logp does (with a leading axis of draws when logp takes one).
    The gradients of the Stein messages and of fit("adam"/"ogn"/"vogn"/"ivon") then come
    from it instead of autograd's trace of logp (logp still gives the values and the
    Hessians of point masses). At the start of each fit it is checked against logp
    (the total to 1e-8) and autograd's gradient of logp (to 1e-6 relative; a central
    difference when autograd cannot trace logp) at the prior mean and at a point off it:
    a mismatch is a ValueError naming the node."""

    def __init__(self, logp, *parents, data=None, mask=None, weights=None, name=None,
                 samples=None, seed=0, vectorized=None, per_row=None, value_and_grad=None):
        Node.__init__(self, name, ())
        if not callable(logp):
            raise TypeError(f"{self.label()}: the first argument must be a function logp(*values) "
                            f"written with autograd.numpy, got {type(logp).__name__}")
        if not parents:
            raise ValueError(f"{self.label()}: give the parent nodes, Potential(logp, w, ...)")
        if len(set(map(id, parents))) != len(parents):
            raise ValueError(f"{self.label()}: a parent is passed twice; pass it once and use the "
                             f"value twice inside logp")
        if samples is not None and (isinstance(samples, bool) or not isinstance(
                samples, (int, np.integer)) or samples < 2):
            raise ValueError(f"{self.label()}: samples must be an integer >= 2 (or None for "
                             f"max({MIN_SAMPLES}, 2 n + 2)), got {samples!r}")
        if vectorized not in (None, True, False):
            raise TypeError(f"{self.label()}: vectorized must be None, True or False, got "
                            f"{vectorized!r}")
        if per_row is not None and not callable(per_row):
            raise TypeError(f"{self.label()}: per_row must be a function per_row(*values, *data) "
                            f"whose values carry one copy per data row, got {type(per_row).__name__}")
        if value_and_grad is not None and not callable(value_and_grad):
            raise TypeError(f"{self.label()}: value_and_grad must be a function "
                            f"value_and_grad(*values, *data, weights) -> (weighted row sum of "
                            f"logp, [gradient in each value]), got {type(value_and_grad).__name__}")
        self.per_row = per_row
        self.value_and_grad = value_and_grad
        self.family = None
        self.provides = None
        data, mask, weights, streamed = self._check_data(data, mask, weights)
        self.factor = PotentialFactor(self, list(parents), logp, samples, seed, vectorized)
        for p in self.factor.parents:
            self.parents.append(p)
            p._add_child(self)
        self._init_state(observed=True)  # a factor of the data: never scheduled, no posterior
        self.data, self.mask, self.weights = data, mask, weights
        self.replicates = None
        self.plates = (len(data[0]),) if data else ()
        self.source = RowSource(len(data[0])) if streamed else None
        self._full_data = data

    def _check_data(self, data, mask, weights):
        """Data arrays with one leading row axis; NaN rows masked; mask/weights per row."""
        if data is None:
            if mask is not None or weights is not None:
                raise ValueError(f"{self.label()}: mask= and weights= weight data rows; pass "
                                 f"data=(...) too")
            return (), None, None, False
        if not isinstance(data, (tuple, list)):
            data = (data,)
        if not data:
            raise ValueError(f"{self.label()}: data=() holds no array; pass data=(X, y) or omit it")
        if any(isinstance(a, np.memmap) for a in data):
            return self._check_streamed(data, mask, weights)
        arrays = []
        for i, a in enumerate(data):
            try:
                arr = np.asarray(a, dtype=float)
            except (TypeError, ValueError):
                raise TypeError(f"{self.label()}: data[{i}] must be a numeric array, got "
                                f"{type(a).__name__}") from None
            if arr.ndim == 0:
                raise ValueError(f"{self.label()}: data[{i}] is a scalar; every data array has the "
                                 f"rows on its leading axis (put constants inside logp)")
            arrays.append(arr)
        N = {a.shape[0] for a in arrays}
        if len(N) != 1:
            shapes = ", ".join(f"data[{i}]: {a.shape}" for i, a in enumerate(arrays))
            raise ValueError(f"{self.label()}: the data arrays have different numbers of rows "
                             f"({shapes}); every array holds one entry per row on its leading axis")
        N = N.pop()
        if N == 0:
            raise ValueError(f"{self.label()}: the data have no rows")
        if np.any(np.isinf(np.concatenate([a.reshape(N, -1) for a in arrays], axis=1))):
            raise ValueError(f"{self.label()}: the data hold inf; remove or mask those rows")
        bad = np.zeros(N, dtype=bool)
        for a in arrays:
            bad |= np.isnan(a.reshape(N, -1)).any(axis=1)
        if mask is not None:
            m = np.asarray(mask)
            if m.shape != (N,) or m.dtype != bool:
                raise ValueError(f"{self.label()}: mask must be a bool array of shape ({N},) (True = "
                                 f"use the row), got {m.dtype} {m.shape}")
            mask = m.copy()
        if bad.any():
            mask = (~bad) if mask is None else (mask & ~bad)
            arrays = [np.where(np.isnan(a), 0.0, a) if np.isnan(a).any() else a for a in arrays]
        if weights is not None:
            wt = np.asarray(weights, dtype=float)
            if wt.shape != (N,) or not np.all(np.isfinite(wt)) or np.any(wt < 0):
                raise ValueError(f"{self.label()}: weights must be finite counts >= 0, one per row "
                                 f"(shape ({N},)), got shape {wt.shape}")
            weights = wt
        return tuple(arrays), mask, weights, False

    def _check_streamed(self, data, mask, weights):
        """Memory-mapped data: kept as handles, each block validated when it is read."""
        if mask is not None or weights is not None:
            raise ValueError(f"{self.label()}: streamed (memory-mapped) data take no mask= or "
                             f"weights=; load the data into memory to mask or weight rows")
        N = {np.shape(a)[0] if np.ndim(a) else None for a in data}
        if len(N) != 1 or None in N:
            shapes = ", ".join(f"data[{i}]: {np.shape(a)}" for i, a in enumerate(data))
            raise ValueError(f"{self.label()}: the data arrays have different numbers of rows "
                             f"({shapes}); every array holds one entry per row on its leading axis")
        return tuple(data), None, None, True

    def read_batch(self, rows):
        """Rows ``rows`` of streamed data as float arrays; rows holding NaN are masked (a
        per-row mask of the block), inf is refused naming the source's row."""
        rows = np.asarray(rows)
        block = []
        for i, a in enumerate(self._full_data):
            try:
                block.append(np.asarray(a[rows], dtype=float))
            except (TypeError, ValueError):
                raise TypeError(f"{self.label()}: data[{i}] is not numeric") from None
        N = len(rows)
        flat = np.concatenate([b.reshape(N, -1) for b in block], axis=1)
        if np.isinf(flat).any():
            r = int(rows[int(np.argmax(np.isinf(flat).any(axis=1)))])
            raise ValueError(f"{self.label()}: row {r} of the streamed data holds inf; remove it")
        bad = np.isnan(flat).any(axis=1)
        if bad.any():
            block = [np.where(np.isnan(b), 0.0, b) for b in block]
            return tuple(block), ~bad
        return tuple(block), None

    def row_weights(self):
        """Per-row weight mask x weights (None: every row counts once)."""
        if self.mask is None:
            return self.weights
        m = self.mask.astype(float)
        return m if self.weights is None else m * self.weights

    # ---- views of some rows (minibatches) -------------------------------------------
    def restrict(self, rows, cut, source_rows=None):
        state = Node.restrict(self, rows, cut)
        state.update(data=self.data, mask=self.mask, weights=self.weights)
        if self.source is not None:
            self.data, self.mask = self.read_batch(rows)
        else:
            self.data = tuple(cut(a, rows) for a in self.data)
            self.mask = cut(self.mask, rows)
        self.weights = cut(self.weights, rows)
        self.factor.invalidate()
        return state

    def restore(self, state):
        Node.restore(self, state)
        self.factor.invalidate()

    def aligned_plates(self, parent):
        return tuple(parent.plates)

    def observe(self, data, mask=None, weights=None):
        raise TypeError(f"{self.label()} is a log-factor; give its data at construction, "
                        f"Potential(logp, w, data=(X, y))")

    def moments(self):
        raise TypeError(f"{self.label()} is a log-factor with no value; it cannot be a parent")

    def child_data(self):
        return None

    def set_natural(self, nat):
        raise TypeError(f"{self.label()} is a log-factor; it has no natural parameters")

    def prior_natural(self):
        return ()

    def release(self):
        self.factor.release()

    @property
    def posterior(self):
        raise AttributeError(f"{self.label()} is a log-factor; it has no posterior (look at its "
                             f"parents' posteriors)")

    def message_to(self, parent):
        return self.factor.message(self.factor.parents.index(parent), None, None, None,
                                   parent.plates)

    def elbo_term(self):
        """E_q[logp] (the draws' average; the value at the point for point masses)."""
        return self.factor.expected_loglik(None, None)

    def __repr__(self):
        rows = f", {self.plates[0]} rows" if self.plates else ""
        return f"<{self.label()} over {[p.name for p in self.parents]}{rows}>"

