"""Plates, weights and reductions: handled here once, for every factor.

Plates broadcast like numpy (right-aligned). A message from a child to a parent
is a sum over the child's plate entries of ``weight * term``; the sums below
reduce directly to the parent's plate shape without materialising the
broadcast product (einsum with size-1 axes squeezed, so BLAS does the work).
"""
from __future__ import annotations

import string

import numpy as np
import scipy.sparse as sp

# np.einsum without a path: its C function, without the Python wrapper (families/base.py)
from ..families.base import _F8, einsum as _c_einsum

try:   # numpy >= 2.3: einsum's own pairwise step (matmul) for a contraction path
    from numpy._core.einsumfunc import bmm_einsum as _pairwise
except ImportError:   # (older numpy: np.einsum(..., optimize=path) as a whole)
    _pairwise = None


def broadcast_plates(*shapes):
    """numpy broadcasting of plate shapes, with an error that names the shapes."""
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ValueError(f"plate shapes {', '.join(map(str, shapes))} do not broadcast") from None


def plates_of(arr, event_ndim):
    """Plate shape of an array with ``event_ndim`` trailing event axes."""
    shape = np.shape(arr)
    return tuple(shape[: len(shape) - event_ndim])


def _labels(shape, n_plate, plate_letters, event_letters):
    """einsum labels for an operand: size-1 plate axes are squeezed away."""
    nd = len(shape) - len(event_letters)
    lab, keep = [], []
    off = n_plate - nd
    for j in range(nd):
        if shape[j] != 1:
            lab.append(plate_letters[off + j])
            keep.append(j)
    lab.extend(event_letters)
    return "".join(lab), keep


def _squeeze(arr, keep, n_event):
    nd = arr.ndim - n_event
    shape = [arr.shape[j] for j in keep] + list(arr.shape[nd:])
    return arr.reshape(shape)


#: einsum contraction orders by (subscripts, shapes): the search costs ~70 us per call
#: for three operands, as much as the contraction itself on small arrays; a fit calls
#: the same few hundred contractions every sweep. A contraction of two operands with
#: fewer than :data:`DIRECT_FLOPS` naive flops (of three or more: 1% of that, as the
#: one pass then multiplies every operand at every index) is stored as None: numpy's C
#: einsum in one pass is then faster than pairwise products (BLAS) and their dispatch.
#: Otherwise the path's steps are stored, [(operand positions, subscripts)], and run as
#: ``np.einsum(..., optimize=path)`` runs them (one C einsum or one pairwise matmul
#: each), without re-deriving the steps from the path on every call (~50 us)
_PATHS = {}
DIRECT_FLOPS = 1e6


def _einsum(expr, arrays):
    return _run(expr, arrays, _path(expr, arrays))


def _path(expr, arrays):
    """The contraction plan of ``expr`` for the arrays' shapes (kept in :data:`_PATHS`)."""
    key = (expr,) + tuple(a.shape for a in arrays)
    try:
        return _PATHS[key]
    except KeyError:
        pass
    if len(_PATHS) > 4096:
        _PATHS.clear()
    path, info = np.einsum_path(expr, *arrays, optimize=True)
    flops = float(info.split("Naive FLOP count:")[1].split()[0])
    direct = flops < (DIRECT_FLOPS if len(arrays) <= 2 else DIRECT_FLOPS / 100)
    if not direct and _pairwise is not None:
        _, steps = np.einsum_path(expr, *arrays, optimize=path, einsum_call=True)
        path = [(tuple(inds), eq) for inds, eq, _ in steps]
    path = _PATHS[key] = None if direct else path
    return path


def _run(expr, arrays, path):
    if path is None:
        return _c_einsum(expr, *arrays)
    if path[0] == "einsum_path":
        return np.einsum(expr, *arrays, optimize=path)
    ops = list(arrays)
    for inds, eq in path:
        tmp = [ops.pop(j) for j in inds]
        ops.append(_pairwise(eq, *tmp) if len(tmp) == 2 else _c_einsum(eq, *tmp))
    return ops[0]


def wsum(weights, *terms, subs=None, out="", target_plates=(), full_plates=None):
    """Sum over plate entries of ``weights * (product of terms)``, reduced to ``target_plates``.

    Parameters
    ----------
    weights : array or None
        Plate-shaped weights (mask x counts x responsibilities); None means 1.
    terms : arrays
        Each with shape (plates, broadcastable) + event axes.
    subs : tuple of str
        einsum letters (upper case) of each term's event axes, e.g.
        ``wsum(w, L, x, subs=("AB", "B"), out="A")`` is sum_n w_n L_n x_n and
        ``wsum(w, x, x, subs=("A", "B"), out="AB")`` is sum_n w_n x_n x_n^T.
        Default: every term is plate-only (no event axes).
    out : str
        Event letters of the result.
    target_plates : tuple
        The receiving node's plate shape (right-aligned against the child's plates).
    full_plates : tuple or None
        The child's full plate shape, needed when no operand spans an axis that is
        summed over (the sum then multiplies by the axis length).

    Plate axes of size 1 are squeezed before einsum, so broadcasting never
    materialises the full product and einsum's optimiser can call BLAS.
    """
    subs = ("",) * len(terms) if subs is None else tuple(subs)
    if weights is not None:
        terms = (weights,) + terms
        subs = ("",) + subs
    arrays = [t if type(t) is np.ndarray and t.dtype == _F8 else np.asarray(t, dtype=float)
              for t in terms]
    key = (tuple([a.shape for a in arrays]), subs, out, tuple(target_plates),
           None if full_plates is None else tuple(full_plates))
    plan = _WSUM.get(key)
    if plan is None:
        if len(_WSUM) > 4096:
            _WSUM.clear()
        plan = _WSUM[key] = [*_wsum_plan(*key), False]
    expr, shapes, factor, shape_plate, bcast, path = plan
    if shapes:
        ops = [a.reshape(sh) for a, sh in zip(arrays, shapes)]
        if path is False:   # the contraction's plan, looked up once per wsum plan
            path = plan[5] = _path(expr, ops)
        res = _run(expr, ops, path)
    else:
        res = np.asarray(1.0)
    if factor != 1.0:
        res = res * factor
    res = res.reshape(shape_plate)   # (an array or a numpy scalar: np.reshape's call)
    if bcast is not None:
        res = np.broadcast_to(res, bcast).copy()
    return res


#: wsum's plans by (operand shapes, subscripts, out, target plates, full plates): the
#: einsum expression, the squeezed shapes, the factor of the plate axes no operand
#: spans, the result's shapes and the contraction's plan (:func:`_path`, set at the
#: first call) (a fit calls the same sums every sweep)
_WSUM = {}


def _wsum_plan(shapes, subs, out, target_plates, full_plates):
    plate_shapes = [sh[: len(sh) - len(s)] for sh, s in zip(shapes, subs)]
    if full_plates is not None:
        plate_shapes.append(tuple(full_plates))
    plate_shapes.append(tuple(target_plates))
    full = broadcast_plates(*plate_shapes)
    n = len(full)
    if n > 26:
        raise ValueError("too many plate axes")
    target = (1,) * (n - len(target_plates)) + tuple(target_plates)
    plate_letters = string.ascii_lowercase[:n]
    in_subs, squeezed = [], []
    for sh, s in zip(shapes, subs):
        lab, keep = _labels(sh, n, plate_letters, s)
        in_subs.append(lab)
        nd = len(sh) - len(s)
        squeezed.append(tuple(sh[j] for j in keep) + tuple(sh[nd:]))
    present = set("".join(in_subs))
    out_plate = "".join(plate_letters[j] for j in range(n) if target[j] != 1 and plate_letters[j] in present)
    factor = 1.0
    for j in range(n):
        if plate_letters[j] not in present and target[j] == 1:
            factor *= full[j]
    lead = n - len(target_plates)
    shape_plate = tuple(full[j] if (target[j] != 1 and plate_letters[j] in present) else 1
                        for j in range(lead, n))
    expr = ",".join(in_subs) + "->" + out_plate + out
    # the result's event shape: the sizes of the ``out`` letters in the operands
    sizes = {}
    for sh, s in zip(squeezed, in_subs):
        sizes.update(zip(s, sh))
    event = tuple(sizes[c] for c in out) if shapes else ()
    bcast = None if shape_plate == tuple(target_plates) else tuple(target_plates) + event
    return expr, squeezed, factor, shape_plate + event, bcast


def compact(a):
    """The smallest view of ``a`` that broadcasts back to it: the axes of size > 1 with
    stride 0 (a ``np.broadcast_to`` view: one precision matrix for every entry) taken
    at index 0. Exact; no copy."""
    a = np.asarray(a)
    if 0 not in a.strides:
        return a
    return a[tuple(slice(0, 1) if st == 0 and n > 1 else slice(None)
                   for st, n in zip(a.strides, a.shape))]


def add_compact(a, b):
    """a + b at the broadcast shape, computed at the compact shapes (:func:`compact`) and
    returned as a read-only broadcast view when that is smaller: the sum of a prior and a
    message that are the same for every entry is then one matrix, not one per entry."""
    if type(a) is np.ndarray and type(b) is np.ndarray and a.shape == b.shape and \
            0 not in b.strides:
        # (nothing to compact: the common case of a latent q's target; a prior broadcast
        # to the message's shape is added at its compact shape)
        return a + b if 0 not in a.strides else compact(a) + b
    shape = np.broadcast_shapes(np.shape(a), np.shape(b))
    s = compact(a) + compact(b)
    return s if s.shape == shape else np.broadcast_to(s, shape)


def reduce_to(term, event_ndim, target_plates, weights=None):
    """Sum ``weights * term`` over the plate axes the target does not have."""
    ev = string.ascii_uppercase[:event_ndim]
    return wsum(weights, term, subs=(ev,), out=ev, target_plates=target_plates)


class Scatter:
    """Scatter-add from gathered entries back to the source's first plate axis.

    Built once per gather as a sparse (n_source, n_gathered) 0/1 matrix, so the
    adjoint of ``x[idx]`` is one sparse matrix product (O(nnz))."""

    def __init__(self, idx, n_source):
        idx = np.asarray(idx).ravel()
        self.n_source = n_source
        self.matrix = sp.csr_matrix((np.ones(idx.size), (idx, np.arange(idx.size))),
                                    shape=(n_source, idx.size))

    def __call__(self, msg, idx_ndim):
        """msg has shape idx.shape + rest; returns (n_source,) + rest."""
        msg = np.asarray(msg)
        lead = msg.shape[:idx_ndim]
        rest = msg.shape[idx_ndim:]
        flat = msg.reshape((int(np.prod(lead)), -1))
        out = self.matrix @ flat
        return np.asarray(out).reshape((self.n_source,) + rest)
