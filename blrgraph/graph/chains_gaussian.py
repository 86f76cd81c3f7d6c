"""GaussianMarkovChain: one node for a whole linear-Gaussian state sequence (docs/kalman.md).

    x_1 ~ N(mean0, inv(precision0)),   x_t | x_{t-1} ~ N(A x_{t-1}, inv(noise_precision))

q of the node is the exact Gaussian over x_1..x_T given its children's messages (a
block-tridiagonal precision; the Kalman filter / RTS smoother,
``families/gaussian_markov_chain.py``), not one mean-field factor per step.

Plates: the node's plates are (sequences..., T). It publishes per-step
MultivariateNormal moments (E[x_t], E[x_t x_t^T]) with those plates, so a child
``MultivariateNormal(chain, R)`` observes data of shape (..., T, D), and its
messages (per step, in MultivariateNormal coordinates) add to the first two
components of the chain's natural parameters; the third component (the pairwise
x_t x_{t-1}^T coupling) comes from the prior alone.

Parents (each a node or an array):

* ``mean0``: MultivariateNormal (event D);  ``precision0``: Wishart (D x D);
* ``A``: an array (D, D), or a MultivariateNormal node whose last plate axis holds
  the D rows of A (plates (..., D), event D): E[A] and E[a_i a_i^T] enter;
* ``noise_precision``: Wishart (D x D), or Gamma with the coordinate as last plate
  axis (one precision per dimension; plates () or (..., 1): isotropic), or an array
  ((D, D) matrix; a number or a (D,) vector for a diagonal precision).

The messages to the parents are the gradients of E[log p(x | parents)] in the
parents' mean parameters (tests/test_kalman.py checks them by finite differences);
they need the expected sufficient statistics of the chain::

    x_1, E[x_1 x_1^T],  S00 = sum_{t<T} E[x_t x_t^T],  S11 = sum_{t>1} E[x_t x_t^T],
    S10 = sum_{t>1} E[x_t x_{t-1}^T].
"""
from __future__ import annotations

import numpy as np

from ..families.gamma import Gamma as GammaFamily
from ..families.gaussian_markov_chain import GaussianMarkovChain as ChainFamily
from ..families.gaussian_markov_chain import chain_natural
from ..families.multivariate_normal import MultivariateNormal as MVNFamily
from ..families.wishart import Wishart as WishartFamily
from .factors.base import Conditional, Slot
from .factors.gaussian import LOG2PI
from .node import ChildData, Node, Stochastic
from .plates import broadcast_plates, wsum


def _swap(a):
    return np.swapaxes(a, -1, -2)


class GaussianChainFactor(Conditional):
    """p(x_1..x_T | mean0, precision0, A, noise precision) of a Gaussian Markov chain."""

    independent_entries = False   # the time steps are coupled by the prior

    def __init__(self, node, parents, slots, length):
        super().__init__(node, parents, slots)
        self.T = int(length)
        self.diagonal_noise = isinstance(self.slots[3].family, GammaFamily)
        self._check_dimensions()

    # ---- shapes --------------------------------------------------------------
    def _check_dimensions(self):
        where = self.node.label()
        m0, P0, A, Q = (p.moments() for p in self.parents)
        D = np.shape(m0[0])[-1]
        if np.shape(P0[0])[-2:] != (D, D):
            raise ValueError(f"{where}: mean0 has D = {D} but precision0 has shape "
                             f"{np.shape(P0[0])[-2:]}; give precision0 of shape (D, D)")
        rows = self.parents[2].plates[-1] if self.parents[2].plates else 1
        if np.shape(A[0])[-1] != D or rows != D:
            raise ValueError(f"{where}: A must be D x D with D = {D} (an array (D, D), or a "
                             f"MultivariateNormal node with plates (..., D) holding the rows); got "
                             f"{rows} row(s) of length {np.shape(A[0])[-1]}")
        if self.diagonal_noise:
            tp = self.parents[3].plates
            if tp and tp[-1] not in (1, D):
                raise ValueError(f"{where}: a per-dimension noise precision needs its last plate "
                                 f"axis of length D = {D} (or 1 for one shared precision), got "
                                 f"plates {tp}")
        elif np.shape(Q[0])[-2:] != (D, D):
            raise ValueError(f"{where}: noise_precision has shape {np.shape(Q[0])[-2:]} but "
                             f"D = {D}; give a (D, D) matrix or a Wishart node of dimension D")
        self.D = D

    def batch_plates(self):
        """The sequences' plate shape (the node's plates without the time axis)."""
        m0, P0, A, Q = self.parents
        shapes = [m0.plates, P0.plates, A.plates[:-1],
                  (Q.plates[:-1] if self.diagonal_noise else Q.plates)]
        try:
            return broadcast_plates(*shapes)
        except ValueError:
            desc = ", ".join(f"{s.name}: {p.plates}" for s, p in zip(self.slots, self.parents))
            raise ValueError(f"{self.node.label()}: the parents' plates do not broadcast ({desc}; "
                             f"A's and a per-dimension noise precision's last plate axis is the "
                             f"row / coordinate axis)") from None

    def plates(self):
        return self.batch_plates() + (self.T,)

    # ---- parents' expectations -------------------------------------------------
    def _A(self, u):
        EA, Eaa = (np.asarray(a, dtype=float) for a in u[2])
        if not self.parents[2].plates:  # D = 1, one row without a plate axis
            EA, Eaa = EA[None], Eaa[None]
        return EA, Eaa  # (..., D, D) and (..., D, D, D): E[a_i] and E[a_i a_i^T] per row i

    def _Q(self, u):
        """(E[Q] as a matrix, E[log|Q|], per-coordinate E[tau] or None)."""
        a, b = (np.asarray(v, dtype=float) for v in u[3])
        if not self.diagonal_noise:
            return a, b, None
        lt, t = a, b
        if t.ndim == 0 or t.shape[-1] == 1:
            shape = (t.shape[:-1] if t.ndim else ()) + (self.D,)
            t, lt = np.broadcast_to(t, shape), np.broadcast_to(lt, shape)
        Qm = t[..., :, None] * np.eye(self.D)
        return Qm, np.sum(lt, -1), t

    def _AtQA(self, EA, Eaa, Qm, tau):
        """E[A^T Q A] = sum_ij E[Q_ij] E[a_i a_j^T] (rows independent under q)."""
        if tau is not None:
            return np.einsum("...i,...ijk->...jk", tau, Eaa)
        Qd = np.diagonal(Qm, axis1=-2, axis2=-1)
        cov = Eaa - EA[..., :, :, None] * EA[..., :, None, :]
        return _swap(EA) @ Qm @ EA + np.einsum("...i,...ijk->...jk", Qd, cov)

    # ---- the factor's questions ----------------------------------------------
    def prior_natural(self, u):
        (m0, _), (P0, _) = u[0], u[1]
        EA, Eaa = self._A(u)
        Qm, _, tau = self._Q(u)
        return chain_natural(np.einsum("...ij,...j->...i", P0, m0), P0, Qm, Qm @ EA,
                             self._AtQA(EA, Eaa, Qm, tau), self.T)

    def expected_log_partition(self, u):
        """Per step: E[A] of p(x_1) at t = 1, of p(x_t | x_{t-1}) (its -E log|Q| / 2 part) after."""
        (_, mm), (P0, ld0) = u[0], u[1]
        _, ldQ, _ = self._Q(u)
        D = self.D
        first = 0.5 * np.einsum("...ij,...ij->...", P0, mm) - 0.5 * ld0 + 0.5 * D * LOG2PI
        rest = -0.5 * np.asarray(ldQ) + 0.5 * D * LOG2PI
        batch = np.broadcast_shapes(np.shape(first), np.shape(rest))
        out = np.empty(batch + (self.T,))
        out[..., 0] = first
        out[..., 1:] = np.asarray(rest)[..., None]
        return out

    def _stats(self, x):
        m, XX, X10 = x.moments
        T = self.T
        return (m[..., 0, :], XX[..., 0, :, :], XX[..., : T - 1, :, :].sum(-3),
                XX[..., 1:, :, :].sum(-3), X10[..., 1:, :, :].sum(-3))

    def message(self, i, x, u, w, target):
        if w is not None:  # counts propagated from a child (observed states take no mask)
            self.node.refuse_replicates()
        B = tuple(x.plates[:-1])
        kw = dict(target_plates=target, full_plates=B)
        x1, xx1, S00, S11, S10 = self._stats(x)
        T = self.T
        (m0, mm0), (P0, _) = u[0], u[1]
        if i == 0:
            return (wsum(None, P0, x1, subs=("AB", "B"), out="A", **kw),
                    -0.5 * wsum(None, P0, subs=("AB",), out="AB", **kw))
        if i == 1:
            cross = x1[..., :, None] * np.asarray(m0)[..., None, :]
            R = xx1 - cross - _swap(cross) + mm0
            return (-0.5 * wsum(None, R, subs=("AB",), out="AB", **kw),
                    0.5 * wsum(None, **kw))
        EA, Eaa = self._A(u)
        Qm, _, tau = self._Q(u)
        if i == 2:  # rows of A: the row axis is the last plate axis of the parent
            rows = dict(target_plates=target, full_plates=B + (self.D,))
            Qd = np.diagonal(Qm, axis1=-2, axis2=-1)
            Qoff = Qm - Qd[..., :, None] * np.eye(self.D)
            g1 = Qm @ S10 - Qoff @ EA @ S00
            g2 = -0.5 * Qd[..., :, None, None] * S00[..., None, :, :]
            out = (wsum(None, g1, subs=("A",), out="A", **rows),
                   wsum(None, g2, subs=("AB",), out="AB", **rows))
            if not self.parents[2].plates:
                out = tuple(a[0] for a in out)
            return out
        # noise precision: E[(x_t - A x_{t-1})(x_t - A x_{t-1})^T] summed over t > 1
        AS = EA @ _swap(S10)
        ASA = EA @ S00 @ _swap(EA)
        cov = Eaa - EA[..., :, :, None] * EA[..., :, None, :]
        idx = np.arange(self.D)
        ASA[..., idx, idx] += np.einsum("...jk,...ijk->...i", S00, cov)
        R = S11 - AS - _swap(AS) + ASA
        if not self.diagonal_noise:
            return (-0.5 * wsum(None, R, subs=("AB",), out="AB", **kw),
                    0.5 * (T - 1) * wsum(None, **kw))
        coords = dict(target_plates=target, full_plates=B + (self.D,))
        Rd = np.diagonal(R, axis1=-2, axis2=-1)
        return (0.5 * (T - 1) * wsum(None, **coords), -0.5 * wsum(None, Rd, **coords))


class GaussianMarkovChain(Stochastic):
    restrictable = False  # its q couples the steps; views of some sequences are not built

    """GaussianMarkovChain(mean0, precision0, A, noise_precision, length=T, plates=(S,)):
    S independent sequences x_1..x_T (x_t in R^D) of the linear-Gaussian state-space
    model x_1 ~ N(mean0, inv(precision0)), x_t ~ N(A x_{t-1}, inv(noise_precision)).

    The node's plates are ``plates + (T,)``; children see per-step
    MultivariateNormal moments (``MultivariateNormal(chain, R).observe(Y)`` with Y of
    shape (S, T, D)). q is the exact Gaussian over each sequence (Kalman filter /
    RTS smoother): ``posterior.mean`` (S, T, D), ``posterior.cov`` (S, T, D, D)
    marginal covariances, ``posterior.cross_cov`` Cov(x_t, x_{t-1}),
    ``posterior.sample(size, seed)`` whole sequences drawn from q (backward sampling,
    families/gaussian_markov_chain.py), shape (size,) + plates + (D,). See the module
    docstring for the parents' forms and docs/kalman.md for the model."""

    def __init__(self, mean0, precision0, A, noise_precision, length=None, plates=None, name=None):
        label = f"GaussianMarkovChain '{name}'"
        if length is None:
            raise TypeError(f"{label}: give length=T, the number of time steps")
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
            raise ValueError(f"{label}: length must be an integer >= 1, got {length!r}")
        if not isinstance(mean0, Node) and np.ndim(mean0) < 1:
            raise ValueError(f"{label}: mean0 must be a vector (shape (..., D)), got {mean0!r}")
        if not isinstance(A, Node) and np.ndim(A) != 2:
            raise ValueError(f"{label}: A must be a (D, D) matrix or a MultivariateNormal node "
                             f"whose last plate axis holds the rows, got shape {np.shape(A)}")
        if isinstance(noise_precision, Node):
            diag = isinstance(getattr(noise_precision, "provides", None), GammaFamily)
        else:
            diag = np.ndim(noise_precision) <= 1
        noise = Slot("noise_precision", GammaFamily() if diag else WishartFamily(),
                     kind="positive" if diag else "spd")
        slots = [Slot("mean0", MVNFamily()), Slot("precision0", WishartFamily(), kind="spd"),
                 Slot("A", MVNFamily()), noise]
        if plates is not None:
            plates = tuple(int(p) for p in np.atleast_1d(plates)) + (int(length),)
        super().__init__(ChainFamily(), GaussianChainFactor, [mean0, precision0, A, noise_precision],
                         slots, plates=plates, name=name, length=int(length))
        self.provides = MVNFamily()  # children see per-step (E[x_t], E[x_t x_t^T])
        self.length = int(length)

    def start_from(self, *params):
        """Start every fit's q at the chain x_1 ~ N(mean0, inv(precision0)),
        x_t ~ N(A x_{t-1}, inv(noise_precision)) of the given arrays (this node's length;
        a diagonal noise precision as a number or a (D,) vector), instead of at the prior.
        ``start_from()`` goes back to the prior. Returns the node."""
        if len(params) == 4:
            params = params + (self.length,)
        elif params:
            raise TypeError(f"{self.label()}.start_from(mean0, precision0, A, noise_precision): "
                            f"give the four arrays of a chain prior (got {len(params)} arguments)")
        return super().start_from(*params)

    # ---- data ---------------------------------------------------------------
    def observe(self, data, mask=None, weights=None):
        """Fully observed state sequences (to learn A and the noise precision from them):
        no mask or weights (a missing state is latent: observe a child instead)."""
        if mask is not None or weights is not None:
            raise ValueError(f"{self.label()}: observed states take no mask= or weights=; for "
                             f"missing or noisy states make the chain latent and observe a child "
                             f"MultivariateNormal(chain, R) with a mask")
        node = super().observe(data)
        if node.source is not None:
            raise ValueError(f"{self.label()}: observed states must be an in-memory array")
        return node

    # ---- moments: per-step Gaussian moments for children, all three for the factor ----
    def full_moments(self):
        """(E[x_t], E[x_t x_t^T], E[x_t x_{t-1}^T]) with plates (..., T)."""
        if self.observed or self.point or self.nat is None:
            return Stochastic.moments(self)
        if self._moments is None:
            self._moments, self._entropy = self.family.moments_and_entropy(self.nat)
        return self._moments

    def moments(self):
        full = self.full_moments()
        pub = self.__dict__.get("_published")
        if pub is None or pub[0] is not full:  # the same tuple until q changes (readers
            pub = self._published = (full, full[:2])  # may cache on its identity)
        return pub[1]

    def set_natural(self, nat):
        super().set_natural(nat)
        self._entropy = None

    def entropy(self):
        self.full_moments()
        if getattr(self, "_entropy", None) is None:
            return self.family.entropy(self.nat)
        return self._entropy

    def child_data(self):
        if self.observed:
            return ChildData(self.value, self.full_moments(), self.plates, 1)
        if self.point:
            return ChildData(self.family.centred_point_value(self.nat),
                             self.family.point_stats(self.nat),
                             self.plates, 1)
        return ChildData(None, self.full_moments(), self.plates, 1)

    def refuse_replicates(self):
        if self.replicates is not None:
            raise ValueError(f"{self.label()}: a child observed with weights= (counts) would "
                             f"replicate single time steps of the chain; observe the sequences "
                             f"without weights")

    def elbo_term(self):
        self.refuse_replicates()
        return super().elbo_term()
