"""Predictive of partly observed vectors (docs/predict.md, docs/math.md "Conditional
predictives of partly observed vectors"): the missing coordinates of a row get
E_q[p(x_m | x_o, parents)], the observed ones stay at their values with zero variance.

Oracles: the Gaussian conditional with point parameters (to 1e-12); the t-conditional of
a NormalWishart / Wishart predictive against scipy.stats.multivariate_t (log density of
the joint minus that of the marginal, to 1e-10); with a Gaussian mean and a fixed
precision the closed form E_q[N(x_m | mu_m + B(x_o - mu_o), ...)] (not the conditional
of N(m, S + Sigma)); a mixture row mixes its components' conditionals with its fitted
q(z_n); fully observed and fully masked rows keep the unconditional predictive."""
import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

import blrgraph as bg
from blrgraph import io

C3 = np.array([[1.0, 0.6, 0.3], [0.6, 1.5, -0.4], [0.3, -0.4, 0.8]])


def _data(N=80, seed=0, mean=(0.5, -1.0, 2.0)):
    """Rows of a 3-vector with three kinds of partly observed rows, one fully masked row."""
    rng = np.random.default_rng(seed)
    X = rng.multivariate_normal(mean, C3, N)
    X[1, 1] = np.nan                 # one coordinate missing
    X[2, [0, 2]] = np.nan            # two missing
    X[3, 2] = np.nan
    X[4, :] = np.nan                 # fully masked
    return X


def _gauss_conditional(mu, Sigma, x):
    o = np.isfinite(x)
    m = ~o
    B = Sigma[np.ix_(m, o)] @ np.linalg.inv(Sigma[np.ix_(o, o)])
    return mu[m] + B @ (x[o] - mu[o]), Sigma[np.ix_(m, m)] - B @ Sigma[np.ix_(o, m)]


def _t_conditional(loc, shape, df, x):
    """The conditional of t(df, loc, shape) given x_o, written out (docs/math.md)."""
    o = np.isfinite(x)
    m = ~o
    d = x[o] - loc[o]
    Soo_inv = np.linalg.inv(shape[np.ix_(o, o)])
    delta = d @ Soo_inv @ d
    B = shape[np.ix_(m, o)] @ Soo_inv
    schur = shape[np.ix_(m, m)] - B @ shape[np.ix_(o, m)]
    return df + o.sum(), loc[m] + B @ d, (df + delta) / (df + o.sum()) * schur


def _fill(x, xm):
    out = x.copy()
    out[~np.isfinite(x)] = xm
    return out


def _check_unchanged_rows(pred, ref, rows):
    np.testing.assert_allclose(pred.mean[rows], ref.mean[rows], rtol=0, atol=1e-12)
    np.testing.assert_allclose(pred.cov[rows], ref.cov[rows], rtol=0, atol=1e-12)


# ---- point parameters: the Gaussian conditional ---------------------------------------------
def test_point_parameters_gaussian_conditional():
    X = _data()
    mu = np.array([0.4, -0.9, 2.1])
    L = np.linalg.inv(C3)
    y = bg.MultivariateNormal(mu, L, plates=(80,), name="y").observe(X, mask=~np.isnan(X))
    pred = y.predictive()
    assert pred.exact
    rng = np.random.default_rng(5)
    for n in (1, 2, 3):
        x = X[n]
        o = np.isfinite(x)
        cm, cc = _gauss_conditional(mu, C3, x)
        np.testing.assert_allclose(pred.mean[n][~o], cm, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(pred.mean[n][o], x[o])          # observed: their value
        np.testing.assert_allclose(pred.cov[n][np.ix_(~o, ~o)], cc, rtol=0, atol=1e-12)
        assert np.all(pred.cov[n][o] == 0) and np.all(pred.cov[n][:, o] == 0)
        for xm in rng.normal(size=(4, (~o).sum())):
            lp = pred[n:n + 1].logpdf(_fill(x, xm)[None])[0]
            assert lp == pytest.approx(stats.multivariate_normal(cm, cc).logpdf(xm), abs=1e-12)
    # fully observed rows and the fully masked row: the unconditional N(mu, Sigma)
    rows = np.r_[0, 4:80]
    np.testing.assert_allclose(pred.mean[rows], np.broadcast_to(mu, (77, 3)), rtol=0, atol=1e-12)
    np.testing.assert_allclose(pred.cov[rows], np.broadcast_to(C3, (77, 3, 3)), rtol=0, atol=1e-12)


def test_em_point_estimates_give_the_gaussian_conditional():
    X = _data(seed=1)
    mu = bg.MultivariateNormal(np.zeros(3), np.eye(3) * 0.01, name="mu")
    L = bg.Wishart(5.0, np.eye(3) / 5.0, name="L")
    y = bg.MultivariateNormal(mu, L, plates=(80,), name="y").observe(X, mask=~np.isnan(X))
    bg.Model(y).fit("em")
    m_hat, L_hat = mu.posterior.point, L.posterior.point
    Sigma = np.linalg.inv(L_hat)
    pred = y.predictive()
    for n in (1, 2, 3):
        cm, cc = _gauss_conditional(m_hat, Sigma, X[n])
        o = np.isfinite(X[n])
        np.testing.assert_allclose(pred.mean[n][~o], cm, rtol=0, atol=1e-12)
        np.testing.assert_allclose(pred.cov[n][np.ix_(~o, ~o)], cc, rtol=0, atol=1e-12)


# ---- conjugate: the multivariate-t conditional --------------------------------------------
def test_t_conditional_is_ratio_of_joint_to_marginal():
    """MultivariateT.condition against scipy: log t_cond(x_m) = log t(x) - log t_o(x_o)."""
    from blrgraph.predictive import MultivariateT
    loc = np.array([0.3, -1.0, 2.0, 0.1])
    A = np.random.default_rng(2).normal(size=(4, 4))
    shape = A @ A.T + np.eye(4)
    df = 5.5
    t = MultivariateT(df, loc, shape, (3,))
    x = np.array([[0.5, np.nan, 1.0, np.nan], [np.nan, -2.0, np.nan, np.nan],
                  [1.0, 0.0, 3.0, np.nan]])
    _, cond = t.condition(x)
    rng = np.random.default_rng(3)
    for n in range(3):
        o = np.isfinite(x[n])
        marg = stats.multivariate_t(loc[o], shape[np.ix_(o, o)], df=df)
        joint = stats.multivariate_t(loc, shape, df=df)
        for xm in rng.normal(size=(5, (~o).sum())) * 2:
            full = _fill(x[n], xm)
            want = joint.logpdf(full) - marg.logpdf(x[n][o])
            assert cond[n:n + 1].logpdf(full[None])[0] == pytest.approx(want, abs=1e-10)


def test_normal_wishart_partly_observed_rows_are_t_conditionals():
    X = _data(seed=2)
    theta = bg.NormalWishart(np.zeros(3), 0.1, 5.0, np.eye(3) / 5.0, name="theta")
    y = bg.MultivariateNormal(theta, plates=(80,), name="y").observe(X, mask=~np.isnan(X))
    bg.Model(y).fit("vmp")
    p = theta.posterior.params
    df = p["dof"] - 3 + 1
    shape = np.linalg.inv(p["scale"]) * (1 + p["beta"]) / (p["beta"] * df)
    pred = y.predictive()
    assert pred.exact
    joint = stats.multivariate_t(p["mean"], shape, df=df)
    rng = np.random.default_rng(4)
    for n in (1, 2, 3):
        x = X[n]
        o = np.isfinite(x)
        dfc, lc, sc = _t_conditional(p["mean"], shape, df, x)
        np.testing.assert_allclose(pred.mean[n][~o], lc, rtol=0, atol=1e-10)
        np.testing.assert_allclose(pred.cov[n][np.ix_(~o, ~o)], sc * dfc / (dfc - 2),
                                   rtol=0, atol=1e-10)
        np.testing.assert_array_equal(pred.var[n][o], 0.0)
        marg = stats.multivariate_t(p["mean"][o], shape[np.ix_(o, o)], df=df)
        for xm in rng.normal(size=(4, (~o).sum())):
            full = _fill(x, xm)
            want = joint.logpdf(full) - marg.logpdf(x[o])
            got = pred[n:n + 1].logpdf(full[None])[0]
            assert got == pytest.approx(want, abs=1e-10)
    # fully observed rows and the fully masked row: the unconditional t
    rows = np.r_[0, 4:80]
    np.testing.assert_allclose(pred.mean[rows], np.broadcast_to(p["mean"], (77, 3)),
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(pred.cov[rows], np.broadcast_to(shape * df / (df - 2), (77, 3, 3)),
                               rtol=0, atol=1e-12)


def test_normal_wishart_t_conditional_is_expectation_of_gaussian_conditional():
    """The t-conditional equals E_q[N(x_m | mu_m + B(x_o - mu_o), Sigma_m|o)] under the
    NormalWishart q (the row's cells are not counted twice): 200000 draws of q, within 5
    standard errors at three points."""
    X = _data(seed=3)
    theta = bg.NormalWishart(np.zeros(3), 0.1, 5.0, np.eye(3) / 5.0, name="theta")
    y = bg.MultivariateNormal(theta, plates=(80,), name="y").observe(X, mask=~np.isnan(X))
    bg.Model(y).fit("vmp")
    mu, lam = theta.posterior.sample(200_000, seed=1)
    Sig = np.linalg.inv(lam)
    x = X[2]                                        # coordinates 0 and 2 missing
    o = np.isfinite(x)
    m = ~o
    B = Sig[:, m][:, :, o] @ np.linalg.inv(Sig[:, o][:, :, o])
    loc = mu[:, m] + np.einsum("sij,sj->si", B, x[o] - mu[:, o])
    cov = Sig[:, m][:, :, m] - B @ Sig[:, o][:, :, m]
    pred = y.predictive()
    for xm in ([0.0, 2.0], [1.0, 1.5], [-0.5, 2.5]):
        d = np.asarray(xm) - loc
        dens = np.exp(-0.5 * np.einsum("si,si->s", d, np.linalg.solve(cov, d[..., None])[..., 0])
                      - 0.5 * np.log(np.linalg.det(2 * np.pi * cov)))
        got = np.exp(pred[2:3].logpdf(_fill(x, xm)[None])[0])
        assert abs(dens.mean() - got) < 5 * dens.std() / np.sqrt(len(dens))


def test_fixed_mean_wishart_partly_observed_rows_are_t_conditionals():
    X = _data(seed=4)
    m0 = np.array([0.5, -1.0, 2.0])
    L = bg.Wishart(5.0, np.eye(3) / 5.0, name="L")
    y = bg.MultivariateNormal(m0, L, plates=(80,), name="y").observe(X, mask=~np.isnan(X))
    bg.Model(y).fit("vmp")
    p = L.posterior.params
    df = p["dof"] - 3 + 1
    shape = np.linalg.inv(p["scale"]) / df
    pred = y.predictive()
    joint = stats.multivariate_t(m0, shape, df=df)
    for n in (1, 2, 3):
        x = X[n]
        o = np.isfinite(x)
        dfc, lc, sc = _t_conditional(m0, shape, df, x)
        np.testing.assert_allclose(pred.mean[n][~o], lc, rtol=0, atol=1e-10)
        np.testing.assert_allclose(pred.cov[n][np.ix_(~o, ~o)], sc * dfc / (dfc - 2),
                                   rtol=0, atol=1e-10)
        full = _fill(x, np.linspace(-1, 1, (~o).sum()))
        marg = stats.multivariate_t(m0[o], shape[np.ix_(o, o)], df=df)
        want = joint.logpdf(full) - marg.logpdf(x[o])
        assert pred[n:n + 1].logpdf(full[None])[0] == pytest.approx(want, abs=1e-10)


def test_gaussian_mean_fixed_precision_is_exact_expectation_not_conditional_of_marginal():
    """x ~ N(mu, Sigma), q(mu) = N(m, S): E_q[p(x_m | x_o, mu)] =
    N(m_m + B(x_o - m_o), Sigma_m|o + [I, -B] S [I, -B]^T), B = Sigma_mo Sigma_oo^-1."""
    X = _data(N=6, seed=5)
    L = np.linalg.inv(C3)
    mu = bg.MultivariateNormal(np.zeros(3), np.eye(3) * 0.5, name="mu")
    y = bg.MultivariateNormal(mu, L, plates=(6,), name="y").observe(X, mask=~np.isnan(X))
    bg.Model(y).fit("vmp")
    m, S = mu.posterior.mean, mu.posterior.cov
    pred = y.predictive()
    assert pred.exact
    for n in (1, 2, 3):
        x = X[n]
        o = np.isfinite(x)
        mi = ~o
        B = C3[np.ix_(mi, o)] @ np.linalg.inv(C3[np.ix_(o, o)])
        A = np.zeros((mi.sum(), 3))
        A[:, mi] = np.eye(mi.sum())
        A[:, o] = -B
        cm = m[mi] + B @ (x[o] - m[o])
        cc = C3[np.ix_(mi, mi)] - B @ C3[np.ix_(o, mi)] + A @ S @ A.T
        np.testing.assert_allclose(pred.mean[n][mi], cm, rtol=0, atol=1e-12)
        np.testing.assert_allclose(pred.cov[n][np.ix_(mi, mi)], cc, rtol=0, atol=1e-12)
        # not the conditional of the joint N(m, S + Sigma): that counts x_o twice
        wrong, _ = _gauss_conditional(m, S + C3, x)
        assert np.max(np.abs(wrong - cm)) > 1e-3
    rows = np.r_[0, 4, 5]                  # fully observed and fully masked: N(m, S + Sigma)
    np.testing.assert_allclose(pred.mean[rows], np.broadcast_to(m, (3, 3)), rtol=0, atol=1e-12)
    np.testing.assert_allclose(pred.cov[rows], np.broadcast_to(S + C3, (3, 3, 3)),
                               rtol=0, atol=1e-12)


# ---- mixtures: q(z_n) times the components' conditionals -------------------------------------
def test_mixture_row_mixes_component_conditionals_with_fitted_responsibilities():
    rng = np.random.default_rng(6)
    X = np.r_[rng.multivariate_normal([0, 0, 0], C3, 40),
              rng.multivariate_normal([4, 3, -2], C3, 40)]
    X[[1, 45], 1] = np.nan
    X[[2], 0:2] = np.nan
    X[[50], :] = np.nan
    w = bg.Dirichlet(np.ones(2), name="w")
    theta = bg.NormalWishart(np.full(3, 1.0), 0.1, 5.0, np.eye(3) / 5.0, plates=(2,), name="theta")
    z = bg.Categorical(w, plates=(80,), name="z")
    x = bg.Mixture(z, bg.MultivariateNormal, theta, name="x").observe(X, mask=~np.isnan(X))
    bg.Model(x).fit("vmp", seed=0)
    r = z.posterior.mean
    p = theta.posterior.params
    df = p["dof"] - 3 + 1
    shapes = np.linalg.inv(p["scale"]) * ((1 + p["beta"]) / (p["beta"] * df))[:, None, None]
    pred = x.predictive()
    np.testing.assert_array_equal(pred.weights, r)
    for n in (1, 2, 45):
        xn = X[n]
        o = np.isfinite(xn)
        conds = [_t_conditional(p["mean"][k], shapes[k], df[k], xn) for k in range(2)]
        mean = sum(r[n, k] * conds[k][1] for k in range(2))
        np.testing.assert_allclose(pred.mean[n][~o], mean, rtol=0, atol=1e-10)
        np.testing.assert_array_equal(pred.mean[n][o], xn[o])
        covs = [c[2] * c[0] / (c[0] - 2) for c in conds]
        second = sum(r[n, k] * (covs[k] + np.outer(conds[k][1], conds[k][1])) for k in range(2))
        np.testing.assert_allclose(pred.cov[n][np.ix_(~o, ~o)], second - np.outer(mean, mean),
                                   rtol=0, atol=1e-9)
        full = _fill(xn, np.linspace(-0.5, 0.5, (~o).sum()))
        lk = [stats.multivariate_t(conds[k][1], conds[k][2], df=conds[k][0]).logpdf(full[~o])
              for k in range(2)]
        want = logsumexp(np.log(r[n]) + np.array(lk))
        assert pred[n:n + 1].logpdf(full[None])[0] == pytest.approx(want, abs=1e-10)
    # fully observed rows and the fully masked row keep sum_k q(z_n = k) t_k
    rows = np.setdiff1d(np.arange(80), [1, 2, 45])
    _check_unchanged_rows(pred, pred.base, rows)
    tm = np.einsum("nk,kd->nd", r, p["mean"])
    np.testing.assert_allclose(pred.mean[rows], tm[rows], rtol=0, atol=1e-10)


# ---- mean field: Monte Carlo over q -------------------------------------------------------
def test_mean_field_mean_and_wishart_monte_carlo_conditional():
    """Separate mean and Wishart nodes: each draw of q gives a Gaussian conditional; the
    mean E[x_m | x_o] = m_m + E[B](x_o - m_o) with E[B] = -W_mm^-1 W_mo (q(mu) and q(L)
    independent) is met within 5 standard errors of the draws."""
    rng = np.random.default_rng(0)
    C = np.array([[1, .9], [.9, 1]])
    X = rng.multivariate_normal([0, 0], C, size=150)
    X[0, 1] = np.nan
    mu = bg.MultivariateNormal(np.zeros(2), np.eye(2) * 0.01, name="mu")
    L = bg.Wishart(4.0, np.eye(2) / 4.0, name="L")
    y = bg.MultivariateNormal(mu, L, plates=(150,), name="y").observe(X, mask=~np.isnan(X))
    bg.Model(y).fit("vmp")
    pred = y.predictive(samples=4000, seed=2)
    assert not pred.exact
    m = mu.posterior.mean
    W = L.posterior.params["scale"]
    want = m[1] - W[1, 0] / W[1, 1] * (X[0, 0] - m[0])
    draws = pred.cond.components.loc[0, :, 1]          # the draws' conditional means
    mean, var = pred.mean, pred.var
    assert abs(mean[0, 1] - want) < 5 * draws.std() / np.sqrt(len(draws))
    assert mean[0, 0] == X[0, 0] and var[0, 0] == 0.0
    # the imputation follows x_00 (correlation 0.9): not the unconditional predictive
    assert var[0, 1] < 0.3 * var[1, 1]
    np.testing.assert_array_equal(mean[1:], pred.base.mean[1:])


# ---- the Predictive object: samples, indexing --------------------------------------------
def test_partly_observed_samples_and_indexing():
    X = _data(seed=7)
    mu = np.array([0.4, -0.9, 2.1])
    y = bg.MultivariateNormal(mu, np.linalg.inv(C3), plates=(80,), name="y").observe(
        X, mask=~np.isnan(X))
    pred = y.predictive()
    s = pred.sample(50_000, seed=1)
    assert s.shape == (50_000, 80, 3)
    o = np.isfinite(X[2])
    np.testing.assert_array_equal(s[:, 2][:, o], np.broadcast_to(X[2][o], (50_000, o.sum())))
    se = np.sqrt(pred.var[1:4] / 50_000)
    assert np.all(np.abs(s[:, 1:4].mean(0) - pred.mean[1:4]) <= 4 * se + 1e-12)
    assert pred.sample(seed=1).shape == (80, 3)
    sub = pred[1:3]
    np.testing.assert_array_equal(sub.mean, pred.mean[1:3])
    np.testing.assert_array_equal(sub.cov, pred.cov[1:3])
    np.testing.assert_array_equal(pred[5:9].mean, pred.mean[5:9])     # no partly observed row
    v = np.where(np.isfinite(X), X, 0.5)
    np.testing.assert_array_equal(pred[1:3].logpdf(v[1:3]), pred.logpdf(v)[1:3])


# ---- io.responsibilities ----------------------------------------------------------------
def test_responsibilities_plates_n1k_and_refusal():
    rng = np.random.default_rng(8)
    X = np.r_[rng.normal(0, 1, (30, 2)), rng.normal(5, 1, (30, 2))]
    w = bg.Dirichlet(np.ones(2), name="weights")
    theta = bg.NormalGamma(np.full((2, 2), 2.5), 0.1, 1.0, 1.0, plates=(2, 2), name="theta")
    z = bg.Categorical(w, plates=(60, 1), name="z")
    x = bg.Mixture(z, bg.Normal, theta, name="x").observe(X)
    model = bg.Model(x)
    model.fit("vmp", seed=1)
    r = io.responsibilities(model)
    assert r.shape == (60, 2)
    np.testing.assert_array_equal(r, z.posterior.mean[:, 0, :])
    z2 = bg.Categorical(bg.Dirichlet(np.ones(2), name="w2"), plates=(60, 2), name="z2")
    x2 = bg.Mixture(z2, bg.Normal, bg.NormalGamma(0.0, 0.1, 1.0, 1.0, plates=(2,), name="t2"),
                    name="x2").observe(X)
    m2 = bg.Model(x2)
    m2.fit("vmp", seed=1)
    with pytest.raises(ValueError, match="z2.*one assignment per row"):
        io.responsibilities(m2, "z2")


# ---- data far from zero (docs/dev/numerics.md) ----------------------------------------------
def test_gaussian_mean_conditional_with_a_location_shift():
    """A predictive kept relative to a shift c (1e6) conditions like the same predictive at
    0: conditional means moved by c (to the ulp of c), covariances and log densities equal.
    (The fits themselves are not compared: a VMP fit of partly observed rows at an offset
    of 1e6 stops at a slightly different q, see the report.)"""
    from blrgraph.predictive import MultivariateT
    from blrgraph.predictive.partial import _gaussian_mean_conditional
    c = np.array([1e6, -2e6, 5e5])
    m = np.array([0.3, -0.2, 1.1])
    S = np.array([[0.2, 0.05, 0.0], [0.05, 0.1, 0.02], [0.0, 0.02, 0.3]])
    X = _data(N=5, seed=10)[:4] - np.array([0.5, -1.0, 2.0])
    p1 = MultivariateT(np.inf, m, S + C3, (4,), shift=c)
    p0 = MultivariateT(np.inf, m, S + C3, (4,))
    Sb, Nb = np.broadcast_to(S, (4, 3, 3)), np.broadcast_to(C3, (4, 3, 3))
    c1 = _gaussian_mean_conditional(p1, Sb, Nb, X + c)
    c0 = _gaussian_mean_conditional(p0, Sb, Nb, X)
    assert np.max(np.abs((c1.mean - c) - c0.mean)) <= 2 * np.spacing(2e6)
    np.testing.assert_array_equal(c1.cov, c0.cov)
    v = np.where(np.isfinite(X), X, 0.25)
    np.testing.assert_allclose(c1.logpdf(v + c), c0.logpdf(v), rtol=0, atol=1e-9)


def test_mean_field_mixture_components_monte_carlo_conditional():
    """Mixture of MultivariateNormal(mu_k, L_k) with separate mean and Wishart nodes: the
    row keeps q(z_n); its mean is sum_k r_k (m_km + E[B_k](x_o - m_ko)), E[B_k] =
    -W_k,mm^-1 W_k,mo, within 5 standard errors of the draws."""
    rng = np.random.default_rng(6)
    X = np.r_[rng.multivariate_normal([0, 0, 0], C3, 40),
              rng.multivariate_normal([4, 3, -2], C3, 40)]
    X[[1, 45], 1] = np.nan
    X[50, :] = np.nan
    w = bg.Dirichlet(np.ones(2), name="w")
    mu = bg.MultivariateNormal(np.full(3, 1.0), np.eye(3) * 0.1, plates=(2,), name="mu")
    L = bg.Wishart(5.0, np.eye(3) / 5.0, plates=(2,), name="L")
    z = bg.Categorical(w, plates=(80,), name="z")
    x = bg.Mixture(z, bg.MultivariateNormal, mu, L, name="x").observe(X, mask=~np.isnan(X))
    bg.Model(x).fit("vmp", seed=0)
    pred = x.predictive(samples=4000, seed=1)
    assert not pred.exact
    r = z.posterior.mean
    np.testing.assert_array_equal(pred.weights, r)
    m, W = mu.posterior.mean, L.posterior.params["scale"]
    o = np.array([0, 2])
    mean = pred.mean
    for j, n in enumerate((1, 45)):
        want = sum(r[n, k] * (m[k, 1] - np.linalg.solve(W[k][1:2, 1:2], W[k][1:2][:, o])[0]
                              @ (X[n, o] - m[k, o])) for k in range(2))
        comp = pred.cond.components              # (rows, K) mixtures over the draws
        draws = np.einsum("k,ks->s", r[n], comp.components.loc[j, :, :, 1])
        assert abs(mean[n, 1] - want) < 5 * draws.std() / np.sqrt(draws.size)
        np.testing.assert_array_equal(mean[n, o], X[n, o])
    rows = np.setdiff1d(np.arange(80), [1, 45])
    np.testing.assert_array_equal(mean[rows], pred.base.mean[rows])
