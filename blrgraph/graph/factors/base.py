"""The conditional-factor interface: p(x | parents) in terms of parents' moments.

A factor answers four questions (docs/math.md §3.1), all vectorised over plates:

* ``prior_natural(u)``         E[eta(parents)]: the message to the child, and the
                               child's lam0 contribution;
* ``expected_log_partition(u)`` E[A(parents)];
* ``expected_loglik(x, u)``    E[log p(x | parents)] per plate entry;
* ``message(i, x, u, w, target)`` the message to parent slot i, grad of
                               E[log p] with respect to that parent's mean
                               parameters, summed with weights w over the
                               child's plates down to the parent's plates.

``u`` is the list of the parents' moment tuples (a constant parent is published
as its slot family's T(value)); ``x`` is a :class:`~blrgraph.graph.node.ChildData`.
One module per factor kind (a rule table); every reduction goes through
``plates.wsum`` so plates, masks and counts are handled in one place.
"""
from __future__ import annotations

import numpy as np

from ...families.base import inner
from ...predictive import fixed_predictive, monte_carlo
from ..base import ChildData, Constant, Node, _weighted_sum
from ..plates import broadcast_plates


class Slot:
    """A parent slot: its name, the family of moments it needs, and whether a
    random parent is conjugate there."""

    def __init__(self, name, family, random=True, kind="real"):
        self.name = name
        self.family = family
        self.random = random
        self.kind = kind  # what a constant must be: real, positive, spd, simplex, unit


class Conditional:
    """Base class of conditional factors."""

    conjugate = True  # non-conjugate factors (NCVMP) set this False
    #: E[log p(x | parents)] = <E eta, E T(x)> - E[A] + E log h(x) in the node's own family
    #: (T, h), so a latent node's ELBO term is <lam0 - lam, E T> + A(lam) - E[A]
    #: (inference/compiled.py); the factors that are so say True
    closed_form_elbo = False
    #: entries of the node are independent given its parents, so an entry without observed
    #: descendants integrates out on its own (Stochastic.observed_entries); False for a
    #: factor that couples its entries (a Gaussian Markov chain's time steps)
    independent_entries = True
    elbo_is_estimate = False  # True when E[log f] is a Monte Carlo estimate (Potential)
    #: attributes holding work arrays kept during a fit, dropped by :meth:`release`
    caches = ()

    def __init__(self, node, parents, slots, **fixed):
        self.node = node
        self.slots = list(slots)
        self.fixed = fixed
        self.parents = [self._wrap(p, s) for p, s in zip(parents, self.slots)]

    def _wrap(self, p, slot):
        if isinstance(p, Node):
            if not slot.random:
                raise TypeError(f"{self.node.label()}: parameter '{slot.name}' must be a number "
                                f"or an array, not the node {p.label()} (no conjugate update exists "
                                f"for a random {slot.name}; fix it, or use a point estimate)")
            prov = p.provides
            if prov is None or type(prov) is not type(slot.family):
                got = "a " + prov.name + " node" if prov is not None else "a node"
                raise TypeError(f"{self.node.label()}: parameter '{slot.name}' is {p.label()} ({got}); "
                                f"a conjugate parent here must be a {slot.family.name} node "
                                f"(or a number/array)")
            return p
        try:
            value = np.asarray(p, dtype=float)
        except (TypeError, ValueError):
            raise TypeError(f"{self.node.label()}: parameter '{slot.name}' must be a number, an array "
                            f"or a node, got {type(p).__name__}") from None
        if not np.all(np.isfinite(value)):
            raise ValueError(f"{self.node.label()}: parameter '{slot.name}' must be finite, got {p!r}")
        self.validate_constant(slot, value)
        return Constant(value, slot.family, name=f"{self.node.name}.{slot.name}")

    def validate_constant(self, slot, value):
        """Refuse invalid constant parameters with a ValueError naming the node."""
        where = f"{self.node.label()}: parameter '{slot.name}'"
        if slot.kind == "positive" and np.any(value <= 0):
            raise ValueError(f"{where} must be > 0, got {value!r}")
        if slot.kind == "unit" and np.any((value <= 0) | (value >= 1)):
            raise ValueError(f"{where} must lie strictly between 0 and 1, got {value!r}")
        if slot.kind == "simplex":
            if value.ndim < 1 or np.any(value < 0) or not np.allclose(value.sum(-1), 1.0, atol=1e-8):
                raise ValueError(f"{where} must be a probability vector (non-negative, summing to 1 "
                                 f"on the last axis), got {value!r}")
            if np.any(value == 0):
                raise ValueError(f"{where} has zero probabilities; their log is -inf. Drop those "
                                 f"categories or give them a small positive probability")
        if slot.kind == "spd":
            from ...families.base import check_spd
            check_spd(slot.name, value, self.node.label())

    def plates(self):
        shapes = [p.plates for p in self.parents] + [self.fixed_plates()]
        try:
            return broadcast_plates(*shapes)
        except ValueError:
            desc = ", ".join(f"{s.name}: {p.plates}" for s, p in zip(self.slots, self.parents))
            raise ValueError(f"{self.node.label()}: the parents' plates do not broadcast ({desc})") from None

    def fixed_plates(self):
        return ()

    # ---- the four questions ----------------------------------------------------
    def prior_natural(self, u):
        raise NotImplementedError

    def expected_log_partition(self, u):
        raise NotImplementedError

    def log_base_measure(self, x):
        """log h(x) for data or a point; E_q[log h] for a latent child."""
        fam = self.node.family
        if x.value is not None:
            return fam.log_base_measure(x.value)
        if self.node.nat is not None and x.plates == self.node.plates:
            return fam.expected_log_base_measure(self.node.nat)
        return 0.0

    def expected_loglik(self, x, u):
        """<E eta, T(x)> - E[A] + log h(x) (E log h for a latent child is in its entropy)."""
        fam = self.node.family
        return inner(self.prior_natural(u), x.moments, fam.event_ndims) \
            - self.expected_log_partition(u) + self.log_base_measure(x)

    def weighted_loglik(self, x, u, w):
        """sum_n w_n E[log p(x_n | parents)] (the ELBO term; w = mask x counts or None);
        for partly observed vectors, plus the entropy of their missing coordinates."""
        x, H = self.complete(x, u)
        ll = self.expected_loglik(x, u)
        return _weighted_sum(ll if H is None else ll + H, w, x.plates)

    def complete(self, x, u):
        """(x, H): partly observed data (``x.cells``) with their missing coordinates as
        latent variables at their optimum given the parents' moments u (the family's
        ``complete_cells``; Ghahramani & Jordan 1994), as expected statistics, and the
        entropy H of those coordinates per entry; (x, None) for whole data."""
        if x.cells is None:
            return x, None
        Ex, Exx, H = self.node.family.complete_cells(x.value, x.cells, self.prior_natural(u))
        return ChildData(None, (Ex, Exx), Ex.shape[:-1], x.value_ndim), H

    def message(self, i, x, u, w, target_plates):
        raise NotImplementedError(f"{type(self).__name__} sends no message to slot {i}")

    def route(self, i, x, target_plates):
        """``u -> message(i, x, u, None, target_plates)`` for data ``x`` that stay the same
        for a whole fit, without weights (the compiled sweep resolves it once per fit,
        inference/compiled.py); a factor may resolve here what depends only on x."""
        return lambda u: self.message(i, x, u, None, target_plates)

    def term_is_message(self, i):
        """Whether this factor's ELBO term (unweighted) is exactly <message to slot i,
        E T(parent i)>: then the parent's step at rho = 1 makes the parent's term and
        this one A(lam) - E[A0] together (inference/compiled.py). Default: False."""
        return False

    def term_rest(self, i, x):
        """For data ``x`` fixed for a fit, without weights: a function u -> this factor's
        ELBO term minus <its message to slot i, E T(parent i)> (the part that does not
        depend on parent i: the term is affine in that parent's moments), or None when
        the factor does not give it (inference/compiled.py fuses the term with the
        parent's). ``term_is_message(i)``: the rest is 0. Default: None."""
        return (lambda u: 0.0) if self.term_is_message(i) else None

    # ---- optional hooks: declared here with their defaults, overridden where they apply ----
    #: the component factor of a mixture (None for every other factor)
    component = None
    #: ``factored_counts(q, x, w, target)``: a mixture component's message from a factored
    #: q(z) by one scatter (CategoricalFactor), or None when the factor has none
    factored_counts = None

    def selector(self):
        """The assignment node of a mixture (its first parent); None for other factors."""
        return None

    def n_categories(self):
        """K of a Categorical-valued child, from its parameters (None if unknown)."""
        return None

    def check_fit(self, method):
        """Refuse, before any sweep of ``fit(method)``, what this factor cannot evaluate
        (a Potential's logp of the wrong shape or not finite); default: nothing."""

    def check_data_plates(self, dplates):
        """Refuse data whose plates this factor would align ambiguously (default: none)."""

    def prior_terms(self):
        """The prior natural parameter of a Categorical child as gathered tables
        (tables, rows) (families/gathered.py), or None (then the dense prior is used)."""
        return None

    def message_terms(self, i, x, u, w, target):
        """The message to parent slot ``i`` as gathered tables (tables, rows), or None."""
        return None

    def loglik_terms(self, x, u, plates):
        """E[log p(x | parents)] of observed labels as gathered tables, or None."""
        return None

    def factored_message(self, slots, q, w, target):
        """The message from a factored Categorical child ``q`` to the parent in ``slots``
        without its dense (entries x K) array, or None (then the dense message is used)."""
        return None

    # ---- posterior predictive (graph/predictive.py, docs/predict.md) ---------------------
    def predictive(self, q, plates, ctx):
        """E_q[p(x | parents)] for every entry (``plates``): ``q`` holds one
        :class:`~blrgraph.graph.predictive.ParentDist` per parent slot. The default is the
        conditional itself when every parent is fixed, else Monte Carlo over q; conjugate
        factors override it with the exact integral."""
        if all(pd.fixed for pd in q):
            return fixed_predictive(self, q, plates)
        return monte_carlo(self, q, plates, ctx)

    def draw_natural(self, u):
        """The child's natural parameters at parents drawn from q (``u``: their T(values),
        with a leading axis of draws): eta(theta) = ``prior_natural`` at a point."""
        return self.prior_natural(u)

    def predictive_plates(self, q):
        """The entries' plates for parents ``q`` (new inputs change them)."""
        from ..plates import broadcast_plates
        return broadcast_plates(*[pd.plates for pd in q], tuple(self.fixed_plates()))

    def draw_ndim(self, i, n):
        """How many plate axes a draw of parent slot i lines up with (right-aligned) in a
        child with ``n`` plate axes (Monte Carlo predictive)."""
        return n

    def release(self):
        """Drop the work arrays kept between sweeps (called when a fit ends)."""
        for name in self.caches:
            self.__dict__.pop(name, None)

    def describe(self):
        return f"{type(self).__name__} of {self.node.label()}"
