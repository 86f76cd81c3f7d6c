"""Hyperpriors (docs/hyperpriors.md): a Wishart prior on a Wishart's inverse scale,
``bg.Wishart(dof, rate=B)`` with B a Wishart node (conjugate).

* Observed precision matrices: q(B) is the exact posterior Wishart(n0 + m n,
  (V0^-1 + sum_i Lambda_i)^-1) and the ELBO of fit("conjugate") is the exact log
  evidence, written with scipy.stats.wishart, to 1e-12.
* Latent precisions (groups of Gaussian data sharing B): the message from each Lambda to
  B equals the finite-difference gradient of its expected log-likelihood in B's moments
  (tests/test_messages.py), and the VMP trace never decreases.
* A random Gamma shape and a random Dirichlet concentration (one scale, or a vector of
  K concentrations, ``bg.Dirichlet(alpha)``) by fit("ncvmp"): the expectations of log Gamma
  against independent quadratures, messages against finite differences, NCVMP fixed
  points against independently written ELBOs, and the point-mass limit against Minka's
  fixed point for the Dirichlet MLE.
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
    # the reference ELBO (quadrature) is exact to about 1e-12 absolute: Nelder-Mead stops
    # at fatol 1e-11 (below that it wanders in the rounding for its 4000 iterations)
    opt = optimize.minimize(lambda p: -_elbo_reference(*np.exp(p), x_data, c, d, b),
                            np.log([post["shape"] * 0.7, post["rate"] * 1.3]), method="Nelder-Mead",
                            options={"xatol": 1e-9, "fatol": 1e-11, "maxiter": 4000})
    assert opt.success
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


# ---- a vector of random Dirichlet concentrations (NCVMP) ----------------------------------
def _quad_lgamma_sum2(alpha, beta):
    """E[log Gamma(a_1 + a_2)], a_k ~ Gamma(alpha_k, beta_k) independent, by
    scipy.integrate.quad over the density of the sum (beta_2 >= beta_1, A = alpha_1 + alpha_2):
    f(s) = beta_1^alpha_1 beta_2^alpha_2 / Gamma(A) s^(A-1) e^(-beta_1 s)
    1F1(alpha_2; A; -(beta_2 - beta_1) s) (the convolution's Beta integral is Kummer's
    function). Returns (E log Gamma(S), integral of f - 1)."""
    from scipy import integrate
    from scipy.special import gammaln, hyp1f1
    (a1, a2), (b1, b2) = alpha, beta
    if b1 > b2:
        a1, a2, b1, b2 = a2, a1, b2, b1
    A = a1 + a2
    logc = a1 * np.log(b1) + a2 * np.log(b2) - gammaln(A)

    def dens(v):
        return np.exp(logc + A * v - b1 * np.exp(v)) * hyp1f1(a2, A, -(b2 - b1) * np.exp(v))
    m = np.log(A / b1)                                     # in v = log s
    kw = dict(epsabs=1e-15, epsrel=1e-13, limit=400)
    pieces = [(m - 60.0 / min(A, 1.0) - 10.0, m - 3.0), (m - 3.0, m + 3.0), (m + 3.0, m + 6.0)]
    G = sum(integrate.quad(lambda v: dens(v) * gammaln(np.exp(v)), p, q, **kw)[0] for p, q in pieces)
    return G, sum(integrate.quad(dens, p, q, **kw)[0] for p, q in pieces) - 1.0


@pytest.mark.parametrize("alpha, beta", [([2.5, 0.7], [1.3, 0.4]), ([0.3, 40.0], [0.05, 8.0]),
                                         ([5.0, 3.0], [2.0, 0.1])])
def test_expected_lgamma_of_a_sum_is_exact(alpha, beta):
    """E[log Gamma(sum_k a_k)] (Malmsten's integral over the Laplace transform of the sum)
    equals quadrature over the sum's density for K = 2 and the one-Gamma trapezoid rule for K = 1 to
    1e-12; its gradient in (alpha, beta) equals central differences; a shared rate is a
    Gamma(sum alpha_k, beta) sum."""
    from blrgraph.graph.factors.hyper import expected_lgamma, expected_lgamma_sum
    alpha, beta = np.array(alpha), np.array(beta)
    G, ga, gb = expected_lgamma_sum(alpha, beta)
    ref, norm = _quad_lgamma_sum2(alpha, beta)
    assert abs(norm) < 1e-13
    np.testing.assert_allclose(G, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(alpha, beta):
        one = expected_lgamma_sum(np.array([a]), np.array([b]))
        np.testing.assert_allclose([one[0], one[1][0], one[2][0]], expected_lgamma(a, b),
                                   rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(expected_lgamma_sum(alpha, np.full(2, beta[0]))[0],
                               expected_lgamma(alpha.sum(), beta[0])[0], rtol=1e-13)
    for k in range(2):
        e = 1e-5 * np.eye(2)[k]
        for grad, arg in ((ga, 0), (gb, 1)):
            up = [alpha, beta]
            dn = [alpha, beta]
            up[arg], dn[arg] = up[arg] + e * up[arg][k], dn[arg] - e * dn[arg][k]
            fd = (expected_lgamma_sum(*up)[0] - expected_lgamma_sum(*dn)[0]) / (2e-5 * [alpha, beta][arg][k])
            np.testing.assert_allclose(grad[k], fd, rtol=1e-7, atol=1e-9)
    # vectorised over leading axes: a batch gives the same numbers as one at a time
    batch = expected_lgamma_sum(np.stack([alpha, alpha[::-1]]), np.stack([beta, beta[::-1]]))
    np.testing.assert_allclose(batch[0], [G, G], rtol=1e-13)


def test_dirichlet_alpha_messages_are_gradients_with_plates_and_masks():
    """LDA-like: per-document Dirichlets theta (latent, plates (6, 2): two groups, each
    with its own concentration vector, alpha plates (2, 4)) with Categorical words, some
    masked: the message to alpha equals the finite-difference gradient of theta's expected
    log-likelihood in alpha's mean parameters (E log alpha_k, E alpha_k), and the NCVMP
    trace never decreases."""
    rng = np.random.default_rng(6)
    K = 4
    alpha = bg.Gamma(2.0, 1.0, plates=(2, K), name="alpha")
    theta = bg.Dirichlet(alpha, plates=(6, 2), name="theta")
    words = rng.integers(0, K, size=(15, 6, 2))
    mask = rng.random((15, 6, 2)) < 0.8
    z = bg.Categorical(theta, plates=(15, 6, 2), name="z").observe(words, mask=mask)
    res = bg.Model(z).fit("ncvmp", max_iter=60, tol=0)
    tr = res.elbo_trace
    assert np.all(np.diff(tr) >= -1e-9 * np.abs(tr[1:])) and tr[-1] > tr[0]
    assert theta.message_weight(alpha) is None or np.any(theta.message_weight(alpha))
    assert check_messages(theta) == 1
    assert check_messages(z) == 1          # z -> theta (unchanged)


def _invpsi(y):
    """psi^-1 by Newton from Minka's start (Minka 2000, appendix C)."""
    from scipy.special import digamma, polygamma
    x = np.where(y >= -2.22, np.exp(y) + 0.5, -1.0 / (y - digamma(1.0)))
    for _ in range(10):
        x = x - (digamma(x) - y) / polygamma(1, x)
    return x


def _minka_dirichlet_mle(logp_bar, tol=1e-15):
    """Minka's fixed point for the Dirichlet MLE from the mean log-probabilities:
    psi(alpha_k) = psi(sum_j alpha_j) + mean_n log p_nk, iterated to a relative 1e-15."""
    from scipy.special import digamma
    a = np.ones_like(logp_bar)
    for _ in range(100000):
        new = _invpsi(digamma(a.sum()) + logp_bar)
        if np.max(np.abs(new - a) / a) < tol:
            return new
        a = new
    raise AssertionError("no convergence")


def test_dirichlet_alpha_point_mass_is_minkas_mle():
    """With alpha a point mass (fit("ncvmp", point=[alpha]): messages at the point, a
    Newton step) and a flat prior Gamma(1, 1e-12), the fit is the Dirichlet MLE of the
    observed probability vectors, Minka's fixed point written above (with the prior's
    -1e-12 in its equation: psi(alpha_k) - psi(alpha_0) = mean log p_k - b0 / N):

    * Minka's MLE is a fixed point of the engine's update (lam0 + messages at the point,
      then the mode) to 1e-12, however the run stops;
    * the fits (rho = 1 and the default 0.5) reach it to 1e-6 and their objective (the
      log-likelihood plus the log prior density at the point) equals its value at the MLE
      to 1e-12. (The runs stop when the objective stops changing; it is flat to rounding
      within ~1e-7 of the optimum: measured 4e-10 (rho = 1) and 2e-7 (rho = 0.5) here.)"""
    from scipy.special import gammaln

    from blrgraph.families.gamma import Gamma as GammaFamily
    from blrgraph.inference.blr import blr_target
    rng = np.random.default_rng(1)
    N, b0 = 100, 1e-12
    P = rng.dirichlet([2.0, 3.0, 5.0], size=N)
    ref = _minka_dirichlet_mle(np.log(P).mean(0) - b0 / N)
    F = ((ref - 1.0) * np.log(P)).sum() + N * (gammaln(ref.sum()) - gammaln(ref).sum()) \
        + np.sum(np.log(b0) - b0 * ref)
    for rho in (1.0, None):
        alpha = bg.Gamma(1.0, b0, plates=(3,), name="alpha").start_from(2.0, 2.0)
        p = bg.Dirichlet(alpha, plates=(N,), name="p").observe(P)
        model = bg.Model(p)
        res = model.fit("ncvmp", point=[alpha], max_iter=1000, tol=0, rho=rho)
        assert res.converged and res.objective == "em_bound" and alpha.point
        np.testing.assert_allclose(alpha.posterior.point, ref, rtol=1e-6)
        np.testing.assert_allclose(res.elbo, F, rtol=1e-12)
        alpha.set_natural((ref, -np.ones(3)))             # the point mass at the MLE
        np.testing.assert_allclose(alpha.moments()[1], ref, rtol=1e-15)
        np.testing.assert_allclose(GammaFamily().mode(blr_target(model, alpha)), ref, rtol=1e-12)


def test_dirichlet_alpha_ncvmp_fixed_point_is_a_stationary_point_of_the_elbo():
    """Observed probability vectors from Dirichlet(0.5, 1, 2), alpha_k ~ Gamma(1, 0.1)
    with q(alpha_k) = Gamma(a_k, b_k): the NCVMP trace never decreases; the ELBO written
    here (scipy.stats entropies and priors, E[log Gamma] from the quadratures tested
    above) equals the fit's to 1e-11 and is stationary in the six (log a_k, log b_k) at
    the fixed point; the posterior means are near the truth."""
    from scipy.special import digamma, gammaln

    from blrgraph.graph.factors.hyper import expected_lgamma, expected_lgamma_sum
    rng = np.random.default_rng(7)
    N, c, d = 300, 1.0, 0.1
    true = np.array([0.5, 1.0, 2.0])
    P = rng.dirichlet(true, size=N)
    alpha = bg.Gamma(c, d, plates=(3,), name="alpha")
    p = bg.Dirichlet(alpha, plates=(N,), name="p").observe(P)
    res = bg.Model(p).fit("ncvmp", max_iter=500, tol=1e-14)
    tr = res.elbo_trace
    assert res.converged and np.all(np.diff(tr) >= -1e-9 * np.abs(tr[1:]))
    S = np.log(P).sum(0)

    def elbo(q):
        a, b = np.exp(q[:3]), np.exp(q[3:])
        lik = (a / b - 1.0) @ S - N * (expected_lgamma(a, b)[0].sum() - expected_lgamma_sum(a, b)[0])
        prior = np.sum(c * np.log(d) - gammaln(c) + (c - 1.0) * (digamma(a) - np.log(b)) - d * a / b)
        return lik + prior + stats.gamma(a, scale=1.0 / b).entropy().sum()

    post = alpha.posterior.params
    q0 = np.log(np.concatenate([post["shape"], post["rate"]]))
    np.testing.assert_allclose(elbo(q0), res.elbo, rtol=1e-11)
    h = 1e-5
    grad = np.array([(elbo(q0 + h * e) - elbo(q0 - h * e)) / (2 * h) for e in np.eye(6)])
    assert np.max(np.abs(grad)) < 1e-4, grad
    assert all(elbo(q0 + 0.01 * e) < elbo(q0) and elbo(q0 - 0.01 * e) < elbo(q0) for e in np.eye(6))
    sd = np.sqrt(alpha.posterior.var)
    assert np.all(np.abs(alpha.posterior.mean - true) < 4 * sd), (alpha.posterior.mean, sd)


def test_dirichlet_alpha_refusals():
    """Bad concentrations are refused where they enter, naming the node and the fix."""
    alpha = bg.Gamma(1.0, 0.1, plates=(3,), name="alpha")
    with pytest.raises(ValueError, match=r"'p'.*shape \(3,\).*\(4,\)"):
        bg.Dirichlet(alpha, plates=(5,), name="p").observe(np.full((5, 4), 0.25))
    with pytest.raises(ValueError, match="'p2'.*plates=\\(K,\\)"):
        bg.Dirichlet(bg.Gamma(1.0, 1.0, name="s"), name="p2")
    with pytest.raises(ValueError, match="K >= 2"):
        bg.Dirichlet(bg.Gamma(1.0, 1.0, plates=(1,), name="s1"), name="p3")
    with pytest.raises(TypeError, match="'p4': random concentrations must be a Gamma node"):
        bg.Dirichlet(bg.Normal(0.0, 1.0, plates=(3,), name="m"), name="p4")
    with pytest.raises(ValueError, match="Gamma 'a2': shape must be finite and > 0"):
        bg.Gamma(-1.0, 0.1, plates=(3,), name="a2")
    with pytest.raises(ValueError, match="shape must be > 0"):
        alpha.start_from(0.0, 1.0)
    with pytest.raises(ValueError, match="'p5'.*open simplex"):
        bg.Dirichlet(alpha, plates=(2,), name="p5").observe(np.array([[0.5, 0.5, 0.0]] * 2))
    p6 = bg.Dirichlet(alpha, plates=(2,), name="p6").observe(np.full((2, 3), 1 / 3))
    with pytest.raises(ValueError, match="'p6'.*use fit\\('ncvmp'\\)"):
        bg.Model(p6).fit("vmp")


def test_scalar_random_shape_and_concentration_as_point_masses_are_mles():
    """BayesPy's GammaShape is a maximum-likelihood shape: here a random Gamma shape, and
    a random Dirichlet scale s (concentrations s * base), as point masses with a flat
    Gamma(1, 1e-12) prior. The MLE written here (psi^-1 for the shape; scipy's brentq on
    the score for s) is a fixed point of the engine's update to 1e-12, and the fits reach
    it to 1e-6."""
    from scipy import optimize
    from scipy.special import digamma

    from blrgraph.families.gamma import Gamma as GammaFamily
    from blrgraph.inference.blr import blr_target
    rng = np.random.default_rng(8)
    N, b0, rate = 100, 1e-12, 2.0
    x_data = rng.gamma(3.0, 1.0 / rate, size=N)
    shape_mle = _invpsi(np.log(rate) + np.log(x_data).mean() - b0 / N)
    base = np.array([1.0, 2.0, 3.0])
    P = rng.dirichlet(4.0 * base, size=N)
    score = lambda c: (base * np.log(P).mean(0)).sum() + base.sum() * digamma(c * base.sum()) \
        - (base * digamma(c * base)).sum() - b0 / N                                     # noqa: E731
    scale_mle = optimize.brentq(score, 0.05, 100.0, xtol=1e-15, rtol=1e-15)
    for ref, build in ((shape_mle, lambda a: bg.Gamma(a, rate, plates=(N,), name="x").observe(x_data)),
                       (scale_mle, lambda s: bg.Dirichlet(base, concentration=s, plates=(N,),
                                                          name="p").observe(P))):
        a = bg.Gamma(1.0, b0, name="a").start_from(2.0, 2.0)
        model = bg.Model(build(a))
        res = model.fit("ncvmp", point=[a], tol=0, max_iter=500)
        assert res.converged and a.point
        np.testing.assert_allclose(a.posterior.point, ref, rtol=1e-6)
        a.set_natural((np.array(ref), np.array(-1.0)))
        np.testing.assert_allclose(GammaFamily().mode(blr_target(model, a)), ref, rtol=1e-12)


def test_zoo_lda_learns_alpha():
    """models/lda.py with learn_alpha=True: alpha is a vector of K random concentrations
    fitted by fit("ncvmp") with the zoo's options. On 400 documents from Dirichlet(0.2,
    0.5, 1.0) topic mixtures: the trace never decreases, the topics are recovered, and
    E[alpha_k] is within 3 posterior sds of Minka's MLE from the true mixtures; transform
    (the E-step of new documents) uses the learnt alpha and agrees with the fit's own
    document mixtures; fit("vmp") is refused, naming ncvmp."""
    from test_zoo import load, match
    lda = load("lda")
    rng = np.random.default_rng(3)
    k, v, n_docs = 3, 30, 400
    phi = np.full((k, v), 0.002)
    for t in range(k):
        phi[t, t * (v // k):(t + 1) * (v // k)] = 1.0
    phi /= phi.sum(1, keepdims=True)
    theta = rng.dirichlet([0.2, 0.5, 1.0], size=n_docs)
    import scipy.sparse as sp
    counts = sp.csr_matrix(np.array([rng.multinomial(60, theta[d] @ phi) for d in range(n_docs)]))
    model = lda.build(counts, k=3, learn_alpha=True)
    with pytest.raises(ValueError, match="ncvmp"):
        model.fit("vmp", seed=0, **model.meta["fit_options"])
    fitted = model.fit("ncvmp", seed=0, **model.meta["fit_options"])
    tr = fitted.elbo_trace
    assert fitted.converged and np.all(np.diff(tr) >= -1e-9 * np.abs(tr[1:]))
    est = lda.topic_word(fitted)
    p = match(est, phi)
    assert np.all(0.5 * np.abs(est[p] - phi).sum(1) < 0.1)
    ref = _minka_dirichlet_mle(np.log(theta).mean(0))
    q = model["alpha"].posterior
    assert np.all(np.abs(q.mean[p] - ref) < 3 * np.sqrt(q.var[p])), (q.mean[p], ref)
    new = lda.transform(fitted, counts[:50], tol=1e-8)
    assert np.mean(np.abs(new - lda.doc_topics(fitted).to_numpy()[:50])) < 1e-3


def test_dirichlet_alpha_counts_every_category_when_documents_equal_categories():
    """K documents and K categories, one document without words: every concentration
    alpha_k is still reached (its last plate axis is the category axis, not the
    documents'), so its prior and entropy count in the ELBO in full."""
    from scipy.special import digamma, gammaln
    rng = np.random.default_rng(9)
    K = 3
    alpha = bg.Gamma(2.0, 1.0, plates=(K,), name="alpha")
    theta = bg.Dirichlet(alpha, plates=(K,), name="theta")
    mask = np.ones((10, K), bool)
    mask[:, 0] = False
    z = bg.Categorical(theta, plates=(10, K), name="z").observe(rng.integers(0, K, (10, K)), mask=mask)
    bg.Model(z).fit("ncvmp", max_iter=5)
    assert alpha.observed_entries() is None
    post = alpha.posterior.params
    a, b = post["shape"], post["rate"]
    expected = np.sum((2.0 - 1.0) * (digamma(a) - np.log(b)) - a / b - gammaln(2.0)
                      + stats.gamma(a, scale=1.0 / b).entropy())
    np.testing.assert_allclose(alpha.elbo_term(), expected, rtol=1e-12)
