"""Rows in partitions on this machine's cores (``fit(..., n_jobs=)``, inference/threads.py).

Oracle: the fit in one thread (``n_jobs=1``, every row in memory). Split over 2 or 3
partitions fitted in threads, a GMM, an HMM and LDA take the same steps: the same ELBO
trace, the same number of sweeps and the same posteriors, up to the order of the sums
(1e-12 relative), from the same start; a symmetric saddle point is found and split through
the partitions with the same draws."""
import threading
import time
import warnings

import numpy as np
import pytest

import blrgraph as bg
from blrgraph import rowsplit
from blrgraph.graph import suffstats as _suffstats
from blrgraph.inference import compiled, threads, zstep
from helpers_models import gmm_model, lda_model


def _close(f1, m1, f2, m2, names):
    assert f2.n_iter == f1.n_iter and f2.converged == f1.converged
    np.testing.assert_allclose(f2.elbo_trace, f1.elbo_trace, rtol=1e-12)
    for name in names:
        a, b = m1[name], m2[name]
        assert a.point == b.point
        for x, y in zip(b.nat, a.nat):
            x, y = np.broadcast_arrays(x, y)
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12 * np.max(np.abs(y)))


def _gmm_data(N=900, seed=0):
    rng = np.random.default_rng(seed)
    means = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
    return means[rng.integers(0, 3, N)] + rng.normal(size=(N, 2))


@pytest.fixture(params=["partitions", "split"])
def route(request, monkeypatch):
    """A batch VMP fit that the compiled sweep runs splits its row kernels over the
    threads (rowsplit.py; here from 200 rows a block); with the compiled sweep off, the
    rows go to partitions. Yields the route and the list of the split's calls."""
    calls = []
    if request.param == "partitions":
        monkeypatch.setattr(compiled, "ENABLED", False)
    else:
        monkeypatch.setattr(rowsplit, "MIN_ROWS", 200)
        monkeypatch.setattr(_suffstats, "PASS_SPLIT_WORK", 0)
        for name in ("run", "start"):   # (start: the blocks taken in turn, Blocks.each)
            orig = getattr(rowsplit.RowSplit, name)
            monkeypatch.setattr(rowsplit.RowSplit, name, lambda self, fn, b, _o=orig:
                                calls.append(len(b) - 1) or _o(self, fn, b))
    return request.param, calls


@pytest.mark.parametrize("method,jobs", [("vmp", 2), ("vmp", 3), ("em", 2), ("map", 2)])
def test_gmm_in_partitions_takes_the_steps_of_one_thread(method, jobs, route):
    X = _gmm_data()
    ref = gmm_model(X)
    f1 = ref.fit(method, seed=0, n_jobs=1, max_iter=40)
    m = gmm_model(X)
    f2 = m.fit(method, seed=0, n_jobs=jobs, max_iter=40)
    assert f1.n_iter >= 3
    _close(f1, ref, f2, m, ("pi", "theta", "z"))
    kind, calls = route
    if kind == "split" and method == "vmp":   # z's pass every sweep, over the threads
        assert len(calls) >= f2.n_iter and min(calls) >= jobs
    else:                                     # (EM's point masses: the generic sweep)
        assert not calls


def _poisson_mixture(N=1200, seed=1):
    rng = np.random.default_rng(seed)
    x = np.where(rng.random(N) < 0.4, rng.poisson(2.0, N), rng.poisson(9.0, N)).astype(float)
    pi = bg.Dirichlet(np.ones(2), name="pi")
    z = bg.Categorical(pi, plates=(N,), name="z")
    lam = bg.Gamma(1.0, 0.1, plates=(2,), name="lam")
    return bg.Model(bg.Mixture(z, bg.Poisson, lam, name="x").observe(x))


@pytest.mark.parametrize("build,names", [(lambda: gmm_model(_gmm_data(1200)), ("pi", "theta", "z")),
                                         (_poisson_mixture, ("pi", "lam", "z"))])
def test_z_pass_reads_the_rows_once_a_sweep_and_takes_the_steps_of_one_thread(
        build, names, monkeypatch):
    """With the rows split (n_jobs=2), z's step makes lam, the softmax, the components'
    statistics and pi's counts in one pass over the rows (compiled.ZStep); the next
    sweep's messages are read from it (no other product with Phi, no other row sum), and
    the iterates are n_jobs=1's by NodeStep's products and softmax to rounding."""
    from blrgraph.graph import suffstats
    monkeypatch.setattr(rowsplit, "MIN_ROWS", 200)
    monkeypatch.setattr(_suffstats, "PASS_SPLIT_WORK", 0)
    monkeypatch.setattr(zstep, "PASS_ALONE", False)
    ref = build()
    f1 = ref.fit("vmp", seed=0, n_jobs=1, max_iter=30, tol=1e-10)
    seen = {"pass": 0, "tdot": 0, "rows": 0}
    for cls, name, key in ((suffstats.FlatStats, "softmax_pass", "pass"),
                           (suffstats.FlatStats, "tdot", "tdot"), (rowsplit, "add_rows", "rows")):
        orig = getattr(cls, name)
        monkeypatch.setattr(cls, name, lambda *a, _o=orig, _k=key: seen.__setitem__(
            _k, seen[_k] + 1) or _o(*a))
    m = build()
    f2 = m.fit("vmp", seed=0, n_jobs=2, max_iter=30, tol=1e-10)
    assert f1.n_iter >= 5
    _close(f1, ref, f2, m, names)
    assert seen["pass"] == f2.n_iter
    assert seen["tdot"] <= 1 and seen["rows"] <= 1   # (the first sweep's, from the start's z)


def test_z_pass_without_a_split_takes_nodesteps_steps(monkeypatch):
    """n_jobs=1 with the pass (zstep.PASS_ALONE, the default) against NodeStep's products
    and softmax: the same iterates to rounding."""
    from blrgraph.graph import suffstats
    monkeypatch.setattr(rowsplit, "MIN_ROWS", 200)
    monkeypatch.setattr(_suffstats, "PASS_SPLIT_WORK", 0)
    monkeypatch.setattr(zstep, "PASS_ALONE", False)
    ref = gmm_model(_gmm_data(1200))
    f1 = ref.fit("vmp", seed=0, n_jobs=1, max_iter=30, tol=1e-10)
    calls = []
    orig = suffstats.FlatStats.softmax_pass
    monkeypatch.setattr(suffstats.FlatStats, "softmax_pass",
                        lambda *a: calls.append(rowsplit._ACTIVE.get()) or orig(*a))
    monkeypatch.setattr(zstep, "PASS_ALONE", True)
    m = gmm_model(_gmm_data(1200))
    f2 = m.fit("vmp", seed=0, n_jobs=1, max_iter=30, tol=1e-10)
    _close(f1, ref, f2, m, ("pi", "theta", "z"))
    assert len(calls) == f2.n_iter and all(c is None for c in calls)


def test_z_pass_writes_again_only_into_arrays_nothing_else_holds(monkeypatch):
    """ZStep writes a step's lam, p and lse into an earlier step's arrays once nothing
    holds them: q's that a caller kept (here every second sweep's, by a callback) keep
    their values; the others are written again (the pass then allocates nothing)."""
    monkeypatch.setattr(rowsplit, "MIN_ROWS", 200)
    monkeypatch.setattr(_suffstats, "PASS_SPLIT_WORK", 0)
    free = []
    unheld = zstep._unheld
    monkeypatch.setattr(zstep, "_unheld", lambda a: free.append(unheld(a)) or free[-1])
    model = gmm_model(_gmm_data(1200))
    z = model["z"]
    held = []

    def keep(it, L):
        if it % 2 == 0:
            lam, p = z.nat[0], z.moments()[0]
            held.append((lam, lam.copy(), p, p.copy()))
    model.fit("vmp", seed=0, n_jobs=2, max_iter=12, tol=0, callback=keep)
    assert len(held) >= 5
    for lam, lam_was, p, p_was in held:
        np.testing.assert_array_equal(lam, lam_was)
        np.testing.assert_array_equal(p, p_was)
    assert sum(free) >= 3 and not all(free)   # arrays written again; held ones not


def test_blas_is_restored_when_a_split_fit_goes_to_partitions(monkeypatch):
    """A callback re-observes the data with a mask: the compiled sweep (split) gives way to
    the generic one in partitions, from the model's q; the iterates stay those of one
    thread and BLAS is back at its limits after the fit (the partitions once replaced the
    split's BLAS limit by one that held 1 thread as the limit to restore)."""
    from threadpoolctl import threadpool_info
    monkeypatch.setattr(rowsplit, "MIN_ROWS", 200)
    monkeypatch.setattr(_suffstats, "PASS_SPLIT_WORK", 0)
    X = _gmm_data()
    mask = np.ones(len(X), bool)
    mask[::7] = False
    before = [i["num_threads"] for i in threadpool_info()]
    fits = {}
    for jobs in (1, 2):
        m = gmm_model(X)

        def cb(it, L, m=m):
            if it == 3:
                m["x"].observe(X, mask=mask)
            return False
        fits[jobs] = (m.fit("vmp", seed=0, n_jobs=jobs, max_iter=12, tol=0, callback=cb), m)
        assert [i["num_threads"] for i in threadpool_info()] == before
    _close(*fits[1], *fits[2], ("pi", "theta", "z"))


def test_a_split_block_keeps_numpy_error_state_and_runs_whole(monkeypatch):
    """A block in the split's threads runs in the caller's context (numpy's error state:
    an overflow the caller asked to raise raises there too) but without the active split
    (a kernel inside a block runs whole)."""
    monkeypatch.setattr(rowsplit, "MIN_ROWS", 10)
    split = rowsplit.RowSplit(2)
    seen = {}

    def fn(a, b):
        seen[a] = rowsplit.active(1000)
        return np.add.reduce(np.full(b - a, 1e308 if a else 1.0))   # overflows off the caller's thread
    try:
        with split:
            with np.errstate(over="ignore"):
                assert split.run(fn, split.bounds(100)) == [50.0, np.inf]
            with np.errstate(over="raise"), pytest.raises(FloatingPointError):
                split.run(fn, split.bounds(100))
    finally:
        split.shutdown()
    assert seen[0] is not None and seen[50] is None


def test_the_split_kernels_release_their_threads_and_blas(monkeypatch):
    """After a fit whose compiled sweep split its rows, the split's threads are gone and
    BLAS is back at its limits; the partitions were never built."""
    from threadpoolctl import threadpool_info
    monkeypatch.setattr(rowsplit, "MIN_ROWS", 200)
    monkeypatch.setattr(_suffstats, "PASS_SPLIT_WORK", 0)
    before = [i["num_threads"] for i in threadpool_info()]
    seen = []
    m = gmm_model(_gmm_data())
    m.fit("vmp", seed=0, n_jobs=2, max_iter=5, tol=0, callback=lambda it, L: seen.append(
        ([i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"],
         [t.name for t in threading.enumerate() if t.name.startswith("blrgraph-rows")])) and False)
    assert len(seen) == 5 and all(set(b) == {1} and t for b, t in seen)
    assert [i["num_threads"] for i in threadpool_info()] == before
    assert not [t for t in threading.enumerate() if t.name.startswith("blrgraph-rows")]


def test_n_jobs_1_holds_blas_at_one_thread_for_the_fit_and_gives_it_back():
    """``n_jobs=1``: one core, BLAS's threads included (as in each worker of n_jobs > 1),
    for the whole fit and its restarts, and back as it was after the fit, also when the
    fit stops on an error; without n_jobs a fit that does not split keeps BLAS as set."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    m = gmm_model(_gmm_data(N=300))
    with threadpool_limits(2, user_api="blas"):
        before = blas()
        assert set(before) == {2}
        seen = []
        m.fit("vmp", seed=0, n_jobs=1, max_iter=3, tol=0, restarts=2,
              callback=lambda it, L: seen.append(blas()) and False)
        assert len(seen) == 6 and all(set(b) == {1} for b in seen)
        assert blas() == before
        with pytest.raises(KeyError, match="stop"):
            m.fit("vmp", seed=0, n_jobs=1, callback=lambda it, L: (_ for _ in ()).throw(
                KeyError("stop")))
        assert blas() == before
        seen.clear()
        m.fit("vmp", seed=0, max_iter=2, tol=0,
              callback=lambda it, L: seen.append(blas()) and False)
        assert seen == [before, before]


def test_fits_at_once_in_threads_share_one_blas_hold():
    """threadpoolctl's limits are the process's: two fits' holds of "BLAS at one thread"
    that end in the order they began leave BLAS at one thread until the last ends, then
    as it was before the first (each restoring its own would leave it at one thread)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    with threadpool_limits(2, user_api="blas"):
        before = blas()
        a = threads.blas_for(1)
        b = threads.blas_for(1)
        assert set(blas()) == {1}
        a.__exit__(None, None, None)
        assert set(blas()) == {1}       # (b still runs)
        a.restore_original_limits()     # (letting go twice counts once)
        assert set(blas()) == {1}
        b.__exit__(None, None, None)
        assert blas() == before
        assert isinstance(threads.blas_for(None), type(threads.blas_for(2)))


def test_the_partitions_are_used_and_released():
    """The view in partitions really runs (one report per sweep), and after the fit the
    rows' q is back in the model, BLAS limits restored."""
    X = _gmm_data()
    m = gmm_model(X)
    from blrgraph.inference.fit import plan_run
    from blrgraph.inference.methods import get_method
    from blrgraph.inference.options import parse_options
    from blrgraph.inference.structure import Structure
    meth = get_method("vmp")
    opts = parse_options(meth, dict(n_jobs=2, seed=0))
    plan = plan_run(m, meth, opts, Structure(m))
    assert isinstance(plan.rows, threads.ThreadRows)
    assert [len(r) for r in plan.rows.view.rows] == [450, 450]
    # without n_jobs a small table stays in one thread
    plan = plan_run(m, meth, parse_options(meth, dict(seed=0)), Structure(m))
    assert not isinstance(plan.rows, threads.ThreadRows)
    seen = []
    f = m.fit("vmp", seed=0, n_jobs=2, callback=lambda it, L: seen.append(
        m.fit_result if False else it) and False)
    assert seen[-1] == f.n_iter
    assert m["z"].nat[0].shape == (900, 3) and m["z"].posterior.mean.shape == (900, 3)


def test_a_tied_start_is_split_through_the_partitions():
    X = _gmm_data(600)
    R = np.full((600, 3), 1 / 3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ref = gmm_model(X)
        f1 = ref.fit("vmp", init=R, seed=0, n_jobs=1, max_iter=60)
        m = gmm_model(X)
        f2 = m.fit("vmp", init=R, seed=0, n_jobs=2, max_iter=60)
    assert sum("saddle point" in str(w.message) for w in seen) == 2
    _close(f1, ref, f2, m, ("pi", "theta", "z"))


def _hmm(x, K=3):
    S, T = x.shape
    pi = bg.Dirichlet(np.ones(K), name="pi")
    A = bg.Dirichlet(np.ones((K, K)) + np.eye(K), plates=(K,), name="A")
    theta = bg.NormalGamma(0.0, 0.1, 2.0, 2.0, plates=(K,), name="theta")
    z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(S,), name="z")
    return bg.Model(bg.Mixture(z, bg.Normal, theta, name="y").observe(x))


@pytest.mark.parametrize("jobs", [2, 3])
def test_hmm_in_partitions_takes_the_steps_of_one_thread(route, jobs):
    """Split, the chains' prior (one lam0 row per sequence) is cut with the rows of
    their messages (before the fix, a broadcasting error from numpy on 400 sequences)."""
    rng = np.random.default_rng(4)
    states = rng.integers(0, 3, size=(400, 6))
    x = np.array([-3.0, 0.0, 3.0])[states] + rng.normal(size=states.shape)
    ref = _hmm(x)
    f1 = ref.fit("vmp", seed=1, n_jobs=1, max_iter=30)
    m = _hmm(x)
    f2 = m.fit("vmp", seed=1, n_jobs=jobs, max_iter=30)
    assert f1.n_iter >= 3
    _close(f1, ref, f2, m, ("pi", "A", "theta", "z"))
    assert (route[0] == "split") == bool(route[1])


def _lda_data(n_docs=40, V=30, K=3, seed=2):
    rng = np.random.default_rng(seed)
    topics = rng.dirichlet(np.full(V, 0.1), size=K)
    counts = np.array([np.bincount(rng.choice(V, size=40, p=rng.dirichlet(np.full(K, 0.3)) @ topics),
                                   minlength=V) for _ in range(n_docs)], dtype=float)
    doc, word = np.nonzero(counts)
    return doc, word, counts[doc, word]


def test_lda_in_partitions_takes_the_steps_of_one_thread():
    """LDA: the local block (theta and z, restarts, per-document convergence, the
    adaptive budget) runs in each partition; the same trace as one thread."""
    doc, word, cnt = _lda_data()
    ref = lda_model(40, doc, word, cnt)
    f1 = ref.fit("vmp", seed=0, n_jobs=1, max_iter=15)
    m = lda_model(40, doc, word, cnt)
    f2 = m.fit("vmp", seed=0, n_jobs=2, max_iter=15)
    assert f1.local_sweeps == f2.local_sweeps
    _close(f1, ref, f2, m, ("phi", "theta", "z"))


def test_n_jobs_is_checked_where_it_enters():
    X = _gmm_data(50)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="n_jobs"):
            gmm_model(X).fit("vmp", n_jobs=bad)
    with pytest.raises(TypeError, match="n_jobs"):
        gmm_model(X).fit("svi", n_jobs=2)
    assert gmm_model(X).fit("vmp", n_jobs=-1, seed=0, max_iter=5).n_iter == 5


def test_a_fit_stopped_by_an_error_releases_the_threads_and_blas():
    """A callback that raises stops the fit: the error goes on, the rows' q is back in
    the model and BLAS has its threads again."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    before = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    X = _gmm_data()
    m = gmm_model(X)

    def stop(it, L):
        if it == 3:
            raise KeyError("stop")
    with pytest.raises(KeyError, match="stop"):
        m.fit("vmp", seed=0, n_jobs=2, callback=stop)
    after = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    assert after == before
    assert m["z"].nat[0].shape == (900, 3)
    ref = gmm_model(X)
    ref.fit("vmp", seed=0, n_jobs=1, max_iter=3)
    np.testing.assert_allclose(m["z"].nat[0], ref["z"].nat[0], rtol=1e-10, atol=1e-10)


def test_pca_with_rotations_runs_in_one_thread_and_equals_n_jobs_1():
    """Rotations between sweeps move the model's own scores (rotations.py); the
    partitions' copies would miss them, so such a fit keeps its rows in one thread: with
    n_jobs=2 it takes the steps of n_jobs=1 (it reached a different ELBO before, -16013
    after 60 sweeps against -15522 converged in 9)."""
    from blrgraph.inference.fit import plan_run
    from blrgraph.inference.methods import get_method
    from blrgraph.inference.options import parse_options
    from blrgraph.inference.structure import Structure
    from blrgraph.zoo import pca
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(300, 3)) @ rng.normal(size=(3, 20)) + 0.3 * rng.normal(size=(300, 20))
    ref = pca.build(Y, 3)
    f1 = ref.fit("vmp", n_jobs=1, max_iter=60, seed=0)
    probe = pca.build(Y, 3)
    method = get_method("vmp")
    plan = plan_run(probe, method, parse_options(method, {"n_jobs": 2}), Structure(probe))
    assert plan.between_sweeps and not isinstance(plan.rows, threads.ThreadRows)
    m = pca.build(Y, 3)
    f2 = m.fit("vmp", n_jobs=2, max_iter=60, seed=0)
    np.testing.assert_allclose(f2.elbo_trace, f1.elbo_trace, rtol=1e-12)
    assert f2.n_iter == f1.n_iter


def test_a_callback_sees_the_current_rows_and_saves_the_current_iterate(tmp_path, route):
    """A callback of a fit in partitions reads the rows' q of this iterate (they are
    written back before each call): the same z means, ELBO and checkpoint as one thread
    (before, the model's z stayed at the start: 0.88 off; a checkpoint saved in the
    callback held those rows)."""
    X = _gmm_data(N=3000)
    got = {}
    for jobs in (1, 2):
        m = gmm_model(X)
        seen = []

        def cb(it, L, m=m, seen=seen, jobs=jobs):
            seen.append((np.array(m["z"].posterior.mean), bg.elbo(m), L))
            if it == 3:
                m.save(tmp_path / f"ck{jobs}.npz")

        m.fit("vmp", seed=0, max_iter=4, tol=0, n_jobs=jobs, callback=cb)
        got[jobs] = seen
    assert len(got[1]) == len(got[2]) == 4
    for (z1, e1, L1), (z2, e2, L2) in zip(got[1], got[2]):
        np.testing.assert_allclose(z2, z1, rtol=1e-10, atol=1e-12)
        assert e2 == pytest.approx(L2, rel=1e-12) and e1 == pytest.approx(L1, rel=1e-12)
    a, b = np.load(tmp_path / "ck1.npz"), np.load(tmp_path / "ck2.npz")
    np.testing.assert_allclose(b["nat/z/0"], a["nat/z/0"], rtol=1e-10, atol=1e-9)
    assert (route[0] == "split") == bool(route[1])


@pytest.mark.parametrize("cols,mean", [(None, 0.0), (None, np.zeros(1)), (3, 0.0),
                                       (3, np.array([0.5, 1.0, 2.0]))],
                         ids=["scalar", "plates (1,)", "(N, D) scalar", "(N, D) per column"])
def test_a_per_row_latent_with_a_fixed_prior_is_cut_with_the_partitions(cols, mean):
    """x_n ~ N(m, 1), y_n ~ N(x_n, 1/tau) with m not per row (a scalar, plates (1,), one
    per column): x's location group has one shift per row, so m publishes T(m - c_n) per
    row, cut with each partition's rows while m keeps its value (it was a bare numpy
    broadcasting error, then an IndexError for m with plates): n_jobs=2 equals n_jobs=1."""
    rng = np.random.default_rng(1)
    N = 24000
    shape = (N,) if cols is None else (N, cols)
    yv = rng.normal(size=shape) * 3 + (1.0 if cols is None else np.array([1.0, 50.0, -20.0]))
    out = []
    for jobs in (1, 2):
        x = bg.Normal(mean, 1.0, plates=shape, name="x")
        model = bg.Model(bg.Normal(x, bg.Gamma(2.0, 1.0, name="tau"), name="y").observe(yv))
        fit = model.fit("vmp", n_jobs=jobs, max_iter=10, tol=0, seed=0)
        out.append((np.array(fit.elbo_trace), model["x"].posterior.mean))
    assert np.allclose(out[0][0], out[1][0], rtol=1e-12, atol=0)
    assert np.allclose(out[0][1], out[1][1], rtol=1e-12, atol=1e-12)


def test_a_prior_mean_per_row_is_cut_with_the_partitions():
    """A constant per row (prior mean and precision of x_n) is cut with each partition's
    rows, as is the location shift it gives y: n_jobs=2 equals n_jobs=1 (it was a bare
    numpy broadcasting error)."""
    rng = np.random.default_rng(0)
    N = 24000
    c = rng.normal(size=N) * 3
    yv = c + rng.normal(size=N) + 0.5 * rng.normal(size=N)
    out = []
    for jobs in (1, 2):
        tau = bg.Gamma(2.0, 1.0, name="tau")
        x = bg.Normal(c, np.linspace(0.5, 2, N), plates=(N,), name="x")
        model = bg.Model(bg.Normal(x, tau, name="y").observe(yv))
        fit = model.fit("vmp", n_jobs=jobs, max_iter=10, tol=0, seed=0)
        out.append((np.array(fit.elbo_trace), model["x"].posterior.mean))
    assert np.allclose(out[0][0], out[1][0], rtol=1e-12, atol=0)
    assert np.allclose(out[0][1], out[1][1], rtol=1e-12, atol=1e-12)


def test_a_block_that_raises_raises_in_the_caller_and_the_split_goes_on(monkeypatch):
    """An error in a worker's block is raised in the caller's thread after every block has
    ended; the same split then runs the next kernel, and its threads stop on shutdown."""
    monkeypatch.setattr(rowsplit, "MIN_ROWS", 10)
    split = rowsplit.RowSplit(3)
    ended = []

    def bad(a, b):
        if a:
            raise KeyError(a)
        time.sleep(0.01)
        ended.append(a)
        return a
    try:
        with pytest.raises(KeyError):
            split.run(bad, split.bounds(90))
        assert ended == [0]
        assert split.run(lambda a, b: b - a, split.bounds(90)) == [30, 30, 30]
    finally:
        split.shutdown()
    assert not any(w.thread.is_alive() for w in split.workers)


def test_restarts_at_one_optimum_keep_the_same_restart_on_every_route(monkeypatch):
    """Two restarts reach one optimum with the components' labels permuted, their ELBOs
    equal but for the last bits, which the order of the sums sets: the earliest is kept
    with 1, 2 threads (before, n_jobs=1 kept restart 2 and n_jobs=2 restart 0)."""
    monkeypatch.setattr(rowsplit, "MIN_ROWS", 50)
    rng = np.random.default_rng(0)
    means = np.array([[0, 0], [4, 0], [0, 4.]])
    X = means[rng.integers(0, 3, 600)] + rng.normal(size=(600, 2))
    fits = {}
    for jobs in (1, 2):
        m = gmm_model(X)
        fits[jobs] = (m.fit("vmp", seed=0, n_jobs=jobs, max_iter=30, tol=0, restarts=3), m)
    f1, f2 = fits[1][0], fits[2][0]
    e = f1.restart_elbos
    assert abs(e[2] - e[0]) <= 1e-12 * abs(e[0]) and e[1] < e[0] - 1
    assert f1.best_restart == f2.best_restart == 0
    np.testing.assert_allclose(fits[2][1]["z"].posterior.mean, fits[1][1]["z"].posterior.mean,
                               rtol=1e-9, atol=1e-12)
