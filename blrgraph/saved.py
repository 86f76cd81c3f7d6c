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
* the build options, the method and the model name or file (``model``).

``load_fit(path)`` returns a :class:`SavedFit`: ``saved["w"].posterior`` and
``saved.meta`` answer as a fitted model does, so the zoo's prediction functions
(``gmm.predict_table(saved, new_rows)``) take either.
"""
from __future__ import annotations

import json

import numpy as np

from .families import FAMILIES
from .graph.node import Posterior
from .inference.checkpoint import _digest, read_npz
from .inference.jsonify import plain as _plain

FORMAT = "blrgraph-fit"
VERSION = 1
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


def save_fit(fit, path, *, model=None, options=None, method=None, arrays=(), seed=None):
    """Write the global posteriors of ``fit`` (a FitResult or a fitted Model) and the
    plain entries of ``model.meta`` to ``path``. ``arrays``: meta entries that are
    arrays to keep as well, beyond the numeric ones of at most ``MAX_META_ARRAY`` values."""
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
    info = {"format": FORMAT, "version": VERSION, "model": model or meta.get("zoo"),
            "options": options or {}, "method": method or getattr(res, "method", None),
            "seed": seed, "elbo": None if res is None else float(res.elbo),
            "nodes": nodes, "meta": plain, "meta_arrays": kept}
    info["sha256"] = _digest(data)
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
    """Read a file written by :func:`save_fit` (ValueError if it is not one or is corrupt)."""
    info, data = read_npz(path, "fit file")
    if info.get("format") != FORMAT:
        hint = " (a checkpoint: use model.load)" if info.get("format") == "blrgraph-checkpoint" else ""
        raise ValueError(f"{path}: not a blrgraph fit file{hint}; write one with "
                         f"'blrgraph fit ... --save {path}'")
    if info.get("version") != VERSION:
        raise ValueError(f"{path}: fit file version {info.get('version')} is not supported")
    if info.get("sha256") != _digest(data):
        raise ValueError(f"{path}: the fit file is corrupt (checksum mismatch)")
    nodes = {}
    for s in info["nodes"]:
        nat = tuple(data[f"nat/{s['name']}/{i}"] for i in range(s["n"]))
        fam = FAMILIES[s["family"]]()
        shift = data.get(f"shift/{s['name']}")
        if shift is not None:      # nat is of x - shift (docs/dev/numerics.md)
            if not fam.locational or shift.dtype.kind not in "fiu" or \
                    not np.all(np.isfinite(shift)):
                raise ValueError(f"{path}: node '{s['name']}' has an invalid location shift")
            fam = fam.with_shift(shift)
        nodes[s["name"]] = SavedNode(s["name"], fam, nat, s["plates"], s["point"])
    meta = dict(info["meta"])
    for k in info.get("meta_arrays", []):
        meta[k] = data[f"meta/{k}"]
    return SavedFit(info, nodes, meta)
