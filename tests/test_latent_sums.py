"""The summed paths of a product of latent vectors (docs/latent_products.md, "Sums over
the entries"): without per-entry weights the Normal child of ``Dot(W, x)`` gets its
precision's message and its ELBO term from sums over the entries, and scores that share
one covariance are used as Sigma + E[x] E[x]^T, never as an (entries, K, K) stack.

Each path is checked against the per-entry formulas it replaces (written out here with
numpy from the published per-entry moments), with and without a mask, and a whole fit
against the same fit through the per-entry paths (the summed paths switched off), sweep
by sweep; tests/test_latent_products.py checks the fit without missing cells against
BayesPy.
"""
from __future__ import annotations

import numpy as np
import pytest

import blrgraph as bg
from blrgraph.families.multivariate_normal import MultivariateNormal
from blrgraph.graph.factors.base import Conditional
from blrgraph.graph.plates import add_compact, compact
from blrgraph.inference.blr import incoming


def _pca(M=6, N=9, K=3, mask=None, tau_plates=(), seed=0):
    rng = np.random.default_rng(seed)
    Y = rng.normal(size=(M, 2)) @ rng.normal(size=(2, N)) + 0.3 * rng.normal(size=(M, N))
    alpha = bg.Gamma(1e-2, 1e-2, plates=(K,), name="alpha")
    W = bg.MultivariateNormal(np.zeros(K), alpha, plates=(M, 1), name="W")
    X = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(N,), name="X")
    tau = bg.Gamma(2.0, 1.0, plates=tau_plates, name="tau")
    data = Y if mask is None else np.where(mask, Y, np.nan)
    y = bg.Normal(bg.Dot(W, X), tau, name="Y").observe(data, mask=mask)
    X.start_from(rng.normal(size=(N, K)), np.eye(K))
    W.start_from(rng.normal(size=(M, 1, K)), np.eye(K))
    model = bg.Model(y, schedule=[X, tau, alpha, W])
    return model, y, W, X, tau, Y


def _per_entry_sums(dot, coef, y, plates):
    """sum coef y E[a] and sum coef E[a^2] from the per-entry moments, numpy only."""
    m1, m2 = dot.moments()
    c = np.broadcast_to(1.0 if coef is None else coef, plates)
    return float(np.sum(c * y * m1)), float(np.sum(c * m2))


@pytest.mark.parametrize("masked", [False, True])
def test_moment_sums_equal_the_sums_of_the_per_entry_moments(masked):
    rng = np.random.default_rng(1)
    mask = rng.random((6, 9)) < 0.7 if masked else None
    model, y, W, X, tau, Y = _pca(mask=mask)
    model.fit("vmp", max_iter=3, tol=0)
    dot = y.factor.parents[0]
    shared = MultivariateNormal().shared_covariance(X.nat)
    assert (shared is None) == masked       # a mask gives each score its own covariance
    data = np.where(np.isnan(y.value), 0.0, y.value)
    for coef in (None, np.asarray(2.5), rng.random((6, 9)), rng.random((6, 1))):
        s1, s2 = dot.moment_sums(coef, data, (), (6, 9))
        r1, r2 = _per_entry_sums(dot, coef, data, (6, 9))
        np.testing.assert_allclose([s1, s2], [r1, r2], rtol=1e-12)
    # reduced to the rows (a per-row noise precision): sum over the scores only
    s1, s2 = dot.moment_sums(None, data, (6, 1), (6, 9))
    m1, m2 = dot.moments()
    np.testing.assert_allclose(s1, np.sum(data * m1, axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(s2, np.sum(m2, axis=1, keepdims=True), rtol=1e-12)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("tau_plates", [(), (6, 1)])
def test_normal_child_of_dot_message_and_elbo_equal_the_per_entry_formulas(masked, tau_plates):
    rng = np.random.default_rng(2)
    mask = rng.random((6, 9)) < 0.7 if masked else None
    model, y, W, X, tau, Y = _pca(mask=mask, tau_plates=tau_plates)
    model.fit("vmp", max_iter=3, tol=0)
    dot = y.factor.parents[0]
    m1, m2 = dot.moments()
    w = np.ones((6, 9)) if mask is None else mask.astype(float)
    data = np.where(w > 0, y.value, 0.0)
    lt, t = tau.moments()
    # the message to tau: (1/2 sum w, -1/2 sum w (y - a)^2) summed to tau's plates
    axes = (0, 1) if tau_plates == () else (1,)
    d2 = data ** 2 - 2.0 * data * m1 + m2
    want = (0.5 * np.sum(w, axis=axes).reshape(tau_plates),
            -0.5 * np.sum(w * d2, axis=axes).reshape(tau_plates))
    got = y.message_to(tau)
    for g, r in zip(got, want):
        np.testing.assert_allclose(np.broadcast_to(g, np.shape(r)), r, rtol=1e-12)
    # the ELBO term: sum w E[log N(y | a, 1/tau)], per entry
    ll = t * data * m1 - 0.5 * t * data ** 2 - 0.5 * t * m2 + 0.5 * lt - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(y.elbo_term(), np.sum(w * ll), rtol=1e-12)
    # and the generic (per-entry) implementation agrees
    x = y.child_data()
    generic = Conditional.weighted_loglik(y.factor, x, [p.moments() for p in y.factor.parents],
                                          None if mask is None else w)
    np.testing.assert_allclose(y.elbo_term(), generic, rtol=1e-12)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("tau_plates", [(), (6, 1)])
def test_messages_through_dot_equal_the_dense_formulas(masked, tau_plates):
    """(sum_d c1 E[w_d], sum_d c2 E[w_d w_d^T]) to the scores and the symmetric sums to the
    loadings, from the per-entry moments; shared scores get one read-only matrix."""
    rng = np.random.default_rng(3)
    mask = rng.random((6, 9)) < 0.7 if masked else None
    model, y, W, X, tau, Y = _pca(mask=mask, tau_plates=tau_plates)
    model.fit("vmp", max_iter=3, tol=0)
    w = np.ones((6, 9)) if mask is None else mask.astype(float)
    data = np.where(w > 0, y.value, 0.0)
    t = tau.moments()[1]
    (mw, Sw), (mx, Sx) = W.moments(), X.moments()
    c1, c2 = t * w * data, -0.5 * t * w
    to_x = incoming(model, X)
    np.testing.assert_allclose(to_x[0], np.einsum("dn,dk->nk", c1, mw[:, 0]), rtol=1e-12)
    np.testing.assert_allclose(np.broadcast_to(to_x[1], (9, 3, 3)),
                               np.einsum("dn,dij->nij", c2, Sw[:, 0]), rtol=1e-12, atol=1e-14)
    to_w = incoming(model, W)
    np.testing.assert_allclose(to_w[0][:, 0], c1 @ mx, rtol=1e-12)
    np.testing.assert_allclose(np.broadcast_to(to_w[1], (6, 1, 3, 3))[:, 0],
                               np.einsum("dn,nij->dij", c2, Sx), rtol=1e-12, atol=1e-14)
    if not masked:   # one precision for all scores: one matrix, broadcast (read-only)
        assert np.shape(to_x[1]) == (9, 3, 3) and 0 in to_x[1].strides
        assert not to_x[1].flags.writeable
        assert 0 in X.nat[1].strides


def test_shared_covariance_parts_give_the_second_moment():
    rng = np.random.default_rng(4)
    K = 3
    A = rng.normal(size=(K, K))
    L = A @ A.T + K * np.eye(K)
    fam = MultivariateNormal()
    lam1 = rng.normal(size=(5, 2, K))
    shared = (lam1, np.broadcast_to(-0.5 * L, (5, 2, K, K)))
    m, cov = fam.shared_covariance(shared)
    assert cov.shape == (1, 1, K, K)
    np.testing.assert_allclose(cov[0, 0], np.linalg.inv(L), rtol=1e-12)
    Ex, Exx = fam.mean_params(shared)
    np.testing.assert_array_equal(m, Ex)
    np.testing.assert_allclose(cov + np.einsum("...i,...j->...ij", m, m), Exx, rtol=1e-14)
    distinct = (lam1, np.array(shared[1]))
    distinct[1][0, 0] *= 2.0
    assert fam.shared_covariance(distinct) is None
    assert fam.shared_covariance((lam1[0, 0], -0.5 * L)) is None   # one entry: nothing to share
    # the last q's factorisation is kept (read-only) while its arrays are the same objects
    Ex = fam.mean_params(shared)[0]
    assert fam.mean_params(shared)[0] is Ex and not Ex.flags.writeable
    assert fam.mean_params((lam1.copy(), shared[1]))[0] is not Ex


def test_compact_addition_is_exact():
    rng = np.random.default_rng(5)
    P = rng.normal(size=(3, 3))
    a = np.broadcast_to(P, (1000, 3, 3))
    b = np.broadcast_to(rng.normal(size=(3, 3)), (1000, 3, 3))
    s = add_compact(a, b)
    assert s.shape == (1000, 3, 3) and compact(s).shape == (1, 3, 3)
    np.testing.assert_array_equal(s, np.asarray(a) + np.asarray(b))
    c = rng.normal(size=(1000, 3, 3))    # a full array: the ordinary sum
    np.testing.assert_array_equal(add_compact(a, c), a + c)
    assert add_compact(a, c).flags.writeable
    assert compact(c) is c


def test_pca_without_missing_cells_same_trace_as_the_per_entry_paths(monkeypatch):
    """The same fit with the summed paths switched off (the per-entry moments, one
    precision matrix per score, the full BLR target): the ELBO after every sweep agrees to
    1e-12 (an all-True mask would not do: observe() stores it as no mask)."""
    from blrgraph.graph import deterministic
    from blrgraph.inference import blr, compiled
    model, *_ = _pca(M=8, N=30, K=4, seed=6)
    # (plain VMP: the rotations' L-BFGS would carry the paths' rounding into its iterates)
    fast = model.fit("vmp", max_iter=15, tol=0, rotate=False).elbo_trace
    monkeypatch.setattr(deterministic.Dot, "moment_sums", lambda self, *a, **k: None)
    monkeypatch.setattr(MultivariateNormal, "shared_covariance", lambda self, nat: None)
    monkeypatch.setattr(blr, "add_compact", lambda a, b: a + b)
    monkeypatch.setattr(compiled, "ENABLED", False)   # (its own compact sums)
    model2, y2, W2, X2, *_ = _pca(M=8, N=30, K=4, seed=6)
    slow = model2.fit("vmp", max_iter=15, tol=0, rotate=False).elbo_trace
    assert 0 not in X2.nat[1].strides      # (the stack of score precisions was built)
    np.testing.assert_allclose(fast, slow, rtol=1e-12)
    assert np.all(np.diff(fast) > -1e-9 * np.abs(fast[1:]))
    assert fast[-1] > fast[0] + 1.0


def _offset_model(kind, mask, seed=7):
    """y ~ N(s, 1/tau) with s = Dot(W, X) + mu (PCA with column offsets), Dot + Dot, or a
    regression Dot(array, w) + mu (no summed path: the per-entry one)."""
    rng = np.random.default_rng(seed)
    M, N, K = 5, 8, 2
    Y = rng.normal(size=(M, 2)) @ rng.normal(size=(2, N)) + 0.3 * rng.normal(size=(M, N)) + 3.0
    alpha = bg.Gamma(2.0, 1.0, plates=(K,), name="alpha")
    W = bg.MultivariateNormal(np.zeros(K), alpha, plates=(M, 1), name="W")
    X = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(N,), name="X")
    mu = bg.Normal(0.0, 1e-2, plates=(M, 1), name="mu")
    if kind == "dot+mu":
        s = bg.Add(bg.Dot(W, X), mu)
    elif kind == "dot+dot":
        V = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(M, 1), name="V")
        Z = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(N,), name="Z")
        s = bg.Add(bg.Dot(W, X), bg.Dot(V, Z))
    else:
        s = bg.Add(bg.Dot(rng.normal(size=(M, N, K)), bg.MultivariateNormal(
            np.zeros(K), np.eye(K), name="w")), mu)
    tau = bg.Gamma(2.0, 1.0, name="tau")
    y = bg.Normal(s, tau, name="Y").observe(Y if mask is None else np.where(mask, Y, np.nan),
                                           mask=mask)
    bg.Model(y).fit("vmp", max_iter=4, tol=0, seed=0)
    return y, tau, s


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("kind", ["dot+mu", "dot+dot", "regression+mu"])
def test_add_of_a_dot_gives_its_sums_and_the_per_entry_results(kind, masked):
    mask = np.random.default_rng(8).random((5, 8)) < 0.7 if masked else None
    y, tau, s = _offset_model(kind, mask)
    if kind == "regression+mu":
        assert s.moment_sums(None, y.value, (), (5, 8)) is None   # nothing to sum by itself
    else:
        data = np.asarray(y.value, dtype=float)
        data = np.where(np.isnan(data), 0.0, data)
        for coef in (None, np.asarray(1.5), np.random.default_rng(9).random((5, 8))):
            got = s.moment_sums(coef, data, (), (5, 8))
            np.testing.assert_allclose(got, _per_entry_sums(s, coef, data, (5, 8)), rtol=1e-12)
    m1, m2 = s.moments()
    w = np.ones((5, 8)) if mask is None else mask.astype(float)
    data = np.where(w > 0, y.value, 0.0)
    lt, t = tau.moments()
    got = y.message_to(tau)
    np.testing.assert_allclose(got[1], -0.5 * np.sum(w * (data ** 2 - 2 * data * m1 + m2)),
                               rtol=1e-12)
    ll = t * data * m1 - 0.5 * t * data ** 2 - 0.5 * t * m2 + 0.5 * lt - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(y.elbo_term(), np.sum(w * ll), rtol=1e-12)


@pytest.mark.parametrize("masked", [False, True])
def test_message_through_add_and_dot_equals_the_dense_formula(masked):
    """To the scores through Add(Dot(W, X), mu): (sum_d c1 E[w_d], sum_d c2 E[w_d w_d^T])
    with c1 = E[tau] w (y - E[mu]), c2 = -E[tau] w / 2; one noise precision and no mask keep
    one precision matrix for all scores."""
    mask = np.random.default_rng(10).random((5, 8)) < 0.7 if masked else None
    y, tau, s = _offset_model("dot+mu", mask)
    dot, mu = s.operands
    W, X = dot.operands
    model = bg.Model(y)
    w = np.ones((5, 8)) if mask is None else mask.astype(float)
    data = np.where(w > 0, y.value, 0.0)
    t = tau.moments()[1]
    mw, Sw = W.moments()
    c1, c2 = t * w * (data - mu.moments()[0]), -0.5 * t * w
    got = incoming(model, X)
    np.testing.assert_allclose(got[0], np.einsum("dn,dk->nk", c1, mw[:, 0]), rtol=1e-12)
    np.testing.assert_allclose(np.broadcast_to(got[1], (8, 2, 2)),
                               np.einsum("dn,dij->nij", c2, Sw[:, 0]), rtol=1e-12, atol=1e-14)
    assert (0 in np.asarray(got[1]).strides) == (not masked)
