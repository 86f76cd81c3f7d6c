"""Hyperpriors (docs/hyperpriors.md): a Wishart prior on a Wishart's inverse scale,
``bg.Wishart(dof, rate=B)`` with B a Wishart node (conjugate).

* Observed precision matrices: q(B) is the exact posterior Wishart(n0 + m n,
  (V0^-1 + sum_i Lambda_i)^-1) and the ELBO of fit("conjugate") is the exact log
  evidence, written with scipy.stats.wishart, to 1e-12.
* Latent precisions (groups of Gaussian data sharing B): the message from each Lambda to
  B equals the finite-difference gradient of its expected log-likelihood in B's moments
  (tests/test_messages.py), and the VMP trace never decreases.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import blrgraph as bg
from test_messages import check_messages, random_spd


def test_wishart_rate_posterior_and_evidence_are_exact():
    rng = np.random.default_rng(0)
    D, n, n0, m = 3, 5.0, 4.0, 6
    V0 = random_spd(rng, D, 0.5)
    true_rate = random_spd(rng, D)
    Ls = stats.wishart(df=n, scale=np.linalg.inv(true_rate)).rvs(m, random_state=1)
    B = bg.Wishart(n0, V0, name="B")
    L = bg.Wishart(n, rate=B, plates=(m,), name="L").observe(Ls)
    res = bg.Model(L).fit("conjugate")
    nP, VP = n0 + m * n, np.linalg.inv(np.linalg.inv(V0) + Ls.sum(0))
    post = B.posterior.params
    np.testing.assert_allclose(post["dof"], nP, rtol=1e-14)
    np.testing.assert_allclose(post["scale"], VP, rtol=1e-12, atol=1e-14)
    Bs = nP * VP   # any point: log p(L | B*) + log p(B*) - log q(B*) is the evidence
    evidence = sum(stats.wishart(df=n, scale=np.linalg.inv(Bs)).logpdf(Li) for Li in Ls) \
        + stats.wishart(df=n0, scale=V0).logpdf(Bs) - stats.wishart(df=nP, scale=VP).logpdf(Bs)
    np.testing.assert_allclose(res.elbo, evidence, rtol=1e-12)
    # an array rate is the fixed prior with scale = rate^-1
    L2 = bg.Wishart(n, rate=true_rate, name="L2")
    np.testing.assert_allclose(L2.moments()[0], n * np.linalg.inv(true_rate), rtol=1e-12)


@pytest.mark.parametrize("masked", [False, True])
def test_wishart_rate_messages_and_monotone_vmp(masked):
    rng = np.random.default_rng(1)
    D, G, N = 2, 3, 20
    B = bg.Wishart(D + 2.0, np.eye(D), name="B")
    L = bg.Wishart(D + 3.0, rate=B, plates=(G,), name="L")
    X = rng.normal(size=(N, G, D)) * np.array([0.5, 1.0, 2.0])[:, None]
    mask = rng.random((N, G)) < 0.8 if masked else None
    x = bg.MultivariateNormal(np.zeros(D), L, plates=(N, G), name="x").observe(X, mask=mask)
    res = bg.Model(x).fit("vmp", max_iter=60, tol=0)
    tr = res.elbo_trace
    assert np.all(np.diff(tr) >= -1e-10 * np.abs(tr[1:]))
    assert tr[-1] > tr[0]
    assert check_messages(L) == 1     # Lambda -> B
    assert check_messages(x) == 1     # x -> Lambda (unchanged)


def test_wishart_random_scale_is_refused_with_the_fix():
    B = bg.Wishart(3.0, np.eye(2), name="B")
    with pytest.raises(TypeError, match="rate=B"):
        bg.Wishart(3.0, B, name="L")
    with pytest.raises(TypeError, match="one of the two"):
        bg.Wishart(3.0, np.eye(2), rate=B, name="L")
    with pytest.raises(ValueError, match="dof must be > D - 1"):
        bg.Wishart(0.5, rate=B, name="L")
