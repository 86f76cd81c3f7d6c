"""Hyperpriors (docs/hyperpriors.md): a Wishart prior on a Wishart's inverse scale,
``bg.Wishart(dof, rate=B)`` with B a Wishart node (conjugate).

* Observed precision matrices: q(B) is the exact posterior Wishart(n0 + m n,
  (V0^-1 + sum_i Lambda_i)^-1) and the ELBO of fit("conjugate") is the exact log
  evidence, written with scipy.stats.wishart, to 1e-12.
* Latent precisions (groups of Gaussian data sharing B): the message from each Lambda to
  B equals the finite-difference gradient of its expected log-likelihood in B's moments
  (tests/test_messages.py), and the VMP trace never decreases.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import blrgraph as bg
from test_messages import check_messages, random_spd


def test_wishart_rate_posterior_and_evidence_are_exact():
    rng = np.random.default_rng(0)
    D, n, n0, m = 3, 5.0, 4.0, 6
    V0 = random_spd(rng, D, 0.5)
    true_rate = random_spd(rng, D)
    Ls = stats.wishart(df=n, scale=np.linalg.inv(true_rate)).rvs(m, random_state=1)
    B = bg.Wishart(n0, V0, name="B")
    L = bg.Wishart(n, rate=B, plates=(m,), name="L").observe(Ls)
    res = bg.Model(L).fit("conjugate")
    nP, VP = n0 + m * n, np.linalg.inv(np.linalg.inv(V0) + Ls.sum(0))
    post = B.posterior.params
    np.testing.assert_allclose(post["dof"], nP, rtol=1e-14)
    np.testing.assert_allclose(post["scale"], VP, rtol=1e-12, atol=1e-14)
    Bs = nP * VP   # any point: log p(L | B*) + log p(B*) - log q(B*) is the evidence
    evidence = sum(stats.wishart(df=n, scale=np.linalg.inv(Bs)).logpdf(Li) for Li in Ls) \
        + stats.wishart(df=n0, scale=V0).logpdf(Bs) - stats.wishart(df=nP, scale=VP).logpdf(Bs)
    np.testing.assert_allclose(res.elbo, evidence, rtol=1e-12)
    # an array rate is the fixed prior with scale = rate^-1
    L2 = bg.Wishart(n, rate=true_rate, name="L2")
    np.testing.assert_allclose(L2.moments()[0], n * np.linalg.inv(true_rate), rtol=1e-12)


@pytest.mark.parametrize("masked", [False, True])
def test_wishart_rate_messages_and_monotone_vmp(masked):
    rng = np.random.default_rng(1)
    D, G, N = 2, 3, 20
    B = bg.Wishart(D + 2.0, np.eye(D), name="B")
    L = bg.Wishart(D + 3.0, rate=B, plates=(G,), name="L")
    X = rng.normal(size=(N, G, D)) * np.array([0.5, 1.0, 2.0])[:, None]
    mask = rng.random((N, G)) < 0.8 if masked else None
    x = bg.MultivariateNormal(np.zeros(D), L, plates=(N, G), name="x").observe(X, mask=mask)
    res = bg.Model(x).fit("vmp", max_iter=60, tol=0)
    tr = res.elbo_trace
    assert np.all(np.diff(tr) >= -1e-10 * np.abs(tr[1:]))
    assert tr[-1] > tr[0]
    assert check_messages(L) == 1     # Lambda -> B
    assert check_messages(x) == 1     # x -> Lambda (unchanged)


def test_wishart_random_scale_is_refused_with_the_fix():
    B = bg.Wishart(3.0, np.eye(2), name="B")
    with pytest.raises(TypeError, match="rate=B"):
        bg.Wishart(3.0, B, name="L")
    with pytest.raises(TypeError, match="one of the two"):
        bg.Wishart(3.0, np.eye(2), rate=B, name="L")
    with pytest.raises(ValueError, match="dof must be > D - 1"):
        bg.Wishart(0.5, rate=B, name="L")


# ---- a random Gamma shape (NCVMP) ---------------------------------------------------------
def _elbo_reference(alpha, beta, x, c, d, b):
    """ELBO of q(a) = Gamma(alpha, beta) for x_i ~ Gamma(a, b) (b fixed), a ~ Gamma(c, d),
    written independently: E[log Gamma(a)] by scipy.integrate.quad in v = log(beta a)."""
    from scipy import integrate
    from scipy.special import digamma, gammaln
    f = lambda v: np.exp(alpha * v - np.exp(v) - gammaln(alpha)) * gammaln(np.exp(v) / beta)  # noqa: E731
    lo = np.log(alpha) - 40.0 / np.sqrt(alpha) - 40.0
    ElgG = sum(integrate.quad(f, p, q, limit=500, epsabs=1e-14, epsrel=1e-13)[0]
               for p, q in [(lo, np.log(alpha) - 5.0), (np.log(alpha) - 5.0, np.log(alpha) + 5.0),
                            (np.log(alpha) + 5.0, np.log(alpha) + 10.0)])
    Ea, Ela = alpha / beta, digamma(alpha) - np.log(beta)
    n = len(x)
    lik = (Ea - 1.0) * np.log(x).sum() - b * x.sum() + n * Ea * np.log(b) - n * ElgG
    prior = c * np.log(d) - gammaln(c) + (c - 1.0) * Ela - d * Ea
    entropy = stats.gamma(alpha, scale=1.0 / beta).entropy()
    return lik + prior + entropy


def test_gamma_shape_ncvmp_reaches_the_best_gamma_q():
    """Data x_i ~ Gamma(3, 2), shape a ~ Gamma(1, 0.1): the NCVMP fixed point is the
    maximiser of the ELBO over q(a) = Gamma(alpha, beta), found here by scipy.optimize on
    an independent ELBO; the trace never decreases; the ELBO is below the log evidence."""
    from scipy import integrate, optimize
    rng = np.random.default_rng(2)
    x_data = rng.gamma(3.0, 1 / 2.0, size=60)
    c, d, b = 1.0, 0.1, 2.0
    a = bg.Gamma(c, d, name="a")
    x = bg.Gamma(a, b, plates=(60,), name="x").observe(x_data)
    res = bg.Model(x).fit("ncvmp", max_iter=300, tol=1e-13)
    tr = res.elbo_trace
    assert res.converged and np.all(np.diff(tr) >= -1e-9 * np.abs(tr[1:]))
    post = a.posterior.params
    np.testing.assert_allclose(_elbo_reference(post["shape"], post["rate"], x_data, c, d, b),
                               res.elbo, rtol=1e-11)
    opt = optimize.minimize(lambda p: -_elbo_reference(*np.exp(p), x_data, c, d, b),
                            np.log([post["shape"] * 0.7, post["rate"] * 1.3]), method="Nelder-Mead",
                            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000})
    assert -opt.fun <= res.elbo + 1e-9 * abs(res.elbo)       # NCVMP's q is the best Gamma q
    np.testing.assert_allclose(np.exp(opt.x), [post["shape"], post["rate"]], rtol=1e-4)
    # the exact posterior of a (1-D): the ELBO is below log p(x), and the means agree
    logp = lambda s: (stats.gamma(c, scale=1 / d).logpdf(s)  # noqa: E731
                      + stats.gamma(s, scale=1 / b).logpdf(x_data).sum())
    m = optimize.minimize_scalar(lambda s: -logp(s), bounds=(0.1, 20), method="bounded").x
    Z = integrate.quad(lambda s: np.exp(logp(s) - logp(m)), 0, 30, points=[m], limit=200)[0]
    assert res.elbo <= np.log(Z) + logp(m)
    mean = integrate.quad(lambda s: s * np.exp(logp(s) - logp(m)), 0, 30, points=[m], limit=200)[0] / Z
    assert abs(a.posterior.mean - mean) < 0.01 * mean


def test_gamma_shape_messages_are_gradients():
    """Latent Gamma children with a random shape (plates (2,)) and a random rate: the
    messages to the shape and to the rate equal finite differences of the expected
    log-likelihood in their mean parameters."""
    rng = np.random.default_rng(3)
    a = bg.Gamma(2.0, 0.5, plates=(2,), name="a")
    b = bg.Gamma(3.0, 1.0, name="b")
    lam = bg.Gamma(a, b, plates=(5, 2), name="lam")
    y = bg.Poisson(lam, name="y").observe(rng.poisson(4.0, size=(5, 2)))
    res = bg.Model(y).fit("ncvmp", max_iter=40)
    assert np.all(np.diff(res.elbo_trace) >= -1e-9 * np.abs(res.elbo_trace[1:]))
    assert check_messages(lam) == 2


def test_gamma_shape_needs_ncvmp_and_a_gamma_node():
    a = bg.Gamma(2.0, 1.0, name="a")
    x = bg.Gamma(a, 1.0, plates=(3,), name="x").observe(np.array([1.0, 2.0, 0.5]))
    with pytest.raises(ValueError, match="ncvmp"):
        bg.Model(x).fit("vmp")
    with pytest.raises(TypeError, match="random shape must be a Gamma node"):
        bg.Gamma(bg.Normal(0.0, 1.0, name="m"), 1.0, name="bad")


# ---- a random Dirichlet concentration (NCVMP) ---------------------------------------------
def _quad_lgamma(alpha, beta, c):
    """E[log Gamma(c a)] for a ~ Gamma(alpha, beta) by scipy.integrate.quad in log(beta a)."""
    from scipy import integrate
    from scipy.special import gammaln
    f = lambda v: np.exp(alpha * v - np.exp(v) - gammaln(alpha)) * gammaln(c * np.exp(v) / beta)  # noqa: E731
    m = np.log(alpha)
    return sum(integrate.quad(f, p, q, limit=500, epsabs=1e-14, epsrel=1e-13)[0]
               for p, q in [(m - 40.0 / np.sqrt(alpha) - 40.0, m - 5.0), (m - 5.0, m + 5.0),
                            (m + 5.0, m + 10.0)])


def test_dirichlet_concentration_ncvmp_reaches_the_best_gamma_q():
    """Probability vectors from Dirichlet(5 m), m = (0.4, 0.8, 1.2, 1.6), concentration
    s ~ Gamma(1, 0.1): the NCVMP fixed point is a stationary point and a local maximum of
    an independently written ELBO over q(s) = Gamma(alpha, beta) (E[log Gamma] by
    scipy.integrate.quad); the trace never decreases."""
    from scipy.special import digamma, gammaln
    rng = np.random.default_rng(4)
    m = np.array([1.0, 2.0, 3.0, 4.0]) * 0.4
    P = rng.dirichlet(5.0 * m, size=80)
    c, d = 1.0, 0.1
    s = bg.Gamma(c, d, name="s")
    p = bg.Dirichlet(m, concentration=s, plates=(80,), name="p").observe(P)
    res = bg.Model(p).fit("ncvmp", max_iter=300, tol=1e-13)
    tr = res.elbo_trace
    assert res.converged and np.all(np.diff(tr) >= -1e-9 * np.abs(tr[1:]))

    def elbo(alpha, beta):
        Es, Els = alpha / beta, digamma(alpha) - np.log(beta)
        n, logP = len(P), np.log(P)
        lik = (Es * m - 1.0).dot(logP.sum(0)) + n * _quad_lgamma(alpha, beta, m.sum()) \
            - n * sum(_quad_lgamma(alpha, beta, mk) for mk in m)
        prior = c * np.log(d) - gammaln(c) + (c - 1.0) * Els - d * Es
        return lik + prior + stats.gamma(alpha, scale=1.0 / beta).entropy()

    post = s.posterior.params
    q0 = np.log([post["shape"], post["rate"]])
    L0 = elbo(*np.exp(q0))
    np.testing.assert_allclose(L0, res.elbo, rtol=1e-11)
    # a stationary point of the independent ELBO (central differences in log alpha, log
    # beta), and a maximum: every point 1% away in any of 8 directions is lower
    h = 1e-4
    grad = [(elbo(*np.exp(q0 + h * e)) - elbo(*np.exp(q0 - h * e))) / (2 * h) for e in np.eye(2)]
    off = [(elbo(*np.exp(q0 + 0.01 * e)) - L0) for e in np.eye(2)]
    assert np.max(np.abs(grad)) < 1e-3 * np.max(np.abs(off)) / 0.01, (grad, off)
    for t in np.linspace(0, 2 * np.pi, 8, endpoint=False):
        assert elbo(*np.exp(q0 + 0.01 * np.array([np.cos(t), np.sin(t)]))) < L0
    assert abs(s.posterior.mean - 5.0) < 1.0


def test_dirichlet_concentration_messages_are_gradients():
    """Latent topic-like Dirichlets (plates (3,)) sharing a random concentration, with
    Categorical data: the message to s equals the finite-difference gradient."""
    rng = np.random.default_rng(5)
    s = bg.Gamma(2.0, 1.0, name="s")
    theta = bg.Dirichlet(np.ones(4), concentration=s, plates=(3,), name="theta")
    z = bg.Categorical(theta, plates=(20, 3), name="z").observe(rng.integers(0, 4, size=(20, 3)))
    res = bg.Model(z).fit("ncvmp", max_iter=40)
    assert np.all(np.diff(res.elbo_trace) >= -1e-9 * np.abs(res.elbo_trace[1:]))
    assert check_messages(theta) == 1


def test_dirichlet_concentration_refusals():
    s = bg.Gamma(2.0, 1.0, name="s")
    with pytest.raises(TypeError, match="must be a Gamma node"):
        bg.Dirichlet(np.ones(3), concentration=bg.Normal(0.0, 1.0, name="n"), name="d1")
    with pytest.raises(TypeError, match="fixed base vector"):
        bg.Dirichlet(s, concentration=s, name="d2")
    with pytest.raises(ValueError, match="K concentrations"):
        bg.Dirichlet(1.0, concentration=s, name="d3")
