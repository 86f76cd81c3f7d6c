"""Location shifts of Gaussian nodes: the engine works with centred variables
(docs/dev/numerics.md).

Data far from zero relative to their spread (coordinates, timestamps, sensor
readings: 1e8 + N(0, 1)) cancel in T(x) = (x, x^2) and in the natural
parameters of a Normal-Gamma (lam3 = -(b + beta m^2 / 2)). So the Gaussian
nodes linked through location slots (a Normal's mean, a NormalGamma or
NormalWishart parent, a MultivariateNormal's mean, the components of a mixture
of them, gathers of them) form a *location group* that shares one shift c: each
member's family is that of x - c (``family.shift``), constants in location
slots publish T(value - c), observed data are centred once
(``Stochastic.centred_value``), and the public values (posterior mean, params,
mode, samples, logpdf, to_scipy) add c back.

c is the mean of the group's largest observed data array, per cell along the
trailing plate axes that every member shares (one c per column of an (N, D)
table when the parameters have plates (D,)), and per coordinate of a vector.
A coordinate whose mean is within ``CENTRE_IF`` standard deviations of zero gets
c = 0 (centring it would gain nothing). A group that meets anything the shift
does not commute with (a linear predictor ``Dot``, a non-conjugate factor, a
Potential) is left unshifted.
"""
from __future__ import annotations

import numpy as np

from ..families.multivariate_normal import MultivariateNormal as MVNFamily
from ..families.normal_wishart import NormalWishart as NormalWishartFamily

from .chains_gaussian import GaussianChainFactor
from .deterministic import Add, Dot, Gate, Gather
from .factors.fixed import FixedPrior
from .factors.gaussian import (DiagonalGammaFactor, MultivariateNormalFactor, NormalFactor,
                               NormalGammaFactor, NormalWishartFactor)
from .factors.mixture import MixtureFactor
from .node import Constant

#: factor kinds whose first parent slot is the child's location (same coordinates)
_LOCATION_FACTORS = (NormalFactor, NormalGammaFactor, MultivariateNormalFactor,
                     NormalWishartFactor, DiagonalGammaFactor)

#: a coordinate is centred when |mean| > CENTRE_IF * sd of its data
CENTRE_IF = 4.0


def _locational(node):
    return node.provides is not None and node.provides.locational


def _location_parents(node):
    """(parent, via_mixture) of the location slot of a stochastic node's factor."""
    f = node.factor
    if isinstance(f, GaussianChainFactor):   # mean0; a shift needs a known A (A c = c)
        return [(f.parents[0], False)] if isinstance(f.parents[2], Constant) else []
    if isinstance(f, MixtureFactor):
        if isinstance(f.component, _LOCATION_FACTORS):
            return [(f.parents[1], True)]
        return []
    if isinstance(f, _LOCATION_FACTORS):
        return [(f.parents[0], False)]
    return []


def _boundary(node):
    """A ``Dot`` with a design matrix or an ``Add`` (of such, of Normal nodes, of constants):
    it publishes the moments of its value minus its own shift, computed from its operands'
    centred moments and shifts (deterministic.py: ``parts``), so it joins its child's
    location group while each operand keeps its own group."""
    if isinstance(node, Dot):
        return node.X is not None
    if isinstance(node, Add):
        return all(_boundary(p) or not p.deterministic or _gate_of_group(p)
                   for p in node.operands)
    return False


def _gate_of_group(node):
    """A ``Gate`` over the last plate axis of Gaussian components (an additive factorial
    HMM's ``Add(Gate(c1, m1), Gate(c2, m2))``): it joins its components' location group,
    and publishes the r-averaged moments of x - c with their shift c, which is all an
    ``Add`` needs of an operand (deterministic.py: ``_scalar_parts``)."""
    return isinstance(node, Gate) and node.axis == len(node.node.plates) - 1 \
        and _locational(node.node)


class _Groups:
    def __init__(self):
        self.parent = {}

    def find(self, a):
        self.parent.setdefault(a, a)
        while self.parent[a] is not a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[rb] = ra


def location_groups(model):
    """[(members, edges, pinned, constants)] for every group of linked Gaussian nodes.

    ``edges`` maps a member to [(neighbour, via_mixture, member_is_child)];
    ``constants`` lists (constant, child, via_mixture) of constants in location slots."""
    g = _Groups()
    edges, pinned, consts = {}, set(), []
    members = [n for n in model.nodes if _locational(n)]
    for n in members:
        g.find(n)
        edges.setdefault(n, [])

    def link(child, par, mix):
        g.union(child, par)
        edges.setdefault(child, []).append((par, mix, False))
        edges.setdefault(par, []).append((child, mix, True))

    for n in model.nodes:
        if n.deterministic:
            if isinstance(n, Gather):
                if _locational(n.source):
                    link(n, n.source, False)
            elif isinstance(n, Gate) and n.axis == len(n.node.plates) - 1 and _locational(n.node):
                link(n, n.node, True)   # r-averaged moments: the components' coordinates
            elif _boundary(n):
                pass   # its own shift, read from its operands' (deterministic.py: parts)
            else:   # Dot of two latent vectors: x w does not commute with a shift of x or w
                pinned.add(n)
                pinned.update(p for p in n.parents if _locational(p))
            continue
        if not n.stochastic:
            continue
        loc = _location_parents(n)
        loc_ids = {id(p) for p, _ in loc}
        for p, mix in loc:
            if isinstance(p, Constant):
                consts.append((p, n, mix))
            elif _locational(p):
                link(n, p, mix)
            else:
                pinned.add(n)
        for p in n.factor.parents:
            if id(p) not in loc_ids and not isinstance(p, Constant) and _locational(p):
                pinned.add(p)   # a Gaussian parent outside a location slot (NCVMP, Potential)
        if _locational(n) and not loc and not isinstance(n.factor, FixedPrior):
            pinned.add(n)
    out = {}
    for n in members:
        r = g.find(n)
        out.setdefault(r, [[], pinned, []])[0].append(n)
    for c, child, mix in consts:
        if _locational(child):
            out[g.find(child)][2].append((c, child, mix))
    return [(m, edges, any(x in pinned for x in m), c) for m, _, c in out.values()]


def _k_axes(members, edges, anchor, consts):
    """Flags (has the mixture's K axis last) of every member, reached from ``anchor``,
    and the number of trailing plate axes all members and the constants in their location
    slots share with the anchor's data (shifts never give a parameter more plates)."""
    flag = {anchor: False}
    stack = [anchor]
    conflict = False
    while stack:
        n = stack.pop()
        for m, mix, m_is_child in edges.get(n, []):
            f = flag[n] if not mix else (not m_is_child)
            if m in flag:
                conflict |= flag[m] != f
                continue
            flag[m] = f
            stack.append(m)
    if conflict or len(flag) != len(members):
        return flag, 0
    ref = tuple(anchor.plates)
    k = len(ref)
    plates = [(tuple(n.plates), flag.get(n)) for n in members]
    # a gather picks entries of its source's first axis: c must not vary along it
    plates += [((-1,) + tuple(n.source.plates[1:]), flag.get(n.source)) for n in members
               if isinstance(n, Gather)]
    # a chain's c is one per sequence: it must not vary along the time axis
    plates += [(tuple(n.plates[:-1]) + (-1,), flag.get(n)) for n in members if _is_chain(n)]
    # (a constant component parameter of a mixture: the statistics-matrix path reads its
    # moments with the parameters' plates; elsewhere constants broadcast)
    plates += [(tuple(c.plates), True) for c, child, mix in consts if mix]
    if not any(n.stochastic and not n.observed for n in members):
        # no latent member (data whose location parents are constants): c must not vary
        # along the data's own axes beyond the constants' plates, else every entry is its
        # own c and a predictive of new rows (or a saved fit) has no c to use
        plates += [(tuple(c.plates), bool(mix or flag.get(child))) for c, child, mix in consts]
        if not consts:
            k = 0
    for ep, has_k in plates:
        if has_k:
            ep = ep[:-1]
        j = 0
        while j < min(k, len(ep)) and ep[len(ep) - 1 - j] == ref[len(ref) - 1 - j] != 1:
            j += 1
        k = min(k, j)
    return flag, k


def _dask(node):
    """Are the node's data a dask array (docs/scaling.md)? Its partitions are then centred
    with the c of all its rows, computed on the cluster when the model is built."""
    return node.value is None and node.source is not None and node.source.dask


def _data_size(node):
    return int(np.prod(node.source.shape, dtype=np.int64)) if _dask(node) else np.size(node.value)


def _dask_shift(node, k):
    """:func:`_data_shift` of rows held in a dask array: one pass over the chunks for the
    sums of d = x - x_0 and d^2 about the first entry x_0 (so the variance keeps its
    digits far from zero), reduced on the cluster."""
    import dask
    arr = node.source.arr
    nplates = len(node.plates)
    axes = tuple(range(nplates - k))
    x0 = np.asarray(arr[(0,) * len(axes)].compute(), dtype=float)
    d = arr.astype(float) - x0
    s1, s2 = dask.compute(d.sum(axis=axes), (d * d).sum(axis=axes))
    n = float(np.prod([node.plates[a] for a in axes], dtype=np.int64))
    with np.errstate(invalid="ignore", divide="ignore"):
        m1 = np.asarray(s1, dtype=float) / n
        mean = x0 + m1
        var = np.maximum(np.asarray(s2, dtype=float) / n - m1 * m1, 0.0)
    ok = (n > 0) & np.isfinite(mean) & (np.abs(mean) > CENTRE_IF * np.sqrt(var))
    c = np.where(ok, mean, 0.0)
    return c if np.any(c != 0) else None


def _data_shift(node, k):
    """Mean of the node's observed data over all but the last k plate axes (per coordinate
    of a vector); 0 where it is within CENTRE_IF standard deviations of 0 or unobserved."""
    if _dask(node):
        return _dask_shift(node, k)
    x = np.asarray(node.value, dtype=float)
    nplates = len(node.plates)
    axes = tuple(range(nplates - k))
    w = np.ones(node.plates) if node.mask is None else np.asarray(node.mask, dtype=float)
    w = np.broadcast_to(w.reshape(w.shape + (1,) * (x.ndim - w.ndim)), x.shape)
    w = np.where(np.isnan(x), 0.0, w)   # the missing coordinates of partly observed vectors
    xs = np.where(w != 0, x, 0.0)
    n = np.sum(w, axis=axes)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.sum(w * xs, axis=axes) / n
        # a second pass about the first mean: the spread (and a mean correct to rounding)
        d = np.where(w != 0, x - mean, 0.0)
        mean = mean + np.sum(w * d, axis=axes) / n
        var = np.sum(w * d * d, axis=axes) / n
    ok = (n > 0) & np.isfinite(mean) & (np.abs(mean) > CENTRE_IF * np.sqrt(var))
    c = np.where(ok, mean, 0.0)
    return c if np.any(c != 0) else None


def _is_chain(node):
    return isinstance(node.factor, GaussianChainFactor)


def _chain_fixed(members, c):
    """c with the coordinates a chain's dynamics do not keep set to 0: x_t - c follows the
    same chain (mean0 - c) only when A c = c, i.e. c_j = 0 wherever column j of A - I is
    not 0 (a local linear trend keeps the level's c, not the slope's)."""
    if c is None:
        return c
    for n in members:
        if _is_chain(n):
            A = np.asarray(n.factor.parents[2].value, dtype=float)
            moved = np.any((A - np.eye(A.shape[-1])) != 0, axis=tuple(range(A.ndim - 1)))
            c = np.where(moved, 0.0, c)
    return c if np.any(c != 0) else None


def _member_shift(c, flag, vector):
    if c is None or not flag:
        return c
    if vector:
        return c[..., None, :] if c.ndim > 1 else c
    return c[..., None] if c.ndim > 0 else c


def _is_vector(members):
    return any(isinstance(n.provides, (MVNFamily, NormalWishartFamily)) for n in members)


def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return np.shape(a) == np.shape(b) and np.array_equal(a, b)


def _group_shift(members, edges, pinned, consts):
    """(c, flag) of one location group: its shift c and the members whose shift carries the
    component axis; None when the group keeps its own shift (a prior alone)."""
    data = [n for n in members if n.stochastic and n.observed and
            (n.value is not None or _dask(n))]
    c, flag = None, {}
    if data and not pinned:
        anchor = max(data, key=lambda n: (_data_size(n), -n.id))
        flag, k = _k_axes(members, edges, anchor, consts)
        if _dask(anchor):   # c per row would be the rows themselves, held by the client
            k = min(k, len(anchor.plates) - 1)
        c = _data_shift(anchor, k)
    elif not pinned and len(members) == 1 and \
            isinstance(members[0].factor, FixedPrior):
        return None    # a prior alone keeps its own mean as c (FixedPrior)
    elif not pinned:   # no data: a prior's own mean, when its shift needs no alignment
        own = [n.family.shift for n in members if n.stochastic and
               isinstance(n.factor, FixedPrior) and n.family.shift is not None]
        # or a constant in a location slot (a prior N(m0, P0) given as arrays, a
        # chain's mean0): the group's nodes then sit near it
        own += [const.value for const, child, mix in consts if not mix]
        if own and np.ndim(own[0]) <= (1 if _is_vector(members) else 0):
            c = own[0]
    return _chain_fixed(members, c), flag


def centre_model(model):
    """Give every location group of ``model`` its shift (see the module docstring).
    Latent members that have no fitted posterior restart at their prior; a fitted
    posterior is carried over to the new coordinates (through its parameters)."""
    changed = []
    for members, edges, pinned, consts in location_groups(model):
        shift = _group_shift(members, edges, pinned, consts)
        if shift is None:
            continue       # a prior alone keeps its own mean as c (FixedPrior)
        c, flag = shift
        vector = _is_vector(members)
        for n in members:
            if _boundary(n):
                s = _member_shift(c, flag.get(n, False), vector)
                if not _same(s, n.provides.shift):
                    n.provides = n.provides.with_shift(s)
                    n._cache = None
                continue
            if not n.stochastic:
                continue
            s = _member_shift(c, flag.get(n, False), vector)
            if _same(s, n.family.shift):
                continue
            old = n.family
            new = old.with_shift(s)
            if _is_chain(n):    # its own family, and per-step MultivariateNormal moments
                n.family, n.provides = new, n.provides.with_shift(s)
            else:
                n.family = n.provides = new
            if isinstance(n.factor, FixedPrior):
                n.factor.set_family(new)
            n._obs_moments = None
            n._centred = None
            n.release()
            if not n.observed and n.nat is not None:
                if n.fitted and not _is_chain(n):
                    params = old.params_from_natural(n.nat)
                    n.set_natural(new.natural_from_params(*[params[p] for p in new.param_names]))
                else:
                    changed.append(n)
        for n in members:
            if isinstance(n, Gather):
                n.provides = n.source.provides
                n._cache = None
            elif isinstance(n, Gate):
                n.provides = n.node.provides
                n._cache = None
        for const, child, mix in consts:
            s = _member_shift(c, mix or flag.get(child, False), vector)
            if not _same(s, const.provides.shift):
                const.set_family(const.provides.with_shift(s))
    if changed:
        for n in model.nodes:
            if n in changed:
                n.set_natural(n.prior_natural())
