"""Products and sums of latent Gaussian variables: ``bg.Dot(W, x)`` with both operands
nodes, and ``bg.Add(a, b)`` (docs/math.md, "Products and sums of latent variables").

* The message through the deterministic node to each operand equals the finite-
  difference gradient of the child's expected log-likelihood in that operand's
  moments (the child's E[log p] is linear in each operand's moments, so central
  differences are exact up to rounding).
* With W observed (a node, so the bilinear path is used) the model is linear
  Gaussian: q(x) is the exact posterior and the ELBO the exact log evidence
  (written here with scipy), to 1e-10.
* With both latent (probabilistic PCA) the VMP trace never decreases.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import blrgraph as bg
from blrgraph.inference.blr import incoming
from test_messages import RTOL, _fd_through


def _check_through(model, child, node):
    msg = incoming(model, node)
    fd = _fd_through(child, node)
    assert len(msg) == len(fd) == 2
    for k, (m, g) in enumerate(zip(msg, fd)):
        m = np.broadcast_to(np.asarray(m, dtype=float), g.shape)
        if g.ndim and k == 1 and node.provides.event_ndims[1] == 2:
            assert np.allclose(m, np.swapaxes(m, -1, -2), rtol=1e-12, atol=1e-12)
            g = 0.5 * (g + np.swapaxes(g, -1, -2))
        scale = max(1.0, float(np.max(np.abs(g))))
        np.testing.assert_allclose(m, g, rtol=RTOL, atol=RTOL * scale,
                                   err_msg=f"{child.name} -> {node.name}, component {k}")


def _pca(rng, N=7, D=4, K=3, mask=False):
    alpha = bg.Gamma(2.0, 1.0, plates=(K,), name="alpha")
    W = bg.MultivariateNormal(np.zeros(K), alpha, plates=(D,), name="W")
    x = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(N, 1), name="x")
    tau = bg.Gamma(2.0, 1.0, plates=(D,), name="tau")
    Y = rng.normal(size=(N, D))
    m = None
    if mask:
        m = rng.random((N, D)) < 0.7
        Y[~m] = np.nan
    y = bg.Normal(bg.Dot(W, x), tau, name="y").observe(Y, mask=m)
    return bg.Model(y), y, W, x, tau, alpha


@pytest.mark.parametrize("mask", [False, True])
def test_dot_of_two_latent_vectors_messages(mask):
    model, y, W, x, tau, alpha = _pca(np.random.default_rng(1), mask=mask)
    model.fit("vmp", seed=0, max_iter=15)
    assert y.factor.parents[0].plates == (7, 4)
    _check_through(model, y, x)   # sum_d tau_d-weighted (E[w_d] y_nd, E[w_d w_d^T])
    _check_through(model, y, W)   # and symmetrically to each row of W
    # the published moments: E[w.x] and tr(E[w w^T] E[x x^T]) per (n, d)
    (mw, Sw), (mx, Sx) = W.moments(), x.moments()
    m1, m2 = y.factor.parents[0].moments()
    np.testing.assert_allclose(m1, np.einsum("dk,nk->nd", mw, mx[:, 0]), rtol=1e-12)
    np.testing.assert_allclose(m2, np.einsum("dkl,nkl->nd", Sw, Sx[:, 0]), rtol=1e-12)
    assert np.all(m2 > m1 ** 2)   # Var[w.x] > 0


def test_dot_operand_order_does_not_matter():
    rng = np.random.default_rng(2)
    res = []
    for swap in (False, True):
        W = bg.MultivariateNormal(np.zeros(2), np.eye(2), plates=(3,), name="W")
        x = bg.MultivariateNormal(np.zeros(2), np.eye(2), plates=(5, 1), name="x")
        a = bg.Dot(x, W) if swap else bg.Dot(W, x)
        y = bg.Normal(a, 4.0, name="y").observe(np.random.default_rng(2).normal(size=(5, 3)))
        res.append(bg.Model(y).fit("vmp", seed=3, max_iter=40, tol=0).elbo_trace)
    np.testing.assert_allclose(res[0], res[1], rtol=1e-12)
    assert rng is not None


def test_add_messages_to_both_operands():
    rng = np.random.default_rng(3)
    N, D, K = 6, 3, 2
    W = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(D,), name="W")
    x = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(N, 1), name="x")
    mu = bg.Normal(0.0, 0.5, plates=(D,), name="mu")
    tau = bg.Gamma(3.0, 1.0, name="tau")
    s = bg.Add(bg.Dot(W, x), mu, name="s")
    y = bg.Normal(s, tau, name="y").observe(rng.normal(1.0, 1.0, (N, D)))
    model = bg.Model(y)
    model.fit("vmp", seed=0, max_iter=20)
    _check_through(model, y, mu)
    _check_through(model, y, x)
    _check_through(model, y, W)
    # E[s^2] = E[a^2] + 2 E[a] E[mu] + E[mu^2]
    (ma, sa), (mm, sm) = s.operands[0].moments(), mu.moments()
    np.testing.assert_allclose(s.moments()[1], sa + 2 * ma * mm + sm, rtol=1e-12)


def test_add_of_two_normal_nodes_and_an_array():
    # (b's prior mean is 0 here: a prior mean of 1.0 centres b at it, and _fd_through
    # perturbs a node's published moments, which are then those of b - 1; the shifted
    # case is checked against the hand-written fixed point below)
    rng = np.random.default_rng(4)
    a = bg.Normal(0.0, 1.0, plates=(4,), name="a")
    b = bg.Normal(0.0, 2.0, name="b")
    s = bg.Add(bg.Add(a, b), np.array([0.5, -0.5, 0.0, 1.0]), name="s")
    y = bg.Normal(s, 3.0, plates=(10, 4), name="y").observe(rng.normal(size=(10, 4)))
    model = bg.Model(y)
    res = model.fit("vmp", seed=0, max_iter=50, tol=0)
    assert np.all(np.diff(res.elbo_trace) >= -1e-10 * abs(res.elbo))
    _check_through(model, y, a)
    _check_through(model, y, b)


def test_add_with_a_centred_operand_reaches_the_mean_field_fixed_point():
    """y ~ N(a + b + c, 1/3) with b ~ N(1, 1/2) (centred at its prior mean): the fit's
    means are the coordinate-ascent fixed point written out by hand."""
    rng = np.random.default_rng(4)
    c, tau = np.array([0.5, -0.5, 0.0, 1.0]), 3.0
    Y = rng.normal(size=(10, 4))
    a = bg.Normal(0.0, 1.0, plates=(4,), name="a")
    b = bg.Normal(1.0, 2.0, name="b")
    y = bg.Normal(bg.Add(bg.Add(a, b), c), tau, plates=(10, 4), name="y").observe(Y)
    res = bg.Model(y).fit("vmp", tol=1e-15, max_iter=5000)
    assert np.all(np.diff(res.elbo_trace) >= -1e-10 * abs(res.elbo))
    ma, mb = np.zeros(4), 1.0
    for _ in range(2000):
        ma = tau * np.sum(Y - mb - c, 0) / (1.0 + 10 * tau)
        mb = (2.0 * 1.0 + tau * np.sum(Y - ma - c)) / (2.0 + 40 * tau)
    # (coordinate ascent between a and b converges slowly; the ELBO's rounding stops
    # it about 1e-6 from the fixed point; a wrong shift would be off by ~1)
    assert np.allclose(a.posterior.mean, ma, atol=2e-6)
    assert b.posterior.mean == pytest.approx(mb, abs=2e-6)


def _linear_gaussian(rng, N=30, D=5, K=2, tau=4.0, offset=None):
    Wt = rng.normal(size=(D, K))
    Y = rng.normal(size=(N, K)) @ Wt.T + rng.normal(size=(N, D)) / np.sqrt(tau)
    if offset is not None:
        Y = Y + offset
    return Wt, Y


@pytest.mark.parametrize("offset", [False, True])
def test_observed_loadings_give_the_exact_linear_gaussian_posterior(offset):
    """W observed: q(x_n) = N(S W^T tau y_n, S), S = (I + tau W^T W)^-1, and the ELBO
    is sum_n log N(y_n | mu, W W^T + I/tau) + log p(W) (one update is exact)."""
    rng = np.random.default_rng(5)
    N, D, K, t = 30, 5, 2, 4.0
    mu = rng.normal(size=D) if offset else np.zeros(D)
    Wt, Y = _linear_gaussian(rng, N, D, K, t, offset=mu)
    W = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(D,), name="W").observe(Wt)
    x = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(N, 1), name="x")
    mean = bg.Dot(W, x) if not offset else bg.Add(bg.Dot(W, x), mu)
    y = bg.Normal(mean, t, name="y").observe(Y)
    res = bg.Model(y).fit("vmp", max_iter=3, tol=0)
    S = np.linalg.inv(np.eye(K) + t * Wt.T @ Wt)
    post = x.posterior
    np.testing.assert_allclose(post.mean[:, 0], t * (Y - mu) @ Wt @ S, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(post.cov[:, 0], np.broadcast_to(S, (N, K, K)), rtol=1e-10)
    exact = stats.multivariate_normal(mu, Wt @ Wt.T + np.eye(D) / t).logpdf(Y).sum() \
        + stats.multivariate_normal(np.zeros(K), np.eye(K)).logpdf(Wt).sum()  # W's own term
    np.testing.assert_allclose(res.elbo_trace, exact, rtol=1e-10)


def test_fixed_design_dot_still_matches_the_bilinear_path():
    """Dot(X, w) with an array X and Dot(X_node, w) with X observed publish the same
    moments and send the same messages (the regression path is unchanged)."""
    rng = np.random.default_rng(6)
    N, P = 8, 3
    X = rng.normal(size=(N, P))
    Yd = rng.normal(size=N)
    out = []
    for as_node in (False, True):
        w = bg.MultivariateNormal(np.zeros(P), np.eye(P), name="w")
        Xn = bg.MultivariateNormal(np.zeros(P), np.eye(P), plates=(N,), name="X").observe(X) \
            if as_node else X
        y = bg.Normal(bg.Dot(Xn, w), 2.0, name="y").observe(Yd)
        model = bg.Model(y)
        model.fit("vmp", max_iter=2)
        out.append((y.factor.parents[0].moments(), incoming(model, w), w.posterior.mean))
    for a, b in zip(out[0], out[1]):
        for u, v in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-12)


def test_pca_elbo_is_monotone_and_breaks_the_symmetry():
    rng = np.random.default_rng(7)
    Wt, Y = _linear_gaussian(rng, N=60, D=6, K=2, tau=25.0)
    model, y, W, x, tau, alpha = _pca(rng, N=60, D=6, K=3)
    y.observe(Y)
    res = model.fit("vmp", seed=0, max_iter=200, tol=0)
    tr = res.elbo_trace
    assert np.all(np.diff(tr) >= -1e-10 * np.abs(tr[1:])), np.min(np.diff(tr))
    # the fit's end drops the vector families' factorisation memos (they held ~3x q)
    assert all("_unpack_memo" not in vars(n.family) for n in (W, x))
    assert np.abs(W.posterior.mean).max() > 0.1   # not stuck at the zero-mean saddle
    # the same seed gives the same run; another seed another start
    again = model.fit("vmp", seed=0, max_iter=5, tol=0).elbo_trace
    np.testing.assert_allclose(again, tr[:5], rtol=1e-12)
    other = model.fit("vmp", seed=1, max_iter=5, tol=0).elbo_trace
    assert abs(other[0] - tr[0]) > 1e-6 * abs(tr[0])


def test_refusals_name_the_problem():
    W = bg.MultivariateNormal(np.zeros(2), np.eye(2), plates=(3,), name="W")
    x = bg.MultivariateNormal(np.zeros(2), np.eye(2), plates=(4, 1), name="x")
    v = bg.MultivariateNormal(np.zeros(3), np.eye(3), name="v")
    g = bg.Gamma(1.0, 1.0, name="g")
    with pytest.raises(ValueError, match="same node"):
        bg.Dot(W, W)
    with pytest.raises(ValueError, match="dimensions 3 and 2"):
        bg.Dot(v, W)
    with pytest.raises(TypeError, match="at least one node"):
        bg.Dot(np.ones(2), np.ones(2))
    with pytest.raises(TypeError, match="MultivariateNormal"):
        bg.Dot(g, W)
    with pytest.raises(ValueError, match="do not broadcast"):
        bg.Dot(W, bg.MultivariateNormal(np.zeros(2), np.eye(2), plates=(4,), name="x4"))
    a = bg.Dot(W, x)
    with pytest.raises(ValueError, match="independent"):
        bg.Add(a, bg.Dot(W, bg.MultivariateNormal(np.zeros(2), np.eye(2), plates=(4, 1), name="x2")))
    with pytest.raises(TypeError, match="Normal moments"):
        bg.Add(a, g)
    with pytest.raises(TypeError, match="at least one node"):
        bg.Add(1.0, 2.0)


def test_shared_precision_is_factorised_once_with_the_same_results():
    """The scores' q in PCA without missing cells has one precision for every row; the
    family factorises it once (read-only broadcast views) and must give what the
    per-entry factorisation gives."""
    from blrgraph.families.multivariate_normal import MultivariateNormal, _shared_matrix
    rng = np.random.default_rng(8)
    K = 3
    A = rng.normal(size=(K, K))
    L = A @ A.T + K * np.eye(K)
    fam = MultivariateNormal()
    lam1 = rng.normal(size=(4, 5, K))
    shared = (lam1, np.broadcast_to(-0.5 * L, (4, 5, K, K)))
    lam2 = np.array(shared[1])
    lam2[3, 4] = np.nextafter(lam2[3, 4], 0)   # one entry differs in the last bit: per-entry path
    distinct = (lam1, lam2)
    assert _shared_matrix(shared[1]) is not None and _shared_matrix(distinct[1]) is None
    for f in ("mean_params", "entropy", "log_partition", "cov", "var", "mean"):
        a, b = getattr(fam, f)(shared), getattr(fam, f)(distinct)
        for u, v in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            assert np.shape(u) == np.shape(v)
            np.testing.assert_allclose(u, v, rtol=1e-13, atol=1e-14, err_msg=f)
    assert fam.cov(shared).flags.writeable   # the user gets an array of their own


@pytest.mark.parametrize("missing", [True, False], ids=["missing-cells", "complete"])
def test_pca_elbo_equals_bayespy_sweep_by_sweep(missing):
    """BayesPy's PCA demo model (GaussianARD W and X, SumMultiply('i,i', W, X), ARD Gamma,
    Gamma noise), from the same start and in the same order, with missing cells (the
    per-cell paths) and without (the summed paths, tests/test_latent_sums.py): the ELBO
    after every sweep agrees to 1e-10 relative (an independent implementation)."""
    pytest.importorskip("bayespy")
    import warnings

    from bayespy import nodes
    from bayespy.inference import VB
    rng = np.random.default_rng(9)
    M, N, K = 7, 40, 3
    Y = rng.normal(size=(M, 2)) @ rng.normal(size=(2, N)) + 0.3 * rng.normal(size=(M, N))
    mask = rng.random((M, N)) < 0.9 if missing else np.ones((M, N), dtype=bool)
    m0 = rng.normal(size=(N, K))
    w0 = rng.normal(size=(M, K))
    sweeps = 12

    alpha = bg.Gamma(1e-2, 1e-2, plates=(K,), name="alpha")
    W = bg.MultivariateNormal(np.zeros(K), alpha, plates=(M, 1), name="W")
    X = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(N,), name="X")
    tau = bg.Gamma(1e-2, 1e-2, name="tau")
    y = bg.Normal(bg.Dot(W, X), tau, name="Y")
    y.observe(np.where(mask, Y, np.nan), mask=mask) if missing else y.observe(Y)
    X.start_from(m0, np.eye(K))
    W.start_from(w0[:, None, :], np.eye(K))
    model = bg.Model(y, schedule=[X, tau, alpha, W])
    ours = model.fit("vmp", max_iter=sweeps, tol=0, rotate=False).elbo_trace   # BayesPy's plain VB

    a = nodes.Gamma(1e-2, 1e-2, plates=(K,), name="alpha")
    Wb = nodes.GaussianARD(0, a, shape=(K,), plates=(M, 1), name="W")
    Xb = nodes.GaussianARD(0, 1, shape=(K,), plates=(1, N), name="X")
    F = nodes.SumMultiply("i,i", Wb, Xb, name="F")
    t = nodes.Gamma(1e-2, 1e-2, name="tau")
    yb = nodes.GaussianARD(F, t, name="Y")
    yb.observe(Y, mask=mask)
    Xb.initialize_from_mean_and_covariance(m0[None], np.eye(K))
    Wb.initialize_from_mean_and_covariance(w0[:, None, :], np.eye(K))
    Q = VB(yb, F, Wb, Xb, t, a)
    theirs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(sweeps):
            Q.update(Xb, t, a, Wb, repeat=1, verbose=False)   # blrgraph's order: the globals
            # X, tau, alpha, then W, local on the data axis (the M rows of Y)
            theirs.append(Q.L[Q.iter - 1])
    np.testing.assert_allclose(ours, theirs, rtol=1e-10)
    assert ours[-1] > ours[0] + 1.0    # the sweeps did something


def test_pca_by_svi_batches_the_scores_and_finds_the_subspace():
    """fit("svi") over the rows: the scores x (plates (N, 1), reached from the data through
    Dot(W, x)) are local, W, tau, alpha global; the start draws W (the zero-mean start is a
    saddle). The noise sd and the 2-dimensional subspace are recovered."""
    from scipy.linalg import subspace_angles
    rng = np.random.default_rng(10)
    N, D, K = 400, 6, 3
    Wt = rng.normal(size=(D, 2))
    Y = rng.normal(size=(N, 2)) @ Wt.T + 0.1 * rng.normal(size=(N, D))
    alpha = bg.Gamma(1e-3, 1e-3, plates=(K,), name="alpha")
    W = bg.MultivariateNormal(np.zeros(K), alpha, plates=(D,), name="W")
    x = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(N, 1), name="x")
    tau = bg.Gamma(1e-3, 1e-3, name="tau")
    y = bg.Normal(bg.Dot(W, x), tau, name="y").observe(Y)
    bg.Model(y).fit("svi", epochs=40, batch_size=100, seed=0, local_iters=20)
    assert abs(1 / np.sqrt(tau.posterior.mean) - 0.1) < 0.01
    Wm = W.posterior.mean
    top = np.argsort(-np.sum(Wm ** 2, axis=0))[:2]       # the two largest components
    assert subspace_angles(Wm[:, top], Wt).max() < 0.05
