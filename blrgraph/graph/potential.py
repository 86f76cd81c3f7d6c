"""Potential(logp, *parents): a user log-factor over Gaussian nodes (NCVMP by autograd).

    w = bg.MultivariateNormal(np.zeros(D), np.eye(D), name="w")
    def loglik(w):                                 # autograd.numpy, one draw or a batch
        a = w @ X.T                                # (..., N)
        return anp.sum(y * a - anp.logaddexp(0.0, a), axis=-1)
    lik = bg.Potential(loglik, w, name="lik")
    bg.Model(lik).fit("ncvmp")

Design. A Potential is a factor with no variable of its own. It is a node of the
graph (so ``Model(lik)`` finds its parents) and counts as *observed* data: it is
never scheduled, it has no posterior, it contributes E_q[logp] to the ELBO and
sends each parent the natural-gradient (mu-gradient) message of docs/math.md §4.1:

    g = E_q[grad logp],  H = E_q[hess logp]         (Bonnet / Price)
    message = (g - H m, H / 2)                      (in T-coordinates (x, x x^T))

It subclasses ``Stochastic`` only so the engine's bookkeeping (``observed``,
``factor``, ``message_to``, ``elbo_term``) applies unchanged; it has no family,
no data, and cannot be a parent (``moments()`` raises).

Expectations are Monte Carlo over *fixed* draws (common random numbers): for each
parent ``samples`` antithetic standard-normal draws (z, -z), seeded by ``seed``,
drawn once; at every iteration x = m + chol(Sigma) z. The estimate is then a
smooth deterministic function of q, so the damped BLR iteration has a fixed
point and the ELBO trace is not noisy; the fixed point differs from the exact
one by the Monte Carlo error only. Gradients and Hessians come from autograd.

Speed. ``logp`` receives one array per parent, shaped like the parent's value
(plates + event). If it also accepts a leading batch axis (write it with ``...``
and ``axis=-1``, returning shape (S,) for a batch of S draws), all draws are
evaluated at once; this is detected by a probe (``vectorized=None``), or can be
forced with ``vectorized=True/False``. Otherwise draws are evaluated one by one
(slow for thousands of draws). The Hessian costs one reverse pass per coordinate
of the parent (plates x D); beyond ``EXACT_HESSIAN_MAX`` coordinates the
plate-diagonal blocks are estimated from gradients only (Stein's lemma,
E[hess f] = E[grad f (x - m)^T] Sigma^{-1}, with Sigma the draws' own covariance
so that a quadratic logp is exact; symmetrised).

Parents must be Normal or MultivariateNormal stochastic nodes (any plates); under
mean field each plate entry is an independent Gaussian, and the message keeps
the plate-diagonal blocks of H. A point-mass parent (EM) has zero covariance, so
the expectations become evaluations at the point: the delta method (Newton).
"""
from __future__ import annotations

import numpy as np

from ..families.multivariate_normal import MultivariateNormal as MVNFamily
from ..families.normal import Normal as NormalFamily
from .factors.base import Conditional, Slot
from .node import Node, Stochastic

DEFAULT_SAMPLES = 2000
EXACT_HESSIAN_MAX = 100
_GAUSSIAN = (NormalFamily, MVNFamily)


def _sqrt_cov(cov):
    """A square root L (L L^T = cov) of a PSD stack: Cholesky, else a clipped eigh."""
    cov = 0.5 * (cov + np.swapaxes(cov, -1, -2))
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        lam, V = np.linalg.eigh(cov)
        return V * np.sqrt(np.maximum(lam, 0.0))[..., None, :]


class PotentialFactor(Conditional):
    """The factor of a Potential: E[logp], its Bonnet/Price messages, by autograd."""

    conjugate = False
    elbo_is_estimate = True   # E[logp] by fixed Monte Carlo draws (see fit._Damping)

    def __init__(self, node, parents, logp, samples, seed, vectorized):
        self.logp = logp
        self.samples = int(samples) + int(samples) % 2
        self.seed = seed
        self.vectorized = vectorized
        slots = [Slot(f"arg{i}", p.provides) for i, p in enumerate(parents)]
        super().__init__(node, parents, slots)
        self._z = {}
        self._cache = None

    def _wrap(self, p, slot):
        where = self.node.label()
        if not isinstance(p, Node):
            raise TypeError(f"{where}: parents must be Normal or MultivariateNormal nodes, got "
                            f"{type(p).__name__}; put constants inside logp instead")
        fam = getattr(p, "provides", None)
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

    # ---- draws -------------------------------------------------------------------
    def _standard(self, k, shape):
        z = self._z.get(k)
        if z is None or z.shape[1:] != shape:
            rng = np.random.default_rng(None if self.seed is None else [int(self.seed), k])
            half = rng.standard_normal((self.samples // 2,) + shape)
            z = np.concatenate([half, -half])
            self._z[k] = z
        return z

    def draws(self):
        """Per parent: (x draws (S,) + value shape, mean m, covariance or variance);
        cached while the parents' moments are the same objects."""
        moms = [p.moments() for p in self.parents]
        if self._cache is not None and all(a is b for a, b in zip(self._cache[0], moms)):
            return self._cache[1]
        out = []
        for k, (p, mom) in enumerate(zip(self.parents, moms)):
            m1 = np.asarray(mom[0], dtype=float)
            if isinstance(p.provides, NormalFamily):
                shape = tuple(p.plates)
                m1 = np.broadcast_to(m1, shape)
                var = np.maximum(np.broadcast_to(mom[1], shape) - m1 * m1, 0.0)
                x = m1 + np.sqrt(var) * self._standard(k, shape)
                out.append((x, m1, var))
            else:
                D = m1.shape[-1]
                shape = tuple(p.plates) + (D,)
                m1 = np.broadcast_to(m1, shape)
                cov = np.broadcast_to(mom[1], shape + (D,)) - m1[..., :, None] * m1[..., None, :]
                L = _sqrt_cov(cov)
                x = m1 + np.einsum("...ij,s...j->s...i", L, self._standard(k, shape))
                out.append((x, m1, cov))
        self._cache = (moms, out)
        return out

    # ---- evaluation --------------------------------------------------------------
    def _batched(self, xs):
        """Does logp accept a leading batch axis? Decided once, by a probe on 3 draws."""
        if self.vectorized is not None:
            return self.vectorized
        probe = [x[:3] for x in xs]
        try:
            vals = np.asarray(self.logp(*probe), dtype=float)
            ok = vals.shape == (3,)
            if ok:
                one = [float(self.logp(*[x[s] for x in probe])) for s in range(3)]
                ok = np.allclose(vals, one, rtol=1e-10, atol=1e-10)
        except Exception:  # noqa: BLE001 -- any failure means "not batch-aware"
            ok = False
        self.vectorized = bool(ok)
        return self.vectorized

    def values(self, xs):
        """logp at every draw, shape (S,)."""
        if self._batched(xs):
            return np.asarray(self.logp(*xs), dtype=float).reshape(self.samples)
        return np.array([float(self.logp(*[x[s] for x in xs])) for s in range(self.samples)])

    def expected_loglik(self, x, u):
        xs = [d[0] for d in self.draws()]
        return float(np.mean(self.values(xs)))

    def grad_hess(self, k):
        """(E[grad], plate-diagonal blocks of E[hess]) of logp in parent k, from the draws:
        Normal parent: (plates, plates); MVN parent: (plates + (D,), plates + (D, D))."""
        import autograd
        d = self.draws()
        xs = [e[0] for e in d]
        xk = xs[k]
        S = self.samples
        vshape = xk.shape[1:]
        mvn = isinstance(self.parents[k].provides, MVNFamily)
        D = vshape[-1] if mvn else 1
        n_pl = int(np.prod(vshape)) // D
        n = n_pl * D

        def f_k(xk_, *args):
            full = list(args[:k]) + [xk_] + list(args[k:])
            return self.logp(*full)

        rest = xs[:k] + xs[k + 1:]
        if self._batched(xs):
            def total(xk_):
                return autograd.numpy.sum(f_k(xk_, *rest))
            gfun = autograd.grad(total)
            G = np.asarray(gfun(xk), dtype=float)                      # (S,) + vshape
            H = None
            if n <= EXACT_HESSIAN_MAX:
                H = np.zeros((n_pl, D, D))
                for j in range(n):
                    col = autograd.grad(lambda z, j=j: autograd.numpy.sum(
                        autograd.numpy.reshape(gfun(z), (S, n))[:, j]))(xk)
                    col = np.asarray(col, dtype=float).reshape(S, n_pl, D).mean(0)
                    pj, dj = divmod(j, D)
                    H[pj, :, dj] = col[pj]
        else:
            gone = autograd.grad(f_k)
            G = np.stack([np.asarray(gone(xk[s], *[r[s] for r in rest]), dtype=float)
                          for s in range(S)])
            H = None
            if n <= EXACT_HESSIAN_MAX:
                hone = autograd.hessian(f_k)
                H = np.zeros((n_pl, D, D))
                for s in range(S):
                    h = np.asarray(hone(xk[s], *[r[s] for r in rest]), dtype=float).reshape(n_pl, D,
                                                                                             n_pl, D)
                    H += h[np.arange(n_pl), :, np.arange(n_pl), :]
                H /= S
        g = G.mean(0)
        _, m, cov = d[k]
        if H is None:  # Stein: E[hess] = E[grad (x - m)^T] Sigma^{-1}, per plate entry
            # with the draws' own covariance (a regression of grad on x - m: exact for a
            # quadratic logp); pinv: a point-mass parent has none (then H = 0)
            Gr = G.reshape(S, n_pl, D)
            dx = (xk - m).reshape(S, n_pl, D)
            C = np.einsum("spi,spj->pij", Gr, dx) / S
            Sig = np.einsum("spi,spj->pij", dx, dx) / S
            H = C @ np.linalg.pinv(Sig, hermitian=True)
        H = 0.5 * (H + np.swapaxes(H, -1, -2))
        if mvn:
            return g, H.reshape(vshape + (D,))
        return g, H.reshape(vshape)

    def message(self, i, x, u, w, target):
        g, H = self.grad_hess(i)
        m = self.draws()[i][1]
        if isinstance(self.parents[i].provides, MVNFamily):
            return (g - np.einsum("...ij,...j->...i", H, m), 0.5 * H)
        return (g - H * m, 0.5 * H)


class Potential(Stochastic):
    """Potential(logp, *parents, name=None, samples=2000, seed=0, vectorized=None).

    A user log-factor ``logp(*parent_values) -> float`` written with autograd.numpy
    over Normal / MultivariateNormal nodes; see the module docstring. Only
    ``fit("ncvmp")`` (or another non-conjugate method) accepts it; its parents are
    updated with the damped step rho (default 0.5)."""

    def __init__(self, logp, *parents, name=None, samples=DEFAULT_SAMPLES, seed=0, vectorized=None):
        Node.__init__(self, name, ())
        if not callable(logp):
            raise TypeError(f"{self.label()}: the first argument must be a function logp(*values) "
                            f"written with autograd.numpy, got {type(logp).__name__}")
        if not parents:
            raise ValueError(f"{self.label()}: give the parent nodes, Potential(logp, w, ...)")
        if len(set(map(id, parents))) != len(parents):
            raise ValueError(f"{self.label()}: a parent is passed twice; pass it once and use the "
                             f"value twice inside logp")
        if int(samples) < 2:
            raise ValueError(f"{self.label()}: samples must be >= 2, got {samples!r}")
        self.family = None
        self.provides = None
        self.factor = PotentialFactor(self, list(parents), logp, samples, seed, vectorized)
        for p in self.factor.parents:
            self.parents.append(p)
            p._add_child(self)
        self._init_state(observed=True)  # a factor of the data: never scheduled, no posterior

    def observe(self, data, mask=None, weights=None):
        raise TypeError(f"{self.label()} is a log-factor; it takes no data (close over the data "
                        f"inside logp)")

    def moments(self):
        raise TypeError(f"{self.label()} is a log-factor with no value; it cannot be a parent")

    def child_data(self):
        return None

    def set_natural(self, nat):
        raise TypeError(f"{self.label()} is a log-factor; it has no natural parameters")

    def prior_natural(self):
        return ()

    @property
    def posterior(self):
        raise AttributeError(f"{self.label()} is a log-factor; it has no posterior (look at its "
                             f"parents' posteriors)")

    def message_to(self, parent):
        return self.factor.message(self.factor.parents.index(parent), None, None, None,
                                   parent.plates)

    def elbo_term(self):
        """E_q[logp] by the fixed Monte Carlo draws."""
        return self.factor.expected_loglik(None, None)

    def __repr__(self):
        return f"<{self.label()} over {[p.name for p in self.parents]}>"
