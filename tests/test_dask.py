"""Fits on dask arrays (docs/scaling.md) against the same fits in memory.

On a LocalCluster of two worker processes: a GMM (full covariance, VMP and EM), a
Poisson mixture and LDA (from dask word ids and counts) give the same ELBO trace and
posteriors as in memory from the same explicit start (relative 1e-10; only the order of
the sums differs), SVI too with the same seed (minibatches fitted on the workers); the
k-means start (on a sample of rows) finds the clusters; tied components are split; a
worker killed in the middle of a fit (VMP or SVI) changes nothing; a task's error names its partition and
rows; models whose global messages read another global are refused; data read from
Parquet files do not land on the driver (tracemalloc peak flat while N grows 10x).
"""
from __future__ import annotations

import os
import signal
import tracemalloc

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import blrgraph as bg  # noqa: E402
from blrgraph import io_dask  # noqa: E402
from helpers_models import lda_model  # noqa: E402

REL = 1e-10


def close(a, b, rel=REL):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assert a.shape == b.shape
    scale = max(float(np.max(np.abs(a))), 1e-300)
    assert float(np.max(np.abs(a - b))) <= rel * scale, float(np.max(np.abs(a - b))) / scale


def gmm_data(N=600, seed=0):
    rng = np.random.default_rng(seed)
    means = np.array([[0.0, 0.0, 0.0], [6.0, 0.0, 1.0], [0.0, 6.0, -1.0]])
    L = np.array([[1.0, 0, 0], [0.4, 0.8, 0], [-0.3, 0.2, 0.7]])
    z = rng.integers(0, 3, N)
    X = means[z] + rng.normal(size=(N, 3)) @ L.T
    return X, rng.dirichlet(np.ones(3), size=N)


def gmm(data, K=3):
    N, D = data.shape
    pi = bg.Dirichlet(np.full(K, 0.5), name="pi")
    z = bg.Categorical(pi, plates=(N,), name="z")
    theta = bg.NormalWishart(np.zeros(D), 0.01, D + 1.0, np.eye(D), plates=(K,), name="theta")
    x = bg.Mixture(z, bg.MultivariateNormal, theta, name="x").observe(data)
    return bg.Model(x)


def poisson_data(N=500, seed=1):
    rng = np.random.default_rng(seed)
    rates = np.array([[1.0, 6.0, 2.0, 0.5], [7.0, 1.0, 5.0, 3.0]])
    X = rng.poisson(rates[rng.integers(0, 2, N)]).astype(float)
    return X, rng.dirichlet(np.ones(2), size=(N, 1))


def poisson_mixture(data, K=2):
    N, D = data.shape
    w = bg.Dirichlet(np.ones(K), name="w")
    rate = bg.Gamma(1.0, 0.3 * np.ones((D, K)), name="rate")
    z = bg.Categorical(w, plates=(N, 1), name="z")
    x = bg.Mixture(z, bg.Poisson, rate, name="x").observe(data)
    return bg.Model(x)


def same_fit(build, X, R, method, chunks, globals_, **opts):
    mem = build(X)
    f1 = mem.fit(method, init=R, **opts)
    dsk = build(da.from_array(X, chunks=chunks))
    f2 = dsk.fit(method, init=R, **opts)
    assert f1.n_iter == f2.n_iter and f1.converged == f2.converged
    close(f1.elbo_trace, f2.elbo_trace)
    for g in globals_:
        for a, b in zip(mem[g].nat, dsk[g].nat):
            close(a, b)
    resp = io_dask.local_moments(dsk, "z")[0]
    assert isinstance(resp, da.Array)
    close(mem["z"].moments()[0], resp.compute())
    return f1, f2, dsk


@pytest.mark.parametrize("method", ["vmp", "em"])
def test_gmm_full_covariance_equals_the_in_memory_fit(client, method):
    X, R = gmm_data()
    f1, f2, dsk = same_fit(gmm, X, R, method, 150, ["pi", "theta"], max_iter=40)
    assert len(f2.elbo_trace) > 5
    with pytest.raises(AttributeError, match="local_moments"):
        dsk["z"].posterior
    assert dsk["theta"].posterior is not None


def test_without_the_cluster_dask_threads_give_the_same_fit(client):
    import dask
    X, R = gmm_data(N=300, seed=9)
    with dask.config.set(scheduler="threads", num_workers=2):
        same_fit(gmm, X, R, "vmp", 70, ["pi", "theta"], max_iter=15, progress=True)


def test_poisson_mixture_equals_the_in_memory_fit_with_restarts_and_callback(client):
    X, R = poisson_data()
    seen = []
    f1, f2, _ = same_fit(poisson_mixture, X, R, "vmp", 120, ["w", "rate"], max_iter=40,
                         restarts=2, callback=lambda it, L: seen.append((it, L)) and False)
    close(f1.restart_elbos, f2.restart_elbos)
    half = len(seen) // 2     # the callback saw both fits' iterations, the same ones
    assert [i for i, _ in seen[:half]] == [i for i, _ in seen[half:]]
    close([L for _, L in seen[:half]], [L for _, L in seen[half:]])


def lda_data(n_docs=60, V=30, K=3, seed=2):
    rng = np.random.default_rng(seed)
    topics = rng.dirichlet(np.full(V, 0.1), size=K)
    counts = np.array([np.bincount(rng.choice(V, size=40, p=rng.dirichlet(np.full(K, 0.3)) @ topics),
                                   minlength=V) for _ in range(n_docs)], dtype=float)
    doc, word = np.nonzero(counts)               # sorted by document
    return doc, word, counts[doc, word], rng.dirichlet(np.ones(K), size=len(doc))


def test_lda_from_dask_triplets_equals_the_in_memory_fit(client):
    doc, word, cnt, R = lda_data()
    opts = dict(max_iter=12, init=R, local_restart=True, local_iters=100)  # Dask: fixed budget
    mem = lda_model(60, doc, word, cnt)
    f1 = mem.fit("vmp", **opts)
    # chunks of 250 entries split documents: the boundaries move to the next document
    dsk = lda_model(60, da.from_array(doc, chunks=250), da.from_array(word, chunks=250),
              da.from_array(cnt, chunks=250))
    f2 = dsk.fit("vmp", **opts)
    close(f1.elbo_trace, f2.elbo_trace)
    close(mem["phi"].nat[0], dsk["phi"].nat[0])
    theta = io_dask.local_moments(dsk, "theta")[0]
    assert theta.shape == (60, 3)
    close(mem["theta"].moments()[0], theta.compute())
    close(mem["z"].moments()[0], io_dask.local_moments(dsk, "z")[0].compute())


def test_the_random_topics_start_is_refused_for_dask_rows(client):
    """init='topics' needs every row's assignments on the driver: refused, naming the fix."""
    doc, word, cnt, R = lda_data()
    dsk = lda_model(60, da.from_array(doc, chunks=250), da.from_array(word, chunks=250),
              da.from_array(cnt, chunks=250))
    with pytest.raises(ValueError, match="use init='diffuse'"):
        dsk.fit("vmp", init="topics", max_iter=2)


def _svi_cases():
    X, R = gmm_data(N=400, seed=3)
    P, _ = poisson_data()
    doc, word, cnt, _ = lda_data()
    return {
        "gmm-random": (lambda c: gmm(X if c is None else da.from_array(X, chunks=c)), 90,
                       dict(init="random", seed=5, batch_size=40, max_steps=25, warmup=3), "theta"),
        "gmm-array-start": (lambda c: gmm(X if c is None else da.from_array(X, chunks=c)), 100,
                            dict(init=R, seed=1, batch_size=50, max_steps=20), "theta"),
        "poisson": (lambda c: poisson_mixture(P if c is None else da.from_array(P, chunks=c)), 120,
                    dict(seed=2, batch_size=64, max_steps=30, init="random"), "rate"),
        "lda": (lambda c: lda_model(60, doc, word, cnt) if c is None else
                lda_model(60, *(da.from_array(a, chunks=c) for a in (doc, word, cnt))), 250,
                dict(seed=3, batch_size=10, max_steps=15, init="diffuse"), "phi"),
    }


@pytest.mark.parametrize("case", ["gmm-random", "gmm-array-start", "poisson", "lda"])
def test_svi_with_the_same_seed_equals_the_in_memory_fit(client, case, monkeypatch):
    """The minibatches are the in-memory ones (the same rows for the same seed), fitted
    on the workers: no row is read to the driver, each step runs one task per partition
    the minibatch touches; the ELBO trace, the global posteriors and the local
    posteriors refitted to the final globals (in memory: the final local pass) agree."""
    from blrgraph.graph.dask_source import DaskSource
    build, chunks, opts, glob = _svi_cases()[case]
    m1 = build(None)
    f1 = m1.fit("svi", **opts)
    m2 = build(chunks)

    def refuse(self, rows):
        raise AssertionError("rows read to the driver")
    monkeypatch.setattr(DaskSource, "read", refuse)
    f2 = m2.fit("svi", **opts)
    assert len(f1.elbo_trace) == opts["max_steps"]
    close(f1.elbo_trace, f2.elbo_trace)
    for a, b in zip(m1[glob].nat, m2[glob].nat):
        close(a, b)
    st = m2.dask_view.stats
    assert 1 <= st["partitions"] <= len(m2.dask_view.parts) and st["task_seconds"] > 0
    local = "theta" if case == "lda" else "z"
    close(m1[local].moments()[0], io_dask.local_moments(m2, local)[0].compute())


def test_svi_default_k_means_start_reads_the_first_minibatch_only(client, monkeypatch):
    """The default start (k-means on the first minibatch, as in memory) reads that
    minibatch's rows to the driver once; the fit equals the in-memory one."""
    from blrgraph.graph.dask_source import DaskSource
    X, _ = gmm_data(N=400, seed=3)
    opts = dict(seed=1, batch_size=50, max_steps=12)
    m1 = gmm(X)
    f1 = m1.fit("svi", **opts)
    reads, read = [], DaskSource.read
    monkeypatch.setattr(DaskSource, "read", lambda self, rows: reads.append(len(rows)) or
                        read(self, rows))
    m2 = gmm(da.from_array(X, chunks=100))
    f2 = m2.fit("svi", **opts)
    assert reads == [50]
    close(f1.elbo_trace, f2.elbo_trace)
    close(m1["theta"].nat[2], m2["theta"].nat[2])


def test_svi_with_a_worker_killed_mid_fit_gives_the_same_answer(client):
    X, _ = gmm_data(N=800, seed=4)
    opts = dict(init="random", seed=6, batch_size=100, max_steps=16, warmup=2)
    ref = gmm(X).fit("svi", **opts)
    pid = list(client.run(os.getpid).values())[1]
    killed = []

    def kill(it, elbo):
        if it == 6:
            os.kill(pid, signal.SIGKILL)
            killed.append(it)
        return False

    f = gmm(da.from_array(X, chunks=100)).fit("svi", callback=kill, **opts)
    assert killed == [6]
    close(ref.elbo_trace, f.elbo_trace)
    client.wait_for_workers(2, timeout=60)


def test_svi_on_dask_resumes_from_a_checkpoint_as_in_memory(client, tmp_path):
    """A checkpoint of an SVI run on Dask (the global state, the epoch's permutation and
    the rng) resumed with ``resume=True`` continues the run exactly: the trace equals
    one straight run and the same resumed run in memory."""
    X, _ = gmm_data(N=400, seed=3)
    opts = dict(init="random", seed=0, batch_size=40)
    straight = gmm(da.from_array(X, chunks=100)).fit("svi", max_steps=30, **opts)
    m = gmm(da.from_array(X, chunks=100))
    m.fit("svi", max_steps=12, **opts)
    path = m.save(tmp_path / "svi.npz")
    again = gmm(da.from_array(X, chunks=100))
    again.load(path)
    f = again.fit("svi", resume=True, batch_size=40, max_steps=30)
    mem = gmm(X)
    mem.fit("svi", max_steps=12, **opts)
    f_mem = mem.fit("svi", resume=True, batch_size=40, max_steps=30)
    assert len(f.elbo_trace) == 30
    np.testing.assert_array_equal(straight.elbo_trace, f.elbo_trace)
    close(f_mem.elbo_trace, f.elbo_trace)
    close(mem["theta"].nat[2], again["theta"].nat[2])


def test_tied_components_on_dask_are_split_reproducibly(client):
    """A start with two identical columns ties two components (a symmetric saddle). On
    dask the saddle is found at the same iteration as in memory (the counts per
    component come with the partitions' results), split on the workers (random shares
    drawn from a seed of the fit's rng and the partition number), and the fit goes on
    to the same optimum; the same seed gives the same run."""
    import warnings
    from blrgraph.inference.loop import ConvergenceWarning
    X, R = gmm_data(N=600, seed=0)
    R[:, 1] = R[:, 0]
    R /= R.sum(1, keepdims=True)
    runs = []
    for data in (X, da.from_array(X, chunks=150), da.from_array(X, chunks=150)):
        m = gmm(data)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always", ConvergenceWarning)
            f = m.fit("vmp", init=R, max_iter=300, seed=4)
        said = [str(x.message) for x in w if issubclass(x.category, ConvergenceWarning)]
        runs.append((m, f, said))
    (m1, f1, w1), (m2, f2, w2), (m3, f3, w3) = runs
    assert len(w1) == 1 and "saddle point" in w1[0] and w1 == w2 == w3
    k = int(w1[0].split("at iteration ")[1].split(";")[0])
    close(f1.elbo_trace[:k], f2.elbo_trace[:k])          # the same run up to the split
    assert f1.converged and f2.converged
    close(f1.elbo, f2.elbo, rel=1e-9)                      # the same optimum after it
    mean = lambda m: np.sort(m["theta"].posterior.mean[0], axis=0)  # noqa: E731
    close(mean(m1), mean(m2), rel=1e-6)
    assert np.ptp(mean(m2)[:, 0]) > 5                       # three distinct components
    np.testing.assert_array_equal(f2.elbo_trace, f3.elbo_trace)


def test_a_worker_killed_mid_fit_changes_nothing(client):
    X, R = gmm_data(N=800, seed=4)
    ref = gmm(X).fit("vmp", init=R, max_iter=12)
    pids = list(client.run(os.getpid).values())
    killed = []

    def kill(it, elbo):
        if it == 4:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(it)
        return False

    m = gmm(da.from_array(X, chunks=100))
    f = m.fit("vmp", init=R, max_iter=12, callback=kill)
    assert killed == [4]
    close(ref.elbo_trace, f.elbo_trace)
    client.wait_for_workers(2, timeout=60)


@pytest.mark.parametrize("limit", [0, 1])
def test_workers_keeping_fewer_partitions_give_the_same_fit(client, limit):
    """``blrgraph.partition-cache``: a worker keeps the restricted models of at most that
    many partitions and rebuilds the others from their chunks in every task; the tasks
    are pure, so the fit is the same (VMP and SVI), and the rebuilds are reported."""
    import dask
    X, R = gmm_data(N=600, seed=5)
    full = gmm(da.from_array(X, chunks=100)).fit("vmp", init=R, max_iter=6)
    svi = dict(init="random", seed=2, batch_size=90, max_steps=8)
    full_svi = gmm(da.from_array(X, chunks=100)).fit("svi", **svi)
    with dask.config.set({"blrgraph.partition-cache": limit}):
        m = gmm(da.from_array(X, chunks=100))
        f = m.fit("vmp", init=R, max_iter=6)
        st = m.dask_view.stats                       # some partitions rebuilt
        assert 0 < st["rebuilt_rows"] <= 600 and 0 < st["rebuilt_cpu"] <= st["task_cpu"]
        f_svi = gmm(da.from_array(X, chunks=100)).fit("svi", **svi)
    close(full.elbo_trace, f.elbo_trace)
    close(full_svi.elbo_trace, f_svi.elbo_trace)
    with dask.config.set({"blrgraph.partition-cache": -1}):
        with pytest.raises(ValueError, match="partition-cache"):
            gmm(da.from_array(X, chunks=100)).fit("vmp", init=R, max_iter=2)


def test_an_error_in_a_task_names_the_partition_and_its_rows(client):
    X, R = gmm_data()
    X[437, 1] = np.nan
    m = gmm(da.from_array(X, chunks=150))
    with pytest.raises(ValueError, match=r"dask partition 2 \(rows 300\.\.449\).*row 437"):
        m.fit("vmp", init=R, max_iter=3)


def test_models_whose_global_messages_read_another_global_are_refused(client):
    X, R = gmm_data()
    N, D, K = X.shape[0], 3, 3
    pi = bg.Dirichlet(np.ones(K), name="pi")
    z = bg.Categorical(pi, plates=(N,), name="z")
    mu = bg.MultivariateNormal(np.zeros(D), np.eye(D) * 0.01, plates=(K,), name="mu")
    Lam = bg.Wishart(D + 1.0, np.eye(D), plates=(K,), name="Lam")
    x = bg.Mixture(z, bg.MultivariateNormal, mu, Lam, name="x").observe(da.from_array(X, chunks=150))
    with pytest.raises(ValueError, match="read the global node"):
        bg.Model(x).fit("vmp", init=R)
    m = gmm(da.from_array(X, chunks=150))
    with pytest.raises(ValueError, match="local_restart=False"):
        m.fit("vmp", init=R, local_restart=False)
    with pytest.raises(ValueError, match="damped"):
        m.fit("ncvmp", init=R)


def test_the_default_k_means_start_on_a_sample_recovers_the_clusters(client):
    from sklearn.metrics import adjusted_rand_score
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 3, 3000)
    X = np.array([[0.0, 0.0], [9.0, 0.0], [0.0, 9.0]])[labels] + rng.normal(size=(3000, 2))
    m = gmm(da.from_array(X, chunks=700))
    f = m.fit("vmp", seed=0, max_iter=100)
    assert f.converged
    resp = io_dask.local_moments(m, "z")[0].compute()
    assert resp.shape == (3000, 3)
    assert adjusted_rand_score(labels, resp.argmax(1)) == 1.0


def _parquet(tmp_path, name, N, files=4, seed=0):
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(seed)
    d = tmp_path / name
    d.mkdir()
    for i in range(files):
        n = N // files
        c = rng.integers(0, 2, n)
        frame = pd.DataFrame({"a": rng.normal(size=n) + 5 * c, "b": rng.normal(size=n) - 3 * c,
                              "c": rng.normal(size=n)})
        frame.to_parquet(d / f"part{i}.parquet")
    return d


def test_parquet_rows_never_land_on_the_driver(client, tmp_path):
    peaks = {}
    for N in (20_000, 200_000):
        path = _parquet(tmp_path, f"n{N}", N)
        X = io_dask.read_table(path)
        assert X.shape == (N, 3) and X.numblocks[0] == 4
        m = gmm(X, K=2)
        tracemalloc.start()
        f = m.fit("vmp", init="random", seed=0, max_iter=4)
        peaks[N] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert np.all(np.isfinite(f.elbo_trace)) and len(f.elbo_trace) >= 2
    data_bytes = 200_000 * 3 * 8
    # the driver's peak does not grow with N (4.8 MB of rows at the larger N)
    assert peaks[200_000] < 2 * peaks[20_000] + 200_000, peaks
    assert peaks[200_000] < data_bytes / 4, peaks


def test_svi_on_parquet_holds_row_indices_not_rows_on_the_driver(client, tmp_path):
    """SVI's driver holds the epoch's permutation of the row numbers (8 bytes a row, the
    in-memory sampler), not the rows (24 bytes a row here): its peak grows by about
    8 bytes per row while N grows 10x."""
    peaks = {}
    for N in (20_000, 200_000):
        X = io_dask.read_table(_parquet(tmp_path, f"s{N}", N))
        m = gmm(X, K=2)
        tracemalloc.start()
        f = m.fit("svi", init="random", seed=0, batch_size=500, max_steps=4, warmup=1)
        peaks[N] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert np.all(np.isfinite(f.elbo_trace))
    grown = peaks[200_000] - peaks[20_000]
    # the permutation grows by 1.44 MB; the rows would grow by 4.3 MB
    assert grown < 1.5 * 8 * 180_000, peaks


def test_read_table_refuses_text_columns_and_unknown_columns(client, tmp_path):
    pd = pytest.importorskip("pandas")
    d = tmp_path / "t"
    d.mkdir()
    pd.DataFrame({"a": [1.0, 2.0], "s": ["x", "y"]}).to_csv(d / "one.csv", index=False)
    with pytest.raises(ValueError, match=r"\['s'\] are not numeric"):
        io_dask.read_table(d)
    with pytest.raises(ValueError, match="no column"):
        io_dask.read_table(d, columns=["q"])
    X = io_dask.read_table(d, columns=["a"])
    assert X.compute().tolist() == [[1.0], [2.0]]


def test_a_checkpoint_of_a_dask_fit_holds_the_global_state_only(client, tmp_path):
    """save() after a fit on Dask writes the global nodes (pi, theta), not the N x K
    responsibilities; load() into a model on the same data restores them exactly and
    leaves z at its prior given them (it is refitted by the next sweep)."""
    X, R0 = gmm_data()
    m = gmm(da.from_array(X, chunks=(150, 3)))
    m.fit("vmp", init=R0, max_iter=8)
    path = m.save(tmp_path / "fit.npz")
    with np.load(path) as f:
        assert not any(k.startswith("nat/z/") for k in f.files)
        assert any(k.startswith("nat/theta/") for k in f.files)
        assert os.path.getsize(path) < 20_000      # no (N, K) arrays
    m2 = gmm(da.from_array(X, chunks=(150, 3)))
    m2.load(path)
    for a, b in zip(m2["theta"].nat, m["theta"].nat):
        np.testing.assert_array_equal(a, b)
    assert m2["theta"].fitted and not m2["z"].fitted
    np.testing.assert_allclose(m2["z"].nat[0], m2["z"].prior_natural()[0], rtol=0, atol=0)


def test_the_fit_names_its_start_on_dask_too(client):
    """FitResult.start (and summary.json's "start") name the start used on Dask-backed
    data as in memory (was None: the plan's starts are taken on the workers); restarts
    list theirs (a screened restart is random there), SVI's minibatch start is named."""
    X, _ = gmm_data()
    dsk = gmm(da.from_array(X, chunks=150))
    assert dsk.fit("vmp", seed=0, max_iter=5).start == "kmeans"
    fit = dsk.fit("vmp", seed=0, max_iter=5, restarts=3)
    assert fit.restart_starts == ["kmeans", "random", "random"]
    assert fit.start == fit.restart_starts[fit.best_restart]
    assert dsk.fit("vmp", seed=0, max_iter=5, init="kmeans++").start == "kmeans++"
    assert dsk.fit("svi", seed=0, batch_size=100, epochs=1).start == "kmeans"


def test_the_driver_takes_the_one_step_with_its_checks(monkeypatch):
    """The global steps on dask data are the in-memory step (blr.blr_update), checks
    included: a precision that stays not positive definite (forced here for the Gamma
    rates) raises the same FloatingPointError in memory and on dask, instead of being
    stored. (Threads only: the step is the driver's.)"""
    import dask
    from blrgraph.families.gamma import Gamma
    X, R = poisson_data(N=200)
    monkeypatch.setattr(Gamma, "precision_is_pd", lambda self, nat: False)
    with pytest.raises(FloatingPointError, match="not positive definite even with rho halved"):
        poisson_mixture(X).fit("vmp", init=R, max_iter=3)
    with dask.config.set(scheduler="threads", num_workers=2):
        with pytest.raises(FloatingPointError, match="not positive definite even with rho halved"):
            poisson_mixture(da.from_array(X, chunks=50)).fit("vmp", init=R, max_iter=3)


def test_a_per_row_latent_with_a_scalar_prior_on_dask_data_equals_in_memory(client):
    """x_n ~ N(0, 1), y_n ~ N(x_n, 1/tau) with y on dask: the rows' shift is not one per
    row (that would be the rows themselves, held by the client), and the fit equals the
    fit in memory (it was a bare "operands could not be broadcast (400,) (100,)")."""
    rng = np.random.default_rng(0)
    yv = rng.normal(size=400) * 3 + 1.0
    out = []
    for data in (yv, da.from_array(yv, chunks=100)):
        x = bg.Normal(0.0, 1.0, plates=(400,), name="x")
        model = bg.Model(bg.Normal(x, bg.Gamma(2.0, 1.0, name="tau"), name="y").observe(data))
        fit = model.fit("vmp", max_iter=10, tol=0)
        out.append((np.array(fit.elbo_trace), model["tau"].posterior.mean))
    assert np.allclose(out[1][0], out[0][0], rtol=1e-10, atol=0)
    assert out[1][1] == pytest.approx(out[0][1], rel=1e-10)


def test_a_prior_mean_per_row_on_dask_data_is_refused_naming_the_node(client):
    """One prior mean per row on dask data: refused before any task runs, naming the node
    and the fix (the workers' copies gave an ELBO 2% off the fit in memory)."""
    rng = np.random.default_rng(0)
    c = rng.normal(size=400)
    x = bg.Normal(c, 1.0, plates=(400,), name="x")
    y = bg.Normal(x, bg.Gamma(2.0, 1.0, name="tau"), name="y")
    y.observe(da.from_array(c + rng.normal(size=400), chunks=100))
    with pytest.raises(ValueError, match=r"Normal 'x'.*one value per row.*np.asarray"):
        bg.Model(y).fit("vmp", max_iter=3)
