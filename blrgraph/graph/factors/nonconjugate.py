"""Non-conjugate likelihoods on a Gaussian linear predictor (NCVMP; docs/math.md §4).

``Bernoulli(logits=a)``, ``Poisson(log_rate=a)`` and ``Categorical(logits=a)``
where ``a`` publishes Normal moments (E[a], E[a^2]) per entry: ``bg.Dot(X, w)``
(a linear predictor), a ``Normal`` node, or a constant array.

All three are exponential families in the child with natural parameter a:

    log p(y | a) = <y, a> - A(a) + log h(y)

so only E_q[A(a)] is non-conjugate. With a ~ N(m, v) per entry (the parent's
moments; under mean field the K logits of a Categorical are independent):

    S(m, v) = <y, m> - E[A(a)] + log h(y)              (the ELBO term)
    dS/dm   = y - E[A'(a)],   dS/dv = -1/2 E[A''(a)]    (Bonnet / Price)

and the message to the parent in its T-coordinates (a, a^2) is the mu-gradient
(docs/math.md §4.1)

    (dS/dm - 2 m dS/dv,  dS/dv)

summed over entries with the child's weights (mask x counts) by ``plates.wsum``.
``Dot.backward`` maps it exactly to (X^T c1, X^T diag(c2) X) on w. The message
precision -2 dS/dv = E[A''] >= 0 because A is convex: these factors are
log-concave and never make a Gaussian precision indefinite.

E[A] and its derivatives:

* Bernoulli, A = softplus: Gauss-Hermite quadrature (``GH_BUCKETS``: 24 nodes
  up to v = 1/4, ``GH_NODES`` = 64 up to v = 4, more beyond; vectorised as
  arrays (entries, nodes)); A' = sigmoid, A'' = sigmoid(a) sigmoid(-a), all
  three from one exp per node (:func:`_logistic_parts`).
* Poisson, A = exp: closed form, E[e^a] = e^{m + v/2} (docs/math.md §4.3).
* Categorical, A = log-sum-exp over the last plate axis of the logits: no
  closed form in K dimensions. A fixed cubature rule (:func:`logsumexp_rule`):
  product Gauss-Hermite for small K (K <= 4 with ``CATEGORICAL_SAMPLES`` = 2048
  points), else that many scrambled Sobol points (seeded) turned into standard
  normals -- the same points at every iteration (common random numbers).
  E[A], E[softmax] and 1/2 E[p (1 - p)] are weighted sums over them; the
  estimate is a smooth deterministic function of (m, v), so the damped
  iteration has a fixed point and the ELBO trace is not noisy.

A latent child works too: log p is linear in T(y), so the message to the child
is its natural parameter E[a] (``prior_natural``; for the Categorical
E[a] - E[lse(a)], the same up to a constant).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.special import expit

from ...families.bernoulli import Bernoulli as BernoulliFamily
from ...families.categorical import Categorical as CategoricalFamily
from ...families.normal import Normal as NormalFamily
from ...families.poisson import Poisson as PoissonFamily
from ...predictive import monte_carlo
from ..base import Node
from ..plates import wsum
from .base import Conditional, Slot

GH_NODES = 64
CATEGORICAL_SAMPLES = 2048
CATEGORICAL_SEED = 20240917


@lru_cache(maxsize=8)
def gauss_hermite(n=GH_NODES):
    """Nodes and weights for E_{N(0,1)}[f(z)] ~ sum_i w_i f(z_i)."""
    t, w = np.polynomial.hermite.hermgauss(n)
    return np.sqrt(2.0) * t, w / np.sqrt(np.pi)


GH_BUCKETS = ((0.25, 24), (4.0, GH_NODES), (16.0, 2 * GH_NODES), (np.inf, 4 * GH_NODES))


def normal_expectations(fns, m, v, n=None):
    """E_{N(m, v)}[f(a)] for each f by Gauss-Hermite, vectorised over entries.

    ``fns`` is a tuple of functions, or one function returning a list of arrays (so
    that several integrands can share one exp). The node spacing grows with sqrt(v)
    while sigmoid-type functions vary on a scale of 1, so entries with a larger
    variance get more nodes (``GH_BUCKETS``): 24 up to v = 1/4 (equal to the 64-node
    rule to rounding, ~1e-15), ``GH_NODES`` (64) up to v = 4, twice that up to
    v = 16, four times beyond (hermgauss is unstable past ~300 nodes). Relative
    errors: ~1e-15 at v = 1, ~1e-10 at v = 9, ~1e-7 at v = 25 for E[sigmoid'] (the
    hardest of the three). ``n`` forces one rule."""
    m, v = np.broadcast_arrays(np.asarray(m, dtype=float), np.asarray(v, dtype=float))
    if n is not None:
        z, wt = gauss_hermite(n)
        a = m[..., None] + np.sqrt(v)[..., None] * z
        vals = fns(a) if callable(fns) else [f(a) for f in fns]
        return [f_a @ wt for f_a in vals]
    edges = [e for e, _ in GH_BUCKETS[:-1]]
    bucket = np.digitize(v, edges, right=True)
    lo, hi = (int(bucket.min()), int(bucket.max())) if bucket.size else (0, 0)
    if lo == hi:
        return normal_expectations(fns, m, v, GH_BUCKETS[lo][1])
    out = None
    for b in range(lo, hi + 1):
        sel = bucket == b
        if np.any(sel):
            parts = normal_expectations(fns, m[sel], v[sel], GH_BUCKETS[b][1])
            out = out or [np.empty(m.shape) for _ in parts]
            for o, r in zip(out, parts):
                o[sel] = r
    return out


def moments_to_mv(u):
    """(E[a], E[a^2]) -> (m, v), clipping rounding-level negative variances."""
    m, m2 = u
    m = np.asarray(m, dtype=float)
    return m, np.maximum(np.asarray(m2, dtype=float) - m * m, 0.0)


def _softplus(a):
    return np.logaddexp(0.0, a)


def _sig_prime(a):
    return expit(a) * expit(-a)


def _logistic_grad_parts(a, with_softplus=False):
    """sigmoid(a) and sigmoid'(a) (the message needs no softplus), from one exp: with
    e = exp(-|a|) and r = 1 / (1 + e) = sigmoid(|a|), sigmoid = r or e r and
    sigmoid' = e r^2; ``with_softplus`` puts softplus = max(a, 0) + log1p(e) first
    (all without overflow)."""
    e = np.exp(-np.abs(a))
    r = 1.0 / (1.0 + e)
    er = e * r
    parts = [np.where(a >= 0.0, r, er), er * r]
    return [np.maximum(a, 0.0) + np.log1p(e)] + parts if with_softplus else parts


def _logistic_parts(a):
    """softplus(a), sigmoid(a), sigmoid'(a) from one exp (:func:`_logistic_grad_parts`)."""
    return _logistic_grad_parts(a, with_softplus=True)


class _GaussianLinkFactor(Conditional):
    """y ~ ExpFam(natural parameter a), a a Normal-moment node: log p = y a - A(a) + log h(y)."""

    conjugate = False
    link = "a"

    def _wrap(self, p, slot):
        if isinstance(p, Node) and not isinstance(p.provides, NormalFamily):
            got = p.provides.name if p.provides is not None else "a node"
            raise TypeError(f"{self.node.label()}: {self.link}= is {p.label()} ({got} moments); it "
                            f"must publish Normal moments per entry: a linear predictor bg.Dot(X, w) "
                            f"with w a MultivariateNormal, a Normal node, or an array")
        return Conditional._wrap(self, p, slot)

    def describe(self):
        return f"{type(self.node).__name__}({self.link}={self.parents[0].name})"

    # E[A(a)], E[A'(a)], E[A''(a)] for a ~ N(m, v): subclasses
    def expected_A(self, m, v):
        raise NotImplementedError

    def prior_natural(self, u):
        return (np.asarray(u[0][0], dtype=float),)

    def expected_dA(self, m, v):
        """E[A'(a)], E[A''(a)] (the message's two numbers); subclasses may skip E[A]."""
        return self.expected_A(m, v)[1:]

    def expected_log_partition(self, u):
        m, v = moments_to_mv(u[0])
        return self.expected_A(m, v)[0]

    def predictive(self, q, plates, ctx):
        """Monte Carlo over q of the linear predictor (graph/predictive.py), with the exact
        mean E[A'(a)] (the expectations of the fit) and variance (:meth:`predictive_var`)
        when a is Gaussian under q."""
        if q[0].fixed or not q[0].gaussian:
            return super().predictive(q, plates, ctx)
        m, v = np.asarray(q[0].mean, dtype=float), np.asarray(q[0].var, dtype=float)
        mean = self.expected_A(m, v)[1]
        return monte_carlo(self, q, plates, ctx, mean=np.broadcast_to(mean, plates),
                           var=np.broadcast_to(self.predictive_var(m, v, mean), plates))

    def message(self, i, x, u, w, target):
        m, v = moments_to_mv(u[0])
        dA, d2A = self.expected_dA(m, v)
        y = x.moments[0]
        dS_dm = y - dA
        dS_dv = -0.5 * d2A
        kw = dict(target_plates=target, full_plates=x.plates)
        return (wsum(w, dS_dm - 2.0 * m * dS_dv, **kw), wsum(w, dS_dv, **kw))


class BernoulliLogitFactor(_GaussianLinkFactor):
    """y ~ Bernoulli(sigmoid(a)): A(a) = log(1 + e^a); E[A], E[sigmoid], E[sigmoid'] by
    Gauss-Hermite (docs/math.md §4.2 (i))."""

    link = "logits"

    def expected_A(self, m, v):
        return normal_expectations(_logistic_parts, m, v)

    def expected_dA(self, m, v):
        return normal_expectations(_logistic_grad_parts, m, v)

    def expected_log_partition(self, u):
        m, v = moments_to_mv(u[0])
        return normal_expectations((_softplus,), m, v)[0]

    def predictive_var(self, m, v, mean):
        return mean * (1.0 - mean)


class PoissonLogFactor(_GaussianLinkFactor):
    """y ~ Poisson(e^a): A(a) = e^a, E[e^a] = e^{m + v/2} (docs/math.md §4.3)."""

    link = "log_rate"

    def expected_A(self, m, v):
        r = m + 0.5 * v
        if np.any(r > 700.0):
            raise FloatingPointError(f"{self.node.label()}: E[exp(log_rate)] = exp(m + v/2) overflows "
                                     f"(m + v/2 up to {float(np.max(r)):.4g}); standardise the "
                                     f"covariates or give the weights a stronger prior")
        e = np.exp(r)
        return e, e, e

    def predictive_var(self, m, v, mean):
        """Var[y] = E[rate] + Var[rate] = e^{m+v/2} + (e^v - 1) e^{2m+v}."""
        return mean + np.expm1(v) * mean ** 2


@lru_cache(maxsize=16)
def logsumexp_rule(K):
    """A fixed cubature rule (Z (n, K), weights (n,)) for E over N(0, I_K): the product
    Gauss-Hermite rule with the most nodes per axis that fits ``CATEGORICAL_SAMPLES``
    points when that is >= 5 per axis (K <= 4 with the default budget: error ~1e-6),
    else scrambled Sobol points (seeded) mapped to normals, equal weights. Either
    way the same points are reused at every iteration (common random numbers)."""
    n_axis = int(np.floor(CATEGORICAL_SAMPLES ** (1.0 / K) + 1e-9))
    if n_axis >= 5:
        t, w = gauss_hermite(n_axis)
        grids = np.meshgrid(*([t] * K), indexing="ij")
        wgrid = np.meshgrid(*([w] * K), indexing="ij")
        Z = np.stack([g.ravel() for g in grids], axis=-1)
        W = np.prod(np.stack([g.ravel() for g in wgrid], axis=-1), axis=-1)
        return Z, W
    from scipy.stats import norm, qmc
    u = qmc.Sobol(d=K, scramble=True, seed=CATEGORICAL_SEED).random(CATEGORICAL_SAMPLES)
    return norm.ppf(u), np.full(CATEGORICAL_SAMPLES, 1.0 / CATEGORICAL_SAMPLES)


def expected_logsumexp(m, v, need_grad=True):
    """E[lse(a)] and, if ``need_grad``, E[softmax(a)] and E[p (1 - p)], for
    a ~ N(m, diag(v)) over the last axis, by the fixed rule of :func:`logsumexp_rule`
    (vectorised over the leading axes; one pass per category)."""
    m = np.asarray(m, dtype=float)
    K = m.shape[-1]
    Z, W = logsumexp_rule(K)
    lead = m.shape[:-1]
    mf = m.reshape((-1, K))
    sf = np.sqrt(np.asarray(v, dtype=float)).reshape((-1, K))
    E_lse = np.empty(mf.shape[0])
    E_p = np.empty_like(mf)
    E_pq = np.empty_like(mf)
    chunk = max(1, int(2e6 // (len(W) * K)))
    for s in range(0, mf.shape[0], chunk):
        sl = slice(s, s + chunk)
        a = [mf[sl, k, None] + sf[sl, k, None] * Z[None, :, k] for k in range(K)]  # (c, n) each
        amax = a[0].copy()
        for k in range(1, K):
            np.maximum(amax, a[k], out=amax)
        tot = np.zeros_like(amax)
        for k in range(K):
            a[k] -= amax
            np.exp(a[k], out=a[k])
            tot += a[k]
        E_lse[sl] = (np.log(tot) + amax) @ W
        if need_grad:
            for k in range(K):
                p = a[k] / tot
                E_p[sl, k] = p @ W
                E_pq[sl, k] = (p * (1.0 - p)) @ W
    if not need_grad:
        return E_lse.reshape(lead)
    return E_lse.reshape(lead), E_p.reshape(lead + (K,)), E_pq.reshape(lead + (K,))


class CategoricalLogitFactor(Conditional):
    """y ~ Categorical(softmax(a)) with the K logits on the last plate axis of a
    Normal-moment parent: ``Categorical(logits=bg.Dot(X[:, None, :], W))`` with W a
    MultivariateNormal with plates (K,) gives logits with plates (N, K) and a
    Categorical with plates (N,). Under mean field the K logits of an entry are
    independent Gaussians; E[log-sum-exp] by a fixed cubature rule.

    Softmax is shift-invariant, so K free weight vectors are identified by the prior
    only, and mean-field updates converge slowly along the common shift. Pin a
    reference class instead: zero its design rows, ``bg.Dot(X[:, None, :] *
    (np.arange(K) > 0)[:, None], W)``; its logits are then exactly 0 (docs/ncvmp.md)."""

    conjugate = False
    link = "logits"
    _wrap = _GaussianLinkFactor._wrap
    describe = _GaussianLinkFactor.describe

    def n_categories(self):
        p = self.parents[0]
        K = p.plates[-1] if p.plates else 1
        if K < 2:
            raise ValueError(f"{self.node.label()}: logits= needs the K >= 2 categories on its last "
                             f"plate axis, got plates {p.plates}; e.g. bg.Dot(X[:, None, :], W) with "
                             f"W = MultivariateNormal(..., plates=(K,))")
        return K

    def plates(self):
        self.n_categories()
        return self.parents[0].plates[:-1]

    def _mv(self, u):
        m, v = moments_to_mv(u[0])
        shape = self.parents[0].plates
        return np.broadcast_to(m, shape), np.broadcast_to(v, shape)

    def prior_natural(self, u):
        m, v = self._mv(u)
        return (m - expected_logsumexp(m, v, need_grad=False)[..., None],)

    # posterior predictive (graph/predictive.py): Monte Carlo over q of the logits
    def draw_natural(self, u):
        from scipy.special import logsumexp
        a = np.asarray(u[0][0], dtype=float)
        return (a - logsumexp(a, axis=-1, keepdims=True),)

    def draw_ndim(self, i, n):
        return n + 1        # the K logits are the last plate axis of the parent

    def predictive_plates(self, q):
        return tuple(q[0].plates[:-1])

    def expected_log_partition(self, u):
        return 0.0

    def _onehot(self, x):
        K = self.n_categories()
        if x.value is not None:
            return (np.asarray(x.value)[..., None] == np.arange(K)).astype(float)
        return x.moments[0]

    def expected_loglik(self, x, u):
        m, v = self._mv(u)
        E_lse = expected_logsumexp(m, v, need_grad=False)
        return np.sum(self._onehot(x) * m, -1) - E_lse

    def message(self, i, x, u, w, target):
        m, v = self._mv(u)
        _, E_p, E_pq = expected_logsumexp(m, v)
        dS_dm = self._onehot(x) - E_p
        dS_dv = -0.5 * E_pq
        ww = None if w is None else np.asarray(w, dtype=float)[..., None]
        kw = dict(target_plates=target, full_plates=tuple(x.plates) + (m.shape[-1],))
        return (wsum(ww, dS_dm - 2.0 * m * dS_dv, **kw), wsum(ww, dS_dv, **kw))


# ---- the _spec hooks used by nodes.py ------------------------------------------------
def _slot():
    return Slot("logits", NormalFamily(), kind="real")


def bernoulli_logit_spec(logits, name):
    """Bernoulli(logits=a): (family, factor class, parents, slots, fixed)."""
    return BernoulliFamily(), BernoulliLogitFactor, [logits], [_slot()], {}


def poisson_log_link_spec(log_rate, name):
    """Poisson(log_rate=a): (family, factor class, parents, slots, fixed)."""
    return PoissonFamily(), PoissonLogFactor, [log_rate], [Slot("log_rate", NormalFamily())], {}


def categorical_logit_spec(logits, name):
    """Categorical(logits=a), categories on a's last plate axis."""
    if not isinstance(logits, Node):
        arr = np.asarray(logits, dtype=float)
        if arr.ndim < 1 or arr.shape[-1] < 2:
            raise ValueError(f"Categorical '{name}': logits= must have the K >= 2 categories on its "
                             f"last axis, got shape {arr.shape}")
    return CategoricalFamily(), CategoricalLogitFactor, [logits], [_slot()], {}


__all__ = ["BernoulliLogitFactor", "PoissonLogFactor", "CategoricalLogitFactor",
           "bernoulli_logit_spec", "poisson_log_link_spec", "categorical_logit_spec",
           "gauss_hermite", "normal_expectations", "expected_logsumexp", "logsumexp_rule", "GH_NODES",
           "CATEGORICAL_SAMPLES"]
