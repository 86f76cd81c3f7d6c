"""posterior.sample of the chain nodes: exact draws of whole sequences from q.

Oracles:
* CategoricalMarkovChain with fixed (array) parameters: q is the exact posterior, so
  the frequencies of every path of a tiny chain (K = 2, T = 4: all K^T paths
  enumerated) in 1e5 draws match the exact path probabilities within 4 standard
  errors, the per-step frequencies match ``posterior.marginals``, and the steps after
  a sequence's end hold -1. ``sample_paths`` with per-sequence transition potentials
  against enumeration of exp(U + P);
* GaussianMarkovChain: the sample mean and covariance of the pairs (x_t, x_{t+1}) of
  1e5 draws match the smoothed means, covariances and lag-one covariances within 4
  standard errors; with data and prior mean moved by 1e8 (a random walk, A = I, is
  translation equivariant) the draws from the same seed are the draws at 0 plus 1e8.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

import blrgraph as bg
from blrgraph.families.categorical_chain import sample_paths

N_DRAWS = 100_000


def path_logprobs(U, P):
    """log q of every path of one chain with unary U (T, K) and pairwise P (K, K)."""
    T, K = U.shape
    paths = np.array(list(itertools.product(range(K), repeat=T)))
    lp = U[np.arange(T), paths].sum(1)
    lp += sum(P[paths[:, t - 1], paths[:, t]] for t in range(1, T))
    return paths, lp - logsumexp(lp)


def check_path_frequencies(draws, U, P):
    """draws (n, T) of one chain against the enumerated path probabilities (4 s.e.)."""
    n, T = draws.shape
    K = U.shape[1]
    paths, lp = path_logprobs(U, P)
    p = np.exp(lp)
    assert p.min() > 1e-4          # every cell is well populated (the 4 s.e. test is fair)
    code = (draws * K ** np.arange(T - 1, -1, -1)).sum(1)   # the product's order
    freq = np.bincount(code, minlength=K ** T) / n
    se = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(freq - p) <= 4 * se), np.max(np.abs(freq - p) / se)
    return p


# ---- CategoricalMarkovChain -----------------------------------------------------------------
def tiny_hmm():
    K, T, S = 2, 4, 3
    pi = np.array([0.6, 0.4])
    A = np.array([[0.7, 0.3], [0.2, 0.8]])
    mu, tau = np.array([-1.0, 1.0]), np.array([1.0, 2.0])
    x = np.array([[-0.5, 0.3, 0.8, -0.2], [0.4, 0.0, -0.7, 9.0], [1.2, 9.0, -0.3, 0.1]])
    mask = np.ones((S, T), bool)
    mask[1, 3] = False      # a masked trailing step: sequence 1 has length 3
    mask[2, 1] = False      # a masked step inside: a latent step without an observation
    z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(S,), name="z")
    y = bg.Mixture(z, bg.Normal, mu, tau, name="y").observe(x, mask=mask)
    bg.Model(y).fit("vmp", max_iter=3, seed=0)
    log_e = np.where(mask[..., None], stats.norm.logpdf(x[..., None], mu, 1 / np.sqrt(tau)), 0.0)
    U = log_e.copy()
    U[:, 0] += np.log(pi)
    return z, U, np.log(A), [4, 3, 4]


def test_categorical_chain_paths_match_enumeration():
    z, U, P, lengths = tiny_hmm()
    post = z.posterior
    draws = post.sample(N_DRAWS, seed=0)
    assert draws.shape == (N_DRAWS, 3, 4) and draws.dtype.kind == "i"
    for s, L in enumerate(lengths):
        assert np.all(draws[:, s, L:] == -1)
        assert np.all((draws[:, s, :L] >= 0) & (draws[:, s, :L] < 2))
        check_path_frequencies(draws[:, s, :L], U[s, :L], P)
        # the per-step frequencies against forward-backward's marginals
        for k in range(2):
            f = np.mean(draws[:, s, :L] == k, axis=0)
            m = post.marginals[s, :L, k]
            assert np.all(np.abs(f - m) <= 4 * np.sqrt(m * (1 - m) / N_DRAWS))


def test_categorical_chain_sample_shapes_and_seed():
    z, _, _, _ = tiny_hmm()
    post = z.posterior
    assert post.sample(seed=1).shape == (3, 4)
    assert post.sample(5, seed=1).shape == (5, 3, 4)
    assert post.sample((2, 5), seed=1).shape == (2, 5, 3, 4)
    np.testing.assert_array_equal(post.sample(50, seed=3), post.sample(50, seed=3))
    g = np.random.default_rng(3)
    np.testing.assert_array_equal(post.sample(50, seed=g).shape, (50, 3, 4))
    assert not np.array_equal(post.sample(50, seed=3), post.sample(50, seed=4))
    # a state sequence shared by the columns of a table: the node's plates (S, T, 1)
    zc = bg.CategoricalMarkovChain(np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.1, 0.9]]),
                                   length=4, plates=(2,), columns=True, name="zc")
    yc = bg.Mixture(zc, bg.Normal, np.array([[-1.0, 1.0]] * 3), 1.0, name="yc").observe(
        np.random.default_rng(0).normal(size=(2, 4, 3)))
    bg.Model(yc).fit("vmp", max_iter=2, seed=0)
    assert zc.posterior.sample(7, seed=0).shape == (7, 2, 4, 1)


def test_sample_paths_per_sequence_transitions_match_enumeration():
    """Per-sequence (S, K, K) pairwise potentials, not normalised (as E[log A] is)."""
    rng = np.random.default_rng(5)
    S, T, K = 2, 4, 2
    U = rng.normal(scale=0.7, size=(S, T, K))
    P = rng.normal(scale=0.7, size=(S, K, K)) - 1.0
    draws = sample_paths(U, P, rng=np.random.default_rng(0), size=(N_DRAWS,))
    assert draws.shape == (N_DRAWS, S, T)
    for s in range(S):
        check_path_frequencies(draws[:, s], U[s], P[s])
    # lengths: a chain of length 0 is all -1; one of length 2 is the 2-step chain
    d2 = sample_paths(U, P, lengths=[0, 2], rng=0, size=(N_DRAWS,))
    assert np.all(d2[:, 0] == -1) and np.all(d2[:, 1, 2:] == -1)
    check_path_frequencies(d2[:, 1, :2], U[1, :2], P[1])


def test_sample_paths_refuses_impossible_chain():
    U = np.zeros((1, 3, 2))
    P = np.full((2, 2), -np.inf)      # no transition allowed: no path of length 3
    with pytest.raises(ValueError, match="no path of positive probability"):
        sample_paths(U, P, rng=0, size=(4,))
    # zero-probability states are fine
    P2 = np.array([[0.0, -np.inf], [-np.inf, 0.0]])
    d = sample_paths(np.log([[[0.3, 0.7], [0.5, 0.5], [0.5, 0.5]]]), P2, rng=0, size=(2000,))
    assert np.all(d == d[:, :, :1])                                  # a state never changes
    assert abs(np.mean(d[:, 0, 0] == 1) - 0.7) < 4 * np.sqrt(0.21 / 2000)


# ---- GaussianMarkovChain -------------------------------------------------------------------
def gaussian_chain(offset=0.0, A=None):
    rng = np.random.default_rng(2)
    S, T, D = 2, 4, 2
    A = np.array([[0.9, 0.2], [-0.1, 0.8]]) if A is None else A
    Y = rng.normal(size=(S, T, D)) + offset
    mask = np.ones((S, T), bool)
    mask[0, 2] = False
    mask[1, 3] = False
    x = bg.GaussianMarkovChain(np.zeros(D) + offset, np.eye(D) * 0.5, A,
                               np.array([[2.0, 0.5], [0.5, 1.5]]), length=T, plates=(S,),
                               name="x")
    y = bg.MultivariateNormal(x, np.array([[3.0, -0.4], [-0.4, 2.0]]), name="y").observe(
        Y, mask=mask)
    bg.Model(y).fit("vmp", max_iter=3)
    return x


def test_gaussian_chain_pairs_match_smoother():
    x = gaussian_chain()
    post = x.posterior
    m, V, cross = post.mean, post.cov, post.params["cross_cov"]   # cross[t] = Cov(x_t, x_{t-1})
    draws = post.sample(N_DRAWS, seed=0)
    S, T, D = m.shape
    assert draws.shape == (N_DRAWS, S, T, D)
    for s in range(S):
        for t in range(T - 1):
            pair = draws[:, s, t:t + 2].reshape(N_DRAWS, 2 * D)
            mu = m[s, t:t + 2].reshape(2 * D)
            Sig = np.block([[V[s, t], cross[s, t + 1].T], [cross[s, t + 1], V[s, t + 1]]])
            se_mean = np.sqrt(np.diag(Sig) / N_DRAWS)
            assert np.all(np.abs(pair.mean(0) - mu) <= 4 * se_mean)
            emp = np.cov(pair, rowvar=False)
            d = np.sqrt(np.diag(Sig))
            se_cov = np.sqrt((np.outer(d, d) ** 2 + Sig ** 2) / N_DRAWS)
            assert np.all(np.abs(emp - Sig) <= 4 * se_cov), np.max(np.abs(emp - Sig) / se_cov)


def test_gaussian_chain_sample_in_data_coordinates_far_from_zero():
    """A random walk (A = I) with its data and prior mean at 1e8: q is q at 0 moved by
    1e8, so the draws from one seed are the draws at 0 plus 1e8 (to the digits a double
    holds at 1e8), and their mean is the posterior mean."""
    off = 1e8
    x0, x1 = gaussian_chain(0.0, np.eye(2)), gaussian_chain(off, np.eye(2))
    # the chain is centred on its data (docs/dev/numerics.md): its q is that of x - c, and
    # the draws are moved back to the data's coordinates
    assert x1.family.shift is not None and np.all(np.abs(x1.family.shift - off) < 10)
    d0, d1 = x0.posterior.sample(2000, seed=7), x1.posterior.sample(2000, seed=7)
    assert d1.shape == (2000, 2, 4, 2)
    np.testing.assert_allclose(d1 - off, d0, rtol=0, atol=1e-6)
    np.testing.assert_allclose(x1.posterior.mean - off, x0.posterior.mean, rtol=0, atol=1e-6)
    se = np.sqrt(np.diagonal(x1.posterior.cov, axis1=-2, axis2=-1) / 2000)
    assert np.all(np.abs(d1.mean(0) - x1.posterior.mean) <= 4 * se)


def test_gaussian_chain_sample_shapes():
    x = gaussian_chain()
    assert x.posterior.sample(seed=0).shape == (2, 4, 2)
    assert x.posterior.sample((3, 5), seed=0).shape == (3, 5, 2, 4, 2)
    np.testing.assert_array_equal(x.posterior.sample(4, seed=1), x.posterior.sample(4, seed=1))
