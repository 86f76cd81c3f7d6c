"""Checks on what a user passes to a node before anything is stored: ``plates=``,
and the raw data, mask and weights of ``observe`` (complex numbers, integers too
large for a float, masks of another shape, non-symmetric Wishart data, streams
whose rows do not fit the node). ``graph/data.py`` then validates values and
supports. Every refusal is a ValueError or TypeError naming the node.
"""
from __future__ import annotations

import numbers
import re

import numpy as np

from .plates import broadcast_plates

_MAX_PLATE = np.iinfo(np.intp).max


def check_plates(node, plates):
    """``plates=`` as a tuple of non-negative Python ints: an int or a sequence of ints
    (numpy integers and integral floats such as 3.0 are accepted, 2.5, True or
    "3" are not)."""
    items = tuple(np.atleast_1d(np.asarray(plates, dtype=object))) if np.ndim(plates) \
        else (plates,)
    out = []
    for p in items:
        if isinstance(p, (bool, np.bool_)) or not isinstance(p, numbers.Real):
            raise TypeError(f"{node.label()}: plates={plates!r} must be an integer or a tuple of "
                            f"integers (the number of copies along each axis)")
        if not isinstance(p, numbers.Integral):
            if not (np.isfinite(p) and float(p).is_integer()):
                raise ValueError(f"{node.label()}: plates={plates!r} must be whole numbers, "
                                 f"not {p!r}")
        p = int(p)
        if p < 0:
            raise ValueError(f"{node.label()}: plates={plates!r} must be >= 0, not {p}")
        if p > _MAX_PLATE:
            raise ValueError(f"{node.label()}: plates={plates!r}: {_short_int(p)} copies is more "
                             f"than an array can index (at most {_MAX_PLATE})")
        out.append(p)
    return tuple(out)


def _short_int(v):
    text = str(int(v))
    return text if len(text) <= 30 else f"{text[:6]}...{text[-4:]} ({len(text)} digits)"


def _as_float(node, what, value):
    """``value`` as a float array; complex numbers and integers beyond float64 are refused."""
    if hasattr(value, "to_numpy"):  # pandas Series / DataFrame without importing pandas
        value = value.to_numpy()
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        return value                         # ragged or odd input: data.py names the problem
    if np.iscomplexobj(raw):
        raise TypeError(f"{node.label()}: {what} are complex numbers (dtype {raw.dtype}); pass real "
                        f"numbers (np.real(...) if the imaginary parts are zero)")
    if raw.dtype == object:
        try:
            return np.asarray(raw, dtype=float)
        except OverflowError:
            pass
        except (TypeError, ValueError):
            if not any(isinstance(v, (complex, np.complexfloating)) for v in raw.ravel()):
                return value                 # text or None: data.py names the problem
            raise TypeError(f"{node.label()}: {what} hold complex numbers; pass real numbers") \
                from None
        for i, v in enumerate(raw.ravel()):   # only on this error path: find the entry
            try:
                float(v)
            except OverflowError:
                idx = tuple(int(j) for j in np.unravel_index(i, raw.shape))
                raise ValueError(f"{node.label()}: {what} entry {idx} is the integer "
                                 f"{_short_int(v)}, too large for a float (at most about "
                                 f"1.8e308); rescale the {what}") from None
    return raw


def check_observation(node, data, mask, weights):
    """Raw checks of ``node.observe(data, mask, weights)``; returns (data, weights) as arrays
    where they could be converted (``graph/data.py`` refuses the rest)."""
    data = _as_float(node, "data", data)
    if weights is not None:
        weights = _as_float(node, "weights", weights)
    vnd = node.family.value_ndim
    if not isinstance(vnd, int) or not isinstance(data, np.ndarray) or data.ndim < vnd:
        return data, weights
    dplates = data.shape[: data.ndim - vnd]
    if mask is not None:
        mshape = np.shape(mask)
        if mshape != dplates and mshape != data.shape:
            want = f"{dplates}" if vnd == 0 else f"{dplates} (one entry per value of shape " \
                                                  f"{data.shape[data.ndim - vnd:]})"
            raise ValueError(f"{node.label()}: mask of shape {mshape} does not match the data of "
                             f"shape {data.shape}; give a mask of shape {want}, True = observed "
                             f"(a mask is not broadcast: a shorter one would mask whole columns)")
    if node.family.symmetric_values and data.dtype != object and data.ndim >= 2:
        _check_symmetric(node, data, mask, dplates)
    return data, weights


def _check_symmetric(node, x, mask, dplates):
    x = np.asarray(x, dtype=float)
    with np.errstate(invalid="ignore"):
        diff = np.abs(x - np.swapaxes(x, -1, -2))
        scale = np.maximum(np.abs(x), np.abs(np.swapaxes(x, -1, -2)))
        bad = (diff > 1e-10 * np.maximum(scale, 1e-300)) & np.isfinite(diff)
    bad = bad.reshape(dplates + (-1,)).any(axis=-1)
    if mask is not None and np.shape(mask) == dplates:
        bad &= np.asarray(mask, dtype=bool)
    if np.any(bad):
        first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
        M = x[first]
        gap = float(np.max(np.abs(M - M.T)))
        raise ValueError(f"{node.label()}: data must be symmetric matrices; entry {first} differs "
                         f"from its transpose by up to {gap:.3g} ({int(np.sum(bad))} such entries); "
                         f"symmetrise it, (A + A.T) / 2, if the asymmetry is rounding")


def check_stream_shape(node, shape):
    """A streamed source of ``shape`` (rows first) must fit the node as in-memory data would."""
    from .data import _event_shape
    vnd = node.family.value_ndim
    shape = tuple(int(s) for s in shape)
    if not isinstance(vnd, int) or len(shape) < max(vnd, 1):
        raise ValueError(f"{node.label()}: streamed data of shape {shape} cannot be observed here "
                         f"(it needs a row axis and {vnd} value axes)")
    ev = _event_shape(node)
    if ev is not None and shape[len(shape) - vnd:] != ev:
        raise ValueError(f"{node.label()}: each value must have shape {ev} (from its parameters), "
                         f"but the streamed rows have values of shape {shape[len(shape) - vnd:]}")
    dplates = shape[: len(shape) - vnd]
    try:
        full = broadcast_plates(node.plates, dplates)
    except ValueError:
        full = None
    if full != dplates:
        raise ValueError(f"{node.label()}: streamed data of shape {shape} has plates {dplates} but "
                         f"the node has plates {node.plates}; give one value per plate entry")
    return dplates


def real_numbers(arr):
    """True when ``arr`` holds real numbers (an object array of Python ints too: integers
    too large for a float are refused elsewhere, by size)."""
    arr = np.asarray(arr)
    if arr.dtype.kind in "biuf":
        return True
    return arr.dtype.kind == "O" and all(isinstance(v, numbers.Real) for v in arr.ravel())


def check_trials(family, name, n):
    """The fixed number of trials ``n`` of a Binomial or Multinomial: real numbers only, and
    no integer beyond 2**53 (a float, which the likelihood uses, holds every integer only
    up to there). Integrality and signs are checked by the node."""
    if hasattr(n, "label"):          # a node: the constructor names the problem
        return
    try:
        arr = np.asarray(n)
        if not real_numbers(arr):             # text, None, complex numbers
            raise TypeError
        big = np.any(np.abs(np.asarray(arr, dtype=float)) > 2.0 ** 53)
    except OverflowError:
        big = True
    except (TypeError, ValueError):
        raise TypeError(f"{family} '{name}': n must be whole numbers of trials, got {n!r}") from None
    if big:
        raise ValueError(f"{family} '{name}': n has more than 2**53 = {2 ** 53} trials, beyond "
                         f"what a float holds exactly; rescale the counts")


_ENTRY = re.compile(r"(first at |entry )\((\d+)((?:, \d+)*,?)\)")


def check_batch(node, rows):
    """Rows ``rows`` of ``node``'s streamed source, validated as ``observe`` validates
    in-memory data; a refusal names the node and the source's (global) row number."""
    from .data import prepare_observation
    rows = np.asarray(rows)
    try:
        x = node.source.read(rows)
    except ValueError as e:
        raise ValueError(f"{node.label()}: {e}") from None
    vnd = node.family.value_ndim
    finite = np.isfinite(x).reshape(x.shape[:1] + (-1,)).all(axis=-1)
    if not finite.all():
        i = int(np.argmax(~finite))
        raise ValueError(f"{node.label()}: row {int(rows[i])} of the streamed data holds NaN/inf "
                         f"({int(np.sum(~finite))} such rows in this minibatch); streamed data "
                         f"cannot be masked: drop or impute those rows, or load the data into "
                         f"memory and observe it with mask=")
    if isinstance(vnd, int) and x.shape[1:] != node.source.shape[1:]:
        raise ValueError(f"{node.label()}: the streamed rows have shape {x.shape[1:]}, not "
                         f"{node.source.shape[1:]}")
    w = None
    if getattr(node.source, "weights", None) is not None:   # counts alongside dask rows
        w = node.source.read_weights(rows)
    try:
        return prepare_observation(node, x, None, w)
    except ValueError as e:      # the entry index of a minibatch -> the source's row number
        msg, n = _ENTRY.subn(lambda m: f"{m.group(1)}({int(rows[int(m.group(2))])}{m.group(3)})",
                             str(e))
        raise ValueError(msg + (" (the first index is the row of the streamed data)" if n else "")) \
            from None


# ---- arguments of sample / interval / logpdf / predictive ---------------------------------
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
