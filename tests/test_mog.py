"""fit("mog", components=K): q a mixture of K Gaussians (Lin, Khan & Schmidt 2019),
against a hand-written iteration of their step, the exact posterior of a Gaussian
target (one step, K = 1) and of a mixture target (the prior times a two-component
mixture is a two-component mixture in closed form; its variance also by quadrature)."""
import autograd.numpy as anp
import numpy as np
import pytest
from autograd.scipy.special import logsumexp as alogsumexp
from scipy import integrate
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

import blrgraph as bg

PI, MU, SD = np.array([0.35, 0.65]), np.array([-2.0, 2.5]), np.array([0.6, 0.8])
PRIOR_VAR = 9.0


def bimodal(x):                        # log of a two-mode mixture density; x () or (S,)
    c = anp.log(PI) - 0.5 * ((x[..., None] - MU) / SD) ** 2 - anp.log(SD) \
        - 0.5 * np.log(2 * np.pi)
    return alogsumexp(c, axis=-1)


def _bimodal_model():
    x = bg.Normal(0.0, 1.0 / PRIOR_VAR, name="x")
    return x, bg.Model(bg.Potential(bimodal, x, name="target"))


def _exact_bimodal():
    """The posterior N(0, 9) x mixture, a mixture in closed form: (weights, means, vars)."""
    var = 1.0 / (1.0 / SD ** 2 + 1.0 / PRIOR_VAR)
    mean = var * MU / SD ** 2
    logw = np.log(PI) - 0.5 * MU ** 2 / (SD ** 2 + PRIOR_VAR) - 0.5 * np.log(SD ** 2 + PRIOR_VAR)
    return np.exp(logw - logsumexp(logw)), mean, var


def _quadrature():
    dens = lambda t: np.exp(bimodal(np.array(t)) - 0.5 * t * t / PRIOR_VAR)   # noqa: E731
    Z = integrate.quad(dens, -40, 40, points=MU, limit=200)[0]
    m1 = integrate.quad(lambda t: t * dens(t), -40, 40, points=MU, limit=200)[0] / Z
    m2 = integrate.quad(lambda t: t * t * dens(t), -40, 40, points=MU, limit=200)[0] / Z
    return m1, m2 - m1 * m1, np.log(Z) - 0.5 * np.log(2 * np.pi * PRIOR_VAR)


def test_two_components_cover_both_modes_where_one_gaussian_locks_on_one():
    mean, var, log_z = _quadrature()
    x, model = _bimodal_model()
    fit = model.fit("mog", components=2, seed=1)
    q = x.posterior
    assert fit.converged
    assert q.var >= 0.75 * var                         # the target of issue 24
    assert abs(q.mean - mean) < 1e-3 and abs(q.var / var - 1) < 1e-3
    w, m, v = _exact_bimodal()                         # the components are the exact ones
    order = np.argsort(q.means)
    np.testing.assert_allclose(q.weights[order], w, rtol=1e-3)
    np.testing.assert_allclose(q.means[order], m, rtol=1e-3)
    np.testing.assert_allclose(q.covs[order], v, rtol=1e-3)
    assert abs(fit.elbo - log_z) < 1e-3                # the ELBO reaches log p(D)
    assert fit.objective == "elbo"
    x1, model1 = _bimodal_model()
    one = model1.fit("mog", components=1, seed=1)
    assert x1.posterior.var < 0.75 * var               # a single Gaussian: less than 3/4
    assert one.elbo < fit.elbo - 0.1


def test_one_component_one_step_is_the_exact_posterior_of_a_gaussian_target():
    """K = 1 on a quadratic log p: Stein's Hessian is exact with whitened draws, so the
    step with rho = 1 lands on the exact posterior (the conjugate answer)."""
    A = np.array([[2.0, 0.6], [0.6, 1.0]])
    b = np.array([1.0, -0.5])
    w = bg.MultivariateNormal(np.array([0.3, 0.0]), np.diag([0.5, 2.0]), name="w")
    model = bg.Model(bg.Potential(lambda v: -0.5 * anp.sum((v @ A) * v, -1) + v @ b, w,
                                  name="quad"))
    model.fit("mog", components=1, rho=1.0, max_iter=1, seed=0)
    P = A + np.diag([0.5, 2.0])
    cov = np.linalg.inv(P)
    np.testing.assert_allclose(w.posterior.cov, cov, rtol=1e-10)
    np.testing.assert_allclose(w.posterior.mean, cov @ (b + np.diag([0.5, 2.0]) @ [0.3, 0.0]),
                               rtol=1e-10)


# ---- the step against a hand-written iteration ------------------------------------------------
CENTRES = np.array([[-1.5, 0.5], [1.0, -1.0], [0.5, 2.0]])
SCALES = np.array([0.7, 1.0, 0.5])
LOGC = np.log([0.2, 0.5, 0.3])
PRIOR_MU, PRIOR_P = np.array([0.2, -0.1]), np.array([[0.4, 0.1], [0.1, 0.3]])


def target2(w):                       # w (2,) or (S, 2): a three-mode 2-D log-density
    d2 = anp.sum((w[..., None, :] - CENTRES) ** 2, axis=-1)
    return alogsumexp(LOGC - 0.5 * d2 / SCALES ** 2, axis=-1)


def target2_grad(w):                  # by hand
    d = w[None, :] - CENTRES
    c = LOGC - 0.5 * np.sum(d * d, 1) / SCALES ** 2
    r = np.exp(c - logsumexp(c))
    return -(r / SCALES ** 2) @ d


def hand_step(weights, means, covs, z, rho):
    """Lin, Khan & Schmidt (2019) eq. 10, written out draw by draw (scipy densities)."""
    K, S = len(weights), len(z)
    Ps = [np.linalg.inv(c) for c in covs]
    prior_cov = np.linalg.inv(PRIOR_P)

    def f_and_grad(w):
        comp = np.array([np.log(weights[j]) + multivariate_normal.logpdf(w, means[j], covs[j])
                         for j in range(K)])
        r = np.exp(comp - logsumexp(comp))
        glq = sum(-r[j] * Ps[j] @ (w - means[j]) for j in range(K))
        lp = float(target2(w)) + multivariate_normal.logpdf(w, PRIOR_MU, prior_cov)
        glp = target2_grad(w) - PRIOR_P @ (w - PRIOR_MU)
        return lp - logsumexp(comp), glp - glq

    a, new_m, new_c = np.log(weights), [], []
    for k in range(K):
        C = np.linalg.cholesky(covs[k])
        F, G, H = 0.0, np.zeros(2), np.zeros((2, 2))
        for s in range(S):
            w = means[k] + C @ z[s]
            f, g = f_and_grad(w)
            F, G, H = F + f / S, G + g / S, H + np.outer(g, w - means[k]) / S
        H = H @ Ps[k]
        P = Ps[k] - rho * 0.5 * (H + H.T)
        assert np.all(np.linalg.eigvalsh(P) > 0)      # no halving in this test
        new_m.append(means[k] + rho * np.linalg.solve(P, G))
        new_c.append(np.linalg.inv(P))
        a[k] += rho * F
    return np.exp(a - logsumexp(a)), np.array(new_m), np.array(new_c)


@pytest.mark.parametrize("K,rho", [(2, 0.2), (3, 0.5)])
def test_mog_iterates_equal_the_hand_written_step(K, rho):
    w = bg.MultivariateNormal(PRIOR_MU, PRIOR_P, name="w")
    model = bg.Model(bg.Potential(target2, w, name="target"))
    seen = []

    def keep(it, L):
        q = w.posterior
        seen.append((q.weights.copy(), q.means.copy(), q.covs.copy(), q.standard_draws))

    model.fit("mog", components=K, rho=rho, mc_samples=16, max_iter=6, seed=3, callback=keep)
    assert len(seen) == 6
    for t in range(5):
        weights, means, covs, z = seen[t]
        assert z.shape == (16, 2)
        want = hand_step(weights, means, covs, z, rho)
        for got, ref in zip(seen[t + 1][:3], want):
            np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_mixture_moments_and_posterior_methods():
    w = bg.MultivariateNormal(PRIOR_MU, PRIOR_P, name="w")
    model = bg.Model(bg.Potential(target2, w, name="target"))
    fit = model.fit("mog", components=3, seed=0, max_iter=50)
    q = w.posterior
    mean = q.weights @ q.means
    second = np.einsum("k,kij->ij", q.weights, q.covs + q.means[:, :, None] * q.means[:, None, :])
    np.testing.assert_allclose(q.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(q.cov, second - np.outer(mean, mean), rtol=1e-10)
    np.testing.assert_allclose(q.var, np.diag(q.cov), rtol=1e-12)
    x = np.array([[0.1, 0.2], [-1.0, 1.0]])
    ref = logsumexp([np.log(q.weights[k]) + multivariate_normal.logpdf(x, q.means[k], q.covs[k])
                     for k in range(3)], axis=0)
    np.testing.assert_allclose(q.logpdf(x), ref, rtol=1e-12)
    s = q.sample(20000, seed=0)
    assert s.shape == (20000, 2)
    assert np.all(np.abs(s.mean(0) - q.mean) < 5 * np.sqrt(np.diag(q.cov) / 20000))
    with pytest.raises(TypeError, match="mixture"):
        q.to_scipy()
    assert np.isfinite(fit.elbo)
    model.fit("ncvmp", max_iter=5)                     # another method: a Gaussian q again
    assert not hasattr(w.posterior, "weights")


def test_mog_refuses_what_it_cannot_fit():
    x, model = _bimodal_model()
    with pytest.raises(ValueError, match="components must be an integer >= 1"):
        model.fit("mog", components=0)
    with pytest.raises(ValueError, match="mc_samples must be an integer >= 2"):
        model.fit("mog", mc_samples=1)
    with pytest.raises(ValueError, match="restarts"):
        model.fit("mog", restarts=3)
    with pytest.raises(TypeError, match="components"):
        model.fit("ivon", components=2)
    X = np.random.default_rng(0).normal(size=(30, 2))
    y = (X[:, 0] > 0).astype(float)
    w = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="w")
    built = bg.Model(bg.Bernoulli(logits=bg.Dot(X, w), name="y").observe(y))
    with pytest.raises(ValueError, match="Potential"):
        built.fit("mog")


def test_mog_on_a_potential_with_data_matches_the_quadrature_variance():
    """y_i ~ N(t^2, 1): a posterior with modes at +-sqrt(mean y); the Potential's rows."""
    y = np.random.default_rng(0).normal(1.5, 1.0, size=40)

    def lik(t, y):
        return -0.5 * (y - t[..., None] ** 2) ** 2

    t = bg.Normal(0.0, 0.25, name="t")
    fit = bg.Model(bg.Potential(lik, t, data=(y,), name="lik")).fit("mog", seed=0)
    dens = lambda s: np.exp(np.sum(lik(np.array(s), y)) - 0.125 * s * s + 60)  # noqa: E731
    Z = integrate.quad(dens, -6, 6, points=[-1.2, 1.2])[0]
    var = integrate.quad(lambda s: s * s * dens(s), -6, 6, points=[-1.2, 1.2])[0] / Z
    assert fit.converged
    assert abs(t.posterior.var / var - 1) < 1e-3 and abs(t.posterior.mean) < 0.01
    np.testing.assert_allclose(t.posterior.weights, [0.5, 0.5], atol=0.01)   # by symmetry
    assert np.prod(t.posterior.means) < 0                     # one component on each mode


def test_saving_a_mixture_q_warns_that_the_checkpoint_keeps_its_gaussian(tmp_path):
    import autograd.numpy as anp
    from autograd.scipy.special import logsumexp

    def bimodal(x):
        c = anp.log(anp.array([0.35, 0.65])) - 0.5 * (
            (x[..., None] - anp.array([-2.0, 2.5])) / anp.array([0.6, 0.8])) ** 2
        return logsumexp(c, axis=-1)

    def build():
        x = bg.Normal(0.0, 1.0 / 9, name="x")
        return x, bg.Model(bg.Potential(bimodal, x, name="target"))

    x, m = build()
    m.fit("mog", components=2, seed=1)
    with pytest.warns(UserWarning, match="mixture q"):
        m.save(tmp_path / "mog.npz")
    x2, m2 = build()
    m2.load(tmp_path / "mog.npz")
    assert x2.posterior.mean == pytest.approx(x.posterior.mean, rel=1e-12)
    assert x2.posterior.var == pytest.approx(x.posterior.var, rel=1e-12)
