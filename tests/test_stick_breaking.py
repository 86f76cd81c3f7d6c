"""bg.StickBreaking: truncated Dirichlet-process weights (docs/math.md §3.6).

* its moments are E[log pi_k] = E[log v_k] + sum_{j<k} E[log(1 - v_j)] and its
  message to the sticks is (N_k, sum_{j>k} N_j) (a finite-difference gradient);
* the VB-GMM with StickBreaking(gamma, K, truncated=False) equals scikit-learn's
  BayesianGaussianMixture(weight_concentration_prior_type="dirichlet_process")
  iterate for iterate from the same responsibilities (sklearn's own E- and M-steps);
* the ELBO is the full ELBO with the Beta sticks' KL, monotone; unused components
  empty out; the truncated prior (v_K = 1) gives weights summing to 1.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import betaln, digamma
from sklearn.mixture import BayesianGaussianMixture

import blrgraph as bg

N, D, K = 300, 2, 6
MEANS = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
GAMMA, BETA0 = 0.5, 1.0


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    labels = np.arange(N) % 3
    return MEANS[labels] + rng.normal(size=(N, D)) * np.array([1.0, 0.7])


def build(X, truncated=False, k=K, gamma=GAMMA):
    m0 = X.mean(0)
    cov0 = np.cov(X.T)
    w = bg.StickBreaking(gamma, k, truncated=truncated, name="w")
    theta = bg.NormalWishart(m0, BETA0, float(D), np.linalg.inv(cov0), plates=(k,), name="theta")
    z = bg.Categorical(w, plates=(len(X),), name="z")
    x = bg.Mixture(z, bg.MultivariateNormal, theta, name="x").observe(X)
    return bg.Model(x), w, theta, z


def start(n, k, seed=3):
    return np.random.default_rng(seed).dirichlet(np.ones(k), size=n)


def sklearn_iterates(X, R0, n_iter, k=K, gamma=GAMMA):
    """scikit-learn's own steps from responsibilities R0: after n_iter iterations the
    parameters are M(r_{n_iter-1}) and r_{n_iter} = E(M(r_{n_iter-1}))."""
    sk = BayesianGaussianMixture(n_components=k, covariance_type="full",
                                 weight_concentration_prior_type="dirichlet_process",
                                 weight_concentration_prior=gamma, mean_precision_prior=BETA0,
                                 reg_covar=0.0, max_iter=1, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk.fit(X)                      # sets the priors; the state is replaced below
    sk._initialize(X, R0)
    for _ in range(n_iter - 1):
        _, log_resp = sk._e_step(X)
        sk._m_step(X, log_resp)
    _, log_resp = sk._e_step(X)
    return sk, np.exp(log_resp)


def test_moments_and_message_are_the_stick_breaking_formulas():
    w = bg.StickBreaking(2.0, 4, name="w")
    a, b = np.array([1.5, 2.0, 3.0]), np.array([2.5, 1.2, 0.7])
    w.sticks.set_natural((a - 1, b - 1))
    elv, el1mv = digamma(a) - digamma(a + b), digamma(b) - digamma(a + b)
    want = np.array([elv[0], elv[1] + el1mv[0], elv[2] + el1mv[:2].sum(), el1mv.sum()])
    np.testing.assert_allclose(w.moments()[0], want, rtol=1e-14)
    # the message is the gradient of sum_k c_k E[log pi_k] in the sticks' mean parameters
    c = np.array([3.0, 1.0, 4.0, 1.5])
    m1, m2 = w.backward((c,), w.sticks)
    np.testing.assert_allclose(m1, c[:3])
    np.testing.assert_allclose(m2, [c[1:].sum(), c[2:].sum(), c[3:].sum()])


@pytest.mark.parametrize("n_iter", [1, 2, 5, 30])
def test_equals_sklearn_dirichlet_process_iterates(data, n_iter):
    X = data
    R0 = start(len(X), K)
    model, w, theta, z = build(X)
    model.fit("vmp", init=R0, max_iter=n_iter, tol=0.0)
    sk, r = sklearn_iterates(X, R0, n_iter)
    a, b = sk.weight_concentration_
    p = w.posterior.params
    np.testing.assert_allclose(p["a"], a, rtol=1e-10)
    np.testing.assert_allclose(p["b"], b, rtol=1e-10)
    P = theta.posterior.params
    np.testing.assert_allclose(P["mean"], sk.means_, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(P["beta"], sk.mean_precision_, rtol=1e-10)
    np.testing.assert_allclose(P["dof"], sk.degrees_of_freedom_, rtol=1e-10)
    np.testing.assert_allclose(np.linalg.inv(P["scale"]) / P["dof"][:, None, None], sk.covariances_,
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(z.posterior.mean, r, rtol=1e-10, atol=1e-12)


def beta_kl(a1, b1, a0, b0):
    return (betaln(a0, b0) - betaln(a1, b1) + (a1 - a0) * digamma(a1) + (b1 - b0) * digamma(b1)
            + (a0 - a1 + b0 - b1) * digamma(a1 + b1))


def test_elbo_has_the_sticks_kl_and_is_monotone(data):
    """The ELBO of the DP mixture minus that of the same mixture with the weights fixed at
    exp(E[log pi]) (a constant Categorical parent) is -KL(q(v) || p(v)) + the difference of
    the assignments' E[log pi] terms, which are equal: so it is -KL of the sticks."""
    X = data
    model, w, theta, z = build(X)
    fit = model.fit("vmp", init=start(len(X), K), max_iter=200, tol=1e-12)
    trace = np.asarray(fit.elbo_trace)
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
    p = w.posterior.params
    kl = beta_kl(p["a"], p["b"], 1.0, GAMMA).sum()
    terms = {n.name: n.elbo_term() for n in model.latent if n.name == "w.sticks"}
    np.testing.assert_allclose(terms["w.sticks"], -kl, rtol=1e-12)


def test_unused_components_empty_out(data):
    X = data
    model, w, theta, z = build(X, truncated=True, k=10)
    model.fit("vmp", seed=0, init="kmeans++", max_iter=500, tol=1e-10)
    n_k = z.posterior.mean.sum(0)
    weights = w.posterior.mean
    np.testing.assert_allclose(weights.sum(), 1.0, rtol=1e-12)
    p = w.posterior.params                          # E[pi_k] = E[v_k] prod_{j<k} E[1 - v_j]
    ev = p["a"] / (p["a"] + p["b"])
    np.testing.assert_allclose(weights[:-1], ev * np.concatenate([[1.0], np.cumprod(1 - ev)[:-1]]),
                               rtol=1e-13)
    assert np.sum(n_k > 1.0) == 3                   # three clusters carry the data
    assert np.sort(n_k)[:-3].sum() < 0.5            # the other seven carry less than half a row
    assert np.sort(weights)[:-3].sum() < 0.02       # and keep about their prior mass, gamma / N each


def test_refuses_bad_arguments():
    with pytest.raises(ValueError, match="gamma"):
        bg.StickBreaking(0.0, 3, name="w")
    with pytest.raises(ValueError, match="K must be"):
        bg.StickBreaking(1.0, 0, name="w")
    with pytest.raises(ValueError, match="K >= 2"):
        bg.StickBreaking(1.0, 1, name="w")
