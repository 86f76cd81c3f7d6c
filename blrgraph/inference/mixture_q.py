"""fit("mog", components=K): q a mixture of K Gaussians for the Gaussian nodes fed by
non-conjugate factors (Lin, Khan & Schmidt 2019, "Fast and simple natural-gradient
variational inference with mixture of exponential-family approximations", ICML; Khan
& Rue 2023, §3.2 and §5; docs/blr.md "Mixture posteriors").

q(w) = sum_k pi_k N(w | m_k, P_k^-1) over the node's value w (plates and event flattened
to d numbers, a full d x d precision per component). With f(w) = log p(D, w) - log q(w),
the natural gradient of the joint q(w, z) (a conditional exponential family) gives the
step of Lin et al. (2019, eq. 10):

    P_k <- P_k - rho E_{q_k}[hess f]
    m_k <- m_k + rho P_k^-1 E_{q_k}[grad f]        (the new P_k)
    log pi_k <- log pi_k + rho E_{q_k}[f]          (then normalised)

Near component k, -hess log q ~ P_k, so the first line is the BLR step
P_k <- (1 - rho) P_k + rho E_{q_k}[-hess log p] with the responsibilities
r_j(w) = pi_j q_j(w) / q(w) shared out: each component takes the BLR step weighted by
its responsibilities, the weights take theirs. Its delta-method limit (components of
vanishing spread) is multimodal optimisation, K Newton runs.

Expectations under q_k: w_ks = m_k + C_k z_s with C_k C_k^T = P_k^-1 and the same S
standard draws z (antithetic, whitened: :func:`~blrgraph.graph.potential.standard_draws`)
for every component and step (common random numbers: the iteration is a deterministic
map with a fixed point). E[hess f] by Stein's lemma from gradients alone,
E[grad f (w - m_k)^T] P_k (symmetrised): exact for a quadratic f. The gradients of the
Potential children come from one reverse pass over all K S draws.

The node's own q is set to the mixture's moment-matched Gaussian (its mean and
covariance, per plate entry), so ``node.posterior.mean`` / ``.var`` / ``.cov`` are the
mixture's; ``node.posterior`` is a :class:`MixturePosterior` with ``weights``, ``means``,
``covs``. The ELBO (``FitResult.elbo``) is E_q[log p(D, w) - log q(w)] over the same draws.
"""
from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from .optimizers import Optimizer

#: the largest flattened node (d numbers) a full-covariance mixture is built for
MAX_DIM = 400
_LOG2PI = np.log(2.0 * np.pi)


def mixture_of(node):
    """The node's fitted :class:`MixtureQ`, or None (none, or q changed since)."""
    q = getattr(node, "q_mixture", None)
    return q if q is not None and q.nat is node.nat else None


class MixtureQ:
    """A mixture of K Gaussians over a node's flattened value (log-weights a (K,),
    means m (K, d), precisions P (K, d, d)), kept with the node's q."""

    def __init__(self, node, a, m, P):
        self.node, self.a, self.m, self.P = node, a, m, P
        self.shape = _value_shape(node)
        self.cov = np.linalg.inv(P)
        self.C = np.linalg.cholesky(self.cov)
        self.nat = None
        self.elbo_value = None
        self.z = None

    @property
    def weights(self):
        return np.exp(self.a)

    def moments(self):
        """(mean (d,), covariance (d, d)) of the mixture."""
        pi = self.weights
        mean = pi @ self.m
        second = np.einsum("k,kij->ij", pi, self.cov + self.m[:, :, None] * self.m[:, None, :])
        return mean, second - np.outer(mean, mean)

    def logpdf(self, W):
        """log q(w), responsibilities (n, K) and grad log q (n, d) at the rows of W (n, d)."""
        diff = W[:, None, :] - self.m[None]                          # (n, K, d)
        Pd = np.einsum("kij,nkj->nki", self.P, diff)
        logdet = np.linalg.slogdet(self.P)[1]
        comp = self.a + 0.5 * logdet - 0.5 * W.shape[1] * _LOG2PI \
            - 0.5 * np.einsum("nki,nki->nk", diff, Pd)
        lq = logsumexp(comp, axis=1)
        r = np.exp(comp - lq[:, None])
        return lq, r, -np.einsum("nk,nki->ni", r, Pd)

    def draws(self, z):
        """(K, S, d): w_ks = m_k + C_k z_s."""
        return self.m[:, None, :] + np.einsum("kij,sj->ksi", self.C, z)

    def publish(self):
        """Set the node's q to the mixture's moment-matched Gaussian; remember it."""
        mean, cov = self.moments()
        node, shape = self.node, self.shape
        if np.ndim(node.nat[1]) > np.ndim(node.nat[0]):   # MultivariateNormal: per plate entry
            D = shape[-1]
            n = mean.size // D
            blocks = np.stack([cov[i * D:(i + 1) * D, i * D:(i + 1) * D] for i in range(n)])
            prec = np.linalg.inv(blocks).reshape(shape + (D,))
            mu = mean.reshape(shape)
            node.set_natural((np.einsum("...ij,...j->...i", prec, mu), -0.5 * prec))
        else:
            var = np.diag(cov).reshape(shape)
            node.set_natural((mean.reshape(shape) / var, -0.5 / var))
        self.nat = node.nat
        node.q_mixture = self

    def posterior(self):
        return MixturePosterior(self)


def _value_shape(node):
    return tuple(np.shape(node.nat[0]))


class MixturePosterior:
    """The fitted q of a node fitted by ``fit("mog")``: a mixture of K Gaussians.

    ``weights`` (K,), ``means`` (K,) + shape, ``covs`` (K,) + shape + shape (shape: the
    node's plates + event); ``mean``, ``var`` (and ``cov`` for a vector node) are the
    mixture's; ``logpdf(x)``, ``sample(size, seed)``."""

    is_point = False

    def __init__(self, q):
        self.q, self.node = q, q.node
        shape = q.shape
        self.weights = q.weights
        self.means = q.m.reshape((-1,) + shape)
        self.covs = q.cov.reshape((-1,) + shape + shape)
        self._mean, self._cov = q.moments()
        #: the fixed standard draws z (S, d) of the expectations, w_ks = m_k + C_k z_s
        self.standard_draws = q.z

    @property
    def mean(self):
        return self._mean.reshape(self.q.shape)

    @property
    def var(self):
        return np.diag(self._cov).reshape(self.q.shape)

    @property
    def cov(self):
        shape = self.q.shape
        if np.ndim(self.node.nat[1]) == np.ndim(self.node.nat[0]):
            raise AttributeError(f"{self.node.label()}: posterior.cov exists for vector nodes "
                                 f"only; posterior.covs holds the components' joint covariances")
        D = shape[-1]
        n = self._cov.shape[0] // D
        return np.stack([self._cov[i * D:(i + 1) * D, i * D:(i + 1) * D]
                         for i in range(n)]).reshape(shape + (D,))

    def logpdf(self, x):
        """log q(x) for x of shape (n,) + shape or shape."""
        shape = self.q.shape
        x = np.asarray(x, dtype=float)
        one = x.shape == shape
        lq = self.q.logpdf(x.reshape((-1, int(np.prod(shape, dtype=int)))))[0]
        return float(lq[0]) if one else lq

    def sample(self, size=None, seed=None):
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        n = 1 if size is None else int(size)
        k = rng.choice(len(self.weights), size=n, p=self.weights)
        z = rng.standard_normal((n, self.q.m.shape[1]))
        w = self.q.m[k] + np.einsum("nij,nj->ni", self.q.C[k], z)
        w = w.reshape((n,) + self.q.shape)
        return w[0] if size is None else w

    def to_scipy(self):
        raise TypeError(f"{self.node.label()}: q is a mixture of {len(self.weights)} Gaussians "
                        f"(fit('mog')); scipy has no frozen mixture: use posterior.weights/"
                        f".means/.covs, .logpdf or .sample")

    def __repr__(self):
        return (f"<Posterior of {self.node.label()}: mixture of {len(self.weights)} Gaussians, "
                f"plates={self.node.plates}>")


# ---- the step -------------------------------------------------------------------------------
class MixtureGaussian(Optimizer):
    """The Lin-Khan-Schmidt step of a mixture q (module docstring); ``hyper``:
    ``components`` K and ``mc_samples`` S (draws per component)."""

    sampled = True
    checks_q = False     # the loop checks the published moments

    def __init__(self, method, node, hyper, N, rng):
        super().__init__(method, node, hyper, N, rng)
        self.potentials = _check_node(method.name, node)
        self.K = int(self.hyper["components"])
        self.q = None
        self._eval = None      # (q, its evaluation at the draws), reused by the next step

    def start(self):
        """K components around q's start: means m + C z_k (z_k standard normal draws),
        q's precision, equal weights; the fixed standard draws."""
        m, P = _full(self.node.nat)
        d = m.size
        if d > MAX_DIM:
            raise ValueError(f"fit({self.name!r}): {self.node.label()} has {d} numbers; a "
                             f"full-covariance mixture is built for at most {MAX_DIM}; use "
                             f"fit('ivon') or fit('vogn') for a large node")
        C = np.linalg.cholesky(np.linalg.inv(P))
        from ..graph.potential import standard_draws
        self.z = standard_draws(int(self.hyper["mc_samples"]), d,
                                int(self.rng.integers(2 ** 31)))
        means = m + self.rng.standard_normal((self.K, d)) @ C.T
        self.q = MixtureQ(self.node, np.full(self.K, -np.log(self.K)), means,
                          np.broadcast_to(P, (self.K, d, d)).copy())
        self.prior_full = _prior(self.node)

    def evaluate(self, model, q, iteration=None):
        """At the draws of every component: F (K,) = E_qk[f], G (K, d) = E_qk[grad f],
        H (K, d, d) = Stein's E_qk[hess f], and the ELBO sum_k pi_k F_k."""
        if self._eval is not None and self._eval[0] is q:
            return self._eval[1]
        K, S, d = q.m.shape[0], self.z.shape[0], q.m.shape[1]
        W = q.draws(self.z).reshape(K * S, d)
        lp, glp = self.log_joint(W, iteration)
        lq, _, glq = q.logpdf(W)
        f = (lp - lq).reshape(K, S)
        g = (glp - glq).reshape(K, S, d)
        F, G = f.mean(1), g.mean(1)
        H = np.einsum("ksi,ksj->kij", g, W.reshape(K, S, d) - q.m[:, None, :]) / S
        H = np.einsum("kij,kjl->kil", H, q.P)
        H = 0.5 * (H + np.swapaxes(H, 1, 2))
        out = (F, G, H, float(q.weights @ F))
        self._check(np.concatenate([F, G.ravel(), H.ravel()]), iteration, "gradient")
        self._eval = (q, out)
        return out

    def log_joint(self, W, iteration):
        """log p(D, w) and its gradient at the rows of W (n, d): the prior (exact) plus
        every Potential child (one reverse pass over all rows of W)."""
        from .optimizers import potential_grad
        mu0, P0, logdet0 = self.prior_full
        diff = W - mu0
        Pd = diff @ P0
        lp = 0.5 * logdet0 - 0.5 * W.shape[1] * _LOG2PI - 0.5 * np.einsum("ni,ni->n", diff, Pd)
        g = -Pd
        x = W.reshape((W.shape[0],) + self.q.shape)
        for c in self.potentials:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                v, gc = potential_grad(c.factor, 0, x)
            lp = lp + v
            g = g + gc.reshape(W.shape)
        return lp, g

    def step(self, model, node, rho, iteration, scale):
        self.saved = node.nat
        if self.q is None:
            self.start()
        q = self.q
        F, G, H, _ = self.evaluate(model, q, iteration)
        P, m = np.empty_like(q.P), np.empty_like(q.m)
        for k in range(q.m.shape[0]):
            P[k], r = _pd_step(q.P[k], H[k], rho, node, iteration)
            m[k] = q.m[k] + r * np.linalg.solve(P[k], G[k])
        a = q.a + rho * F
        self._check(np.concatenate([m.ravel(), a]), iteration, "step")
        self.q = new = MixtureQ(node, a - logsumexp(a), m, P)
        new.z = self.z
        new.publish()
        new.elbo_value = lambda: self.evaluate(model, new)[3]
        return node.nat


def _pd_step(P, H, rho, node, iteration):
    """P - r H with r = rho halved until it is positive definite (the BLR's safeguard)."""
    r = rho
    for _ in range(30):
        new = P - r * H
        try:
            np.linalg.cholesky(new)
            return new, r
        except np.linalg.LinAlgError:
            r *= 0.5
    raise FloatingPointError(f"fit('mog'): the precision of a component of {node.label()} at "
                             f"iteration {iteration} is not positive definite even with rho "
                             f"halved 30 times; lower rho or give a stronger prior")


def _full(nat):
    """(mean (d,), full precision (d, d)) of a Normal / MultivariateNormal q."""
    e1, e2 = (np.asarray(a, dtype=float) for a in nat)
    if np.ndim(e2) > np.ndim(e1):
        D = e1.shape[-1]
        blocks = np.broadcast_to(-2.0 * e2, e1.shape + (D,)).reshape(-1, D, D)
        n = blocks.shape[0]
        P = np.zeros((n * D, n * D))
        for i in range(n):
            P[i * D:(i + 1) * D, i * D:(i + 1) * D] = blocks[i]
        return np.linalg.solve(P, e1.ravel()), P
    prec = (-2.0 * np.broadcast_to(e2, e1.shape)).ravel()
    return e1.ravel() / prec, np.diag(prec)


def _prior(node):
    mu0, P0 = _full(tuple(np.broadcast_to(a, np.shape(b)) if np.ndim(a) < np.ndim(b) else a
                          for a, b in zip(node.prior_natural(), node.nat)))
    return mu0, P0, np.linalg.slogdet(P0)[1]


def _check_node(name, node):
    """The node's children must be Potentials over it alone, and its prior fixed."""
    from ..graph.node import Constant
    from ..graph.potential import Potential
    for p in node.parents:
        if not isinstance(p, Constant):
            raise ValueError(f"fit({name!r}): {node.label()} has the latent parent {p.label()}; "
                             f"the mixture q is built for a node with a fixed prior (constants "
                             f"as parameters)")
    out = []
    for c in node.children:
        if not isinstance(c, Potential) or len(c.factor.parents) != 1:
            raise ValueError(f"fit({name!r}) needs the log-factors of {node.label()} as "
                             f"bg.Potential(logp, {node.name}, ...) over it alone; "
                             f"{c.label()} is not one. Write it as a Potential, or use "
                             f"fit('ncvmp')")
        out.append(c)
    return out


def model_elbo(model):
    """(the mixture nodes' ELBO terms, the nodes they cover) for :func:`~.elbo.elbo`."""
    total, covered = 0.0, set()
    for n in model.latent:
        q = mixture_of(n)
        if q is None or q.elbo_value is None:
            continue
        total += q.elbo_value()
        covered |= {n, *n.children}
    return total, covered
