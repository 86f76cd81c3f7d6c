"""Tests of the conjugate oracles in blrgraph.closed_form.

Every oracle is checked by routes that do not reuse its formula:

* the Bayes identity at arbitrary points theta,
      log p(D) = log p(D | theta) + log p(theta) - log p(theta | D),
  with every density taken from scipy.stats.  Checking it at several points
  checks the posterior (its shape must match prior x likelihood) and the
  evidence at once;
* the chain rule, log p(D) = sum_i log p(x_i | x_<i), with scipy predictive
  distributions (beta-binomial, negative binomial, Lomax, Student-t,
  multivariate t, Gaussian) and a one-observation update written here;
* the Gaussian marginal of the stacked data, and 1-D quadrature;
* agreement between models that coincide (D = 1 Wishart = Gamma, K = 2
  Dirichlet = Beta, ...);
* splitting the data: updating on D1 and then on D2 = updating on D1 u D2.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from blrgraph import closed_form as cf

RTOL = 1e-9      # exact routes
QUAD_RTOL = 1e-8  # numerical quadrature


def close(actual, expected, rtol=RTOL):
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol)


def rng_for(seed):
    return np.random.default_rng(seed)


def random_spd(rng, D, scale=1.0):
    A = rng.normal(size=(D, D))
    return scale * (A @ A.T / D + 0.5 * np.eye(D))


def log_quad(logf, lo, hi, center):
    """log of the integral of exp(logf) over (lo, hi), split at ``center``."""
    c = logf(center)
    total = 0.0
    for a, b in ((lo, center), (center, hi)):
        val, _ = integrate.quad(lambda t: np.exp(logf(t) - c), a, b,
                                epsabs=0.0, epsrel=1e-12, limit=200)
        total += val
    return c + np.log(total)


def bayes_identity(loglik, logprior, logpost, thetas):
    """log p(D) from the Bayes identity at each theta; all values must agree."""
    return np.array([loglik(t) + logprior(t) - logpost(t) for t in thetas])


# ---------------------------------------------------------------------------
# result object
# ---------------------------------------------------------------------------
PARAM_NAMES = {
    "Beta": {"a", "b"},
    "Gamma": {"shape", "rate"},
    "Dirichlet": {"alpha"},
    "Normal": {"mean", "precision"},
    "MultivariateNormal": {"mean", "precision"},
    "Wishart": {"dof", "scale"},
    "NormalGamma": {"mean", "beta", "shape", "rate"},
    "NormalWishart": {"mean", "beta", "dof", "scale"},
}


def _all_results():
    r = rng_for(0)
    X = r.normal(size=(5, 2))
    S = random_spd(r, 2)
    return [
        cf.beta_bernoulli([0, 1, 1], 2.0, 3.0),
        cf.beta_binomial([2, 3], 5, 2.0, 3.0),
        cf.gamma_poisson([1, 4], 2.0, 1.0),
        cf.gamma_exponential([0.5, 1.5], 2.0, 1.0),
        cf.dirichlet_categorical([0, 2, 2], [1.0, 2.0, 3.0]),
        cf.dirichlet_multinomial([[1, 0, 2]], [1.0, 2.0, 3.0]),
        cf.normal_known_precision([0.1, 0.3], 0.0, 1.0, 2.0),
        cf.gamma_known_mean([0.1, 0.3], 0.0, 2.0, 1.0),
        cf.normal_gamma([0.1, 0.3], 0.0, 1.0, 2.0, 1.0),
        cf.mvn_known_precision(X, np.zeros(2), S, S),
        cf.wishart_known_mean(X, np.zeros(2), 3.0, S),
        cf.normal_wishart(X, np.zeros(2), 1.0, 3.0, S),
        cf.linreg_known_precision(X, X[:, 0], np.zeros(2), S, 2.0),
    ]


def test_result_structure():
    results = _all_results()
    assert {r.family for r in results} == set(PARAM_NAMES)
    for res in results:
        assert isinstance(res, cf.ConjugateResult)
        assert set(res.params) == PARAM_NAMES[res.family]
        assert isinstance(res.log_evidence, float)
        for v in res.params.values():
            if isinstance(v, np.ndarray):
                assert not v.flags.writeable
                assert np.all(np.isfinite(v))
            else:
                assert isinstance(v, float)
        with pytest.raises(dataclasses.FrozenInstanceError):
            res.log_evidence = 0.0
        repr(res)


# ---------------------------------------------------------------------------
# Beta-Bernoulli / Beta-Binomial
# ---------------------------------------------------------------------------
def test_beta_bernoulli_chain_quad_and_identity():
    r = rng_for(1)
    x = (r.random(25) < 0.3).astype(int)
    a, b = 1.7, 2.4
    res = cf.beta_bernoulli(x, a, b)
    s = x.sum()
    close(res.params["a"], a + s)
    close(res.params["b"], b + len(x) - s)

    # chain rule with the predictive P(x=1) = a'/(a'+b')
    ap, bp, chain = a, b, 0.0
    for xi in x:
        p1 = ap / (ap + bp)
        chain += np.log(p1 if xi else 1 - p1)
        ap, bp = ap + xi, bp + 1 - xi
    close(res.log_evidence, chain)

    def logf(p):
        return stats.bernoulli.logpmf(x, p).sum() + stats.beta.logpdf(p, a, b)
    close(res.log_evidence, log_quad(logf, 0.0, 1.0, (a + s) / (a + b + len(x))), QUAD_RTOL)

    post = stats.beta(res.params["a"], res.params["b"])
    vals = bayes_identity(lambda p: stats.bernoulli.logpmf(x, p).sum(),
                          lambda p: stats.beta.logpdf(p, a, b), post.logpdf,
                          [0.05, 0.3, 0.77])
    close(vals, np.full(3, res.log_evidence))


def test_beta_binomial_matches_scipy_betabinom_chain():
    r = rng_for(2)
    n = r.integers(0, 12, size=10)
    x = r.binomial(n, 0.6)
    a, b = 0.8, 3.1
    res = cf.beta_binomial(x, n, a, b)
    ap, bp, chain = a, b, 0.0
    for xi, ni in zip(x, n):
        chain += stats.betabinom(ni, ap, bp).logpmf(xi)
        ap, bp = ap + xi, bp + ni - xi
    close(res.log_evidence, chain)
    close([res.params["a"], res.params["b"]], [ap, bp])

    vals = bayes_identity(lambda p: stats.binom.logpmf(x, n, p).sum(),
                          lambda p: stats.beta.logpdf(p, a, b),
                          stats.beta(ap, bp).logpdf, [0.2, 0.55, 0.9])
    close(vals, np.full(3, res.log_evidence))


def test_beta_binomial_single_and_scalar_n():
    res = cf.beta_binomial(7, 20, 2.5, 1.5)
    close(res.log_evidence, stats.betabinom(20, 2.5, 1.5).logpmf(7))
    res2 = cf.beta_binomial([1, 4, 0], 4, 2.5, 1.5)
    res3 = cf.beta_binomial([1, 4, 0], [4, 4, 4], 2.5, 1.5)
    close(res2.log_evidence, res3.log_evidence)
    # n = 1 is Bernoulli
    x = [1, 0, 0, 1, 1]
    close(cf.beta_binomial(x, 1, 2.0, 3.0).log_evidence,
          cf.beta_bernoulli(x, 2.0, 3.0).log_evidence)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=8),
       st.floats(0.05, 20.0), st.floats(0.05, 20.0))
def test_beta_binomial_property_chain(pairs, a, b):
    n = np.array([max(p) for p in pairs])
    x = np.array([min(p) for p in pairs])
    res = cf.beta_binomial(x, n, a, b)
    ap, bp, chain = a, b, 0.0
    for xi, ni in zip(x, n):
        chain += stats.betabinom(ni, ap, bp).logpmf(xi)
        ap, bp = ap + xi, bp + ni - xi
    close(res.log_evidence, chain)


# ---------------------------------------------------------------------------
# Gamma-Poisson / Gamma-Exponential
# ---------------------------------------------------------------------------
def test_gamma_poisson_nbinom_chain_quad_identity():
    r = rng_for(3)
    x = r.poisson(3.5, size=15)
    a, b = 2.2, 0.7
    res = cf.gamma_poisson(x, a, b)
    close([res.params["shape"], res.params["rate"]], [a + x.sum(), b + len(x)])

    ap, bp, chain = a, b, 0.0
    for xi in x:
        chain += stats.nbinom(ap, bp / (bp + 1)).logpmf(xi)
        ap, bp = ap + xi, bp + 1
    close(res.log_evidence, chain)

    def logf(lam):
        return stats.poisson.logpmf(x, lam).sum() + stats.gamma.logpdf(lam, a, scale=1 / b)
    center = (a + x.sum() - 1) / (b + len(x))
    close(res.log_evidence, log_quad(logf, 0.0, np.inf, center), QUAD_RTOL)

    post = stats.gamma(res.params["shape"], scale=1 / res.params["rate"])
    vals = bayes_identity(lambda t: stats.poisson.logpmf(x, t).sum(),
                          lambda t: stats.gamma.logpdf(t, a, scale=1 / b),
                          post.logpdf, [0.5, 3.0, 7.0])
    close(vals, np.full(3, res.log_evidence))


def test_gamma_exponential_lomax_chain_quad_identity():
    r = rng_for(4)
    x = r.exponential(0.5, size=12)
    a, b = 1.5, 2.0
    res = cf.gamma_exponential(x, a, b)
    close([res.params["shape"], res.params["rate"]], [a + len(x), b + x.sum()])

    ap, bp, chain = a, b, 0.0
    for xi in x:
        chain += stats.lomax(ap, scale=bp).logpdf(xi)
        ap, bp = ap + 1, bp + xi
    close(res.log_evidence, chain)

    def logf(lam):
        return stats.expon.logpdf(x, scale=1 / lam).sum() + stats.gamma.logpdf(lam, a, scale=1 / b)
    center = (a + len(x) - 1) / (b + x.sum())
    close(res.log_evidence, log_quad(logf, 0.0, np.inf, center), QUAD_RTOL)

    post = stats.gamma(res.params["shape"], scale=1 / res.params["rate"])
    vals = bayes_identity(lambda t: stats.expon.logpdf(x, scale=1 / t).sum(),
                          lambda t: stats.gamma.logpdf(t, a, scale=1 / b),
                          post.logpdf, [0.3, 2.0, 4.5])
    close(vals, np.full(3, res.log_evidence))


# ---------------------------------------------------------------------------
# Dirichlet-Categorical / Dirichlet-Multinomial
# ---------------------------------------------------------------------------
def test_dirichlet_categorical_chain_and_identity():
    r = rng_for(5)
    alpha = np.array([0.5, 1.2, 3.0, 2.0])
    x = r.choice(4, size=30, p=[0.1, 0.2, 0.3, 0.4])
    res = cf.dirichlet_categorical(x, alpha)
    counts = np.zeros(4)
    chain = 0.0
    for xi in x:
        chain += np.log((alpha[xi] + counts[xi]) / (alpha.sum() + counts.sum()))
        counts[xi] += 1
    close(res.log_evidence, chain)
    close(res.params["alpha"], alpha + counts)

    post = stats.dirichlet(res.params["alpha"])
    thetas = list(r.dirichlet(alpha + 1, size=3))
    vals = bayes_identity(lambda p: np.log(p[x]).sum(),
                          lambda p: stats.dirichlet.logpdf(p, alpha),
                          post.logpdf, thetas)
    close(vals, np.full(3, res.log_evidence))


def test_dirichlet_multinomial_scipy_chain_and_identity():
    r = rng_for(6)
    alpha = np.array([2.0, 0.7, 1.3])
    n = r.integers(0, 9, size=6)
    counts = np.array([r.multinomial(ni, [0.5, 0.2, 0.3]) for ni in n])
    res = cf.dirichlet_multinomial(counts, alpha)
    ap, chain = alpha.copy(), 0.0
    for c in counts:
        chain += stats.dirichlet_multinomial(ap, c.sum()).logpmf(c)
        ap = ap + c
    close(res.log_evidence, chain)
    close(res.params["alpha"], ap)

    post = stats.dirichlet(res.params["alpha"])
    thetas = list(r.dirichlet(alpha + 1, size=3))
    vals = bayes_identity(lambda p: sum(stats.multinomial.logpmf(c, c.sum(), p) for c in counts),
                          lambda p: stats.dirichlet.logpdf(p, alpha), post.logpdf, thetas)
    close(vals, np.full(3, res.log_evidence))
    # a single 1-D count vector is one observation
    close(cf.dirichlet_multinomial(counts[0], alpha).log_evidence,
          stats.dirichlet_multinomial(alpha, counts[0].sum()).logpmf(counts[0]))


def test_dirichlet_agrees_with_beta_and_categorical():
    x = np.array([1, 0, 1, 1, 0, 1, 1])
    a, b = 1.3, 0.6
    rb = cf.beta_bernoulli(x, a, b)
    rd = cf.dirichlet_categorical(x, [b, a])   # label 1 <-> success
    close(rd.log_evidence, rb.log_evidence)
    close(rd.params["alpha"], [rb.params["b"], rb.params["a"]])
    onehot = np.eye(2, dtype=int)[x]
    rm = cf.dirichlet_multinomial(onehot, [b, a])
    close(rm.log_evidence, rb.log_evidence)


# ---------------------------------------------------------------------------
# univariate Gaussian models
# ---------------------------------------------------------------------------
def test_normal_known_precision_marginal_chain_identity():
    r = rng_for(7)
    x = r.normal(1.3, 0.8, size=9)
    m0, p0, p = -0.4, 0.6, 1.0 / 0.8 ** 2
    res = cf.normal_known_precision(x, m0, p0, p)
    N = len(x)
    cov = np.eye(N) / p + np.ones((N, N)) / p0
    close(res.log_evidence, stats.multivariate_normal(np.full(N, m0), cov).logpdf(x))

    mp, pp, chain = m0, p0, 0.0
    for xi in x:
        chain += stats.norm.logpdf(xi, mp, np.sqrt(1 / pp + 1 / p))
        mp, pp = (pp * mp + p * xi) / (pp + p), pp + p
    close(res.log_evidence, chain)
    close([res.params["mean"], res.params["precision"]], [mp, pp])

    post = stats.norm(res.params["mean"], 1 / np.sqrt(res.params["precision"]))
    vals = bayes_identity(lambda t: stats.norm.logpdf(x, t, 1 / np.sqrt(p)).sum(),
                          lambda t: stats.norm.logpdf(t, m0, 1 / np.sqrt(p0)),
                          post.logpdf, [-1.0, 0.5, 2.0])
    close(vals, np.full(3, res.log_evidence))


def test_gamma_known_mean_quad_chain_identity():
    r = rng_for(8)
    mu = 0.7
    x = r.normal(mu, 1.5, size=11)
    a, b = 2.5, 1.2
    res = cf.gamma_known_mean(x, mu, a, b)
    close([res.params["shape"], res.params["rate"]],
          [a + len(x) / 2, b + 0.5 * np.sum((x - mu) ** 2)])

    def loglik(tau):
        return stats.norm.logpdf(x, mu, 1 / np.sqrt(tau)).sum()

    def logprior(tau):
        return stats.gamma.logpdf(tau, a, scale=1 / b)
    center = (res.params["shape"] - 1) / res.params["rate"]
    close(res.log_evidence, log_quad(lambda t: loglik(t) + logprior(t), 0.0, np.inf, center),
          QUAD_RTOL)

    ap, bp, chain = a, b, 0.0
    for xi in x:
        chain += stats.t.logpdf(xi, df=2 * ap, loc=mu, scale=np.sqrt(bp / ap))
        ap, bp = ap + 0.5, bp + 0.5 * (xi - mu) ** 2
    close(res.log_evidence, chain)

    post = stats.gamma(res.params["shape"], scale=1 / res.params["rate"])
    vals = bayes_identity(loglik, logprior, post.logpdf, [0.1, 0.45, 1.3])
    close(vals, np.full(3, res.log_evidence))


def ng_logpdf(mu, tau, m, k, a, b):
    return (stats.norm.logpdf(mu, m, 1 / np.sqrt(k * tau))
            + stats.gamma.logpdf(tau, a, scale=1 / b))


def test_normal_gamma_student_t_chain_and_identity():
    r = rng_for(9)
    x = r.normal(-2.0, 0.5, size=14)
    m0, k0, a0, b0 = 0.5, 0.3, 1.8, 0.9
    res = cf.normal_gamma(x, m0, k0, a0, b0)

    m, k, a, b, chain = m0, k0, a0, b0, 0.0
    for xi in x:   # one-observation update, written independently
        chain += stats.t.logpdf(xi, df=2 * a, loc=m, scale=np.sqrt(b * (k + 1) / (a * k)))
        b = b + k * (xi - m) ** 2 / (2 * (k + 1))
        m = (k * m + xi) / (k + 1)
        k, a = k + 1, a + 0.5
    close(res.log_evidence, chain)
    close([res.params[n] for n in ("mean", "beta", "shape", "rate")], [m, k, a, b])

    P = res.params
    thetas = [(-2.0, 4.0), (0.0, 0.5), (-1.7, 2.5)]
    vals = bayes_identity(
        lambda th: stats.norm.logpdf(x, th[0], 1 / np.sqrt(th[1])).sum(),
        lambda th: ng_logpdf(th[0], th[1], m0, k0, a0, b0),
        lambda th: ng_logpdf(th[0], th[1], P["mean"], P["beta"], P["shape"], P["rate"]),
        thetas)
    close(vals, np.full(3, res.log_evidence))


def test_normal_gamma_evidence_by_2d_quadrature():
    """Tensor Gauss-Legendre over (mu, log tau) of likelihood x prior."""
    x = np.array([0.3, -0.4, 1.1, 0.2])
    m0, k0, a0, b0 = 0.0, 1.0, 2.0, 1.5
    res = cf.normal_gamma(x, m0, k0, a0, b0)
    t, w = np.polynomial.legendre.leggauss(400)
    mu = 8.0 * t                      # mu in (-8, 8)
    u = -12.0 + 8.0 * (t + 1.0)       # log tau in (-12, 4)
    MU, U = np.meshgrid(mu, u, indexing="ij")
    TAU = np.exp(U)
    logf = (stats.norm.logpdf(x[:, None, None], MU, 1 / np.sqrt(TAU)).sum(axis=0)
            + ng_logpdf(MU, TAU, m0, k0, a0, b0) + U)     # + U: d tau = tau du
    c = logf.max()
    val = np.einsum("i,j,ij->", 8.0 * w, 8.0 * w, np.exp(logf - c))
    close(c + np.log(val), res.log_evidence, QUAD_RTOL)


# ---------------------------------------------------------------------------
# multivariate Gaussian models
# ---------------------------------------------------------------------------
def test_mvn_known_precision_stacked_marginal_chain_identity():
    r = rng_for(10)
    D, N = 3, 6
    L0 = random_spd(r, D, 0.5)
    L = random_spd(r, D, 2.0)
    m0 = r.normal(size=D)
    X = r.normal(size=(N, D)) + 1.0
    res = cf.mvn_known_precision(X, m0, L0, L)
    S, S0 = np.linalg.inv(L), np.linalg.inv(L0)
    cov = np.kron(np.eye(N), S) + np.kron(np.ones((N, N)), S0)
    close(res.log_evidence,
          stats.multivariate_normal(np.tile(m0, N), cov).logpdf(X.ravel()))

    mp, Lp, chain = m0.copy(), L0.copy(), 0.0
    for xi in X:
        chain += stats.multivariate_normal(mp, np.linalg.inv(Lp) + S).logpdf(xi)
        Lnew = Lp + L
        mp = np.linalg.solve(Lnew, Lp @ mp + L @ xi)
        Lp = Lnew
    close(res.log_evidence, chain)
    close(res.params["mean"], mp)
    close(res.params["precision"], Lp)

    post = stats.multivariate_normal(res.params["mean"], np.linalg.inv(res.params["precision"]))
    thetas = list(r.normal(size=(3, D)))
    vals = bayes_identity(lambda t: stats.multivariate_normal(t, S).logpdf(X).sum(),
                          lambda t: stats.multivariate_normal(m0, S0).logpdf(t),
                          post.logpdf, thetas)
    close(vals, np.full(3, res.log_evidence))


def test_mvn_d1_matches_normal_known_precision():
    x = np.array([0.2, 1.5, -0.3, 0.9])
    r1 = cf.normal_known_precision(x, 0.4, 0.7, 2.2)
    r2 = cf.mvn_known_precision(x[:, None], [0.4], [[0.7]], [[2.2]])
    close(r2.log_evidence, r1.log_evidence)
    close(r2.params["mean"], [r1.params["mean"]])
    close(r2.params["precision"], [[r1.params["precision"]]])


def wishart_chain(X, mu, nu, W):
    """Sequential multivariate-t predictive with the known-mean update."""
    D = X.shape[1]
    Winv, total = np.linalg.inv(W), 0.0
    for xi in X:
        df = nu - D + 1
        total += stats.multivariate_t(mu, Winv / df, df=df).logpdf(xi)
        Winv = Winv + np.outer(xi - mu, xi - mu)
        nu = nu + 1
    return total, nu, np.linalg.inv(Winv)


def test_wishart_known_mean_identity_and_chain():
    r = rng_for(11)
    D, N = 3, 7
    mu = r.normal(size=D)
    W0 = random_spd(r, D, 0.4)
    nu0 = 4.5
    X = r.multivariate_normal(mu, random_spd(r, D), size=N)
    res = cf.wishart_known_mean(X, mu, nu0, W0)

    chain, nu, W = wishart_chain(X, mu, nu0, W0)
    close(res.log_evidence, chain)
    close(res.params["dof"], nu)
    close(res.params["scale"], W)

    post = stats.wishart(df=res.params["dof"], scale=res.params["scale"])
    thetas = list(stats.wishart(df=nu0, scale=W0).rvs(size=3, random_state=r))
    vals = bayes_identity(
        lambda Lm: stats.multivariate_normal(mu, np.linalg.inv(Lm)).logpdf(X).sum(),
        lambda Lm: stats.wishart(df=nu0, scale=W0).logpdf(Lm),
        post.logpdf, thetas)
    close(vals, np.full(3, res.log_evidence))


def test_wishart_d1_matches_gamma_known_mean():
    x = np.array([0.3, -1.2, 0.8, 2.0, 0.1])
    nu, w = 3.3, 0.7
    rw = cf.wishart_known_mean(x[:, None], [0.25], nu, [[w]])
    rg = cf.gamma_known_mean(x, 0.25, nu / 2, 1 / (2 * w))
    close(rw.log_evidence, rg.log_evidence)
    close(rw.params["dof"] / 2, rg.params["shape"])
    close(1 / (2 * rw.params["scale"][0, 0]), rg.params["rate"])


def nw_logpdf(mu, Lm, m, beta, nu, W):
    return (stats.multivariate_normal(m, np.linalg.inv(beta * Lm)).logpdf(mu)
            + stats.wishart(df=nu, scale=W).logpdf(Lm))


def test_normal_wishart_identity_and_multivariate_t_chain():
    r = rng_for(12)
    D, N = 2, 8
    m0 = np.array([0.5, -1.0])
    b0, nu0 = 0.8, 3.5
    W0 = random_spd(r, D, 0.6)
    X = r.multivariate_normal([1.0, 0.0], random_spd(r, D), size=N)
    res = cf.normal_wishart(X, m0, b0, nu0, W0)

    m, b, nu, Winv, chain = m0.copy(), b0, nu0, np.linalg.inv(W0), 0.0
    for xi in X:   # one-observation update, written independently
        df = nu - D + 1
        chain += stats.multivariate_t(m, (b + 1) / (b * df) * Winv, df=df).logpdf(xi)
        Winv = Winv + b / (b + 1) * np.outer(xi - m, xi - m)
        m = (b * m + xi) / (b + 1)
        b, nu = b + 1, nu + 1
    close(res.log_evidence, chain)
    P = res.params
    close(P["mean"], m)
    close([P["beta"], P["dof"]], [b, nu])
    close(P["scale"], np.linalg.inv(Winv))

    Ls = stats.wishart(df=nu0, scale=W0).rvs(size=3, random_state=r)
    thetas = [(r.normal(size=D), Lm) for Lm in Ls]
    vals = bayes_identity(
        lambda th: stats.multivariate_normal(th[0], np.linalg.inv(th[1])).logpdf(X).sum(),
        lambda th: nw_logpdf(th[0], th[1], m0, b0, nu0, W0),
        lambda th: nw_logpdf(th[0], th[1], P["mean"], P["beta"], P["dof"], P["scale"]),
        thetas)
    close(vals, np.full(3, res.log_evidence))


def test_normal_wishart_d1_matches_normal_gamma():
    x = np.array([0.3, -1.2, 0.8, 2.0, 0.1, 0.6])
    m0, b0, nu, w = -0.2, 1.7, 2.6, 0.9
    rw = cf.normal_wishart(x[:, None], [m0], b0, nu, [[w]])
    rg = cf.normal_gamma(x, m0, b0, nu / 2, 1 / (2 * w))
    close(rw.log_evidence, rg.log_evidence)
    close(rw.params["mean"], [rg.params["mean"]])
    close(rw.params["beta"], rg.params["beta"])
    close(rw.params["dof"] / 2, rg.params["shape"])
    close(1 / (2 * rw.params["scale"][0, 0]), rg.params["rate"])


# ---------------------------------------------------------------------------
# linear regression
# ---------------------------------------------------------------------------
def test_linreg_marginal_conditioning_identity():
    r = rng_for(13)
    N, P = 20, 3
    X = r.normal(size=(N, P))
    w = r.normal(size=P)
    beta = 4.0
    y = X @ w + r.normal(size=N) / np.sqrt(beta)
    m0 = r.normal(size=P) * 0.3
    L0 = random_spd(r, P, 1.5)
    res = cf.linreg_known_precision(X, y, m0, L0, beta)
    S0 = np.linalg.inv(L0)
    C = np.eye(N) / beta + X @ S0 @ X.T
    close(res.log_evidence, stats.multivariate_normal(X @ m0, C).logpdf(y))

    # Gaussian conditioning (covariance form) for the posterior
    K = S0 @ X.T @ np.linalg.inv(C)
    close(res.params["mean"], m0 + K @ (y - X @ m0))
    close(np.linalg.inv(res.params["precision"]), S0 - K @ X @ S0)

    post = stats.multivariate_normal(res.params["mean"], np.linalg.inv(res.params["precision"]))
    thetas = list(r.normal(size=(3, P)))
    vals = bayes_identity(lambda t: stats.norm.logpdf(y, X @ t, 1 / np.sqrt(beta)).sum(),
                          lambda t: stats.multivariate_normal(m0, S0).logpdf(t),
                          post.logpdf, thetas)
    close(vals, np.full(3, res.log_evidence))


def test_linreg_bishop_3_86():
    r = rng_for(14)
    N, M = 15, 4
    X = r.normal(size=(N, M))
    y = r.normal(size=N)
    alpha, beta = 0.7, 2.5
    res = cf.linreg_known_precision(X, y, np.zeros(M), alpha * np.eye(M), beta)
    A = alpha * np.eye(M) + beta * X.T @ X
    mN = beta * np.linalg.solve(A, X.T @ y)
    E = beta / 2 * np.sum((y - X @ mN) ** 2) + alpha / 2 * mN @ mN
    bishop = (M / 2 * np.log(alpha) + N / 2 * np.log(beta) - E
              - 0.5 * np.linalg.slogdet(A)[1] - N / 2 * np.log(2 * np.pi))
    close(res.log_evidence, bishop)


def test_linreg_stacked_matches_mvn_isotropic():
    r = rng_for(15)
    D, N, beta = 2, 5, 1.7
    X = r.normal(size=(N, D))
    m0, L0 = np.array([0.3, -0.1]), random_spd(r, D)
    rm = cf.mvn_known_precision(X, m0, L0, beta * np.eye(D))
    rl = cf.linreg_known_precision(np.tile(np.eye(D), (N, 1)), X.ravel(), m0, L0, beta)
    close(rl.log_evidence, rm.log_evidence)
    close(rl.params["mean"], rm.params["mean"])
    close(rl.params["precision"], rm.params["precision"])
    # and with a column of ones it is the scalar known-precision model
    x = X[:, 0]
    rn = cf.normal_known_precision(x, 0.3, 2.0, beta)
    rl1 = cf.linreg_known_precision(np.ones((N, 1)), x, [0.3], [[2.0]], beta)
    close(rl1.log_evidence, rn.log_evidence)


# ---------------------------------------------------------------------------
# generic properties: splitting the data, empty data
# ---------------------------------------------------------------------------
def _split_cases():
    r = rng_for(16)
    X2 = r.normal(size=(9, 2))
    S = random_spd(r, 2)
    Xr = r.normal(size=(9, 3))
    yr = r.normal(size=9)
    cnt = r.integers(0, 5, size=(9, 3))
    # (name, function, data tuple, prior kwargs, posterior->prior name map)
    same = None
    return [
        ("beta_bernoulli", cf.beta_bernoulli, ((r.random(9) < .5).astype(int),),
         dict(a=1.5, b=0.5), same),
        ("beta_binomial", cf.beta_binomial, (np.arange(9) % 4, np.full(9, 4)),
         dict(a=1.5, b=0.5), same),
        ("gamma_poisson", cf.gamma_poisson, (r.poisson(2.0, 9),), dict(shape=1.5, rate=0.5), same),
        ("gamma_exponential", cf.gamma_exponential, (r.exponential(size=9),),
         dict(shape=1.5, rate=0.5), same),
        ("dirichlet_categorical", cf.dirichlet_categorical, (r.integers(0, 3, 9),),
         dict(alpha=np.array([0.5, 1.0, 2.0])), same),
        ("dirichlet_multinomial", cf.dirichlet_multinomial, (cnt,),
         dict(alpha=np.array([0.5, 1.0, 2.0])), same),
        ("normal_known_precision", cf.normal_known_precision, (r.normal(size=9),),
         dict(mean0=0.2, precision0=0.5, precision=3.0), {"mean": "mean0", "precision": "precision0"}),
        ("gamma_known_mean", cf.gamma_known_mean, (r.normal(size=9),),
         dict(mean=0.1, shape=1.5, rate=0.5), same),
        ("normal_gamma", cf.normal_gamma, (r.normal(size=9),),
         dict(mean=0.1, beta=0.5, shape=1.5, rate=0.5), same),
        ("mvn_known_precision", cf.mvn_known_precision, (X2,),
         dict(mean0=np.zeros(2), precision0=S, precision=2 * S),
         {"mean": "mean0", "precision": "precision0"}),
        ("wishart_known_mean", cf.wishart_known_mean, (X2,),
         dict(mean=np.ones(2), dof=2.5, scale=S), same),
        ("normal_wishart", cf.normal_wishart, (X2,),
         dict(mean=np.ones(2), beta=0.4, dof=2.5, scale=S), same),
        ("linreg_known_precision", cf.linreg_known_precision, (Xr, yr),
         dict(mean0=np.zeros(3), precision0=np.eye(3), noise_precision=2.0),
         {"mean": "mean0", "precision": "precision0"}),
    ]


SPLIT_CASES = _split_cases()


@pytest.mark.parametrize("case", SPLIT_CASES, ids=[c[0] for c in SPLIT_CASES])
def test_sequential_split_equals_batch(case):
    _, fn, data, prior, names = case
    full = fn(*data, **prior)
    first = fn(*(d[:4] for d in data), **prior)
    prior2 = {(names or {}).get(k, k): v for k, v in first.params.items()}
    if fn is cf.gamma_known_mean:
        prior2["mean"] = prior["mean"]
    elif fn is cf.wishart_known_mean:
        prior2["mean"] = prior["mean"]
    elif fn is cf.mvn_known_precision:
        prior2["precision"] = prior["precision"]
    elif fn is cf.normal_known_precision:
        prior2["precision"] = prior["precision"]
    elif fn is cf.linreg_known_precision:
        prior2["noise_precision"] = prior["noise_precision"]
    second = fn(*(d[4:] for d in data), **prior2)
    close(first.log_evidence + second.log_evidence, full.log_evidence)
    assert second.family == full.family
    for k in full.params:
        close(second.params[k], full.params[k])


@pytest.mark.parametrize("case", SPLIT_CASES, ids=[c[0] for c in SPLIT_CASES])
def test_empty_data_returns_prior(case):
    _, fn, data, prior, names = case
    res = fn(*(d[:0] for d in data), **prior)
    assert res.log_evidence == 0.0
    for k, v in res.params.items():
        close(v, prior[(names or {}).get(k, k)])


# ---------------------------------------------------------------------------
# bad inputs
# ---------------------------------------------------------------------------
_S2 = np.array([[2.0, 0.3], [0.3, 1.0]])
_NOT_SPD = np.array([[1.0, 2.0], [2.0, 1.0]])
_ASYM = np.array([[1.0, 0.5], [0.0, 1.0]])
_X2 = np.zeros((3, 2))

BAD = [
    ("bern non-binary", cf.beta_bernoulli, ([0, 2], 1.0, 1.0)),
    ("bern a<=0", cf.beta_bernoulli, ([0, 1], 0.0, 1.0)),
    ("bern b nan", cf.beta_bernoulli, ([0, 1], 1.0, np.nan)),
    ("bern vector a", cf.beta_bernoulli, ([0, 1], [1.0, 2.0], 1.0)),
    ("binom x>n", cf.beta_binomial, ([3], [2], 1.0, 1.0)),
    ("binom negative", cf.beta_binomial, ([-1], [2], 1.0, 1.0)),
    ("binom non-integer", cf.beta_binomial, ([1.5], [2], 1.0, 1.0)),
    ("binom shapes", cf.beta_binomial, ([1, 2, 3], [4, 4], 1.0, 1.0)),
    ("poisson negative", cf.gamma_poisson, ([1, -2], 1.0, 1.0)),
    ("poisson fractional", cf.gamma_poisson, ([0.5], 1.0, 1.0)),
    ("poisson rate<0", cf.gamma_poisson, ([1], 1.0, -1.0)),
    ("expon negative x", cf.gamma_exponential, ([-0.1], 1.0, 1.0)),
    ("expon shape 0", cf.gamma_exponential, ([0.1], 0.0, 1.0)),
    ("cat label too big", cf.dirichlet_categorical, ([0, 3], [1.0, 1.0, 1.0])),
    ("cat negative label", cf.dirichlet_categorical, ([-1], [1.0, 1.0])),
    ("cat alpha<=0", cf.dirichlet_categorical, ([0], [1.0, 0.0])),
    ("cat alpha 2-D", cf.dirichlet_categorical, ([0], [[1.0, 1.0]])),
    ("mult wrong K", cf.dirichlet_multinomial, ([[1, 2]], [1.0, 1.0, 1.0])),
    ("mult negative", cf.dirichlet_multinomial, ([[1, -2]], [1.0, 1.0])),
    ("mult 3-D", cf.dirichlet_multinomial, (np.zeros((2, 2, 2)), [1.0, 1.0])),
    ("normal prec0<=0", cf.normal_known_precision, ([0.1], 0.0, 0.0, 1.0)),
    ("normal prec<0", cf.normal_known_precision, ([0.1], 0.0, 1.0, -1.0)),
    ("normal inf data", cf.normal_known_precision, ([np.inf], 0.0, 1.0, 1.0)),
    ("gkm shape<0", cf.gamma_known_mean, ([0.1], 0.0, -1.0, 1.0)),
    ("gkm mean nan", cf.gamma_known_mean, ([0.1], np.nan, 1.0, 1.0)),
    ("ng beta 0", cf.normal_gamma, ([0.1], 0.0, 0.0, 1.0, 1.0)),
    ("ng rate<0", cf.normal_gamma, ([0.1], 0.0, 1.0, 1.0, -2.0)),
    ("mvn not spd", cf.mvn_known_precision, (_X2, np.zeros(2), _NOT_SPD, _S2)),
    ("mvn asym", cf.mvn_known_precision, (_X2, np.zeros(2), _S2, _ASYM)),
    ("mvn X 1-D", cf.mvn_known_precision, (np.zeros(2), np.zeros(2), _S2, _S2)),
    ("mvn X wrong D", cf.mvn_known_precision, (np.zeros((3, 3)), np.zeros(2), _S2, _S2)),
    ("mvn prec shape", cf.mvn_known_precision, (_X2, np.zeros(2), np.eye(3), _S2)),
    ("wish dof small", cf.wishart_known_mean, (_X2, np.zeros(2), 1.0, _S2)),
    ("wish scale not spd", cf.wishart_known_mean, (_X2, np.zeros(2), 3.0, _NOT_SPD)),
    ("wish mean 2-D", cf.wishart_known_mean, (_X2, np.zeros((1, 2)), 3.0, _S2)),
    ("nw beta<0", cf.normal_wishart, (_X2, np.zeros(2), -1.0, 3.0, _S2)),
    ("nw dof small", cf.normal_wishart, (_X2, np.zeros(2), 1.0, 0.5, _S2)),
    ("nw scale shape", cf.normal_wishart, (_X2, np.zeros(2), 1.0, 3.0, np.eye(3))),
    ("lr y shape", cf.linreg_known_precision, (_X2, np.zeros(4), np.zeros(2), _S2, 1.0)),
    ("lr noise 0", cf.linreg_known_precision, (_X2, np.zeros(3), np.zeros(2), _S2, 0.0)),
    ("lr prior not spd", cf.linreg_known_precision, (_X2, np.zeros(3), np.zeros(2), _NOT_SPD, 1.0)),
    ("lr X wrong P", cf.linreg_known_precision, (np.zeros((3, 3)), np.zeros(3), np.zeros(2), _S2, 1.0)),
]


@pytest.mark.parametrize("fn,args", [(f, a) for _, f, a in BAD], ids=[n for n, _, _ in BAD])
def test_bad_inputs_raise_value_error(fn, args):
    with pytest.raises(ValueError):
        fn(*args)
