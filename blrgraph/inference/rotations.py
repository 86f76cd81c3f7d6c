"""Rotations of products of latent vectors (parameter expansion; docs/latent_products.md,
"Rotations"; Luttinen & Ilin 2010, as BayesPy's ``RotateGaussianARD``).

In ``Dot(W, x)`` the product w_d . x_n is unchanged when x -> R x and w -> R^{-T} w for
any invertible K x K matrix R, and so is every moment the Dot publishes
(E[w]^T E[x] and tr(E[w w^T] E[x x^T])): the data's terms of the ELBO do not move. What
moves are the terms of the two operands (their priors and entropies) and of an ARD
precision over one of them, whose optimal q is closed form. VMP updates W and x one at
a time, so it follows the long, curved valley of equivalent rotations very slowly; this
step jumps along it: the R that maximises

    f(R) = n_x log|det R| - n_w log|det R|                    (the entropies)
           + g_x(R) + g_w(R^{-T})                             (the priors)

with, for an operand v with n entries, S = sum_n E[v_n v_n^T] and transform T,

    g(T) = -1/2 tr(L T S T^T)                                 prior N(0, L^{-1}), L fixed
    g(T) = -sum_k a_k log(b0_k + 1/2 (T S T^T)_kk)             prior N(0, diag(alpha)^{-1}),
                                                              alpha_k ~ Gamma(a0_k, b0_k)
                                                              collapsed: a_k = a0_k + n/2
    g(T) = -a log(b0 + 1/2 tr(T S T^T))                       one alpha for all K, a = a0 + nK/2

(minus its value at R = I, so f(I) = 0) by L-BFGS on f and its analytic gradient, from
R = I. The ARD precision first takes its closed-form (VMP) update at R = I, then, after
the rotation, at the rotated loadings; f is exactly the ELBO's change between the two.
A step whose optimum does not improve the ELBO leaves q as it is, so the ELBO never
decreases.

The step is declared in the plan (:attr:`~blrgraph.inference.loop.Plan.between_sweeps`:
after every sweep but the last, so that the state a fit reports is a sweep's, every local
q optimal given the rest) by :func:`plan_rotations` wherever the structure is recognised
(:func:`find_rotations`):
``Dot`` of two latent MultivariateNormal nodes, each read only by that Dot, each with a
zero prior mean and either a fixed precision matrix (the same for every entry) or a Gamma
precision (plates (K,) or ()) with fixed parameters read only by that operand; no masked
entries or counts on the operands, no point masses, every row in memory.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from scipy.linalg.lapack import dgetrf as _getrf, dgetri as _getri, dtrtrs as _trtrs

from ..graph.bilinear import plan_of
from ..graph.node import Constant
from .blr import blr_step

#: L-BFGS iterations per rotation (BayesPy: 10 of CG; ours are cheaper and a sweep of
#: 2000 x 50, K = 10 gains more from 30: docs/benchmarks.md)
MAXITER = 30


class _Side:
    """One operand of the Dot and its prior: its transform is R (``inverse=False``) or
    R^{-T} (``inverse=True``)."""

    def __init__(self, node, inverse, kind, L=None, alpha=None):
        self.node, self.inverse, self.kind = node, inverse, kind
        self.L, self.alpha = L, alpha
        self.identity = L is not None and np.array_equal(L, np.eye(len(L)))
        self.n = int(np.prod(node.plates, dtype=int))
        self.K = np.shape(node.nat[0])[-1]
        if alpha is not None:
            a0, b0 = (np.asarray(v, dtype=float) for v in alpha.prior_natural())
            a0, b0 = a0 + 1.0, -b0
            per = self.n if kind == "ard" else self.n * self.K
            self.a = np.broadcast_to(a0 + 0.5 * per, alpha.plates).copy()
            self.b0 = np.broadcast_to(b0, alpha.plates).copy()

    def second_moment(self):
        """S = sum over entries of E[v v^T] (with a covariance shared by every entry, as the
        scores without missing cells: n Sigma + sum E[v] E[v]^T, no (n, K, K) stack)."""
        fam, nat = self.node.family, self.node.nat
        shared = fam.shared_covariance(nat)
        if shared is not None:
            m, cov = shared
            m = np.reshape(m, (-1, self.K))
            return self.n * np.reshape(cov, (self.K, self.K)) + m.T @ m
        return np.reshape(self.node.moments()[1], (-1, self.K, self.K)).sum(axis=0)

    def prior(self, T, S):
        """(g(T), dg/dT) of the docstring's table (without the entropy)."""
        TS = T @ S
        if self.kind == "fixed":
            LT = TS if self.identity else self.L @ TS
            return -0.5 * float((LT * T).sum()), -LT
        if self.kind == "ard":
            b = self.b0 + 0.5 * (TS * T).sum(1)
            return -float(self.a @ np.log(b)), -(self.a / b)[:, None] * TS
        a = float(np.reshape(self.a, -1)[0])
        b = float(np.reshape(self.b0, -1)[0]) + 0.5 * float(np.sum(TS * T))
        return -a * np.log(b), -(a / b) * TS

    def apply(self, Tinv):
        """q(v) -> q(T v): lam1 -> T^{-T} lam1, lam2 -> T^{-T} lam2 T^{-1} (a precision shared
        by every entry stays one broadcast matrix)."""
        lam1, lam2 = (np.asarray(a) for a in self.node.nat)
        new1 = lam1 @ Tinv
        k = lam2.ndim - 2
        if k > 0 and all(st == 0 or n == 1 for st, n in zip(lam2.strides[:k], lam2.shape[:k])):
            one = Tinv.T @ lam2[(0,) * k] @ Tinv
            new2 = np.broadcast_to(0.5 * (one + one.T), lam2.shape)
        else:
            new2 = Tinv.T @ lam2 @ Tinv
            new2 = 0.5 * (new2 + np.swapaxes(new2, -1, -2))
        self.node.set_natural((new1, new2))


class Rotation:
    """The rotation step of one ``Dot(W, x)``: ``step(model)`` optimises R, rotates q and
    updates the ARD precisions; returns the ELBO's change (>= 0)."""

    def __init__(self, dot, x, w, maxiter=None):
        self.dot, self.x, self.w = dot, x, w    # x -> R x, w -> R^{-T} w
        self.maxiter = maxiter                  # None: MAXITER

    def __repr__(self):
        return f"Rotation({self.dot.name}: {self.x.node.name} -> R x, {self.w.node.name} -> R^-T w)"

    @property
    def alphas(self):
        return [s.alpha for s in (self.x, self.w) if s.alpha is not None]

    def stats(self):
        """(S_x, S_w): the Dot's own sums of E[v v^T] over each operand's entries when it has
        a matrix plan (graph/bilinear.py: computed once per q, the sweep's last ELBO read
        them), else computed here."""
        plan = plan_of(self.dot)
        if plan is None:
            return self.x.second_moment(), self.w.second_moment()
        ops = self.dot.operands
        return tuple(plan.stats(self.dot, 0 if s.node is ops[0] else 1)[1]
                     for s in (self.x, self.w))

    def cost(self, R, stats, base=None):
        """(f(R), df/dR): the ELBO's change when q is rotated by R (ARD precisions at their
        optimum before and after; f(I) = 0). ``base``: the prior terms at R = I, if known."""
        Sx, Sw = stats
        lu, piv, info = _getrf(R)     # one LU factorisation: log|det R| and R^{-1}
        if info != 0:                 # (an exactly zero pivot: R is singular)
            return -np.inf, np.zeros_like(R)
        logdet = float(np.log(np.abs(lu.diagonal())).sum())
        Rinv, info = _getri(lu, piv)
        if info != 0 or not math.isfinite(logdet):
            return -np.inf, np.zeros_like(R)
        if base is None:
            base = self.base(stats)
        RiT = Rinv.T
        gx, Gx = self.x.prior(R, Sx)
        gw, Gw = self.w.prior(RiT, Sw)
        n = self.x.n - self.w.n
        f = n * logdet + (gx + gw - base)
        # d/dR of g(R^{-T}) with G = dg/dT: -R^{-T} G^T R^{-T}
        grad = n * RiT + Gx - RiT @ (Gw.T @ RiT)
        return f, grad

    def base(self, stats):
        """The prior terms at R = I."""
        I = np.eye(stats[0].shape[0])
        return self.x.prior(I, stats[0])[0] + self.w.prior(I, stats[1])[0]

    def optimise(self, stats, maxiter=None):
        """(R, f(R)) by L-BFGS from R = I (R = I and 0 when nothing better is found), in
        the coordinates B = R P with P = (S_x / n_x)^{1/2}, where the x side's prior term
        is isotropic (tr(R S_x R^T) = n_x tr(B B^T))."""
        Sx = stats[0]
        K = Sx.shape[0]
        e, U = np.linalg.eigh(Sx / max(self.x.n, 1))
        if not np.all(e > 1e-12 * e.max()):
            P = Pi = np.eye(K)
        else:
            P, Pi = (U * np.sqrt(e)) @ U.T, (U / np.sqrt(e)) @ U.T
        base = self.base(stats)

        def neg(b):
            f, g = self.cost(b.reshape(K, K) @ Pi, stats, base)
            return -f, -(g @ Pi).ravel()

        if maxiter is None:
            maxiter = MAXITER if self.maxiter is None else self.maxiter
        scale = abs(base) + (self.x.n + self.w.n) * K + 1.0
        b = lbfgs(neg, P.ravel(), int(maxiter), scale=scale)
        R = b.reshape(K, K) @ Pi
        f = self.cost(R, stats, base)[0]
        if not np.isfinite(f) or f <= 0.0:
            return np.eye(K), 0.0
        return R, f

    def step(self, model, gain=True):
        """Update the ARD precisions, rotate by the optimal R, update them again; returns
        the ELBO's change (``gain=False``, as the loop runs it: the rotation's part f only,
        without evaluating the ELBO terms the precisions' first update changes)."""
        total = 0.0
        for alpha in self.alphas:    # the closed-form update at R = I (its ELBO gain)
            if not gain:
                blr_step(model, alpha, 1.0)
                continue
            child = self.x.node if self.x.alpha is alpha else self.w.node
            before = alpha.elbo_term() + child.elbo_term()
            blr_step(model, alpha, 1.0)
            total += alpha.elbo_term() + child.elbo_term() - before
        R, f = self.optimise(self.stats())
        if f > 0.0:
            self.x.apply(np.linalg.inv(R))
            self.w.apply(R.T)
            for alpha in self.alphas:
                blr_step(model, alpha, 1.0)
        return total + f


def lbfgs(fun, x, maxiter, memory=10, scale=1.0):
    """Minimise ``fun`` (x -> (value, gradient)) from ``x`` by L-BFGS (backtracking line
    search on the Armijo condition; a non-finite value is a failed trial); at most
    ``maxiter`` iterations. It stops early when the decrease the step predicts is below the
    rounding of values of size ``scale`` (the cost is a difference of terms that large).
    Returns the last accepted point.

    The direction -H g is that of the two-loop recursion (H_0 = gamma I, gamma = s^T y /
    y^T y of the last pair) in its compact form (Byrd, Nocedal & Schnabel 1994, eq. 3.2):
    with the pairs as rows of S and Y, A = S Y^T, its upper triangle U and diagonal D,

        H g = gamma g + S^T p + gamma Y^T q,   q = -U^{-1} (S g),
        p = U^{-T} ((D + gamma Y Y^T) U^{-1} (S g) - gamma Y g),

    a few small matrix products per iteration instead of 4 m vector operations."""
    f, g = fun(x)
    if not np.isfinite(f):
        return x
    S, Y = [], []     # the last ``memory`` pairs (s, y) with s^T y > 0
    for it in range(maxiter):
        if S:
            d = -_hg(np.array(S), np.array(Y), g)
        else:
            d = -g * (0.1 / max(np.linalg.norm(g), 1e-300))   # a first step of length 0.1
        slope = g @ d
        if not slope < 0.0:
            S, Y = [], []
            d = -g * (0.1 / max(np.linalg.norm(g), 1e-300))
            slope = g @ d
        if -slope <= 1e-13 * scale:
            return x
        step = 1.0
        while True:
            xn = x + step * d
            fn, gn = fun(xn)
            if np.isfinite(fn) and fn <= f + 1e-4 * step * slope:
                break
            step *= 0.5
            if -step * slope <= 1e-13 * scale:
                return x
        s, y = xn - x, gn - g
        sy = s @ y
        if sy > 1e-12 * np.sqrt((s @ s) * (y @ y)):
            S.append(s)
            Y.append(y)
            if len(S) > memory:
                del S[0], Y[0]
        x, f, g = xn, fn, gn
    return x


def _hg(S, Y, g):
    """The L-BFGS product H g of the pairs (rows of S, Y) in compact form (:func:`lbfgs`)."""
    s, y = S[-1], Y[-1]
    gamma = (s @ y) / (y @ y)
    A = S @ Y.T                                           # (its upper triangle is U)
    u = _trsv(A, S @ g)                                   # U^{-1} S g
    r = A.diagonal() * u + gamma * (Y @ (Y.T @ u) - Y @ g)
    p = _trsv(A, r, trans=1)                              # U^{-T} (...)
    return gamma * g + p @ S - gamma * (u @ Y)


def _trsv(U, b, trans=0):
    """U^{-1} b (trans=1: U^{-T} b) for U the upper triangle of ``U`` (LAPACK's trtrs reads
    nothing below the diagonal)."""
    return _trtrs(U, b, lower=0, trans=trans)[0]


def _zero_mean(node):
    p = node.factor.parents[0]
    return isinstance(p, Constant) and not np.any(p.moments()[0])


def _side(model, node, dot, inverse):
    """The operand ``node`` as a rotatable side, or None."""
    from ..graph.factors.gaussian import DiagonalGammaFactor, MultivariateNormalFactor
    from ..graph.factors.positive import GammaFactor
    if not node.stochastic or node.observed or model.children.get(node) != [dot]:
        return None
    if node.replicates is not None or node.family.shift is not None or \
            node.observed_entries() is not None or not _zero_mean(node):
        return None
    K = np.shape(node.nat[0])[-1]
    f = node.factor
    if type(f) is MultivariateNormalFactor and isinstance(f.parents[1], Constant):
        L = np.asarray(f.parents[1].value, dtype=float)   # the fixed precision (not the
        if L.shape[-2:] != (K, K):                           # prior's stack over the entries)
            return None
        L = np.reshape(L, (-1, K, K))
        if not np.all(L == L[0]):
            return None
        return _Side(node, inverse, "fixed", L=L[0])
    if type(f) is DiagonalGammaFactor:
        alpha = f.parents[1]
        if not alpha.stochastic or alpha.observed or type(alpha.factor) is not GammaFactor or \
                model.children.get(alpha) != [node] or \
                not all(isinstance(p, Constant) for p in alpha.factor.parents) or \
                alpha.replicates is not None or np.ndim(alpha.factor.shape) > len(alpha.plates):
            return None
        if tuple(alpha.plates) == (K,):
            return _Side(node, inverse, "ard", alpha=alpha)
        if tuple(alpha.plates) in ((), (1,)):
            return _Side(node, inverse, "iso", alpha=alpha)
        return None
    return None


def find_rotations(model):
    """A :class:`Rotation` for every ``Dot`` of two latent vectors whose structure is
    recognised (module docstring); nodes are in at most one rotation."""
    from ..graph.deterministic import Dot
    out, used = [], set()
    for d in model.nodes:
        if not isinstance(d, Dot) or getattr(d, "X", 0) is not None or d not in model.graph:
            continue
        # the operand with more entries (then the earlier in the model) takes R: the same
        # step for Dot(W, x) and Dot(x, W)
        a, b = sorted(d.operands, key=lambda n: (-int(np.prod(n.plates, dtype=int)),
                                                  model.nodes.index(n)))
        if a in used or b in used:
            continue
        x, w = _side(model, a, d, False), _side(model, b, d, True)
        if x is None or w is None:
            continue
        if any(s.alpha is not None and s.alpha in used for s in (x, w)):
            continue
        out.append(Rotation(d, x, w))
        used.update((a, b) + tuple(s.alpha for s in (x, w) if s.alpha is not None))
    return out


def plan_rotations(model, method, opts, points, on_dask):
    """The rotation steps of a run (``fit(rotate=True)``, the default): batch methods on
    rows in memory, with no point masses; the rest of the loop is unchanged."""
    if opts.rotate is False or method.stochastic or method.one_pass or on_dask or points or \
            method.update != "natural":
        return ()
    return tuple(functools.partial(r.step, gain=False) for r in find_rotations(model))
