"""fit("svi"): minibatch BLR with Robbins-Monro global steps, streaming, checkpoints."""
import numpy as np
import pytest

import blrgraph as bg
from blrgraph.graph.stream import Stream


def _gmm_data(N, K=4, D=2, seed=0):
    rng = np.random.default_rng(seed)
    C = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0], [8.0, 8.0]])[:K] + rng.normal(size=(K, D))
    lab = rng.integers(0, K, N)
    return C, C[lab] + rng.normal(size=(N, D))


def _gmm(X, K):
    N, D = X.shape
    w = bg.Dirichlet(np.ones(K), name="w")
    th = bg.NormalWishart(np.zeros(D), 1.0, D + 2.0, np.eye(D), plates=(K,), name="theta")
    z = bg.Categorical(w, plates=(N,), name="z")
    y = bg.Mixture(z, bg.MultivariateNormal, th, name="y").observe(X)
    return bg.Model(y)


def test_svi_gmm_200k_within_half_percent_of_vmp_after_3_epochs():
    C, X = _gmm_data(200_000)
    vmp = _gmm(X, 4)
    best = vmp.fit("vmp", seed=0, init="kmeans++", max_iter=500).elbo
    m = _gmm(X, 4)
    res = m.fit("svi", seed=0, batch_size=1000, epochs=3)
    assert res.estimate and res.method == "svi" and res.n_iter == 600
    # the final local pass fitted every responsibility: the full ELBO on all data
    full = bg.elbo(m)
    assert full <= best + 1e-6 * abs(best)
    assert (best - full) / abs(best) < 0.005
    means = np.sort(m["theta"].posterior.mean[0], axis=0)
    np.testing.assert_allclose(means, np.sort(C, axis=0), atol=0.05)


def test_svi_is_reproducible_with_seed():
    _, X = _gmm_data(5000, K=3)
    a, b = _gmm(X, 3), _gmm(X, 3)
    a.fit("svi", seed=7, batch_size=200, epochs=2)
    b.fit("svi", seed=7, batch_size=200, epochs=2)
    for x, y in zip(a["theta"].nat, b["theta"].nat):
        np.testing.assert_array_equal(x, y)


def test_svi_on_a_conjugate_model_drifts_to_the_exact_posterior():
    rng = np.random.default_rng(1)
    x = rng.poisson(4.0, size=20_000)
    lam = bg.Gamma(2.0, 1.0, name="lam")
    y = bg.Poisson(lam, plates=(x.size,), name="y").observe(x)
    bg.Model(y).fit("svi", seed=0, batch_size=500, epochs=20, tau=1.0, kappa=0.9)
    exact = bg.closed_form.gamma_poisson(x, 2.0, 1.0).params
    q = lam.posterior.params
    # noise of the N/|B|-scaled minibatch statistics shrinks with the step size
    assert abs(q["shape"] / q["rate"] - exact["shape"] / exact["rate"]) < 0.01
    assert q["rate"] == pytest.approx(exact["rate"], rel=1e-12)


def test_stop_save_load_continue_equals_uninterrupted(tmp_path):
    _, X = _gmm_data(3000, K=3, seed=2)
    full = _gmm(X, 3)
    full.fit("svi", seed=3, batch_size=100, max_steps=70)
    first = _gmm(X, 3)
    first.fit("svi", seed=3, batch_size=100, max_steps=25)  # stops mid-epoch
    path = tmp_path / "ck.npz"
    first.save(path)
    resumed = _gmm(X, 3)
    resumed.load(path)
    res = resumed.fit("svi", resume=True, batch_size=100, max_steps=70)
    assert res.n_iter == 70
    for name in ("w", "theta", "z"):
        for a, b in zip(full[name].nat, resumed[name].nat):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.elbo_trace, full.fit_result.elbo_trace, rtol=1e-12)


def test_load_refuses_corrupt_or_foreign_files_and_leaves_the_model_unchanged(tmp_path):
    _, X = _gmm_data(600, K=3, seed=4)
    m = _gmm(X, 3)
    m.fit("svi", seed=0, batch_size=100, max_steps=5)
    good = tmp_path / "good.npz"
    m.save(good)
    raw = bytearray(good.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(raw))
    text = tmp_path / "text.npz"
    text.write_text("not a checkpoint")
    other = _gmm(X, 2)  # another model: K = 2
    other.fit("vmp", seed=0, max_iter=3)
    before = {n.name: [a.copy() for a in n.nat] for n in other.latent}
    for path, words in ((bad, "corrupt"), (text, "checkpoint"), (good, "another model")):
        with pytest.raises(ValueError, match=words):
            other.load(path)
        for n in other.latent:
            for a, b in zip(before[n.name], n.nat):
                np.testing.assert_array_equal(a, b)
    # a valid file whose arrays were altered fails its checksum
    with np.load(good) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["nat/w/0"] = arrays["nat/w/0"] + 1.0
    tampered = tmp_path / "tampered.npz"
    np.savez(tampered, **arrays)
    with pytest.raises(ValueError, match="checksum"):
        _gmm(X, 3).load(tampered)


def test_memmap_streaming_reads_batches_and_recovers_clusters(tmp_path):
    C, X = _gmm_data(20_000, K=3, seed=5)
    np.save(tmp_path / "x.npy", X)
    Xm = np.load(tmp_path / "x.npy", mmap_mode="r")
    m = _gmm(Xm, 3)
    assert m["y"].value is None  # nothing read yet
    with pytest.raises(ValueError, match="streamed data"):
        m.fit("vmp")
    m.fit("svi", seed=0, batch_size=500, epochs=2)
    np.testing.assert_allclose(np.sort(m["theta"].posterior.mean[0], 0), np.sort(C, 0), atol=0.1)


def test_stream_of_chunks_and_bad_chunk_is_refused():
    C, X = _gmm_data(4000, K=3, seed=6)
    chunks = lambda: (X[i:i + 700] for i in range(0, len(X), 700))  # noqa: E731
    m = _gmm(Stream(chunks, n=len(X)), 3)
    m.fit("svi", seed=0, batch_size=250, epochs=3)
    np.testing.assert_allclose(np.sort(m["theta"].posterior.mean[0], 0), np.sort(C, 0), atol=0.15)
    Xbad = X.copy()
    Xbad[1234, 0] = np.nan
    m = _gmm(Stream(lambda: iter([Xbad]), n=len(X)), 3)
    with pytest.raises(ValueError, match="NaN"):
        m.fit("svi", seed=0, batch_size=500, epochs=1)


def test_svi_lda_batches_by_document():
    rng = np.random.default_rng(0)
    K, V, D, L = 3, 30, 200, 60
    topics = np.zeros((K, V))
    for k in range(K):
        topics[k, k * 10:(k + 1) * 10] = 0.1
    theta_true = rng.dirichlet(0.2 * np.ones(K), size=D)
    counts = np.array([rng.multinomial(L, theta_true[d] @ topics) for d in range(D)])
    doc, word = np.nonzero(counts)
    theta = bg.Dirichlet(0.5 * np.ones(K), plates=(D,), name="theta")
    phi = bg.Dirichlet(0.1 * np.ones(V), plates=(K,), name="phi")
    z = bg.Categorical(theta[doc], plates=(doc.size,), name="z")
    y = bg.Mixture(z, bg.Categorical, phi, name="y").observe(word, weights=counts[doc, word])
    model = bg.Model(y)
    with pytest.raises(ValueError, match="batch_over='theta'"):
        model.fit("svi", batch_over=y, batch_size=50)  # batching tokens would split documents
    # by default the data axis moves up the gather to the documents
    model.fit("svi", batch_size=20, epochs=10, seed=0, init="random")
    assert model.svi_state["batch_over"] == "theta"
    est = phi.posterior.mean
    sim = est @ topics.T / np.linalg.norm(est, axis=1)[:, None] / np.linalg.norm(topics, axis=1)
    assert np.all(sim.max(axis=1) > 0.95)
    assert sorted(sim.argmax(axis=1)) == [0, 1, 2]


@pytest.mark.parametrize("opts, words", [
    ({"kappa": 0.5}, "kappa"), ({"tau": -1}, "tau"), ({"batch_size": 0}, "batch_size"),
    ({"epochs": 1, "max_steps": 3}, "not both"), ({"resume": True}, "no saved SVI state"),
])
def test_svi_option_errors(opts, words):
    _, X = _gmm_data(100, K=2)
    with pytest.raises(ValueError, match=words):
        _gmm(X, 2).fit("svi", **opts)


def test_streamed_fit_explains_what_it_does_not_keep(tmp_path):
    _, X = _gmm_data(2000, K=3, seed=8)
    np.save(tmp_path / "x.npy", X)
    m = _gmm(np.load(tmp_path / "x.npy", mmap_mode="r"), 3)
    m.fit("svi", seed=0, batch_size=200, epochs=1)
    with pytest.raises(ValueError, match="streamed"):
        bg.elbo(m)
    with pytest.raises(AttributeError, match="streamed"):
        m["z"].posterior
    assert m["theta"].posterior.mean[0].shape == (3, 2)


def test_svi_with_point_mass_assignments_gives_hard_assignments():
    """point=['z'] on a local node (online hard EM): z publishes one-hot moments on every
    minibatch and in the final pass (it used to be ignored silently)."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(-2, 1, 60), rng.normal(2, 1, 60)]
    z = bg.Categorical(bg.Dirichlet(np.ones(2), name="pi"), plates=(120,), name="z")
    th = bg.NormalGamma(0.0, 1.0, 1.0, 1.0, plates=(2,), name="th")
    x = bg.Mixture(z, bg.Normal, th, name="x").observe(X)
    bg.Model(x).fit("svi", batch_size=20, seed=0, max_steps=20, point=["z"])
    post = z.posterior
    assert post.is_point
    onehot = post.mean_params[0]
    assert set(np.unique(onehot)) == {0.0, 1.0} and np.all(onehot.sum(-1) == 1)
    labels = onehot.argmax(-1)
    assert labels[:60].mean() != labels[60:].mean()  # the two clusters get different labels


@pytest.mark.parametrize("mean", [0.0, np.zeros(1)], ids=["scalar", "plates (1,)"])
def test_a_per_row_latent_with_a_fixed_prior_is_cut_with_the_minibatch(mean):
    """x_n ~ N(m, 1): the prior mean m (a scalar, or plates (1,)) publishes T(m - c_n)
    with the per-row shift of x's location group; minibatches cut those moments and keep
    m (it was a bare numpy broadcasting error, then an IndexError for m with plates (1,))
    and SVI reaches the VMP optimum of tau."""
    rng = np.random.default_rng(0)
    N = 400
    yv = rng.normal(size=N) * 3 + 1.0

    def build():
        x = bg.Normal(mean, 1.0, plates=(N,), name="x")
        return bg.Model(bg.Normal(x, bg.Gamma(2.0, 1.0, name="tau"), name="y").observe(yv))
    exact = build()
    exact.fit("vmp", tol=1e-12)
    model = build()
    model.fit("svi", batch_size=50, max_steps=3000, seed=0)
    assert model["tau"].posterior.mean == pytest.approx(exact["tau"].posterior.mean, rel=5e-3)


def test_a_prior_mean_per_row_is_cut_with_the_minibatch():
    """x_n ~ N(c_n, 1/p_n) with a constant per row (and the per-row location shift it
    gives y): minibatches cut c, p and the shift with the rows (it was a bare numpy
    broadcasting error), and SVI reaches the VMP optimum of tau."""
    rng = np.random.default_rng(0)
    N = 400
    c = rng.normal(size=N) * 3
    yv = c + rng.normal(size=N) + 0.5 * rng.normal(size=N)

    def build():
        tau = bg.Gamma(2.0, 1.0, name="tau")
        x = bg.Normal(c, np.linspace(0.5, 2, N), plates=(N,), name="x")
        return bg.Model(bg.Normal(x, tau, name="y").observe(yv))
    exact = build()
    exact.fit("vmp", tol=1e-12)
    model = build()
    model.fit("svi", batch_size=50, max_steps=3000, seed=0)
    assert model["tau"].posterior.mean == pytest.approx(exact["tau"].posterior.mean, rel=5e-3)
