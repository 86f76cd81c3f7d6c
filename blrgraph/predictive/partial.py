"""Partly observed vectors (observe(X, mask) with a mask of X's shape, docs/predict.md):
the predictive of an entry's missing coordinates given its observed ones."""
from __future__ import annotations

import numpy as np

from .base import Predictive, _rng, _size, missing_patterns
from .multivariate import MultivariateT
from .family import MixturePredictive


class PartlyObserved(Predictive):
    """The predictive of a vector node some of whose entries are partly observed: each such
    entry (``rows``, a bool over the plates) has ``cond``, the predictive of its missing
    coordinates given its observed ones (those fixed at their values: zero variance,
    ``logpdf`` scores the missing coordinates only); every other entry keeps ``base``."""

    value_ndim = 1

    def __init__(self, base, cond, rows, x=None):
        super().__init__(base.plates)
        self.base, self.cond = base, cond
        self.event_shape = base.event_shape
        self.rows = np.broadcast_to(np.asarray(rows, bool), self.plates)
        #: the partly observed entries' values (n, D), NaN where missing: the observed
        #: coordinates of mean and samples are these, to the last digit
        self.x = None if x is None else np.asarray(x, dtype=float)
        self._obs = None if x is None else np.isfinite(self.x)
        self.exact = bool(base.exact and cond.exact)
        self.name = f"{base.name}; {int(self.rows.sum())} partly observed entries conditioned"

    def _fill(self, whole, part, event_ndim):
        ev = np.shape(whole)[np.ndim(whole) - event_ndim:]
        out = np.array(np.broadcast_to(whole, self.plates + ev), dtype=float)
        out[self.rows] = part
        return out

    @property
    def weights(self):
        """A mixture's component weights per entry: q(z) of the entry (kept by conditioning)."""
        return self.base.weights

    @property
    def mean(self):
        c = self.cond.mean
        c = c if self.x is None else np.where(self._obs, self.x, c)
        return self._fill(self.base.mean, c, 1)

    @property
    def cov(self):
        return self._fill(self.base.cov, self.cond.cov, 2)

    @property
    def var(self):
        return np.diagonal(self.cov, axis1=-2, axis2=-1).copy()

    def logpdf(self, values):
        x = np.asarray(values, dtype=float)
        if x.shape[:-1] != self.plates:
            x = np.broadcast_to(x, self.plates + x.shape[-1:])
        return self._fill(self.base.logpdf(x), self.cond.logpdf(x[self.rows]), 0)

    def sample(self, size=None, seed=None):
        rng = _rng(seed)
        s = np.array(self.base.sample(size, seed=rng), dtype=float)
        n = len(_size(size))
        idx = (slice(None),) * n + (self.rows,)
        c = self.cond.sample(size, seed=rng)
        s[idx] = np.where(self._obs, self.x, c) if self.x is not None else c
        return s

    def to_scipy(self):
        raise NotImplementedError("a partly observed entry has fixed coordinates; scipy has no "
                                  "such distribution")

    def _take(self, idx):
        pos = np.arange(int(np.prod(self.plates, dtype=int))).reshape(self.plates)[idx]
        lookup = np.full(self.rows.size, -1)
        lookup[np.flatnonzero(self.rows)] = np.arange(int(self.rows.sum()))
        j = lookup[np.ravel(pos)]
        base = self.base._take(idx)
        keep = j >= 0
        if not keep.any():
            return base
        return PartlyObserved(base, self.cond[(j[keep],)], keep.reshape(np.shape(pos)),
                              None if self.x is None else self.x[j[keep]])



def _gaussian_mean_conditional(pred, S, noise, values):
    """x ~ N(mu, noise), mu ~ N(m, S) (q of a Gaussian mean, a fixed covariance): per entry,
    E_q[p(x_m | x_o, mu)] = N(m_m + B (x_o - m_o), noise_m|o + [I, -B] S [I, -B]^T) with
    B = noise_mo noise_oo^-1 (docs/math.md §6.1). ``pred`` is N(m, S + noise) (its location
    relative to its shift)."""
    plates = pred.plates
    D = pred.cloc.shape[-1]
    sh = pred.shift
    x = np.asarray(values, dtype=float)
    x = np.broadcast_to(x if sh is None else x - sh, plates + (D,)).reshape(-1, D)
    loc = np.array(pred.cloc.reshape(-1, D))
    S = np.asarray(S, dtype=float).reshape(-1, D, D)
    N = noise.reshape(-1, D, D)
    cov = S + N
    obs = np.isfinite(x)
    for r, o, m in missing_patterns(obs):
        Noo, Nmo, Nmm = N[r][:, o][:, :, o], N[r][:, m][:, :, o], N[r][:, m][:, :, m]
        B = np.swapaxes(np.linalg.solve(Noo, np.swapaxes(Nmo, -1, -2)), -1, -2)   # (n, m, o)
        A = np.zeros((len(r), int(m.sum()), D))
        A[:, :, m] = np.eye(int(m.sum()))
        A[:, :, o] = -B
        Cmm = Nmm - B @ np.swapaxes(Nmo, -1, -2) + A @ S[r] @ np.swapaxes(A, -1, -2)
        L = loc[r]
        L[:, m] = L[:, m] + np.einsum("nij,nj->ni", B, x[r][:, o] - L[:, o])
        L[:, o] = x[r][:, o]
        C = np.zeros((len(r), D, D))
        C[np.ix_(np.arange(len(r)), m, m)] = 0.5 * (Cmm + np.swapaxes(Cmm, -1, -2))
        loc[r], cov[r] = L, C
    free = ~obs & pred.free.reshape(-1, D)
    return MultivariateT(np.inf, loc.reshape(plates + (D,)), cov.reshape(plates + (D, D)), plates,
                         free.reshape(plates + (D,)), sh)


class _DrawMixture(MixturePredictive):
    """Equal-weight mixture over Monte Carlo draws of the parameters (not exact)."""

    def __init__(self, weights, components, plates):
        super().__init__(weights, components, plates)
        self.exact = False
        self.name = (f"conditional multivariate normal (Monte Carlo over q, "
                     f"{self.weights.shape[-1]} draws)")

    def _take(self, idx):
        w = self.weights[idx]
        return _DrawMixture(w, self.components.broadcast(self.weights.shape)[idx], w.shape[:-1])

    def _broadcast(self, plates):
        return _DrawMixture(self.weights, self.components.broadcast(
            tuple(plates) + self.weights.shape[-1:]), plates)


def _monte_carlo_conditional(pred, values):
    """Monte Carlo over q (mean-field parents): each of the S draws (mu_s, Lambda_s) gives
    the Gaussian conditional of the missing coordinates; the predictive is their equal-
    weight mixture (its mean and cov by the laws of total expectation and variance)."""
    eta1, eta2 = (np.asarray(a, dtype=float) for a in pred.nat)
    S = eta1.shape[0]
    lam = -2.0 * eta2
    cov = np.linalg.inv(lam)
    mu = np.einsum("...ij,...j->...i", cov, eta1)                  # centred coordinates
    plates = pred.plates
    sh = pred.shift
    comps = MultivariateT(np.inf, np.moveaxis(mu, 0, -2), np.moveaxis(cov, 0, -3),
                          plates + (S,), shift=None if sh is None else sh[..., None, :])
    _, cond = comps.condition(np.expand_dims(np.asarray(values, dtype=float), -2))
    return _DrawMixture(np.full(plates + (S,), 1.0 / S), cond, plates)
