"""The flat sufficient-statistics path of mixtures (blrgraph/graph/suffstats.py).

A mixture over observed data computes E[log p(x_n | theta_k)] as one product with
Phi = [1, log h(x), flat T(x)] and its messages to the component parameters from
the weighted means W^T Phi (a conjugate message is affine in the child's moments).
The per-entry formulas of each factor are a separate code path; with
``suffstats.MAX_BYTES = 0`` and ``suffstats.STREAM = False`` the mixture uses them. Both must agree to rounding,
for every component kind, with masks and counts.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blrgraph as bg
from blrgraph.families import MultivariateNormal, Wishart
from blrgraph.families.base import inner
from blrgraph.graph import suffstats
from blrgraph.graph.node import Constant
from blrgraph.graph.suffstats import FlatStats, Layout

K, N, D = 3, 40, 3


def _z(name="z", plates=(N,)):
    return bg.Categorical(bg.Dirichlet(np.ones(K), name="pi"), plates=plates, name=name)


def _spd(rng, d=D):
    A = rng.normal(size=(d, d))
    return A @ A.T / d + 0.5 * np.eye(d)


CASES = {
    "normal_wishart": lambda r: bg.Mixture(
        _z(), bg.MultivariateNormal,
        bg.NormalWishart(np.zeros(D), 1.0, D + 2.0, _spd(r), plates=(K,), name="th"),
        name="y").observe(r.normal(size=(N, D)) * 2.0),
    "mvn_mean_wishart": lambda r: bg.Mixture(
        _z(), bg.MultivariateNormal,
        bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(K,), name="m"),
        bg.Wishart(D + 1.0, _spd(r), plates=(K,), name="L"), name="y").observe(r.normal(size=(N, D))),
    "mvn_ard_gamma": lambda r: bg.Mixture(
        _z(), bg.MultivariateNormal,
        bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(K,), name="m"),
        bg.Gamma(2.0, 1.0, plates=(K, D), name="t"), name="y").observe(r.normal(size=(N, D))),
    "mvn_shared_wishart": lambda r: bg.Mixture(
        _z(), bg.MultivariateNormal,
        bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(K,), name="m"),
        bg.Wishart(D + 1.0, _spd(r), name="L"), name="y").observe(r.normal(size=(N, D))),
    "normal_gamma": lambda r: bg.Mixture(
        _z(), bg.Normal, bg.NormalGamma(0.0, 1.0, 2.0, 2.0, plates=(K,), name="th"),
        name="y").observe(r.normal(size=N)),
    "poisson": lambda r: bg.Mixture(   # non-constant log h(x) = -log x!
        _z(), bg.Poisson, bg.Gamma(2.0, 1.0, plates=(K,), name="l"),
        name="y").observe(r.poisson(3.0, N)),
    "gamma": lambda r: bg.Mixture(
        _z(), bg.Gamma, 2.0, bg.Gamma(2.0, 1.0, plates=(K,), name="b"),
        name="y").observe(r.gamma(2.0, 1.0, N)),
    "binomial": lambda r: bg.Mixture(
        _z(), bg.Binomial, 5, bg.Beta(1.0, 1.0, plates=(K,), name="p"),
        name="y").observe(r.integers(0, 6, N)),
    "multicolumn_normal_gamma": lambda r: bg.Mixture(   # z (N, 1), parameters (D, K)
        _z(plates=(N, 1)), bg.Normal,
        bg.NormalGamma(np.zeros((D, K)), 1.0, 2.0, 2.0, plates=(D, K), name="th"),
        name="y").observe(r.normal(size=(N, D)) + np.arange(D)),
    "multicolumn_shared_precision": lambda r: bg.Mixture(   # means (D, K), one precision per column
        _z(plates=(N, 1)), bg.Normal, bg.Normal(0.0, 1.0, plates=(D, K), name="m"),
        bg.Gamma(2.0, 1.0, plates=(D, 1), name="t"), name="y").observe(r.normal(size=(N, D))),
    "multinomial": lambda r: bg.Mixture(
        _z(), bg.Multinomial, 5, bg.Dirichlet(np.ones(3), plates=(K,), name="p"),
        name="y").observe(r.multinomial(5, [0.2, 0.3, 0.5], N)),
}


def _masked_weighted(case, seed):
    """The case, re-observed with some entries masked and integer counts."""
    r = np.random.default_rng(seed)
    y = CASES[case](r)
    value = np.array(y.value)
    mask = r.random(y.plates) > 0.2
    weights = r.integers(1, 4, y.plates).astype(float)
    return y.observe(value, mask=mask, weights=weights)


def _state(y):
    """Messages from y to each random parent and y's ELBO term."""
    f = y.factor
    for attr in ("_flat_cache", "_ll_cache"):
        f.__dict__.pop(attr, None)
    out = {"elbo": y.elbo_term()}
    for p in f.parents:
        if not isinstance(p, Constant):
            out[p.name] = y.message_to(p)
    return out


def _compare(a, b):
    assert a.keys() == b.keys()
    for key in a:
        for u, v in zip(np.atleast_1d(a[key]) if key == "elbo" else a[key],
                        np.atleast_1d(b[key]) if key == "elbo" else b[key]):
            np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-10 * max(1.0, np.max(np.abs(v))),
                                       err_msg=f"{key}")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("masked", [False, True])
def test_flat_path_equals_per_entry_formulas(case, masked, monkeypatch):
    y = _masked_weighted(case, 3) if masked else CASES[case](np.random.default_rng(3))
    bg.Model(y).fit("vmp", max_iter=5, tol=0, seed=0)   # parents at posterior moments
    fast = _state(y)
    assert y.factor._flat_cache[1] is not None, "the flat path was not taken"
    monkeypatch.setattr(suffstats, "MAX_BYTES", 0)
    monkeypatch.setattr(suffstats, "STREAM", False)
    slow = _state(y)
    assert y.factor._flat_cache[1] is None, "MAX_BYTES = 0 with STREAM = False must switch the flat path off"
    _compare(fast, slow)


@pytest.mark.parametrize("n_rows", [3, 7])
@pytest.mark.parametrize("family", ["binomial", "multinomial"])
def test_counts_per_component_enter_log_h_and_keep_the_per_entry_formulas(family, n_rows, monkeypatch):
    """Binomial/Multinomial with n per component: log h(x) = log C(n_k, x) depends on the
    component, so the statistics matrix does not apply (N == K used to pair entry n with
    n_n silently; N != K failed to broadcast)."""
    def run():
        r = np.random.default_rng(4)
        z = bg.Categorical(bg.Dirichlet(np.ones(K), name="pi"), plates=(n_rows, 1), name="z")
        if family == "binomial":
            y = bg.Mixture(z, bg.Binomial, np.array([5.0, 10.0, 20.0]),
                           bg.Beta(1.0, 1.0, plates=(K,), name="p"), name="y").observe(
                r.integers(0, 6, (n_rows, 1)))
        else:
            k = r.integers(0, 6, n_rows)
            y = bg.Mixture(z, bg.Multinomial, np.array([5.0, 5.0, 5.0]),
                           bg.Dirichlet(np.ones(2), plates=(K,), name="p"), name="y").observe(
                np.stack([k, 5 - k], 1)[:, None, :])
        return bg.Model(y).fit("vmp", max_iter=20, seed=0).elbo
    fast = run()
    monkeypatch.setattr(suffstats, "MAX_BYTES", 0)
    monkeypatch.setattr(suffstats, "STREAM", False)
    np.testing.assert_allclose(fast, run(), rtol=1e-12)


def test_observing_new_data_in_the_same_array_rebuilds_the_statistics():
    """observe() may get the same buffer with new contents: nothing built from the
    previous data may survive (Model.fit releases work arrays, but an ELBO evaluated
    between fits rebuilds them)."""
    def make():
        th = bg.NormalWishart(np.zeros(D), 1.0, D + 2.0, np.eye(D), plates=(K,), name="th")
        return bg.Mixture(_z(), bg.MultivariateNormal, th, name="y")
    r = np.random.default_rng(8)
    buf = r.normal(size=(N, D))
    y = make().observe(buf)
    model = bg.Model(y)
    model.fit("vmp", max_iter=5, seed=0)
    y.elbo_term()                      # fills the caches from the first data
    buf[:] = r.normal(size=(N, D)) * 3.0 + 5.0
    y.observe(buf)
    got = model.fit("vmp", max_iter=5, seed=0).elbo
    fresh = make().observe(buf.copy())
    np.testing.assert_allclose(got, bg.Model(fresh).fit("vmp", max_iter=5, seed=0).elbo, rtol=1e-12)


def test_categorical_data_never_build_one_hot_rows():
    y = bg.Mixture(_z(), bg.Categorical, bg.Dirichlet(np.ones(5), plates=(K,), name="phi"),
                   name="y").observe(np.random.default_rng(0).integers(0, 5, N))
    bg.Model(y).fit("vmp", max_iter=3, seed=0)
    y.elbo_term()
    # (a factored q(z) takes the ELBO term from scatters and never asks for flat statistics)
    assert (y.factor._flat_cache or (None, None))[1] is None


def test_z_and_parameters_varying_along_one_axis_use_per_entry_formulas():
    """z plates (N, D) and parameters (D, K): both vary along D, no row/column split."""
    r = np.random.default_rng(1)
    z = _z(plates=(N, D))
    th = bg.NormalGamma(0.0, 1.0, 2.0, 2.0, plates=(D, K), name="th")
    y = bg.Mixture(z, bg.Normal, th, name="y").observe(r.normal(size=(N, D)))
    fit = bg.Model(y).fit("vmp", max_iter=3, seed=0)
    assert np.isfinite(fit.elbo)
    u = [p.moments() for p in y.factor.parents]
    assert y.factor._flat(y.child_data(), u[0][0], u[1:]) is None


def test_work_arrays_are_released_when_a_fit_ends():
    y = CASES["normal_wishart"](np.random.default_rng(0))
    seen = []
    bg.Model(y).fit("vmp", max_iter=3, seed=0,
                    callback=lambda it, L: seen.append(y.factor._flat_cache[1] is not None))
    assert seen and all(seen)
    assert y.factor._flat_cache is None and y.factor._ll_cache is None


def test_whole_fit_is_the_same_with_and_without_the_flat_path(monkeypatch):
    """A Gaussian mixture with missing rows and counts: the ELBO trace and the
    posteriors of the two paths agree to rounding, iterate by iterate."""
    def run():
        r = np.random.default_rng(5)
        X = np.concatenate([r.normal(-3, 1, (60, 2)), r.normal(3, 0.5, (40, 2))])
        mask = r.random(100) > 0.1
        th = bg.NormalWishart(np.zeros(2), 1.0, 4.0, np.eye(2), plates=(K,), name="th")
        z = bg.Categorical(bg.Dirichlet(np.ones(K), name="pi"), plates=(100,), name="z")
        x = bg.Mixture(z, bg.MultivariateNormal, th, name="x").observe(
            X, mask=mask, weights=r.integers(1, 3, 100).astype(float))
        f = bg.Model(x).fit("vmp", max_iter=18, tol=0, seed=1)  # (converged at 21)
        return np.array(f.elbo_trace), th.posterior.natural
    trace_fast, nat_fast = run()
    monkeypatch.setattr(suffstats, "MAX_BYTES", 0)
    monkeypatch.setattr(suffstats, "STREAM", False)
    trace_slow, nat_slow = run()
    np.testing.assert_allclose(trace_fast, trace_slow, rtol=1e-11)
    assert np.all(np.diff(trace_fast) >= -1e-9 * np.abs(trace_fast[1:]))
    for a, b in zip(nat_fast, nat_slow):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


def test_multicolumn_fit_with_missing_cells_is_the_same_with_and_without_the_flat_path(monkeypatch):
    """Diagonal Gaussian mixture as the zoo declares it (z plates (N, 1), Normal-Gamma
    parameters (D, K)) with missing cells: same ELBO trace and posteriors on both paths."""
    def run():
        r = np.random.default_rng(7)
        X = np.concatenate([r.normal(-2, 1, (50, 4)), r.normal(2, 0.5, (30, 4))])
        mask = r.random(X.shape) > 0.15
        th = bg.NormalGamma(np.zeros((4, K)), 1.0, 1.0, np.ones((4, K)), plates=(4, K), name="th")
        z = bg.Categorical(bg.Dirichlet(np.ones(K), name="pi"), plates=(80, 1), name="z")
        x = bg.Mixture(z, bg.Normal, th, name="x").observe(X, mask=mask)
        f = bg.Model(x).fit("vmp", max_iter=7, tol=0, seed=2)
        return np.array(f.elbo_trace), th.posterior.natural, z.posterior.mean
    fast = run()
    monkeypatch.setattr(suffstats, "MAX_BYTES", 0)
    monkeypatch.setattr(suffstats, "STREAM", False)
    slow = run()
    assert len(fast[0]) == len(slow[0]) == 7
    np.testing.assert_allclose(fast[0], slow[0], rtol=1e-11)
    assert np.all(np.diff(fast[0]) >= -1e-9 * np.abs(fast[0][1:]))
    for a, b in zip(fast[1], slow[1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(fast[2], slow[2], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("slow_path", ["per-entry", "streamed"])
@pytest.mark.parametrize("columns", [False, True])
def test_svi_minibatches_are_the_same_with_and_without_the_flat_path(columns, slow_path,
                                                                      monkeypatch):
    """Each minibatch brings new data (and masks that may repeat): the statistics matrix
    and its weighted form must follow the batch, not the first one seen."""
    def run():
        r = np.random.default_rng(11)
        X = np.concatenate([r.normal(-2, 1, (60, 3)), r.normal(2, 0.5, (60, 3))])
        if columns:
            mask = np.ones(X.shape, dtype=bool)
            mask[0, 1] = False   # most minibatches then carry equal (all-True) masks
            th = bg.NormalGamma(np.zeros((3, K)), 1.0, 1.0, np.ones((3, K)), plates=(3, K), name="th")
            z = bg.Categorical(bg.Dirichlet(np.ones(K), name="pi"), plates=(120, 1), name="z")
            x = bg.Mixture(z, bg.Normal, th, name="x").observe(X, mask=mask)
        else:
            th = bg.NormalWishart(np.zeros(3), 1.0, 5.0, np.eye(3), plates=(K,), name="th")
            z = bg.Categorical(bg.Dirichlet(np.ones(K), name="pi"), plates=(120,), name="z")
            x = bg.Mixture(z, bg.MultivariateNormal, th, name="x").observe(X)
        bg.Model(x).fit("svi", batch_size=20, epochs=2, seed=0)
        return th.posterior.natural
    fast = run()
    if slow_path == "per-entry":
        monkeypatch.setattr(suffstats, "MAX_BYTES", 0)
        monkeypatch.setattr(suffstats, "STREAM", False)
        tol = 1e-9
    else:   # 7 rows of Phi kept per minibatch of 20, the rest rebuilt in chunks of 4
        monkeypatch.setattr(suffstats, "MAX_BYTES", 7 * (3 * 4 if columns else 10) * 8)
        monkeypatch.setattr(suffstats, "_STREAM_ROWS", 4)
        tol = 1e-12
    slow = run()
    for a, b in zip(fast, slow):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@settings(max_examples=40, deadline=None)
@given(d=st.integers(1, 5), n=st.integers(1, 7), seed=st.integers(0, 2**31 - 1))
def test_layout_inner_products_and_round_trip(d, n, seed):
    """<flat(eta), flat(T(x))> = <eta, T(x)> for any (not necessarily symmetric) eta,
    and unflatten(flat(T(x))) = T(x), for MVN (x x^T) and Wishart (Lambda) data."""
    r = np.random.default_rng(seed)
    for fam, x in ((MultivariateNormal(), r.normal(size=(n, d))),
                   (Wishart(), np.stack([_spd(r, d) for _ in range(n)]))):
        fs = FlatStats(fam, x, (n,))
        T = fam.suff_stats(x)
        back = fs.layout.unflatten(fs.Phi)
        for a, b in zip(back, T):
            np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-14)
        nat = tuple(r.normal(size=(2,) + np.shape(t)[1:]) for t in T)
        elp = r.normal(size=2)
        ll = fs.Phi @ fs.coefficients(nat, elp, (2,)).T
        direct = np.stack([inner(tuple(a[k] for a in nat), T, fam.event_ndims) - elp[k]
                           + fam.log_base_measure(x) for k in range(2)], axis=-1)
        np.testing.assert_allclose(ll, direct, rtol=1e-12, atol=1e-12)


def test_flat_coefficients_of_a_matrix_statistic_are_exact():
    """A matrix statistic's coefficients on the kept upper triangle are a_ij + a_ji off
    the diagonal and a_ii on it, to the last bit, for a non-symmetric a; column 0 is
    log h - E[A]; with column 0 given (``head``) the same numbers as the zeros it
    leaves."""
    d, K = 4, 3
    r = np.random.default_rng(7)
    fs = FlatStats(MultivariateNormal(), r.normal(size=(6, d)), (6,))
    lay = fs.layout
    nat = (r.normal(size=(K, d)), r.normal(size=(K, d, d)))
    elp = r.normal(size=K)
    coef = fs.coefficients(nat, elp, (K,))
    iu = np.triu_indices(d)
    a = nat[1]
    want = np.where(iu[0] == iu[1], a[:, iu[0], iu[1]], a[:, iu[0], iu[1]] + a[:, iu[1], iu[0]])
    assert np.array_equal(coef[:, 1 + d:], want)
    assert np.array_equal(coef[:, 1:1 + d], nat[0])
    assert np.array_equal(coef[:, 0], fs.logh_value - elp)
    bare = lay.flatten_natural(nat, (K,))
    assert np.array_equal(bare[:, 0], np.zeros(K)) and np.array_equal(bare[:, 1:], coef[:, 1:])


def test_layout_stores_the_upper_triangle_only():
    lay = Layout(MultivariateNormal(), [(4,), (4, 4)], has_logh=False)
    assert lay.P == 1 + 4 + 10


def test_weighted_means_of_an_empty_component_are_zero():
    x = np.random.default_rng(2).normal(size=(6, 2))
    fs = FlatStats(MultivariateNormal(), x, (6,))
    W = np.zeros((6, 2))
    W[:, 0] = 0.5
    tot, means = fs.layout.means(W.T @ fs.Phi, (2,))
    np.testing.assert_allclose(tot, [3.0, 0.0])
    np.testing.assert_allclose(means[0][0], x.mean(0), rtol=1e-14)
    assert np.all(means[0][1] == 0) and np.all(means[1][1] == 0)


def test_memory_budget_is_respected(monkeypatch):
    x = np.zeros((1000, 4))
    assert FlatStats.fits(MultivariateNormal(), x, (1000,))
    monkeypatch.setattr(suffstats, "MAX_BYTES", 1000 * 10 * 8)   # P = 15 does not fit
    monkeypatch.setattr(suffstats, "STREAM", False)
    assert not FlatStats.fits(MultivariateNormal(), x, (1000,))


@pytest.mark.parametrize("split", [False, True])
def test_softmax_pass_equals_the_products_and_scipys_softmax(split, monkeypatch):
    """One pass over the rows (inference/zstep.py) gives lam = Phi Mt^T, scipy's
    log-sum-exp and softmax of its rows, p^T Phi and the counts, in blocks of PASS_ROWS
    rows and (``split``) over two threads; the finiteness answer is right whether the
    bound on |lam| decides it or the sum of lam does."""
    from scipy.special import logsumexp, softmax
    from blrgraph import rowsplit
    monkeypatch.setattr(suffstats, "PASS_ROWS", 64)
    monkeypatch.setattr(rowsplit, "MIN_ROWS", 100)
    monkeypatch.setattr(suffstats, "PASS_SPLIT_WORK", 0)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1000, 3)) * 2.0
    fs = FlatStats(MultivariateNormal(), x, (1000,))
    Mt = rng.normal(size=(4, fs.layout.P))
    rs = rowsplit.RowSplit(2) if split else None
    try:
        if rs is not None:
            rs.__enter__()
        from blrgraph.inference.blr import _finite

        def finite(out):   # (the step's test: the bound, else lam itself)
            return out[-1] or _finite(out[0])
        out = fs.softmax_pass(Mt)
        lam, lse, p, S, counts, _ = out
        want = fs.Phi @ Mt.T
        np.testing.assert_allclose(lam, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())
        np.testing.assert_allclose(lse, logsumexp(want, axis=1), rtol=1e-13)
        np.testing.assert_allclose(p, softmax(want, axis=1), rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(S, p.T @ fs.Phi, rtol=1e-12)
        np.testing.assert_allclose(counts, p.sum(0), rtol=1e-12)
        assert out[-1] and finite(out)   # (decided by the bound)
        big = Mt.copy()
        big[0, 1] = 1e307     # the bound cannot decide; lam is finite (x < 10 here)
        out = fs.softmax_pass(big)
        assert not out[-1] and finite(out) == bool(np.isfinite(fs.Phi @ big.T).all())
        big[0, 2] = 1e308     # entries of lam overflow to inf
        assert not finite(fs.softmax_pass(big))
        nan = Mt.copy()
        nan[2, 3] = np.nan
        assert not finite(fs.softmax_pass(nan))
    finally:
        if rs is not None:
            rs.__exit__(None, None, None)
            rs.shutdown()


@pytest.mark.parametrize("jobs", [2, 3])
def test_softmax_pass_over_threads_gives_one_threads_numbers_bit_for_bit(jobs, monkeypatch):
    """The pass's blocks taken in turn by 2 or 3 threads (rowsplit.Blocks.each; here the
    thread with the first block is held until the others have taken 12 of the 16 blocks,
    so it takes fewer than a static split would give it) give the numbers of one thread's
    pass exactly: each block is the same computation, and the blocks' statistics are
    added in row order."""
    import threading
    from blrgraph import rowsplit
    monkeypatch.setattr(suffstats, "PASS_ROWS", 64)
    monkeypatch.setattr(rowsplit, "MIN_ROWS", 100)
    monkeypatch.setattr(suffstats, "PASS_SPLIT_WORK", 0)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(1003, 3)) * 2.0   # (16 blocks, the last of 43 rows)
    fs = FlatStats(MultivariateNormal(), x, (1003,))
    Mt = rng.normal(size=(4, fs.layout.P))
    one = [np.array(a) for a in fs.softmax_pass(Mt)[:5]]
    by, go = [], threading.Event()
    orig = np.matmul

    def matmul(a, b, out=None):   # which thread ran each block; the first one held
        if a.shape[0] == 4 and b.shape[0] == fs.layout.P:
            by.append(threading.current_thread().name)
            if len(by) == 1:
                assert go.wait(30)
            elif len(by) >= 13:
                go.set()
        return orig(a, b, out=out)
    monkeypatch.setattr(suffstats.np, "matmul", matmul, raising=False)
    with rowsplit.RowSplit(jobs) as rs:
        try:
            many = fs.softmax_pass(Mt)
        finally:
            rs.shutdown()
    monkeypatch.undo()
    assert len(by) == 16 and len(set(by)) >= 2   # (a third thread may come too late)
    assert by.count(by[0]) <= 4 < 16 // jobs   # (the held thread: its block and <= 3 more)
    for a, b in zip(one, many[:5]):
        np.testing.assert_array_equal(np.asarray(b), a)


@pytest.mark.parametrize("jobs", [2, 3])
def test_blocks_taken_in_turn_stop_at_a_blocks_error_and_raise_it(jobs):
    """A block that raises: the caller gets its error, the other threads take no new
    block (those under way end), and the split runs again afterwards."""
    import threading
    import time
    from blrgraph import rowsplit
    started, ran = threading.Event(), []

    def fn(a, b):
        if a == 0:
            assert started.wait(30)
            raise KeyError("block 0")
        ran.append(a)
        started.set()
        time.sleep(0.05)
        return a
    with rowsplit.RowSplit(jobs) as rs:
        try:
            blocks = rowsplit.active(16 * rowsplit.MIN_ROWS)
            with pytest.raises(KeyError, match="block 0"):
                blocks.each(fn, 1600, 100)
            assert 1 <= len(ran) <= 2 * (jobs - 1)    # of the 15 other blocks
            assert blocks.each(lambda a, b: b - a, 1050, 100) == [100] * 10 + [50]
        finally:
            rs.shutdown()


def test_blocks_taken_in_turn_do_not_wait_for_a_thread_that_never_started():
    """A worker still busy elsewhere when the blocks are gone is not waited for (the
    caller ran them all); its late start finds none left, and the split's next kernel
    gets its own results, not the late task's (each task has a ticket)."""
    import threading
    import time
    from blrgraph import rowsplit
    with rowsplit.RowSplit(2) as rs:
        try:
            bounds = rs.bounds(2 * rowsplit.MIN_ROWS)
            rs.start(lambda a, b: time.sleep(0.5), bounds)   # (the worker busy for 0.5 s)
            who = []
            t0 = time.perf_counter()
            got = rowsplit.active(2 * rowsplit.MIN_ROWS).each(
                lambda a, b: who.append(threading.current_thread().name) or a, 1000, 100)
            assert time.perf_counter() - t0 < 0.25
            assert got == list(range(0, 1000, 100)) and set(who) == {"MainThread"}
            assert rs.run(lambda a, b: (a, b), bounds) == [(0, bounds[1]), (bounds[1], bounds[2])]
        finally:
            rs.shutdown()


def test_softmax_pass_goes_over_the_threads_only_from_pass_split_work(monkeypatch):
    """With a split active, the pass runs whole while its work, rows x K x (2 P + 70), is
    below PASS_SPLIT_WORK and over the threads from there, with the same numbers either
    way."""
    from blrgraph import rowsplit
    monkeypatch.setattr(suffstats, "PASS_ROWS", 64)
    monkeypatch.setattr(rowsplit, "MIN_ROWS", 100)
    rng = np.random.default_rng(6)
    x = rng.normal(size=(500, 2))
    fs = FlatStats(MultivariateNormal(), x, (500,))
    Mt = rng.normal(size=(3, fs.layout.P))
    started = []
    start = rowsplit.RowSplit.start
    monkeypatch.setattr(rowsplit.RowSplit, "start",
                        lambda self, fn, b: started.append(1) or start(self, fn, b))
    with rowsplit.RowSplit(2) as rs:
        try:
            work = 500 * 3 * (2 * fs.layout.P + 70)
            monkeypatch.setattr(suffstats, "PASS_SPLIT_WORK", work + 1)
            whole = [np.array(a) for a in fs.softmax_pass(Mt)[:5]]
            assert not started
            monkeypatch.setattr(suffstats, "PASS_SPLIT_WORK", work)
            split = fs.softmax_pass(Mt)[:5]
            assert started == [1]
        finally:
            rs.shutdown()
    for a, b in zip(whole, split):
        np.testing.assert_array_equal(np.asarray(b), a)
