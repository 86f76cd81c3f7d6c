"""The start-of-fit checks of a Potential (graph/potential.py): logp at the prior mean
(its shape, finiteness), and ``value_and_grad`` against logp and autograd's gradient."""
from __future__ import annotations

import numpy as np


def check_fit(factor, method="fit"):
    """Refuse a logp of the wrong shape or not finite at the start (before a sweep),
    naming the node and the fix."""
    if factor.node.source is not None:   # streamed: the first rows
        data, _ = factor.node.read_batch(np.arange(min(16, factor.node.source.shape[0])))
    else:
        data, _ = factor.rows()
    where = f"fit({method!r}): {factor.node.label()}"
    one = factor._means()
    try:
        with np.errstate(all="ignore"):   # a non-finite value is refused below
            v = np.asarray(factor._call(one, data), dtype=float)
    except Exception as err:  # noqa: BLE001 -- the user's function
        raise ValueError(f"{where}: logp failed at the start ({type(err).__name__}: {err}); "
                         f"logp receives one array per parent (its value's shape)"
                         + (" then the data arrays" if data else "")) from None
    want = (len(data[0]),) if data else ()
    if v.shape != want:
        what = (f"one log-factor per data row, shape {want}" if data else
                "one number (pass data=(...) for per-row log-factors)")
        raise ValueError(f"{where}: logp returned shape {v.shape}; it must return {what}")
    if not np.all(np.isfinite(v)):
        bad = np.flatnonzero(~np.isfinite(np.atleast_1d(v)))[:5]
        at = f" at rows {bad.tolist()}" if data else ""
        raise ValueError(f"{where}: logp is not finite at the start (the prior mean){at}; "
                         f"write it in a stable form (logaddexp, log1p) or mask those rows")
    if factor.node.value_and_grad is not None:
        check_value_and_grad(factor, one, data, where)


def check_value_and_grad(factor, one, data, where):
    """``value_and_grad`` at the prior mean and at a point off it against logp's weighted
    row sum and autograd's gradient of it (when autograd cannot differentiate logp: a
    central difference along a random direction), and, when logp
    takes a leading axis of draws, against itself on two stacked draws."""
    _, w = factor.rows() if factor.node.source is None else (None, None)
    fix = ("value_and_grad(*values, *data, weights) must return (the weighted sum over "
           "the rows of logp, [its gradient in each value]) (docs/api.md)")
    total, grads = _user_call(factor, one, data, w, where, fix, "the start")
    shapes = [x.shape for x in one]
    if total.shape != () or [g.shape for g in grads] != shapes:
        raise ValueError(f"{where}: value_and_grad returned a total of shape {total.shape} "
                         f"and gradients of shapes {[g.shape for g in grads]}; want () and "
                         f"{shapes}: {fix}")
    # at the prior mean, and at a point moved off it (a gradient right only at the prior
    # mean, w = 0 say, would pass the first check alone)
    rng = np.random.default_rng(0)
    moved = [x + 0.1 * rng.standard_normal(x.shape) * np.maximum(1.0, np.abs(x)) for x in one]
    _compare_value_and_grad(factor, one, (total, grads), data, w, where, fix,
                            "the prior mean", moved=False)
    _compare_value_and_grad(factor, moved, _user_call(factor, moved, data, w, where, fix,
                                                      "a point off the prior mean"),
                            data, w, where, fix, "a point off the prior mean", moved=True)
    if factor._batched([x[None] for x in one], data):
        two = [np.stack([x, x]) for x in one]
        with np.errstate(all="ignore"):
            total2, grads2 = factor.user_value_and_grad(two, data, w)
        if total2.shape != (2,) or [g.shape for g in grads2] != [x.shape for x in two]:
            raise ValueError(f"{where}: logp takes a leading axis of draws but "
                             f"value_and_grad returned shapes {total2.shape} and "
                             f"{[g.shape for g in grads2]} for 2 draws; it must take the "
                             f"same axis (or pass vectorized=False)")


def _user_call(factor, point, data, w, where, fix, at):
    """(total, gradients) of the user's ``value_and_grad`` at ``point``; an exception in
    it is a ValueError naming the node, the point and the fix."""
    try:
        with np.errstate(all="ignore"):
            return factor.user_value_and_grad(point, data, w)
    except Exception as err:  # noqa: BLE001 -- the user's function
        raise ValueError(f"{where}: value_and_grad failed at {at} ({type(err).__name__}: "
                         f"{err}); {fix}") from None


def _compare_value_and_grad(factor, point, got, data, w, where, fix, at, moved):
    """``got`` = (total, gradients) of ``value_and_grad`` at ``point`` against logp's
    weighted row sum and autograd's gradient (a central difference when autograd cannot
    differentiate logp). A ``moved`` point where logp is not finite is skipped (only the
    prior mean must be finite)."""
    import autograd.numpy as anp
    from autograd import make_vjp
    total, grads = got
    try:
        with np.errstate(all="ignore"):
            vjp, v = make_vjp(lambda a: factor._totals(list(a), data, w, anp))(tuple(point))
            auto = [np.asarray(g, dtype=float) for g in vjp(1.0)]
    except Exception:  # noqa: BLE001 -- logp not differentiable by autograd: value checked
        with np.errstate(all="ignore"):
            v, auto = factor._totals(point, data, w, anp), None
    v = float(v)
    if moved and not np.isfinite(v):
        return
    if not np.isclose(float(total), v, rtol=1e-8, atol=1e-8):
        raise ValueError(f"{where}: value_and_grad's total {float(total)!r} differs from the "
                         f"weighted row sum of logp {v!r} at {at}; {fix}")
    if auto is None:
        _central_difference(factor, point, data, w, grads, where, fix, at)
    for p, g, a in zip(factor.parents, grads, auto or []):
        tol = 1e-6 * max(1.0, float(np.max(np.abs(a), initial=0.0)))
        if not np.all(np.abs(g - a) <= tol):
            raise ValueError(f"{where}: value_and_grad's gradient in {p.name} differs from "
                             f"autograd's gradient of logp at {at} by up to "
                             f"{float(np.max(np.abs(g - a))):.3g}; {fix}")


def _central_difference(factor, point, data, w, grads, where, fix, at):
    """The gradient along a random direction d against (f(x + h d) - f(x - h d)) / 2h,
    f logp's weighted row sum (to 1e-4 relative: the difference's own error)."""
    import autograd.numpy as anp
    rng = np.random.default_rng(1)
    d = [rng.standard_normal(x.shape) for x in point]
    scale = max(1.0, max(float(np.max(np.abs(x), initial=0.0)) for x in point))
    h = 1e-5 * scale
    with np.errstate(all="ignore"):
        up = float(factor._totals([x + h * e for x, e in zip(point, d)], data, w, anp))
        down = float(factor._totals([x - h * e for x, e in zip(point, d)], data, w, anp))
    if not (np.isfinite(up) and np.isfinite(down)):
        return
    want = (up - down) / (2 * h)
    got = sum(float(np.sum(g * e)) for g, e in zip(grads, d))
    if not np.isclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, abs(want))):
        raise ValueError(f"{where}: value_and_grad's gradient along a random direction is "
                         f"{got:.6g} at {at}, but the central difference of logp gives "
                         f"{want:.6g}; {fix}")
