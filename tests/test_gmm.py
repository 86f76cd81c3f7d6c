"""Variational Bayesian Gaussian mixture (the example of docs/api.md) against independent
formulas (Bishop PRML §10.2, docs/math.md §3.4) and scikit-learn's
BayesianGaussianMixture (docs/math.md §7.1).

* the ELBO trace of fit("vmp") never decreases;
* fit.elbo equals the full Bishop 10.70-10.77 ELBO written in tests/helpers_vbgmm.py,
  evaluated at the fitted posterior parameters (after 1, 2, 5 sweeps and at convergence);
* clusters are recovered (ARI, means);
* the blrgraph ELBO is at least sklearn's (sklearn's fit converted to blrgraph's
  parameters and evaluated with the same function), and that function minus
  sklearn's lower_bound_ is docs/math.md §7.1's constant C;
* the mean-field variant (separate MultivariateNormal / Wishart nodes) is monotone,
  recovers the clusters, and its ELBO is below the joint Normal-Wishart one.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import BayesianGaussianMixture

import blrgraph as bg

from helpers_vbgmm import e_step, full_elbo, log_dirichlet_norm, log_wishart_B, m_step, sklearn_constant

K, D, N = 3, 2, 500
TRUE_MEANS = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0]])
TRUE_COVS = np.array([[[1.0, 0.3], [0.3, 0.8]], [[0.6, 0.0], [0.0, 1.2]], [[1.0, -0.4], [-0.4, 1.0]]])
# priors (the example of docs/api.md, with alpha0 != 1 so the Dirichlet constant matters)
ALPHA0, M0, BETA0, NU0, W0 = 2.0, np.array([1.0, 1.0]), 0.5, D + 2.0, 0.5 * np.eye(D)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(20240601)
    labels = rng.permutation(np.arange(N) % K)
    X = np.empty((N, D))
    for k in range(K):
        idx = labels == k
        X[idx] = rng.multivariate_normal(TRUE_MEANS[k], TRUE_COVS[k], size=idx.sum())
    return X, labels


def build_nw(X):
    w = bg.Dirichlet(ALPHA0 * np.ones(K), name="w")
    theta = bg.NormalWishart(M0, BETA0, NU0, W0, plates=(K,), name="theta")
    z = bg.Categorical(w, plates=(len(X),), name="z")
    y = bg.Mixture(z, bg.MultivariateNormal, theta, name="y").observe(X)
    return bg.Model(y), w, theta, z


def fit_nw(X, **kw):
    model, w, theta, z = build_nw(X)
    opts = dict(max_iter=500, tol=1e-12, seed=0, init="random")  # a start that has to climb
    opts.update(kw)
    fit = model.fit("vmp", **opts)
    return fit, w, theta, z


def blr_params(w, theta, z):
    P = theta.posterior.params
    return dict(r=z.posterior.mean, alpha=w.posterior.params["alpha"], m=P["mean"], beta=P["beta"],
                nu=P["dof"], W=P["scale"])


def elbo_at(X, p):
    return full_elbo(X, p["r"], p["alpha"], p["m"], p["beta"], p["nu"], p["W"],
                     ALPHA0, M0, BETA0, NU0, W0)


def assert_monotone(trace, rtol=1e-9):
    trace = np.asarray(trace)
    drops = trace[:-1] - trace[1:]
    assert np.all(drops <= rtol * np.abs(trace[1:])), f"ELBO decreased by up to {drops.max()}"


def matched(est_means):
    """Permutation of the fitted components that best matches TRUE_MEANS."""
    cost = np.linalg.norm(est_means[:, None, :] - TRUE_MEANS[None, :, :], axis=-1)
    rows, cols = linear_sum_assignment(cost)
    perm = np.empty(K, int)
    perm[cols] = rows
    return perm


@pytest.fixture(scope="module")
def nw_fit(data):
    X, _ = data
    fit, w, theta, z = fit_nw(X)
    return fit, blr_params(w, theta, z)


def sklearn_fit(X):
    sk = BayesianGaussianMixture(
        n_components=K, covariance_type="full",
        weight_concentration_prior_type="dirichlet_distribution", weight_concentration_prior=ALPHA0,
        mean_prior=M0, mean_precision_prior=BETA0, degrees_of_freedom_prior=NU0,
        covariance_prior=np.linalg.inv(W0), reg_covar=0.0, tol=1e-12, max_iter=5000,
        random_state=0)
    return sk.fit(X)


def sklearn_params(sk, X):
    """docs/math.md §7.1: covariances_ = W_k^{-1}/nu_k, mean_precision_ = beta_k, ..."""
    nu = sk.degrees_of_freedom_
    W = np.linalg.inv(sk.covariances_ * nu[:, None, None])
    return dict(r=sk.predict_proba(X), alpha=sk.weight_concentration_, m=sk.means_,
                beta=sk.mean_precision_, nu=nu, W=W)


# --------------------------------------------------------------------------------------------
def test_elbo_trace_is_monotone(nw_fit):
    fit, _ = nw_fit
    assert fit.method == "vmp"
    assert fit.converged
    assert fit.n_iter == len(fit.elbo_trace) > 3
    assert fit.elbo == fit.elbo_trace[-1]
    assert_monotone(fit.elbo_trace)
    assert fit.elbo_trace[-1] > fit.elbo_trace[0] + 1.0  # it did climb


def test_elbo_equals_bishop_full_elbo_at_convergence(data, nw_fit):
    X, _ = data
    fit, p = nw_fit
    np.testing.assert_allclose(fit.elbo, elbo_at(X, p), rtol=1e-8, atol=0)


@pytest.mark.parametrize("sweeps", [1, 2, 5])
def test_elbo_equals_bishop_full_elbo_before_convergence(data, sweeps):
    """Away from the optimum the collapsed form is wrong; the full form must still agree."""
    X, _ = data
    fit, w, theta, z = fit_nw(X, max_iter=sweeps)
    assert fit.n_iter == sweeps
    p = blr_params(w, theta, z)
    np.testing.assert_allclose(fit.elbo, elbo_at(X, p), rtol=1e-8, atol=0)


def test_posterior_is_one_bishop_step_from_the_responsibilities(data):
    """The schedule is w, theta (M-step on the previous r), then z (E-step):
    after n sweeps, (w, theta) = Bishop's M-step on the r after n-1 sweeps,
    and r = Bishop's E-step on those parameters."""
    X, _ = data
    fit1, w1, th1, z1 = fit_nw(X, max_iter=3)
    r_prev = z1.posterior.mean
    fit2, w2, th2, z2 = fit_nw(X, max_iter=4)
    p = blr_params(w2, th2, z2)
    alpha, m, beta, nu, W = m_step(X, r_prev, ALPHA0, M0, BETA0, NU0, W0)
    for a, b in [(p["alpha"], alpha), (p["m"], m), (p["beta"], beta), (p["nu"], nu), (p["W"], W)]:
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(p["r"], e_step(X, alpha, m, beta, nu, W), rtol=1e-8, atol=1e-12)
    np.testing.assert_array_equal(fit1.elbo_trace, fit2.elbo_trace[:3])


def test_clusters_recovered(data, nw_fit):
    X, labels = data
    _, p = nw_fit
    assert adjusted_rand_score(labels, p["r"].argmax(1)) == pytest.approx(1.0)
    perm = matched(p["m"])
    assert np.max(np.abs(p["m"][perm] - TRUE_MEANS)) < 0.2
    # E[Sigma] = W^{-1} / (nu - D - 1) close to the true covariances
    Sigma = np.linalg.inv(p["W"][perm]) / (p["nu"][perm] - D - 1)[:, None, None]
    assert np.max(np.abs(Sigma - TRUE_COVS)) < 0.25
    np.testing.assert_allclose(p["alpha"].sum(), K * ALPHA0 + N)


def test_at_least_sklearn_and_sklearn_constant(data, nw_fit):
    X, labels = data
    fit, p = nw_fit
    sk = sklearn_fit(X)
    assert sk.converged_
    q = sklearn_params(sk, X)
    L_sk = elbo_at(X, q)
    # blrgraph reaches at least sklearn's ELBO (the same optimum here)
    assert fit.elbo >= L_sk - 1e-9 * abs(L_sk)
    np.testing.assert_allclose(fit.elbo, L_sk, rtol=1e-9)
    # same clustering and parameters up to a relabelling
    perm = matched(p["m"])
    perm_sk = matched(q["m"])
    np.testing.assert_allclose(p["m"][perm], q["m"][perm_sk], atol=1e-6)
    np.testing.assert_allclose(p["nu"][perm], q["nu"][perm_sk], rtol=1e-6)
    # docs/math.md §7.1: full ELBO = lower_bound_ + C (sklearn converged, so its last E-step's
    # r and predict_proba's agree to first order and the ELBO to second order)
    C = sklearn_constant(N, D, K, ALPHA0, BETA0, NU0, W0)
    np.testing.assert_allclose(L_sk, sk.lower_bound_ + C, rtol=1e-9)


def test_sklearn_constant_exact_away_from_convergence(data):
    """The C relation holds exactly for any r when q(theta) is the M-step of r: compare
    sklearn's own M-step + lower bound with helpers' M-step + full ELBO after 2 blrgraph sweeps."""
    X, _ = data
    _, w, theta, z = fit_nw(X, max_iter=2)
    r = z.posterior.mean
    sk = BayesianGaussianMixture(
        n_components=K, covariance_type="full",
        weight_concentration_prior_type="dirichlet_distribution", weight_concentration_prior=ALPHA0,
        mean_prior=M0, mean_precision_prior=BETA0, degrees_of_freedom_prior=NU0,
        covariance_prior=np.linalg.inv(W0), reg_covar=0.0, max_iter=1, random_state=0)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk.fit(X)  # sets the priors and shapes; parameters are overwritten below
    log_r = np.log(r)
    sk._m_step(X, log_r)
    lb = sk._compute_lower_bound(log_r, None)
    alpha, m, beta, nu, W = m_step(X, r, ALPHA0, M0, BETA0, NU0, W0)
    np.testing.assert_allclose(sk.weight_concentration_, alpha, rtol=1e-12)
    np.testing.assert_allclose(sk.means_, m, rtol=1e-10, atol=1e-12)
    L = full_elbo(X, r, alpha, m, beta, nu, W, ALPHA0, M0, BETA0, NU0, W0)
    C = sklearn_constant(N, D, K, ALPHA0, BETA0, NU0, W0)
    np.testing.assert_allclose(L, lb + C, rtol=1e-10)
    # and equal to the collapsed form of docs/math.md §3.4
    Lc = (-np.sum(r * log_r) + log_dirichlet_norm(ALPHA0 * np.ones(K)) - log_dirichlet_norm(alpha)
          + np.sum(D / 2 * np.log(BETA0 / beta) + log_wishart_B(W0, NU0) - log_wishart_B(W, nu))
          - N * D / 2 * np.log(2 * np.pi))
    np.testing.assert_allclose(L, Lc, rtol=1e-10)


def test_seed_reproducible_and_seed_matters(data):
    X, _ = data
    f1, w1, t1, z1 = fit_nw(X, seed=3, max_iter=50)
    f2, w2, t2, z2 = fit_nw(X, seed=3, max_iter=50)
    np.testing.assert_array_equal(f1.elbo_trace, f2.elbo_trace)
    np.testing.assert_array_equal(z1.posterior.mean, z2.posterior.mean)
    np.testing.assert_array_equal(t1.posterior.params["scale"], t2.posterior.params["scale"])
    f3, _, _, z3 = fit_nw(X, seed=4, max_iter=50)
    assert f3.elbo_trace[0] != f1.elbo_trace[0]  # a different random start


# ---- mean-field variant -------------------------------------------------------------------
def build_mean_field(X, seed=0):
    """q(mu_k) q(Lam_k) with the same prior as the NW model: mu_k | Lam_k ~ N(m0, (beta0 Lam_k)^-1)
    needs beta0 = 1 to be expressible (precision = Lam itself), so BETA0 is replaced by 1 in both."""
    w = bg.Dirichlet(ALPHA0 * np.ones(K), name="w")
    Lam = bg.Wishart(NU0, W0, plates=(K,), name="Lam")
    mu = bg.MultivariateNormal(M0, Lam, plates=(K,), name="mu")
    z = bg.Categorical(w, plates=(len(X),), name="z")
    y = bg.Mixture(z, bg.MultivariateNormal, mu, Lam, name="y").observe(X)
    fit = bg.Model(y).fit("vmp", max_iter=500, tol=1e-12, seed=seed)
    return fit, mu, Lam, z


def test_mean_field_variant(data):
    X, labels = data
    fit, mu, Lam, z = build_mean_field(X)
    assert fit.converged
    assert_monotone(fit.elbo_trace)
    assert adjusted_rand_score(labels, z.posterior.mean.argmax(1)) == pytest.approx(1.0)
    m = mu.posterior.mean
    assert m.shape == (K, D)
    perm = matched(m)
    assert np.max(np.abs(m[perm] - TRUE_MEANS)) < 0.2
    # the joint NW model with the same prior (beta0 = 1): the mean-field q is a restriction
    # of the joint q, so its optimum is lower (strictly: q(mu, Lam) is correlated)
    w2 = bg.Dirichlet(ALPHA0 * np.ones(K), name="w")
    th = bg.NormalWishart(M0, 1.0, NU0, W0, plates=(K,), name="theta")
    z2 = bg.Categorical(w2, plates=(N,), name="z")
    y2 = bg.Mixture(z2, bg.MultivariateNormal, th, name="y").observe(X)
    fit_nw_ = bg.Model(y2).fit("vmp", max_iter=500, tol=1e-12, seed=0)
    # the same E[Lam] as the joint fit, up to the small mean-field bias (the prior's
    # (mu - m0) term inflates the covariances of clusters far from m0 in both)
    p_nw = blr_params(w2, th, z2)
    perm_nw = matched(p_nw["m"])
    np.testing.assert_allclose(Lam.posterior.mean[perm],
                               p_nw["nu"][perm_nw, None, None] * p_nw["W"][perm_nw], rtol=0.05, atol=0.02)
    assert fit.elbo < fit_nw_.elbo - 1e-3
    assert fit.elbo > fit_nw_.elbo - 1.0   # but close: the posteriors are very concentrated
    # and the joint model's ELBO is still the Bishop full ELBO with beta0 = 1
    p = blr_params(w2, th, z2)
    L = full_elbo(X, p["r"], p["alpha"], p["m"], p["beta"], p["nu"], p["W"], ALPHA0, M0, 1.0, NU0, W0)
    np.testing.assert_allclose(fit_nw_.elbo, L, rtol=1e-8)
