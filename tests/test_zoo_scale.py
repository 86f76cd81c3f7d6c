"""Zoo priors follow each column's scale (issue 14).

gmm: the prior (and its jitter) is built per column, so rescaling a column rescales the
fit and changes nothing else: assignments equal, sds scaled, for column scales 1e6 / 1 and
1e8 / 1e-8. linreg: standardize=True (the default, as in logreg and poisson_reg) makes
the fit invariant to column scale, so a coefficient of 3e8 on a 1e-8-scale column is found.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest


def _zoo(name):
    return importlib.import_module(f"blrgraph.zoo.{name}")   # the installed models/


def _two_clusters(N=200, seed=0):
    r = np.random.default_rng(seed)
    lab = r.integers(0, 2, N)
    X = np.column_stack([np.where(lab == 0, -2, 2) + r.normal(size=N),
                         np.where(lab == 0, -2, 2) + r.normal(size=N)])
    return X, lab


@pytest.mark.parametrize("covariance", ["diag", "full"])
@pytest.mark.parametrize("scales", [(1e6, 1.0), (1e8, 1e-8)])
def test_gmm_fit_rescales_with_its_columns(covariance, scales):
    gmm = _zoo("gmm")
    X, lab = _two_clusters()
    fits = []
    for s in ((1.0, 1.0), scales):
        model = gmm.build(X * np.array(s), k=2, covariance=covariance)
        fit = model.fit("vmp", seed=0, **model.meta["fit_options"])
        fits.append((gmm.assignments(fit), gmm.components(fit)))
    (r1, c1), (r2, c2) = fits
    np.testing.assert_allclose(r2, r1, atol=1e-6)
    np.testing.assert_allclose(c2["sd"], c1["sd"] * np.array(scales), rtol=1e-6)
    np.testing.assert_allclose(c2["mean"] / np.array(scales), c1["mean"], rtol=1e-6, atol=1e-8)
    acc = np.mean(r1.argmax(1) == lab)
    assert max(acc, 1 - acc) > 0.95             # the clusters are found (not 99.5% in one)


def test_linreg_standardize_finds_a_coefficient_on_a_tiny_scale():
    linreg = _zoo("linreg")
    r = np.random.default_rng(0)
    N = 100
    Z = r.normal(size=(N, 2))
    y = 1.0 + 3.0 * Z[:, 0] + 2.0 * Z[:, 1] + 0.1 * r.normal(size=N)
    out = {}
    for s in (1.0, 1e-8):
        X = Z * np.array([s, 1.0])
        model = linreg.build((X, y))
        assert model.meta["fit_options"] and "to_original" in model.meta
        fit = model.fit("vmp", **model.meta["fit_options"])
        out[s] = linreg.summarize(fit)
    m1, m2 = out[1.0]["mean"].to_numpy(), out[1e-8]["mean"].to_numpy()
    np.testing.assert_allclose(m2, m1 * np.array([1.0, 1e8, 1.0, 1.0]), rtol=1e-8)
    ols = np.linalg.lstsq(np.column_stack([np.ones(N), Z * [1e-8, 1.0]]), y, rcond=None)[0]
    np.testing.assert_allclose(m2[:3], ols, rtol=1e-3)
    # without standardisation the vague prior (on the scale of 1) swallows the coefficient
    model = linreg.build((Z * [1e-8, 1.0], y), standardize=False)
    fit = model.fit("vmp", **model.meta["fit_options"])
    assert abs(linreg.summarize(fit)["mean"][1]) < 1.0


def test_observed_mean_cov_jitters_each_column_on_its_own_scale():
    """The GMM and HMM zoo priors' data covariance (blrgraph.io.observed_mean_cov): a
    column 1e-8 times smaller than the others keeps its variance (a jitter of 1e-6 x the
    mean variance would have made it 1e10 times too large), a constant column gets
    variance 1e-6 (positive definite), and masked cells are left out of the means."""
    from blrgraph import io
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(size=500), 1e-8 * rng.normal(size=500), np.full(500, 3.0)])
    mask = np.ones_like(X, dtype=bool)
    m0, C = io.observed_mean_cov(X, mask)
    want = np.cov(X.T)
    np.testing.assert_allclose(C[1, 1], want[1, 1] + 1e-6 * X[:, 1].var(), rtol=1e-12)
    np.testing.assert_allclose(C[2, 2], 1e-6, rtol=1e-12)   # constant: variance 1 x 1e-6
    assert np.all(np.linalg.eigvalsh(C) > 0)
    X2 = X.copy()
    X2[:10, 0] = 1e6                      # masked cells: not in the mean
    mask[:10, 0] = False
    m2, C2 = io.observed_mean_cov(X2, mask)
    np.testing.assert_allclose(m2[0], X[10:, 0].mean(), rtol=1e-12)
    var = np.array([X2[10:, 0].var(), X2[:, 1].var(), 1.0])   # over each column's observed cells
    np.testing.assert_allclose(C2, np.cov(X2[10:].T) + 1e-6 * np.diag(var), rtol=1e-12, atol=0)
    mask[:, 1] = False                    # an empty column: mean 0, variance 1 (was: mean NaN);
    # no complete rows: the diagonal of the observed variances (a constant column: 1)
    m3, C3 = io.observed_mean_cov(X2, mask)
    np.testing.assert_allclose(m3, [X[10:, 0].mean(), 0.0, 3.0], rtol=1e-12)
    np.testing.assert_allclose(np.diag(C3), np.array([X2[10:, 0].var(), 1.0, 1.0]) +
                               1e-6 * np.array([X2[10:, 0].var(), 1.0, 1.0]), rtol=1e-12)
