"""Observed data: conversion, plates, masks, weights and support checks, in one place.

Nothing a user gives is dropped silently: a NaN/inf without a mask is refused;
masked entries are kept (their slots hold a placeholder) and contribute nothing.
"""
from __future__ import annotations

import numbers

import numpy as np

from .plates import broadcast_plates


def real_numbers(arr):
    """True when ``arr`` holds real numbers (an object array of Python ints too: integers
    too large for a float are refused elsewhere, by size)."""
    arr = np.asarray(arr)
    if arr.dtype.kind in "biuf":
        return True
    return arr.dtype.kind == "O" and all(isinstance(v, numbers.Real) for v in arr.ravel())


def numpy_of(data):
    """A pandas Series / DataFrame as its numpy array (without importing pandas); anything
    else as it is."""
    return data.to_numpy() if hasattr(data, "to_numpy") else data


def _as_array(node, data):
    data = numpy_of(data)
    try:
        arr = np.asarray(data, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{node.label()}: data must be numeric (an array, list or DataFrame of "
                        f"numbers); encode text/categorical columns first "
                        f"(blrgraph.io.encode_table does it)") from None
    return arr


def _support(node, x, m):
    """Message for the first observed value outside the family's support, or None.

    The family declares its support (``check_support``; docs/dev/architecture.md, "Value
    facts"); x holds every entry (masked ones hold a placeholder), m is the mask or None."""
    fam = node.family
    components = node.factor.component is not None
    categories = node.factor.n_categories() if fam.is_label else None
    bad, what = fam.check_support(x, components=components, categories=categories)
    bad = np.broadcast_to(np.asarray(bad, dtype=bool), np.shape(x)[: np.ndim(x) - fam.value_ndim])
    if m is not None:
        bad = bad & m
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
            comp = node.factor.component
            if comp is None:
                return None
            nat = comp.prior_natural([p.moments() for p in node.factor.parents[1:]])
        shape = np.shape(nat[k])
    except (ValueError, IndexError, TypeError):
        return None
    return tuple(shape[len(shape) - vnd:])


def _observe_cells(node, x, cells, weights):
    """Vectors with a per-coordinate mask (``cell_masks`` families): an entry is observed
    if any coordinate is; in a partly observed entry the missing coordinates are stored
    as NaN and integrate out as latent variables (``Conditional.complete``)."""
    bad = cells & ~np.isfinite(x)
    if np.any(bad):
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{node.label()}: cell {first} is marked observed but is NaN/inf; set "
                         f"mask False there")
    m = cells.any(axis=-1)
    x = x.copy()
    x[~m] = node.family.placeholder(x.shape[-1:])
    x[~cells & m[..., None]] = np.nan
    value, m2, w = prepare_observation(node, np.where(np.isnan(x), 0.0, x), m, weights)
    value = np.where(np.isnan(x), np.nan, value)
    return value, m2, w


def _data_plates(node, x):
    """The plates of data ``x`` for ``node``: its values' shape checked against the node's
    parameters, its plates against the node's."""
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
    return dplates


def _entry_mask(node, mask, finite, dplates):
    """``mask`` as a bool array of the data plates (None: no mask; then every entry must be
    finite); an entry marked observed must be finite."""
    if mask is None:
        if not np.all(finite):
            bad = np.argwhere(~finite)
            raise ValueError(f"{node.label()}: data has {len(bad)} NaN/inf entries (first at "
                             f"{tuple(int(i) for i in bad[0])}); mark missing values with "
                             f"observe(data, mask=~np.isnan(data)) -- they are then left out, not dropped")
        return None
    try:
        m = np.broadcast_to(mask, dplates).copy()
    except ValueError:
        raise ValueError(f"{node.label()}: mask of shape {mask.shape} does not match the data plates "
                         f"{dplates}") from None
    if np.any(m & ~finite):
        bad = np.argwhere(m & ~finite)[0]
        raise ValueError(f"{node.label()}: entry {tuple(int(i) for i in bad)} is marked observed "
                         f"but is NaN/inf; set mask False there")
    return m


def _weights(node, weights, dplates):
    """``observe(weights=...)``: counts of identical observations, finite and >= 0, one per
    data entry (None: none)."""
    if weights is None:
        return None
    if not real_numbers(weights):
        raise TypeError(f"{node.label()}: weights must be numbers (counts of identical "
                        f"observations), got {str(weights)[:60]!r}")
    w = np.asarray(weights, dtype=float)
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"{node.label()}: weights must be finite and >= 0 (counts of identical "
                         f"observations)")
    try:
        return np.broadcast_to(w, dplates).copy()
    except ValueError:
        raise ValueError(f"{node.label()}: weights of shape {w.shape} do not match the data "
                         f"plates {dplates}") from None


def prepare_observation(node, data, mask, weights):
    """Validate and return (value, mask or None, weights or None) for ``node.observe``."""
    if not node.family.observable:
        raise ValueError(f"{node.label()}: a joint (mu, precision) node cannot be observed; "
                         f"observe its child instead")
    x = _as_array(node, data)
    vnd = node.family.value_ndim
    dplates = _data_plates(node, x)
    node.factor.check_data_plates(dplates)
    node.plates = dplates
    finite = np.isfinite(x)
    if vnd:
        finite = finite.reshape(dplates + (-1,)).all(axis=-1)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != bool:
            raise TypeError(f"{node.label()}: mask must be a boolean array (True = observed), got "
                            f"{mask.dtype}")
        if vnd == 1 and node.family.cell_masks and mask.shape == x.shape:
            return _observe_cells(node, x, mask, weights)
    m = _entry_mask(node, mask, finite, dplates)
    if m is not None and not np.all(m):
        x = x.copy()
        x[~m] = node.family.placeholder(x.shape[x.ndim - vnd:])
    msg = _support(node, x, m)
    if msg is not None:
        raise ValueError(f"{node.label()}: data must be {msg}")
    if m is not None:
        m = None if np.all(m) else m.astype(float)   # None: everything observed
    w = _weights(node, weights, dplates)
    if node.family.is_label:
        x = x.astype(np.intp)
    return x, m, w
