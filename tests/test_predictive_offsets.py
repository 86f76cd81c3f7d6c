"""Posterior predictives of data far from zero (docs/dev/numerics.md, docs/predict.md).

The engine centres Gaussian location groups (a location shift c per group), so the
predictive must come back in the data's coordinates. Each test fits the same model to
data x and to x + offset (offset 1e6 and 1e8, priors moved by the offset too) and
checks translation equivariance: the predictive at the offset is the offset-0
predictive moved by the offset (locations, scales, log densities at moved points) to
1e-9 relative. The offset-0 data are (x + offset) - offset, the exact difference
(Sterbenz), so both fits see the same numbers; the offset-0 model is not shifted.
"""
import subprocess
import sys
from io import StringIO

import numpy as np
import pandas as pd
import pytest

import blrgraph as bg
from blrgraph import cli, io

OFFSETS = [1e6, 1e8]
RTOL = 1e-9


def _pair(x, off):
    """(data at the offset, the same data at offset 0: exact differences)."""
    xs = np.asarray(x, dtype=float) + off
    return xs, xs - off


def _close(a, b, scale=None, rtol=RTOL, off=0.0):
    """|a - b| <= rtol * scale (scale: the spread, not the offset), plus 2 ulps of ``off``
    when a was a value in the data's coordinates (a location c + m, rounded to the ulp of
    c, before the offset was taken off again)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    s = np.max(np.abs(b)) if scale is None else scale
    tol = rtol * max(s, 1e-300) + 2 * np.max(np.spacing(np.abs(np.asarray(off, dtype=float))))
    assert np.all(np.abs(a - b) <= tol), (np.max(np.abs(a - b)), tol)


@pytest.mark.parametrize("off", OFFSETS)
def test_normal_gamma_student_t_is_translation_equivariant(off):
    x = np.random.default_rng(0).normal(0.0, 0.7, 50)
    out = {}
    for o, data in zip((off, 0.0), _pair(x, off)):
        theta = bg.NormalGamma(o + 0.25, 0.5, 2.0, 1.5, name="theta")   # (o + 0.25 is exact)
        y = bg.Normal(theta, plates=(50,), name="y").observe(data)
        bg.Model(y).fit("conjugate")
        out[o] = (y, y.predictive())
    (y1, p1), (y0, p0) = out[off], out[0.0]
    assert y1.family.shift is not None and y0.family.shift is None   # really centred / not
    assert p1.exact and p1.name == "Student-t"
    _close(p1.mean - off, p0.mean, scale=1.0, off=off)
    _close(p1.params["scale2"], p0.params["scale2"])
    _close(p1.params["df"], p0.params["df"])
    new, new0 = _pair(np.linspace(-2, 2, 50), off)
    _close(p1.logpdf(new), p0.logpdf(new0))
    _close(p1.log_predictive(new), p0.log_predictive(new0))
    lo1, hi1 = p1.interval(0.9)
    lo0, hi0 = p0.interval(0.9)
    _close(lo1 - off, lo0, scale=1.0, off=off)
    s = p1[:2].sample(4000, seed=0) - off                # draws land at the data, not near 0
    assert abs(s.mean()) < 0.2 and 0.5 < s.std() < 1.2


@pytest.mark.parametrize("off", OFFSETS)
def test_normal_mean_known_precision_is_translation_equivariant(off):
    x = np.random.default_rng(1).normal(0.0, 0.5, 40)
    out = {}
    for o, data in zip((off, 0.0), _pair(x, off)):
        mu = bg.Normal(o - 0.25, 1e-2, name="mu")
        y = bg.Normal(mu, 4.0, plates=(40,), name="y").observe(data)
        bg.Model(y).fit("conjugate")
        out[o] = (y, mu, y.predictive())
    (y1, mu1, p1), (y0, mu0, p0) = out[off], out[0.0]
    assert mu1.family.shift is not None and mu0.family.shift is None
    assert p1.exact and p1.name == "Normal"
    # the closed form: N(m_N, 1/beta_N + 1/tau) with beta_N = 1e-2 + 40 * 4
    bN = 1e-2 + 160.0
    mN = (1e-2 * (-0.25) + 4.0 * np.sum(x + off - off)) / bN
    _close(p0.mean, np.full(40, mN), scale=1.0, rtol=1e-12)
    _close(p1.mean - off, p0.mean, scale=1.0, off=off)
    _close(p1.var, p0.var)
    _close(p1.var, np.full(40, 1 / bN + 0.25))
    new, new0 = _pair(np.linspace(-1, 1, 40), off)
    _close(p1.logpdf(new), p0.logpdf(new0))
    # posterior draws (c + z: the same z as at offset 0)
    _close(mu1.posterior.sample(3, seed=2) - off, mu0.posterior.sample(3, seed=2), scale=1.0,
           off=off)


@pytest.mark.parametrize("off", OFFSETS)
def test_normal_wishart_multivariate_t_is_translation_equivariant(off):
    rng = np.random.default_rng(2)
    X = rng.multivariate_normal([0.5, -0.5], [[1.0, 0.6], [0.6, 2.0]], 80)
    shift = np.array([off, -0.5 * off])
    Xs = X + shift
    X0 = Xs - shift
    out = {}
    for o, data in ((shift, Xs), (np.zeros(2), X0)):
        theta = bg.NormalWishart(o, 0.5, 5.0, np.eye(2) / 5.0, name="theta")
        x = bg.MultivariateNormal(theta, plates=(80,), name="x").observe(data)
        bg.Model(x).fit("conjugate")
        out[o[0]] = (theta, x.predictive())
    (t1, p1), (t0, p0) = out[off], out[0.0]
    assert t1.family.shift is not None and t0.family.shift is None
    assert p1.exact and p1.name == "multivariate t"
    _close(p1.mean - shift, p0.mean, scale=1.0, off=shift)
    _close(p1.cov, p0.cov)
    _close(p1.df, p0.df)
    new = rng.normal(size=(80, 2)) + shift
    _close(p1.logpdf(new), p0.logpdf(new - shift))
    # conditioning on one coordinate (imputation of the other)
    q = np.array([[np.nan, 0.5]]) + shift
    ll1, c1 = p1[:1].condition(q)
    ll0, c0 = p0[:1].condition(q - shift)
    _close(ll1, ll0)
    _close(c1.mean - shift, c0.mean, scale=1.0, off=shift)
    _close(c1.cov, c0.cov)


@pytest.mark.parametrize("off", OFFSETS)
def test_fixed_mean_gamma_precisions_are_translation_equivariant(off):
    """Fixed location, Gamma precision: Student-t (scalar) and, for ARD precisions of a
    vector, the Monte Carlo predictive over q (same seed: same draws of the precisions)."""
    rng = np.random.default_rng(3)
    x = rng.normal(0.0, 1.5, 30)
    X = rng.normal(0.0, [1.0, 2.0, 3.0], (40, 3))
    out = {}
    for o, (data, Data) in ((off, (x + off, X + off)), (0.0, ((x + off) - off, (X + off) - off))):
        tau = bg.Gamma(2.0, 1.0, name="tau")
        y = bg.Normal(o, tau, plates=(30,), name="y").observe(data)
        a = bg.Gamma(2.0, 1.0, plates=(3,), name="a")
        v = bg.MultivariateNormal(np.full(3, o), a, plates=(40,), name="v").observe(Data)
        model = bg.Model(y, v)
        model.fit("vmp")
        out[o] = (y, v, y.predictive(), v.predictive(samples=4000, seed=3), a)
    (y1, v1, p1, q1, a1), (y0, v0, p0, q0, a0) = out[off], out[0.0]
    assert y1.family.shift is not None and v1.family.shift is not None
    assert y0.family.shift is None and v0.family.shift is None
    assert np.shape(v1.family.shift) == (3,)           # one c per coordinate, not per row
    assert p1.exact and p1.name == "Student-t"
    _close(p1.mean - off, p0.mean, scale=1.0, off=off)
    _close(p1.params["scale2"], p0.params["scale2"])
    new, new0 = _pair(np.linspace(-3, 3, 30), off)
    _close(p1.logpdf(new), p0.logpdf(new0))
    assert not q1.exact
    _close(a1.posterior.params["rate"], a0.posterior.params["rate"])
    val = np.array([0.5, -1.0, 2.0])
    _close(q1.logpdf(val + off), q0.logpdf(val))
    _close(q1.mean - off, q0.mean, scale=1.0, off=off)
    # and the Monte Carlo estimate is the product of the exact Student-t's
    from scipy import stats
    pa = a1.posterior.params
    exact = stats.t(2 * pa["shape"], 0, np.sqrt(pa["rate"] / pa["shape"])).logpdf(val).sum()
    assert q1.logpdf(val + off)[0] == pytest.approx(exact, abs=0.03)


def _gmm(X, m0, K=2):
    D = X.shape[1]
    w = bg.Dirichlet(np.ones(K), name="weights")
    theta = bg.NormalWishart(m0, 0.1, D + 2.0, np.eye(D) / (D + 2.0), plates=(K,),
                             name="theta")
    z = bg.Categorical(w, plates=(len(X),), name="z")
    x = bg.Mixture(z, bg.MultivariateNormal, theta, name="x").observe(X)
    model = bg.Model(x)
    model.fit("vmp", seed=0, tol=1e-12, max_iter=500)
    return model, x


@pytest.mark.parametrize("off", OFFSETS)
def test_gmm_imputation_is_translation_equivariant(off):
    rng = np.random.default_rng(4)
    X = np.r_[rng.multivariate_normal([0, 0], [[1, .7], [.7, 1]], 60),
              rng.multivariate_normal([6, -4], [[1, -.3], [-.3, 1]], 60)]
    shift = np.array([off, 2 * off])
    Xs = X + shift
    X0 = Xs - shift
    prior = np.array([3.0, -2.0])                  # prior means the offset moves exactly
    m1, x1 = _gmm(Xs, prior + shift)
    m0, x0 = _gmm(X0, prior)
    assert m1["theta"].family.shift is not None and m0["theta"].family.shift is None
    new = np.array([[0.5, np.nan], [np.nan, -3.5], [5.0, np.nan], [np.nan, np.nan]]) + shift
    new0 = new - shift
    p1 = x1.predictive(inputs=new)
    p0 = x0.predictive(inputs=new0)
    _close(p1.weights, p0.weights, scale=1.0)
    _close(p1.mean - shift, p0.mean, scale=10.0, off=shift)
    _close(p1.cov, p0.cov)
    full = np.array([[0.5, 0.4], [6.2, -3.5], [5.0, -4.1], [1.0, 1.0]]) + shift
    full0 = full - shift                           # (the exact differences)
    _close(p1.logpdf(full), p0.logpdf(full0))
    # the assignments of new rows, and the log predictive of held-out rows
    _close(m1["z"].predictive(inputs={"x": full}).probs,
           m0["z"].predictive(inputs={"x": full0}).probs, scale=1.0)
    _close(bg.log_predictive(x1, full, inputs=np.full((4, 2), np.nan)),
           bg.log_predictive(x0, full0, inputs=np.full((4, 2), np.nan)))


@pytest.mark.parametrize("covariance", ["full", "diag"])
def test_gmm_zoo_save_predict_in_a_fresh_process_at_1e8(tmp_path, covariance):
    """fit --save, then predict in a new process: the same predictions as in-process
    (the saved natural parameters are of x - c: the file keeps c)."""
    iris = io.load_example()
    cols = ["sepal_length", "sepal_width"]
    data = iris[cols] + 1e8
    new = data.iloc[[0, 60, 120, 30]].copy()
    new.iloc[0, 1] = np.nan
    new.iloc[1, 0] = np.nan
    train, new_csv, fit_file = tmp_path / "train.csv", tmp_path / "new.csv", tmp_path / "fit.npz"
    data.to_csv(train, index=False)
    new.to_csv(new_csv, index=False)
    flags = ["--k", "3", "--columns", *cols, "--option", f"covariance={covariance}"]
    code = cli.main(["fit", "gmm", str(train), *flags, "--save", str(fit_file), "--no-plots",
                     "--out", str(tmp_path / "out")], stdout=StringIO(), stderr=StringIO())
    assert code == 0
    proc = subprocess.run([sys.executable, "-m", "blrgraph.cli", "predict", str(fit_file),
                           str(new_csv), "--out", str(tmp_path / "pred")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = pd.read_csv(tmp_path / "pred" / "predictions.csv", index_col="row")
    module = cli.load_model("gmm")
    options = {"k": 3, "columns": cols, "covariance": covariance}
    model = module.build(io.read_table(train), **options)
    method = module.DEFAULT_METHOD
    fit = model.fit(method, seed=0, **cli.fit_options_for(model.meta, method))
    assert model["theta"].family.shift is not None
    expect = module.predict_table(fit, io.read_table(new_csv))
    assert list(got.columns) == list(expect.columns)
    assert any(c.endswith("_imputed") for c in expect.columns)
    for c in expect.columns:
        e = expect[c].to_numpy(float)
        if c.endswith("_imputed"):
            assert np.all(np.abs(e - 1e8) < 10)        # imputed at the data, not near 0
        np.testing.assert_allclose(got[c].to_numpy(float), e, rtol=1e-12, atol=1e-300)
