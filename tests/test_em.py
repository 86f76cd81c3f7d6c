"""EM as the BLR with point masses (docs/math.md §5; the "em" row of docs/math.md §1.3).

* every single conjugate pair fitted by fit("em") lands on the closed-form posterior
  mode (blrgraph.closed_form posteriors + docs/math.md §5's mode table), and the reported
  objective is log p(data | point) + log p(point), written with scipy.stats;
* a Gaussian mixture with near-flat priors (mean-field point masses mu, Lambda)
  reaches scikit-learn GaussianMixture's maximum likelihood;
* a Poisson mixture equals a hand-written MAP-EM iterate by iterate, started from the
  same responsibilities, and its objective equals the hand EM's log joint;
* the EM objective never decreases (several models);
* point= with "vmp" (variational EM), "svi" (online EM) and "ncvmp";
* which nodes are point masses by default (the data axis, gathers, mixtures).
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import linear_sum_assignment
from scipy.special import logsumexp

import blrgraph as bg
from blrgraph import closed_form as cf


def close(a, b, tol=1e-9):
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def monotone(trace, rel=1e-10):
    """No decrease beyond round-off (relative to the objective's size)."""
    trace = np.asarray(trace)
    drops = trace[:-1] - trace[1:]
    return np.all(drops <= rel * np.maximum(1.0, np.abs(trace[1:])))


def random_spd(rng, D, scale=1.0):
    A = rng.normal(size=(D, D))
    return scale * (A @ A.T / D + 0.5 * np.eye(D))


# ---------------------------------------------------------------------------
# single conjugate pairs: fit("em") = closed-form posterior mode
# ---------------------------------------------------------------------------
RNG = np.random.default_rng(7)
N = 40
D = 3
M0 = np.array([0.5, -1.0, 2.0])
P0 = random_spd(RNG, D, 0.3)
P = random_spd(RNG, D, 2.0)
W0 = random_spd(RNG, D, 0.4)
XV = RNG.multivariate_normal([1.0, 0.0, -1.0], np.linalg.inv(P), size=N)
XS = RNG.normal(1.5, 0.7, size=N)


def _beta_bernoulli():
    x = (RNG.random(N) < 0.3).astype(float)
    p = bg.Beta(2.5, 3.0, name="p")
    bg.Bernoulli(p, plates=(N,), name="x").observe(x)
    post = cf.beta_bernoulli(x, 2.5, 3.0).params
    a, b = post["a"], post["b"]
    mode = (a - 1) / (a + b - 2)
    logjoint = lambda v: stats.bernoulli.logpmf(x, v).sum() + stats.beta.logpdf(v, 2.5, 3.0)
    return p, mode, logjoint


def _beta_binomial():
    n = np.full(N, 7)
    x = RNG.binomial(n, 0.6).astype(float)
    p = bg.Beta(1.5, 2.0, name="p")
    bg.Binomial(n, p, name="x").observe(x)
    post = cf.beta_binomial(x, n, 1.5, 2.0).params
    a, b = post["a"], post["b"]
    logjoint = lambda v: stats.binom.logpmf(x, n, v).sum() + stats.beta.logpdf(v, 1.5, 2.0)
    return p, (a - 1) / (a + b - 2), logjoint


def _gamma_poisson():
    x = RNG.poisson(3.2, size=N).astype(float)
    rate = bg.Gamma(2.0, 0.5, name="rate")
    bg.Poisson(rate, plates=(N,), name="x").observe(x)
    post = cf.gamma_poisson(x, 2.0, 0.5).params
    mode = (post["shape"] - 1) / post["rate"]
    logjoint = lambda v: stats.poisson.logpmf(x, v).sum() + stats.gamma.logpdf(v, 2.0, scale=2.0)
    return rate, mode, logjoint


def _gamma_exponential():
    x = RNG.exponential(0.5, size=N)
    rate = bg.Gamma(3.0, 1.5, name="rate")
    bg.Exponential(rate, plates=(N,), name="x").observe(x)
    post = cf.gamma_exponential(x, 3.0, 1.5).params
    logjoint = lambda v: stats.expon.logpdf(x, scale=1 / v).sum() + stats.gamma.logpdf(v, 3.0, scale=1 / 1.5)
    return rate, (post["shape"] - 1) / post["rate"], logjoint


def _dirichlet_categorical():
    alpha = np.array([2.0, 3.0, 1.5, 1.2])
    x = RNG.choice(4, size=N, p=[0.1, 0.4, 0.3, 0.2])
    p = bg.Dirichlet(alpha, name="p")
    bg.Categorical(p, plates=(N,), name="x").observe(x)
    a = cf.dirichlet_categorical(x, alpha).params["alpha"]
    mode = (a - 1) / (a.sum() - len(a))
    logjoint = lambda v: np.log(v[x]).sum() + stats.dirichlet.logpdf(v, alpha)
    return p, mode, logjoint


def _dirichlet_multinomial():
    alpha = np.array([1.5, 2.0, 4.0])
    n = np.full(N, 5)
    counts = np.stack([RNG.multinomial(5, [0.2, 0.3, 0.5]) for _ in range(N)]).astype(float)
    p = bg.Dirichlet(alpha, name="p")
    bg.Multinomial(n, p, plates=(N,), name="x").observe(counts)
    a = cf.dirichlet_multinomial(counts, alpha).params["alpha"]
    logjoint = lambda v: stats.multinomial.logpmf(counts, 5, v).sum() + stats.dirichlet.logpdf(v, alpha)
    return p, (a - 1) / (a.sum() - len(a)), logjoint


def _normal_known_precision():
    mu = bg.Normal(1.0, 0.5, name="mu")
    bg.Normal(mu, 2.0, plates=(N,), name="x").observe(XS)
    mode = cf.normal_known_precision(XS, 1.0, 0.5, 2.0).params["mean"]
    logjoint = lambda v: (stats.norm.logpdf(XS, v, 1 / np.sqrt(2.0)).sum()
                          + stats.norm.logpdf(v, 1.0, 1 / np.sqrt(0.5)))
    return mu, mode, logjoint


def _gamma_known_mean():
    tau = bg.Gamma(3.0, 2.0, name="tau")
    bg.Normal(1.2, tau, plates=(N,), name="x").observe(XS)
    post = cf.gamma_known_mean(XS, 1.2, 3.0, 2.0).params
    mode = (post["shape"] - 1) / post["rate"]
    logjoint = lambda v: (stats.norm.logpdf(XS, 1.2, 1 / np.sqrt(v)).sum()
                          + stats.gamma.logpdf(v, 3.0, scale=0.5))
    return tau, mode, logjoint


def _wishart_known_mean():
    mean = np.array([1.0, 0.2, -0.8])
    L = bg.Wishart(D + 2.5, W0, name="L")
    bg.MultivariateNormal(mean, L, plates=(N,), name="x").observe(XV)
    post = cf.wishart_known_mean(XV, mean, D + 2.5, W0).params
    mode = (post["dof"] - D - 1) * post["scale"]
    logjoint = lambda v: (stats.multivariate_normal(mean, np.linalg.inv(v)).logpdf(XV).sum()
                          + stats.wishart(df=D + 2.5, scale=W0).logpdf(v))
    return L, mode, logjoint


def _mvn_mean():
    mu = bg.MultivariateNormal(M0, P0, name="mu")
    bg.MultivariateNormal(mu, P, plates=(N,), name="x").observe(XV)
    mode = cf.mvn_known_precision(XV, M0, P0, P).params["mean"]
    logjoint = lambda v: (stats.multivariate_normal(v, np.linalg.inv(P)).logpdf(XV).sum()
                          + stats.multivariate_normal(M0, np.linalg.inv(P0)).logpdf(v))
    return mu, mode, logjoint


def _normal_gamma():
    theta = bg.NormalGamma(0.5, 2.0, 3.0, 1.5, name="theta")
    bg.Normal(theta, plates=(N,), name="x").observe(XS)
    post = cf.normal_gamma(XS, 0.5, 2.0, 3.0, 1.5).params
    mode = (post["mean"], (post["shape"] - 0.5) / post["rate"])

    def logjoint(v):
        m, t = v
        return (stats.norm.logpdf(XS, m, 1 / np.sqrt(t)).sum()
                + stats.norm.logpdf(m, 0.5, 1 / np.sqrt(2.0 * t)) + stats.gamma.logpdf(t, 3.0, scale=1 / 1.5))
    return theta, mode, logjoint


def _normal_wishart():
    theta = bg.NormalWishart(M0, 0.7, D + 1.5, W0, name="theta")
    bg.MultivariateNormal(theta, plates=(N,), name="x").observe(XV)
    post = cf.normal_wishart(XV, M0, 0.7, D + 1.5, W0).params
    mode = (post["mean"], (post["dof"] - D) * post["scale"])  # joint mode, not (nu - D - 1) W

    def logjoint(v):
        m, L = v
        return (stats.multivariate_normal(m, np.linalg.inv(L)).logpdf(XV).sum()
                + stats.multivariate_normal(M0, np.linalg.inv(0.7 * L)).logpdf(m)
                + stats.wishart(df=D + 1.5, scale=W0).logpdf(L))
    return theta, mode, logjoint


PAIRS = {
    "beta-bernoulli": _beta_bernoulli,
    "beta-binomial": _beta_binomial,
    "gamma-poisson": _gamma_poisson,
    "gamma-exponential": _gamma_exponential,
    "dirichlet-categorical": _dirichlet_categorical,
    "dirichlet-multinomial": _dirichlet_multinomial,
    "normal-mean-known-precision": _normal_known_precision,
    "gamma-precision-known-mean": _gamma_known_mean,
    "wishart-known-mean": _wishart_known_mean,
    "mvn-mean": _mvn_mean,
    "normal-gamma": _normal_gamma,
    "normal-wishart": _normal_wishart,
}


def _assert_point(got, expected, tol=1e-9):
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            close(g, e, tol)
    else:
        close(got, expected, tol)


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_single_pair_is_the_closed_form_mode(pair):
    node, mode, logjoint = PAIRS[pair]()
    res = bg.Model(*node.children).fit("em")
    assert res.method == "em" and res.objective == "em_bound"
    post = node.posterior
    assert post.is_point
    _assert_point(post.mean, mode)   # a point mass's mean is the point
    _assert_point(post.point, mode)
    # the objective: log p(data | point) + log p(point), nothing else (no entropy)
    close(res.elbo, logjoint(post.point), 1e-8)
    # one sweep is the exact M-step; the second only confirms it
    assert res.converged and res.n_iter <= 2


def test_point_mass_posterior_interface():
    node, mode, _ = _gamma_poisson()
    bg.Model(*node.children).fit("em")
    post = node.posterior
    close(post.var, 0.0)
    close(post.mean_params[0], np.log(mode))  # T at the point: (log x, x)
    close(post.mean_params[1], mode)
    with pytest.raises(TypeError, match="point mass"):
        post.to_scipy()


def test_point_masses_are_the_map_of_log_joint_numerically():
    """Independent of the mode table: maximise the scipy log joint numerically."""
    from scipy.optimize import minimize_scalar
    for make in (_gamma_poisson, _gamma_known_mean, _beta_bernoulli):
        node, _, logjoint = make()
        bg.Model(*node.children).fit("em")
        hi = 1.0 if make is _beta_bernoulli else 50.0
        opt = minimize_scalar(lambda v: -logjoint(v), bounds=(1e-9, hi - 1e-9), method="bounded",
                              options={"xatol": 1e-12})
        close(node.posterior.point, opt.x, 1e-6)


# ---------------------------------------------------------------------------
# Gaussian mixture: EM with near-flat priors = maximum likelihood (sklearn)
# ---------------------------------------------------------------------------
GK, GD, GN = 3, 2, 450
G_MEANS = np.array([[0.0, 0.0], [7.0, 1.0], [1.0, 7.0]])
G_COVS = np.array([[[1.0, 0.4], [0.4, 0.8]], [[0.6, -0.2], [-0.2, 1.3]], [[1.5, 0.0], [0.0, 0.5]]])
G_WEIGHTS = np.array([0.5, 0.3, 0.2])


@pytest.fixture(scope="module")
def gmm_data():
    rng = np.random.default_rng(11)
    lab = rng.choice(GK, size=GN, p=G_WEIGHTS)
    X = np.empty((GN, GD))
    for k in range(GK):
        X[lab == k] = rng.multivariate_normal(G_MEANS[k], G_COVS[k], size=(lab == k).sum())
    return X


def build_gmm(X, K=GK):
    """Near-flat priors, mean-field components: MAP ~ ML."""
    N, D = X.shape
    w = bg.Dirichlet(np.ones(K), name="w")
    mu = bg.MultivariateNormal(np.zeros(D), 1e-8 * np.eye(D), plates=(K,), name="mu")
    Lam = bg.Wishart(D + 1, 1e8 * np.eye(D), plates=(K,), name="Lam")
    z = bg.Categorical(w, plates=(N,), name="z")
    y = bg.Mixture(z, bg.MultivariateNormal, mu, Lam, name="y").observe(X)
    return bg.Model(y), w, mu, Lam, z


def gmm_mean_loglik(X, W, M, L):
    lp = np.stack([np.log(W[k]) + stats.multivariate_normal(M[k], np.linalg.inv(L[k])).logpdf(X)
                   for k in range(len(W))], axis=1)
    return logsumexp(lp, axis=1).mean()


def gmm_log_prior(W, M, L):
    D = M.shape[-1]
    lp = stats.dirichlet.logpdf(W, np.ones(len(W)))
    for m, l in zip(M, L):
        lp += stats.multivariate_normal(np.zeros(D), 1e8 * np.eye(D)).logpdf(m)
        lp += stats.wishart(df=D + 1, scale=1e8 * np.eye(D)).logpdf(l)
    return lp


def test_wishart_with_plates_and_fixed_params():
    Lam = bg.Wishart(3, 1e8 * np.eye(2), plates=(4,), name="Lam")
    assert Lam.plates == (4,)
    assert Lam.nat[0].shape == (4, 2, 2) and Lam.nat[1].shape == (4,)
    close(Lam.family.mode(Lam.nat), np.zeros((4, 2, 2)))  # (nu - D - 1) W = 0: the boundary


def test_gmm_em_reaches_sklearn_maximum_likelihood(gmm_data):
    from sklearn.mixture import GaussianMixture
    X = gmm_data
    sk = GaussianMixture(GK, covariance_type="full", tol=1e-12, max_iter=5000, n_init=3,
                         reg_covar=1e-9, random_state=0).fit(X)
    sk_ll = sk.score(X)
    best = None
    for seed in range(4):
        model, w, mu, Lam, z = build_gmm(X)
        res = model.fit("em", seed=seed, init="random", max_iter=5000, tol=1e-13)
        assert monotone(res.elbo_trace)
        W, M, L = w.posterior.point, mu.posterior.point, Lam.posterior.point
        ll = gmm_mean_loglik(X, W, M, L)
        # the objective is the bound on log p(X, points), tight after the E-step
        close(res.elbo, GN * ll + gmm_log_prior(W, M, L), 1e-7)
        if best is None or ll > best[0]:
            best = (ll, W, M, L)
    ll, W, M, L = best
    assert abs(ll - sk_ll) < 1e-4, (ll, sk_ll)
    # and the same parameters, up to relabelling
    cost = ((M[:, None, :] - sk.means_[None]) ** 2).sum(-1)
    _, perm = linear_sum_assignment(cost)
    close(W, sk.weights_[perm], 1e-4)
    close(M, sk.means_[perm], 1e-4)
    close(np.linalg.inv(L), sk.covariances_[perm], 1e-4)


def test_gmm_map_step_is_ml_up_to_the_prior(gmm_data):
    """Given responsibilities, the M-step for the near-flat priors: w = N_k/N,
    mu = (N_k Lam + 1e-8 I)^-1 Lam sum r x (= weighted mean), Lam^-1 = (S_k + 1e-8 I)/N_k."""
    X = gmm_data
    model, w, mu, Lam, z = build_gmm(X)
    model.fit("em", seed=3, init="random", max_iter=1)
    r = np.random.default_rng(3).dirichlet(np.ones(GK), size=GN)  # the initial responsibilities
    Nk = r.sum(0)
    close(w.posterior.point, Nk / GN, 1e-12)
    xbar = r.T @ X / Nk[:, None]
    close(mu.posterior.point, xbar, 1e-6)
    for k in range(GK):
        d = X - mu.posterior.point[k]
        S = (r[:, k, None] * d).T @ d
        close(np.linalg.inv(Lam.posterior.point[k]), (S + 1e-8 * np.eye(GD)) / Nk[k], 1e-9)


def test_gmm_kmeanspp_init(gmm_data):
    X = gmm_data
    from sklearn.mixture import GaussianMixture
    sk_ll = GaussianMixture(GK, tol=1e-12, max_iter=5000, n_init=3, reg_covar=1e-9,
                            random_state=0).fit(X).score(X)
    lls = []
    for seed in range(3):
        model, w, mu, Lam, z = build_gmm(X)
        res = model.fit("em", seed=seed, init="kmeans++", max_iter=5000, tol=1e-13)
        assert monotone(res.elbo_trace)
        lls.append(gmm_mean_loglik(X, w.posterior.point, mu.posterior.point, Lam.posterior.point))
    assert abs(max(lls) - sk_ll) < 1e-4
    # reproducible with the seed
    m1 = build_gmm(X)
    m1[0].fit("em", seed=5, init="kmeans++", max_iter=3)
    m2 = build_gmm(X)
    m2[0].fit("em", seed=5, init="kmeans++", max_iter=3)
    close(m1[2].posterior.point, m2[2].posterior.point, 0.0)
    with pytest.raises(ValueError, match="init"):
        build_gmm(X)[0].fit("em", init="kmeans+")


def test_em_default_init_is_kmeans(gmm_data):
    """A mixture over data starts from k-means (k-means++ seeds, then Lloyd's iterations
    to convergence), whatever the method (docs/em.md measures why); with point masses the
    one-hot responsibilities keep 1e-3 spread over the components (no MAP on a boundary)."""
    from blrgraph.inference.starts import SOFT, kmeans_responsibilities
    X = gmm_data
    a, b = build_gmm(X), build_gmm(X)
    a[0].fit("em", seed=4, max_iter=1)
    r = kmeans_responsibilities(b[0], b[4], GK, np.random.default_rng(4))
    b[0].fit("em", seed=4, init=(1 - SOFT) * r + SOFT / GK, max_iter=1)
    close(a[2].posterior.point, b[2].posterior.point, 1e-12)
    c = build_gmm(X)
    c[0].fit("em", seed=4, init="random", max_iter=1)
    assert not np.allclose(a[2].posterior.point, c[2].posterior.point)


def test_em_default_init_falls_back_to_random_where_kmeanspp_cannot_seed():
    """A mixture whose draws are latent (observed through noise) has no data to seed
    k-means++ from: the default falls back to random responsibilities, an explicit
    init="kmeans++" is refused."""
    rng = np.random.default_rng(0)
    data = np.concatenate([rng.normal(-3, 1, 60), rng.normal(3, 1, 60)])

    def build():
        w = bg.Dirichlet(2.0 * np.ones(2), name="w")
        mu = bg.Normal(0.0, 0.01, plates=(2,), name="mu")
        z = bg.Categorical(w, plates=(120,), name="z")
        x = bg.Mixture(z, bg.Normal, mu, 1.0, name="x")
        y = bg.Normal(x, 100.0, name="y").observe(data)
        return bg.Model(y), mu, z

    model, mu, z = build()
    res = model.fit("em", seed=1, max_iter=300, tol=1e-12)
    assert monotone(res.elbo_trace)
    assert {n.name for n in model.latent if n.posterior.is_point} == {"w", "mu"}
    model2, mu2, _ = build()
    model2.fit("em", seed=1, init="random", max_iter=300, tol=1e-12)
    close(mu.posterior.point, mu2.posterior.point, 0.0)
    with pytest.raises(ValueError, match="kmeans"):
        build()[0].fit("em", init="kmeans++")


def test_kmeanspp_first_iterate_is_a_voronoi_m_step(gmm_data):
    """kmeans++: one-hot responsibilities to the nearest seed; the first M-step's
    weights are then the Voronoi cell sizes over N and every cell is non-empty."""
    X = gmm_data
    model, w, mu, Lam, z = build_gmm(X)
    model.fit("em", seed=1, init="kmeans++", max_iter=1)
    W = w.posterior.point
    assert np.all(W > 0)
    close(W * GN, np.round(W * GN), 1e-9)


# ---------------------------------------------------------------------------
# Poisson mixture: blrgraph EM = hand-written MAP-EM, iterate by iterate
# ---------------------------------------------------------------------------
PK, PN = 3, 300
A0, B0, ALPHA = 1.5, 0.1, 1.2  # Gamma(A0, B0) rates, Dirichlet(ALPHA) weights: a true MAP


@pytest.fixture(scope="module")
def poisson_data():
    rng = np.random.default_rng(5)
    lab = rng.choice(PK, size=PN, p=[0.3, 0.5, 0.2])
    return rng.poisson(np.array([1.0, 6.0, 15.0])[lab]).astype(float)


def build_poisson_mixture(x, K=PK):
    w = bg.Dirichlet(ALPHA * np.ones(K), name="w")
    rate = bg.Gamma(A0, B0, plates=(K,), name="rate")
    z = bg.Categorical(w, plates=(len(x),), name="z")
    y = bg.Mixture(z, bg.Poisson, rate, name="y").observe(x)
    return bg.Model(y), w, rate, z


def hand_em(x, r, n_iter, K=PK):
    """MAP-EM written from the book: M-step with the Dirichlet/Gamma mode formulas,
    E-step p(z | x, w, rate). Returns [(w, rate, r, log joint)] per iteration."""
    out = []
    for _ in range(n_iter):
        Nk = r.sum(0)
        w = (Nk + ALPHA - 1) / (len(x) + K * ALPHA - K)
        rate = (A0 - 1 + r.T @ x) / (B0 + Nk)
        logp = np.log(w) + stats.poisson.logpmf(x[:, None], rate)
        lse = logsumexp(logp, axis=1)
        r = np.exp(logp - lse[:, None])
        logjoint = (lse.sum() + stats.dirichlet.logpdf(w, ALPHA * np.ones(K))
                    + stats.gamma.logpdf(rate, A0, scale=1 / B0).sum())
        out.append((w, rate, r, logjoint))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poisson_mixture_equals_hand_em_iterate_by_iterate(poisson_data, seed):
    x = poisson_data
    model, w, rate, z = build_poisson_mixture(x)
    got = []

    def cb(it, obj):
        got.append((w.posterior.point.copy(), rate.posterior.point.copy(),
                    z.posterior.mean.copy(), obj))

    res = model.fit("em", seed=seed, init="random", max_iter=60, tol=0.0, callback=cb)
    n_iter = res.n_iter  # tol=0 stops only when the objective repeats exactly
    assert n_iter == len(got) and n_iter >= 30
    r0 = np.random.default_rng(seed).dirichlet(np.ones(PK), size=(PN,))  # fit.initialize's draw
    want = hand_em(x, r0, n_iter)
    for t, ((w1, l1, r1, f1), (w2, l2, r2, f2)) in enumerate(zip(got, want)):
        close(w1, w2, 1e-10)
        close(l1, l2, 1e-10)
        close(r1, r2, 1e-10)
        close(f1, f2, 1e-10)  # the objective = log p(x, w, rate) after the E-step
    assert monotone(res.elbo_trace)
    # it is a real fit: the three rates are recovered
    close(np.sort(rate.posterior.point), [1.0, 6.0, 15.0], 0.6)


def test_boundary_point_raises_naming_the_node():
    """A component that empties out with a Gamma(1, .) prior gets the rate mode 0
    (log 0 = -inf): the fit stops with an error naming that point mass."""
    x = np.random.default_rng(0).poisson(3.0, size=30).astype(float)
    w = bg.Dirichlet(np.ones(6), name="w")
    rate = bg.Gamma(1.0, 0.1, plates=(6,), name="rate")
    z = bg.Categorical(w, plates=(30,), name="z")
    y = bg.Mixture(z, bg.Poisson, rate, name="y").observe(x)
    with pytest.raises(FloatingPointError, match="point mass Gamma 'rate'.*boundary"):
        bg.Model(y).fit("em", seed=0, max_iter=3000, tol=1e-14, init="kmeans++")


def test_poisson_mixture_default_points(poisson_data):
    model, w, rate, z = build_poisson_mixture(poisson_data)
    model.fit("em", seed=0, max_iter=2)
    assert w.posterior.is_point and rate.posterior.is_point
    assert not z.posterior.is_point
    close(z.posterior.mean.sum(-1), 1.0)


# ---------------------------------------------------------------------------
# the EM objective never decreases
# ---------------------------------------------------------------------------
def _m_gmm(rng):
    X = np.concatenate([rng.normal(0, 1, (80, 2)), rng.normal(4, 0.7, (60, 2))])
    return build_gmm(X, 2)[0]


def _m_poisson(rng):
    x = rng.poisson(np.where(rng.random(200) < 0.4, 2.0, 9.0)).astype(float)
    return build_poisson_mixture(x, 2)[0]


def _m_bernoulli_mixture(rng):
    N, M, K = 150, 6, 2
    proto = np.array([[0.9] * 3 + [0.1] * 3, [0.1] * 3 + [0.9] * 3])
    lab = rng.integers(K, size=N)
    X = (rng.random((N, M)) < proto[lab]).astype(float)
    w = bg.Dirichlet(2.0 * np.ones(K), name="w")
    p = bg.Beta(1.5, 1.5, plates=(M, K), name="p")  # components on the last plate axis
    z = bg.Categorical(w, plates=(N, 1), name="z")  # one assignment per row, broadcast over M
    y = bg.Mixture(z, bg.Bernoulli, p, name="y").observe(X)
    return bg.Model(y)


def _m_normal_gamma_mixture(rng):
    x = np.concatenate([rng.normal(-2, 0.5, 70), rng.normal(3, 1.5, 90)])
    w = bg.Dirichlet(np.ones(2), name="w")
    th = bg.NormalGamma(0.0, 0.01, 2.0, 1.0, plates=(2,), name="theta")
    z = bg.Categorical(w, plates=(len(x),), name="z")
    y = bg.Mixture(z, bg.Normal, th, name="y").observe(x)
    return bg.Model(y)


def _m_normal_meanfield(rng):
    x = rng.normal(2.0, 0.5, 50)
    mu = bg.Normal(0.0, 0.1, name="mu")
    tau = bg.Gamma(2.0, 1.0, name="tau")
    y = bg.Normal(mu, tau, plates=(50,), name="y").observe(x)
    return bg.Model(y)


def _m_linreg(rng):
    N, D = 60, 3
    X = rng.normal(size=(N, D))
    yv = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.3, N)
    wv = bg.MultivariateNormal(np.zeros(D), 0.1 * np.eye(D), name="w")
    tau = bg.Gamma(2.0, 1.0, name="tau")
    y = bg.Normal(bg.Dot(X, wv), tau, name="y").observe(yv)
    return bg.Model(y)


def _m_hierarchical_gamma(rng):
    # b -> rate[g] -> counts: two levels of point masses
    G = 8
    rates = rng.gamma(3.0, 2.0, G)
    x = rng.poisson(rates[:, None], size=(G, 20)).astype(float)
    b = bg.Gamma(2.0, 1.0, name="b")
    rate = bg.Gamma(3.0, b, plates=(G, 1), name="rate")
    y = bg.Poisson(rate, plates=(G, 20), name="y").observe(x)
    return bg.Model(y)


MONOTONE_MODELS = {
    "gmm": _m_gmm,
    "poisson-mixture": _m_poisson,
    "bernoulli-mixture": _m_bernoulli_mixture,
    "normal-gamma-mixture": _m_normal_gamma_mixture,
    "normal-meanfield": _m_normal_meanfield,
    "linreg": _m_linreg,
    "hierarchical-gamma": _m_hierarchical_gamma,
}


@pytest.mark.parametrize("name", sorted(MONOTONE_MODELS))
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("init", ["random", None])
def test_em_objective_never_decreases(name, seed, init):
    model = MONOTONE_MODELS[name](np.random.default_rng(100 + seed))
    res = model.fit("em", seed=seed, init=init, max_iter=300, tol=1e-12)
    assert len(res.elbo_trace) >= 2
    assert np.all(np.isfinite(res.elbo_trace))
    assert monotone(res.elbo_trace), np.diff(res.elbo_trace).min()
    assert any(n.point for n in model.latent)


def test_meanfield_normal_em_fixed_point():
    """mu, tau both point masses (alternating MAP): the fixed point satisfies both
    conditional-mode equations."""
    rng = np.random.default_rng(3)
    x = rng.normal(2.0, 0.5, 50)
    mu = bg.Normal(0.0, 0.1, name="mu")
    tau = bg.Gamma(2.0, 1.0, name="tau")
    y = bg.Normal(mu, tau, plates=(50,), name="y").observe(x)
    bg.Model(y).fit("em", max_iter=1000, tol=1e-15)
    m, t = mu.posterior.point, tau.posterior.point
    close(m, (t * x.sum()) / (0.1 + 50 * t), 1e-9)
    close(t, (2.0 - 1 + 25) / (1.0 + 0.5 * np.sum((x - m) ** 2)), 1e-9)


def test_linreg_em_is_map_ridge():
    model = _m_linreg(np.random.default_rng(4))
    X, yv = model["dot(w)"].X, model["y"].value
    N, D = X.shape
    model.fit("em", max_iter=2000, tol=1e-15)
    w, t = model["w"].posterior.point, model["tau"].posterior.point
    close(w, np.linalg.solve(t * X.T @ X + 0.1 * np.eye(D), t * X.T @ yv), 1e-8)
    close(t, (2.0 - 1 + N / 2) / (1.0 + 0.5 * np.sum((yv - X @ w) ** 2)), 1e-8)


# ---------------------------------------------------------------------------
# point= with the other methods (variational EM)
# ---------------------------------------------------------------------------
def test_vmp_with_point_mass_weights(gmm_data):
    X = gmm_data
    K, D = GK, GD
    alpha0 = 2.0
    w = bg.Dirichlet(alpha0 * np.ones(K), name="w")
    theta = bg.NormalWishart(np.zeros(D), 0.1, D + 2.0, np.eye(D), plates=(K,), name="theta")
    z = bg.Categorical(w, plates=(GN,), name="z")
    y = bg.Mixture(z, bg.MultivariateNormal, theta, name="y").observe(X)
    model = bg.Model(y)
    res = model.fit("vmp", point=["w"], seed=0, max_iter=2000, tol=1e-12)
    assert res.objective == "em_bound"
    assert monotone(res.elbo_trace)
    assert w.posterior.is_point and not theta.posterior.is_point and not z.posterior.is_point
    # at convergence w is the Dirichlet mode given the responsibilities
    Nk = z.posterior.mean.sum(0)
    close(w.posterior.point, (Nk + alpha0 - 1) / (GN + K * alpha0 - K), 1e-6)
    # theta keeps a full posterior
    theta.posterior.to_scipy()
    # and the objective differs from VMP's ELBO: no entropy for w and log p(w) at the point
    res_vmp = bg.Model(y).fit("vmp", seed=0, max_iter=2000, tol=1e-12)
    assert res_vmp.objective == "elbo"
    assert res.elbo != pytest.approx(res_vmp.elbo, rel=1e-6)


def test_vmp_point_argument_checks(gmm_data):
    model, w, mu, Lam, z = build_gmm(gmm_data)
    with pytest.raises(ValueError, match="not a latent node"):
        model.fit("vmp", point=["y"])
    with pytest.raises(KeyError):
        model.fit("vmp", point=["nope"])
    res = model.fit("vmp", point="w", seed=0, max_iter=5)  # one name is accepted
    assert w.posterior.is_point and not mu.posterior.is_point


def test_vmp_without_points_is_unchanged_by_em_machinery(poisson_data):
    model, w, rate, z = build_poisson_mixture(poisson_data)
    res = model.fit("vmp", seed=0, max_iter=50, tol=0.0)
    assert res.objective == "elbo"
    assert not any(n.posterior.is_point for n in model.latent)
    assert monotone(res.elbo_trace)


def test_svi_with_point_mass_is_online_em():
    """A point mass under SVI averages its pseudo-posterior's natural parameters
    (= its expected sufficient statistics): online EM. On a Gamma-Poisson pair it
    drifts to the MAP."""
    rng = np.random.default_rng(0)
    x = rng.poisson(4.0, size=400).astype(float)
    rate = bg.Gamma(2.0, 0.5, name="rate")
    y = bg.Poisson(rate, plates=(400,), name="y").observe(x)
    post = cf.gamma_poisson(x, 2.0, 0.5).params
    mode = (post["shape"] - 1) / post["rate"]
    bg.Model(y).fit("svi", point=[rate], batch_size=50, epochs=40, seed=0, kappa=0.6)
    assert rate.posterior.is_point
    close(rate.posterior.point, mode, 0.05 * mode)


def test_ncvmp_with_point_mass_is_map_logistic_regression():
    """A point-mass weight vector under NCVMP: messages evaluated at the point (delta
    method) make each damped BLR step a damped Newton step on the log joint; the fixed
    point is the MAP of Bayesian logistic regression (Laplace's mode)."""
    from scipy.optimize import minimize
    rng = np.random.default_rng(0)
    N, D = 200, 3
    X = rng.normal(size=(N, D))
    yv = (rng.random(N) < 1 / (1 + np.exp(-X @ np.array([1.5, -2.0, 0.5])))).astype(float)
    w = bg.MultivariateNormal(np.zeros(D), 0.5 * np.eye(D), name="w")
    y = bg.Bernoulli(logits=bg.Dot(X, w), name="y").observe(yv)
    res = bg.Model(y).fit("ncvmp", point=[w], max_iter=1000, tol=1e-15)
    assert res.objective == "em_bound" and w.posterior.is_point

    def neg_logjoint(v):
        return -(np.sum(yv * (X @ v) - np.logaddexp(0.0, X @ v))
                 + stats.multivariate_normal(np.zeros(D), 2.0 * np.eye(D)).logpdf(v))

    opt = minimize(neg_logjoint, np.zeros(D), method="BFGS", options={"gtol": 1e-11})
    close(w.posterior.point, opt.x, 1e-6)
    close(res.elbo, -neg_logjoint(w.posterior.point), 1e-8)
    assert monotone(res.elbo_trace)


# ---------------------------------------------------------------------------
# which nodes are point masses by default
# ---------------------------------------------------------------------------
def _points_of(model):
    from blrgraph.inference.methods import get_method
    from blrgraph.inference.points import resolve_points
    from blrgraph.inference.structure import Structure
    return {n.name for n in resolve_points(model, get_method("em"), None, Structure(model))}


def test_default_points_gmm(gmm_data):
    model = build_gmm(gmm_data)[0]
    assert _points_of(model) == {"w", "mu", "Lam"}


def test_default_points_lda_gather_is_local():
    """theta[doc_ids] carries the data axis: theta stays a distribution (Blei's
    variational EM for LDA); the topics phi are point masses."""
    rng = np.random.default_rng(0)
    n_docs, V, K, T = 5, 7, 2, 60
    doc = rng.integers(n_docs, size=T)
    words = rng.integers(V, size=T)
    theta = bg.Dirichlet(np.ones(K), plates=(n_docs,), name="theta")
    phi = bg.Dirichlet(1.1 * np.ones(V), plates=(K,), name="phi")
    z = bg.Categorical(theta[doc], name="z")
    y = bg.Mixture(z, bg.Categorical, phi, name="y").observe(words)
    model = bg.Model(y)
    assert _points_of(model) == {"phi"}
    res = model.fit("em", seed=0, max_iter=200, tol=1e-12)
    assert monotone(res.elbo_trace)
    assert phi.posterior.is_point and not theta.posterior.is_point


def test_default_points_broadcast_plates():
    """Data (G, M): a latent with plates (G, 1) is on the data axis (local);
    one with plates (M,) is not (right-aligned broadcasting)."""
    rng = np.random.default_rng(1)
    G, M = 4, 6
    x = rng.normal(size=(G, M))
    u = bg.Normal(0.0, 1.0, plates=(G, 1), name="u")
    tau = bg.Gamma(2.0, 1.0, plates=(M,), name="tau")
    y = bg.Normal(u, tau, name="y").observe(x)
    model = bg.Model(y)
    assert _points_of(model) == {"tau"}
    res = model.fit("em", max_iter=200, tol=1e-12)
    assert monotone(res.elbo_trace)
    assert tau.posterior.is_point and not u.posterior.is_point


def test_first_sweep_keeps_the_random_responsibilities():
    """z created before the component parameters (so it comes earlier in the schedule):
    the first sweep still runs the M-step on the random responsibilities first, so the
    components do not all start identical."""
    rng = np.random.default_rng(2)
    x = rng.poisson(np.where(rng.random(200) < 0.5, 2.0, 12.0)).astype(float)
    w = bg.Dirichlet(np.ones(2), name="w")
    z = bg.Categorical(w, plates=(200,), name="z")
    rate = bg.Gamma(1.5, 0.1, plates=(2,), name="rate")
    y = bg.Mixture(z, bg.Poisson, rate, name="y").observe(x)
    model = bg.Model(y)
    assert model.schedule.index(z) < model.schedule.index(rate)
    model.fit("em", seed=0, init="random", max_iter=500, tol=1e-12)
    close(np.sort(rate.posterior.point), [2.0, 12.0], 1.0)


def test_hard_em_with_point_mass_assignments_is_classification_em():
    """point=['z']: each z is a point mass (its most probable label), the component
    parameters keep a q. At the fixed point q(theta_k) is the closed-form Normal-Gamma
    posterior of the points assigned to k, and every label is the argmax of its
    pseudo-posterior E[log pi_k] + E[log N(x | theta_k)]. (Categorical point masses
    publish one-hot moments; they used to fail with 'K is unknown'.)"""
    from blrgraph import closed_form
    r = np.random.default_rng(0)
    X = np.r_[r.normal(-2, 1, 50), r.normal(2, 1, 50)]
    z = bg.Categorical(bg.Dirichlet(np.ones(2), name="pi"), plates=(100,), name="z")
    th = bg.NormalGamma(0.0, 1.0, 1.0, 1.0, plates=(2,), name="th")
    x = bg.Mixture(z, bg.Normal, th, name="x").observe(X)
    fit = bg.Model(x).fit("em", point=["z"], seed=0, tol=0, max_iter=50)
    labels = np.argmax(z.posterior.point, axis=-1)
    assert z.posterior.is_point and set(labels) == {0, 1}
    post = th.posterior.params
    for k in range(2):
        ref = closed_form.normal_gamma(X[labels == k], 0.0, 1.0, 1.0, 1.0)
        for name in ("mean", "beta", "shape", "rate"):
            close(post[name][k], ref.params[name], 1e-10)
    # each label is the argmax of the final pseudo-posterior
    lam = z.nat[0]
    assert np.array_equal(labels, np.argmax(lam, axis=-1))
    assert np.all(np.diff(fit.elbo_trace) >= -1e-9 * np.abs(fit.elbo_trace[1:]))
