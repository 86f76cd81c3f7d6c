"""Posterior predictives (docs/predict.md): each conjugate predictive equals its closed form
(scipy.stats, and the ratio of closed-form evidences p(X, x_new) / p(X) from
blrgraph.closed_form), sample moments agree within 4 standard errors, imputation in a
full-covariance Gaussian mixture is the mixture of t-conditionals, naive Bayes labels
are the closed form, and posterior.sample covers every node kind."""
import numpy as np
import pytest
from scipy import stats
from scipy.special import expit, gammaln, logsumexp

import blrgraph as bg
from blrgraph import closed_form as cf

N_DRAWS = 100_000


def _check_sample_moments(pred, n=N_DRAWS, seed=1):
    """mean and variance of n draws within 4 standard errors of pred.mean / pred.var."""
    s = np.asarray(pred.sample(n, seed=seed), dtype=float)
    mean, var = np.asarray(pred.mean), np.asarray(pred.var)
    se_mean = np.sqrt(var / n)
    assert np.all(np.abs(s.mean(0) - mean) < 4 * se_mean)
    c = s - mean
    m4 = np.mean(c ** 4, axis=0)
    se_var = np.sqrt((m4 - var ** 2) / n)
    assert np.all(np.abs(np.mean(c ** 2, axis=0) - var) < 4 * se_var)


# ---- conjugate predictives = closed forms -------------------------------------------------
def test_normal_gamma_student_t():
    rng = np.random.default_rng(0)
    x = rng.normal(1.5, 0.7, 40)
    prior = (0.3, 2.0, 3.0, 1.5)
    theta = bg.NormalGamma(*prior, name="theta")
    y = bg.Normal(theta, plates=(40,), name="y").observe(x)
    bg.Model(y).fit("conjugate")
    pred = y.predictive()
    p = cf.normal_gamma(x, *prior).params
    a, b, k, m = p["shape"], p["rate"], p["beta"], p["mean"]
    t = stats.t(df=2 * a, loc=m, scale=np.sqrt(b * (k + 1) / (a * k)))
    new = np.linspace(-2, 4, 40)
    assert pred.exact and pred.plates == (40,)
    np.testing.assert_allclose(pred.logpdf(new), t.logpdf(new), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.mean, t.mean(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.var, t.var(), rtol=0, atol=1e-10)
    # the predictive is the ratio of evidences p(x, x_new) / p(x)
    ev = cf.normal_gamma(x, *prior).log_evidence
    for v in (-1.0, 0.4, 2.5):
        assert pred.logpdf(v)[0] == pytest.approx(cf.normal_gamma(np.r_[x, v], *prior).log_evidence
                                                  - ev, abs=1e-10)
    _check_sample_moments(pred[:3])
    assert isinstance(pred.to_scipy(), type(t))


def test_normal_wishart_multivariate_t():
    rng = np.random.default_rng(1)
    X = rng.multivariate_normal([1.0, -1.0, 0.5], [[1, 0.5, 0], [0.5, 2, 0.3], [0, 0.3, 1]], 60)
    prior = (np.zeros(3), 0.5, 6.0, np.eye(3) / 6.0)
    theta = bg.NormalWishart(*prior, name="theta")
    x = bg.MultivariateNormal(theta, plates=(60,), name="x").observe(X)
    bg.Model(x).fit("conjugate")
    pred = x.predictive()
    p = cf.normal_wishart(X, *prior).params
    D = 3
    df = p["dof"] - D + 1
    shape = np.linalg.inv(p["scale"]) * (p["beta"] + 1) / (p["beta"] * df)
    t = stats.multivariate_t(loc=p["mean"], shape=shape, df=df)
    new = rng.normal(size=(60, 3))
    np.testing.assert_allclose(pred.logpdf(new), t.logpdf(new), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.mean[0], p["mean"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.cov[0], shape * df / (df - 2), rtol=0, atol=1e-10)
    ev = cf.normal_wishart(X, *prior).log_evidence
    assert pred.logpdf(new[0])[0] == pytest.approx(
        cf.normal_wishart(np.r_[X, new[:1]], *prior).log_evidence - ev, abs=1e-10)
    _check_sample_moments(pred[0])
    s = pred[0].sample(N_DRAWS, seed=3)
    se = np.sqrt(np.outer(pred.var[0], pred.var[0]) / N_DRAWS) * 2   # loose: off-diagonal moments
    assert np.all(np.abs(np.cov(s.T) - pred.cov[0]) < 4 * se)


@pytest.mark.parametrize("n", [1, 7])
def test_beta_binomial(n):
    rng = np.random.default_rng(2)
    x = rng.binomial(n, 0.3, 25)
    p = bg.Beta(2.0, 3.0, name="p")
    y = (bg.Bernoulli(p, plates=(25,), name="y") if n == 1 else
         bg.Binomial(n, p, plates=(25,), name="y")).observe(x)
    bg.Model(y).fit("conjugate")
    pred = y.predictive()
    post = cf.beta_binomial(x, n, 2.0, 3.0).params
    bb = stats.betabinom(n, post["a"], post["b"])
    k = np.arange(n + 1)
    np.testing.assert_allclose(pred[:n + 1].logpdf(k), bb.logpmf(k), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.mean, bb.mean(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.var, bb.var(), rtol=0, atol=1e-10)
    ev = cf.beta_binomial(x, n, 2.0, 3.0).log_evidence
    assert pred.logpdf(1)[0] == pytest.approx(
        cf.beta_binomial(np.r_[x, 1], n, 2.0, 3.0).log_evidence - ev, abs=1e-10)
    _check_sample_moments(pred[:2])


def test_poisson_gamma_negative_binomial():
    rng = np.random.default_rng(3)
    x = rng.poisson(4.0, 30)
    rate = bg.Gamma(2.0, 0.5, name="rate")
    y = bg.Poisson(rate, plates=(30,), name="y").observe(x)
    bg.Model(y).fit("conjugate")
    pred = y.predictive()
    post = cf.gamma_poisson(x, 2.0, 0.5).params
    a, b = post["shape"], post["rate"]
    nb = stats.nbinom(a, b / (b + 1))
    k = np.arange(30)
    np.testing.assert_allclose(pred.logpdf(k), nb.logpmf(k), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.mean, a / b, rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.var, a * (b + 1) / b ** 2, rtol=0, atol=1e-10)
    ev = cf.gamma_poisson(x, 2.0, 0.5).log_evidence
    assert pred.logpdf(6)[0] == pytest.approx(cf.gamma_poisson(np.r_[x, 6], 2.0, 0.5).log_evidence
                                              - ev, abs=1e-10)
    _check_sample_moments(pred[:2])


def test_categorical_and_multinomial_dirichlet():
    rng = np.random.default_rng(4)
    alpha0 = np.array([1.0, 2.0, 0.5, 1.5])
    labels = rng.integers(0, 4, 50)
    p = bg.Dirichlet(alpha0, name="p")
    y = bg.Categorical(p, plates=(50,), name="y").observe(labels)
    bg.Model(y).fit("conjugate")
    pred = y.predictive()
    alpha = cf.dirichlet_categorical(labels, alpha0).params["alpha"]
    np.testing.assert_allclose(pred.probs[0], alpha / alpha.sum(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(pred.logpdf(np.arange(50) % 4), np.log(alpha / alpha.sum())[np.arange(50) % 4],
                               rtol=0, atol=1e-10)
    s = pred[0].sample(N_DRAWS, seed=0)
    freq = np.bincount(s, minlength=4) / N_DRAWS
    pk = alpha / alpha.sum()
    assert np.all(np.abs(freq - pk) < 4 * np.sqrt(pk * (1 - pk) / N_DRAWS))

    counts = rng.multinomial(12, [0.1, 0.2, 0.3, 0.4], size=20)
    q = bg.Dirichlet(alpha0, name="q")
    c = bg.Multinomial(12, q, plates=(20,), name="c").observe(counts)
    bg.Model(c).fit("conjugate")
    pred = c.predictive()
    a = cf.dirichlet_multinomial(counts, alpha0).params["alpha"]
    dm = stats.dirichlet_multinomial(a, 12)
    np.testing.assert_allclose(pred.logpdf(counts), dm.logpmf(counts), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.mean[0], dm.mean(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.cov[0], dm.cov(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.var[0], np.diag(dm.cov()), rtol=0, atol=1e-10)
    _check_sample_moments(pred[0])


def test_exponential_and_gamma_with_gamma_rate():
    rng = np.random.default_rng(5)
    x = rng.exponential(2.0, 30)
    r = bg.Gamma(3.0, 2.0, name="r")
    y = bg.Exponential(r, plates=(30,), name="y").observe(x)
    bg.Model(y).fit("conjugate")
    post = cf.gamma_exponential(x, 3.0, 2.0).params
    lom = stats.lomax(post["shape"], scale=post["rate"])
    pred = y.predictive()
    np.testing.assert_allclose(pred.logpdf(x), lom.logpdf(x), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.mean, lom.mean(), rtol=0, atol=1e-10)
    ev = cf.gamma_exponential(x, 3.0, 2.0).log_evidence
    assert pred.logpdf(1.3)[0] == pytest.approx(
        cf.gamma_exponential(np.r_[x, 1.3], 3.0, 2.0).log_evidence - ev, abs=1e-10)

    # x ~ Gamma(k, rate r), r ~ Gamma(a, b): beta-prime(k, a, scale b); check by quadrature
    g = bg.Gamma(2.5, r, plates=(30,), name="g").observe(x)
    bg.Model(g).fit("conjugate")
    pa, pb = r.posterior.params["shape"], r.posterior.params["rate"]
    pred = g.predictive()
    from scipy.integrate import quad
    for v in (0.5, 2.0):
        dens = quad(lambda t: stats.gamma.pdf(v, 2.5, scale=1 / t) * stats.gamma.pdf(t, pa, scale=1 / pb),
                    0, np.inf, epsabs=1e-14, epsrel=1e-12)[0]
        assert pred.logpdf(v)[0] == pytest.approx(np.log(dens), abs=1e-9)


def test_linear_regression_known_noise_is_normal():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(40, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.5, 40)
    L0 = np.diag([1.0, 2.0, 0.5])
    w = bg.MultivariateNormal(np.zeros(3), L0, name="w")
    yv = bg.Normal(bg.Dot(X, w), 4.0, name="y").observe(y)
    bg.Model(yv).fit("vmp", tol=1e-14)
    post = cf.linreg_known_precision(X, y, np.zeros(3), L0, 4.0)
    m, S = post.params["mean"], np.linalg.inv(post.params["precision"])
    Xn = rng.normal(size=(5, 3))
    pred = yv.predictive(inputs=Xn)
    mean, var = Xn @ m, np.einsum("ni,ij,nj->n", Xn, S, Xn) + 0.25
    assert pred.exact and pred.plates == (5,)
    np.testing.assert_allclose(pred.mean, mean, rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.var, var, rtol=0, atol=1e-10)
    yn = rng.normal(size=5)
    np.testing.assert_allclose(pred.logpdf(yn), stats.norm(mean, np.sqrt(var)).logpdf(yn),
                               rtol=0, atol=1e-10)
    ev = post.log_evidence     # ratio of evidences, one new row
    ev1 = cf.linreg_known_precision(np.r_[X, Xn[:1]], np.r_[y, yn[:1]], np.zeros(3), L0, 4.0).log_evidence
    assert pred.logpdf(yn)[0] == pytest.approx(ev1 - ev, abs=1e-9)
    _check_sample_moments(pred)
    # the training rows without inputs, and a dict naming the Dot
    np.testing.assert_allclose(yv.predictive().mean, X @ m, atol=1e-10)
    dot = yv.factor.parents[0]
    np.testing.assert_allclose(yv.predictive(inputs={dot.name: Xn}).var, var, atol=1e-12)


def test_gamma_noise_fixed_mean_is_student_t():
    rng = np.random.default_rng(7)
    x = rng.normal(2.0, 0.8, 35)
    tau = bg.Gamma(2.0, 1.0, name="tau")
    y = bg.Normal(2.0, tau, plates=(35,), name="y").observe(x)
    bg.Model(y).fit("conjugate")
    post = cf.gamma_known_mean(x, 2.0, 2.0, 1.0).params
    a, b = post["shape"], post["rate"]
    t = stats.t(2 * a, loc=2.0, scale=np.sqrt(b / a))
    pred = y.predictive()
    np.testing.assert_allclose(pred.logpdf(x), t.logpdf(x), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.var, t.var(), rtol=0, atol=1e-10)
    _check_sample_moments(pred[:2])


def test_mean_field_regression_gamma_noise_monte_carlo():
    """Normal(Dot(X, w), tau) with q(w) q(tau): exact mean and variance, Monte Carlo density
    (checked against 1-D quadrature over tau of N(y | x m, x S x + 1/tau))."""
    rng = np.random.default_rng(8)
    X = np.c_[np.ones(30), rng.normal(size=30)]
    y = X @ [1.0, 2.0] + rng.normal(0, 0.7, 30)
    w = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="w")
    tau = bg.Gamma(1.0, 1.0, name="tau")
    yv = bg.Normal(bg.Dot(X, w), tau, name="y").observe(y)
    bg.Model(yv).fit("vmp", tol=1e-12)
    m, S = w.posterior.mean, w.posterior.cov
    a, b = tau.posterior.params["shape"], tau.posterior.params["rate"]
    Xn = np.array([[1.0, 0.3], [1.0, -1.5]])
    pred = yv.predictive(inputs=Xn, samples=20000, seed=0)
    assert not pred.exact
    np.testing.assert_allclose(pred.mean, Xn @ m, atol=1e-12)
    np.testing.assert_allclose(pred.var, np.einsum("ni,ij,nj->n", Xn, S, Xn) + b / (a - 1), atol=1e-12)
    from scipy.integrate import quad
    v = np.einsum("ni,ij,nj->n", Xn, S, Xn)
    yn = np.array([1.5, -2.0])
    for i in range(2):
        dens = quad(lambda t: stats.norm.pdf(yn[i], Xn[i] @ m, np.sqrt(v[i] + 1 / t))
                    * stats.gamma.pdf(t, a, scale=1 / b), 0, np.inf, epsabs=1e-14)[0]
        assert pred.logpdf(yn)[i] == pytest.approx(np.log(dens), abs=0.02)
    _check_sample_moments(pred)


def test_logistic_regression_monte_carlo_matches_quadrature():
    rng = np.random.default_rng(9)
    X = np.c_[np.ones(80), rng.normal(size=80)]
    y = (rng.random(80) < expit(X @ [0.5, 1.5])).astype(float)
    w = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="w")
    yv = bg.Bernoulli(logits=bg.Dot(X, w), name="y").observe(y)
    bg.Model(yv).fit("ncvmp")
    Xn = np.array([[1.0, 0.0], [1.0, 2.0]])
    pred = yv.predictive(inputs=Xn, samples=40000, seed=1)
    m, S = Xn @ w.posterior.mean, np.einsum("ni,ij,nj->n", Xn, w.posterior.cov, Xn)
    t, wt = np.polynomial.hermite.hermgauss(80)
    p1 = expit(m[:, None] + np.sqrt(2 * S)[:, None] * t) @ wt / np.sqrt(np.pi)
    assert np.all(np.abs(np.exp(pred.logpdf(np.ones(2))) - p1) < 0.01)
    assert np.all(np.abs(pred.mean - p1) < 0.01)


# ---- mixtures and imputation ----------------------------------------------------------------
def _gmm_full(X, mask_rows, K=2, seed=0):
    D = X.shape[1]
    w = bg.Dirichlet(np.ones(K), name="weights")
    theta = bg.NormalWishart(X[mask_rows].mean(0), 0.1, D + 2.0, np.eye(D) / (D + 2.0), plates=(K,),
                             name="theta")
    z = bg.Categorical(w, plates=(len(X),), name="z")
    x = bg.Mixture(z, bg.MultivariateNormal, theta, name="x").observe(np.where(np.isfinite(X), X, 0.0),
                                                                      mask=mask_rows)
    model = bg.Model(x)
    model.fit("vmp", seed=seed, tol=1e-10)
    return model, x


def test_gmm_full_covariance_imputation_is_mixture_of_t_conditionals():
    rng = np.random.default_rng(10)
    X = np.r_[rng.multivariate_normal([0, 0, 0], [[1, .8, .2], [.8, 1, .3], [.2, .3, 1]], 60),
              rng.multivariate_normal([4, 3, -2], [[1, -.5, 0], [-.5, 1, .4], [0, .4, 2]], 60)]
    Xm = X.copy()
    Xm[[3, 70], 1] = np.nan
    Xm[[5], 0] = np.nan
    Xm[[80], 0:2] = np.nan
    complete = np.isfinite(Xm).all(1)
    model, x = _gmm_full(Xm, complete)
    pred = x.predictive(inputs=Xm)
    # the closed form, written out: weights E[pi_k] t_k(x_o), t-conditionals of the missing part
    alpha = model["weights"].posterior.params["alpha"]
    pt = model["theta"].posterior.params
    D = 3
    for n in (3, 5, 70, 80):
        o = np.isfinite(Xm[n])
        mi = ~o
        lw, locs, shapes, dfs = [], [], [], []
        for k in range(2):
            df = pt["dof"][k] - D + 1
            Sh = np.linalg.inv(pt["scale"][k]) * (pt["beta"][k] + 1) / (pt["beta"][k] * df)
            mu = pt["mean"][k]
            Soo, Smo = Sh[np.ix_(o, o)], Sh[np.ix_(mi, o)]
            d = Xm[n, o] - mu[o]
            delta = d @ np.linalg.solve(Soo, d)
            lw.append(np.log(alpha[k] / alpha.sum())
                      + stats.multivariate_t(mu[o], Soo, df=df).logpdf(Xm[n, o]))
            locs.append(mu[mi] + Smo @ np.linalg.solve(Soo, d))
            dfs.append(df + o.sum())
            shapes.append((df + delta) / (df + o.sum())
                          * (Sh[np.ix_(mi, mi)] - Smo @ np.linalg.solve(Soo, Smo.T)))
        r = np.exp(np.array(lw) - logsumexp(lw))
        np.testing.assert_allclose(pred.weights[n], r, rtol=0, atol=1e-10)
        mean = sum(r[k] * locs[k] for k in range(2))
        np.testing.assert_allclose(pred.mean[n][mi], mean, rtol=0, atol=1e-10)
        np.testing.assert_allclose(pred.mean[n][o], Xm[n, o], rtol=0, atol=1e-12)
        cov = sum(r[k] * (shapes[k] * dfs[k] / (dfs[k] - 2) + np.outer(locs[k], locs[k]))
                  for k in range(2)) - np.outer(mean, mean)
        np.testing.assert_allclose(pred.cov[n][np.ix_(mi, mi)], cov, rtol=0, atol=1e-10)
        assert np.all(pred.var[n][o] == 0)
        v = X[n, mi]
        dens = logsumexp([np.log(r[k]) + stats.multivariate_t(locs[k], shapes[k], df=dfs[k]).logpdf(v)
                          for k in range(2)])
        assert pred.logpdf(X[n])[n] == pytest.approx(dens, abs=1e-10)
    # imputations are drawn from the conditionals: the observed cells stay as they are
    s = pred[3].sample(1000, seed=0)
    assert np.all(s[:, [0, 2]] == Xm[3, [0, 2]])


def test_diag_mixture_masked_cells_use_row_assignment():
    """Masked cells of a fitted mixture: the mixture of the component predictives
    (Student-t of a Normal-Gamma) weighted by q(z_n), fitted from the row's other cells."""
    rng = np.random.default_rng(11)
    X = np.r_[rng.normal(0, 1, (50, 2)), rng.normal(5, 1, (50, 2))]
    mask = rng.random(X.shape) > 0.15
    w = bg.Dirichlet(np.ones(2), name="weights")
    theta = bg.NormalGamma(np.full((2, 2), 2.5), 0.1, 1.0, 1.0, plates=(2, 2), name="theta")
    z = bg.Categorical(w, plates=(100, 1), name="z")
    x = bg.Mixture(z, bg.Normal, theta, name="x").observe(np.where(mask, X, 0.0), mask=mask)
    bg.Model(x).fit("vmp", seed=1)
    pred = x.predictive()
    r = z.posterior.mean[:, 0, :]
    p = theta.posterior.params
    m, k, a, b = p["mean"], p["beta"], p["shape"], p["rate"]
    n, d = np.argwhere(~mask)[0]
    comp = stats.t(2 * a[d], loc=m[d], scale=np.sqrt(b[d] * (k[d] + 1) / (a[d] * k[d])))
    np.testing.assert_allclose(pred.mean[n, d], r[n] @ comp.mean(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.var[n, d], r[n] @ (comp.var() + comp.mean() ** 2)
                               - (r[n] @ comp.mean()) ** 2, rtol=0, atol=1e-10)
    np.testing.assert_allclose(pred.logpdf(X)[n, d], np.log(r[n] @ comp.pdf(X[n, d])), atol=1e-10)
    masked = pred[~mask]
    assert masked.plates == ((~mask).sum(),)
    np.testing.assert_allclose(masked.mean, pred.mean[~mask], atol=0)
    # new rows: responsibilities from the fitted globals (one cell missing)
    new = np.array([[0.2, np.nan], [np.nan, 5.1]])
    pn = x.predictive(inputs=new)
    lw = np.log(w.posterior.mean) + np.array(
        [[stats.t(2 * a[j, kk], m[j, kk], np.sqrt(b[j, kk] * (k[j, kk] + 1) / (a[j, kk] * k[j, kk])))
          .logpdf(new[i, j]) for kk in range(2)] for i, j in ((0, 0), (1, 1))])
    np.testing.assert_allclose(pn.weights[:, 0], np.exp(lw - logsumexp(lw, 1, keepdims=True)), atol=1e-10)
    np.testing.assert_allclose(z.predictive(inputs={"x": new}).probs[:, 0], pn.weights[:, 0], atol=1e-12)


def test_naive_bayes_masked_labels_closed_form():
    rng = np.random.default_rng(12)
    N, J, K, L = 300, 4, 3, 5
    c = rng.integers(0, K, N)
    F = np.stack([(c * (j + 1) + rng.integers(0, 3, N)) % L for j in range(J)], 1)
    train = np.arange(N) < 220
    a0, b0 = 1.5, 0.7
    w = bg.Dirichlet(a0 * np.ones(K), name="w")
    cls = bg.Categorical(w, plates=(N,), name="c").observe(np.where(train, c, 0), mask=train)
    feats = [bg.Mixture(cls, bg.Categorical, bg.Dirichlet(b0 * np.ones(L), plates=(K,), name=f"phi{j}"),
                        name=f"f{j}").observe(F[:, j]) for j in range(J)]
    model = bg.Model(*feats)
    model.fit("vmp")
    probs = cls.predictive().probs[~train]
    # closed form from the training counts: p(c = k | f) ~ (n_k + a0) prod_j (n_jkf + b0) / (n_k + L b0)
    nk = np.bincount(c[train], minlength=K)
    lp = np.log(nk + a0)[None, :] * np.ones(((~train).sum(), 1))
    for j in range(J):
        njk = np.zeros((K, L))
        np.add.at(njk, (c[train], F[train, j]), 1)
        lp += np.log((njk[:, F[~train, j]].T + b0) / (nk + L * b0))
    expect = np.exp(lp - logsumexp(lp, 1, keepdims=True))
    np.testing.assert_allclose(probs, expect, rtol=0, atol=1e-10)
    # the fit used only the labelled rows: the topics are the training counts + prior
    njk = np.zeros((K, L))
    np.add.at(njk, (c[train], F[train, 0]), 1)
    np.testing.assert_allclose(model["phi0"].posterior.params["alpha"], njk + b0, atol=1e-10)
    # held-out scoring of the test labels
    score = bg.log_predictive(cls, c, mask=~train)
    assert score == pytest.approx(np.sum(np.log(expect[np.arange(len(expect)), c[~train]])), abs=1e-9)


def test_gmm_new_points_without_refitting():
    rng = np.random.default_rng(13)
    X = np.r_[rng.normal(-3, 1, (40, 2)), rng.normal(3, 1, (40, 2))]
    model, x = _gmm_full(X, np.ones(80, bool), seed=3)
    new = np.array([[-3.0, -3.0], [3.0, 3.0], [0.1, 0.0]])
    pn = x.predictive(inputs=new)
    # the predictive of a new, unseen point is the prior-weighted mixture of t's
    lp = bg.log_predictive(x, new, inputs=np.full((3, 2), np.nan))
    alpha = model["weights"].posterior.params["alpha"]
    comp = model["theta"].posterior.params
    D = 2
    tot = 0.0
    for v in new:
        terms = []
        for k in range(2):
            df = comp["dof"][k] - D + 1
            Sh = np.linalg.inv(comp["scale"][k]) * (comp["beta"][k] + 1) / (comp["beta"][k] * df)
            t = stats.multivariate_t(comp["mean"][k], Sh, df=df)
            terms.append(np.log(alpha[k] / alpha.sum()) + t.logpdf(v))
        tot += logsumexp(terms)
    assert lp == pytest.approx(tot, abs=1e-9)
    assert pn.weights[0].argmax() != pn.weights[1].argmax()


# ---- posterior.sample for every node kind -----------------------------------------------------
def test_posterior_sample_shapes_and_moments():
    rng = np.random.default_rng(14)
    X = rng.normal(size=(30, 2))
    ng = bg.NormalGamma(np.zeros(3), 1.0, 2.0, 1.0, plates=(3,), name="ng")
    y = bg.Normal(ng, plates=(30, 3), name="y").observe(rng.normal(size=(30, 3)))
    nw = bg.NormalWishart(np.zeros(2), 1.0, 4.0, np.eye(2), plates=(2,), name="nw")
    zw = bg.Dirichlet(np.ones(2), name="zw")
    z = bg.Categorical(zw, plates=(30,), name="z")
    x = bg.Mixture(z, bg.MultivariateNormal, nw, name="x").observe(X)
    g = bg.Gamma(2.0, 1.0, name="g")
    e = bg.Exponential(g, plates=(10,), name="e").observe(rng.exponential(size=10))
    bt = bg.Beta(1.0, 1.0, name="bt")
    bb = bg.Bernoulli(bt, plates=(10,), name="bb").observe(rng.integers(0, 2, 10))
    W = bg.Wishart(3.0, np.eye(2), name="W")
    mv = bg.MultivariateNormal(np.zeros(2), W, plates=(20,), name="mv").observe(rng.normal(size=(20, 2)))
    model = bg.Model(y, x, e, bb, mv)
    model.fit("vmp", seed=0)
    mu, tau = ng.posterior.sample(5, seed=0)
    assert mu.shape == (5, 3) and tau.shape == (5, 3)
    m2, L2 = nw.posterior.sample(4, seed=0)
    assert m2.shape == (4, 2, 2) and L2.shape == (4, 2, 2, 2)
    assert z.posterior.sample(7, seed=0).shape == (7, 30)
    assert zw.posterior.sample(6, seed=0).shape == (6, 2)
    assert W.posterior.sample(3, seed=0).shape == (3, 2, 2)
    assert g.posterior.sample(None, seed=0).shape == ()
    for node in (ng, g, bt, zw):
        post = node.posterior
        s = post.sample(N_DRAWS, seed=1)
        s = s if isinstance(s, tuple) else (s,)
        means = post.mean if isinstance(post.mean, tuple) else (post.mean,)
        vars_ = post.var if isinstance(post.var, tuple) else (post.var,)
        for a, mm, vv in zip(s, means, vars_):
            assert np.all(np.abs(a.mean(0) - mm) < 4 * np.sqrt(vv / N_DRAWS))
    # the same seed gives the same draws
    np.testing.assert_array_equal(z.posterior.sample(3, seed=2), z.posterior.sample(3, seed=2))


def test_point_mass_sample_and_predictive():
    rng = np.random.default_rng(15)
    x = rng.normal(2.0, 1.0, 50)
    mu = bg.Normal(0.0, 0.01, name="mu")
    y = bg.Normal(mu, 1.0, plates=(50,), name="y").observe(x)
    bg.Model(y).fit("em", point=["mu"])
    s = mu.posterior.sample(4, seed=0)
    assert s.shape == (4,) and np.all(s == mu.posterior.point)
    pred = y.predictive()
    np.testing.assert_allclose(pred.mean, mu.posterior.point, atol=1e-12)
    np.testing.assert_allclose(pred.var, 1.0, atol=1e-12)


def test_predictive_errors_name_the_node():
    w = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="w")
    y = bg.Normal(bg.Dot(np.ones((3, 2)), w), 1.0, name="y").observe(np.zeros(3))
    with pytest.raises(AttributeError, match="'w' has no posterior"):
        y.predictive()
    bg.Model(y).fit("vmp")
    with pytest.raises(KeyError, match="neither this node"):
        y.predictive(inputs={"nope": np.ones((2, 2))})
    theta = bg.NormalGamma(0.0, 1.0, 1.0, 1.0, plates=(2,), name="th")
    z = bg.Categorical(bg.Dirichlet(np.ones(2), name="pw"), plates=(5,), name="z")
    x = bg.Mixture(z, bg.Normal, theta, name="x").observe(np.arange(5.0))
    bg.Model(x).fit("vmp", seed=0)
    with pytest.raises(ValueError, match=r"Mixture 'x'.*shape \(M,\)"):
        x.predictive(inputs=np.zeros((3, 2)))


def test_non_conjugate_links_and_ard_precisions_by_monte_carlo():
    rng = np.random.default_rng(16)
    X = np.c_[np.ones(60), rng.normal(size=60)]
    w = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="w")
    y = bg.Poisson(log_rate=bg.Dot(X, w), name="y").observe(rng.poisson(np.exp(X @ [0.5, 0.3])))
    bg.Model(y).fit("ncvmp")
    Xn = np.array([[1.0, -1.0], [1.0, 1.5]])
    pred = y.predictive(inputs=Xn)
    m, v = Xn @ w.posterior.mean, np.einsum("ni,ij,nj->n", Xn, w.posterior.cov, Xn)
    rate = np.exp(m + v / 2)                     # E[e^a]; Var[y] = E[rate] + Var[rate]
    np.testing.assert_allclose(pred.mean, rate, rtol=1e-12)
    np.testing.assert_allclose(pred.var, rate + np.expm1(v) * rate ** 2, rtol=1e-12)
    _check_sample_moments(pred)
    # MultivariateNormal with fixed mean and ARD Gamma precisions: independent Student-t's
    a = bg.Gamma(2.0, 1.0, plates=(3,), name="a")
    x = bg.MultivariateNormal(np.zeros(3), a, plates=(40,), name="x").observe(
        rng.normal(0, [1.0, 2.0, 3.0], (40, 3)))
    bg.Model(x).fit("vmp")
    pa = a.posterior.params
    pred = x.predictive(samples=20000, seed=3)
    val = np.array([0.5, -1.0, 2.0])
    exact = stats.t(2 * pa["shape"], 0, np.sqrt(pa["rate"] / pa["shape"])).logpdf(val).sum()
    assert pred.logpdf(val)[0] == pytest.approx(exact, abs=0.01)
    np.testing.assert_allclose(pred.var[0], pa["rate"] / (pa["shape"] - 1), rtol=0.03)
    # Categorical logits: probabilities by Monte Carlo, one entry per new row
    W = bg.MultivariateNormal(np.zeros(2), np.eye(2), plates=(3,), name="W")
    c = bg.Categorical(logits=bg.Dot(X[:, None, :], W), name="c").observe(rng.integers(0, 3, 60))
    bg.Model(c).fit("ncvmp")
    pc = c.predictive(inputs=Xn[:, None, :])
    assert pc.plates == (2,) and np.allclose(pc.probs.sum(-1), 1.0)
    same = c.predictive(inputs=X[:2, None, :])        # the training rows as inputs: same draws
    np.testing.assert_allclose(same.probs, c.predictive().probs[:2], rtol=0, atol=1e-14)
    assert pc.sample(5, seed=0).shape == (5, 2)


def test_mixture_sample_moments():
    rng = np.random.default_rng(17)
    X = np.r_[rng.normal(0, 1, 40), rng.normal(6, 1, 40)]
    w = bg.Dirichlet(np.ones(2), name="w")
    th = bg.NormalGamma(np.array([1.0, 5.0]), 0.1, 1.0, 1.0, plates=(2,), name="th")
    z = bg.Categorical(w, plates=(80,), name="z")
    x = bg.Mixture(z, bg.Normal, th, name="x").observe(X)
    bg.Model(x).fit("vmp", seed=0)
    new = x.predictive(inputs=np.full(2, np.nan))      # two new points: the prior-weighted mixture
    np.testing.assert_allclose(new.weights[0], w.posterior.mean, atol=1e-12)
    _check_sample_moments(new)
    _check_sample_moments(x.predictive()[:2])


def test_a_fixed_parent_and_its_gather_draw_their_own_entries_in_one_predictive():
    """A fixed parent (data or a point mass) and its gather node[idx] keep the same node
    (for its shift) but hold different entries: drawn in one predictive (one cache) each
    gives its own values (the gather used to get the source's draws back)."""
    from blrgraph.predictive import ParentDist
    node = object()
    src = ParentDist(node, "fixed", (3,), value=np.array([1.0, 2.0, 3.0]))
    gathered = src.take(np.array([2, 2, 0, 1]))
    cache, rng = {}, np.random.default_rng(0)
    a = src.draw(5, rng, cache)
    b = gathered.draw(5, rng, cache)
    assert a.shape == (5, 3) and b.shape == (5, 4)
    np.testing.assert_array_equal(b, np.broadcast_to([3.0, 3.0, 1.0, 2.0], (5, 4)))
    assert gathered.node is node
