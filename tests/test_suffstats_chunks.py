"""Phi above the memory cap (blrgraph/graph/suffstats.py): the first rows that fit in
``MAX_BYTES`` are kept and the rest are rebuilt in chunks when a product needs them.
A whole fit must equal the fit with Phi kept whole, to rounding (the products only
change their summation order), for several families, with masks and counts.
"""
from __future__ import annotations

import numpy as np
import pytest

import blrgraph as bg
from blrgraph.families import MultivariateNormal, Poisson
from blrgraph.graph import suffstats
from blrgraph.graph.suffstats import FlatStats

K, N, D = 3, 300, 3


def _spd(rng, d=D):
    A = rng.normal(size=(d, d))
    return A @ A.T / d + 0.5 * np.eye(d)


def _data(kind, rng):
    if kind == "poisson":
        return rng.poisson(rng.choice([1.0, 4.0, 12.0], N)).astype(float)
    if kind == "multicolumn":
        return rng.normal(size=(N, D)) + rng.choice([-2.0, 0.0, 2.0], (N, 1))
    return rng.normal(size=(N, D)) + rng.choice([-3.0, 0.0, 3.0], (N, 1))


def _model(kind, X, rng, mask=None, weights=None):
    """(model, component parameter node, z)."""
    zpl = (N, 1) if kind == "multicolumn" else (N,)
    z = bg.Categorical(bg.Dirichlet(np.ones(K), name="pi"), plates=zpl, name="z")
    if kind == "full":
        th = bg.NormalWishart(np.zeros(D), 1.0, D + 2.0, _spd(rng), plates=(K,), name="th")
        y = bg.Mixture(z, bg.MultivariateNormal, th, name="y")
    elif kind == "diagonal":   # diagonal covariance: a Gamma precision per (component, dim)
        th = bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(K,), name="m")
        y = bg.Mixture(z, bg.MultivariateNormal, th,
                       bg.Gamma(2.0, 1.0, plates=(K, D), name="t"), name="y")
    elif kind == "poisson":
        th = bg.Gamma(2.0, 0.5, plates=(K,), name="l")
        y = bg.Mixture(z, bg.Poisson, th, name="y")
    else:                      # one z per row, a NormalGamma per (column, component)
        th = bg.NormalGamma(np.zeros((D, K)), 1.0, 2.0, 2.0, plates=(D, K), name="th")
        y = bg.Mixture(z, bg.Normal, th, name="y")
    y.observe(X, mask=mask, weights=weights)
    return bg.Model(y), th, z, y


def _fit(kind, masked, seed=5):
    rng = np.random.default_rng(seed)
    X = _data(kind, rng)
    mask = weights = None
    if masked:
        mask = rng.random(X.shape[:2] if kind == "multicolumn" else X.shape[:1]) > 0.2
        weights = rng.integers(1, 4, mask.shape).astype(float)
    model, th, z, y = _model(kind, X, np.random.default_rng(seed + 1), mask, weights)
    f = model.fit("vmp", max_iter=6, tol=0, seed=0)
    u = [p.moments() for p in y.factor.parents]
    plan = y.factor._flat(y.child_data(), u[0][0], u[1:])
    fs = None if plan is None else plan[0]
    return np.array(f.elbo_trace), th.posterior.natural, np.asarray(z.posterior.mean), fs


@pytest.mark.parametrize("kind", ["full", "diagonal", "poisson", "multicolumn"])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("chunk", [7, 64])
@pytest.mark.parametrize("cached_rows", [0, 101])
def test_streamed_fit_equals_cached_fit(kind, masked, chunk, cached_rows, monkeypatch):
    trace, nat, r, fs = _fit(kind, masked)
    assert fs is not None and fs.Phi is not None, "the cached path was not taken"
    monkeypatch.setattr(suffstats, "_STREAM_ROWS", chunk)
    monkeypatch.setattr(suffstats, "MAX_BYTES", cached_rows * fs.layout.P * 8)
    trace_s, nat_s, r_s, fs_s = _fit(kind, masked)
    assert fs_s is not None and fs_s.Phi is None, "Phi was kept whole above the cap"
    assert fs_s.cached == cached_rows
    assert len(trace) == len(trace_s) == 6
    np.testing.assert_allclose(trace_s, trace, rtol=1e-12)
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[1:]))
    for a, b in zip(nat_s, nat):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.max(np.abs(b)))
    np.testing.assert_allclose(r_s, r, rtol=1e-11, atol=1e-13)


def test_blocks_cover_phi_and_products_match():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(53, 4))
    full = FlatStats(MultivariateNormal(), x, (53,))
    old = suffstats.MAX_BYTES, suffstats._STREAM_ROWS
    try:
        suffstats.MAX_BYTES, suffstats._STREAM_ROWS = 20 * full.layout.P * 8, 8
        part = FlatStats(MultivariateNormal(), x, (53,))
        assert part.Phi is None and part.cached == 20 and part._head.shape == (20, full.layout.P)
        for step in (1, 3, 5):
            seen = []
            for a, b, blk in part.blocks(step=step):
                assert a % step == 0 and (b % step == 0 or b == 53)
                np.testing.assert_array_equal(blk, full.Phi[a:b])
                seen.append((a, b))
            assert seen[0][0] == 0 and seen[-1][1] == 53
            assert all(p[1] == q[0] for p, q in zip(seen, seen[1:]))
        M = rng.normal(size=(full.layout.P, 6))
        W = rng.random((53, 6))
        np.testing.assert_allclose(part.dot(M), full.Phi @ M, rtol=1e-13, atol=1e-12)
        np.testing.assert_allclose(part.tdot(W), W.T @ full.Phi, rtol=1e-13, atol=1e-12)
    finally:
        suffstats.MAX_BYTES, suffstats._STREAM_ROWS = old


def test_streamed_log_h_rows(monkeypatch):
    """Poisson: a non-constant log h(x) = -log x! column is rebuilt with its rows."""
    x = np.random.default_rng(1).poisson(3.0, 40)
    full = FlatStats(Poisson(), x, (40,))
    assert full.layout.has_logh
    monkeypatch.setattr(suffstats, "MAX_BYTES", 0)
    monkeypatch.setattr(suffstats, "_STREAM_ROWS", 6)
    part = FlatStats(Poisson(), x, (40,))
    assert part.cached == 0
    np.testing.assert_array_equal(np.concatenate([b.copy() for _, _, b in part.blocks()]), full.Phi)


def test_stream_off_keeps_the_cap(monkeypatch):
    x = np.zeros((1000, 4))
    monkeypatch.setattr(suffstats, "MAX_BYTES", 1000 * 10 * 8)   # P = 15 does not fit
    assert FlatStats.fits(MultivariateNormal(), x, (1000,))      # streamed
    monkeypatch.setattr(suffstats, "STREAM", False)
    assert not FlatStats.fits(MultivariateNormal(), x, (1000,))


def test_mvn_rows_built_from_x_equal_its_statistics():
    """MultivariateNormal declares T(x) = (x, x x^T) (value_outer_stats): Phi's rows are
    built from x directly; they must hold exactly x and the upper triangle of x x^T."""
    x = np.random.default_rng(2).normal(size=(30, 4))
    fs = FlatStats(MultivariateNormal(), x, (30,))
    iu = np.triu_indices(4)
    T0, T1 = MultivariateNormal().suff_stats(x)
    expected = np.concatenate([np.ones((30, 1)), T0, T1[:, iu[0], iu[1]]], axis=1)
    np.testing.assert_array_equal(fs.Phi, expected)
    back = fs.layout.unflatten(fs.Phi)
    np.testing.assert_array_equal(back[1], T1)
