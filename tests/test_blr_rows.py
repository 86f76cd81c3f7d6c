"""The rows of the BLR table run as worked iterations (blrgraph.blr_rows): BayesBiNN
against the exact mean-field optimum over {-1, +1}^6 (coordinate ascent by enumeration),
STE against a hand-written loop and the exact MAP, dropout against the closed-form
optimum of its expected objective for a linear model."""
import itertools

import numpy as np
import pytest
from scipy.special import expit, log_expit

from blrgraph import blr_rows

N, D = 60, 6
_rng = np.random.default_rng(0)
X = _rng.normal(size=(N, D)) / np.sqrt(D)
Y = (_rng.random(N) < expit(X @ np.array([1, -1, 1, 1, -1, 1.0]))).astype(float)
CONFIGS = np.array(list(itertools.product([-1.0, 1.0], repeat=D)))


def nll(W):                                   # -log p(D | w) for each row of W
    a = W @ X.T
    return -(Y * log_expit(a) + (1 - Y) * log_expit(-a)).sum(1)


def grad(w, rows):                            # of the mean loss over the rows
    return -X[rows].T @ (Y[rows] - expit(X[rows] @ w)) / len(rows)


def mean_field_optimum(lam0):
    """Coordinate ascent over the 64 configurations: lam_j = lam0_j - (E[L | w_j = 1] -
    E[L | w_j = -1]) / 2 under the other coordinates' q."""
    L, lam = nll(CONFIGS), np.zeros(D)
    for _ in range(200):
        for j in range(D):
            others = [k for k in range(D) if k != j]
            p = np.prod(np.where(CONFIGS > 0, expit(2 * lam), expit(-2 * lam))[:, others], 1)
            up = CONFIGS[:, j] > 0
            lam[j] = lam0[j] - 0.5 * (p[up] @ L[up] / p[up].sum() - p[~up] @ L[~up] / p[~up].sum())
    return lam


def test_bayesbinn_approaches_the_exact_mean_field_optimum_as_tau_falls():
    exact = np.tanh(mean_field_optimum(np.zeros(D)))
    err = {}
    for tau in (1.0, 0.2):
        lams = [blr_rows.bayesbinn(grad, np.zeros(D), N, rho=0.002, tau=tau, steps=4000, seed=s)
                for s in range(2)]
        err[tau] = np.abs(np.tanh(np.mean(lams, 0)) - exact).max()
    assert err[0.2] < 0.2 < err[1.0]          # the Gumbel relaxation's bias shrinks with tau
    lam = blr_rows.bayesbinn(grad, np.zeros(D), N, rho=0.002, tau=0.2, steps=4000, seed=0)
    assert np.array_equal(np.sign(lam), np.sign(exact))


def test_ste_is_the_gradient_step_at_the_signs_and_finds_the_map_here():
    theta0 = np.linspace(-1e-3, 1e-3, D)
    theta = blr_rows.ste(grad, N, rho=1e-3, steps=50, theta=theta0)
    ref = theta0.copy()
    for _ in range(50):
        ref = ref - 1e-3 * N * grad(np.where(ref >= 0, 1.0, -1.0), np.arange(N))
    np.testing.assert_allclose(theta, ref, rtol=1e-12, atol=1e-15)
    theta = blr_rows.ste(grad, N, rho=1e-3, steps=3000, D=D, seed=0)
    assert np.array_equal(np.sign(theta), CONFIGS[np.argmin(nll(CONFIGS))])


def test_dropout_reaches_the_optimum_of_its_expected_objective():
    rng = np.random.default_rng(1)
    n, d = 200, 5
    A = rng.normal(size=(n, d))
    y = A @ np.array([1.0, -2, 0.5, 0, 1]) + rng.normal(size=n)
    p, P0 = 0.6, 1.0
    G = A.T @ A
    # E_z[(y - A (z m))^2] / 2 + P0 |m|^2 / 2 is minimised by this m (z_j ~ Bernoulli(p))
    best = np.linalg.solve(p * p * G + p * (1 - p) * np.diag(np.diag(G)) + P0 * np.eye(d),
                           p * A.T @ y)
    plain = np.linalg.solve(G + P0 * np.eye(d), A.T @ y)
    m = blr_rows.dropout(lambda w, r: -A[r].T @ (y[r] - A[r] @ w) / len(r), np.zeros(d), n,
                         keep=p, prior_precision=P0, rho=2e-4, steps=20000, average_from=2000,
                         batch_size=20)
    assert np.abs(m - best).max() < 0.01 < np.abs(plain - best).max()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="rho"):
        blr_rows.bayesbinn(grad, np.zeros(D), N, rho=0.0)
    with pytest.raises(ValueError, match="tau"):
        blr_rows.bayesbinn(grad, np.zeros(D), N, tau=0.0)
    with pytest.raises(ValueError, match="batch_size"):
        blr_rows.ste(grad, N, batch_size=N + 1, D=D)
    with pytest.raises(ValueError, match="keep"):
        blr_rows.dropout(grad, np.zeros(D), N, keep=0.0)
