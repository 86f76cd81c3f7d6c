"""The mixture (gate) factor: p(x | z, theta) = prod_k p(x | theta_k)^{z_k}
(docs/math.md §3.3). Components live on the last plate axis of the component
parameters; any conjugate factor can be the component.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from ...predictive import MixturePredictive
from ..base import ChildData
from ..plates import broadcast_plates, reduce_to
from ..suffstats import FlatStats
from ...families.base import _F8, einsum
from .base import Conditional


def _fit(a, keep):
    """A parameter array without its size-1 row axes: its last ``keep`` axes."""
    if type(a) is not np.ndarray or a.dtype != _F8:
        a = np.asarray(a, dtype=float)
    return a.reshape(a.shape[-keep:]) if a.ndim > keep else a


class MixtureFactor(Conditional):
    """Slots: z (Categorical) then the component factor's slots."""

    caches = ("_ll_cache", "_flat_cache", "_wphi_cache", "_rowll_cache", "_stats_cache",
              "_plan_cache", "passed")
    _ll_cache = _flat_cache = _wphi_cache = _rowll_cache = _stats_cache = _plan_cache = None
    #: (Phi's FlatStats, r, r^T Phi) from the assignments' last step when it made both in
    #: one pass over the rows (FlatStats.softmax_pass, inference/zstep.py): the
    #: components' messages read it for those same statistics and r
    passed = None

    def __init__(self, node, parents, slots, component, component_slots, **fixed):
        self.node = node
        z = parents[0]
        from ..base import Node
        if not isinstance(z, Node) or z.provides is None or not z.provides.is_label:
            raise TypeError(f"{node.label()}: the first argument of Mixture must be a Categorical "
                            f"node (the assignments z), got {z!r}")
        self.component = component(node, parents[1:], component_slots, **fixed)
        self.slots = list(slots[:1]) + self.component.slots
        self.fixed = fixed
        self.parents = [z] + self.component.parents
        cplates = self.component.plates()
        if len(cplates) == 0:
            raise ValueError(f"{node.label()}: the component parameters have no plates; put the "
                             f"K components on their last plate axis (e.g. plates=(K,))")
        self.K = cplates[-1]
        Kz = (z.nat if z.nat is not None else z.moments())[0].shape[-1]
        if Kz != self.K:
            raise ValueError(f"{node.label()}: z '{z.name}' has {Kz} categories but the component "
                             f"parameters have {self.K} entries on their last plate axis")

    def plates(self):
        cplates = self.component.plates()[:-1]
        try:
            return broadcast_plates(self.parents[0].plates, cplates)
        except ValueError:
            hint = ""
            if len(self.parents[0].plates) == 1 and len(cplates) == 1:
                hint = (f"; for one assignment per row of ({self.parents[0].plates[0]}, "
                        f"{cplates[0]}) data give z plates ({self.parents[0].plates[0]}, 1)")
            raise ValueError(f"{self.node.label()}: z plates {self.parents[0].plates} and component "
                             f"plates {cplates} (without the component axis) do not "
                             f"broadcast{hint}") from None

    def check_data_plates(self, dplates):
        """Data with more leading axes than the mixture's plates, while z shares an axis with
        the parameters (z plates (N,), parameters (D, K) with N == D): numpy alignment would
        give one z per *column*, shared down the rows. Refused as ambiguous; the intended
        model almost always has z plates (N, 1)."""
        own = tuple(self.node.plates)
        if len(dplates) <= len(own):
            return
        zp, cp = self._aligned(self.parents[0].plates, len(own))
        if any(z != 1 and c != 1 for z, c in zip(zp, cp)):
            z = self.parents[0]
            raise ValueError(
                f"{self.node.label()}: z {z.label()} has plates {z.plates}, which line up with the "
                f"parameters' plate axis (the data's last axes {own}), so one assignment would be "
                f"shared down each column of the {dplates} data. For one assignment per row give z "
                f"plates {tuple(dplates[:1]) + (1,) * (len(dplates) - 1)}; if one assignment per "
                f"column is meant, declare the mixture with plates={tuple(dplates)}")

    def n_categories(self):
        return self.component.n_categories()

    def selector(self):
        return self.parents[0]

    @property
    def conjugate(self):
        """A mixture is conjugate when its component is (a non-conjugate component needs
        fit('ncvmp'))."""
        return self.component.conjugate

    @property
    def elbo_is_estimate(self):
        return self.component.elbo_is_estimate

    def _aligned(self, zplates, n):
        """z's plates and the component parameters' plates (without K), right-aligned
        to ``n`` axes (numpy broadcasting); None if either has more than n axes."""
        zp, cp = tuple(zplates), tuple(self.component.plates()[:-1])
        if len(zp) > n or len(cp) > n:
            return None
        return (1,) * (n - len(zp)) + zp, (1,) * (n - len(cp)) + cp

    def _split(self, u):
        return u[0][0], u[1:]

    def _flat(self, x, r, ucomp):
        """How the data's flat statistics (graph/suffstats.py) serve this mixture, or None.

        Needs observed data with dense T(x) and a conjugate component. The data's plate
        axes split into leading *row* axes, along which z varies and the parameters do
        not, and trailing *column* axes, along which z is constant (a multi-column mixture:
        z plates (N, 1), parameters (D, K)). Returns (FlatStats, R, C, column shape);
        the last answer is kept for the same data, z shape and parameter plates."""
        rest = (r.shape if type(r) is np.ndarray else np.shape(r), tuple(x.plates), tuple(p.plates for p in self.component.parents),
                self.component.fixed_plates())
        memo = self._plan_cache
        if memo is not None and memo[0] is self._flat_cache and memo[1] is x.value and \
                memo[2] is x.cells and memo[3] == rest:
            return memo[4]
        out = self._flat_new(x, r)
        self._plan_cache = (self._flat_cache, x.value, x.cells, rest, out)
        return out

    def _flat_new(self, x, r):
        if x.value is None or x.cells is not None or not self.component.conjugate or \
                any(f != 1 for f in self.component.fixed_plates()):
            return None   # (fixed arrays such as Binomial n per component enter log h(x))
        xp = tuple(x.plates)
        n = len(xp)
        aligned = self._aligned(np.shape(r)[:-1], n)
        if aligned is None:
            return None
        zp, cp = aligned
        s = 0
        while s < n and zp[s] == xp[s] and cp[s] == 1:
            s += 1
        if any(z != 1 for z in zp[s:]):
            return None   # z and the parameters vary along the same axis: per-entry formulas
        cached = self._flat_cache
        if cached is not None and cached[0] is x.value:
            fs = cached[1]
        else:
            fam = self.node.family
            fs = FlatStats(fam, x.value, xp) if FlatStats.fits(fam, x.value, xp) else None
            self._flat_cache = (x.value, fs)
        if fs is None:
            return None
        R, C = int(np.prod(xp[:s], dtype=int)), int(np.prod(xp[s:], dtype=int))
        return fs, R, C, xp[s:]

    def _coef(self, fs, cols, ucomp):
        """Coefficients of Phi's columns for every (column entry, component): (C, K, P)."""
        return self._coef_lead(fs, ucomp, cols).reshape((math.prod(cols), self.K, fs.layout.P))

    def _coef_lead(self, fs, ucomp, cols=()):
        """The coefficients with their lead axes, (cols..., K, P), C-ordered (for one column
        entry the (K, P) rows that ``FlatStats.dot_rows`` takes)."""
        lead = tuple(cols) + (self.K,)
        comp, n = self.component, len(lead)
        nat = [_fit(a, n + k) for a, k in zip(comp.prior_natural(ucomp),
                                              self.node.family.event_ndims)]
        return fs.coefficients(nat, _fit(comp.expected_log_partition(ucomp), n), lead)

    def _weighted_phi(self, fs, R, C, w):
        """Phi as (R, C P) with each column entry's block multiplied by its weight (masks,
        counts) -- kept while the same weights come back."""
        cached = self._wphi_cache
        if w is None:
            if cached is None or cached[0] is not fs or cached[1] is not None:
                self._wphi_cache = cached = (fs, None, fs.Phi.reshape(R, C * fs.layout.P))
            return cached[2]
        w = np.asarray(w, dtype=float)
        if cached is not None and cached[0] is fs and cached[1] is not None and (
                cached[1] is w or (cached[1].shape == w.shape and np.array_equal(cached[1], w))):
            return cached[2]
        wb = np.broadcast_to(w, fs.plates).reshape(R, C, 1)
        A = (fs.Phi.reshape(R, C, fs.layout.P) * wb).reshape(R, C * fs.layout.P)
        self._wphi_cache = (fs, w, A)
        return A

    def _weighted_blocks(self, fs, R, C, w):
        """Yield (ra, rb, rows ra:rb of the weighted Phi as (rb - ra, C P)): the kept matrix
        of ``_weighted_phi`` as one block when Phi is kept whole, else chunks rebuilt from
        the data (graph/suffstats.py), each entry's statistics times its weight."""
        if fs.Phi is not None:
            yield 0, R, self._weighted_phi(fs, R, C, w)
            return
        wb = None if w is None else \
            np.broadcast_to(np.asarray(w, dtype=float), fs.plates).reshape(R, C, 1)
        P = fs.layout.P
        for a, b, blk in fs.blocks(step=C):
            ra, rb = a // C, b // C
            if wb is None:
                yield ra, rb, blk.reshape(rb - ra, C * P)
            else:
                yield ra, rb, (blk.reshape(rb - ra, C, P) * wb[ra:rb]).reshape(rb - ra, C * P)

    def _row_loglik(self, x, ucomp, r, w):
        """sum over column entries of w * E[log p(x | theta_k)]: (R, K), for a mixture with
        column axes (one product (R, C P) @ (C P, K)); kept for the same inputs."""
        fs, R, C, cols = self._flat(x, r, ucomp)
        if fs.Phi is not None:
            key = (self._weighted_phi(fs, R, C, w),)
        else:
            key = (fs, w)
        refs = key + tuple(ucomp)
        cached = self._rowll_cache
        if cached is not None and len(cached[0]) == len(refs) and \
                all(a is b for a, b in zip(cached[0], refs)):
            return cached[1]
        coef = self._coef(fs, cols, ucomp)                       # (C, K, P)
        cmat = coef.transpose(0, 2, 1).reshape(C * fs.layout.P, self.K)
        if fs.Phi is not None:
            ll = key[0] @ cmat
        else:
            ll = np.empty((R, self.K))
            for ra, rb, A in self._weighted_blocks(fs, R, C, w):
                np.matmul(A, cmat, out=ll[ra:rb])
        self._rowll_cache = (refs, ll)
        return ll

    def _component_loglik(self, x, ucomp, r=None):
        """E[log p(x | theta_k)] for every entry and component (entries x K). It is
        needed twice per sweep (message to z, then the ELBO) with the same moments,
        so the last result is kept, keyed on the identity of its inputs (moment
        tuples are replaced, never modified, when a node is updated)."""
        refs = (x.value if x.value is not None else x.moments,) + tuple(ucomp)
        cached = self._ll_cache
        if cached is not None and len(cached[0]) == len(refs) and \
                all(a is b for a, b in zip(cached[0], refs)):
            return cached[1]
        plan = None if r is None else self._flat(x, r, ucomp)
        if plan is not None and plan[2] == 1:   # one product with the statistics matrix
            fs = plan[0]
            ll = fs.dot(self._coef_lead(fs, ucomp).T)
            ll = ll.reshape(tuple(x.plates) + (self.K,))
        else:
            xe, H = self.component.complete(x.expand(self.node.family.event_ndims), ucomp)
            ll = self.component.expected_loglik(xe, ucomp)
            if H is not None:   # partly observed vectors: + entropy of the missing coordinates
                ll = ll + H
        self._ll_cache = (refs, ll)
        return ll

    def complete(self, x, u):
        """Partly observed vectors are completed per component (in the component's
        methods, with that component's parameters), not here."""
        return x, None

    def prior_natural(self, u):
        r, ucomp = self._split(u)
        out = []
        for a, k in zip(self.component.prior_natural(ucomp), self.node.family.event_ndims):
            rr = r.reshape(r.shape + (1,) * k)
            out.append(np.sum(rr * a, axis=-(k + 1)))
        return tuple(out)

    def expected_log_partition(self, u):
        r, ucomp = self._split(u)
        return np.sum(r * self.component.expected_log_partition(ucomp), axis=-1)

    def expected_loglik(self, x, u):
        r, ucomp = self._split(u)
        return einsum("...k,...k->...", r, self._component_loglik(x, ucomp, r))

    def weighted_loglik(self, x, u, w):
        fast = self._factored_loglik(x, u, w)
        if fast is not None:
            return fast
        r, ucomp = self._split(u)
        plan = self._flat(x, r, ucomp)
        if plan is None or plan[2] == 1:
            return super().weighted_loglik(x, u, w)
        R = plan[1]
        return float(einsum("nk,nk->", r.reshape(R, self.K), self._row_loglik(x, ucomp, r, w)))

    def _factored_q(self):
        """q(z) when it is factored (families/gathered.py: a sum of gathered tables)."""
        z = self.parents[0]
        q = z._factored
        return None if q is None or z.point else q

    def _factored_loglik(self, x, u, w):
        """The ELBO term sum_n w_n sum_k q_n(k) E[log p(x_n | theta_k)] of a factored q(z)
        with a component that gives its log-likelihoods as a gathered table (LDA's words):
        the table times one scatter of q, without q's entries x K array; None otherwise."""
        q = self._factored_q()
        if q is None or x.cells is not None:
            return None
        terms = self.component.loglik_terms(x, u[1:], self.node.plates)
        if terms is None or len(terms[0]) != 1:
            return None
        return q.expect(terms[0][0], terms[1][0], w)

    def message(self, i, x, u, w, target):
        q = self._factored_q() if i > 0 else None
        hook = self.component.factored_counts
        if q is not None and hook is not None and i == 1 and len(self.component.parents) == 1:
            fast = hook(q, x, w, target)   # a mixture of Categoricals: one scatter of q(z)
            if fast is not None:
                return fast
        r, ucomp = self._split(u)
        plan = self._flat(x, r, ucomp)
        if i == 0:
            if plan is not None and plan[2] > 1 and int(np.prod(target, dtype=int)) == plan[1]:
                return (self._row_loglik(x, ucomp, r, w).reshape(tuple(target) + (self.K,)),)
            ll = self._component_loglik(x, ucomp, r)
            return (reduce_to(ll, 1, target, weights=w),)
        if plan is not None:
            # the message is affine in the child's moments: one pseudo-entry per (column
            # entry, component) carrying the weighted means, with the weights' totals
            fs, R, C, cols = plan
            tot, means = self._component_stats(fs, R, C, cols, r, w)
            pseudo = ChildData(None, means, tuple(cols) + (self.K,), self.node.family.value_ndim)
            return self.component.message(i - 1, pseudo, ucomp, tot, target)
        wr = r if w is None else np.asarray(w)[..., None] * r
        xe, _ = self.component.complete(x.expand(self.node.family.event_ndims), ucomp)
        return self.component.message(i - 1, xe, ucomp, wr, target)

    def route(self, i, x, target):
        """With the data's statistics matrix (one column entry, no weights), the messages
        of :meth:`message` with the plan resolved once: to z the log-likelihoods
        ``Phi @ coef``, to a component parameter the component's message for the K
        pseudo-entries of the responsibilities' weighted means."""
        z = self.parents[0]
        r = np.broadcast_to(0.0, tuple(z.plates) + (self.K,))   # (only its shape is read)
        plan = None if z._factored is not None else self._flat(x, r, None)
        if plan is None or plan[2] != 1:
            return super().route(i, x, target)
        fs, R, C, cols = plan
        if i == 0:
            if tuple(target) != tuple(x.plates):
                return super().route(i, x, target)
            return lambda u: (self._flat_loglik(fs, x, u[1:]),)
        comp, vnd, plates = self.component, self.node.family.value_ndim, tuple(cols) + (self.K,)

        def to_parameter(u):
            tot, means = self._component_stats(fs, R, C, cols, u[0][0], None)
            return comp.message(i - 1, ChildData(None, means, plates, vnd), u[1:], tot, target)
        return to_parameter

    def term_is_message(self, i):
        """sum_n sum_k r_nk E[log p(x_n | theta_k)] is <z's message, r> (z with the
        mixture's plates)."""
        return i == 0 and tuple(self.parents[0].plates) == tuple(self.node.plates)

    def _flat_loglik(self, fs, x, ucomp):
        """:meth:`_component_loglik` through the statistics matrix (its cache shared)."""
        refs = (x.value,) + tuple(ucomp)
        cached = self._ll_cache
        if cached is not None and len(cached[0]) == len(refs) and \
                all(map(operator.is_, cached[0], refs)):
            return cached[1]
        ll = fs.dot_rows(self._coef_lead(fs, ucomp))
        if len(x.plates) != 1:
            ll = ll.reshape(tuple(x.plates) + (self.K,))
        self._ll_cache = (refs, ll)
        return ll

    def _component_stats(self, fs, R, C, cols, r, w):
        """(weights' totals, weighted means) of the statistics per (column entry,
        component); the last kept for the same r and w (every component parameter's
        message in a sweep reads the same)."""
        cached = self._stats_cache
        if cached is not None and cached[0] is fs and cached[1] is r and cached[2] is w:
            return cached[3]
        passed = self.passed
        if C == 1 and w is None and passed is not None and passed[0] is fs and passed[1] is r:
            S = passed[2]
        elif C == 1:
            W = r if w is None else np.asarray(w)[..., None] * r
            S = fs.tdot(W.reshape(R, self.K) if type(W) is np.ndarray else
                        np.reshape(W, (R, self.K)))                        # (K, P)
        else:
            rr = r.reshape(R, self.K)
            S = 0.0
            for ra, rb, A in self._weighted_blocks(fs, R, C, w):
                S = S + rr[ra:rb].T @ A
            S = S.reshape(self.K, C, -1).transpose(1, 0, 2)
        out = fs.layout.means(S.reshape(C * self.K, -1), tuple(cols) + (self.K,))
        out[0].setflags(write=False)   # shared by the components' messages
        for a in out[1]:
            a.setflags(write=False)
        self._stats_cache = (fs, r, w, out)
        return out

    def message_terms(self, i, x, u, w, target):
        """The message to z as gathered tables (families/gathered.py), when the
        component can give its log-likelihoods so (a Categorical of observed labels:
        LDA's words) and no mask weights them; None otherwise."""
        if i != 0 or w is not None or tuple(target) != self.node.plates:
            return None
        return self.component.loglik_terms(x, u[1:], self.node.plates)  # (not z's moments: u[0])

    # ---- posterior predictive (graph/predictive.py) ---------------------------------------
    def component_predictive(self, q, ctx):
        """The predictive of every component (plates: the component parameters' plates,
        the K components last), from the component factor's own hook."""
        return self.component.predictive(q[1:], self.component.plates(), ctx)

    def assignment_loglik(self, comp, values, zplates):
        """log p(observed cells of ``values`` | z = k) per assignment (zplates + (K,)) under
        the component predictives ``comp``: cells that share one z are added, missing
        cells (NaN, or a negative label) contribute nothing. For vector components also
        returns their conditionals given the observed coordinates (else None)."""
        x = np.asarray(values, dtype=float)
        vnd = comp.value_ndim
        if vnd:
            ll, cond = comp.condition(np.expand_dims(x, x.ndim - vnd))
        else:
            obs = np.isfinite(x) & (x >= 0 if comp.discrete else True)
            xe = np.where(obs, x, 0.0)[..., None]
            if comp.discrete:
                xe = xe.astype(np.int64)
            ll = np.where(obs[..., None], comp.logpdf(xe), 0.0)
            cond = None
        plates = ll.shape[:-1]
        zp = (1,) * (len(plates) - len(zplates)) + tuple(zplates)
        axes = tuple(i for i, (a, b) in enumerate(zip(zp, plates)) if a == 1 and b != 1)
        ll = np.sum(ll, axis=axes, keepdims=True) if axes else ll
        return ll.reshape(tuple(zplates) + ll.shape[-1:]), cond

    def predictive(self, q, plates, ctx):
        """sum_k q(z = k) p_k(x): the mixture of the component predictives, weighted by
        each entry's q(z) (one-hot for observed assignments). With ``ctx.values`` (new
        rows, NaN = missing cells) the weights are the assignment probabilities of each
        row given its observed cells, and vector components are conditioned on them."""
        zq = q[0]
        comp = self.component_predictive(q, ctx)
        if zq.kind == "fixed":
            K = self.K
            lab = np.asarray(zq.value).astype(np.intp)
            w = (lab[..., None] == np.arange(K)).astype(float)
        else:
            w = np.asarray(zq.mean, dtype=float)
        if ctx.values is None:
            return MixturePredictive(w, comp, plates)
        ll, cond = self.assignment_loglik(comp, ctx.values, zq.plates)
        with np.errstate(divide="ignore"):
            lw = np.log(w) + ll
        lw = lw - lw.max(axis=-1, keepdims=True)
        r = np.exp(lw)
        r /= r.sum(axis=-1, keepdims=True)
        return MixturePredictive(r, comp if cond is None else cond, plates)
