"""CategoricalMarkovChain (docs/hmm.md): q over the whole chain by forward-backward.

Oracles:
* fixed (array) initial, transition and emission parameters: q of the chain is the
  exact posterior, so the ELBO is the log-likelihood of the forward algorithm and the
  marginals are forward-backward's, to 1e-10. The reference below is written here in
  log space, one sequence and one step at a time, and is itself checked against
  enumeration of every path for a tiny chain;
* Dirichlet parents: the VMP trace never decreases, and ends at least at the bound of
  the one-node-per-step mean-field model (a Mixture per step) from the same start;
* the messages to the parents equal the finite-difference gradient of the chain's
  expected log-likelihood in the parents' mean parameters (tests/test_messages.py);
* hmmlearn's VariationalGaussianHMM from the same priors and start: the same ELBO,
  sweep by sweep, to 1e-8 relative (hmmlearn leaves out -D/2 log 2 pi per step).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.special import digamma, logsumexp

import blrgraph as bg
from blrgraph.families.categorical_chain import forward_backward, viterbi
from blrgraph.inference.blr import blr_step
from blrgraph.inference.elbo import elbo
from test_messages import check_messages

TOL = 1e-10


# ---- the reference: log-space forward-backward, one sequence at a time --------------------
def ref_forward_backward(log_pi, log_A, log_e):
    """log_e (T, K) emission log-likelihoods (0 for a missing step) -> (loglik, marginals
    (T, K), expected transition counts (K, K))."""
    T, K = log_e.shape
    la = np.zeros((T, K))
    lb = np.zeros((T, K))
    la[0] = log_pi + log_e[0]
    for t in range(1, T):
        for j in range(K):
            la[t, j] = logsumexp(la[t - 1] + log_A[:, j]) + log_e[t, j]
    for t in range(T - 2, -1, -1):
        for i in range(K):
            lb[t, i] = logsumexp(log_A[i] + log_e[t + 1] + lb[t + 1])
    ll = logsumexp(la[-1])
    counts = np.zeros((K, K))
    for t in range(1, T):
        counts += np.exp(la[t - 1][:, None] + log_A + (log_e[t] + lb[t])[None, :] - ll)
    return ll, np.exp(la + lb - ll), counts


def enumerate_paths(log_pi, log_A, log_e):
    """Every path of a tiny chain: (loglik, marginals)."""
    T, K = log_e.shape
    paths = np.array(list(itertools.product(range(K), repeat=T)))
    lp = log_pi[paths[:, 0]] + log_e[np.arange(T), paths].sum(1)
    lp += sum(log_A[paths[:, t - 1], paths[:, t]] for t in range(1, T))
    ll = logsumexp(lp)
    w = np.exp(lp - ll)
    marg = np.zeros((T, K))
    for t in range(T):
        np.add.at(marg[t], paths[:, t], w)
    return ll, marg


def random_hmm(rng, K):
    pi = rng.dirichlet(np.ones(K))
    A = rng.dirichlet(np.ones(K), size=K) + 0.2 * np.eye(K)
    return pi, A / A.sum(1, keepdims=True)


def sample_states(rng, pi, A, S, T):
    z = np.empty((S, T), dtype=int)
    for s in range(S):
        z[s, 0] = rng.choice(len(pi), p=pi)
        for t in range(1, T):
            z[s, t] = rng.choice(len(pi), p=A[z[s, t - 1]])
    return z


def check_exact(model, z, pi, A, log_e, lengths):
    """ELBO == sum of the sequences' forward log-likelihoods; marginals and counts ==
    forward-backward's (each sequence cut at its length)."""
    res = model.fit("vmp", max_iter=3, seed=0)
    post = z.posterior
    total = 0.0
    for s, L in enumerate(lengths):
        ll, marg, counts = ref_forward_backward(np.log(pi), np.log(A), log_e[s, :L])
        total += ll
        np.testing.assert_allclose(post.marginals[s, :L], marg, rtol=0, atol=TOL)
        np.testing.assert_allclose(post.transition_counts[s], counts, rtol=0, atol=TOL)
        assert post.lengths[s] == L
    assert abs(res.elbo - total) <= TOL * max(1.0, abs(total))
    assert abs(res.elbo_trace[0] - total) <= TOL * max(1.0, abs(total))  # exact at once
    return res


# ---- fixed parameters: q is exact -----------------------------------------------------------
def test_reference_matches_enumeration():
    rng = np.random.default_rng(0)
    pi, A = random_hmm(rng, 3)
    log_e = rng.normal(size=(5, 3))
    ll, marg, counts = ref_forward_backward(np.log(pi), np.log(A), log_e)
    ll2, marg2 = enumerate_paths(np.log(pi), np.log(A), log_e)
    assert abs(ll - ll2) < 1e-12
    np.testing.assert_allclose(marg, marg2, atol=1e-12)
    np.testing.assert_allclose(counts.sum(), 4.0, atol=1e-12)


def test_fixed_normal_emissions_exact_tiny_chain_by_enumeration():
    rng = np.random.default_rng(1)
    K, T = 3, 6
    pi, A = random_hmm(rng, K)
    mu, tau = np.array([-2.0, 0.0, 2.5]), np.array([1.0, 3.0, 0.5])
    x = rng.normal(size=(2, T)) * 2
    z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(2,), name="z")
    y = bg.Mixture(z, bg.Normal, mu, tau, name="y").observe(x)
    res = bg.Model(y).fit("vmp", max_iter=2, seed=0)
    log_e = stats.norm.logpdf(x[..., None], mu, 1 / np.sqrt(tau))
    total = 0.0
    for s in range(2):
        ll, marg = enumerate_paths(np.log(pi), np.log(A), log_e[s])
        total += ll
        np.testing.assert_allclose(z.posterior.marginals[s], marg, atol=TOL)
    assert abs(res.elbo - total) < TOL * abs(total)


def test_fixed_normal_emissions_many_sequences_different_lengths():
    """Trailing masked steps end a sequence (no term after its end); a masked step inside
    is a missing observation of a latent step."""
    rng = np.random.default_rng(2)
    K, S, T = 3, 5, 40
    pi, A = random_hmm(rng, K)
    mu, tau = np.array([-2.0, 0.0, 2.5]), np.array([1.0, 3.0, 0.5])
    states = sample_states(rng, pi, A, S, T)
    x = rng.normal(mu[states], 1 / np.sqrt(tau[states]))
    lengths = np.array([40, 31, 1, 17, 39])
    mask = np.arange(T)[None, :] < lengths[:, None]
    mask[0, 10] = mask[3, 5] = False          # missing values inside sequences 0 and 3
    x[~mask] = np.nan
    z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(S,), name="z")
    y = bg.Mixture(z, bg.Normal, mu, tau, name="y").observe(x, mask=mask)
    log_e = np.where(mask[..., None], stats.norm.logpdf(x[..., None], mu, 1 / np.sqrt(tau)), 0.0)
    check_exact(bg.Model(y), z, pi, A, log_e, lengths)
    # beyond its end a sequence publishes probabilities (the forward prediction)
    np.testing.assert_allclose(z.posterior.marginals.sum(-1), 1.0, atol=1e-12)


def test_fixed_mvn_emissions():
    rng = np.random.default_rng(3)
    K, S, T, D = 3, 3, 25, 2
    pi, A = random_hmm(rng, K)
    mu = rng.normal(size=(K, D)) * 2
    L = np.stack([np.eye(D) * (k + 1.0) for k in range(K)])
    states = sample_states(rng, pi, A, S, T)
    x = mu[states] + rng.normal(size=(S, T, D))
    z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(S,), name="z")
    y = bg.Mixture(z, bg.MultivariateNormal, mu, L, name="y").observe(x)
    log_e = np.stack([stats.multivariate_normal.logpdf(x, mu[k], np.linalg.inv(L[k]))
                      for k in range(K)], axis=-1)
    check_exact(bg.Model(y), z, pi, A, log_e, [T] * S)


def test_fixed_categorical_and_poisson_emissions_two_children():
    """Two Mixture children share the chain; their messages add."""
    rng = np.random.default_rng(4)
    K, S, T, V = 2, 4, 30, 5
    pi, A = random_hmm(rng, K)
    phi = rng.dirichlet(np.ones(V), size=K)
    rate = np.array([1.0, 6.0])
    states = sample_states(rng, pi, A, S, T)
    words = np.array([[rng.choice(V, p=phi[k]) for k in row] for row in states])
    counts = rng.poisson(rate[states])
    z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(S,), name="z")
    w = bg.Mixture(z, bg.Categorical, phi, name="w").observe(words)
    c = bg.Mixture(z, bg.Poisson, rate, name="c").observe(counts)
    log_e = np.log(phi.T[words]) + stats.poisson.logpmf(counts[..., None], rate)
    check_exact(bg.Model(w, c), z, pi, A, log_e, [T] * S)


def test_columns_share_one_state_per_step():
    """columns=True: plates (S, T, 1), data (S, T, D), parameters (D, K)."""
    rng = np.random.default_rng(5)
    K, S, T, D = 3, 2, 20, 3
    pi, A = random_hmm(rng, K)
    mu = rng.normal(size=(D, K)) * 2
    tau = rng.uniform(0.5, 2.0, size=(D, K))
    states = sample_states(rng, pi, A, S, T)
    x = rng.normal(mu.T[states], 1.0)
    mask = rng.random((S, T, D)) > 0.2
    mask[1, 15:] = False                      # sequence 1 ends after 15 steps
    z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(S,), columns=True, name="z")
    assert z.plates == (S, T, 1)
    y = bg.Mixture(z, bg.Normal, mu, tau, name="y").observe(np.where(mask, x, 0.0), mask=mask)
    cell = stats.norm.logpdf(x[..., None], mu, 1 / np.sqrt(tau))        # (S, T, D, K)
    log_e = np.where(mask[..., None], cell, 0.0).sum(2)
    lengths = [T, 15]
    check_exact(bg.Model(y), z, pi, A, log_e, lengths)


def test_per_sequence_parameters():
    """initial plated (S,) and transition (S, K): every sequence has its own chain."""
    rng = np.random.default_rng(6)
    K, S, T = 2, 3, 15
    pis = rng.dirichlet(np.ones(K), size=S)
    As = np.stack([random_hmm(rng, K)[1] for _ in range(S)])
    mu, tau = np.array([-1.0, 1.0]), np.array([2.0, 2.0])
    x = rng.normal(size=(S, T))
    z = bg.CategoricalMarkovChain(pis, As, length=T, name="z")
    assert z.plates == (S, T)
    y = bg.Mixture(z, bg.Normal, mu, tau, name="y").observe(x)
    res = bg.Model(y).fit("vmp", max_iter=2, seed=0)
    log_e = stats.norm.logpdf(x[..., None], mu, 1 / np.sqrt(tau))
    total = sum(ref_forward_backward(np.log(pis[s]), np.log(As[s]), log_e[s])[0] for s in range(S))
    assert abs(res.elbo - total) < TOL * abs(total)


@settings(max_examples=40, deadline=None)
@given(S=st.integers(1, 4), T=st.integers(1, 30), K=st.integers(1, 4), shared=st.booleans(),
       scale=st.sampled_from([0.1, 3.0, 30.0]), seed=st.integers(0, 10 ** 6))
def test_forward_backward_matches_the_reference_for_random_shapes(S, T, K, shared, scale, seed):
    """Random sizes, unary scales, per-sequence or shared transitions (sub-normalised, as
    exp E[log A] is) and lengths 0..T: log Z, marginals and counts of every sequence."""
    rng = np.random.default_rng(seed)
    U = scale * rng.normal(size=(S, T, K))
    P = np.log(rng.dirichlet(np.ones(K), size=(K,) if shared else (S, K))) - rng.random()
    L = rng.integers(0, T + 1, size=S)
    st_ = forward_backward(U, P, L)
    for s in range(S):
        if L[s] == 0:
            assert st_.log_z[s] == 0.0 and np.all(st_.counts[s] == 0.0)
            continue
        Ps = P if shared else P[s]
        ll, marg, counts = ref_forward_backward(U[s, 0] * 0, Ps, U[s, :L[s]])
        assert abs(st_.log_z[s] - ll) <= 1e-10 * max(1.0, abs(ll))
        np.testing.assert_allclose(st_.marginals[s, :L[s]], marg, atol=1e-10)
        np.testing.assert_allclose(st_.counts[s], counts, atol=1e-10)
    np.testing.assert_allclose(st_.marginals.sum(-1), 1.0, atol=1e-12)


@pytest.mark.parametrize("chunk,bchunk", [(1, 1), (3, 5), (8, 2), (32, 64)])
@pytest.mark.parametrize("shared,short", [(True, False), (True, True), (False, False),
                                          (False, True)])
def test_forward_backward_chunks_and_work_arrays(monkeypatch, chunk, bchunk, shared, short):
    """The exp of the emissions (CHUNK steps at a time), the marginals and the counts'
    operands (BCHUNK steps at a time) across chunk boundaries, every renormalisation
    step included (T = 70 > RENORM): log Z, marginals and counts equal the log-space
    reference of each sequence; a second call with the same ``work`` dict gives the
    same numbers, and the results share no memory with the kept work arrays."""
    import blrgraph.families.categorical_chain as chain_math
    monkeypatch.setattr(chain_math, "CHUNK", chunk)
    monkeypatch.setattr(chain_math, "BCHUNK", bchunk)
    rng = np.random.default_rng(chunk * 100 + bchunk)
    S, T, K = 4, 70, 3
    U = 5.0 * rng.normal(size=(S, T, K))
    P = np.log(rng.dirichlet(np.ones(K), size=(K,) if shared else (S, K))) - 0.3
    L = np.array([T, 1, 33, 64]) if short else None
    work = {}
    first = chain_math.forward_backward(U, P, L, work=work)
    assert work                                # the work arrays are kept ...
    again = chain_math.forward_backward(U, P, L, work=work)
    for a in work.values():                    # ... and no result lives in them
        for r in (again.marginals, again.counts, again.log_z):
            assert not np.shares_memory(a, r)
    for name in ("marginals", "counts", "log_z"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    for s in range(S):
        n = T if L is None else L[s]
        ll, marg, counts = ref_forward_backward(U[s, 0] * 0, P if shared else P[s], U[s, :n])
        assert abs(first.log_z[s] - ll) <= 1e-10 * abs(ll)
        np.testing.assert_allclose(first.marginals[s, :n], marg, atol=1e-10)
        np.testing.assert_allclose(first.counts[s], counts, atol=1e-10)
    np.testing.assert_allclose(first.marginals.sum(-1), 1.0, atol=1e-12)


def test_work_arrays_are_kept_during_a_fit_and_dropped_after():
    """The chain node reuses forward-backward's work arrays from sweep to sweep and
    releases them when the fit ends; q is unchanged by the release."""
    rng = np.random.default_rng(3)
    S, T, K = 3, 40, 2
    x = rng.normal(size=(S, T)) + 3.0 * (rng.random((S, T)) < 0.5)
    pi = bg.Dirichlet(np.ones(K), name="pi")
    A = bg.Dirichlet(np.ones(K), plates=(K,), name="A")
    z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(S,), name="z")
    mu = bg.Normal(0.0, 0.01, plates=(K,), name="mu")
    y = bg.Mixture(z, bg.Normal, mu, 1.0, name="y").observe(x)
    model = bg.Model(y)
    model.fit("vmp", max_iter=3, seed=0)
    assert z._work == {}
    blr_step(model, z)
    z.moments()
    assert set(z._work) == {"B", "alpha"} and z._work["B"].shape == (T, K, S)
    kept = z._work["B"]
    blr_step(model, z)
    reused = z.moments()[0]
    assert z._work["B"] is kept                  # reused, not reallocated
    z.release()
    assert z._work == {}
    z.set_natural(z.nat)                         # the same q, from fresh arrays
    np.testing.assert_array_equal(z.moments()[0], reused)
    import pickle
    assert z._work                               # refilled outside a fit ...
    copy = pickle.loads(pickle.dumps(z))
    assert copy._work == {}                      # ... but never pickled (nor shipped to Dask)
    np.testing.assert_array_equal(copy.moments()[0], reused)


def test_long_chains_with_sharp_emissions_and_rare_transitions(monkeypatch):
    """2000 steps whose emissions differ by up to ~100 nats and whose transitions are
    down to e^-43: the partly renormalised forward pass stays exact (without the
    log-space fallback)."""
    import blrgraph.families.categorical_chain as chain_math

    def no_fallback(*args):
        raise AssertionError("the scaled recursion fell back to log space")

    monkeypatch.setattr(chain_math, "_forward_backward_log", no_fallback)
    rng = np.random.default_rng(16)
    S, T, K = 3, 2000, 3
    U = 30.0 * rng.normal(size=(S, T, K))
    P = np.log(rng.dirichlet(0.05 * np.ones(K), size=K) + 1e-26)
    L = np.array([T, 1234, 7])
    st_ = forward_backward(U, P, L)
    for s in range(S):
        ll, marg, counts = ref_forward_backward(U[s, 0] * 0, P, U[s, :L[s]])
        assert abs(st_.log_z[s] - ll) <= 1e-10 * abs(ll)
        np.testing.assert_allclose(st_.marginals[s, :L[s]], marg, atol=1e-9)
        np.testing.assert_allclose(st_.counts[s], counts, atol=1e-8)


def test_scaled_recursion_underflow_falls_back_to_log_space(monkeypatch):
    """A forward vector of exact zeros (exp(-800) transitions against data insisting on
    them) is redone in log space."""
    log_A = np.array([[0.0, -800.0], [-800.0, 0.0]])
    U = np.array([[[0.0, -1000.0], [-1000.0, 0.0], [-1000.0, 0.0]],
                  [[0.0, -1.0], [-1.0, 0.0], [0.0, 0.0]]])
    import blrgraph.families.categorical_chain as chain_math
    calls = []
    fallback = chain_math._forward_backward_log
    monkeypatch.setattr(chain_math, "_forward_backward_log",
                        lambda *a: calls.append(a[0].shape[0]) or fallback(*a))
    st = forward_backward(U, log_A)
    assert calls == [1]                       # only the first sequence needed it
    for s in range(2):
        ll, marg, counts = ref_forward_backward(U[s, 0] * 0, log_A, U[s])
        assert abs(st.log_z[s] - ll) < 1e-9 * abs(ll)
        np.testing.assert_allclose(st.marginals[s], marg, atol=1e-12)
        np.testing.assert_allclose(st.counts[s], counts, atol=1e-12)


# ---- the blocked scan over time (few long sequences) ---------------------------------------

def _same_as_recursions(U, P, L, scan_st):
    """The scan's results equal the recursions' (forward_backward(scan=False)) to 1e-12."""
    ref = forward_backward(U, P, L, scan=False)
    np.testing.assert_allclose(scan_st.log_z, ref.log_z, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(scan_st.marginals, ref.marginals, rtol=0, atol=1e-12)
    scale = max(1.0, float(np.max(ref.counts)))
    np.testing.assert_allclose(scan_st.counts, ref.counts, rtol=1e-12, atol=1e-12 * scale)
    np.testing.assert_array_equal(scan_st.lengths, ref.lengths)
    np.testing.assert_array_equal(scan_st.valid, ref.valid)


@pytest.mark.parametrize("S,T,K,shared,short,block", [
    (1, 3001, 3, True, False, None),      # one long sequence, the default block
    (1, 3001, 3, False, False, 7),        # its own transition matrix
    (40, 37, 4, True, True, 5),           # many short sequences, lengths 0..T
    (30, 41, 3, False, True, 4),          # T - 1 = 10 blocks of 4 exactly
    (2, 41, 3, True, False, 4),           # the same at full length: no padding
    (6, 42, 2, True, True, 4),            # one transition more than 10 blocks
    (6, 40, 2, True, False, 4),           # one less
    (5, 50, 5, True, True, 1),            # blocks of one step
    (5, 50, 3, False, True, 64),          # one block, longer than the chain
    (3, 9, 3, True, True, 2)])            # lengths on every block boundary (below)
def test_scan_equals_the_recursions(monkeypatch, S, T, K, shared, short, block):
    """forward_backward's blocked scan (a product of B steps per block, all blocks at
    once, a doubling scan over the blocks' products, then every step at once) gives the
    log Z, marginals and expected counts of the scaled recursions to 1e-12, on random
    potentials with emissions spread over tens of nats: one long sequence, many short
    ones, sequence ends (masks) anywhere, on and next to block boundaries, blocks of one
    step and a block longer than the chain, shared and per-sequence transitions."""
    import blrgraph.families.categorical_chain as chain_math
    if block:
        monkeypatch.setattr(chain_math, "SCAN_BLOCK", block)
    rng = np.random.default_rng(S * 1000 + T + K)
    U = 6.0 * rng.normal(size=(S, T, K))
    P = np.log(rng.dirichlet(np.ones(K), size=(K,) if shared else (S, K)))
    L = None
    if short:
        L = rng.integers(0, T + 1, size=S)
        L[:3] = [0, 1, T]
        if T == 9:
            L = np.array([2, 3, 5])       # block 2 of the 8 transitions: ends at 1, 3, 5
    st_ = chain_math._forward_backward_scan(*chain_math._check(U, P, L))
    assert st_ is not None                # the scan itself, not its fallback
    _same_as_recursions(U, P, L, st_)
    np.testing.assert_allclose(st_.marginals.sum(-1), 1.0, atol=1e-13)


def test_scan_falls_back_to_the_recursions_where_its_sums_underflow(monkeypatch):
    """A block whose product has only columns of exact zeros where the boundary vector
    lives (transitions of probability 0 against data insisting on them): the scan gives
    up (None) and forward_backward(scan=True) returns the recursions' results."""
    import blrgraph.families.categorical_chain as chain_math
    T = 200
    with np.errstate(divide="ignore"):
        P = np.log(np.array([[1.0, 0.0], [0.0, 1.0]]))  # never leave the first state
    U = np.zeros((1, T, 2))
    U[0, 0] = [0.0, -np.inf]
    U[0, 1:, 0] = -900.0                                  # the data say: the other state
    with np.errstate(divide="ignore"):
        assert chain_math._forward_backward_scan(*chain_math._check(U, P, None)) is None
        st_ = forward_backward(U, P, scan=True)
        ref = forward_backward(U, P, scan=False)
    for name in ("marginals", "counts", "log_z"):
        np.testing.assert_array_equal(getattr(st_, name), getattr(ref, name))
    np.testing.assert_allclose(st_.log_z, -900.0 * (T - 1), rtol=1e-12)


def test_the_scan_is_taken_for_few_long_sequences(monkeypatch):
    """use_scan: one sequence of 300 steps takes the scan, 100 sequences of 300 steps
    (or a chain shorter than four blocks, or one whose products would take more than
    WORK_BYTES) the recursions; a VMP fit of one long sequence
    gives the same ELBO trace (to 1e-12) with and without the scan."""
    import blrgraph.families.categorical_chain as chain_math
    assert chain_math.use_scan(1, 300, 3)
    assert not chain_math.use_scan(100, 300, 3)
    assert not chain_math.use_scan(1, 4 * chain_math.SCAN_BLOCK - 1, 3)
    assert not chain_math.use_scan(1, 10 ** 6, 3)     # 288 MB of products: the recursions
    x = two_state_data(T=300, seed=5)[None]

    def fit():
        pi, A, mu, tau = priors(2)
        z = bg.CategoricalMarkovChain(pi, A, length=300, plates=(1,), name="z")
        y = bg.Mixture(z, bg.Normal, mu, tau, name="y").observe(x)
        return bg.Model(y).fit("vmp", max_iter=15, tol=0, seed=1).elbo_trace

    calls = []
    scan = chain_math._forward_backward_scan
    monkeypatch.setattr(chain_math, "_forward_backward_scan",
                        lambda *a, **k: calls.append(1) or scan(*a, **k))
    with_scan = fit()
    assert calls
    monkeypatch.setattr(chain_math, "SCAN_WORK", 0)
    n = len(calls)
    without = fit()
    assert len(calls) == n
    np.testing.assert_allclose(with_scan, without, rtol=1e-12)


def test_viterbi_is_the_most_probable_path():
    rng = np.random.default_rng(7)
    K, T = 3, 6
    pi, A = random_hmm(rng, K)
    U = rng.normal(size=(2, T, K)) * 2
    U[:, 0] += np.log(pi)
    path = viterbi(U, np.log(A), lengths=np.array([T, 4]))
    for s, L in enumerate([T, 4]):
        paths = np.array(list(itertools.product(range(K), repeat=L)))
        lp = U[s, np.arange(L), paths].sum(1) + sum(np.log(A)[paths[:, t - 1], paths[:, t]]
                                                     for t in range(1, L))
        np.testing.assert_array_equal(path[s, :L], paths[np.argmax(lp)])
        assert np.all(path[s, L:] == -1)


# ---- Dirichlet parents ------------------------------------------------------------------------
def two_state_data(T=30, seed=8):
    rng = np.random.default_rng(seed)
    A = np.array([[0.9, 0.1], [0.15, 0.85]])
    states = sample_states(rng, np.array([0.5, 0.5]), A, 1, T)[0]
    return rng.normal(np.array([-1.0, 1.0])[states], 1.0)


def priors(K, conc=1.0):
    pi = bg.Dirichlet(conc * np.ones(K), name="pi")
    A = bg.Dirichlet(conc * np.ones((K, K)), plates=(K,), name="A")
    mu = bg.Normal(0.0, 0.1, plates=(K,), name="mu")
    tau = bg.Gamma(1.0, 1.0, plates=(K,), name="tau")
    return pi, A, mu, tau


def start_parameters(model):
    """The same start for both models: parameters at a fixed q, set before the first sweep."""
    model["mu"].set_natural(model["mu"].family.natural_from_params(np.array([-0.5, 0.5]),
                                                                   np.array([10.0, 10.0])))
    model["tau"].set_natural(model["tau"].family.natural_from_params(np.array([5.0, 5.0]),
                                                                     np.array([5.0, 5.0])))
    model["A"].set_natural(model["A"].family.natural_from_params(np.array([[5.0, 2.0], [2.0, 5.0]])))
    model["pi"].set_natural(model["pi"].family.natural_from_params(np.array([1.0, 1.0])))
    for node in model.latent:     # hidden states: uniform (a chain is updated whole first)
        if node.name.startswith("z"):
            node.set_natural((np.zeros(node.plates + (2,)),))


def sweeps(model, states, params, n, every=True):
    """States first (given the parameters), then the parameters; ELBO after each sweep
    (``every=False``: after the first and the last two)."""
    trace = []
    for i in range(n):
        for node in states + params:
            blr_step(model, node)
        if every or i == 0 or i >= n - 2:
            trace.append(elbo(model))
    return np.array(trace)


def test_vmp_monotone_and_above_one_node_per_step_mean_field():
    x = two_state_data()
    T, K = len(x), 2
    pi, A, mu, tau = priors(K)
    z = bg.CategoricalMarkovChain(pi, A, length=T, name="z")
    y = bg.Mixture(z, bg.Normal, mu, tau, name="y").observe(x)
    chain = bg.Model(y)
    chain.fit("vmp", max_iter=1, seed=0)         # initialised; then the common start
    start_parameters(chain)
    tr_chain = sweeps(chain, [z], [pi, A, mu, tau], 100)

    pi2, A2, mu2, tau2 = priors(K)
    zs = [bg.Categorical(pi2, name="z0")]
    for t in range(1, T):
        zs.append(bg.Mixture(zs[-1], bg.Categorical, A2, name=f"z{t}"))
    ys = [bg.Mixture(zs[t], bg.Normal, mu2, tau2, name=f"y{t}").observe(x[t]) for t in range(T)]
    mf = bg.Model(*ys)
    mf.fit("vmp", max_iter=1, seed=0)
    start_parameters(mf)
    tr_mf = sweeps(mf, zs, [pi2, A2, mu2, tau2], 100, every=False)

    assert np.all(np.diff(tr_chain) >= -1e-9 * abs(tr_chain[-1]))
    assert abs(tr_chain[-1] - tr_chain[-2]) < 1e-8 * abs(tr_chain[-1])    # converged
    assert abs(tr_mf[-1] - tr_mf[-2]) < 1e-6 * abs(tr_mf[-1])
    assert tr_chain[-1] > tr_mf[-1] + 0.1        # the structured bound is higher
    assert tr_chain[0] >= tr_mf[0]               # and so is the first step from the same start


def test_fit_vmp_and_em_on_a_chain():
    x = two_state_data(T=120, seed=9)
    pi, A, mu, tau = priors(2, conc=2.0)     # EM's MAP of pi stays inside the simplex
    z = bg.CategoricalMarkovChain(pi, A, length=len(x), name="z")
    y = bg.Mixture(z, bg.Normal, mu, tau, name="y").observe(x)
    model = bg.Model(y)
    res = model.fit("vmp", seed=0)
    assert res.converged
    assert np.all(np.diff(res.elbo_trace) >= -1e-9 * abs(res.elbo))
    assert np.all(np.isfinite(model["A"].posterior.mean))
    em = model.fit("em", seed=0)              # Baum-Welch with MAP parameters
    assert em.objective == "em_bound" and np.all(np.diff(em.elbo_trace) >= -1e-9 * abs(em.elbo))
    assert sorted(n.name for n in model.latent if n.point) == ["A", "mu", "pi", "tau"]


def test_svi_over_minibatches_of_sequences_reaches_the_vmp_optimum():
    """fit("svi") slices the chain's sequences (its first plate axis) into minibatches."""
    rng = np.random.default_rng(15)
    S, T = 60, 50
    states = sample_states(rng, np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.1, 0.9]]), S, T)
    x = rng.normal(np.array([-1.5, 1.5])[states], 1.0)

    def build():
        pi, A, mu, _ = priors(2)
        z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(S,), name="z")
        return bg.Model(bg.Mixture(z, bg.Normal, mu, 1.0, name="y").observe(x))

    vmp = build()
    ref = vmp.fit("vmp", seed=0).elbo
    svi = build()
    svi.fit("svi", seed=0, batch_size=20, epochs=30)
    assert abs(bg.elbo(svi) - ref) < 1e-5 * abs(ref)
    def ordered_A(model):    # states ordered by their mean (labels are arbitrary)
        p = np.argsort(model["mu"].posterior.mean)
        return model["A"].posterior.mean[np.ix_(p, p)]

    np.testing.assert_allclose(ordered_A(svi), ordered_A(vmp), atol=1e-3)


# ---- messages -------------------------------------------------------------------------------
def test_messages_to_dirichlet_parents_are_gradients():
    rng = np.random.default_rng(10)
    K, S, T = 3, 4, 12
    pi = bg.Dirichlet(np.ones(K), name="pi")
    A = bg.Dirichlet(np.ones((K, K)) + np.eye(K), plates=(K,), name="A")
    mu = bg.Normal(0.0, 0.1, plates=(K,), name="mu")
    z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(S,), name="z")
    x = rng.normal(size=(S, T)) * 2
    mask = np.arange(T)[None, :] < np.array([12, 7, 3, 10])[:, None]
    y = bg.Mixture(z, bg.Normal, mu, 1.0, name="y").observe(x, mask=mask)
    bg.Model(y).fit("vmp", seed=0, max_iter=20)
    assert check_messages(z) == 2
    assert check_messages(y) == 2                # to the chain and to mu


def test_messages_to_per_sequence_parents_are_gradients():
    rng = np.random.default_rng(11)
    K, S, T = 2, 3, 8
    pi = bg.Dirichlet(np.ones(K), plates=(S,), name="pi")
    A = bg.Dirichlet(np.ones((K, K)), plates=(S, K), name="A")
    z = bg.CategoricalMarkovChain(pi, A, length=T, name="z")
    y = bg.Mixture(z, bg.Normal, np.array([-1.0, 1.0]), 1.0, name="y").observe(rng.normal(size=(S, T)))
    bg.Model(y).fit("vmp", seed=0, max_iter=20)
    assert check_messages(z) == 2


# ---- hmmlearn -----------------------------------------------------------------------------------
def test_same_elbo_as_hmmlearn_variational_gaussian_hmm():
    hmmlearn = pytest.importorskip("hmmlearn.vhmm")
    rng = np.random.default_rng(12)
    S, T, K, D = 4, 50, 3, 2
    means = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    A = np.full((K, K), 0.1) + 0.7 * np.eye(K)
    A /= A.sum(1, keepdims=True)
    states = sample_states(rng, np.ones(K) / K, A, S, T)
    X = means[states] + 0.7 * rng.normal(size=(S, T, D))
    # priors (hmmlearn's scale is the inverse of the Wishart scale: E[L] = dof inv(scale))
    sp, tp = np.full(K, 1.0), np.full((K, K), 1.0)
    m0, b0, nu0 = np.tile(X.reshape(-1, D).mean(0), (K, 1)), np.ones(K), np.full(K, D + 1.0)
    S0 = np.tile(np.eye(D), (K, 1, 1))
    # the start: a q for every parameter
    sP, tP = rng.uniform(1, 3, K) * S, rng.uniform(1, 3, (K, K)) * T
    mP, bP, nuP = means + 0.3 * rng.normal(size=(K, D)), np.full(K, 50.0), np.full(K, 50.0)
    SP = np.tile(30.0 * np.eye(D), (K, 1, 1))

    h = hmmlearn.VariationalGaussianHMM(K, covariance_type="full", n_iter=15, tol=-np.inf,
                                        init_params="", implementation="scaling")
    h.n_features = D
    h.startprob_prior_, h.transmat_prior_ = sp, tp
    h.means_prior_, h.beta_prior_, h.dof_prior_, h.scale_prior_ = m0, b0, nu0, S0
    h.startprob_posterior_, h.transmat_posterior_ = sP.copy(), tP.copy()
    h.means_posterior_, h.beta_posterior_ = mP.copy(), bP.copy()
    h.dof_posterior_, h.scale_posterior_ = nuP.copy(), SP.copy()
    h.fit(X.reshape(-1, D), lengths=[T] * S)
    ref = np.array(h.monitor_.history) - S * T * D / 2 * np.log(2 * np.pi)

    pi = bg.Dirichlet(sp, name="pi")
    At = bg.Dirichlet(tp, plates=(K,), name="A")
    theta = bg.NormalWishart(m0, b0, nu0, np.linalg.inv(S0), plates=(K,), name="theta")
    z = bg.CategoricalMarkovChain(pi, At, length=T, plates=(S,), name="z")
    y = bg.Mixture(z, bg.MultivariateNormal, theta, name="y").observe(X)
    model = bg.Model(y)
    model.fit("vmp", max_iter=1)
    pi.set_natural(pi.family.natural_from_params(sP))
    At.set_natural(At.family.natural_from_params(tP))
    theta.set_natural(theta.family.natural_from_params(mP, bP, nuP, np.linalg.inv(SP)))
    blr_step(model, z)                # hmmlearn's bound: the E-step's q(z), then the M-step
    trace = [elbo(model)] + list(sweeps(model, [], [pi, At, theta, z], len(ref) - 1))
    np.testing.assert_allclose(trace, ref, rtol=1e-8, atol=0)
    assert trace[-1] > trace[0]
    # hmmlearn ends with an M-step: the transition posterior from the last E-step's counts
    blr_step(model, At)
    E_logA = digamma(h.transmat_posterior_) - digamma(h.transmat_posterior_.sum(1, keepdims=True))
    np.testing.assert_allclose(At.moments()[0], E_logA, rtol=1e-10)


# ---- errors ---------------------------------------------------------------------------------------
def test_bad_input_is_refused_naming_the_node():
    pi, A = np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.2, 0.8]])
    with pytest.raises(ValueError, match="length must be an integer >= 1"):
        bg.CategoricalMarkovChain(pi, A, length=0, name="z")
    with pytest.raises(ValueError, match="'z'.*one row per state"):
        bg.CategoricalMarkovChain(np.ones(3) / 3, A, length=5, name="z")
    with pytest.raises(ValueError, match="'z'.*transition.*probability vector"):
        bg.CategoricalMarkovChain(pi, np.array([[0.9, 0.2], [0.2, 0.8]]), length=5, name="z")
    with pytest.raises(TypeError, match="'z'.*Dirichlet"):
        bg.CategoricalMarkovChain(pi, bg.Gamma(1.0, 1.0, plates=(2,)), length=5, name="z")
    z = bg.CategoricalMarkovChain(pi, A, length=5, name="z")
    with pytest.raises(TypeError, match="latent"):
        z.observe(np.zeros(5, int))
    with pytest.raises(AttributeError, match="no posterior yet"):
        z.posterior
    y = bg.Mixture(z, bg.Normal, np.array([0.0, 1.0]), 1.0, name="y").observe(
        np.zeros(5), weights=np.ones(5))
    with pytest.raises(ValueError, match="weights="):
        bg.Model(y).fit("vmp")


# ---- the zoo model and the command line --------------------------------------------------------
def hmm_table(seed=13):
    """Six sequences of different lengths (50..119 steps) of a 3-state sticky HMM with 2-D
    Gaussian emissions, interleaved by an id column, 3% missing cells."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(seed)
    A = np.full((3, 3), 0.05) + 0.85 * np.eye(3)
    mu = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    seqs = []
    for s in range(6):
        states = sample_states(rng, np.ones(3) / 3, A, 1, int(rng.integers(50, 120)))[0]
        seqs.append([{"id": f"s{s}", "a": x[0], "b": x[1], "true": k}
                     for k, x in zip(states, mu[states] + rng.normal(size=(len(states), 2)))])
    order = rng.permutation(np.repeat(np.arange(6), [len(q) for q in seqs]))
    nxt = [iter(q) for q in seqs]        # interleaved rows; each sequence keeps its order
    df = pd.DataFrame([next(nxt[s]) for s in order])
    df.loc[rng.random(len(df)) < 0.03, "a"] = np.nan
    return df, A, mu


@pytest.mark.parametrize("covariance", ["diag", "full"])
def test_zoo_hmm_recovers_states_transitions_and_means(covariance):
    from test_zoo import load, match
    hmm = load("hmm")
    df, A, mu = hmm_table()
    with pytest.warns(UserWarning, match="missing cells") if covariance == "full" else \
            np.errstate():
        model = hmm.build(df.drop(columns="true"), k=3, sequence_column="id", covariance=covariance)
    assert model["z"].plates == ((6, 119, 1) if covariance == "diag" else (6, 119))
    fit = model.fit(hmm.DEFAULT_METHOD, seed=0, **model.meta["fit_options"])
    assert fit.converged and np.all(np.diff(fit.elbo_trace) >= -1e-9 * abs(fit.elbo))
    mean, sd = hmm.emissions(fit)
    p = match(mean, mu)
    np.testing.assert_allclose(mean[p], mu, atol=0.3)
    np.testing.assert_allclose(hmm.transitions(fit)[np.ix_(p, p)], A, atol=0.08)
    st = hmm.states(fit)
    assert len(st) == len(df) and list(st.columns[:3]) == ["sequence", "step", "state"]
    truth_in_est = p[df["true"].to_numpy()]
    assert np.mean(st["state"].to_numpy() == truth_in_est) > 0.98
    np.testing.assert_allclose(st[["p0", "p1", "p2"]].sum(axis=1), 1.0, atol=1e-12)
    lengths = df.groupby("id", sort=False).size().to_numpy()
    np.testing.assert_array_equal(model["z"].posterior.lengths, lengths)
    summary = hmm.summarize(fit)
    assert len(summary) == 3 * 2 and abs(summary.n.sum() / 2 - len(df)) < 1e-8


def test_zoo_hmm_refuses_unknown_and_incomplete_sequence_column():
    from test_zoo import load
    hmm = load("hmm")
    df, _, _ = hmm_table()
    with pytest.raises(ValueError, match="'run'.*not a column"):
        hmm.build(df, k=2, sequence_column="run")
    bad = df.copy()
    bad.loc[bad.index[4], "id"] = None
    with pytest.raises(ValueError, match="sequence column 'id' is missing in row 4"):
        hmm.build(bad, k=2, sequence_column="id")


def test_cli_fit_hmm_with_a_sequence_column(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    from test_cli import run
    df, _, _ = hmm_table()
    path = tmp_path / "seqs.csv"
    df.drop(columns="true").to_csv(path, index=False)
    code, out, err = run("fit", "hmm", path, "--k", "3", "--sequence-column", "id",
                         "--out", tmp_path / "out")
    assert code == 0, err
    assert "ELBO:" in out and "converged" in out
    states = pd.read_csv(tmp_path / "out" / "states.csv")
    assert len(states) == len(df) and set(states.state) == {0, 1, 2}
    trans = pd.read_csv(tmp_path / "out" / "transitions.csv", index_col=0)
    np.testing.assert_allclose(trans.sum(axis=1), 1.0, atol=1e-12)
    code, _, err = run("fit", "gmm", path, "--k", "3", "--sequence-column", "id")
    assert code == 1 and "no option 'sequence_column' (--sequence-column)" in err


def test_chain_is_never_a_point_mass_and_survives_a_checkpoint(tmp_path):
    def build():
        x = np.random.default_rng(14).normal(size=(3, 40))
        pi = bg.Dirichlet(np.ones(2), name="pi")
        A = bg.Dirichlet(np.ones((2, 2)), plates=(2,), name="A")
        z = bg.CategoricalMarkovChain(pi, A, length=40, plates=(3,), name="z")
        y = bg.Mixture(z, bg.Normal, bg.Normal(0.0, 0.1, plates=(2,), name="mu"), 1.0,
                       name="y").observe(x)
        return bg.Model(y)

    with pytest.raises(ValueError, match="'z' cannot be a point mass"):
        build().fit("vmp", point=["z"], seed=0)
    model = build()
    res = model.fit("vmp", seed=0)
    model.save(tmp_path / "hmm.npz")
    again = build()
    again.load(tmp_path / "hmm.npz")
    # (the fit's ELBO is the compiled sweep's assembly, inference/compiled.py: elbo()'s sum
    # of the same terms to rounding)
    assert bg.elbo(again) == pytest.approx(res.elbo, rel=1e-12, abs=0)
    np.testing.assert_array_equal(again["z"].posterior.marginals, model["z"].posterior.marginals)
