"""Vector predictives: the multivariate t (a multivariate normal at df = inf), with its
conditionals given observed coordinates (docs/predict.md)."""
from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import gammaln

from ..families.base import object_array
from .base import LOG2PI, Predictive, _bcast, _rng, _size, missing_patterns


# ---- vectors: multivariate normal and multivariate t ----------------------------------
class MultivariateT(Predictive):
    """Multivariate t (``df`` = inf: multivariate normal) with location ``loc``
    (plates + (D,)) and shape matrix ``shape`` (cov = shape df/(df - 2)).

    ``free`` (plates + (D,), bool; default all True) marks the coordinates that are
    random: after :meth:`condition` the observed coordinates are fixed at their
    values, ``logpdf`` scores the free coordinates only and ``cov`` is zero on the
    fixed ones.

    ``shift`` c (D,) (docs/dev/numerics.md): ``loc`` is then given relative to c and kept
    so (``cloc``); values are taken off c before they are scored or conditioned on, and
    ``loc``, ``mean`` and samples are in the data's coordinates."""

    value_ndim = 1

    def __init__(self, df, loc, shape, plates, free=None, shift=None):
        super().__init__(plates)
        self.df = _bcast(df, self.plates)
        self.cloc = _bcast(loc, self.plates, 1)
        self.shape = _bcast(shape, self.plates, 2)
        D = self.cloc.shape[-1]
        self.shift = None if shift is None else _bcast(shift, self.plates + (D,))
        self.free = np.ones(self.plates + (D,), bool) if free is None else \
            np.broadcast_to(np.asarray(free, bool), self.plates + (D,))
        self.name = "multivariate normal" if np.all(np.isinf(self.df)) else "multivariate t"

    @property
    def event_shape(self):
        return self.cloc.shape[-1:]

    @property
    def loc(self):
        """The location in the data's coordinates."""
        return self.cloc if self.shift is None else self.cloc + self.shift

    def _minus_c(self, x):
        return x if self.shift is None else x - self.shift

    @property
    def mean(self):
        return np.where(self.df[..., None] > 1, self.loc, np.nan)

    @property
    def centred_mean(self):
        return np.where(self.df[..., None] > 1, self.cloc, np.nan)

    @property
    def cov(self):
        df = self.df
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.where(np.isinf(df), 1.0, df / (df - 2.0))
        c = np.where(df > 2, c, np.inf)[..., None, None]
        return np.where(self.shape == 0, 0.0, self.shape * c)

    @property
    def var(self):
        return np.diagonal(self.cov, axis1=-2, axis2=-1).copy()

    def _patterns(self, extra=None):
        """Entries grouped by their pattern of free coordinates (and of ``extra``)."""
        flat = self.free.reshape(-1, self.free.shape[-1])
        key = flat if extra is None else np.concatenate([flat, extra.reshape(flat.shape)], axis=1)
        pats, inv = np.unique(key, axis=0, return_inverse=True)
        return pats, np.ravel(inv)

    def logpdf(self, values):
        x = np.asarray(values, dtype=float)
        plates = np.broadcast_shapes(x.shape[:-1], self.plates)
        D = self.cloc.shape[-1]
        me = self.broadcast(plates)
        xf = np.broadcast_to(me._minus_c(x), plates + (D,)).reshape(-1, D)
        loc, S = me.cloc.reshape(-1, D), me.shape.reshape(-1, D, D)
        df = me.df.reshape(-1)
        out = np.zeros(xf.shape[0])
        pats, inv = me._patterns()
        for j, pat in enumerate(pats):
            rows = inv == j
            d = int(pat.sum())
            if d == 0:
                continue
            out[rows] = _mvt_logpdf(xf[rows][:, pat], loc[rows][:, pat],
                                    S[rows][:, pat][:, :, pat], df[rows])
        return out.reshape(plates)

    def _broadcast(self, plates):
        return MultivariateT(np.broadcast_to(self.df, plates), self.cloc, self.shape, plates,
                             np.broadcast_to(self.free, plates + self.free.shape[-1:]), self.shift)

    def condition(self, values):
        """Condition each entry on the finite coordinates of ``values`` (plates + (D,),
        NaN = unknown): returns (log density of the observed coordinates, the
        conditional predictive of the others). The t-conditional has df + d_o degrees of
        freedom (d_o observed coordinates) and its shape is scaled by (df + delta)/(df + d_o);
        with df = inf it is the Gaussian conditional."""
        x = np.asarray(values, dtype=float)
        D = self.cloc.shape[-1]
        plates = np.broadcast_shapes(x.shape[:-1], self.plates)
        sh = None if self.shift is None else np.broadcast_to(self.shift, plates + (D,))
        xb = np.broadcast_to(x if sh is None else x - sh, plates + (D,)).reshape(-1, D)
        obs = np.isfinite(xb)
        loc = np.array(np.broadcast_to(self.cloc, plates + (D,)).reshape(-1, D))
        S = np.array(np.broadcast_to(self.shape, plates + (D, D)).reshape(-1, D, D))
        df = np.array(np.broadcast_to(self.df, plates).reshape(-1))
        ll = np.zeros(len(xb))
        new_df = df.copy()
        for rows, o, m in missing_patterns(obs):
            Soo = S[rows][:, o][:, :, o]
            dx = xb[rows][:, o] - loc[rows][:, o]
            ll[rows] = _mvt_logpdf(xb[rows][:, o], loc[rows][:, o], Soo, df[rows])
            sol = np.linalg.solve(Soo, dx[..., None])[..., 0]             # Soo^-1 dx
            delta = np.einsum("ni,ni->n", dx, sol)
            do = int(o.sum())
            dfr = df[rows]
            with np.errstate(invalid="ignore"):
                factor = np.where(np.isinf(dfr), 1.0, (dfr + delta) / (dfr + do))
            new_df[rows] = dfr + do
            Smo = S[rows][:, m][:, :, o]
            lm = loc[rows][:, m] + np.einsum("nij,nj->ni", Smo, sol)
            Smm = S[rows][:, m][:, :, m] - Smo @ np.linalg.solve(Soo, np.swapaxes(Smo, -1, -2))
            Lr, Sr = loc[rows], np.zeros((len(rows), D, D))
            Lr[:, m] = lm
            Lr[:, o] = xb[rows][:, o]
            Sr[np.ix_(np.arange(len(rows)), m, m)] = factor[:, None, None] * Smm
            loc[rows], S[rows] = Lr, Sr
        free = ~obs & np.broadcast_to(self.free, plates + (D,)).reshape(-1, D)
        cond = MultivariateT(new_df.reshape(plates), loc.reshape(plates + (D,)),
                             S.reshape(plates + (D, D)), plates, free.reshape(plates + (D,)), sh)
        return ll.reshape(plates), cond

    def sample(self, size=None, seed=None):
        rng = _rng(seed)
        shape = _size(size) + self.plates
        D = self.cloc.shape[-1]
        w, V = np.linalg.eigh(self.shape)
        root = V * np.sqrt(np.clip(w, 0.0, None))[..., None, :]
        z = np.einsum("...ij,...j->...i", root, rng.standard_normal(shape + (D,)))
        df = np.broadcast_to(self.df, shape)
        g = np.where(np.isinf(df), 1.0, rng.chisquare(np.where(np.isinf(df), 1.0, df)) /
                     np.where(np.isinf(df), 1.0, df))
        return self.loc + z / np.sqrt(g)[..., None] if self.shift is None else \
            (self.cloc + z / np.sqrt(g)[..., None]) + self.shift

    def to_scipy(self):
        def make(i):
            if not self.free[i].all():
                raise NotImplementedError("a conditioned predictive has fixed coordinates; scipy "
                                          "has no such distribution")
            if np.isinf(self.df[i]):
                return stats.multivariate_normal(self.loc[i], self.shape[i])
            return stats.multivariate_t(loc=self.loc[i], shape=self.shape[i], df=float(self.df[i]))
        return make(()) if not self.plates else object_array(self.plates, make)

    def _take(self, idx):
        df = self.df[idx]
        return MultivariateT(df, self.cloc[idx], self.shape[idx], df.shape, self.free[idx],
                             None if self.shift is None else self.shift[idx])


def _mvt_logpdf(x, loc, S, df):
    """log density of rows x (n, d) under t(df) / normal (df = inf) with shape S (n, d, d)."""
    d = x.shape[-1]
    L = np.linalg.cholesky(S)
    z = np.linalg.solve(L, (x - loc)[..., None])[..., 0]
    delta = np.sum(z * z, axis=-1)
    logdet = 2.0 * np.sum(np.log(np.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
    gauss = -0.5 * delta - 0.5 * d * LOG2PI - 0.5 * logdet
    dff = np.where(np.isinf(df), 1.0, df)
    t = (gammaln(0.5 * (dff + d)) - gammaln(0.5 * dff) - 0.5 * d * np.log(dff * np.pi)
         - 0.5 * logdet - 0.5 * (dff + d) * np.log1p(delta / dff))
    return np.where(np.isinf(df), gauss, t)
