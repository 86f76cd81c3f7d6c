"""The one update: lam <- (1 - rho) lam + rho (lam0 + sum of child messages)."""
from __future__ import annotations

import numpy as np


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
    target = node.prior_natural()
    msg = incoming(model, node, scale)
    if msg is not None:
        target = tuple(np.broadcast_to(a, np.shape(m)) + m if np.shape(m) != np.shape(a) else a + m
                       for a, m in zip(target, msg))
    return target


def blr_step(model, node, rho=1.0, iteration=None, scale=None):
    """One BLR update of ``node``. A point-mass node (EM) stores the target; its
    moments are then T at the target's mode (the MAP M-step)."""
    target = blr_target(model, node, scale)
    if rho == 1.0 or node.point:
        new = target
    else:
        new = tuple((1.0 - rho) * a + rho * t for a, t in zip(node.nat, target))
    for a in new:
        if not np.all(np.isfinite(a)):
            at = f" at iteration {iteration}" if iteration is not None else ""
            raise FloatingPointError(f"the update of {node.label()} produced non-finite natural "
                                     f"parameters{at}; check the data scale and the priors")
    node.set_natural(new)
    return new
