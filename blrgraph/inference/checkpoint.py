"""Checkpoints: every latent node's q (natural parameters) and the fit state, in one
``.npz`` file (no pickle) whose JSON metadata travels inside it.

``save(model, path)`` / ``load(model, path)``; ``Model.save`` and ``Model.load``
call these. A file that is corrupt, or that belongs to another model, is
refused with a ValueError before anything in the model changes: ``load`` checks
the metadata (keys and types), every array's shape, that the natural parameters
lie inside their family's parameter space, and the SVI state, and only then
writes to the nodes.

The SHA-256 stored in the metadata (``sha256``) covers the arrays *and* every other
metadata entry (version 2; as a fit file's, blrgraph/saved.py), so a file whose
metadata or arrays were edited without recomputing it is refused as corrupt. It
detects damage and careless edits, not forgery (anyone can recompute it). Nothing
in a checkpoint is executed (no pickle), and the checks above refuse values the
model could not use, but load files from sources you trust.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
import zipfile
from pathlib import Path

import numpy as np

from .jsonify import plain
from .mixture_q import mixture_of

FORMAT = "blrgraph-checkpoint"
VERSION = 2
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


def checksum(meta, arrays):
    """SHA-256 of the arrays and of every metadata entry but ``sha256`` itself (the
    metadata as JSON with sorted keys, as read back from the file)."""
    rest = {k: v for k, v in meta.items() if k != "sha256"}
    h = hashlib.sha256(_digest(arrays).encode())
    h.update(json.dumps(rest, sort_keys=True, default=plain).encode("utf-8"))
    return h.hexdigest()


def _jsonable_rng(state):
    return json.loads(json.dumps(state, default=plain))


def _omitted(model):
    """Local nodes a checkpoint leaves out: with data streamed from disk or held on Dask,
    the per-row posteriors are not kept (they are refitted from the global state), so a
    checkpoint holds the global state only."""
    if not any(n.source is not None for n in model.observed):
        return []
    from .structure import Structure
    return list(Structure(model).local)


def check_path(path, what="checkpoint", write=False):
    """``path`` of a file to read or write: a str or os.PathLike (TypeError otherwise; an
    int would be taken as an open file descriptor); to write, not a directory and in an
    existing directory (IsADirectoryError / FileNotFoundError, one line)."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"the {what} path must be a file name (a str or pathlib.Path), got "
                        f"{type(path).__name__} {str(path)[:60]!r}")
    if write:
        p = Path(path)
        if p.is_dir():
            raise IsADirectoryError(f"{path}: is a directory; give the {what} a file name such as "
                                    f"{p / (what.replace(' ', '_') + '.npz')}")
        if not p.parent.is_dir():
            raise FileNotFoundError(f"{path}: cannot write the {what}: the directory "
                                    f"'{p.parent}' does not exist")
    return path


def save(model, path):
    """Write the model's posterior and fit state to ``path`` (a ``.npz`` file); for data
    streamed or on Dask, the global nodes' posterior only (:func:`_omitted`)."""
    check_path(path, "checkpoint", write=True)
    arrays = {}
    omitted = _omitted(model)
    for n in model.latent:
        if n in omitted:
            continue
        if mixture_of(n) is not None:
            warnings.warn(f"model.save: {n.label()} holds a mixture q (fit('mog')); the "
                          f"checkpoint keeps its moment-matched Gaussian (the same mean and "
                          f"covariance), not the components: refit with 'mog' to get them "
                          f"back", UserWarning, stacklevel=3)
        for i, a in enumerate(n.nat):
            arrays[f"nat/{n.name}/{i}"] = np.array(np.broadcast_to(a, np.shape(a)), dtype=float)
        if n.family.shift is not None:   # the coordinates of nat (centring)
            arrays[f"shift/{n.name}"] = np.array(n.family.shift, dtype=float)
    meta = {"format": FORMAT, "version": VERSION, "nodes": _signature(model),
            "point": [n.name for n in model.latent if n.point],
            "fitted": [n.name for n in model.latent if n.fitted], "svi": None, "fit": None,
            "omitted": [n.name for n in omitted]}
    state = model.svi_state
    if state is not None:
        if state.get("perm") is not None:
            arrays["svi/perm"] = np.asarray(state["perm"], dtype=np.int64)
        meta["svi"] = {k: v for k, v in state.items() if k not in ("perm", "rng", "trace")}
        meta["svi"]["rng"] = _jsonable_rng(state["rng"])
        arrays["svi/trace"] = np.asarray(state.get("trace", []), dtype=float)
    res = model.fit_result
    if res is not None:
        meta["fit"] = {"method": res.method, "n_iter": int(res.n_iter),
                       "converged": bool(res.converged), "objective": res.objective}
        arrays["fit/elbo_trace"] = np.asarray(res.elbo_trace, dtype=float)
    meta = json.loads(json.dumps(meta, default=plain))   # as load will read it back
    meta["sha256"] = checksum(meta, arrays)
    blob = np.frombuffer(json.dumps(meta, default=plain).encode("utf-8"), dtype=np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays, **{_META: blob})
    return path


def read_npz(path, what="checkpoint"):
    """(JSON metadata, the other arrays) of an .npz file written with its metadata under
    ``__meta__`` (no pickle); ValueError naming ``what`` if it is not one."""
    check_path(path, what)
    try:
        z = np.load(path, allow_pickle=False)
        if isinstance(z, np.ndarray):               # a bare .npy array, not an archive
            raise ValueError("a single array (.npy), not an .npz archive")
        with z:
            data = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: {what} not found") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "pickle" in why or "No data left" in why or "Cannot load file" in why:
            why = "not an .npz archive"     # numpy's advice to unpickle is not for this file
        raise ValueError(f"{path}: not a readable blrgraph {what} (corrupt or not an .npz "
                         f"file: {why})") from None
    if _META not in data:
        raise ValueError(f"{path}: not a blrgraph {what} (no metadata)")
    try:
        meta = json.loads(bytes(data.pop(_META)).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{path}: the {what} metadata is corrupt") from None
    return meta, data


def _read(path):
    meta, data = read_npz(path)
    if not isinstance(meta, dict):
        raise _invalid(path, "not a JSON object")
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not a blrgraph checkpoint (format {meta.get('format')!r})")
    if meta.get("version") != VERSION:
        old = (" (written by an older blrgraph whose checksum did not cover the metadata; "
               "save it again with model.save)") if meta.get("version") == 1 else ""
        raise ValueError(f"{path}: checkpoint version {str(meta.get('version'))[:20]} is not "
                         f"supported{old}; this blrgraph reads version {VERSION}")
    if meta.get("sha256") != checksum(meta, data):
        raise ValueError(f"{path}: the checkpoint is corrupt or was edited (checksum mismatch); "
                         f"write it again with model.save")
    return meta, data


def _in_current_coordinates(node, nat, shift):
    """Natural parameters saved relative to location shift ``shift`` (None: none, as in
    files written before shifts existed) -> relative to the node's current shift
    (docs/dev/numerics.md). Unchanged when the two agree."""
    cur = node.family.shift
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
    _check_meta(path, meta)
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
    for key in ("point", "fitted"):
        unknown = sorted(set(meta[key]) - set(mine))
        if unknown:
            raise ValueError(f"{path}: the checkpoint metadata is invalid: '{key}' names "
                             f"{unknown}, which are not latent nodes of this model")
    new = {}
    omitted = meta.get("omitted") or []
    if not isinstance(omitted, list) or not set(omitted) <= set(mine):
        raise _invalid(path, f"'omitted' must list latent nodes of this model, got "
                             f"{str(omitted)[:80]}")
    for n in model.latent:
        if n.name in omitted:
            continue
        arrs = [data.get(f"nat/{n.name}/{i}") for i in range(len(n.nat))]
        if any(a is None for a in arrs):
            raise ValueError(f"{path}: the checkpoint lacks natural parameters of node '{n.name}'")
        for i, (a, own) in enumerate(zip(arrs, n.nat)):
            if a.dtype.kind not in "fiu":
                raise ValueError(f"{path}: natural parameter {i} of node '{n.name}' has dtype "
                                 f"{a.dtype}, not real numbers")
            if a.shape != np.shape(own):
                raise ValueError(f"{path}: natural parameter {i} of node '{n.name}' has shape "
                                 f"{a.shape} in the file but {np.shape(own)} here")
        arrs = tuple(np.asarray(a, dtype=float) for a in arrs)
        if not all(np.all(np.isfinite(a)) for a in arrs):
            raise ValueError(f"{path}: node '{n.name}' has non-finite natural parameters")
        _check_space(path, n, arrs)
        new[n] = _in_current_coordinates(n, tuple(arrs), data.get(f"shift/{n.name}"))
    svi = _svi_state(path, meta.get("svi"), data)
    # everything checked: now change the model
    for n, nat in new.items():
        n.restore_snapshot((nat, n.name in meta["point"], n.name in meta["fitted"]))
    for n in model.latent:           # not in the file: back to the prior given the globals
        if n.name in omitted:
            n.restore_snapshot((n.prior_natural(), False, False))
    model.svi_state = svi
    return model


def _invalid(path, what):
    return ValueError(f"{path}: the checkpoint metadata is invalid: {what}")


def _is_int(x, low=0):
    return isinstance(x, int) and not isinstance(x, bool) and x >= low


def _check_meta(path, meta):
    """Keys and types of the metadata (the checksum covers them, but can be recomputed)."""
    if not isinstance(meta, dict):
        raise _invalid(path, "not a JSON object")
    nodes = meta.get("nodes")
    if not isinstance(nodes, list):
        raise _invalid(path, "'nodes' must be a list of the latent nodes")
    for s in nodes:
        ok = (isinstance(s, dict) and isinstance(s.get("name"), str)
              and isinstance(s.get("family"), str)
              and isinstance(s.get("plates"), list) and all(_is_int(p) for p in s["plates"])
              and isinstance(s.get("shapes"), list)
              and all(isinstance(sh, list) and all(_is_int(d) for d in sh) for sh in s["shapes"]))
        if not ok:
            raise _invalid(path, f"the node entry {str(s)[:80]} needs a name, a family, plates "
                                 f"and shapes")
    names = [s["name"] for s in nodes]
    if len(set(names)) != len(names):
        raise _invalid(path, "a node is listed twice")
    for key in ("point", "fitted"):
        v = meta.get(key)
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise _invalid(path, f"'{key}' must be a list of node names, got {str(v)[:80]}")
    for key in ("svi", "fit"):
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            raise _invalid(path, f"'{key}' must be an object or null")


def _check_space(path, node, nat):
    """The natural parameters must describe a distribution of the node's family: the
    family's own checks on the parameters they give (a Dirichlet alpha > 0, an SPD
    Wishart scale with dof > D - 1, ...)."""
    fam = node.family
    if fam.natural_unconstrained:
        return
    try:
        with np.errstate(all="ignore"):
            params = fam.params_from_natural(nat)
            fam.validate_params(*[params[k] for k in fam.param_names], where=node.name)
    except (ValueError, TypeError, KeyError, FloatingPointError, np.linalg.LinAlgError) as e:
        raise ValueError(f"{path}: node '{node.name}' has natural parameters outside the "
                         f"parameter space of its family ({e}); the file is not a valid "
                         f"checkpoint of it") from None


def _svi_state(path, svi, data):
    """The saved SVI state, checked (None when the file has none)."""
    if svi is None:
        return None
    for key, low in (("t", 0), ("pos", 0), ("batch_size", 1), ("N", 1)):
        if not _is_int(svi.get(key), low):
            raise _invalid(path, f"svi['{key}'] must be an integer >= {low}, got "
                                 f"{str(svi.get(key))[:80]}")
    if not isinstance(svi.get("batch_over"), str):
        raise _invalid(path, "svi['batch_over'] must be a node name")
    rng = svi.get("rng")
    try:
        cls = getattr(np.random, rng["bit_generator"])
        if not (isinstance(cls, type) and issubclass(cls, np.random.BitGenerator)):
            raise TypeError
        cls().state = rng
    except (TypeError, KeyError, ValueError, OverflowError, AttributeError):
        raise _invalid(path, f"svi['rng'] is not the state of a numpy random generator: "
                             f"{str(rng)[:80]}") from None
    perm = data.get("svi/perm")
    if perm is not None:
        if perm.ndim != 1 or perm.dtype.kind not in "iu" or (perm.size and perm.min() < 0):
            raise _invalid(path, "svi/perm must be a 1-D array of non-negative integers")
        if svi["pos"] > perm.size:
            raise _invalid(path, f"svi['pos'] = {svi['pos']} lies beyond the saved permutation "
                                 f"of {perm.size} entries")
    trace = data.get("svi/trace", np.zeros(0))
    if trace.ndim != 1 or trace.dtype.kind not in "fiu":
        raise _invalid(path, "svi/trace must be a 1-D array of numbers")
    state = dict(svi)
    state["perm"] = perm
    state["trace"] = list(trace)
    return state
