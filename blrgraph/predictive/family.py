"""The conditional itself at fixed parents (:class:`FamilyPredictive`), its Monte Carlo
average over q (:class:`MonteCarloPredictive`) and mixtures of predictives
(:class:`MixturePredictive`)."""
from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from .base import Predictive, _bcast, _rng, _size


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
