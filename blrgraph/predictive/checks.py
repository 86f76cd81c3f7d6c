"""The arguments of the read-out API (``sample``, ``interval``, ``logpdf``,
``log_predictive``, ``predictive``): sizes, seeds, counts, levels, values and masks, each
refused where it enters with a ValueError/TypeError naming the call (``where``)."""
from __future__ import annotations

import numbers

import numpy as np


def _whole(v, floats=False):
    """An integer (not a bool); with ``floats``, a float that is a whole number too."""
    if isinstance(v, (bool, np.bool_)):
        return False
    if isinstance(v, (numbers.Integral, np.integer)):
        return True
    return floats and isinstance(v, (float, np.floating)) and float(v).is_integer()


def check_size(where, size):
    """``sample(size)``: None, a whole number >= 0 or a tuple of them."""
    dims = size if isinstance(size, (tuple, list)) else (size,)
    if size is None:
        return None
    for s in dims:
        if not _whole(s, floats=True):
            raise TypeError(f"{where}: size={_short(size)} must be a whole number of draws (or a "
                            f"tuple of them), e.g. size=1000")
        if s < 0:
            raise ValueError(f"{where}: size={_short(size)} must be >= 0 (the number of draws)")
    return tuple(int(s) for s in size) if isinstance(size, (tuple, list)) else int(size)


def check_seed(where, seed):
    """``seed=``: None, an integer >= 0 or a numpy Generator / SeedSequence."""
    if seed is None or isinstance(seed, (np.random.Generator, np.random.SeedSequence)):
        return seed
    if not _whole(seed):
        raise TypeError(f"{where}: seed={_short(seed)} must be an integer >= 0 or a "
                        f"numpy.random.Generator")
    if seed < 0:
        raise ValueError(f"{where}: seed={seed} must be >= 0")
    return int(seed)


def check_count(where, name, value, low=1):
    """A whole number >= ``low`` (``samples=``)."""
    if not _whole(value, floats=True):
        raise TypeError(f"{where}: {name}={_short(value)} must be a whole number >= {low}")
    if value < low:
        raise ValueError(f"{where}: {name}={value} must be >= {low}")
    return int(value)


def check_level(where, level):
    """``interval(level)``: a probability strictly between 0 and 1."""
    if isinstance(level, (bool, np.bool_)) or not isinstance(level, (numbers.Real, np.floating)):
        raise TypeError(f"{where}: level={_short(level)} must be a number between 0 and 1 "
                        f"(e.g. 0.95 for the central 95% interval)")
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"{where}: level={level} must lie strictly between 0 and 1 (e.g. 0.95 "
                         f"for the central 95% interval)")
    return float(level)


def check_values(where, values, plates, value_ndim, event_shape=None, what="values"):
    """Values to score: numbers whose shape broadcasts against the entries ``plates``
    (plus ``value_ndim`` trailing event axes, of ``event_shape`` when it is known).
    Returns them unchanged."""
    v = np.asarray(values)
    if v.dtype.kind not in "biuf":
        try:
            v = v.astype(float)
        except (TypeError, ValueError):
            raise TypeError(f"{where}: {what} must be numbers, got {_short(values)}") from None
        if v.dtype.kind == "c":
            raise TypeError(f"{where}: {what} must be real numbers, got complex ones")
    if not isinstance(value_ndim, int):
        return values
    ok = v.ndim >= value_ndim and (event_shape is None or value_ndim == 0 or
                                   v.shape[v.ndim - value_ndim:] == tuple(event_shape))
    if ok:
        try:
            np.broadcast_shapes(v.shape[:v.ndim - value_ndim], tuple(plates))
        except ValueError:
            ok = False
    if not ok:
        ev = "" if not value_ndim else (
            f" plus the value's shape {tuple(event_shape)}" if event_shape is not None
            else f" plus {value_ndim} value axes")
        raise ValueError(f"{where}: {what} of shape {v.shape} do not fit the entries, of shape "
                         f"{tuple(plates)}{ev}; give one value per entry (or a shape that "
                         f"broadcasts to it)")
    if value_ndim == 0 and v.dtype.kind == "f" and np.isnan(v).any():
        first = tuple(int(i) for i in np.argwhere(np.isnan(v))[0])
        raise ValueError(f"{where}: {what} hold NaN (entry {first}); a missing value has no "
                         f"density: leave it out, or score with log_predictive(values, "
                         f"mask=~np.isnan(values))")
    return values


def fill_masked(values, mask, plates, value_ndim):
    """``values`` with the entries ``mask`` leaves out set to 0 (a NaN there marks a missing
    value that is not scored) -- the entries kept are untouched."""
    v = np.asarray(values)
    if v.dtype.kind != "f" or not np.isnan(v).any():
        return values
    keep = np.broadcast_to(np.asarray(mask, bool), tuple(plates))
    keep = keep.reshape(keep.shape + (1,) * value_ndim)
    shape = np.broadcast_shapes(v.shape, keep.shape)
    return np.where(keep, np.broadcast_to(v, shape), 0.0)


def check_mask(where, mask, plates):
    """``mask=`` of a held-out score: booleans broadcasting to the entries ``plates``."""
    m = np.asarray(mask)
    if m.dtype.kind not in "biu" and m.dtype.kind != "f":
        raise TypeError(f"{where}: mask must be booleans (True = score the entry), got "
                        f"{_short(mask)}")
    try:
        np.broadcast_shapes(m.shape, tuple(plates))
    except ValueError:
        raise ValueError(f"{where}: mask of shape {m.shape} does not fit the entries, of shape "
                         f"{tuple(plates)}") from None
    return m.astype(bool)


def _short(v, n=60):
    t = repr(v)
    return t if len(t) <= n else t[:n - 3] + "..."
