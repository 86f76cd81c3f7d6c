"""JSON conversion, in one place: a strict ``json.dumps`` hook for checkpoints and saved
fits (numpy scalars only; anything else is refused) and a lenient deep copy for
summaries (arrays as lists, NaN as null, unknown objects as their str)."""
from __future__ import annotations

import numpy as np


def plain(x):
    """``json.dumps(..., default=plain)``: numpy scalars -> Python numbers, else TypeError."""
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    raise TypeError(f"cannot store {type(x).__name__} in checkpoint metadata")


def jsonable(x):
    """A JSON-ready copy of ``x``: numpy scalars and arrays as Python numbers and lists,
    NaN/inf and pandas NA as None, anything else unknown as its str."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    try:
        if x != x:  # pandas NA/NaT
            return None
    except (TypeError, ValueError):
        pass
    return str(x)
