"""Gaussian factors: Normal and MultivariateNormal children (docs/math.md §3.2).

Parents are either mean-field (a Normal/MVN mean and a Gamma/Wishart precision)
or one joint Normal-Gamma / Normal-Wishart node.
"""
from __future__ import annotations

import math

import numpy as np

from ...predictive import MultivariateT, monte_carlo, normal, student_t
from ..plates import wsum
from ...families.base import einsum
from .base import Conditional

LOG2PI = np.log(2.0 * np.pi)


def _gamma_ab(pd):
    p = pd.params
    return p["shape"], p["rate"]


class NormalFactor(Conditional):
    """x ~ N(mean, 1/precision); slots mean (Normal moments (m, m^2)),
    precision (Gamma moments (log tau, tau))."""

    caches = ("_kept",)

    def _keep(self, key, operands, make):
        """``make()``, kept until one of ``operands`` is another object: the data, and a
        precision's moments between its updates (the scores' step of one PCA sweep reads
        the E[tau] y the loadings' step of the previous sweep built). Moments are replaced,
        never modified, so identity tells; the result is read-only."""
        kept = self.__dict__.setdefault("_kept", {})
        hit = kept.get(key)
        if hit is not None and (hit[0][0] is operands[0] if len(operands) == 1 else
                                all(a is b for a, b in zip(hit[0], operands))):
            return hit[1]
        out = make()
        if isinstance(out, np.ndarray):
            out.flags.writeable = False
        kept[key] = (tuple(operands), out)
        return out

    def prior_natural(self, u):
        (m1, _), (_, t) = u
        return (t * m1, -0.5 * t)

    def expected_log_partition(self, u):
        (_, m2), (lt, t) = u
        return 0.5 * t * m2 - 0.5 * lt + 0.5 * LOG2PI

    def message(self, i, x, u, w, target):
        t = u[1][1]   # the message to the mean does not read the mean's moments (u is lazy:
        x1, x2 = x.moments  # a Dot(W, x) mean is not recomputed for it)
        kw = dict(target_plates=target, full_plates=x.plates)
        if i == 0:
            if w is None and tuple(target) == tuple(x.plates):
                # nothing to sum: the precision at its own (broadcastable) shape, so a
                # Dot(W, x) parent sees one coefficient for all cells (PCA: one sum over d)
                c1 = self._keep(("c1", tuple(target)), (t, x1), lambda: _times(t, x1, kw))
                return (c1, -0.5 * np.asarray(t))
            return (wsum(w, t, x1, **kw), -0.5 * wsum(w, t, **kw))
        sums = _mean_sums(self.parents[0], w, x1, target, x.plates,
                          None if w is not None else self._scaled(x1, x.plates))
        if sums is not None:   # sum w (x - m)^2 = sum w x^2 - 2 sum w x E[m] + sum w E[m^2]
            s1, s2 = sums
            return (0.5 * wsum(w, **kw), -0.5 * (self._data_sum(w, x2, kw) - 2.0 * s1 + s2))
        m1, m2 = u[0]
        d2 = x2 - 2.0 * x1 * m1 + m2
        return (0.5 * wsum(w, **kw), -0.5 * wsum(w, d2, **kw))

    def route(self, i, x, target):
        """The message to slot i for data ``x`` fixed for a fit, without weights
        (inference/compiled.py), resolved once: to the mean at the data's own plates
        (c1 = E[tau] y, kept while E[tau] is the same array; c2 = -E[tau]/2 unbroadcast,
        one number for every cell under one noise precision); to the precision, from a
        mean that sums its moments itself (``Dot`` of two latent vectors: one product
        of the data with a mean, K x K work), the count and sum y^2 computed once."""
        target = tuple(target)
        if x.cells is not None:
            return super().route(i, x, target)
        x1, x2 = x.moments
        if i == 0 and target == tuple(x.plates):
            key, kw = ("c1", target), dict(target_plates=target, full_plates=x.plates)

            def to_mean(u):   # (kept as the generic message keeps it: _scaled reads it)
                t = u[1][1]
                return (self._keep(key, (t, x1), lambda: _times(t, x1, kw)),
                        -0.5 * np.asarray(t))
            return to_mean
        sums = self.parents[0].moment_sums
        if i == 1 and sums is not None:
            kw = dict(target_plates=target, full_plates=x.plates)
            half_n, sx2, plates = 0.5 * wsum(None, **kw), wsum(None, x2, **kw), x.plates

            def to_precision(u):
                got = sums(None, x1, target, plates, scaled=self._scaled(x1, plates))
                if got is None:
                    return self.message(1, x, u, None, target)
                s1, s2 = got   # (arrays: lam0 + the message is one sum, blr.target_from)
                return (np.asarray(half_n), np.asarray(-0.5 * (sx2 - 2.0 * s1 + s2)))
            return to_precision
        return super().route(i, x, target)

    def _scaled(self, x1, plates):
        """(c, c1) of the message to the mean kept for the data x1 (c1 = c x1, c = E[tau]
        one nonzero number): a mean that contracts c1 with its operands' means
        (``Dot``'s plan) then has the first sum of x1 without another product."""
        hit = self.__dict__.get("_kept", {}).get(("c1", tuple(plates)))
        if hit is None or hit[0][1] is not x1 or np.ndim(hit[0][0]) != 0:
            return None
        c = float(hit[0][0])
        return None if c == 0.0 else (c, hit[1])

    def term_rest(self, i, x):
        """The ELBO term minus <message to the mean, (E[m], E[m^2])>:
        -1/2 sum E[tau] y^2 + 1/2 sum E[log tau] - n/2 log 2 pi (+ log h), each sum over
        the entries (unweighted data)."""
        if i != 0 or x.cells is not None or _has_log_h(self.node.family):
            return None
        x2, plates = x.moments[1], x.plates
        kw = dict(target_plates=(), full_plates=plates)
        n, sx2 = float(wsum(None, **kw)), float(wsum(None, x2, **kw))

        def rest(u):
            lt, t = u[1]
            if np.ndim(t) == 0:
                return -0.5 * float(t) * sx2 + 0.5 * n * float(lt) - 0.5 * LOG2PI * n
            return float(-0.5 * wsum(None, t, x2, **kw) + 0.5 * wsum(None, lt, **kw)
                         - 0.5 * LOG2PI * n)
        return rest

    def _data_sum(self, w, x2, kw):
        """sum w x^2 reduced to kw's target; without weights, kept while x is the same."""
        if w is not None:
            return wsum(w, x2, **kw)
        return self._keep(("x2", tuple(kw["target_plates"])), (x2,), lambda: wsum(None, x2, **kw))

    def weighted_loglik(self, x, u, w):
        """sum_n w_n E[log N(x_n | m, 1/tau)]; with a mean that sums its moments over the
        entries itself (``Dot`` of two latent vectors: :func:`_mean_sums`), from those
        sums, without the per-entry E[m], E[m^2]."""
        x1, x2 = x.moments
        lt, t = u[1]
        coef = t if w is None else np.asarray(w, dtype=float) * t
        if w is None and np.ndim(t) == 0:   # one precision: t times the unweighted sums,
            sums = _mean_sums(self.parents[0], None, x1, (), x.plates,   # which are its
                              self._scaled(x1, x.plates))
            sums = None if sums is None else (t * sums[0], t * sums[1])  # next message's
        else:
            sums = _mean_sums(self.parents[0], coef, x1, (), x.plates)
        if sums is None:
            return super().weighted_loglik(x, u, w)
        s1, s2 = sums
        kw = dict(target_plates=(), full_plates=x.plates)
        sx2 = t * self._data_sum(None, x2, kw) if w is None and np.ndim(t) == 0 \
            else wsum(coef, x2, **kw)
        total = s1 - 0.5 * sx2 - 0.5 * s2 + 0.5 * wsum(w, lt, **kw) \
            - 0.5 * LOG2PI * wsum(w, **kw)
        if _has_log_h(self.node.family):
            from ..base import _weighted_sum
            total = total + _weighted_sum(self.log_base_measure(x), w, x.plates)
        return float(total)

    def predictive(self, q, plates, ctx):
        """Gaussian mean (or a linear predictor of a Gaussian q) and a fixed precision:
        N(E m, Var m + 1/tau). Fixed mean, Gamma(a, b) precision: Student-t(2a, m, b/a).
        Both random (mean field): Monte Carlo over q, with the exact mean E m and
        variance Var m + E[1/tau] = Var m + b/(a - 1)."""
        mean, prec = q
        if mean.gaussian and prec.fixed:
            return normal(mean.centred_mean, mean.var + 1.0 / np.asarray(prec.value, dtype=float),
                          plates, shift=mean.shift)
        if mean.fixed and prec.kind == "q":
            a, b = _gamma_ab(prec)
            return student_t(2.0 * a, mean.centred_mean, b / a, plates, shift=mean.shift)
        if mean.gaussian and prec.kind == "q":
            a, b = _gamma_ab(prec)
            with np.errstate(divide="ignore"):
                inv_tau = np.where(a > 1, b / np.where(a > 1, a - 1.0, 1.0), np.inf)
            return monte_carlo(self, q, plates, ctx, mean=np.broadcast_to(mean.mean, plates),
                               var=np.broadcast_to(mean.var + inv_tau, plates))
        return super().predictive(q, plates, ctx)


def _times(t, x1, kw):
    """t x1 at the target plates (``wsum(None, t, x1, **kw)``), by one product when
    nothing is summed (the data times the noise precision: the same numbers)."""
    out = np.multiply(t, x1)
    if type(out) is np.ndarray and out.shape == tuple(kw["target_plates"]) == tuple(kw["full_plates"]):
        return out
    return wsum(None, t, x1, **kw)


def _has_log_h(family):
    """Does the family define a non-constant log h (else log h = 0: nothing to sum)?"""
    from ...families.base import ExponentialFamily
    t = type(family)
    return (t.log_base_measure is not ExponentialFamily.log_base_measure
            or t.expected_log_base_measure is not ExponentialFamily.expected_log_base_measure)


def _mean_sums(mean, w, x1, target, plates, scaled=None):
    """(sum w x1 E[m], sum w E[m^2]) reduced to ``target``, from the mean parent itself
    when it can give them without its per-entry moments (``moment_sums``: a ``Dot`` of
    two latent vectors), else None (then the caller reads the parent's moments).
    ``scaled``: NormalFactor._scaled's (c, c1)."""
    f = mean.moment_sums
    return None if f is None else f(w, x1, target, plates, scaled=scaled)


class NormalGammaFactor(Conditional):
    """x ~ N(mu, 1/tau) with (mu, tau) one Normal-Gamma node;
    its moments are (E[tau mu], E[tau mu^2], E[tau], E[log tau])."""

    def prior_natural(self, u):
        (tm, _, t, _), = u
        return (tm, -0.5 * t)

    def expected_log_partition(self, u):
        (_, tm2, _, lt), = u
        return 0.5 * tm2 - 0.5 * lt + 0.5 * LOG2PI

    def message(self, i, x, u, w, target):
        x1, x2 = x.moments
        kw = dict(target_plates=target, full_plates=x.plates)
        n = wsum(w, **kw)
        return (wsum(w, x1, **kw), -0.5 * n, -0.5 * wsum(w, x2, **kw), 0.5 * n)

    def predictive(self, q, plates, ctx):
        """(mu, tau) ~ NormalGamma(m, beta, a, b): Student-t(2a, m, b (beta + 1) / (a beta))."""
        if q[0].kind != "q":
            return super().predictive(q, plates, ctx)
        p = q[0].centred_params       # location relative to q's shift (docs/dev/numerics.md)
        m, k, a, b = p["mean"], p["beta"], p["shape"], p["rate"]
        return student_t(2.0 * a, m, b * (k + 1.0) / (a * k), plates, shift=q[0].shift)


def _quad(x, L):
    """x^T L x over broadcast plates."""
    return np.einsum("...i,...ij,...j->...", x, L, x, optimize=True)


def _mixture_layout(x, L):
    """Data rows (N, 1, D) against K component matrices (K, D, D): the layout of a
    Gaussian mixture, where a loop over K of BLAS products beats any broadcast."""
    return (np.ndim(x) == 3 and np.shape(x)[1] == 1 and np.ndim(L) == 3) or \
        (np.ndim(x) == 2 and np.ndim(L) == 2)


def _lin_quad(x, eta1, L):
    """x . eta1 - x^T L x / 2 per entry (data x, natural parameters eta1 = E[L mu], L)."""
    if _mixture_layout(x, L) and np.shape(eta1) == np.shape(L)[:-1]:  # one eta1 per matrix
        X = x.reshape(x.shape[0], -1)
        if L.ndim == 2:
            return X @ eta1 - 0.5 * einsum("nd,nd->n", X @ L, X)
        out = X @ eta1.T
        for k in range(L.shape[0]):
            out[:, k] -= 0.5 * einsum("nd,nd->n", X @ L[k], X)
        return out
    return einsum("...i,...i->...", x, eta1) - 0.5 * _quad(x, L)


def _first_moment(x):
    """E[x] of a vector child: the data themselves when observed (so that the
    (entries, D, D) array of x x^T is never built for observed data)."""
    return x.value if x.value is not None else x.moments[0]


def _second_moment_sum(w, x, target):
    """sum_n w_n E[x_n x_n^T] reduced to ``target`` plates."""
    if x.value is not None:
        return _weighted_outer(w, x.value, target, x.plates)
    return wsum(w, x.moments[1], subs=("AB",), out="AB", target_plates=target,
                full_plates=x.plates)


def _weighted_outer(w, x, target, full):
    """sum_n w_n x_n x_n^T reduced to ``target`` plates (mixture layout: one
    weighted Gram matrix per component, computed by BLAS)."""
    if (w is not None and np.ndim(w) == 2 and np.ndim(x) == 3 and np.shape(x)[1] == 1
            and tuple(target) == (np.shape(w)[1],) and np.shape(w)[0] == np.shape(x)[0]):
        X = np.ascontiguousarray(x[:, 0, :])
        wT = np.ascontiguousarray(w.T)
        return np.stack([(X * wT[k, :, None]).T @ X for k in range(w.shape[1])])
    return wsum(w, x, x, subs=("A", "B"), out="AB", target_plates=target, full_plates=full)


class MultivariateNormalFactor(Conditional):
    """x ~ N(mean, inv(precision)); slots mean (MVN moments (m, m m^T)),
    precision (Wishart moments (Lambda, log|Lambda|))."""

    closed_form_elbo = True

    def prior_natural(self, u):
        (m1, _), (L, _) = u
        return (einsum("...ij,...j->...i", L, m1), -0.5 * L)

    def expected_log_partition(self, u):
        (_, m2), (L, ld) = u
        D = L.shape[-1]
        return 0.5 * einsum("...ij,...ij->...", L, m2) - 0.5 * ld + 0.5 * D * LOG2PI

    def expected_loglik(self, x, u):
        if x.value is None:
            return super().expected_loglik(x, u)
        (m1, _), (L, _) = u
        eta1 = einsum("...ij,...j->...i", L, m1)
        return _lin_quad(x.value, eta1, L) - self.expected_log_partition(u)

    def weighted_loglik(self, x, u, w):
        """A latent vector without weights: sum_n <E eta, (E x_n, E x_n x_n^T)> - E[A] as
        two contractions over the entries (the prior's parameters are not broadcast to
        every entry, and no per-entry product of the (entries, D, D) moments is formed)."""
        if x.value is not None or w is not None or x.cells is not None \
                or _has_log_h(self.node.family):
            return super().weighted_loglik(x, u, w)
        from ..deterministic import _second_terms
        kw = dict(target_plates=(), full_plates=x.plates)
        eta1, eta2, elp = self._prior_parts(u, kw)
        if tuple(x.plates) == tuple(self.node.plates):   # the node's own q: E[x x^T] may come
            x1, terms = _second_terms(self.node)          # as Sigma + E[x] E[x]^T (no stack)
        else:
            x1, x2 = x.moments
            terms = [((x2,), ("AB",))]
        return float(wsum(None, eta1, x1, subs=("A", "A"), **kw)
                     + sum(wsum(None, eta2, *a, subs=("AB",) + sa, **kw) for a, sa in terms)
                     - elp)

    caches = ("_prior_memo",)
    _prior_memo = None

    def _prior_parts(self, u, kw):
        """(E eta1, E eta2, sum of E[A] over the entries) at the parents' moments, kept while
        they are the same objects (a prior of constants: once a fit)."""
        u0, u1 = u[0], u[1]
        memo = self._prior_memo
        if memo is not None and memo[0] is u0 and memo[1] is u1 and memo[2] == kw["full_plates"]:
            return memo[3]
        eta1, eta2 = self.prior_natural((u0, u1))
        out = (eta1, eta2, wsum(None, self.expected_log_partition((u0, u1)), **kw))
        self._prior_memo = (u0, u1, kw["full_plates"], out)
        return out

    def message(self, i, x, u, w, target):
        (m1, m2), (L, _) = u
        x1 = _first_moment(x)
        if x.value is None and type(w) is np.ndarray and w.shape == x.plates == tuple(target) \
                and L.shape[:-2] == m1.shape[:-1] == x1.shape[:-1] == w.shape:
            return self._entrywise_message(i, x, x1, m1, m2, L, w)
        kw = dict(target_plates=target, full_plates=x.plates)
        if i == 0:
            return (wsum(w, L, x1, subs=("AB", "B"), out="A", **kw),
                    -0.5 * wsum(w, L, subs=("AB",), out="AB", **kw))
        xx = _second_moment_sum(w, x, target)
        cross = wsum(w, x1, m1, subs=("A", "B"), out="AB", **kw)
        mm = wsum(w, m2, subs=("AB",), out="AB", **kw)
        S = xx - cross - cross.swapaxes(-1, -2) + mm
        return (-0.5 * S, 0.5 * wsum(w, **kw))

    @staticmethod
    def _entrywise_message(i, x, x1, m1, m2, L, w):
        """:meth:`message` when every weighted entry is one entry of the parent (a mixture's
        K pseudo-entries of weighted means, graph/suffstats.py): products, no sums."""
        if i == 0:   # (w L once, by einsum: two broadcast products fewer)
            wL = einsum("...,...ab->...ab", w, L)
            return (einsum("...ab,...b->...a", wL, x1), -0.5 * wL)
        w2 = w[..., None, None]
        cross = x1[..., :, None] * m1[..., None, :]
        S = w2 * (x.moments[1] - cross - cross.swapaxes(-1, -2) + m2)
        return (-0.5 * S, 0.5 * w)

    def predictive(self, q, plates, ctx):
        """Gaussian mean, fixed precision L: N(E m, Cov m + L^-1). Fixed mean, Wishart(nu, W)
        precision: multivariate t with nu - D + 1 degrees of freedom and shape
        W^-1 / (nu - D + 1). Both random: Monte Carlo over q."""
        mean, prec = q
        if mean.gaussian and prec.fixed:
            return MultivariateT(np.inf, mean.centred_mean, mean.cov + np.linalg.inv(prec.value),
                                 plates, shift=mean.shift)
        if mean.fixed and prec.kind == "q":
            p = prec.params
            nu, W = p["dof"], p["scale"]
            D = W.shape[-1]
            df = nu - D + 1.0
            return MultivariateT(df, mean.centred_mean, np.linalg.inv(W) / df[..., None, None],
                                 plates, shift=mean.shift)
        return super().predictive(q, plates, ctx)


class NormalWishartFactor(Conditional):
    """x ~ N(mu, inv(Lambda)) with (mu, Lambda) one Normal-Wishart node; its
    moments are (E[Lambda mu], E[mu^T Lambda mu], E[Lambda], E[log|Lambda|])."""

    def prior_natural(self, u):
        (Lm, _, L, _), = u
        return (Lm, -0.5 * L)

    def expected_log_partition(self, u):
        (_, mLm, L, ld), = u
        D = L.shape[-1]
        return 0.5 * mLm - 0.5 * ld + 0.5 * D * LOG2PI

    def expected_loglik(self, x, u):
        if x.value is None:
            return super().expected_loglik(x, u)
        (Lm, _, L, _), = u
        return _lin_quad(x.value, Lm, L) - self.expected_log_partition(u)

    def message(self, i, x, u, w, target):
        kw = dict(target_plates=target, full_plates=x.plates)
        n = wsum(w, **kw)
        xx = _second_moment_sum(w, x, target)
        return (wsum(w, _first_moment(x), subs=("A",), out="A", **kw), -0.5 * n, -0.5 * xx, 0.5 * n)

    def predictive(self, q, plates, ctx):
        """(mu, L) ~ NormalWishart(m, beta, nu, W): multivariate t with df = nu - D + 1,
        location m and shape W^-1 (1 + beta) / (beta df)."""
        if q[0].kind != "q":
            return super().predictive(q, plates, ctx)
        p = q[0].centred_params       # location relative to q's shift (docs/dev/numerics.md)
        m, beta, nu, W = p["mean"], p["beta"], p["dof"], p["scale"]
        D = m.shape[-1]
        df = nu - D + 1.0
        shape = np.linalg.inv(W) * ((1.0 + beta) / (beta * df))[..., None, None]
        return MultivariateT(df, m, shape, plates, shift=q[0].shift)


class DiagonalGammaFactor(Conditional):
    """x ~ N(mean, diag(tau)^-1) with tau a Gamma node (isotropic or ARD precision).

    The Gamma node's last plate axis lines up with the vector's event axis:
    plates () give one tau for every coordinate (isotropic), plates (D,) one per
    coordinate (ARD), plates (K, 1) / (K, D) one per component."""

    closed_form_elbo = True   # <E eta, T(x)> - E[A] in x's MultivariateNormal family

    def _tau(self, u):
        lt, t = u[1]
        D = np.shape(u[0][0])[-1]
        t, lt = np.asarray(t), np.asarray(lt)
        if t.ndim == 0 or t.shape[-1] == 1:  # one tau for all D coordinates (plates () or (..., 1))
            shape = t.shape[:-1] + (D,) if t.ndim else (D,)
            t, lt = np.broadcast_to(t, shape), np.broadcast_to(lt, shape)
        return lt, t

    def plates(self):
        from ..plates import broadcast_plates
        tp = self.parents[1].plates
        try:
            return broadcast_plates(self.parents[0].plates, tp[:-1] if tp else ())
        except ValueError:
            raise ValueError(f"{self.node.label()}: mean plates {self.parents[0].plates} and the "
                             f"precision's plates {tp} (last axis = coordinates) do not broadcast") from None

    def draw_ndim(self, i, n):
        return n + 1 if i == 1 else n   # tau's last plate axis is the vector's coordinate axis

    def predictive(self, q, plates, ctx):
        """Gaussian mean, fixed precisions tau: N(E m, Cov m + diag(1/tau)); else Monte Carlo."""
        mean, prec = q
        if mean.gaussian and prec.fixed:
            D = np.shape(mean.mean)[-1]
            t = np.asarray(prec.value, dtype=float)
            t = np.broadcast_to(t, t.shape[:-1] + (D,)) if t.ndim else np.full(D, float(t))
            return MultivariateT(np.inf, mean.centred_mean, mean.cov + np.eye(D) / t[..., None, :],
                                 plates, shift=mean.shift)
        return super().predictive(q, plates, ctx)

    def prior_natural(self, u):
        (m1, _), _ = u
        _, t = self._tau(u)
        D = t.shape[-1]
        diag = np.zeros(t.shape + (D,))
        diag.reshape(t.shape[:-1] + (D * D,))[..., ::D + 1] = t   # (its diagonal: a view)
        return (t * m1, -0.5 * diag)

    def expected_log_partition(self, u):
        (_, m2), _ = u
        lt, t = self._tau(u)
        m2 = np.asarray(m2)
        D = m2.shape[-1]
        m2d = m2.diagonal(0, -2, -1)
        return 0.5 * np.add.reduce(t * m2d, -1) - 0.5 * np.add.reduce(lt, -1) + 0.5 * D * LOG2PI

    def _shared_message(self, x, m1, m2, target):
        """The message to one precision per coordinate (ARD: tau with plates (D,)) from the
        node's own q when its entries share one covariance (``shared_sums``: S = sum_n
        E[x_n x_n^T]) and the mean's moments are one vector and one matrix for every
        entry: (n/2, -(diag S - 2 m1 * sum_n E[x_n] + n diag m2) / 2) per coordinate,
        without the (entries, D, D) moments (None otherwise)."""
        node = self.node
        f = getattr(node.family, "shared_sums", None)
        if f is None or node.nat is None or node.point or node._factored is not None or \
                tuple(x.plates) != tuple(node.plates):
            return None
        m1, m2 = np.asarray(m1), np.asarray(m2)
        D = m1.shape[-1]
        if tuple(target) != (D,) or math.prod(m1.shape[:-1]) != 1 or \
                math.prod(m2.shape[:-2]) != 1:
            return None
        sums = f(node.nat)
        if sums is None:
            return None
        V, _, S = sums
        n = V.shape[0]
        d2 = S.diagonal() - 2.0 * m1.reshape(D) * (np.ones(n) @ V) + \
            n * m2.reshape(D, D).diagonal()
        return np.full(D, 0.5 * n), -0.5 * d2

    def message(self, i, x, u, w, target):
        (m1, m2), _ = u
        if i == 1 and w is None and x.value is None:
            got = self._shared_message(x, m1, m2, target)
            if got is not None:
                return got
        _, t = self._tau(u)
        x1 = _first_moment(x)
        if i == 0:
            kw = dict(target_plates=target, full_plates=x.plates)
            diag = wsum(w, t, subs=("A",), out="A", **kw)
            D = diag.shape[-1]
            M = np.zeros(diag.shape + (D,))
            M[..., np.arange(D), np.arange(D)] = diag
            return (wsum(w, t, x1, subs=("A", "A"), out="A", **kw), -0.5 * M)
        # to tau: the coordinate axis is a plate axis of the Gamma node
        xxd = np.asarray(x.moments[1]).diagonal(0, -2, -1) if x.value is None \
            else np.asarray(x.value) ** 2
        d2 = xxd - 2.0 * x1 * m1 + np.asarray(m2).diagonal(0, -2, -1)
        kw = dict(target_plates=target, full_plates=x.plates + (np.shape(d2)[-1],))
        ww = None if w is None else np.asarray(w)[..., None]
        return (0.5 * wsum(ww, **kw), -0.5 * wsum(ww, d2, **kw))
