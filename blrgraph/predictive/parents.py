"""What a factor sees of its parents (:class:`ParentDist`: fixed, a fitted q, or derived),
the options of one predictive (:class:`Context`), and the predictives every factor can
build from them: the conditional at fixed parents and the Monte Carlo average over q."""
from __future__ import annotations

import numpy as np

from ..families.multivariate_normal import MultivariateNormal as MVNFamily
from ..families.normal import Normal as NormalFamily
from .base import _rng
from .family import FamilyPredictive, MonteCarloPredictive


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


def aligned(v, plates, event_nd):
    """Draws (S,) + own plates + event with 1s inserted after S, so that they broadcast
    against ``plates`` (plates are aligned from the right)."""
    v = np.asarray(v)
    lead = len(plates) - (v.ndim - 1 - event_nd)
    return v.reshape((v.shape[0],) + (1,) * lead + v.shape[1:]) if lead > 0 else v


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
        ws = aligned(w.draw(S, rng, cache), plates, 1)             # (S,) + plates + (D,)
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
