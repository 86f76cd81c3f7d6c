"""LDA declared as in docs/models/lda.md, on (doc, word, count) triplets of a sparse
document-term matrix (docs/math.md §3.5):

    theta = Dirichlet(alpha 1_K, plates=(n_docs,)); phi = Dirichlet(eta 1_V, plates=(K,))
    z = Categorical(theta[doc_ids], plates=(nnz,));  y = Mixture(z, Categorical, phi)
    y.observe(word_ids, weights=counts)

Checks: monotone ELBO; the ELBO equals §3.5's explicit-phi ELBO written here, and
(since z is updated last) scikit-learn's collapsed `_approx_bound` at the same
parameters; topics of a synthetic corpus are recovered; the run equals a hand-written
batch VB-LDA sweep for sweep; sklearn's batch LDA reaches about the same bound;
memory is O(nnz K) (a corpus where nnz x V x K float64 would take terabytes);
counts equal repeated rows.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment
from scipy.special import digamma, gammaln, logsumexp
from sklearn.decomposition import LatentDirichletAllocation

import blrgraph as bg

K, V, N_DOCS = 4, 40, 150
ALPHA, ETA = 0.3, 0.1


def make_topics():
    """K topics, each concentrated on its own block of V/K words."""
    T = np.full((K, V), 0.004)
    block = V // K
    for k in range(K):
        T[k, k * block:(k + 1) * block] = np.linspace(2.0, 1.0, block)
    return T / T.sum(1, keepdims=True)


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(42)
    topics = make_topics()
    theta = rng.dirichlet(ALPHA * np.ones(K), size=N_DOCS)
    lengths = rng.integers(60, 120, size=N_DOCS)
    dtm = np.stack([rng.multinomial(n, th @ topics) for n, th in zip(lengths, theta)])
    M = sp.csr_matrix(dtm)
    coo = M.tocoo()
    order = np.lexsort((coo.col, coo.row))
    doc, word, cnt = coo.row[order], coo.col[order], coo.data[order].astype(float)
    return dict(topics=topics, dtm=dtm, csr=M, doc=doc, word=word, cnt=cnt)


def build_lda(doc, word, cnt, n_docs=N_DOCS, n_words=V, n_topics=K, alpha=ALPHA, eta=ETA):
    theta = bg.Dirichlet(alpha * np.ones(n_topics), plates=(n_docs,), name="theta")
    phi = bg.Dirichlet(eta * np.ones(n_words), plates=(n_topics,), name="phi")
    z = bg.Categorical(theta[doc], plates=(len(doc),), name="z")
    y = bg.Mixture(z, bg.Categorical, phi, name="y").observe(word, weights=cnt)
    return bg.Model(y), theta, phi, z


def fit_lda(c, **kw):
    model, theta, phi, z = build_lda(c["doc"], c["word"], c["cnt"])
    opts = dict(max_iter=1000, tol=1e-11, seed=0)
    opts.update(kw)
    fit = model.fit("vmp", **opts)
    return fit, theta.posterior.params["alpha"], phi.posterior.params["alpha"], z.posterior.mean


def elog_dir(a):
    return digamma(a) - digamma(a.sum(-1, keepdims=True))


def explicit_elbo(doc, word, cnt, gamma, lam, r, alpha=ALPHA, eta=ETA):
    """docs/math.md §3.5, per-document ELBO with explicit phi (= r), plus the global term."""
    Kt = gamma.shape[1]
    Vw = lam.shape[1]
    et = elog_dir(gamma)                                   # D, K
    eb = elog_dir(lam)                                     # K, V
    n_r = cnt[:, None] * r
    with np.errstate(divide="ignore", invalid="ignore"):
        rlogr = np.where(r > 0, r * np.log(r), 0.0)
    docs = (gammaln(Kt * alpha) - Kt * gammaln(alpha)) * gamma.shape[0] + (alpha - 1) * et.sum() \
        + np.sum(n_r * et[doc]) \
        + np.sum(n_r * eb[:, word].T) \
        - np.sum(gammaln(gamma.sum(1)) - gammaln(gamma).sum(1) + ((gamma - 1) * et).sum(1)) \
        - np.sum(cnt[:, None] * rlogr)
    glob = np.sum(((eta - lam) * eb).sum(1) + (gammaln(lam) - gammaln(eta)).sum(1)
                  + gammaln(Vw * eta) - gammaln(lam.sum(1)))
    return docs + glob


def batch_vb_lda(doc, word, cnt, r, sweeps, n_docs=N_DOCS, n_words=V, alpha=ALPHA, eta=ETA):
    """Hand-written batch VB-LDA (docs/math.md §3.5), in blrgraph's schedule: theta, phi, then z."""
    Kt = r.shape[1]
    trace = []
    for _ in range(sweeps):
        gamma = alpha + np.zeros((n_docs, Kt))
        np.add.at(gamma, doc, cnt[:, None] * r)
        lam = eta + np.zeros((Kt, n_words))
        np.add.at(lam.T, word, cnt[:, None] * r)
        logr = elog_dir(gamma)[doc] + elog_dir(lam)[:, word].T
        r = np.exp(logr - logsumexp(logr, axis=1, keepdims=True))
        trace.append(explicit_elbo(doc, word, cnt, gamma, lam, r, alpha, eta))
    return gamma, lam, r, np.array(trace)


def assert_monotone(trace, rtol=1e-9):
    trace = np.asarray(trace)
    drops = trace[:-1] - trace[1:]
    assert np.all(drops <= rtol * np.abs(trace[1:])), f"ELBO decreased by up to {drops.max()}"


def topic_match(est, true):
    """Hungarian matching on cosine similarity; returns (perm, similarities)."""
    en = est / np.linalg.norm(est, axis=1, keepdims=True)
    tn = true / np.linalg.norm(true, axis=1, keepdims=True)
    cos = en @ tn.T
    rows, cols = linear_sum_assignment(-cos)
    perm = np.empty(len(true), int)
    perm[cols] = rows
    return perm, cos[perm, np.arange(len(true))]


@pytest.fixture(scope="module")
def lda_fit(corpus):
    return fit_lda(corpus)


# --------------------------------------------------------------------------------------------
def test_lda_elbo_monotone(lda_fit):
    fit, *_ = lda_fit
    assert fit.converged
    assert fit.n_iter > 5
    assert_monotone(fit.elbo_trace)


def test_lda_elbo_equals_explicit_phi_elbo(corpus, lda_fit):
    fit, gamma, lam, r = lda_fit
    assert gamma.shape == (N_DOCS, K) and lam.shape == (K, V) and r.shape == (len(corpus["doc"]), K)
    L = explicit_elbo(corpus["doc"], corpus["word"], corpus["cnt"], gamma, lam, r)
    np.testing.assert_allclose(fit.elbo, L, rtol=1e-9)


@pytest.mark.parametrize("sweeps", [1, 4])
def test_lda_elbo_equals_explicit_phi_elbo_early(corpus, sweeps):
    fit, gamma, lam, r = fit_lda(corpus, max_iter=sweeps)
    L = explicit_elbo(corpus["doc"], corpus["word"], corpus["cnt"], gamma, lam, r)
    np.testing.assert_allclose(fit.elbo, L, rtol=1e-9)


@pytest.mark.parametrize("sweeps", [2, None])
def test_lda_equals_sklearn_collapsed_bound_at_same_parameters(corpus, sweeps):
    """z is updated last in a sweep, so r is optimal for (gamma, lam) and the explicit ELBO
    equals the collapsed one -- sklearn's _approx_bound (docs/math.md §7.1; its fast digamma
    is accurate to ~1e-8, hence the tolerance)."""
    fit, gamma, lam, r = fit_lda(corpus, **({} if sweeps is None else dict(max_iter=sweeps)))
    sk = LatentDirichletAllocation(n_components=K, doc_topic_prior=ALPHA, topic_word_prior=ETA)
    sk.doc_topic_prior_, sk.topic_word_prior_ = ALPHA, ETA
    sk.components_ = lam
    bound = sk._approx_bound(corpus["csr"], gamma, sub_sampling=False)
    np.testing.assert_allclose(fit.elbo, bound, rtol=1e-7)


def test_lda_recovers_topics(corpus, lda_fit):
    _, gamma, lam, _ = lda_fit
    est = lam / lam.sum(1, keepdims=True)
    perm, cos = topic_match(est, corpus["topics"])
    assert np.all(cos > 0.97), cos
    # document-topic proportions: each document's dominant topic
    dtm = corpus["dtm"]
    true_doc = (dtm @ np.log(corpus["topics"]).T)          # most likely single topic per doc
    est_theta = gamma[:, perm] / gamma.sum(1, keepdims=True)
    agree = np.mean(est_theta.argmax(1) == true_doc.argmax(1))
    assert agree > 0.85


def test_lda_equals_hand_written_batch_vb(corpus, lda_fit):
    """Plain VMP (one local update per sweep, no restart) from a random start: responsibilities
    ~ Dirichlet(1) from default_rng(seed), the same schedule as the hand-written loop."""
    doc, word, cnt = corpus["doc"], corpus["word"], corpus["cnt"]
    r0 = np.random.default_rng(0).dirichlet(np.ones(K), size=(len(doc),))
    sweeps = 6
    plain = dict(local_iters=1, local_restart=False, init="random")
    fit6, g6, l6, r6 = fit_lda(corpus, max_iter=sweeps, **plain)
    gamma, lam, r, trace = batch_vb_lda(doc, word, cnt, r0, sweeps)
    np.testing.assert_allclose(g6, gamma, rtol=1e-10)
    np.testing.assert_allclose(l6, lam, rtol=1e-10)
    np.testing.assert_allclose(r6, r, rtol=1e-8, atol=1e-13)
    np.testing.assert_allclose(fit6.elbo_trace, trace, rtol=1e-10)
    # and at convergence
    fit, g, l, _ = fit_lda(corpus, **plain)
    gamma, lam, r, trace = batch_vb_lda(doc, word, cnt, r0, fit.n_iter)
    np.testing.assert_allclose(fit.elbo, trace[-1], rtol=1e-10)
    np.testing.assert_allclose(l, lam, rtol=1e-7)


def test_lda_close_to_sklearn_batch(corpus, lda_fit):
    """sklearn's batch VB (own initialisation, inner E-step loops) reaches a bound close to
    ours and the same topics."""
    fit, gamma, lam, _ = lda_fit
    sk = LatentDirichletAllocation(n_components=K, doc_topic_prior=ALPHA, topic_word_prior=ETA,
                                   learning_method="batch", max_iter=200, mean_change_tol=1e-6,
                                   max_doc_update_iter=300, random_state=0).fit(corpus["csr"])
    score = sk.score(corpus["csr"])
    assert abs(score - fit.elbo) < 3e-4 * abs(fit.elbo)
    perm, cos = topic_match(lam, sk.components_)
    assert np.all(cos > 0.99)


def test_lda_counts_equal_repeated_rows(corpus, lda_fit):
    """weights=counts stands for identical tokens. The same corpus as one row per token
    (count 1, seed 5) runs exactly like the count model started from the copies' average
    responsibilities: after the first sweep every copy of a (doc, word) pair has the same r.
    (The count model itself equals batch_vb_lda exactly, test above.)"""
    fit, gamma, lam, _ = lda_fit
    doc, word, cnt = corpus["doc"], corpus["word"], corpus["cnt"]
    reps = cnt.astype(int)
    doc1, word1 = np.repeat(doc, reps), np.repeat(word, reps)
    assert len(doc1) == cnt.sum() > 2 * len(doc)
    model, th1, ph1, z1 = build_lda(doc1, word1, np.ones(len(doc1)))
    sweeps = 8
    plain = dict(local_iters=1, local_restart=False, init="random")  # batch_vb_lda's schedule
    fit1 = model.fit("vmp", max_iter=sweeps, seed=5, **plain)
    r0_rows = np.random.default_rng(5).dirichlet(np.ones(K), size=(len(doc1),))
    starts = np.concatenate([[0], np.cumsum(reps)[:-1]])
    r0_avg = np.add.reduceat(r0_rows, starts, axis=0) / reps[:, None]
    g, l, r, trace = batch_vb_lda(doc, word, cnt, r0_avg, sweeps)
    np.testing.assert_allclose(fit1.elbo_trace, trace, rtol=1e-10)
    np.testing.assert_allclose(ph1.posterior.params["alpha"], l, rtol=1e-10)
    np.testing.assert_allclose(th1.posterior.params["alpha"], g, rtol=1e-10)
    np.testing.assert_allclose(z1.posterior.mean, np.repeat(r, reps, axis=0), rtol=1e-8, atol=1e-13)
    # weights of ones = no weights
    model2, _, _, _ = build_lda(doc1, word1, None)
    fit2 = model2.fit("vmp", max_iter=sweeps, seed=5, **plain)
    np.testing.assert_array_equal(fit2.elbo_trace, fit1.elbo_trace)
    # run to convergence: LDA has many nearby local optima (differences of a few nats here
    # for different starts), so only the same objective level and the same topics are expected
    fit3 = model.fit("vmp", max_iter=1000, tol=1e-11, seed=5)
    assert_monotone(fit3.elbo_trace)
    np.testing.assert_allclose(fit3.elbo, fit.elbo, rtol=1e-3)
    _, cos = topic_match(ph1.posterior.params["alpha"], lam)
    assert np.all(cos > 0.99)


def test_lda_memory_is_O_nnz_K():
    """V = 50000, K = 50, 2000 docs x 100 distinct words: nnz = 200k, so one dense
    (nnz, V, K) float64 array would be 4 TB. Three sweeps must stay within a small multiple
    of nnz * K float64 (plus the K x V topic arrays)."""
    rng = np.random.default_rng(3)
    Kb, Vb, nd, per = 50, 50_000, 2000, 100
    doc = np.repeat(np.arange(nd), per)
    word = np.concatenate([rng.choice(Vb, size=per, replace=False) for _ in range(nd)])
    cnt = rng.integers(1, 5, size=doc.size).astype(float)
    nnz = doc.size
    unit = nnz * Kb * 8
    assert nnz * Vb * Kb * 8 > 24 * 2**30
    tracemalloc.start()
    try:
        model, theta, phi, z = build_lda(doc, word, cnt, n_docs=nd, n_words=Vb, n_topics=Kb,
                                         alpha=0.1, eta=0.01)
        fit = model.fit("vmp", max_iter=3, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert fit.n_iter == 3
    assert_monotone(fit.elbo_trace)
    assert peak < 15 * unit + 4 * Kb * Vb * 8, f"peak {peak / 2**20:.0f} MiB = {peak / unit:.1f} x nnz*K*8"
    assert phi.posterior.params["alpha"].shape == (Kb, Vb)
    np.testing.assert_allclose(phi.posterior.params["alpha"].sum(), Kb * Vb * 0.01 + cnt.sum())


# ---- fit("vmp", local_iters=...): batch VB with local iterations -------------------------
def batch_vb_local(doc, word, cnt, r0, passes, local_iters, local_tol, restart=True,
                   n_docs=N_DOCS, n_words=V, alpha=ALPHA, eta=ETA):
    """Hand-written batch VB-LDA as scikit-learn schedules it (Hoffman, Blei & Bach 2010):
    each pass lambda from the last responsibilities (at first the initial ones), then gamma from a uniform start
    (restart) or the last pass (warm), fixed-point iterations gamma <- alpha + sum_n cnt r
    with r = softmax(E log theta[doc] + E log beta[:, word]), each document until the mean
    change of its own gamma is below local_tol (then it keeps that gamma), then r and
    lambda."""
    Kt = r0.shape[1]
    gamma, r = np.ones((n_docs, Kt)), r0

    def resp(gamma, lam):
        logr = elog_dir(gamma)[doc] + elog_dir(lam)[:, word].T
        return np.exp(logr - logsumexp(logr, axis=1, keepdims=True))

    trace, sweeps = [], []
    for _ in range(passes):
        lam = eta + np.zeros((Kt, n_words))       # the globals' step, then the local block
        np.add.at(lam.T, word, cnt[:, None] * r)
        if restart:
            gamma = np.ones((n_docs, Kt))
        active = np.ones(n_docs, dtype=bool)
        for k in range(1, local_iters + 1):
            r = resp(gamma, lam)
            new = alpha + np.zeros((n_docs, Kt))
            np.add.at(new, doc, cnt[:, None] * r)
            change = np.mean(np.abs(new - gamma), axis=1)
            gamma = np.where(active[:, None], new, gamma)
            active &= change >= local_tol
            if not active.any():
                break
        sweeps.append(k)
        r = resp(gamma, lam)
        trace.append(explicit_elbo(doc, word, cnt, gamma, lam, r, alpha, eta))
    return gamma, lam, r, np.array(trace), sweeps


@pytest.mark.parametrize("restart", [True, False])
def test_lda_local_iterations_equal_hand_written_batch_vb(corpus, restart):
    doc, word, cnt = corpus["doc"], corpus["word"], corpus["cnt"]
    r0 = np.random.default_rng(0).dirichlet(np.ones(K), size=(len(doc),))
    passes, iters, ltol = 5, 40, 1e-3
    model, theta, phi, z = build_lda(doc, word, cnt)
    fit = model.fit("vmp", max_iter=passes, tol=0, seed=0, local_iters=iters, local_tol=ltol,
                    local_restart=restart, init="random")
    gamma, lam, r, trace, sweeps = batch_vb_local(doc, word, cnt, r0, passes, iters, ltol, restart)
    assert max(sweeps) > 3  # the local block iterates
    assert fit.local_sweeps == sweeps  # and stops where the hand-written loop stops
    np.testing.assert_allclose(theta.posterior.params["alpha"], gamma, rtol=1e-10)
    np.testing.assert_allclose(phi.posterior.params["alpha"], lam, rtol=1e-10)
    np.testing.assert_allclose(z.posterior.mean, r, rtol=1e-8, atol=1e-13)
    # the reported ELBO is the explicit one at the same (gamma, lambda, r) after each pass
    np.testing.assert_allclose(fit.elbo_trace, trace, rtol=1e-10)


def test_lda_local_iterations_without_restart_never_lower_the_elbo(corpus):
    model, *_ = build_lda(corpus["doc"], corpus["word"], corpus["cnt"])
    fit = model.fit("vmp", max_iter=30, tol=0, seed=1, local_iters=50, local_restart=False)
    assert_monotone(fit.elbo_trace)


def test_lda_local_iterations_reach_the_plain_vmp_bound(corpus, lda_fit):
    """With restarts the bound may dip between passes, but the run ends at an optimum
    of the same objective, as good as plain VMP's here."""
    model, *_ = build_lda(corpus["doc"], corpus["word"], corpus["cnt"])
    fit = model.fit("vmp", max_iter=300, tol=1e-9, seed=0, local_iters=100)
    assert fit.converged
    assert fit.elbo > lda_fit[0].elbo - 1e-4 * abs(lda_fit[0].elbo)


@pytest.mark.parametrize("kw, err, text", [
    (dict(local_iters=0), ValueError, "local_iters must be an integer >= 1"),
    (dict(local_iters=2.5), ValueError, "local_iters must be an integer >= 1"),
    (dict(local_iters=5, local_tol=-1.0), ValueError, "local_tol must be a finite number >= 0"),
    (dict(local_tol=float("nan")), ValueError, "local_tol must be a finite number >= 0"),
    (dict(local_restart="no"), TypeError, "local_restart must be True or False"),
])
def test_local_iteration_options_are_checked(corpus, kw, err, text):
    model, *_ = build_lda(corpus["doc"], corpus["word"], corpus["cnt"])
    with pytest.raises(err, match=text):
        model.fit("vmp", max_iter=2, **kw)


def test_local_iterations_need_a_local_node_and_an_iterative_method():
    p = bg.Beta(2.0, 3.0, name="p")
    x = bg.Bernoulli(p, plates=(20,), name="x").observe(np.arange(20) % 2)
    with pytest.raises(ValueError, match="no latent node lies on the data axis"):
        bg.Model(x).fit("vmp", local_iters=5)
    with pytest.raises(ValueError, match="one exact update"):
        bg.Model(x).fit("conjugate", local_iters=5)
    with pytest.raises(TypeError, match="local_restart.* are options of the batch methods"):
        bg.Model(x).fit("svi", local_restart=False)


def test_diffuse_init_draws_dirichlet_10_responsibilities(corpus):
    doc, word, cnt = corpus["doc"], corpus["word"], corpus["cnt"]
    r0 = np.random.default_rng(7).dirichlet(np.full(K, 10.0), size=(len(doc),))
    model, theta, phi, z = build_lda(doc, word, cnt)
    model.fit("vmp", max_iter=3, tol=0, seed=7, init="diffuse", local_iters=20)
    _, lam, _, _, _ = batch_vb_local(doc, word, cnt, r0, 3, 20, 1e-3)
    np.testing.assert_allclose(phi.posterior.params["alpha"], lam, rtol=1e-10)


def test_factored_work_arrays_are_released_when_a_fit_ends(corpus):
    """The gathered (entries x K) tables of z's factored softmax are per-fit work arrays:
    gone after fit, while z's posterior stays readable (rebuilt on demand)."""
    model, theta, phi, z = build_lda(corpus["doc"], corpus["word"], corpus["cnt"])
    seen = []
    model.fit("vmp", max_iter=3, seed=0, callback=lambda it, L: seen.append(len(z._gather_memo)))
    assert seen and all(n > 0 for n in seen)
    assert len(z._gather_memo) == 0
    p = z.posterior.mean
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-12)
