"""Saved fits: what prediction needs, without the training data (docs/predict.md).

``save_fit(fit, path)`` writes one ``.npz`` (no pickle; JSON metadata inside, with a
SHA-256 checksum of the arrays, as :mod:`blrgraph.inference.checkpoint`) holding

* the natural parameters of the *global* latent nodes (those not on the data axis:
  weights, components, regression weights, topics; the local nodes -- one
  assignment per training row -- are left out), with the location shift c of a
  Gaussian node (``shift/<name>``: its natural parameters are those of x - c,
  docs/dev/numerics.md), so that the loaded posteriors are in the data's coordinates,
* the model's ``meta`` entries that are plain values (column names, levels, K, the
  design recipe) and its small numeric arrays (``to_original``), not the training
  data (``X``, ``y``, masks, the table),
* the build options, the method and the model: a zoo name (``model``), or for a model
  file of the user's own its file name and the SHA-256 of its bytes (``model_file``).

The checksum (``sha256``) covers the arrays *and* every other metadata entry, so an
edited file is refused as corrupt. It detects damage, not forgery (anyone can recompute
it): what keeps a fit file from choosing code to run is ``blrgraph predict``, which imports
only a zoo model by name or the model file named on its own command line, and checks that
file's hash against ``model_file`` (docs/predict.md).

``load_fit(path)`` returns a :class:`SavedFit`: ``saved["w"].posterior`` and
``saved.meta`` answer as a fitted model does, so the zoo's prediction functions
(``gmm.predict_table(saved, new_rows)``) take either.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from pathlib import Path

from .families import FAMILIES
from .graph.node import Posterior
from .inference.checkpoint import check_path, checksum, read_npz
from .inference.jsonify import plain as _plain

FORMAT = "blrgraph-fit"
VERSION = 2
_META = "__meta__"
#: meta entries that hold training data or objects, never saved
SKIP_META = ("X", "y", "mask", "observed", "table", "fit_options", "fit_options_by_method")
#: numeric meta arrays up to this size are kept (e.g. a regression's ``to_original``)
MAX_META_ARRAY = 10_000


def _global_nodes(model):
    from .inference.structure import Structure
    return list(Structure(model).globals)


def _jsonable(v):
    try:
        json.dumps(v, default=_plain)
        return True
    except (TypeError, ValueError):
        return False


def file_sha256(path):
    """The SHA-256 of a file's bytes (a model file's identity in a fit file)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


#: SHA-256 of the arrays and of every metadata entry but ``sha256`` itself (as a checkpoint's)
_fit_digest = checksum


def save_fit(fit, path, *, model=None, options=None, method=None, arrays=(), seed=None,
             model_file=None):
    """Write the global posteriors of ``fit`` (a FitResult or a fitted Model) and the
    plain entries of ``model.meta`` to ``path``. ``arrays``: meta entries that are
    arrays to keep as well, beyond the numeric ones of at most ``MAX_META_ARRAY`` values.
    ``model``: the zoo name of the model; ``model_file``: the path of the user's model
    file instead (its name and SHA-256 are recorded, ``blrgraph predict --model FILE``
    checks them)."""
    check_path(path, "fit file", write=True)
    m = getattr(fit, "model", fit)
    meta = dict(getattr(m, "meta", {}) or {})
    data, nodes = {}, []
    for n in _global_nodes(m):
        if not n.fitted:
            raise ValueError(f"{n.label()} has no posterior: fit the model before saving it")
        fam = type(n.family)
        if FAMILIES.get(fam.__name__) is not fam or getattr(n.family, "n", None) is not None:
            raise ValueError(f"{n.label()}: a {n.family.name} node cannot be saved for prediction")
        for i, a in enumerate(n.nat):
            data[f"nat/{n.name}/{i}"] = np.array(np.broadcast_to(a, np.shape(a)), dtype=float)
        if getattr(n.family, "shift", None) is not None:   # the coordinates of nat (centring)
            data[f"shift/{n.name}"] = np.array(n.family.shift, dtype=float)
        nodes.append({"name": n.name, "family": fam.__name__, "plates": list(n.plates),
                      "point": bool(n.point), "n": len(n.nat)})
    plain, kept = {}, []
    for k, v in meta.items():
        if k in SKIP_META:
            continue
        if k in arrays or (isinstance(v, np.ndarray) and v.dtype.kind in "biuf"
                           and v.size <= MAX_META_ARRAY):
            data[f"meta/{k}"] = np.asarray(v, dtype=float)
            kept.append(k)
        elif not isinstance(v, np.ndarray) and _jsonable(v):
            plain[k] = v
    res = getattr(m, "fit_result", None) if fit is m else fit
    mfile = None
    if model_file is not None:
        mfile = {"name": Path(model_file).name, "sha256": file_sha256(model_file)}
    info = {"format": FORMAT, "version": VERSION,
            "model": None if mfile else (model or meta.get("zoo")), "model_file": mfile,
            "options": options or {}, "method": method or getattr(res, "method", None),
            "seed": seed, "elbo": None if res is None else float(res.elbo),
            "nodes": nodes, "meta": plain, "meta_arrays": kept}
    info = json.loads(json.dumps(info, default=_plain))    # as it will be read back
    info["sha256"] = _fit_digest(info, data)
    blob = np.frombuffer(json.dumps(info, default=_plain).encode("utf-8"), dtype=np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, **data, **{_META: blob})
    return path


class SavedNode:
    """A global latent node of a saved fit: ``posterior`` as after the fit."""

    stochastic = True
    observed = False
    fitted = True

    def __init__(self, name, family, nat, plates, point):
        self.name, self.family, self.nat = name, family, nat
        self.plates, self.point = tuple(plates), point

    def label(self):
        return f"saved node '{self.name}'"

    @property
    def posterior(self):
        return Posterior(self)


class SavedFit:
    """What :func:`load_fit` returns: ``saved[name]`` (a :class:`SavedNode`),
    ``name in saved``, ``meta``, ``model`` (the zoo name or model file), ``options``,
    ``method``. It stands for the fitted model in the zoo's prediction functions."""

    def __init__(self, info, nodes, meta):
        self.info = info
        self._nodes = nodes
        self.meta = meta
        self.model = self          # io.fitted_model(saved) finds the meta here
        self.options = info.get("options", {})
        self.method = info.get("method")

    def __getitem__(self, name):
        try:
            return self._nodes[name]
        except KeyError:
            raise KeyError(f"the saved fit has no node {name!r} (it keeps the global nodes "
                           f"{sorted(self._nodes)})") from None

    def __contains__(self, name):
        return name in self._nodes

    def __repr__(self):
        return f"<SavedFit of {self.info.get('model')}: nodes {sorted(self._nodes)}>"


def load_fit(path):
    """Read a file written by :func:`save_fit` (ValueError if it is not one, is corrupt or
    was edited: the checksum covers the arrays and the metadata)."""
    info, data = read_npz(path, "fit file")
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        fmt = info.get("format") if isinstance(info, dict) else None
        hint = " (a checkpoint: use model.load)" if fmt == "blrgraph-checkpoint" else ""
        raise ValueError(f"{path}: not a blrgraph fit file{hint}; write one with "
                         f"'blrgraph fit ... --save {path}'")
    if info.get("version") != VERSION:
        old = " (written by an older blrgraph whose checksum did not cover the metadata; " \
              "fit again with --save)" if info.get("version") == 1 else ""
        raise ValueError(f"{path}: fit file version {_short(info.get('version'))} is not "
                         f"supported{old}; this blrgraph reads version {VERSION}")
    if info.get("sha256") != _fit_digest(info, data):
        raise ValueError(f"{path}: the fit file is corrupt or was edited (checksum mismatch); "
                         f"write it again with 'blrgraph fit ... --save'")
    try:
        nodes = {s["name"]: _saved_node(path, s, data) for s in info["nodes"]}
        meta = dict(info["meta"])
        for k in info.get("meta_arrays", []):
            meta[k] = data[f"meta/{k}"]
        _check_model_entry(info)
    except (KeyError, TypeError, IndexError, AttributeError) as e:
        raise ValueError(f"{path}: the fit file's metadata is invalid ({type(e).__name__}: "
                         f"{_short(e)}); write it again with 'blrgraph fit ... --save'") from None
    return SavedFit(info, nodes, meta)


def _short(v, n=80):
    t = str(v)
    return t if len(t) <= n else t[:n - 3] + "..."


def _check_model_entry(info):
    """``model`` a name or None; ``model_file`` None or {name, sha256 of 64 hex digits}."""
    if info.get("model") is not None and not isinstance(info["model"], str):
        raise TypeError(f"'model' must be a name, got {_short(info['model'])}")
    mf = info.get("model_file")
    if mf is not None and not (isinstance(mf, dict) and isinstance(mf.get("name"), str)
                               and isinstance(mf.get("sha256"), str)
                               and len(mf["sha256"]) == 64):
        raise TypeError(f"'model_file' must hold a file name and its SHA-256, got {_short(mf)}")


def _saved_node(path, s, data):
    """One global node of a fit file, its arrays checked against its family and plates."""
    name, fam_name = s["name"], s["family"]
    if not isinstance(name, str) or fam_name not in FAMILIES:
        raise TypeError(f"node entry {_short(s)} needs a name and a family of blrgraph")
    plates = tuple(s["plates"])
    if not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in plates):
        raise TypeError(f"node '{name}': plates must be whole numbers, got {_short(plates)}")
    nat = tuple(data[f"nat/{name}/{i}"] for i in range(s["n"]))
    fam = FAMILIES[fam_name]()
    for i, a in enumerate(nat):
        if a.dtype.kind not in "fiu" or not np.all(np.isfinite(a)) or \
                tuple(a.shape[:len(plates)]) != plates:
            raise ValueError(f"{path}: node '{name}': natural parameter {i} must be finite real "
                             f"numbers with plates {plates}, got {a.dtype} of shape {a.shape}")
    shift = data.get(f"shift/{name}")
    if shift is not None:      # nat is of x - shift (docs/dev/numerics.md)
        if not fam.locational or shift.dtype.kind not in "fiu" or \
                not np.all(np.isfinite(shift)):
            raise ValueError(f"{path}: node '{name}' has an invalid location shift")
        fam = fam.with_shift(shift)
    return SavedNode(name, fam, nat, plates, bool(s["point"]))
