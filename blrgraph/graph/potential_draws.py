"""The draws of a Potential's expectations (graph/potential.py): common random numbers
whose second moment is exactly the identity, and each Gaussian parent's draws from them."""
from __future__ import annotations

import numpy as np

from ..families.multivariate_normal import MultivariateNormal as MVNFamily


def _sqrt_cov(cov):
    """A square root L (L L^T = cov) of a PSD stack: Cholesky, else a clipped eigh."""
    cov = 0.5 * (cov + np.swapaxes(cov, -1, -2))
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        lam, V = np.linalg.eigh(cov)
        return V * np.sqrt(np.maximum(lam, 0.0))[..., None, :]


def standard_draws(S, n, seed):
    """(S, n) standard-normal draws whose sample mean is 0 and second moment exactly I
    (antithetic pairs, whitened; with S/2 <= n each coordinate is standardised)."""
    rng = np.random.default_rng(None if seed is None else [int(seed), 20241127])
    half = rng.standard_normal((S // 2, n))
    if S // 2 > n:
        L = np.linalg.cholesky(half.T @ half / (S // 2))
        half = np.linalg.solve(L, half.T).T
    else:
        half = half / np.sqrt(np.mean(half * half, axis=0))
    return np.concatenate([half, -half])


class _Parent:
    """One parent's draws: x (S,) + value shape, mean m, covariance (or variance)."""

    def __init__(self, node, mom, z):
        self.node = node
        m1 = np.asarray(mom[0], dtype=float)
        self.mvn = isinstance(node.provides, MVNFamily)
        if self.mvn:
            D = m1.shape[-1]
            self.shape = tuple(node.plates) + (D,)
            self.m = np.broadcast_to(m1, self.shape)
            self.cov = (np.broadcast_to(mom[1], self.shape + (D,))
                        - self.m[..., :, None] * self.m[..., None, :])
            self.x = self.m + np.einsum("...ij,s...j->s...i", _sqrt_cov(self.cov),
                                        z.reshape((-1,) + self.shape))
        else:
            self.shape = tuple(node.plates)
            self.m = np.broadcast_to(m1, self.shape)
            self.cov = np.maximum(np.broadcast_to(mom[1], self.shape) - self.m * self.m, 0.0)
            self.x = self.m + np.sqrt(self.cov) * z.reshape((-1,) + self.shape)
        self.D = self.shape[-1] if self.mvn else 1
        self.n = int(np.prod(self.shape, dtype=int))
