"""The base class of every predictive, :class:`Predictive` (docs/predict.md), and the helpers
the predictives share."""
from __future__ import annotations

import numpy as np

from .checks import (check_count, check_level, check_mask, check_seed, check_size, check_values,
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
        where they enter (blrgraph.predictive.checks), naming the node and the argument."""
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
