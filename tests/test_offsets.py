"""Large offsets (issue 14): data far from zero relative to their spread.

Coordinates, timestamps and sensor readings look like 1e8 + 1e-3 N(0, 1). The engine
centres every Gaussian location group on its data (docs/dev/numerics.md); these tests
hold it to the closed forms (themselves checked against 60-digit arithmetic), to
1e-9 relative, for offsets up to 1e8, spreads down to 1e-3 and N from 1 to 1e6, with
plates and masks, by fit("conjugate") and fit("vmp"); and a Gaussian mixture at
+1e6 / +1e8 must converge as at 0, with a monotone ELBO trace.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

mpmath = pytest.importorskip("mpmath")

import blrgraph as bg  # noqa: E402
from blrgraph import closed_form as cf  # noqa: E402

mp = mpmath.mp

RTOL = 1e-9
OFFSETS = st.sampled_from([0.0, 1e3, 1e5, -1e6, 1e8, -1e8, 12345678.9])
SCALES = st.sampled_from([1e-3, 1e-2, 1.0, 30.0])
NS = st.sampled_from([1, 2, 3, 10, 100, 1000])
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def assert_close(got, want, rtol=RTOL, scale=0.0, what=""):
    """|got - want| <= rtol (|want| + scale), elementwise."""
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    err = np.abs(got - want)
    bound = rtol * (np.abs(want) + scale)
    assert np.all(err <= bound), f"{what}: got {got}, want {want} (max rel {np.max(err / (np.abs(want) + scale + 1e-300)):.3g})"


def data(seed, n, offset, scale, d=None):
    rng = np.random.default_rng(seed)
    shape = (n,) if d is None else (n, d)
    return offset + scale * rng.standard_normal(shape), rng


# ---------------------------------------------------------------------------
# closed_form against exact arithmetic (60 digits on the same double inputs)
# ---------------------------------------------------------------------------
def _mp_stats(x):
    xs = [mp.mpf(float(v)) for v in np.ravel(x)]
    n = len(xs)
    xbar = mp.fsum(xs) / n
    return n, xbar, mp.fsum((v - xbar) ** 2 for v in xs)


def mp_normal_gamma(x, m0, k0, a0, b0):
    with mp.workdps(60):
        m0, k0, a0, b0 = (mp.mpf(float(v)) for v in (m0, k0, a0, b0))
        n, xbar, ss = _mp_stats(x)
        kn, an = k0 + n, a0 + mp.mpf(n) / 2
        mn = (k0 * m0 + n * xbar) / kn
        bn = b0 + ss / 2 + k0 * n * (xbar - m0) ** 2 / (2 * kn)
        lev = (mp.loggamma(an) - mp.loggamma(a0) + a0 * mp.log(b0) - an * mp.log(bn)
               + mp.log(k0 / kn) / 2 - n * mp.log(2 * mp.pi) / 2)
        return {"mean": float(mn), "beta": float(kn), "shape": float(an), "rate": float(bn)}, float(lev)


def mp_normal_known_precision(x, m0, p0, p):
    with mp.workdps(60):
        m0, p0, p = (mp.mpf(float(v)) for v in (m0, p0, p))
        n, xbar, ss = _mp_stats(x)
        pn = p0 + n * p
        mn = (p0 * m0 + p * n * xbar) / pn
        lev = (n * (mp.log(p) - mp.log(2 * mp.pi)) / 2 + mp.log(p0 / pn) / 2 - p * ss / 2
               - n * p * p0 * (xbar - m0) ** 2 / (2 * pn))
        return {"mean": float(mn), "precision": float(pn)}, float(lev)


def _mp_matrix(a):
    a = np.atleast_2d(np.asarray(a, dtype=float))
    return mp.matrix([[mp.mpf(float(v)) for v in row] for row in a])


def _mp_scatter(X):
    n, D = X.shape
    rows = [[mp.mpf(float(v)) for v in r] for r in X]
    xbar = mp.matrix([mp.fsum(r[j] for r in rows) / n for j in range(D)])
    S = mp.matrix(D, D)
    for i in range(D):
        for j in range(D):
            S[i, j] = mp.fsum((r[i] - xbar[i]) * (r[j] - xbar[j]) for r in rows)
    return n, xbar, S


def _mp_logmvgamma(a, D):
    return D * (D - 1) * mp.log(mp.pi) / 4 + mp.fsum(mp.loggamma(a - mp.mpf(j) / 2) for j in range(D))


def mp_normal_wishart(X, m0, b0, nu0, W0):
    with mp.workdps(60):
        D = X.shape[1]
        m0 = _mp_matrix(m0).T
        b0, nu0 = mp.mpf(float(b0)), mp.mpf(float(nu0))
        n, xbar, S = _mp_scatter(X)
        bn, nun = b0 + n, nu0 + n
        mn = (b0 * m0 + n * xbar) / bn
        d = xbar - m0
        W0inv = _mp_matrix(W0) ** -1
        Wninv = W0inv + S + (b0 * n / bn) * (d * d.T)
        lev = (-n * D * mp.log(mp.pi) / 2 + _mp_logmvgamma(nun / 2, D) - _mp_logmvgamma(nu0 / 2, D)
               + nu0 * mp.log(mp.det(W0inv)) / 2 - nun * mp.log(mp.det(Wninv)) / 2
               + D * mp.log(b0 / bn) / 2)
        Wn = Wninv ** -1
        return ({"mean": np.array([float(v) for v in mn]), "beta": float(bn), "dof": float(nun),
                 "scale": np.array([[float(Wn[i, j]) for j in range(D)] for i in range(D)])},
                float(lev))


def mp_mvn_known_precision(X, m0, L0, L):
    with mp.workdps(60):
        D = X.shape[1]
        m0 = _mp_matrix(m0).T
        L0m, Lm = _mp_matrix(L0), _mp_matrix(L)
        n, xbar, S = _mp_scatter(X)
        Ln = L0m + n * Lm
        mn = Ln ** -1 * (L0m * m0 + n * (Lm * xbar))
        d = xbar - m0
        quad = (d.T * L0m * (Ln ** -1) * (n * (Lm * d)))[0] if n else 0
        tr = mp.fsum(Lm[i, j] * S[i, j] for i in range(D) for j in range(D))
        lev = (-n * D * mp.log(2 * mp.pi) / 2 + n * mp.log(mp.det(Lm)) / 2 + mp.log(mp.det(L0m)) / 2
               - mp.log(mp.det(Ln)) / 2 - tr / 2 - quad / 2)
        return ({"mean": np.array([float(v) for v in mn]),
                 "precision": np.array([[float(Ln[i, j]) for j in range(D)] for i in range(D)])},
                float(lev))


def assert_result(res, params, lev, scales, rtol=1e-12):
    for k, v in params.items():
        assert_close(res.params[k], v, rtol, scale=scales.get(k, 0.0), what=k)
    assert_close(res.log_evidence, lev, rtol, scale=1.0, what="log evidence")


@SETTINGS
@given(offset=OFFSETS, scale=SCALES, n=NS, seed=st.integers(0, 10 ** 6),
       rel=st.floats(-3, 3), k0=st.sampled_from([1e-3, 1.0, 50.0]))
def test_closed_form_normal_gamma_and_known_precision_match_exact_arithmetic(offset, scale, n, seed,
                                                                            rel, k0):
    x, _ = data(seed, n, offset, scale)
    m0, b0 = offset + rel * scale, 0.7 * scale ** 2
    params, lev = mp_normal_gamma(x, m0, k0, 2.0, b0)
    assert_result(cf.normal_gamma(x, m0, k0, 2.0, b0), params, lev, {"mean": scale})
    p = 1.0 / scale ** 2
    params, lev = mp_normal_known_precision(x, m0, k0 * p, p)
    assert_result(cf.normal_known_precision(x, m0, k0 * p, p), params, lev, {"mean": scale})


@SETTINGS
@given(offset=OFFSETS, scale=SCALES, n=st.sampled_from([1, 2, 5, 40]), seed=st.integers(0, 10 ** 6),
       k0=st.sampled_from([1e-3, 1.0, 50.0]))
def test_closed_form_normal_wishart_and_mvn_match_exact_arithmetic(offset, scale, n, seed, k0):
    X, rng = data(seed, n, offset, scale, d=2)
    X[:, 1] = -0.5 * offset + scale * rng.standard_normal(n)
    m0 = X.mean(axis=0) + 0.3 * scale
    W0 = np.array([[1.0, 0.3], [0.3, 2.0]]) / scale ** 2
    params, lev = mp_normal_wishart(X, m0, k0, 3.5, W0)
    assert_result(cf.normal_wishart(X, m0, k0, 3.5, W0), params, lev, {"mean": scale})
    L = np.linalg.inv(W0) * 0 + np.array([[2.0, 0.4], [0.4, 1.0]]) / scale ** 2
    params, lev = mp_mvn_known_precision(X, m0, k0 * L, L)
    assert_result(cf.mvn_known_precision(X, m0, k0 * L, L), params, lev, {"mean": scale})


def test_closed_form_normal_gamma_kept_its_digits_where_it_used_to_lose_them():
    """1e8 + 1e-3 N(0, 1): the mean about zero lost 1e-8 of each residual (5 digits of
    the rate); about a data point nothing is lost."""
    x, _ = data(3, 100, 1e8, 1e-3)
    params, _ = mp_normal_gamma(x, 1e8, 1.0, 1.0, 1e-6)
    assert_close(cf.normal_gamma(x, 1e8, 1.0, 1.0, 1e-6).params["rate"], params["rate"], 1e-13)


# ---------------------------------------------------------------------------
# the engine against the closed forms
# ---------------------------------------------------------------------------
def _fit(node, method):
    bg.Model(node).fit(method)


@SETTINGS
@given(offset=OFFSETS, scale=SCALES, n=NS, seed=st.integers(0, 10 ** 6), k0=st.sampled_from([1e-3, 1.0, 20.0]),
       method=st.sampled_from(["conjugate", "vmp"]))
def test_normal_gamma_joint_equals_closed_form(offset, scale, n, seed, k0, method):
    x, _ = data(seed, n, offset, scale)
    m0, b0 = offset + 0.5 * scale, 2.0 * scale ** 2
    th = bg.NormalGamma(m0, k0, 1.5, b0, name="th")
    y = bg.Normal(th, name="y").observe(x)
    m = bg.Model(y)
    fit = m.fit(method)
    ref = cf.normal_gamma(x, m0, k0, 1.5, b0)
    p = th.posterior.params
    for k, v in ref.params.items():
        assert_close(p[k], v, scale=scale if k == "mean" else 0.0, what=k)
    assert_close(th.posterior.mean[0], ref.params["mean"], scale=scale, what="posterior.mean")
    assert_close(fit.elbo, ref.log_evidence, scale=1.0, what="ELBO = log evidence")


@SETTINGS
@given(offset=OFFSETS, scale=SCALES, n=NS, seed=st.integers(0, 10 ** 6), k0=st.sampled_from([1e-3, 1.0, 20.0]),
       method=st.sampled_from(["conjugate", "vmp"]))
def test_normal_known_precision_and_gamma_known_mean_equal_closed_form(offset, scale, n, seed, k0, method):
    x, _ = data(seed, n, offset, scale)
    p = 1.0 / scale ** 2
    m0 = offset - 0.25 * scale
    mu = bg.Normal(m0, k0 * p, name="mu")
    y = bg.Normal(mu, p, name="y").observe(x)
    _fit(y, method)
    ref = cf.normal_known_precision(x, m0, k0 * p, p)
    assert_close(mu.posterior.mean, ref.params["mean"], scale=scale, what="mean")
    assert_close(mu.posterior.params["precision"], ref.params["precision"], what="precision")
    lo, hi = mu.posterior.to_scipy().interval(0.5)
    assert_close(0.5 * (lo + hi), ref.params["mean"], scale=scale, what="to_scipy location")

    tau = bg.Gamma(2.0, 3.0 * scale ** 2, name="tau")
    y = bg.Normal(m0, tau, name="y").observe(x)
    _fit(y, method)
    ref = cf.gamma_known_mean(x, m0, 2.0, 3.0 * scale ** 2)
    for k, v in ref.params.items():
        assert_close(tau.posterior.params[k], v, what=k)


@SETTINGS
@given(n=st.sampled_from([2, 5, 50, 400]), p=st.integers(1, 4), seed=st.integers(0, 10 ** 6),
       frac=st.sampled_from([0.0, 0.2, 0.6]), method=st.sampled_from(["conjugate", "vmp"]))
def test_normal_gamma_plates_per_column_offsets_and_masks(n, p, seed, frac, method):
    """One NormalGamma per column (plates (P,)), columns at offsets 0 .. 1e8 with spreads
    1e-3 .. 10, a random mask: each column equals the closed form of its observed rows."""
    rng = np.random.default_rng(seed)
    offs = rng.choice([0.0, 1e4, -1e6, 1e8, 3e7], size=p)
    scs = rng.choice([1e-3, 0.1, 10.0], size=p)
    X = offs + scs * rng.standard_normal((n, p))
    mask = rng.random((n, p)) >= frac
    mask[0] = True                      # every column keeps a row
    X[~mask] = np.nan
    m0 = offs + scs
    th = bg.NormalGamma(m0, 0.1, 1.0, scs ** 2, name="th")
    y = bg.Normal(th, name="y").observe(X, mask=mask)
    _fit(y, method)
    post = th.posterior.params
    for d in range(p):
        ref = cf.normal_gamma(X[mask[:, d], d], m0[d], 0.1, 1.0, scs[d] ** 2).params
        for k, v in ref.items():
            assert_close(post[k][d], v, scale=scs[d] if k == "mean" else 0.0, what=f"{k}[{d}]")


@SETTINGS
@given(offset=OFFSETS, scale=SCALES, n=st.sampled_from([1, 2, 7, 300]), seed=st.integers(0, 10 ** 6),
       k0=st.sampled_from([1e-2, 1.0, 20.0]), method=st.sampled_from(["conjugate", "vmp"]),
       masked=st.booleans())
def test_normal_wishart_and_mvn_equal_closed_form(offset, scale, n, seed, k0, method, masked):
    X, rng = data(seed, n, offset, scale, d=2)
    X[:, 1] = 0.3 * offset + scale * rng.standard_normal(n)
    mask = np.ones(n, bool)
    if masked and n > 1:
        mask[1::3] = False
    m0 = np.array([offset, 0.3 * offset]) + scale
    W0 = np.array([[1.0, 0.2], [0.2, 0.5]]) / scale ** 2
    th = bg.NormalWishart(m0, k0, 3.0, W0, name="th")
    y = bg.MultivariateNormal(th, name="y").observe(X, mask=mask)
    _fit(y, method)
    ref = cf.normal_wishart(X[mask], m0, k0, 3.0, W0).params
    post = th.posterior.params
    for k, v in ref.items():
        assert_close(post[k], v, scale=scale if k == "mean" else 0.0, what=k)
    assert_close(th.posterior.mean[0], ref["mean"], scale=scale, what="posterior.mean")

    L = np.array([[2.0, -0.3], [-0.3, 1.0]]) / scale ** 2
    mu = bg.MultivariateNormal(m0, k0 * L, name="mu")
    y = bg.MultivariateNormal(mu, L, name="y").observe(X, mask=mask)
    _fit(y, method)
    ref = cf.mvn_known_precision(X[mask], m0, k0 * L, L).params
    assert_close(mu.posterior.mean, ref["mean"], scale=scale, what="mean")
    assert_close(mu.posterior.params["precision"], ref["precision"], what="precision")


@pytest.mark.parametrize("offset", [1e8, -1e6])
def test_a_million_points_at_a_large_offset(offset):
    x, rng = data(0, 10 ** 6, offset, 1e-3)
    th = bg.NormalGamma(offset, 1.0, 1.0, 1e-6, name="th")
    y = bg.Normal(th, name="y").observe(x)
    _fit(y, "conjugate")
    ref = cf.normal_gamma(x, offset, 1.0, 1.0, 1e-6).params
    for k, v in ref.items():
        assert_close(th.posterior.params[k], v, scale=1e-3 if k == "mean" else 0.0, what=k)
    X = np.column_stack([x, -x + 2 * offset + 1e-3 * rng.standard_normal(x.size)])
    nw = bg.NormalWishart(np.array([offset, offset]), 1.0, 3.0, np.eye(2) * 1e6, name="nw")
    y = bg.MultivariateNormal(nw, name="y").observe(X)
    _fit(y, "vmp")
    ref = cf.normal_wishart(X, np.array([offset, offset]), 1.0, 3.0, np.eye(2) * 1e6).params
    for k, v in ref.items():
        assert_close(nw.posterior.params[k], v, scale=1e-3 if k == "mean" else 0.0, what=k)


def test_issue_case_normal_gamma_at_1e8_over_ten_seeds():
    """The issue's report: 100 points of 1e8 + N(0, 1); rate 128 (or a crash) instead of 37.26."""
    for seed in range(10):
        x, _ = data(seed, 100, 1e8, 1.0)
        th = bg.NormalGamma(0.0, 1e-6, 1.0, 1.0, name="th")
        y = bg.Normal(th, name="y").observe(x)
        _fit(y, "conjugate")
        ref = cf.normal_gamma(x, 0.0, 1e-6, 1.0, 1.0).params
        for k, v in ref.items():
            assert_close(th.posterior.params[k], v, what=k)


def test_posterior_values_are_in_the_data_coordinates():
    """Natural parameters are those of the centred variable; everything a user reads is not."""
    x, _ = data(1, 50, 1e8, 1.0)
    th = bg.NormalGamma(1e8, 1.0, 2.0, 1.0, name="th")
    y = bg.Normal(th, name="y").observe(x)
    _fit(y, "conjugate")
    post = th.posterior
    ref = cf.normal_gamma(x, 1e8, 1.0, 2.0, 1.0).params
    assert abs(post.point[0] - ref["mean"]) < 1e-7
    t, g = post.to_scipy()
    assert abs(t.mean() - ref["mean"]) < 1e-7 and abs(g.mean() - ref["shape"] / ref["rate"]) < 1e-12
    draws = th.family.sample(post.natural, rng=np.random.default_rng(0), size=2000)[0]
    assert abs(draws.mean() - ref["mean"]) < 1.0
    assert np.isfinite(th.family.logpdf((np.array(ref["mean"]), np.array(1.0)), post.natural))


# ---------------------------------------------------------------------------
# mixtures: the same fit at any offset, monotone traces
# ---------------------------------------------------------------------------
def _two_clusters(offset, d=2, n=150):
    rng = np.random.default_rng(0)
    return offset + np.vstack([rng.normal([-3.0, 0.0][:d], 1.0, size=(n, d)),
                               rng.normal([3.0, 1.0][:d], 1.0, size=(n, d))])


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_zoo_gmm_at_large_offsets_converges_as_at_zero_with_a_monotone_trace(covariance):
    from blrgraph.zoo import gmm
    runs = {}
    for offset in (0.0, 1e6, 1e8):
        model = gmm.build(_two_clusters(offset), k=2, covariance=covariance)
        trace = []
        fit = model.fit("vmp", seed=0, callback=lambda it, e: trace.append(e) and False,
                        **model.meta["fit_options"])
        assert fit.converged
        tr = np.array(trace)
        assert np.all(np.diff(tr) >= -1e-9 * np.abs(tr[1:])), f"ELBO decreased at offset {offset}"
        name = "theta" if covariance == "diag" else [n.name for n in model.latent
                                                     if type(n.family).__name__ == "NormalWishart"][0]
        runs[offset] = (fit.n_iter, fit.elbo, model[name].posterior.params)
    it0, elbo0, p0 = runs[0.0]
    for offset in (1e6, 1e8):
        it, elbo, p = runs[offset]
        assert abs(it - it0) <= 2
        assert_close(elbo, elbo0, rtol=1e-8, what="ELBO")
        assert_close(p["mean"] - offset, p0["mean"], rtol=1e-6, scale=1.0, what="component means")


def test_cli_fit_gmm_on_a_table_at_1e8(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    from blrgraph import cli
    import io as _io
    X = _two_clusters(1e8)
    path = tmp_path / "far.csv"
    pd.DataFrame(X, columns=["east", "north"]).to_csv(path, index=False, float_format="%.17g")
    out, err = _io.StringIO(), _io.StringIO()
    code = cli.main(["fit", "gmm", str(path), "--k", "2", "--seed", "0", "--out", str(tmp_path / "o")],
                    stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    summary = pd.read_csv(tmp_path / "o" / "summary.csv")
    east = np.sort(summary[summary.variable == "east"]["mean"].to_numpy()) - 1e8
    assert np.allclose(east, [-3.0, 3.0], atol=0.3)


# ---------------------------------------------------------------------------
# translation equivariance of models without a closed form
# ---------------------------------------------------------------------------
_N, _G, _D = 60, 3, 2
_rng = np.random.default_rng(0)
_g = _rng.integers(0, _G, _N)
# on a grid of 2^-10: base + 1e8 is exact, so both fits see the same data
_BASE1 = np.round((_rng.normal(size=_N) + _g) * 1024) / 1024
_BASED = np.round((_rng.normal(size=(_N, _D)) + np.array([0.0, 2.0])) * 1024) / 1024


def _gathered_means(off):
    mu = bg.Normal(off, 1e-2, plates=(_G,), name="mu")
    tau = bg.Gamma(1.0, 1.0, name="tau")
    y = bg.Normal(mu[_g], tau, name="y").observe(_BASE1 + off)
    r = bg.Model(y).fit("vmp", tol=1e-13)
    return {"mean": mu.posterior.mean}, {"var": mu.posterior.var, "rate": tau.posterior.params["rate"]}, r


def _diagonal_gamma(off):
    mu = bg.MultivariateNormal(np.full(_D, off), 1e-2 * np.eye(_D), name="mu")
    tau = bg.Gamma(1.0, 1.0, plates=(_D,), name="tau")
    y = bg.MultivariateNormal(mu, tau, name="y").observe(_BASED + off)
    r = bg.Model(y).fit("vmp", tol=1e-13)
    return {"mean": mu.posterior.mean}, {"cov": mu.posterior.cov, "rate": tau.posterior.params["rate"]}, r


def _latent_chain(off):
    mu = bg.Normal(off, 1e-4, name="mu")
    x = bg.Normal(mu, 1.0, plates=(_N,), name="x")
    y = bg.Normal(x, 4.0, name="y").observe(_BASE1 + off)
    r = bg.Model(y).fit("vmp", tol=1e-13)
    return {"mu": mu.posterior.mean, "x": x.posterior.mean}, {"var": x.posterior.var}, r


def _normal_gamma_mixture(off):
    z = bg.Categorical(bg.Dirichlet(np.ones(2), name="w"), plates=(_N,), name="z")
    th = bg.NormalGamma(np.array([off - 1, off + 1]), 0.1, 1.0, 1.0, name="th")
    y = bg.Mixture(z, bg.Normal, th, name="y").observe(_BASE1 + off)
    r = bg.Model(y).fit("vmp", seed=1, tol=1e-12)
    p = th.posterior.params
    return {"mean": p["mean"]}, {"rate": p["rate"], "beta": p["beta"]}, r


def _mvn_wishart_mixture(off):
    z = bg.Categorical(bg.Dirichlet(np.ones(2), name="w"), plates=(_N,), name="z")
    mu = bg.MultivariateNormal(np.full(_D, off), 1e-2 * np.eye(_D), plates=(2,), name="mu")
    L = bg.Wishart(_D + 1.0, np.eye(_D), plates=(2,), name="L")
    y = bg.Mixture(z, bg.MultivariateNormal, mu, L, name="y").observe(_BASED + off)
    r = bg.Model(y).fit("vmp", seed=1, tol=1e-12)
    return {"mean": mu.posterior.mean}, {"scale": L.posterior.params["scale"]}, r


_CELLS = np.random.default_rng(1).random((_N, _D)) > 0.2   # 20% of the cells missing


def _partly_observed(off):
    """Missing coordinates are latent (complete_cells); the shift is the mean of the
    observed cells (a NaN in the mean left these data unshifted: 8e-4 nats off at 1e6)."""
    th = bg.NormalWishart(np.full(_D, off), 0.1, _D + 2.0, np.eye(_D) / (_D + 2.0), name="th")
    y = bg.MultivariateNormal(th, plates=(_N,), name="y").observe(
        np.where(_CELLS, _BASED + off, np.nan), mask=_CELLS)
    r = bg.Model(y).fit("vmp", tol=1e-13)
    p = th.posterior.params
    return {"mean": p["mean"]}, {"scale": p["scale"], "beta": p["beta"]}, r


def _partly_observed_mixture(off):
    z = bg.Categorical(bg.Dirichlet(np.ones(2), name="w"), plates=(_N,), name="z")
    th = bg.NormalWishart(np.full(_D, off), 0.1, _D + 2.0, np.eye(_D) / (_D + 2.0), plates=(2,),
                          name="th")
    y = bg.Mixture(z, bg.MultivariateNormal, th, name="y").observe(
        np.where(_CELLS, _BASED + off, np.nan), mask=_CELLS)
    r = bg.Model(y).fit("vmp", init=np.eye(2)[_g % 2], tol=1e-12)
    p = th.posterior.params
    return {"mean": p["mean"]}, {"scale": p["scale"]}, r


@pytest.mark.parametrize("build", [_gathered_means, _diagonal_gamma, _latent_chain,
                                   _normal_gamma_mixture, _mvn_wishart_mixture,
                                   _partly_observed, _partly_observed_mixture],
                         ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("offset", [1e6, 1e8])
def test_fits_are_translation_equivariant(build, offset):
    """The same data moved by an offset: locations move by it, everything else stays (to 1e-9;
    a location to 1e-9 of its size plus a few units in the last place of the offset)."""
    loc0, rest0, fit0 = build(0.0)
    loc1, rest1, fit1 = build(offset)
    ulp = np.spacing(offset)
    for k in loc0:
        assert_close(loc1[k] - offset, loc0[k], scale=4 * ulp / RTOL, what=k)
    for k in rest0:
        assert_close(rest1[k], rest0[k], scale=1e-12, what=k)
    assert abs(fit1.n_iter - fit0.n_iter) <= 1
    assert_close(fit1.elbo, fit0.elbo, scale=1.0, what="ELBO")


def test_a_gather_whose_source_has_as_many_entries_as_the_data_keeps_one_coordinate_system():
    """mu[g] with g a permutation and len(mu) == len(x): a per-entry shift of the data would
    not be the gathered source's; each mu_j must still get its own datum."""
    g = np.array([4, 3, 2, 1, 0])
    x = 1e8 + np.arange(5) * 1e3 + np.random.default_rng(0).normal(size=5)
    mu = bg.Normal(1e8, 1e-8, plates=(5,), name="mu")
    y = bg.Normal(mu[g], 1.0, name="y").observe(x)
    _fit(y, "conjugate")
    want = (1e-8 * 1e8 + x[np.argsort(g)]) / (1.0 + 1e-8)
    assert_close(mu.posterior.mean, want, scale=1.0)
    assert_close(mu.posterior.params["precision"], np.full(5, 1.0 + 1e-8))


@SETTINGS
@given(n=st.sampled_from([1, 3, 40]), p=st.integers(1, 3), seed=st.integers(0, 10 ** 6),
       method=st.sampled_from(["conjugate", "vmp"]))
def test_normal_wishart_plates_with_an_offset_per_plate_entry(n, p, seed, method):
    """NormalWishart plates (P,) over (N, P, 2) data, each plate entry (and coordinate) at its
    own offset and spread, rows masked at random: each entry equals its closed form."""
    rng = np.random.default_rng(seed)
    offs = rng.choice([0.0, 1e5, -1e7, 1e8], size=(p, 2))
    scs = rng.choice([1e-3, 1.0], size=p)
    X = offs + scs[:, None] * rng.standard_normal((n, p, 2))
    mask = rng.random((n, p)) < 0.7
    mask[0] = True
    W0 = np.eye(2) / scs[:, None, None] ** 2
    th = bg.NormalWishart(offs, 0.5, 3.0, W0, name="th")
    y = bg.MultivariateNormal(th, name="y").observe(np.where(mask[..., None], X, np.nan), mask=mask)
    _fit(y, method)
    post = th.posterior.params
    for j in range(p):
        ref = cf.normal_wishart(X[mask[:, j], j], offs[j], 0.5, 3.0, W0[j]).params
        for k, v in ref.items():
            assert_close(post[k][j], v, scale=scs[j] if k == "mean" else 0.0, what=f"{k}[{j}]")


@pytest.mark.parametrize("method", ["em", "svi"])
def test_zoo_gmm_em_and_svi_at_1e8_equal_the_fit_at_zero(method):
    from blrgraph.zoo import gmm
    out = {}
    for offset in (0.0, 1e8):
        model = gmm.build(_two_clusters(offset, n=400), k=2, covariance="full")
        opts = model.meta["fit_options_by_method"]["svi"] if method == "svi" else {}
        fit = model.fit(method, seed=0, **opts)
        nw = [n for n in model.latent if type(n.family).__name__ == "NormalWishart"][0]
        out[offset] = (fit.elbo, nw.posterior.params)
    assert_close(out[1e8][0], out[0.0][0], rtol=1e-7, what="objective")
    assert_close(out[1e8][1]["mean"] - 1e8, out[0.0][1]["mean"], rtol=1e-6, scale=1.0, what="means")
    assert_close(out[1e8][1]["scale"], out[0.0][1]["scale"], rtol=1e-6, scale=1e-3, what="scales")


def test_a_prior_far_from_zero_with_a_small_rate_is_built_and_kept_exactly():
    """NormalGamma(1e8, 1e-3, 2, 1e-6): lam3 = -(1e-6 + 5e12) has no room for the rate; the
    prior is centred on its own mean, with or without data below it."""
    th = bg.NormalGamma(np.array([1e8, -2e8]), 1e-3, 2.0, 1e-6, name="th")
    tau = bg.Gamma(1.0, 1.0, name="tau")
    y = bg.Normal(0.0, tau, name="y").observe(np.ones(3))
    bg.Model(y, th).fit("vmp")
    p = th.posterior.params
    assert_close(p["mean"], [1e8, -2e8])
    assert_close(p["rate"], [1e-6, 1e-6])
    x, _ = data(5, 20, 1e8, 1e-3)
    th = bg.NormalGamma(1e8, 1e-3, 2.0, 1e-6, name="th")
    y = bg.Normal(th, name="y").observe(x)
    _fit(y, "conjugate")
    ref = cf.normal_gamma(x, 1e8, 1e-3, 2.0, 1e-6).params
    for k, v in ref.items():
        assert_close(th.posterior.params[k], v, scale=1e-3 if k == "mean" else 0.0, what=k)


def test_checkpoint_keeps_the_shift_and_converts_into_another(tmp_path):
    x, _ = data(2, 200, 1e8, 1e-2)

    def build(values):
        th = bg.NormalGamma(1e8, 1.0, 1.0, 1e-4, name="th")
        y = bg.Normal(th, name="y").observe(values)
        return bg.Model(y), th

    model, th = build(x)
    model.fit("conjugate")
    path = model.save(tmp_path / "run.npz")
    same, th_same = build(x)
    same.load(path)
    assert np.array_equal(th_same.posterior.natural[2], th.posterior.natural[2])   # same c: bitwise
    other, th_other = build(x + 5.0)                                               # another c
    assert th_other.family.shift != th.family.shift
    other.load(path)
    for k, v in th.posterior.params.items():
        assert_close(th_other.posterior.params[k], v, what=k)
