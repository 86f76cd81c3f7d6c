"""Scalar predictives: scipy.stats distributions (normal, Student-t, negative binomial,
Lomax, beta-prime), Beta-Binomial, categorical and Dirichlet-multinomial (docs/predict.md)."""
from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import gammaln

from ..families._scalar_helpers import beta_binomial_logpmf
from ..families.base import object_array
from .base import Predictive, _bcast, _rng, _size


# ---- scalar distributions from scipy ----------------------------------------------------
class ScipyScalar(Predictive):
    """A scalar predictive that scipy.stats has (vectorised over the plates).

    ``shift`` c (a location family far from zero, docs/dev/numerics.md): ``params["loc"]``
    is then the location relative to c; ``logpdf`` scores values - c, ``mean`` and
    ``sample`` add c back, and ``params`` / ``to_scipy()`` give the location in the data's
    coordinates (c + loc, rounded to the digits a double holds there)."""

    def __init__(self, name, dist, params, plates, discrete=False, shift=None):
        super().__init__(plates)
        self.name = name
        self._dist = dist
        self._params = {k: _bcast(v, self.plates) for k, v in params.items()}
        self.shift = None if shift is None else _bcast(shift, self.plates)
        self.discrete = discrete

    @property
    def params(self):
        """The parameters in the data's coordinates."""
        if self.shift is None:
            return self._params
        return dict(self._params, loc=self._params["loc"] + self.shift)

    def _centred(self):
        return self._dist(**self._params)

    def _plus_c(self, x):
        return x if self.shift is None else x + self.shift

    def _minus_c(self, x):
        return x if self.shift is None else np.asarray(x, dtype=float) - self.shift

    def to_scipy(self):
        """One frozen scipy distribution whose parameters are arrays over the plates."""
        return self._dist(**self.params)

    @property
    def mean(self):
        return self._plus_c(np.asarray(self._centred().mean(), dtype=float))

    @property
    def var(self):
        return np.asarray(self._centred().var(), dtype=float)

    @property
    def centred_mean(self):
        return np.asarray(self._centred().mean(), dtype=float)

    def logpdf(self, values):
        d = self._centred()
        v = self._minus_c(values)
        return d.logpmf(v) if self.discrete else d.logpdf(v)

    def interval(self, level=0.95, samples=20000, seed=0):
        lo, hi = self._centred().interval(level)
        return self._plus_c(lo), self._plus_c(hi)

    def sample(self, size=None, seed=None):
        return self._plus_c(self._centred().rvs(size=_size(size) + self.plates,
                                                 random_state=_rng(seed)))

    def _take(self, idx):
        sub = {k: v[idx] for k, v in self._params.items()}
        plates = next(iter(sub.values())).shape
        return ScipyScalar(self.name, self._dist, sub, plates, self.discrete,
                           None if self.shift is None else self.shift[idx])

    def _broadcast(self, plates):
        return ScipyScalar(self.name, self._dist, self._params, plates, self.discrete, self.shift)


def normal(mean, var, plates, shift=None):
    """Normal(mean, var); with ``shift`` c the location is c + mean."""
    return ScipyScalar("Normal", lambda loc, var: stats.norm(loc=loc, scale=np.sqrt(var)),
                       {"loc": mean, "var": var}, plates, shift=shift)


def student_t(df, loc, scale2, plates, shift=None):
    """Student-t with ``df`` degrees of freedom, location ``loc`` (c + loc with ``shift`` c)
    and squared scale ``scale2``."""
    return ScipyScalar("Student-t", lambda df, loc, scale2: stats.t(df=df, loc=loc,
                                                                     scale=np.sqrt(scale2)),
                       {"df": df, "loc": loc, "scale2": scale2}, plates, shift=shift)


class BetaBinomial(ScipyScalar):
    """scipy's betabinom, with a log pmf that keeps its digits for n up to 2**53
    (:func:`~blrgraph.families._scalar_helpers.beta_binomial_logpmf`)."""

    def logpdf(self, values):
        p = self._params
        return beta_binomial_logpmf(values, p["n"], p["a"], p["b"])

    def _take(self, idx):
        sub = {k: v[idx] for k, v in self._params.items()}
        return beta_binomial(sub["n"], sub["a"], sub["b"], sub["n"].shape)

    def _broadcast(self, plates):
        return beta_binomial(self._params["n"], self._params["a"], self._params["b"], plates)


def beta_binomial(n, a, b, plates):
    return BetaBinomial("Beta-Binomial", lambda n, a, b: stats.betabinom(n.astype(np.int64), a, b),
                        {"n": n, "a": a, "b": b}, plates, discrete=True)


def negative_binomial(shape, rate, plates):
    """The Poisson-Gamma(shape, rate) compound: scipy's nbinom(n=shape, p=rate/(rate+1))."""
    return ScipyScalar("negative binomial",
                       lambda shape, rate: stats.nbinom(shape, rate / (rate + 1.0)),
                       {"shape": shape, "rate": rate}, plates, discrete=True)


def lomax(shape, rate, plates):
    """Exponential with a Gamma(shape, rate) rate: Lomax(c=shape, scale=rate)."""
    return ScipyScalar("Lomax", lambda shape, rate: stats.lomax(shape, scale=rate),
                       {"shape": shape, "rate": rate}, plates)


def beta_prime(k, shape, rate, plates):
    """Gamma(k, rate r) with r ~ Gamma(shape, rate): beta-prime(k, shape, scale=rate)."""
    return ScipyScalar("beta-prime", lambda k, shape, rate: stats.betaprime(k, shape, scale=rate),
                       {"k": k, "shape": shape, "rate": rate}, plates)


# ---- labels ----------------------------------------------------------------------------
class CategoricalPredictive(Predictive):
    """Labels 0..K-1 with probabilities ``probs`` (plates + (K,)); ``mean`` is ``probs``
    (as for a Categorical posterior), ``var`` = p (1 - p)."""

    name = "Categorical"
    discrete = True

    def __init__(self, probs, plates):
        super().__init__(plates)
        self.probs = _bcast(probs, self.plates, 1)

    @property
    def mean(self):
        return self.probs

    @property
    def var(self):
        return self.probs * (1.0 - self.probs)

    def logpdf(self, values):
        x = np.asarray(values)
        K = self.probs.shape[-1]
        shape = np.broadcast_shapes(x.shape, self.plates)
        lab = np.broadcast_to(x, shape).astype(np.intp)
        ok = (lab >= 0) & (lab < K)
        p = np.take_along_axis(np.broadcast_to(self.probs, shape + (K,)),
                               np.where(ok, lab, 0)[..., None], axis=-1)[..., 0]
        with np.errstate(divide="ignore"):
            return np.where(ok, np.log(p), -np.inf)

    def sample(self, size=None, seed=None):
        cdf = np.cumsum(self.probs, axis=-1)
        u = _rng(seed).random(_size(size) + self.plates) * cdf[..., -1]
        return (cdf <= u[..., None]).sum(axis=-1).astype(np.int64)

    def to_scipy(self):
        ks = np.arange(self.probs.shape[-1])
        make = lambda i: stats.rv_discrete(values=(ks, self.probs[i]))()  # noqa: E731
        return make(()) if not self.plates else object_array(self.plates, make)

    def _take(self, idx):
        p = self.probs[idx]
        return CategoricalPredictive(p, p.shape[:-1])

    def _broadcast(self, plates):
        return CategoricalPredictive(self.probs, plates)


# ---- count vectors ---------------------------------------------------------------------
class DirichletMultinomial(Predictive):
    """Multinomial(n, p) with p ~ Dirichlet(alpha): count vectors (plates + (K,))."""

    name = "Dirichlet-multinomial"
    value_ndim = 1
    discrete = True

    def __init__(self, n, alpha, plates):
        super().__init__(plates)
        self.n = _bcast(n, self.plates)
        self.alpha = _bcast(alpha, self.plates, 1)

    @property
    def event_shape(self):
        return self.alpha.shape[-1:]

    @property
    def mean(self):
        a0 = self.alpha.sum(-1, keepdims=True)
        return self.n[..., None] * self.alpha / a0

    @property
    def cov(self):
        a0 = self.alpha.sum(-1)
        p = self.alpha / a0[..., None]
        c = (self.n * (a0 + self.n) / (a0 + 1.0))[..., None, None]
        return c * (np.einsum("...i,ij->...ij", p, np.eye(p.shape[-1])) - p[..., :, None] * p[..., None, :])

    @property
    def var(self):
        return np.diagonal(self.cov, axis1=-2, axis2=-1).copy()

    def logpdf(self, values):
        x = np.asarray(values, dtype=float)
        a, n = self.alpha, self.n
        a0 = a.sum(-1)
        ok = np.all((x >= 0) & (x == np.round(x)), axis=-1) & (x.sum(-1) == n)
        out = (gammaln(a0) + gammaln(n + 1.0) - gammaln(n + a0)
               + np.sum(gammaln(x + a) - gammaln(a) - gammaln(x + 1.0), axis=-1))
        return np.where(ok, out, -np.inf)

    def sample(self, size=None, seed=None):
        rng = _rng(seed)
        shape = _size(size) + self.plates
        g = rng.gamma(np.broadcast_to(self.alpha, shape + self.alpha.shape[-1:]))
        p = g / g.sum(-1, keepdims=True)
        return rng.multinomial(np.broadcast_to(self.n, shape).astype(np.int64), p)

    def to_scipy(self):
        make = lambda i: stats.dirichlet_multinomial(self.alpha[i], int(self.n[i]))  # noqa: E731
        return make(()) if not self.plates else object_array(self.plates, make)

    def _take(self, idx):
        n = self.n[idx]
        return DirichletMultinomial(n, self.alpha[idx], n.shape)

    def _broadcast(self, plates):
        return DirichletMultinomial(self.n, self.alpha, plates)
