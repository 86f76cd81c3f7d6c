"""Checkpoints: every latent node's q (natural parameters) and the fit state, in one
``.npz`` file (no pickle) whose JSON metadata travels inside it.

``save(model, path)`` / ``load(model, path)``; ``Model.save`` and ``Model.load``
call these. A file that is corrupt, or that belongs to another model, is
refused with a ValueError before anything in the model changes.
"""
from __future__ import annotations

import hashlib
import json
import zipfile

import numpy as np

FORMAT = "blrgraph-checkpoint"
VERSION = 1
_META = "__meta__"


def _signature(model):
    return [{"name": n.name, "family": type(n.family).__name__, "plates": list(n.plates),
             "shapes": [list(np.shape(a)) for a in n.nat]} for n in model.latent]


def _digest(arrays):
    h = hashlib.sha256()
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        h.update(key.encode())
        h.update(str(a.dtype).encode())
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _plain(x):
    """numpy scalars -> Python numbers for JSON."""
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    raise TypeError(f"cannot store {type(x).__name__} in checkpoint metadata")


def _jsonable_rng(state):
    return json.loads(json.dumps(state, default=_plain))


def save(model, path):
    """Write the model's posterior and fit state to ``path`` (a ``.npz`` file)."""
    arrays = {}
    for n in model.latent:
        for i, a in enumerate(n.nat):
            arrays[f"nat/{n.name}/{i}"] = np.array(np.broadcast_to(a, np.shape(a)), dtype=float)
        if getattr(n.family, "shift", None) is not None:   # the coordinates of nat (centring)
            arrays[f"shift/{n.name}"] = np.array(n.family.shift, dtype=float)
    meta = {"format": FORMAT, "version": VERSION, "nodes": _signature(model),
            "point": [n.name for n in model.latent if n.point],
            "fitted": [n.name for n in model.latent if n.fitted], "svi": None, "fit": None}
    state = getattr(model, "svi_state", None)
    if state is not None:
        if state.get("perm") is not None:
            arrays["svi/perm"] = np.asarray(state["perm"], dtype=np.int64)
        meta["svi"] = {k: v for k, v in state.items() if k not in ("perm", "rng", "trace")}
        meta["svi"]["rng"] = _jsonable_rng(state["rng"])
        arrays["svi/trace"] = np.asarray(state.get("trace", []), dtype=float)
    res = getattr(model, "fit_result", None)
    if res is not None:
        meta["fit"] = {"method": res.method, "n_iter": int(res.n_iter),
                       "converged": bool(res.converged), "objective": res.objective}
        arrays["fit/elbo_trace"] = np.asarray(res.elbo_trace, dtype=float)
    meta["sha256"] = _digest(arrays)
    blob = np.frombuffer(json.dumps(meta, default=_plain).encode("utf-8"), dtype=np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays, **{_META: blob})
    return path


def _read(path):
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as e:
        raise ValueError(f"{path}: not a readable blrgraph checkpoint (corrupt or not an .npz "
                         f"file: {e})") from None
    if _META not in data:
        raise ValueError(f"{path}: not a blrgraph checkpoint (no metadata)")
    try:
        meta = json.loads(bytes(data.pop(_META)).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{path}: the checkpoint metadata is corrupt") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not a blrgraph checkpoint (format {meta.get('format')!r})")
    if meta.get("version") != VERSION:
        raise ValueError(f"{path}: checkpoint version {meta.get('version')} is not supported "
                         f"(this blrgraph reads version {VERSION})")
    if meta.get("sha256") != _digest(data):
        raise ValueError(f"{path}: the checkpoint is corrupt (checksum mismatch)")
    return meta, data


def _in_current_coordinates(node, nat, shift):
    """Natural parameters saved relative to location shift ``shift`` (None: none, as in
    files written before shifts existed) -> relative to the node's current shift
    (docs/dev/numerics.md). Unchanged when the two agree."""
    cur = getattr(node.family, "shift", None)
    if shift is None and cur is None or (shift is not None and cur is not None and
                                         np.shape(shift) == np.shape(cur) and
                                         np.array_equal(shift, cur)):
        return nat
    try:
        params = node.family.with_shift(shift).params_from_natural(nat)
        return tuple(np.asarray(a, dtype=float) for a in node.family.natural_from_params(
            *[params[p] for p in node.family.param_names]))
    except (ValueError, np.linalg.LinAlgError) as e:
        raise ValueError(f"node '{node.name}': the saved natural parameters are outside the "
                         f"natural parameter space ({e})") from None


def load(model, path):
    """Restore what :func:`save` wrote into ``model`` (declared the same way).
    Validates everything first: on any error the model is unchanged."""
    meta, data = _read(path)
    mine = {s["name"]: s for s in _signature(model)}
    theirs = {s["name"]: s for s in meta["nodes"]}
    if set(mine) != set(theirs):
        raise ValueError(f"{path} belongs to another model: its latent nodes are "
                         f"{sorted(theirs)}, this model's are {sorted(mine)}")
    for name, s in mine.items():
        t = theirs[name]
        for key in ("family", "plates", "shapes"):
            if s[key] != t[key]:
                raise ValueError(f"{path} belongs to another model: node '{name}' has {key} "
                                 f"{t[key]} in the file but {s[key]} here")
    new = {}
    for n in model.latent:
        arrs = [data.get(f"nat/{n.name}/{i}") for i in range(len(n.nat))]
        if any(a is None for a in arrs):
            raise ValueError(f"{path}: the checkpoint lacks natural parameters of node '{n.name}'")
        if not all(np.all(np.isfinite(a)) for a in arrs):
            raise ValueError(f"{path}: node '{n.name}' has non-finite natural parameters")
        new[n] = _in_current_coordinates(n, tuple(arrs), data.get(f"shift/{n.name}"))
    # everything checked: now change the model
    for n, nat in new.items():
        n.set_natural(nat)
        n.point = n.name in meta["point"]
        n.fitted = n.name in meta["fitted"]
    svi = meta.get("svi")
    if svi is not None:
        state = dict(svi)
        state["perm"] = data.get("svi/perm")
        state["trace"] = list(data.get("svi/trace", np.zeros(0)))
        model.svi_state = state
    else:
        model.svi_state = None
    return model
