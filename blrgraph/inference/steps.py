"""Step sizes: the rho of every BLR step, as the Method declares it.

* ``constant``: every node takes rho (rho = 1: coordinate ascent; rho < 1 damps
  every node, ``fit("vmp", rho=0.5)``);
* ``damped``: nodes that receive a non-conjugate message take rho and are
  backtracked (:class:`Backtracking`); conjugate nodes take rho = 1 (NCVMP);
* ``robbins_monro``: global nodes take rho_t = (t + tau)^-kappa, local nodes 1 (SVI).
"""
from __future__ import annotations

from .tolerance import elbo_rounding


def nonconjugate_child(model, node):
    """Does ``node`` receive a non-conjugate message (NCVMP's damped nodes)?"""
    out, stack = [], list(model.children[node])
    while stack:
        c = stack.pop()
        if c.deterministic:
            stack.extend(model.children[c])
        else:
            out.append(c)
    return any(not c.factor.conjugate for c in out)


def initial_rhos(model, method):
    """{node: rho} at the start of a fit."""
    if method.step == "damped":
        return {n: (method.rho if nonconjugate_child(model, n) else 1.0) for n in model.schedule}
    if method.step == "robbins_monro":
        return {n: 1.0 for n in model.schedule}
    return {n: method.rho for n in model.schedule}


def damped_nodes(model, method):
    """The nodes whose steps are backtracked: under a "damped" step, those that receive a
    non-conjugate message (:class:`Backtracking`)."""
    if method.step != "damped":
        return []
    return [n for n in model.schedule if nonconjugate_child(model, n)]


def robbins_monro(t, tau, kappa):
    """rho_t = (t + tau)^-kappa, t = 1, 2, ..."""
    return (t + tau) ** (-kappa)


class Backtracking:
    """Backtracking of the damped steps of non-conjugate VMP (docs/ncvmp.md).

    NCVMP is not a coordinate ascent: a step on a node with a non-conjugate message can
    overshoot and lower the ELBO (Newton far from the optimum, e.g. a logistic regression
    on raw covariates of scale 1e5). A sweep whose ELBO falls below the previous one (by
    more than rounding), or that produces non-finite numbers, is undone and redone with
    those nodes' rho halved; after an accepted sweep rho doubles back towards its initial
    value. So the NCVMP trace never decreases. With a Monte Carlo factor (a Potential:
    ``elbo_is_estimate``) only non-finite numbers trigger it: the damped fixed point is
    not the maximiser of the estimated ELBO, which drifts down by ~1e-9 per sweep near
    it. The run counts as converged only while every damped node is back at its
    initial rho."""

    #: rho may fall to eps times its initial value: a smaller step changes nothing in
    #: double precision. Far from the optimum (Poisson counts of 5e8 on a log link, a
    #: prior mean of 0) the first Newton-like step overshoots by ~1e8 and needs ~2^-31.
    HALVINGS = 52
    MIN_FACTOR = 2.0 ** -HALVINGS

    def __init__(self, model, nodes, rhos):
        self.model, self.rhos = model, rhos
        self.nodes = list(nodes)
        self.rho0 = {n: rhos[n] for n in self.nodes}
        self.active = bool(self.nodes)
        self.state = None

    @property
    def monotone(self):
        """May a decrease of the ELBO trigger a halving? Not while some factor's ELBO
        term is a Monte Carlo estimate (a Potential over non-point parents)."""
        return not any(n.factor.elbo_is_estimate for n in self.model.stochastic)

    def save(self):
        if self.active:
            self.state = [(n, n.snapshot()) for n in self.model.latent]

    def _restore_and_halve(self):
        for n, state in self.state:
            n.restore_snapshot(state)
        for n in self.nodes:
            self.rhos[n] *= 0.5
        return all(self.rhos[n] >= self.MIN_FACTOR * self.rho0[n] for n in self.nodes)

    def _names(self):
        return ", ".join(n.label() for n in self.nodes)

    def reject(self, it, err):
        """Undo a sweep that failed with ``err`` (non-finite numbers)."""
        if not self._restore_and_halve():
            raise FloatingPointError(
                f"non-conjugate VMP cannot make progress at iteration {it}: even with rho "
                f"halved {self.HALVINGS} times the update of {self._names()} fails ({err})") from err

    def settled(self):
        """Every damped node back at its initial rho: only then may a small ELBO change
        mean convergence (with rho halved, small changes say nothing)."""
        return all(self.rhos[n] >= self.rho0[n] for n in self.nodes)

    def accept(self, L, prev, it):
        """True to keep the sweep; False after undoing it (rho halved)."""
        if not self.active:
            return True
        if self.monotone and prev is not None and L < prev - elbo_rounding(self.model, prev, L):
            if not self._restore_and_halve():
                raise FloatingPointError(
                    f"non-conjugate VMP cannot raise the ELBO at iteration {it} even with rho "
                    f"halved {self.HALVINGS} times for {self._names()}; standardise the covariates or use a "
                    f"stronger prior")
            return False
        for n in self.nodes:
            self.rhos[n] = min(self.rho0[n], 2.0 * self.rhos[n])
        return True
