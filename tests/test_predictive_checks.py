"""The arguments of the predictive and sampling API are checked where they enter, naming
the node and the argument (docs/predict.md, docs/errors.md); the beta-binomial predictive
keeps its digits for n up to 2**53 (docs/math.md §6.2, against 60-digit mpmath)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from scipy import stats

import blrgraph as bg
from blrgraph.families._scalar_helpers import beta_binomial_logpmf, lgamma_diff
from blrgraph.families import FAMILIES

mpmath = pytest.importorskip("mpmath")


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    mu = bg.Normal(0.0, 1e-2, name="mu")
    tau = bg.Gamma(1.0, 1.0, name="tau")
    y = bg.Normal(mu, tau, plates=(20,), name="y").observe(rng.normal(size=20))
    bg.Model(y).fit("vmp")
    X = rng.normal(size=(30, 2))
    w = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="w")
    yr = bg.Normal(bg.Dot(X, w), 1.0, name="yr").observe(X @ [1.0, 2.0] + rng.normal(size=30))
    bg.Model(yr).fit("vmp")
    K = 2
    wz = bg.Dirichlet(np.ones(K), name="wz")
    theta = bg.NormalWishart(np.zeros(2), 1.0, 4.0, np.eye(2), plates=(K,), name="theta")
    z = bg.Categorical(wz, plates=(40,), name="z")
    x = bg.Mixture(z, bg.MultivariateNormal, theta, name="x").observe(
        np.r_[rng.normal(-2, 1, (20, 2)), rng.normal(2, 1, (20, 2))])
    bg.Model(x).fit("vmp", seed=0)
    return {"mu": mu, "y": y, "yr": yr, "x": x}


def _posterior_sample(f, **kw):
    return f["mu"].posterior.sample(**kw)


def _predictive_sample(f, **kw):
    return f["y"].predictive().sample(**kw)


@pytest.mark.parametrize("draw, where", [(_posterior_sample, "Normal 'mu'.posterior.sample"),
                                         (_predictive_sample, "Normal 'y'.predictive().sample")])
@pytest.mark.parametrize("kw, error, text", [
    (dict(size=-3), ValueError, "size=-3 must be >= 0"),
    (dict(size=2.5), TypeError, "size=2.5 must be a whole number of draws"),
    (dict(size="a"), TypeError, "size='a' must be a whole number"),
    (dict(size=(2, -1)), ValueError, r"size=\(2, -1\) must be >= 0"),
    (dict(size=3, seed=-1), ValueError, "seed=-1 must be >= 0"),
    (dict(size=3, seed=1.5), TypeError, "seed=1.5 must be an integer >= 0 or a numpy"),
])
def test_sample_refuses_bad_size_and_seed_naming_node_and_argument(fitted, draw, where, kw,
                                                                   error, text):
    with pytest.raises(error, match=f"^{re.escape(where)}: {text}"):
        draw(fitted, **kw)


def test_sample_keeps_working_with_good_arguments(fitted):
    a = fitted["mu"].posterior.sample(4.0, seed=np.int64(3))        # a whole float counts
    b = fitted["mu"].posterior.sample(4, seed=np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)
    assert fitted["y"].predictive().sample((2, 3), seed=1).shape == (2, 3, 20)


@pytest.mark.parametrize("kw, error, text", [
    (dict(level=1.5), ValueError, "level=1.5 must lie strictly between 0 and 1"),
    (dict(level=0.0), ValueError, "level=0.0 must lie strictly between 0 and 1"),
    (dict(level=float("nan")), ValueError, "level=nan must lie strictly"),
    (dict(level="95%"), TypeError, "level='95%' must be a number between 0 and 1"),
    (dict(level=0.9, samples=0), ValueError, "samples=0 must be >= 1"),
    (dict(level=0.9, seed=-2), ValueError, "seed=-2 must be >= 0"),
])
def test_interval_refuses_bad_arguments(fitted, kw, error, text):
    for pred in (fitted["y"].predictive(), fitted["x"].predictive()):   # scipy and Monte Carlo
        with pytest.raises(error, match=f"'.*'\\.predictive\\(\\)\\.interval: {text}"):
            pred.interval(**kw)


def test_interval_of_a_subset_keeps_the_node_name(fitted):
    pred = fitted["y"].predictive()[:3]
    with pytest.raises(ValueError, match="^Normal 'y'.predictive\\(\\).interval: level=2"):
        pred.interval(2)
    lo, hi = pred.interval(0.9)
    assert lo.shape == hi.shape == (3,) and np.all(lo < hi)


def test_logpdf_and_log_predictive_refuse_values_and_masks_that_do_not_fit(fitted):
    pred = fitted["y"].predictive()
    with pytest.raises(ValueError, match=r"^Normal 'y'.predictive\(\).logpdf: values of shape "
                                         r"\(7,\) do not fit the entries, of shape \(20,\)"):
        pred.logpdf(np.zeros(7))
    with pytest.raises(TypeError, match="logpdf: values must be numbers, got 'abc'"):
        pred.logpdf("abc")
    with pytest.raises(ValueError, match=r"log_predictive: mask of shape \(3,\) does not fit"):
        pred.log_predictive(np.zeros(20), mask=np.ones(3, bool))
    mix = fitted["x"].predictive()
    with pytest.raises(ValueError, match=r"^Mixture 'x'.predictive\(\).logpdf: values of shape "
                                         r"\(40, 3\) do not fit .* plus the value's shape \(2,\)"):
        mix.logpdf(np.zeros((40, 3)))
    # what fits still scores, broadcasting as before
    np.testing.assert_allclose(pred.logpdf(0.0), pred.logpdf(np.zeros(20)), rtol=0, atol=0)


def test_predictive_options_and_inputs_are_checked(fitted):
    yr = fitted["yr"]
    with pytest.raises(ValueError, match=r"^Normal 'yr'.predictive: samples=-1 must be >= 1"):
        yr.predictive(samples=-1)
    with pytest.raises(ValueError, match=r"^Normal 'yr'.predictive: seed=-1 must be >= 0"):
        yr.predictive(seed=-1)
    with pytest.raises(ValueError, match=r"inputs=\.\.\.\): the new rows of Dot .* must have the 2 "
                                         r"columns of its X \(shape \(M, 2\)\), got shape \(5, 3\)"):
        yr.predictive(np.zeros((5, 3)))
    with pytest.raises(TypeError, match=r"the new rows of Dot .* must be numbers"):
        yr.predictive(np.array([["a", "b"]]))


def test_an_infinite_input_cell_is_refused_naming_row_and_column(fitted):
    """inf is not a missing value: it is refused where NaN would be imputed."""
    X = np.array([[1.0, 0.5], [0.0, -np.inf]])
    with pytest.raises(ValueError, match=r"Dot .* hold an infinite value \(row 1, column 1\)"):
        fitted["yr"].predictive(X)
    rows = np.array([[0.0, 1.0], [np.inf, 2.0]])
    with pytest.raises(ValueError, match=r"^Mixture 'x'.predictive\(inputs=...\): the new rows "
                                         r"hold an infinite value \(row 1, column 0\)"):
        fitted["x"].predictive(inputs=rows)
    z = fitted["x"].factor.parents[0]
    with pytest.raises(ValueError, match=r"inputs\['x'\] hold an infinite value \(row 1, column 0\)"):
        z.predictive(inputs={"x": rows})


def test_a_nan_design_row_is_refused_naming_the_dot_row_and_column(fitted):
    """A covariate cannot be missing (as in Dot(X, w) itself): NaN in new design rows used to
    give NaN means silently; now refused where it enters, by every route to the predictive."""
    yr = fitted["yr"]
    dot = yr.factor.parents[0]
    X = np.array([[1.0, 0.5], [0.0, np.nan]])
    msg = (r"^Normal 'yr'.predictive\(inputs=...\): the new rows of Dot '.*' hold NaN "
           r"\(row 1, column 1\); a covariate cannot be missing: impute it or leave the row out$")
    for call in (lambda: yr.predictive(X), lambda: yr.predictive(inputs={dot.name: X}),
                 lambda: bg.log_predictive(yr, [0.0, 1.0], inputs=X)):
        with pytest.raises(ValueError, match=msg):
            call()
    good = yr.predictive(X[:1])                  # the finite row alone still predicts
    assert np.all(np.isfinite(good.mean)) and good.mean.shape == (1,)


def test_nan_values_are_refused_by_logpdf_and_left_out_where_masked(fitted):
    """logpdf of NaN is not a number: refused (naming the node and the entry); a held-out
    score skips NaN where the mask leaves the entry out, and equals the score of the
    other entries."""
    pred = fitted["y"].predictive()
    v = np.linspace(-1.0, 1.0, 20)
    bad = v.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match=r"^Normal 'y'.predictive\(\).logpdf: values hold NaN "
                                         r"\(entry \(3,\)\); a missing value has no density"):
        pred.logpdf(bad)
    with pytest.raises(ValueError, match=r"values hold NaN \(entry \(3,\)\)"):
        bg.log_predictive(fitted["y"], bad)
    keep = ~np.isnan(bad)
    want = float(np.sum(pred.logpdf(v)[keep]))
    assert pred.log_predictive(bad, mask=keep) == want
    assert bg.log_predictive(fitted["y"], bad, mask=keep) == want
    assert pred.logpdf(np.inf)[0] == -np.inf     # a density at infinity is 0: not refused


def _mp_binom_logpmf(k, n, eta):
    mpmath.mp.dps = 60
    k, n, eta = (mpmath.mpf(v) for v in (k, n, eta))
    lg = mpmath.loggamma
    logp, logq = -mpmath.log1p(mpmath.exp(-eta)), -mpmath.log1p(mpmath.exp(eta))
    return float(lg(n + 1) - lg(k + 1) - lg(n - k + 1) + k * logp + (n - k) * logq)


@pytest.mark.parametrize("k, n, p", [
    (3e14, 1e15, 0.3), (3e14 + 12345, 1e15, 0.3), (5, 1e15, 1e-14), (1e15 - 3, 1e15, 1 - 1e-15),
    (2 ** 52, 2 ** 53, 0.5), (0, 1e15, 1e-16), (1e15, 1e15, 0.999), (499_999, 1e6, 0.5),
    (37, 100, 0.4), (7, 20, 0.4), (0, 20, 0.1), (61, 99, 0.7), (1e12 + 1, 1e12, 0.5),
])
def test_binomial_logpmf_equals_60_digit_arithmetic(k, n, p):
    """log Bin(k | n, p) by Loader's saddle-point form for n >= 100 (docs/math.md §6.3):
    the lnΓ difference gave -25.44 at k = 3e14, n = 1e15 where the answer is -17.408
    (scipy's binom: -25.53). Exact to a few units of the last digit, from the natural
    parameter eta = logit p the family holds; -inf off the support."""
    fam = FAMILIES["Binomial"](n)
    eta = float(np.log(p) - np.log1p(-p))
    got = float(fam.logpdf(k, (np.asarray(eta),)))
    if k > n:
        assert got == -np.inf
        return
    want = _mp_binom_logpmf(k, n, eta)
    assert abs(got - want) <= 1e-14 * max(abs(want), 1.0), (got, want)


def _mp_logpmf(k, n, a, b):
    mpmath.mp.dps = 60
    k, n, a, b = (mpmath.mpf(v) for v in (k, n, a, b))
    lg = mpmath.loggamma
    return float(lg(n + 1) - lg(k + 1) - lg(n - k + 1) + lg(k + a) + lg(n - k + b)
                 - lg(n + a + b) - lg(a) - lg(b) + lg(a + b))


@pytest.mark.parametrize("k, n, a, b", [
    (0, 1e15, 0.5, 1.5), (3e14, 1e15, 2.0, 3.0), (5, 1e15, 2.5, 7.0), (1e15, 1e15, 3.0, 1.2),
    (2 ** 53 - 1, 2 ** 53, 1.0, 1.0), (123456789, 1e12, 0.3, 40.0), (7, 20, 2.5, 3.5),
    (0, 1, 2.0, 3.0), (1, 1, 2.0, 3.0), (12345, 1e6, 1e5, 3e5),
])
def test_beta_binomial_logpmf_equals_60_digit_arithmetic(k, n, a, b):
    exact = _mp_logpmf(k, n, a, b)
    np.testing.assert_allclose(beta_binomial_logpmf(k, n, a, b), exact, rtol=2e-14, atol=0)


def test_scipy_loses_the_digits_the_stable_form_keeps():
    exact = _mp_logpmf(3e14, 1e15, 2.0, 3.0)                     # -33.971...
    assert abs(stats.betabinom(10 ** 15, 2.0, 3.0).logpmf(3e14) - exact) > 1.0
    assert abs(beta_binomial_logpmf(3e14, 1e15, 2.0, 3.0) - exact) < 1e-13


def test_lgamma_diff_on_both_sides_of_the_switch():
    for x, d in [(99.5, 0.25), (100.0, 0.25), (1e4, -0.5), (3e7, 2.5), (1e15, 1e15), (2.0, 1e15),
                 (3.0, 0.5)]:
        mpmath.mp.dps = 60
        exact = float(mpmath.loggamma(mpmath.mpf(x) + d) - mpmath.loggamma(mpmath.mpf(x)))
        np.testing.assert_allclose(lgamma_diff(x, d), exact, rtol=1e-14)
    assert beta_binomial_logpmf(2.5, 10, 1.0, 1.0) == -np.inf
    assert beta_binomial_logpmf(11, 10, 1.0, 1.0) == -np.inf
    assert beta_binomial_logpmf(-1, 10, 1.0, 1.0) == -np.inf


def test_the_binomial_predictive_at_1e15_trials_is_the_stable_one():
    """Binomial(n, p ~ Beta) fitted on 10-trial counts; the entry with n = 1e15 trials is
    masked, and its predictive scores with the stable form (scipy: off by more than 1)."""
    p = bg.Beta(2.0, 3.0, name="p")
    n = np.array([10.0, 10.0, 1e15])
    x = bg.Binomial(n, p, name="x").observe(np.array([3.0, 4.0, 0.0]),
                                            mask=np.array([True, True, False]))
    bg.Model(x).fit("conjugate")
    a, b = float(p.posterior.params["a"]), float(p.posterior.params["b"])
    assert (a, b) == (9.0, 16.0)
    pred = x.predictive()[2]
    for k in (3e14, 0.0, 1e15, 360_000_000_000_000.0):
        exact = _mp_logpmf(k, 1e15, a, b)
        np.testing.assert_allclose(pred.logpdf(k), exact, rtol=2e-14)
    assert abs(stats.betabinom(10 ** 15, a, b).logpmf(3e14) - _mp_logpmf(3e14, 1e15, a, b)) > 1
