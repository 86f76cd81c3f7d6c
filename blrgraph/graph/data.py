"""Observed data: conversion, plates, masks, weights and support checks, in one place.

Nothing a user gives is dropped silently: a NaN/inf without a mask is refused;
masked entries are kept (their slots hold a placeholder) and contribute nothing.
"""
from __future__ import annotations

import numpy as np

from .plates import broadcast_plates


def _as_array(node, data):
    if hasattr(data, "to_numpy"):  # pandas Series / DataFrame without importing pandas
        data = data.to_numpy()
    try:
        arr = np.asarray(data, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{node.label()}: data must be numeric (an array, list or DataFrame of "
                        f"numbers); encode text/categorical columns first "
                        f"(blrgraph.io.encode_table does it)") from None
    return arr


def _support(node, x):
    """Message for the first unsupported value, or None. x holds observed entries only."""
    fam = type(node.family).__name__
    vnd = node.family.value_ndim
    if fam in ("NormalGamma", "NormalWishart"):
        return "a joint (mu, precision) node cannot be observed; observe its child instead"
    if fam in ("Normal", "MultivariateNormal"):
        return None
    if fam in ("Gamma",):
        bad = x <= 0
        what = "positive values"
    elif fam == "Exponential":
        bad = x < 0
        what = "non-negative values"
    elif fam == "Poisson":
        bad = (x < 0) | (x != np.round(x))
        what = "non-negative integer counts"
    elif fam == "Bernoulli":
        bad = (x != 0) & (x != 1)
        what = "0/1 values"
    elif fam == "Binomial":
        n = np.broadcast_to(node.family.n, node.plates)[node._obs_index] if node._obs_index is not None \
            else node.family.n
        bad = (x < 0) | (x != np.round(x)) | (x > n)
        what = "integer counts between 0 and n"
    elif fam == "Categorical":
        K = node.factor.n_categories()
        bad = (x < 0) | (x != np.round(x)) | (x >= K)
        what = f"integer categories 0..{K - 1}"
    elif fam == "Multinomial":
        n = np.broadcast_to(node.family.n, node.plates)[node._obs_index] if node._obs_index is not None \
            else node.family.n
        bad = np.any((x < 0) | (x != np.round(x)), axis=-1) | (x.sum(axis=-1) != n)
        what = "non-negative integer count vectors summing to n"
    elif fam == "Beta":
        bad = (x <= 0) | (x >= 1)
        what = "values strictly between 0 and 1"
    elif fam == "Dirichlet":
        bad = np.any(x <= 0, axis=-1) | (np.abs(x.sum(-1) - 1) > 1e-8)
        what = "points of the open simplex"
    elif fam == "Wishart":
        try:
            np.linalg.cholesky(x)
            bad = np.zeros(x.shape[:-2], bool)
        except np.linalg.LinAlgError:
            return "symmetric positive definite matrices (a Cholesky factorisation failed)"
        what = "SPD matrices"
    else:
        return None
    bad = np.asarray(bad)
    if bad.ndim > x.ndim - vnd:
        bad = np.any(bad.reshape(bad.shape[: x.ndim - vnd] + (-1,)), axis=-1)
    if np.any(bad):
        first = np.argwhere(bad)[0]
        val = x[tuple(first)]
        return f"{what}; entry {tuple(int(i) for i in first)} is {val!r} ({int(np.sum(bad))} bad entries)"
    return None


def _event_shape(node):
    """The shape of one value implied by the node's parameters (MVN: (D,), Wishart:
    (D, D), Multinomial: (K,)), or None when values are scalars or it is unknown."""
    vnd = node.family.value_ndim
    if not isinstance(vnd, int) or vnd == 0:
        return None
    try:
        k = list(node.family.event_ndims).index(vnd)
        nat = node.nat
        if nat is None:  # a Mixture defers its prior: ask the component
            comp = getattr(node.factor, "component", None)
            if comp is None:
                return None
            nat = comp.prior_natural([p.moments() for p in node.factor.parents[1:]])
        shape = np.shape(nat[k])
    except (ValueError, IndexError, TypeError):
        return None
    return tuple(shape[len(shape) - vnd:])


_PLACEHOLDER = {"Gamma": 1.0, "Beta": 0.5}


def prepare_observation(node, data, mask, weights):
    """Validate and return (value, mask or None, weights or None) for ``node.observe``."""
    x = _as_array(node, data)
    vnd = node.family.value_ndim
    if x.ndim < vnd:
        raise ValueError(f"{node.label()}: data must have at least {vnd} axes (the value's own), "
                         f"got shape {x.shape}")
    dplates = x.shape[: x.ndim - vnd]
    ev = _event_shape(node)
    if ev is not None and x.shape[x.ndim - vnd:] != ev:
        raise ValueError(f"{node.label()}: each value must have shape {ev} (from its parameters), "
                         f"but the data of shape {x.shape} has values of shape "
                         f"{x.shape[x.ndim - vnd:]}")
    try:
        full = broadcast_plates(node.plates, dplates)
    except ValueError:
        raise ValueError(f"{node.label()}: data plates {dplates} do not broadcast with the node's "
                         f"plates {node.plates}") from None
    if full != dplates:
        raise ValueError(f"{node.label()}: data of shape {x.shape} has plates {dplates} but the node "
                         f"has plates {node.plates}; give one value per plate entry")
    node.factor.check_data_plates(dplates)
    node.plates = dplates
    finite = np.isfinite(x)
    if vnd:
        finite = finite.reshape(dplates + (-1,)).all(axis=-1)
    if mask is None:
        if not np.all(finite):
            bad = np.argwhere(~finite)
            raise ValueError(f"{node.label()}: data has {len(bad)} NaN/inf entries (first at "
                             f"{tuple(int(i) for i in bad[0])}); mark missing values with "
                             f"observe(data, mask=~np.isnan(data)) -- they are then left out, not dropped")
        m = None
    else:
        m = np.asarray(mask)
        if m.dtype != bool:
            raise TypeError(f"{node.label()}: mask must be a boolean array (True = observed), got {m.dtype}")
        try:
            m = np.broadcast_to(m, dplates).copy()
        except ValueError:
            raise ValueError(f"{node.label()}: mask of shape {m.shape} does not match the data plates "
                             f"{dplates}") from None
        if np.any(m & ~finite):
            bad = np.argwhere(m & ~finite)[0]
            raise ValueError(f"{node.label()}: entry {tuple(int(i) for i in bad)} is marked observed "
                             f"but is NaN/inf; set mask False there")
    node._obs_index = None
    observed = x if m is None else x[m]
    if m is not None and type(node.family).__name__ in ("Binomial", "Multinomial"):
        node._obs_index = m
    msg = _support(node, observed)
    if msg is not None:
        raise ValueError(f"{node.label()}: data must be {msg}")
    if m is not None and not np.all(m):
        fill = _PLACEHOLDER.get(type(node.family).__name__, 0.0)
        x = x.copy()
        if type(node.family).__name__ == "Dirichlet":
            x[~m] = 1.0 / x.shape[-1]
        elif type(node.family).__name__ == "Wishart":
            x[~m] = np.eye(x.shape[-1])
        else:
            x[~m] = fill
        m = m.astype(float)
    elif m is not None:
        m = None  # everything observed
    w = None
    if weights is not None:
        w = np.asarray(weights, dtype=float)
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError(f"{node.label()}: weights must be finite and >= 0 (counts of identical "
                             f"observations)")
        try:
            w = np.broadcast_to(w, dplates).copy()
        except ValueError:
            raise ValueError(f"{node.label()}: weights of shape {w.shape} do not match the data "
                             f"plates {dplates}") from None
    if type(node.family).__name__ == "Categorical":
        x = x.astype(np.intp)
    return x, m, w
