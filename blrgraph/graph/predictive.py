"""Posterior predictive distributions: E_q[p(x | parents)] for every entry of a node
(docs/predict.md).

Each conditional factor answers ``predictive(q, plates, ctx)`` (declared on
:class:`~blrgraph.graph.factors.base.Conditional`): ``q`` describes each parent as
a fixed value, a fitted q (family + natural parameters) or a derived quantity (a
linear predictor ``Dot(X, w)``); the factor returns a :class:`Predictive` with
``plates``. Conjugate factors integrate exactly (Student-t, multivariate t,
Beta-Binomial, negative binomial, Dirichlet-multinomial, Lomax, beta-prime); the
base class falls back on Monte Carlo over q (mean-field products, non-conjugate
links), with the mean and variance exact wherever the factor gives them.

A vector node observed with a per-coordinate mask gives each partly observed entry the
predictive of its missing coordinates given its observed ones (:class:`PartlyObserved`,
docs/math.md §6.1).
"""
from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import gammaln, logsumexp

from ..families._scalar_helpers import beta_binomial_logpmf
from ..families.base import object_array
from ..families.multivariate_normal import MultivariateNormal as MVNFamily
from ..families.normal import Normal as NormalFamily
from .inputs import (check_count, check_level, check_mask, check_seed, check_size, check_values,
                     fill_masked)

LOG2PI = np.log(2.0 * np.pi)


def _rng(seed):
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _size(size):
    if size is None:
        return ()
    return (int(size),) if np.ndim(size) == 0 else tuple(int(s) for s in size)


def _bcast(a, plates, event_ndim=0):
    a = np.asarray(a, dtype=float)
    ev = a.shape[a.ndim - event_ndim:] if event_ndim else ()
    return np.broadcast_to(a, tuple(plates) + ev)


def _index_plates(idx):
    """An index over the plate axes as a tuple (a boolean mask, ints, slices)."""
    return idx if isinstance(idx, tuple) else (idx,)


# ---------------------------------------------------------------------------------------
def missing_patterns(obs):
    """(rows, observed, missing) for each pattern of observed coordinates (obs: (n, D)
    bool) that has at least one observed coordinate: the rows share one conditional."""
    pats, inv = np.unique(obs, axis=0, return_inverse=True)
    inv = np.ravel(inv)
    for j, o in enumerate(pats):
        if o.any():
            yield np.flatnonzero(inv == j), o, ~o


class Predictive:
    """The posterior predictive distribution of the entries of a node.

    ``plates``: the entries' shape. ``mean``, ``var`` (``cov`` for vectors),
    ``logpdf(values)`` (per entry), ``sample(size=None, seed=None)`` (shape size +
    plates + event; each entry drawn from its own predictive), ``to_scipy()``
    where scipy has the distribution, ``exact`` (False for a Monte Carlo estimate)
    and ``pred[idx]`` (the predictive of some entries, e.g. ``pred[~mask]``)."""

    name = "predictive"
    value_ndim = 0
    exact = True
    discrete = False
    #: location shift c (None: none): a Gaussian-location predictive keeps its location
    #: relative to c (docs/dev/numerics.md) and takes values off c before scoring them
    shift = None
    #: the shape of one value ((D,) for vectors; None where it is not known)
    event_shape = None

    #: how messages name this predictive (``node_predictive`` sets the node's label)
    where = "predictive"

    def __init__(self, plates):
        self.plates = tuple(plates)

    def __init_subclass__(cls, **kw):
        """Every subclass's ``sample``, ``logpdf`` and ``interval`` check their arguments
        where they enter (blrgraph.graph.inputs), naming the node and the argument."""
        super().__init_subclass__(**kw)
        for name, wrap in (("sample", _checked_sample), ("logpdf", _checked_logpdf),
                           ("interval", _checked_interval)):
            f = cls.__dict__.get(name)
            if f is not None and not getattr(f, "_checked", False):
                setattr(cls, name, wrap(f))

    def __repr__(self):
        kind = "" if self.exact else ", Monte Carlo"
        return f"<Predictive {self.name}{kind}, plates={self.plates}>"

    @property
    def std(self):
        return np.sqrt(self.var)


    @property
    def centred_mean(self):
        """The mean relative to ``shift`` (the mean itself without one)."""
        return self.mean

    def pdf(self, values):
        return np.exp(self.logpdf(values))

    def log_predictive(self, values, mask=None):
        """sum over entries (where ``mask`` is True) of logpdf(values): held-out scoring."""
        if mask is not None:
            mask = check_mask(f"{self.where}.log_predictive", mask, self.plates)
            if isinstance(self.value_ndim, int):     # NaN where masked out: not scored
                values = fill_masked(values, mask, self.plates, self.value_ndim)
        lp = np.broadcast_to(self.logpdf(values), self.plates)
        if mask is not None:
            m = np.broadcast_to(mask, self.plates)
            lp = np.where(m, lp, 0.0)
        return float(np.sum(lp))

    def interval(self, level=0.95, samples=20000, seed=0):
        """Central ``level`` interval per entry (from scipy where it has the distribution,
        else from ``samples`` draws)."""
        try:
            d = self.to_scipy()
            if not isinstance(d, np.ndarray):
                return d.interval(level)
        except (NotImplementedError, AttributeError, TypeError):
            pass
        s = self.sample(samples, seed=seed)
        return tuple(np.quantile(s, [0.5 - level / 2, 0.5 + level / 2], axis=0))

    def to_scipy(self):
        raise NotImplementedError(f"{self.name}: scipy has no such distribution; use logpdf, "
                                  f"mean, var and sample")

    def __getitem__(self, idx):
        out = self._take(_index_plates(idx))
        out.where = self.where
        return out

    def _take(self, idx):
        raise NotImplementedError

    def broadcast(self, plates):
        """The same predictive with its entries broadcast to ``plates``."""
        plates = tuple(plates)
        if plates == self.plates:
            return self
        out = self._broadcast(plates)
        out.where = self.where
        return out

    def _broadcast(self, plates):
        raise NotImplementedError


def _checked_sample(f):
    def sample(self, size=None, seed=None):
        where = f"{self.where}.sample"
        return f(self, check_size(where, size), check_seed(where, seed))
    sample.__doc__, sample._checked = f.__doc__, True
    return sample


def _checked_logpdf(f):
    def logpdf(self, values):
        return f(self, check_values(f"{self.where}.logpdf", values, self.plates,
                                    self.value_ndim, self.event_shape))
    logpdf.__doc__, logpdf._checked = f.__doc__, True
    return logpdf


def _checked_interval(f):
    def interval(self, level=0.95, samples=20000, seed=0):
        where = f"{self.where}.interval"
        return f(self, check_level(where, level), check_count(where, "samples", samples),
                 check_seed(where, seed))
    interval.__doc__, interval._checked = f.__doc__, True
    return interval


Predictive.interval = _checked_interval(Predictive.interval)


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


# ---- exact family and Monte Carlo ------------------------------------------------------
def _plate_shift(family, plates):
    """A family's location shift broadcast to plates + the value's shape (None without one,
    or when it does not line up with ``plates``)."""
    c = getattr(family, "shift", None)
    if c is None or not isinstance(family.value_ndim, int):
        return None
    try:
        return _bcast(c, plates, family.value_ndim) if family.value_ndim else _bcast(c, plates)
    except ValueError:
        return None


def _family_event(family, nat):
    """The shape of one value of ``family`` from its first natural parameter (None when that
    parameter's event axes are not the value's)."""
    k = family.value_ndim
    if not isinstance(k, int) or not family.event_ndims or family.event_ndims[0] != k:
        return None
    return tuple(np.shape(nat[0])[np.ndim(nat[0]) - k:]) if k else ()


class FamilyPredictive(Predictive):
    """The conditional itself (every parent fixed): the node's family at ``nat``."""

    def __init__(self, family, nat, plates):
        super().__init__(plates)
        self.family = family
        self.value_ndim = family.value_ndim
        self.nat = tuple(_bcast(a, self.plates, k) for a, k in zip(nat, family.event_ndims))
        self.event_shape = _family_event(family, self.nat)
        self.name = family.name
        self.discrete = family.discrete
        self.shift = _plate_shift(family, self.plates)

    @property
    def centred_mean(self):
        if getattr(self.family, "shift", None) is None:
            return self.family.mean(self.nat)
        return self.family.with_shift(None).mean(self.nat)

    @property
    def mean(self):
        return self.family.mean(self.nat)

    @property
    def var(self):
        return self.family.var(self.nat)

    @property
    def cov(self):
        return self.family.cov(self.nat)

    @property
    def probs(self):
        return self.family.mean(self.nat)

    def logpdf(self, values):
        return self.family.logpdf(values, self.nat)

    def sample(self, size=None, seed=None):
        return self.family.sample(self.nat, _rng(seed), size)

    def to_scipy(self):
        return self.family.to_scipy(self.nat)

    def _take(self, idx):
        nat = tuple(a[idx] for a in self.nat)
        k0 = self.family.event_ndims[0]
        return FamilyPredictive(self.family, nat, nat[0].shape[:nat[0].ndim - k0])

    def _broadcast(self, plates):
        return FamilyPredictive(self.family, self.nat, plates)


def _draws_to(a, k, plates):
    """Draws a ((S,) + their plates + k event axes) broadcast to (S,) + plates + event:
    plates with fewer axes line up on the right, after the draws' axis."""
    extra = len(plates) - (a.ndim - 1 - k)
    if extra > 0:
        a = a.reshape(a.shape[:1] + (1,) * extra + a.shape[1:])
    return np.broadcast_to(a, a.shape[:1] + tuple(plates) + a.shape[a.ndim - k:] if k
                           else a.shape[:1] + tuple(plates))


class MonteCarloPredictive(Predictive):
    """E_q[p(x | parents)] by S draws of the parents from q (mean field: each parent
    from its own q): ``logpdf`` = log of the mean density over the draws, ``mean``
    and ``var`` by the laws of total expectation and variance over the draws unless
    the factor gives them exactly, ``sample`` draws fresh parents for every value."""

    exact = False

    def __init__(self, family, nat_draws, plates, draw_nat=None, mean=None, var=None):
        super().__init__(plates)
        self.family = family
        self.value_ndim = family.value_ndim
        self.name = f"{family.name} (Monte Carlo over q, {np.shape(nat_draws[0])[0]} draws)"
        self.nat = tuple(_draws_to(np.asarray(a), k, self.plates)
                         for a, k in zip(nat_draws, family.event_ndims))
        self.event_shape = _family_event(family, self.nat)
        self._draw_nat = draw_nat
        self._mean, self._var = mean, var
        self.shift = _plate_shift(family, self.plates)
        # the draws' means relative to the family's shift (their spread keeps its digits)
        self._cfam = family if getattr(family, "shift", None) is None else family.with_shift(None)

    @property
    def probs(self):
        return self.mean

    @property
    def centred_mean(self):
        if self._mean is not None and self._cfam is self.family:
            return self._mean
        m = np.mean(self._cfam.mean(self.nat), axis=0)
        if self.shift is None and self._cfam is not self.family:
            m = m + self.family.shift     # (a shift that does not line up with the plates)
        return m

    @property
    def n_draws(self):
        return self.nat[0].shape[0]

    @property
    def mean(self):
        if self._mean is not None:
            return self._mean
        m = np.mean(self._cfam.mean(self.nat), axis=0)
        return m if self._cfam is self.family else m + self.family.shift

    @property
    def var(self):
        if self._var is not None:
            return self._var
        m = self._cfam.mean(self.nat)
        return np.mean(self.family.var(self.nat), axis=0) + np.var(m, axis=0)

    @property
    def cov(self):
        m = self._cfam.mean(self.nat)
        c = self.family.cov(self.nat)
        mm = np.mean(m, axis=0)
        d = m - mm
        return np.mean(c, axis=0) + np.mean(d[..., :, None] * d[..., None, :], axis=0)

    def logpdf(self, values):
        return logsumexp(self.family.logpdf(values, self.nat), axis=0) - np.log(self.n_draws)

    def sample(self, size=None, seed=None):
        rng = _rng(seed)
        shape = _size(size)
        n = int(np.prod(shape, dtype=int)) if shape else 1
        if self._draw_nat is not None:   # fresh parent draws: exact draws from the predictive
            nat = self._draw_nat(n, rng)
            nat = tuple(_draws_to(np.asarray(a), k, self.plates)
                        for a, k in zip(nat, self.family.event_ndims))
        else:
            pick = rng.integers(self.n_draws, size=n)
            nat = tuple(a[pick] for a in self.nat)
        x = self.family.sample(nat, rng, None)
        return x.reshape(shape + x.shape[1:]) if shape else x[0]

    def _take(self, idx):
        sl = (slice(None),) + idx
        nat = tuple(a[sl] for a in self.nat)
        k0 = self.family.event_ndims[0]
        plates = nat[0].shape[1:nat[0].ndim - k0]
        sub = lambda a: None if a is None else a[idx]  # noqa: E731
        return MonteCarloPredictive(self.family, nat, plates, None, sub(self._mean), sub(self._var))

    def _broadcast(self, plates):
        b = lambda a: None if a is None else np.broadcast_to(a, plates)  # noqa: E731
        return MonteCarloPredictive(self.family, self.nat, plates, self._draw_nat, b(self._mean),
                                    b(self._var))


# ---- mixtures --------------------------------------------------------------------------
class MixturePredictive(Predictive):
    """sum_k weights_k p_k(x): ``weights`` (plates + (K,)) are q(z) of each entry (or the
    assignment probabilities of a new row), ``components`` a predictive with plates +
    (K,)."""

    def __init__(self, weights, components, plates):
        super().__init__(plates)
        self.weights = _bcast(weights, self.plates, 1)
        self.components = components.broadcast(self.weights.shape)
        self.value_ndim = components.value_ndim
        self.event_shape = components.event_shape
        self.discrete = components.discrete
        self.exact = components.exact
        self.name = f"mixture of {components.name}"

    def _w(self, a, event):
        return self.weights.reshape(self.weights.shape + (1,) * event) * a

    @property
    def _mean_ndim(self):
        return 1 if self.components.name.startswith("Categorical") else self.value_ndim

    def _common_shift(self):
        """The components' location shift when it is one c for all K (the location group of
        a mixture's components shares c, docs/dev/numerics.md), else None."""
        c = getattr(self.components, "shift", None)
        if c is None or self._mean_ndim != self.value_ndim:
            return None
        ax = c.ndim - self.value_ndim - 1
        first = np.take(c, [0], axis=ax)
        return np.squeeze(first, axis=ax) if np.all(c == first) else None

    def _means(self):
        """(component means, mixture mean, shift): relative to the common shift when there
        is one, so that spreads of data far from zero keep their digits."""
        k = self._mean_ndim
        c = self._common_shift()
        cm = self.components.centred_mean if c is not None else self.components.mean
        return cm, np.sum(self._w(cm, k), axis=-(k + 1)), c

    @property
    def mean(self):
        _, m, c = self._means()
        return m if c is None else m + c

    @property
    def probs(self):
        return self.mean

    @property
    def var(self):
        if self._mean_ndim != self.value_ndim:   # labels: p (1 - p) of the mixed p
            m = self.mean
            return m * (1.0 - m)
        if self.value_ndim:
            return np.diagonal(self.cov, axis1=-2, axis2=-1).copy()
        cm, m, _ = self._means()
        d = cm - m[..., None]
        return np.sum(self.weights * (self.components.var + d * d), axis=-1)

    @property
    def cov(self):
        c = self.components
        cm, m, _ = self._means()
        d = cm - m[..., None, :]
        second = c.cov + d[..., :, None] * d[..., None, :]
        out = np.sum(self._w(second, 2), axis=-3)
        free = getattr(c, "free", None)
        if free is not None:      # coordinates fixed by conditioning in every component
            f = np.any(free, axis=-2)
            out = np.where(f[..., :, None] & f[..., None, :], out, 0.0)
        return out

    def _expand(self, values):
        x = np.asarray(values)
        k = self.value_ndim
        return np.expand_dims(x, x.ndim - k)

    def component_logpdf(self, values):
        """log p_k(x) per entry and component (plates + (K,))."""
        return self.components.logpdf(self._expand(values))

    def responsibilities(self, values):
        """p(component k | x) per entry: weights_k p_k(x) / p(x)."""
        lw = np.log(self.weights) + self.component_logpdf(values)
        return np.exp(lw - logsumexp(lw, axis=-1, keepdims=True))

    def logpdf(self, values):
        with np.errstate(divide="ignore"):
            lw = np.log(self.weights)
        return logsumexp(lw + self.component_logpdf(values), axis=-1)

    def sample(self, size=None, seed=None):
        rng = _rng(seed)
        shape = _size(size) + self.plates
        cdf = np.cumsum(self.weights, axis=-1)
        u = rng.random(shape) * cdf[..., -1]
        k = (cdf <= u[..., None]).sum(axis=-1)
        x = self.components.sample(size, seed=rng)     # size + plates + (K,) + event
        ev = self.value_ndim
        x = np.broadcast_to(x, shape + x.shape[len(shape):])
        idx = k.reshape(shape + (1,) * (ev + 1))       # the drawn component of each entry
        idx = np.broadcast_to(idx, shape + (1,) + x.shape[len(shape) + 1:])
        return np.take_along_axis(x, idx, axis=len(shape)).reshape(shape + x.shape[len(shape) + 1:])

    def condition(self, values):
        """Condition each entry on the finite coordinates of vector ``values`` (NaN =
        unknown): the weights become p(k | observed coordinates), the components their
        conditionals (the multivariate-t / normal conditional of the missing coordinates)."""
        ll, comp = self.components.condition(self._expand(values))
        with np.errstate(divide="ignore"):
            lw = np.log(self.weights) + ll
        r = np.exp(lw - logsumexp(lw, axis=-1, keepdims=True))
        return MixturePredictive(r, comp, r.shape[:-1])

    def to_scipy(self):
        raise NotImplementedError("scipy has no mixture distributions; use logpdf, mean, var, "
                                  "sample, or .weights and .components")

    def _take(self, idx):
        w = self.weights[idx]
        comp = self.components.broadcast(self.weights.shape)
        return MixturePredictive(w, comp[idx], w.shape[:-1])

    def _broadcast(self, plates):
        return MixturePredictive(self.weights, self.components.broadcast(
            tuple(plates) + self.weights.shape[-1:]), plates)


# ---------------------------------------------------------------------------------------
# What a factor sees of its parents
class ParentDist:
    """One parent of a factor, as the predictive sees it.

    ``kind``: ``"fixed"`` (a constant, data, or a point mass: ``value``), ``"q"``
    (a fitted distribution: ``family`` and ``nat``; ``params`` in the constructor's
    names) or ``"derived"`` (a deterministic node: drawn from its parents; a linear
    predictor of a Gaussian q also has an exact ``mean`` and ``var``)."""

    def __init__(self, node, kind, plates, family=None, nat=None, value=None, mask=None,
                 draw=None, mean=None, var=None):
        self.node, self.kind, self.plates = node, kind, tuple(plates)
        self.family, self.nat, self.value, self.mask = family, nat, value, mask
        self._draw, self._mean, self._var = draw, mean, var

    @property
    def fixed(self):
        return self.kind == "fixed"

    @property
    def params(self):
        return self.family.params_from_natural(self.nat)

    @property
    def shift(self):
        """The location shift c of a Gaussian parent's coordinates (None: none)."""
        return _shift_of(self) if self.kind != "derived" else None

    @property
    def centred_params(self):
        """``params`` with the location relative to ``shift`` (all its digits kept)."""
        if self.shift is None:
            return self.params
        return self.family.with_shift(None).params_from_natural(self.nat)

    @property
    def centred_mean(self):
        """``mean`` relative to ``shift``: a Gaussian location far from zero keeps the digits
        of its distance from c (docs/dev/numerics.md)."""
        if self.shift is None:
            return self.mean
        if self.kind == "q":
            return self.family.with_shift(None).mean(self.nat)
        if self.nat is not None:     # a point mass: its centred mode
            return self.family.with_shift(None).point_value(self.nat)
        return np.asarray(self.value, dtype=float) - self.shift

    @property
    def gaussian(self):
        """True when the parent's marginal is Gaussian (or a point): mean/var exact."""
        if self.kind == "fixed":
            return True
        if self.kind == "q":
            return isinstance(self.family, (NormalFamily, MVNFamily))
        return self._mean is not None

    @property
    def mean(self):
        if self.kind == "fixed":
            return np.asarray(self.value, dtype=float)
        if self.kind == "q":
            return self.family.mean(self.nat)
        return self._mean

    @property
    def var(self):
        if self.kind == "fixed":
            return np.zeros(np.shape(self.value))
        if self.kind == "q":
            return self.family.var(self.nat)
        return self._var

    @property
    def cov(self):
        if self.kind == "fixed":
            v = np.asarray(self.value, dtype=float)
            return np.zeros(v.shape + v.shape[-1:])
        return self.family.cov(self.nat)

    def draw(self, S, rng, cache):
        """S values drawn from q: shape (S,) + plates + event (a pair for joint nodes).
        Draws of one node are shared by every reader in the same predictive. A fixed
        value is not cached: it draws nothing, and its gather ``node[idx]`` (:meth:`take`)
        keeps the node (for its shift) while holding other entries."""
        if self.kind == "fixed":
            v = np.asarray(self.value)
            return np.broadcast_to(v, (S,) + v.shape)
        key = id(self.node) if self.node is not None else id(self)
        if key in cache:
            return cache[key]
        if self.kind == "q":
            out = self.family.sample(self.nat, rng, S)
        else:
            out = self._draw(S, rng, cache)
        cache[key] = out
        return out

    def take(self, idx):
        """The entries ``idx`` of the first plate axis (a gather ``node[idx]``)."""
        ev = self.family.event_ndims if self.family is not None else None
        if self.kind == "fixed":
            return ParentDist(self.node, "fixed", np.shape(idx) + self.plates[1:],
                              family=self.family,
                              value=np.take(np.broadcast_to(self.value, self.plates +
                                                            np.shape(self.value)[len(self.plates):]),
                                            idx, axis=0))
        if self.kind == "q":
            nat = tuple(np.take(np.broadcast_to(a, self.plates + np.shape(a)[np.ndim(a) - k:]),
                                idx, axis=0) for a, k in zip(self.nat, ev))
            return ParentDist(None, "q", np.shape(idx) + self.plates[1:], family=self.family, nat=nat)
        src = self

        def draw(S, rng, cache):
            return np.take(src.draw(S, rng, cache), idx, axis=1)
        return ParentDist(None, "derived", np.shape(idx) + self.plates[1:], draw=draw)


def dot_parent(X, w, node=None):
    """The ParentDist of a = X w (a linear predictor) for the design rows ``X``."""
    X = np.asarray(X, dtype=float)
    plates = np.broadcast_shapes(X.shape[:-1], w.plates)
    mean = var = None
    if w.gaussian:
        m = w.mean
        mean = np.einsum("...d,...d->...", X, m)
        var = np.zeros(mean.shape) if w.fixed else np.einsum("...d,...de,...e->...", X, w.cov, X)

    def draw(S, rng, cache):
        ws = w.draw(S, rng, cache)                                     # (S,) + w.plates + (D,)
        ws = ws.reshape((S,) + (1,) * (len(plates) - len(w.plates)) + ws.shape[1:])
        return np.einsum("...d,...d->...", X, ws)
    return ParentDist(node, "derived", plates, draw=draw, mean=mean, var=var)


class Context:
    """Options of one predictive: Monte Carlo draws, the seed, and new inputs."""

    def __init__(self, samples=2000, seed=0, inputs=None, values=None):
        self.samples = int(samples)
        self.rng = _rng(seed)
        self.seed = seed
        self.inputs = inputs or {}
        self.values = values


def monte_carlo(factor, q, plates, ctx, mean=None, var=None):
    """The Monte Carlo predictive of ``factor`` (the default of every factor): S draws of
    the parents from q, each turned into the child's natural parameters eta(theta_s)
    (``prior_natural`` at the moments T(theta_s) of a point is eta(theta_s))."""
    fam = predictive_family(factor, q)
    n = len(plates)

    def draw_nat(S, rng):
        cache = {}
        u = []
        for i, pd in enumerate(q):
            v = pd.draw(S, rng, cache)
            extra = factor.draw_ndim(i, n) - len(pd.plates)   # line the plates up on the right

            def pad(a):
                a = np.asarray(a, dtype=float)
                return a.reshape((S,) + (1,) * extra + a.shape[1:]) if extra > 0 else a
            val = tuple(pad(a) for a in v) if isinstance(v, tuple) else pad(v)
            u.append(slot_stats(factor, i, val, pd))
        return factor.draw_natural(u)

    nat = draw_nat(ctx.samples, ctx.rng)
    return MonteCarloPredictive(fam, nat, plates, draw_nat, mean, var)


def _shift_of(pd):
    """The location shift of parent ``pd``'s coordinates (None: none; docs/dev/numerics.md)."""
    fam = getattr(pd, "family", None)
    return getattr(fam, "shift", None) if getattr(fam, "locational", False) else None


def slot_stats(factor, i, value, pd=None):
    """T(value) in slot i's family (a Categorical slot needs its K). ``value`` is in the
    data's coordinates; a Gaussian parent ``pd`` with a location shift c gives T(value - c),
    the statistics of the centred variable its location group works with."""
    slot = factor.slots[i].family
    if slot.is_label:
        return slot.suff_stats(np.asarray(value).astype(int), K=factor.n_categories())
    c = _shift_of(pd) if getattr(slot, "locational", False) else None
    if c is not None:
        fam = slot.with_shift(c)
        return fam.suff_stats(fam.centre(value))
    return slot.suff_stats(value)


def predictive_family(factor, q):
    """The child's family in the coordinates of the natural parameters that
    ``factor.draw_natural`` / ``prior_natural`` give from :func:`slot_stats`: those of its
    Gaussian location parents (shift c, shaped like their plates; a mixture component's
    parameters carry the K axis), so that logpdf, mean and samples come out in the data's
    coordinates."""
    fam = factor.node.family
    if not getattr(fam, "locational", False):
        return fam
    for i, pd in enumerate(q):
        if getattr(factor.slots[i].family, "locational", False):
            c = _shift_of(pd)
            if c is not None:
                return fam.with_shift(c)
    return fam.with_shift(None)


def fixed_predictive(factor, q, plates):
    """Every parent fixed: the conditional itself, the node's family at eta(parents)."""
    u = [slot_stats(factor, i, pd.value, pd) for i, pd in enumerate(q)]
    return FamilyPredictive(predictive_family(factor, q), factor.prior_natural(u), plates)


# ---------------------------------------------------------------------------------------
# node.predictive(): the parents as the factor sees them, new inputs, assignments
def parent_dist(p, dots=None):
    """The ParentDist of node ``p`` under the fitted q (``dots``: {Dot node: new X})."""
    from .deterministic import Dot, Gather
    from .node import Constant
    dots = dots or {}
    if isinstance(p, Constant):
        return ParentDist(p, "fixed", p.plates, family=p.provides, value=p.value)
    if p.deterministic:
        if isinstance(p, Dot) and not hasattr(p.X, "moments"):
            return dot_parent(dots.get(p, p.X), parent_dist(p.w, dots), node=None if p in dots else p)
        if isinstance(p, Gather):
            return parent_dist(p.source, dots).take(p.idx)
        forward = getattr(p, "forward", None)
        if forward is None:
            raise TypeError(f"{p.label()}: a predictive through this deterministic node needs its "
                            f"forward(values) map; it has none")
        srcs = [parent_dist(a, dots) for a in p.parents]

        def draw(S, rng, cache):
            return forward(*[s.draw(S, rng, cache) for s in srcs])
        return ParentDist(p, "derived", p.plates, draw=draw)
    if getattr(p, "observed", False):
        if p.value is None:
            raise ValueError(f"{p.label()} holds streamed data; a predictive needs its values in "
                             f"memory")
        return ParentDist(p, "fixed", p.plates, family=p.family, value=p.value, mask=p.mask)
    if getattr(p, "point", False):
        return ParentDist(p, "fixed", p.plates, family=p.family, value=p.family.point_value(p.nat),
                          nat=tuple(np.asarray(a) for a in p.nat))
    if not getattr(p, "fitted", False):
        why = getattr(p, "unfitted_reason", None)
        raise AttributeError(f"{p.label()} has no posterior{': ' + why if why else ' yet'}; fit the "
                             f"model (model.fit(...) or model.load(path)) before asking for "
                             f"predictions")
    return ParentDist(p, "q", p.plates, family=p.family, nat=tuple(np.asarray(a) for a in p.nat))


def _is_mixture(node):
    return getattr(node, "factor", None) is not None and node.factor.selector() is not None


def _assignment_children(node):
    return [c for c in node.children if _is_mixture(c) and c.factor.selector() is node]


def _resolve_inputs(node, inputs):
    """Sort ``inputs`` into new design rows of Dot parents, new values of the node itself
    (a mixture: new rows) and new values of mixture children (an assignment)."""
    from .deterministic import Dot
    dots, values, kids = {}, None, {}
    dot_parents = [p for p in node.factor.parents if isinstance(p, Dot)]
    children = _assignment_children(node)
    if not isinstance(inputs, dict):
        if _is_mixture(node):
            return dots, inputs, kids
        if len(dot_parents) == 1:
            return {dot_parents[0]: inputs}, None, kids
        if children:
            raise TypeError(f"{node.label()}.predictive(inputs=...): give a dict of new values of "
                            f"its mixture children {[c.name for c in children]}")
        raise TypeError(f"{node.label()}.predictive(inputs=...): the node has no Dot(X, w) parent "
                        f"and is not a Mixture, so there is no input to replace; give a dict "
                        f"{{node name: new values}}")
    named = {d.name: d for d in dot_parents}
    named.update({c.name: c for c in children})
    for key, v in inputs.items():
        name = key if isinstance(key, str) else getattr(key, "name", key)
        if name == node.name:
            values = v
        elif name in named and named[name] in dot_parents:
            dots[named[name]] = v
        elif name in named:
            kids[named[name]] = v
        else:
            raise KeyError(f"{node.label()}.predictive(inputs=...): {name!r} is neither this node, "
                           f"a Dot parent ({[d.name for d in dot_parents]}) nor a mixture child "
                           f"({[c.name for c in children]})")
    return dots, values, kids


def _new_assignments(z, M, ctx):
    """The predictive of the assignment z of M new rows (from z's parents alone)."""
    qz = [parent_dist(p) for p in z.factor.parents]
    for pd in qz:
        if len(pd.plates) == len(z.plates) and z.plates and pd.plates[0] != 1:
            raise ValueError(f"{z.label()}: its prior varies along the data axis ({pd.plates}), "
                             f"so new rows have no prior assignment probabilities (LDA: fit the "
                             f"new documents' topic mixtures instead, see docs/predict.md)")
    plates = (M,) + tuple(z.plates[1:])
    pred = z.factor.predictive(qz, plates, ctx)
    with np.errstate(divide="ignore"):
        logp = np.log(np.asarray(pred.probs, dtype=float))
    return ParentDist(None, "q", plates, family=z.family, nat=(logp,))


def _check_rows(node, values, what):
    where = f"{node.label()}.predictive(inputs=...)"
    try:
        v = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: {what} must be numbers (NaN = missing), got "
                        f"{np.asarray(values).dtype} values") from None
    inf = np.isinf(v)
    if inf.any():
        raise ValueError(f"{where}: {what} hold an infinite value ({_first_bad(inf)}); give "
                         f"finite numbers (NaN marks a missing cell)")
    vnd = node.family.value_ndim
    tail = tuple(node.plates[1:])
    if v.ndim != len(node.plates) + vnd or tuple(v.shape[1:len(node.plates)]) != tail:
        ev = tuple(np.shape(node.value)[len(node.plates):]) if node.value is not None else ()
        raise ValueError(f"{node.label()}.predictive(inputs=...): {what} must have shape "
                         f"(M,) + {tail + ev} (M new rows; NaN = missing), got {v.shape}")
    return v


def node_predictive(node, inputs=None, samples=2000, seed=0):
    """See :meth:`Stochastic.predictive`."""
    factor = getattr(node, "factor", None)
    if factor is None or getattr(node, "family", None) is None:
        raise TypeError(f"{node.label()} has no predictive distribution")
    where = f"{node.label()}.predictive"
    ctx = Context(check_count(where, "samples", samples), check_seed(where, seed))
    dots, values, kids = ({}, None, {}) if inputs is None else _resolve_inputs(node, inputs)
    dots = {d: _check_design(node, d, X) for d, X in dots.items()}
    q = [parent_dist(p, dots) for p in factor.parents]
    plates = tuple(node.plates)
    if values is not None:
        if not _is_mixture(node):
            raise TypeError(f"{node.label()}.predictive(inputs=...): new values of the node itself "
                            f"are taken by mixtures only")
        v = _check_rows(node, values, "the new rows")
        M = v.shape[0]
        z = factor.parents[0]
        zq = _new_assignments(z, M, ctx)
        q[0] = zq
        plates = (M,) + tuple(node.plates[1:])
        ctx.values = v
    elif dots:
        plates = tuple(factor.predictive_plates(q))
    pred = factor.predictive(q, plates, ctx)
    if values is None and not dots:
        pred = condition_partial_rows(node, q, pred)
    children = _assignment_children(node)
    if kids or (children and node.observed):
        pred = _condition_assignment(node, pred, kids, ctx)
    pred.where = f"{node.label()}.predictive()"
    return pred


def _first_bad(bad):
    """(row, column) of the first True of a (M, ..., D) array, as a readable location."""
    idx = np.argwhere(bad)[0]
    return f"row {idx[0]}" + (f", column {idx[-1]}" if len(idx) > 1 else "")


def _check_design(node, dot, X):
    """New design rows of ``dot = Dot(X, w)``: numbers, D columns, every cell finite (a
    covariate cannot be missing, as in ``Dot(X, w)`` itself: NaN would give NaN means)."""
    where = f"{node.label()}.predictive(inputs=...)"
    try:
        v = np.asarray(X, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: the new rows of {dot.label()} must be numbers, got "
                        f"{np.asarray(X).dtype} values such as {str(np.ravel(X)[:1])[:40]}") \
            from None
    D = np.shape(dot.X)[-1]
    if v.ndim == 0 or v.shape[-1] != D:
        raise ValueError(f"{where}: the new rows of {dot.label()} must have the {D} columns of "
                         f"its X (shape (M, {D})), got shape {v.shape}")
    bad = ~np.isfinite(v)
    if bad.any():
        if np.isinf(v).any():
            bad, what, fix = np.isinf(v), "an infinite value", "give finite numbers"
        else:
            what, fix = "NaN", "a covariate cannot be missing: impute it or leave the row out"
        raise ValueError(f"{where}: the new rows of {dot.label()} hold {what} ({_first_bad(bad)}); "
                         f"{fix}")
    return v


def _condition_assignment(z, pred, kids, ctx):
    """An assignment (a Categorical that picks the components of Mixture children) given
    its children's observed cells: p(z = k | cells) proportional to p(z = k) prod_cells
    p_k(cell) with the components' predictives (exact under q of the parameters).
    ``kids``: {child: new values} for new rows; otherwise the children's own data."""
    probs = np.asarray(pred.probs, dtype=float)
    if kids:
        Ms = {np.shape(v)[0] for v in kids.values()}
        if len(Ms) != 1:
            raise ValueError(f"{z.label()}.predictive(inputs=...): the children's new rows differ in "
                             f"number ({sorted(Ms)})")
        M = Ms.pop()
        zplates = (M,) + tuple(z.plates[1:])
        zq = _new_assignments(z, M, ctx)
        logw = np.broadcast_to(zq.nat[0], zplates + zq.nat[0].shape[-1:])
        items = [(c, _check_rows(c, v, f"inputs[{c.name!r}]")) for c, v in kids.items()]
    else:
        zplates = tuple(z.plates)
        with np.errstate(divide="ignore"):
            logw = np.log(np.broadcast_to(probs, zplates + probs.shape[-1:]))
        items = []
        for c in _assignment_children(z):
            if not c.observed or c.value is None:
                continue
            v = np.asarray(c.value, dtype=float)
            if c.mask is not None:
                m = np.broadcast_to(np.asarray(c.mask, bool), c.plates)
                v = np.where(m.reshape(m.shape + (1,) * c.family.value_ndim), v, np.nan)
            items.append((c, v))
    ll = 0.0
    for c, v in items:
        qc = [parent_dist(p) for p in c.factor.parents]
        comp = c.factor.component_predictive(qc, ctx)
        part, _ = c.factor.assignment_loglik(comp, v, zplates)
        ll = ll + part
    lw = logw + ll
    lw = lw - lw.max(axis=-1, keepdims=True)
    r = np.exp(lw)
    r /= r.sum(axis=-1, keepdims=True)
    return CategoricalPredictive(r, zplates)


def log_predictive(node, values, mask=None, inputs=None, samples=2000, seed=0):
    """sum over entries of log p(values | data) under the fitted q: held-out scoring
    (``node.predictive(inputs).log_predictive(values, mask)``)."""
    return node.predictive(inputs=inputs, samples=samples, seed=seed).log_predictive(values, mask)


# ---------------------------------------------------------------------------------------
# Partly observed vectors (observe(X, mask) with a mask of X's shape, docs/predict.md)
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


def _partial_rows(node):
    """(rows, x): ``rows`` a bool over the node's plates marking the observed entries with
    some but not all coordinates observed, ``x`` (n, D) their values, NaN where missing;
    None when there is no such entry."""
    fam = getattr(node, "family", None)
    if fam is None or fam.value_ndim != 1 or not getattr(node, "observed", False):
        return None
    cells = node.cells()
    if cells is None:
        return None
    plates = tuple(node.plates)
    v = np.asarray(node.value, dtype=float)
    D = v.shape[-1]
    v = np.broadcast_to(v, plates + (D,))
    cells = np.broadcast_to(cells, plates + (D,))
    rows = cells.any(-1) & ~cells.all(-1)
    if node.mask is not None:
        rows = rows & np.broadcast_to(np.asarray(node.mask, bool), plates)
    if not rows.any():
        return None
    return rows, np.where(cells[rows], v[rows], np.nan)


def condition_partial_rows(node, q, pred):
    """``pred`` with each partly observed entry of ``node`` replaced by the predictive of its
    missing coordinates given its observed ones, E_q[p(x_m | x_o, parents)]
    (docs/predict.md, docs/math.md §6.1): the row's own cells are already in the fitted
    q, so they are not counted a second time. A mixture entry keeps its fitted q(z_n)
    (the responsibilities given its observed coordinates) and mixes its components'
    conditionals (Monte Carlo: over the draws of ``pred``)."""
    part = _partial_rows(node)
    if part is None:
        return pred
    rows, x = part
    factor = node.factor
    sub = pred[rows]
    if _is_mixture(node):
        K = sub.weights.shape[-1]
        comps = _conditional(factor.component, q[1:], sub.components, x[:, None, :], rows,
                             tuple(node.plates) + (K,), node)
        cond = MixturePredictive(sub.weights, comps, sub.plates)
    else:
        cond = _conditional(factor, q, sub, x, rows, tuple(node.plates), node)
    return PartlyObserved(pred, cond, rows, x)


def _conditional(factor, q, sub, x, rows, full, node):
    """The conditional predictive of the missing coordinates of ``x`` (NaN) given the
    others under the predictive ``sub`` of the same entries (plates (n,) or (n, K))."""
    from .factors.gaussian import DiagonalGammaFactor, MultivariateNormalFactor
    if isinstance(sub, FamilyPredictive):          # every parent fixed: a Gaussian
        sub = MultivariateT(np.inf, sub.centred_mean, sub.cov, sub.plates, shift=sub.shift)
    if isinstance(sub, MultivariateT):
        mean = q[0]
        if (np.all(np.isinf(sub.df)) and mean.kind == "q"
                and isinstance(factor, (MultivariateNormalFactor, DiagonalGammaFactor))):
            D = sub.cloc.shape[-1]
            if isinstance(factor, MultivariateNormalFactor):
                noise = np.linalg.inv(np.asarray(q[1].value, dtype=float))
            else:
                t = np.asarray(q[1].value, dtype=float)
                t = np.broadcast_to(t, t.shape[:-1] + (D,)) if t.ndim else np.full(D, float(t))
                noise = np.eye(D) / t[..., None, :]
            S = np.broadcast_to(mean.cov, full + (D, D))[rows]
            noise = np.broadcast_to(noise, full + (D, D))[rows]
            return _gaussian_mean_conditional(sub, S, noise, x)
        # a fixed mean, NormalWishart, a fixed mean + Wishart: the t-conditional is
        # E_q[p(x_m | x_o, parents)] itself (docs/math.md §6.1)
        return sub.condition(x)[1]
    if isinstance(sub, MonteCarloPredictive):
        return _monte_carlo_conditional(sub, x)
    raise NotImplementedError(f"{node.label()}: no conditional predictive of partly observed "
                              f"vectors for a {type(sub).__name__}")


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
