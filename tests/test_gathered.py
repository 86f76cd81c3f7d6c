"""The factored Categorical update (families/gathered.py, inference/blr.py:target_terms):
softmax of a sum of gathered tables equals the dense softmax, also for rows whose
product underflows; a model updated through it (LDA's z, a mixture's z with shared
weights) runs exactly as the dense path, sweep for sweep."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp, softmax

import blrgraph as bg
from blrgraph.families.gathered import GatheredSoftmax, gathered_softmax, gathered_sum
from blrgraph.graph.factors.categorical import scatter_last
from blrgraph.inference import blr


def test_gathered_softmax_equals_dense_softmax():
    rng = np.random.default_rng(0)
    n, K = 500, 7
    T1, T2, T3 = rng.normal(size=(40, K)) * 5, rng.normal(size=(30, K)) * 3, rng.normal(size=(1, K))
    r1, r2 = rng.integers(0, 40, n), rng.integers(0, 30, n)
    lam = T1[r1] + T2[r2] + T3
    memo = {}
    for _ in range(2):  # the second call reuses the memo
        p, logz = gathered_softmax([T1, T2, T3], [r1, r2, None], n, memo=memo)
        np.testing.assert_allclose(p, softmax(lam, axis=1), rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(logz, logsumexp(lam, axis=1), rtol=1e-13)
    np.testing.assert_allclose(gathered_sum([T1, T2, T3], [r1, r2, None], n), lam, rtol=1e-14)


def test_gathered_softmax_rows_that_underflow_fall_back_to_log_space():
    """Tables whose row maxima sit at different categories: the product of the shifted
    exponentials underflows (to 0) for some rows; those are recomputed exactly."""
    K = 3
    T1 = np.array([[0.0, -400.0, -800.0], [0.0, 0.0, 0.0]])
    T2 = np.array([[-800.0, -400.0, 0.0], [-1.0, -2.0, -3.0]])
    r1, r2 = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    lam = T1[r1] + T2[r2]
    p, logz = gathered_softmax([T1, T2], [r1, r2], 4)
    np.testing.assert_allclose(p, softmax(lam, axis=1), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(logz, logsumexp(lam, axis=1), rtol=1e-13, atol=1e-13)
    assert np.all(np.isfinite(p)) and np.allclose(p.sum(1), 1.0)


@pytest.mark.parametrize("case", ["two", "shared", "three", "one", "underflow"])
def test_scatter_of_the_factored_softmax_equals_the_dense_sums(case):
    """sum over the entries sharing a row of one table of w_n p_n, by the sparse product,
    equals the same sum of the dense softmax (also for rows computed in log space)."""
    rng = np.random.default_rng(2)
    n, K, R1, R2 = 400, 5, 30, 20
    T1, T2 = rng.normal(size=(R1, K)) * 3, rng.normal(size=(R2, K)) * 3
    r1, r2 = rng.integers(0, R1, n), rng.integers(0, R2, n)
    if case == "underflow":
        T1[:5] = [0, -900, -900, -900, -900]
        T2[:5] = [-900, 0, 0, 0, 0]
        r1[:40], r2[:40] = rng.integers(0, 5, 40), rng.integers(0, 5, 40)
    tables, rows = {"two": ([T1, T2], [r1, r2]), "underflow": ([T1, T2], [r1, r2]),
                    "shared": ([T1, T2[:1]], [r1, None]),
                    "three": ([T1, T2, T2[::-1]], [r1, r2, r2[::-1].copy()]),
                    "one": ([T1], [r1])}[case]
    lam = gathered_sum(tables, rows, n)
    p = softmax(lam, axis=1)
    w = rng.random(n)
    q = GatheredSoftmax(tables, rows, n, memo={})
    if case == "underflow":
        assert q.fixed is not None
    for weights in (w, None):
        ww = np.ones(n) if weights is None else weights
        expect = np.zeros((R1, K))
        np.add.at(expect, r1, ww[:, None] * p)
        np.testing.assert_allclose(q.scatter(r1, weights, R1), expect, rtol=1e-11, atol=1e-300)
    np.testing.assert_allclose(q.p, p, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(q.log_partition, logsumexp(lam, axis=1), rtol=1e-13, atol=1e-13)
    assert q.scatter(r1.copy(), w, R1) is None  # not one of its row arrays


def test_component_counts_equal_scatter_last():
    rng = np.random.default_rng(1)
    n, C, V = 300, 4, 11
    labels = rng.integers(0, V, (n, 1))
    w = rng.random((n, C))
    f = bg.Categorical(np.ones(V) / V, name="c").factor
    fast = f._component_counts(labels, w, V, (C,))
    np.testing.assert_allclose(fast, scatter_last(w, labels, V, (C,), (n, 1)), rtol=1e-13)
    assert f._component_counts(labels, w, V, (2, C)) is None  # other shapes: the general path


def _lda(seed=0, D=60, V=25, K=3, masked=False):
    rng = np.random.default_rng(seed)
    doc = np.repeat(np.arange(D), 8)
    word = rng.integers(0, V, doc.size)
    cnt = rng.integers(1, 4, doc.size).astype(float)
    theta = bg.Dirichlet(0.3 * np.ones(K), plates=(D,), name="theta")
    phi = bg.Dirichlet(0.1 * np.ones(V), plates=(K,), name="phi")
    z = bg.Categorical(theta[doc], plates=(doc.size,), name="z")
    mask = (rng.random(doc.size) > 0.1) if masked else None
    y = bg.Mixture(z, bg.Categorical, phi, name="y").observe(word, weights=cnt, mask=mask)
    return bg.Model(y)


def _dense(monkeypatch):
    monkeypatch.setattr(blr, "target_terms", lambda model, node: None)


@pytest.mark.parametrize("build", [_lda, lambda: _lda(masked=True)])
def test_factored_lda_equals_the_dense_path(build, monkeypatch):
    m1 = build()
    f1 = m1.fit("vmp", max_iter=25, tol=0, seed=3)
    _dense(monkeypatch)
    m2 = build()
    f2 = m2.fit("vmp", max_iter=25, tol=0, seed=3)
    np.testing.assert_allclose(f1.elbo_trace, f2.elbo_trace, rtol=1e-12)
    for name in ("theta", "phi", "z"):
        np.testing.assert_allclose(m1[name].posterior.mean, m2[name].posterior.mean, rtol=1e-10,
                                   atol=1e-14)
        np.testing.assert_allclose(m1[name].posterior.natural[0], m2[name].posterior.natural[0],
                                   rtol=1e-10, atol=1e-12)


def test_factored_path_is_taken_for_lda_and_not_with_a_mask():
    for masked, taken in ((False, True), (True, False)):
        m = _lda(masked=masked)
        m.fit("vmp", max_iter=2, tol=0, seed=0)
        assert (blr.target_terms(m, m["z"]) is not None) is taken


def test_factored_mixture_weights_equal_the_dense_path(monkeypatch):
    """z ~ Categorical(w) with w shared by every entry (a one-row table) and a mixture
    of Categoricals over observed labels: the latent class model's shape."""
    def build():
        rng = np.random.default_rng(4)
        w = bg.Dirichlet(np.ones(3), name="w")
        phi = bg.Dirichlet(0.5 * np.ones(6), plates=(3,), name="phi")
        z = bg.Categorical(w, plates=(200,), name="z")
        y = bg.Mixture(z, bg.Categorical, phi, name="y").observe(rng.integers(0, 6, 200))
        return bg.Model(y)
    m1 = build()
    f1 = m1.fit("vmp", max_iter=15, tol=0, seed=1)
    assert blr.target_terms(m1, m1["z"]) is not None
    _dense(monkeypatch)
    m2 = build()
    f2 = m2.fit("vmp", max_iter=15, tol=0, seed=1)
    np.testing.assert_allclose(f1.elbo_trace, f2.elbo_trace, rtol=1e-12)
    np.testing.assert_allclose(m1["z"].posterior.mean, m2["z"].posterior.mean, rtol=1e-10, atol=1e-14)


def test_factored_svi_lda_equals_the_dense_path(monkeypatch):
    """SVI's minibatch local passes through the factored path equal the dense ones."""
    def run():
        m = _lda(seed=5, D=80)
        f = m.fit("svi", batch_over="theta", batch_size=20, max_steps=8, seed=2, init="random",
                  warmup=2)
        return m, f
    m1, f1 = run()
    _dense(monkeypatch)
    m2, f2 = run()
    np.testing.assert_allclose(f1.elbo_trace, f2.elbo_trace, rtol=1e-10)
    for name in ("theta", "phi", "z"):
        np.testing.assert_allclose(m1[name].posterior.mean, m2[name].posterior.mean, rtol=1e-9,
                                   atol=1e-13)



# ---- contiguous rows: per-row products instead of gathering the changing table ---------
def _ragged_rows(rng, R, n_empty=3):
    """A sorted row array with ragged counts (1 to 40 entries, some rows empty), so that
    the rows fall in several buckets."""
    lens = rng.integers(1, 41, R)
    lens[rng.choice(R, n_empty, replace=False)] = 0
    lens[0] = 1
    return np.repeat(np.arange(R), lens)


def test_segments_cover_every_entry_once_with_bounded_padding():
    from blrgraph.families.gathered import Segments
    rng = np.random.default_rng(7)
    R = 120
    ra = _ragged_rows(rng, R)
    seg = Segments(ra, R, ratio=1.25, slack=4)
    assert len(seg.buckets) > 2 and not seg.whole
    ent = np.concatenate([b[3] for b in seg.buckets])
    np.testing.assert_array_equal(np.sort(ent), np.arange(len(ra)))
    for sel, m, L, e, pos in seg.buckets:
        rows = np.arange(R)[sel]
        lens = np.bincount(ra, minlength=R)[rows]
        assert len(rows) == m and lens.max() == L
        assert np.all(lens >= min(L / 1.25, L - 4))  # the padding bound of the docstring
        np.testing.assert_array_equal(ra[e], np.repeat(rows, lens))  # entries row by row
    T, E = rng.random((R, 5)), rng.random((30, 5))
    rb = rng.integers(0, 30, len(ra))
    blocks = seg.pad(E, seg.pad_index(rb, len(E)))
    np.testing.assert_allclose(seg.rowdot(T, blocks), np.einsum("nk,nk->n", T[ra], E[rb]),
                               rtol=1e-15)
    whole = Segments(np.repeat(np.arange(10), 4), 10)
    assert whole.whole and len(whole.buckets) == 1


@pytest.mark.parametrize("case", ["ragged", "equal", "underflow"])
def test_contiguous_rows_path_equals_the_dense_softmax(case):
    """One table's rows sorted (a document's entries contiguous): s, p, log Z and both
    scatters through the padded blocks equal the dense softmax; the same entries in a
    shuffled order (the gathered path) give the same values entry by entry."""
    rng = np.random.default_rng(3)
    R, V, K = 80, 40, 6
    ra = _ragged_rows(rng, R) if case != "equal" else np.repeat(np.arange(R), 9)
    n = len(ra)
    rb = rng.integers(0, V, n)
    Ta, Tb = rng.normal(size=(R, K)) * 3, rng.normal(size=(V, K)) * 3
    if case == "underflow":
        Ta[:4] = [0, -900, -900, -900, -900, -900]
        Tb[:4] = [-900, 0, 0, 0, 0, 0]
        rb[ra < 4] = rng.integers(0, 4, np.count_nonzero(ra < 4))
    lam = Ta[ra] + Tb[rb]
    p = softmax(lam, axis=1)
    w = rng.random(n)
    q = GatheredSoftmax([Ta, Tb], [ra, rb], n, memo={})
    assert q._seg is not None and q._seg[0].whole == (case == "equal")
    assert (q.fixed is not None) == (case == "underflow")
    np.testing.assert_allclose(q.p, p, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(q.log_partition, logsumexp(lam, axis=1), rtol=1e-13, atol=1e-13)
    for idx, R_out in ((ra, R), (rb, V)):
        for weights in (w, None):
            ww = np.ones(n) if weights is None else weights
            expect = np.zeros((R_out, K))
            np.add.at(expect, idx, ww[:, None] * p)
            np.testing.assert_allclose(q.scatter(idx, weights, R_out), expect, rtol=1e-11,
                                       atol=1e-300)
    perm = rng.permutation(n)
    qs = GatheredSoftmax([Ta, Tb], [ra[perm], rb[perm]], n, memo={})
    assert qs._seg is None
    np.testing.assert_allclose(q.s[perm], qs.s, rtol=1e-15)
    np.testing.assert_allclose(q.p[perm], qs.p, rtol=1e-14, atol=1e-300)
    # the tables in the other order: the sorted row array is found in second place
    qb = GatheredSoftmax([Tb, Ta], [rb, ra], n, memo={})
    assert qb._seg is not None and qb._seg[1] == 1
    np.testing.assert_allclose(qb.p, p, rtol=1e-12, atol=1e-300)


def test_contiguous_rows_blocks_are_kept_while_the_other_table_is():
    """A new first table (theta after its update) reuses the blocks of the second
    (the topics); a new second table or new rows rebuild them; every result is exact."""
    rng = np.random.default_rng(5)
    R, V, K = 30, 12, 4
    ra = _ragged_rows(rng, R, n_empty=0)
    rb = rng.integers(0, V, len(ra))
    Tb = rng.normal(size=(V, K))
    memo = {}
    seen = []
    for step in range(4):
        Ta = rng.normal(size=(R, K))
        if step == 2:
            Tb = rng.normal(size=(V, K))
        rows = [ra, rb] if step < 3 else [ra.copy(), rb.copy()]
        q = GatheredSoftmax([Ta, Tb], rows, len(ra), memo=memo)
        seen.append(q._seg[2])
        np.testing.assert_allclose(q.p, softmax(Ta[ra] + Tb[rb], axis=1), rtol=1e-12)
    assert seen[1] is seen[0] and seen[2] is not seen[1] and seen[3] is not seen[2]


def _ragged_lda(seed=0, D=50, V=30, K=3, shuffle=False):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 25, D)
    lens[3] = 0                       # a document with no words
    doc = np.repeat(np.arange(D), lens)
    word = rng.integers(0, V, doc.size)
    cnt = rng.integers(1, 4, doc.size).astype(float)
    if shuffle:
        perm = np.random.default_rng(99).permutation(doc.size)
        doc, word, cnt = doc[perm], word[perm], cnt[perm]
    theta = bg.Dirichlet(0.3 * np.ones(K), plates=(D,), name="theta")
    phi = bg.Dirichlet(0.1 * np.ones(V), plates=(K,), name="phi")
    z = bg.Categorical(theta[doc], plates=(doc.size,), name="z")
    y = bg.Mixture(z, bg.Categorical, phi, name="y").observe(word, weights=cnt)
    return bg.Model(y)


def test_lda_with_ragged_sorted_documents_equals_shuffled_and_dense(monkeypatch):
    """LDA whose entries are sorted by document (the contiguous-rows path, in several
    buckets, through the local block's row views) gives the same fit as the same corpus
    with shuffled entries (the gathered path) and as the dense path."""
    import blrgraph.families.gathered as G
    made, init = [], G.Segments.__init__

    def counted(self, rows, n_rows, **kw):
        made.append(n_rows)
        init(self, rows, n_rows, **kw)
    monkeypatch.setattr(G.Segments, "__init__", counted)
    m1 = _ragged_lda()
    f1 = m1.fit("vmp", max_iter=20, tol=0, seed=2)
    assert 50 in made and any(r < 50 for r in made)  # the whole corpus and row views
    m2 = _ragged_lda(shuffle=True)
    f2 = m2.fit("vmp", max_iter=20, tol=0, seed=2)
    _dense(monkeypatch)
    m3 = _ragged_lda()
    f3 = m3.fit("vmp", max_iter=20, tol=0, seed=2)
    for m, f in ((m2, f2), (m3, f3)):
        np.testing.assert_allclose(f1.elbo_trace, f.elbo_trace, rtol=1e-11)
        for name in ("theta", "phi"):
            np.testing.assert_allclose(m1[name].posterior.natural[0], m[name].posterior.natural[0],
                                       rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", ["sorted", "shuffled", "shared", "three", "underflow"])
def test_expect_and_entropy_sum_equal_the_sums_over_p(case):
    """The ELBO's sums over entries from scatters (no p): sum_n w_n <p_n, T[idx_n]> and
    sum_n w_n H[q_n] equal the same sums of the dense softmax."""
    rng = np.random.default_rng(11)
    R, V, K = 40, 25, 5
    ra = _ragged_rows(rng, R)
    n = len(ra)
    rb = rng.integers(0, V, n)
    if case == "shuffled":
        ra = ra[rng.permutation(n)]
    Ta, Tb, Tc = rng.normal(size=(R, K)) * 3, rng.normal(size=(V, K)) * 3, rng.normal(size=(1, K))
    if case == "underflow":
        Ta[:4] = [0, -900, -900, -900, -900]
        Tb[:4] = [-900, 0, 0, 0, 0]
        rb[ra < 4] = rng.integers(0, 4, np.count_nonzero(ra < 4))
    tables, rows = {"shared": ([Ta, Tc], [ra, None]),
                    "three": ([Ta, Tb, Tb[::-1]], [ra, rb, rb[::-1].copy()])}.get(
        case, ([Ta, Tb], [ra, rb]))
    lam = gathered_sum(tables, rows, n)
    p = softmax(lam, axis=1)
    H = logsumexp(lam, axis=1) - np.einsum("nk,nk->n", p, lam)
    q = GatheredSoftmax(tables, rows, n, memo={})
    assert q.fixed is not None if case == "underflow" else True
    w = rng.random(n)
    U = rng.normal(size=(R, K))
    for weights in (w, None):
        ww = np.ones(n) if weights is None else weights
        np.testing.assert_allclose(q.expect(U, ra, weights), np.sum(ww[:, None] * p * U[ra]),
                                   rtol=1e-12)
        np.testing.assert_allclose(q.expect(Tc, None, weights), np.sum(ww[:, None] * p * Tc),
                                   rtol=1e-12)
        np.testing.assert_allclose(q.entropy_sum(weights), np.sum(ww * H), rtol=1e-11)
    assert q.expect(U, ra.copy(), w) is None       # not one of q's row arrays
    assert q.expect(U, ra, w[:-1]) is None and q.entropy_sum(w[:, None]) is None


def test_lda_elbo_terms_and_topic_message_from_scatters_equal_the_dense_ones(monkeypatch):
    """With a factored q(z), z's ELBO term (E log p(z | theta) + H), the words' term and
    the words' message to the topics come from scatters of q; they equal the same
    quantities computed from q's dense p."""
    from blrgraph.graph.factors.categorical import CategoricalFactor
    from blrgraph.graph.factors.mixture import MixtureFactor
    m = _ragged_lda(seed=4)
    m.fit("vmp", max_iter=3, tol=0, seed=0)
    z, y, phi = m["z"], m["y"], m["phi"]
    blr.blr_step(m, z)
    q = z._factored
    assert q is not None and q._p is None
    fast = (z.elbo_term(), y.elbo_term(), y.message_to(phi)[0])
    assert q._p is None                              # p was not built
    monkeypatch.setattr(MixtureFactor, "_factored_q", lambda self: None)
    monkeypatch.setattr(CategoricalFactor, "_factored_loglik", lambda self, w: None)
    monkeypatch.setattr(GatheredSoftmax, "entropy_sum", lambda self, w=None: None)
    dense = (z.elbo_term(), y.elbo_term(), y.message_to(phi)[0])
    assert q._p is not None
    np.testing.assert_allclose(fast[0], dense[0], rtol=1e-12)
    np.testing.assert_allclose(fast[1], dense[1], rtol=1e-12)
    assert fast[2].shape == dense[2].shape == (3, 30)
    np.testing.assert_allclose(fast[2], dense[2], rtol=1e-12, atol=1e-300)


def test_a_row_view_keeps_a_factored_q_factored_and_restores_it():
    """Restricting a node whose q is factored (a row view of the local block) builds no
    dense lam of all entries: the view's q is the same softmax on its entries (lam, p,
    log Z read there equal the full ones' rows); restoring gives the full q back."""
    m = _ragged_lda(seed=6)
    m.fit("vmp", max_iter=2, tol=0, seed=0)
    z = m["z"]
    blr.blr_step(m, z)
    q = z._factored
    full_lam, full_p = q.lam(), GatheredSoftmax(q.tables, q.rows, q.n).p
    rows = np.flatnonzero(np.random.default_rng(0).random(q.n) < 0.3)
    state = z.restrict(rows, lambda a, r: None if a is None else np.asarray(a)[r])
    assert z._nat is None and z.plates == (len(rows),)
    np.testing.assert_allclose(z.nat[0], full_lam[rows], rtol=1e-15)
    np.testing.assert_allclose(z.moments()[0], full_p[rows], rtol=1e-13)
    np.testing.assert_allclose(z._factored.log_partition, q.log_partition[rows], rtol=1e-14)
    z.set_natural(z.nat)        # the view's own update
    z.restore(state)
    assert z._factored is q and z._nat is None and z.plates == (q.n,)
    np.testing.assert_allclose(z.nat[0], full_lam, rtol=1e-15)


def test_a_row_view_that_keeps_a_factored_node_writes_its_rows_back():
    """A row view with ``keep`` (SVI's final local pass) of a node whose q is factored:
    on exit the full natural parameter holds the view's rows and the others' values."""
    from blrgraph.inference.structure import Structure
    from blrgraph.inference.views import RowView
    m = _ragged_lda(seed=8)
    m.fit("vmp", max_iter=2, tol=0, seed=0)
    z, theta = m["z"], m["theta"]
    blr.blr_step(m, z)
    assert z._nat is None
    full = z._factored.lam()
    structure = Structure(m, "theta")
    docs = np.array([1, 4, 7])
    with RowView(m, structure, docs, keep=[z]) as view:
        inside = view.idx[z]
        blr.blr_step(m, z)        # the view's own update of its entries
        new_rows = z.nat[0].copy()
    assert z._factored is None
    expect = full.copy()
    expect[inside] = new_rows
    np.testing.assert_allclose(z.nat[0], expect, rtol=1e-15)
    assert z.plates == (full.shape[0],)
