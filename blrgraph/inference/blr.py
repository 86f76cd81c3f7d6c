"""The one update: lam <- (1 - rho) lam + rho (lam0 + sum of child messages)."""
from __future__ import annotations

import numpy as np

from .. import rowsplit
from ..graph.plates import add_compact, compact


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return tuple(x + y for x, y in zip(a, b))


def message_from(model, child, node):
    """The message from one child (a deterministic child passes on what it receives)."""
    if child.deterministic:
        m = incoming(model, child)
        return None if m is None else child.backward(m, node)
    return child.message_to(node)


def incoming(model, node, scale=None):
    """Sum of the messages from ``node``'s children (through deterministic nodes),
    in node's T coordinates, reduced to node's plates. ``scale(child)`` multiplies
    a child's message (SVI: N/|B| for the minibatch children)."""
    total = None
    for c in model.children[node]:
        m = message_from(model, c, node)
        if m is not None and scale is not None:
            s = scale(c)
            if s != 1.0:
                m = tuple(s * a for a in m)
        total = _add(total, m)
    return total


def blr_target(model, node, scale=None):
    """lam0 + sum of messages: the coordinate-ascent target (rho = 1)."""
    return target_from(node, incoming(model, node, scale))


def target_from(node, messages):
    """lam0 + ``messages`` (the summed messages, e.g. a view's report; None: none)."""
    target = node.prior_natural()
    if messages is not None:  # components a message lacks (a chain's coupling) keep the
        # prior's (entries that share one value, e.g. one score precision, stay one
        # broadcast value)
        target = tuple(add_compact(a, m) for a, m in zip(target, messages)) + \
            tuple(target[len(messages):])
    return target


def target_terms(model, node):
    """The coordinate-ascent target of a node whose prior and every child's message are
    rows of small tables (a Categorical: LDA's z: E log theta[doc] + E log phi[:, word]),
    as gathered tables (tables, rows), lam[n] = sum_j tables[j][rows[j][n]]; None
    otherwise (then the dense target is used). Factors declare this through
    ``prior_terms`` / ``message_terms`` (None by default)."""
    if len(node.plates) != 1 or node.point:
        return None
    terms = node.factor.prior_terms()
    if terms is None:
        return None
    tables, rows = list(terms[0]), list(terms[1])
    for c in model.children[node]:
        t = None if c.deterministic else c.message_terms_to(node)
        if t is None:
            return None
        tables += t[0]
        rows += t[1]
    if not all(np.all(np.isfinite(T)) for T in tables):
        return None  # the dense path names the problem
    return tables, rows


def reset_to_prior(node):
    """q of ``node`` back to its prior (given its parents' current moments); a node
    whose prior is a gathered table (LDA's z) stays in factored form."""
    terms = None if (len(node.plates) != 1 or node.point) else node.factor.prior_terms()
    if terms is not None and all(np.all(np.isfinite(T)) for T in terms[0]):
        node.set_natural_terms(*terms)
        return
    node.set_natural(node.prior_natural())


def mean_step(old, target, rho):
    """Gradient descent on a Gaussian node's mean, its precision P fixed (docs/blr.md):
    with the delta-method target (t1, t2) = lam0 + messages at the mean m, the gradient
    of log p(D, m) is t1 + 2 t2 m, and m <- m + rho (t1 + 2 t2 m); lam = (P m, -P/2)."""
    e1, e2 = old
    t1, t2 = target
    if np.ndim(e2) > np.ndim(e1):   # MultivariateNormal: T = (x, x x^T)
        P = -2.0 * np.asarray(e2)
        m = np.linalg.solve(P, np.asarray(e1)[..., None])[..., 0]
        grad = t1 + 2.0 * np.einsum("...ij,...j->...i", t2, m)
        new = m + rho * grad
        return (np.einsum("...ij,...j->...i", P, new), np.asarray(e2))
    P = -2.0 * np.asarray(e2)
    m = np.asarray(e1) / P
    new = m + rho * (t1 + 2.0 * t2 * m)
    return (P * new, np.asarray(e2))


def blr_step(model, node, rho=1.0, iteration=None, scale=None, update="natural"):
    """One BLR update of ``node`` from the messages of its children in ``model`` (a local
    node, or a test driving one node): its target (:func:`blr_target`) taken by
    :func:`blr_update` (``update``: "natural", or "mean" for a gradient step). A
    Categorical whose target is a sum of gathered tables (:func:`target_terms`) is
    updated in that factored form (the same q, without an entries x K exp). ``update`` may
    be a stateful optimizer (:mod:`.optimizers`: adam, ogn, vogn, ivon), which steps the node."""
    if not isinstance(update, str):   # the deep-learning rows: the optimizer steps the node
        return update.step(model, node, rho, iteration, scale)
    if update == "mean":
        new = blr_update(node, node.nat, blr_target(model, node, scale), rho, iteration, update)
        node.set_natural(new)
        return new
    if rho == 1.0 and scale is None:
        terms = target_terms(model, node)
        if terms is not None:
            node.set_natural_terms(*terms)
            return node._nat
    new = blr_update(node, node.nat, blr_target(model, node, scale), rho, iteration)
    node.set_natural(new)
    return new


def blr_update(node, old, target, rho=1.0, iteration=None, update="natural"):
    """THE step: the natural parameters lam = (1 - rho) ``old`` + rho ``target`` of
    ``node`` (returned, not stored: a pure function of its arguments). Every update of
    every method goes through here: the loop's step of a global node (target = lam0 + a view's messages), the local block's steps, the
    Dask driver's. A point-mass node (EM) stores the natural parameters of its
    pseudo-posterior (the target); its moments are then T at their mode (the MAP M-step).
    With rho < 1 (SVI, damping) a point mass averages those natural parameters, i.e. its
    expected sufficient statistics: online EM (docs/em.md). Non-finite parameters are
    refused (FloatingPointError); while the precision is not positive definite rho is
    halved (at most :data:`MAX_HALVINGS` times, then FloatingPointError).
    ``update="mean"``: the gradient step of the delta-method rows (:func:`mean_step`:
    the mean moves, the precision stays)."""
    if update == "mean":
        new = mean_step(old, target, rho)
        _check_finite(node, new, iteration, "; the gradient step overshot: lower rho")
        return new
    if rho == 1.0:
        new = target
    else:
        new = tuple((1.0 - rho) * a + rho * t for a, t in zip(old, target))
    _check_finite(node, new, iteration, "; check the data scale and the priors")
    at = f" at iteration {iteration}" if iteration is not None else ""
    r = rho
    for _ in range(MAX_HALVINGS):  # PD safeguard (docs/ncvmp.md): backtrack rho
        if precision_is_pd(node, new):
            break
        r *= 0.5
        new = tuple((1.0 - r) * a + r * t for a, t in zip(old, target))
    else:
        if not precision_is_pd(node, new):
            raise FloatingPointError(f"the update of {node.label()}{at} gives a precision that is "
                                     f"not positive definite even with rho halved {MAX_HALVINGS} "
                                     f"times ({rho} -> {r:g}): a factor sends an indefinite "
                                     f"expected Hessian; use a log-concave likelihood or a "
                                     f"stronger prior")
    return new


MAX_HALVINGS = 30


def _check_finite(node, new, iteration, fix):
    for a in new:
        if not _finite(compact(a)):
            at = f" at iteration {iteration}" if iteration is not None else ""
            raise FloatingPointError(f"the update of {node.label()} produced non-finite "
                                     f"natural parameters{at}{fix}")


#: above this many entries the finiteness check is one sum (finite only if every entry is:
#: an inf or NaN entry makes it inf or NaN), below it one elementwise test
SUM_CHECK = 4096


def _finite(a):
    a = np.asarray(a)
    if a.size <= SUM_CHECK:
        return bool(np.logical_and.reduce(np.isfinite(a), axis=None))
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.add.reduce(rowsplit.add_rows(a), axis=None)   # (rows over the cores)
    return bool(np.isfinite(s)) or bool(np.isfinite(a).all())   # (finite entries that overflow)


def precision_is_pd(node, nat):
    """Is a Gaussian node's precision positive definite? (the family says; True for
    families without a precision). ``blr_step`` halves rho until it is: a
    non-log-concave factor (a Potential, say) can send an indefinite E[hessian].
    Conjugate targets are always PD, so this never changes a conjugate update."""
    return node.family.precision_is_pd(nat)
