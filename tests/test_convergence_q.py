"""Convergence is judged on q as well as on the ELBO (issue 28; inference/tolerance.py,
docs/api.md "Convergence").

A relative ELBO change below tol is not enough: where |ELBO| is huge (a far-off data
point, Poisson counts of 5e8 far from the optimum) 1e-8 of it is thousands of nats, and
mean-field coordinate ascent on correlated nodes crawls, each sweep moving q by a small
fraction of its distance to the optimum. A fit is reported converged only when, besides,
every global q's last step and the distance left (extrapolated from the rate of its last
two steps) are below sqrt(tol) in KL per entry.
"""
from __future__ import annotations

import numpy as np
import pytest

import blrgraph as bg
from blrgraph.inference.tolerance import q_tolerance, q_unsettled


def _sum_model(y, far=False):
    """y_n ~ N(a + b, 1), a ~ N(0, 100), b ~ N(0, 1): a and b are nearly confounded, so
    mean-field VMP moves b by ~1% of its distance per sweep."""
    a, b = bg.Normal(0.0, 1e-2, name="a"), bg.Normal(0.0, 1.0, name="b")
    nodes = [bg.Normal(bg.Add(a, b), 1.0, name="y").observe(y)]
    if far:   # one datum 1e6 sds from its fixed mean: |ELBO| = 5e11, 1e-8 of it 5e3 nats
        nodes.append(bg.Normal(0.0, 1.0, name="far").observe(np.array([1e6])))
    return bg.Model(*nodes), a, b


def _exact(y):
    """The exact posterior mean of (a, b); mean-field VB has the same means at its optimum."""
    n = len(y)
    P = np.array([[1e-2 + n, n], [n, 1.0 + n]])
    return np.linalg.solve(P, np.array([y.sum(), y.sum()]))


@pytest.mark.parametrize("far", [False, True])
def test_converged_means_near_the_optimum_even_when_the_elbo_is_huge(far):
    y = 5.0 + np.random.default_rng(0).standard_normal(100)
    model, a, b = _sum_model(y, far)
    fit = model.fit("vmp", max_iter=5000)
    assert fit.converged
    exact = _exact(y)
    for node, m in zip((a, b), exact):
        sd = np.sqrt(node.posterior.var)
        # sqrt(tol) = 1e-4 in KL: within sqrt(2e-4) = 0.014 sd (before: 0.5 sd at
        # iteration 2 with the far datum, 0.12 sd at iteration 144 without)
        assert abs(node.posterior.mean - m) <= 0.02 * sd, (node.name, node.posterior.mean, m)


def test_the_far_datum_changes_nothing_but_the_elbo():
    y = 5.0 + np.random.default_rng(1).standard_normal(100)
    (m0, a0, b0), (m1, a1, b1) = _sum_model(y), _sum_model(y, far=True)
    f0, f1 = m0.fit("vmp", max_iter=5000), m1.fit("vmp", max_iter=5000)
    assert f0.n_iter == f1.n_iter
    assert b1.posterior.mean == pytest.approx(b0.posterior.mean, rel=1e-9)


def test_poisson_regression_at_large_counts_reports_its_covariance_converged():
    """Counts ~5e8 on a log link: the ELBO starts at -3e11. Its covariance converges
    after the mean; converged=True must mean the covariance too."""
    rng = np.random.default_rng(0)
    N = 100
    X = np.column_stack([np.ones(N), 1.5 + 0.1 * rng.standard_normal(N)])
    y = rng.poisson(np.exp(X @ np.array([20.0, 0.5]))).astype(float)

    def fit(tol):
        w = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="w")
        f = bg.Model(bg.Poisson(log_rate=bg.Dot(X, w), name="y").observe(y)).fit(
            "ncvmp", tol=tol, max_iter=2000)
        return f, w.posterior

    f, q = fit(1e-8)
    _, ref = fit(1e-14)
    assert f.converged
    np.testing.assert_allclose(q.mean, ref.mean, rtol=0, atol=0.02 * np.sqrt(np.diag(ref.cov)).min())
    np.testing.assert_allclose(np.sqrt(np.diag(q.cov)), np.sqrt(np.diag(ref.cov)), rtol=2e-2)


def test_the_distance_left_is_extrapolated_from_the_rate():
    node = object()
    bound = q_tolerance(1e-8)
    # one step: no rate, not settled; within rounding: settled
    assert q_unsettled({node: (bound / 10, 0.0)}, None, 1e-8) == [node]
    assert q_unsettled({node: (1e-20, 1e-19)}, None, 1e-8) == []
    # steps shrinking by r = 0.5 in distance (0.25 in KL): left = kl (r / (1 - r))^2 = kl
    assert q_unsettled({node: (bound / 2, 0.0)}, {node: (2 * bound, 0.0)}, 1e-8) == []
    # r = 0.99: a small step, but about 1e4 times its KL left
    kl = bound / 10
    assert q_unsettled({node: (kl, 0.0)}, {node: (kl / 0.99 ** 2, 0.0)}, 1e-8) == [node]
    # a growing step is judged as it is
    assert q_unsettled({node: (bound / 2, 0.0)}, {node: (bound / 4, 0.0)}, 1e-8) == []
    assert q_unsettled({node: (2 * bound, 0.0)}, {node: (bound, 0.0)}, 1e-8) == [node]


def _poisson_mle(X, y, start):
    """The maximum-likelihood weights of a Poisson regression (log link) by Newton's method
    (the posterior mean under a prior this weak differs by ~1e-6 posterior sds)."""
    w = np.asarray(start, dtype=float)
    for _ in range(50):
        mu = np.exp(X @ w)
        w = w + np.linalg.solve(X.T @ (mu[:, None] * X), X.T @ (y - mu))
    return w


@pytest.mark.parametrize("seed, prior_precision, covariate, n", [
    (0, 0.1, "normal", 300), (1, 0.1, "normal", 300), (0, 0.01, "normal", 300),
    (0, 0.01, "uniform", 300), (0, 0.01, "normal", 30)])
def test_a_sharp_first_step_is_not_taken_for_convergence(seed, prior_precision, covariate, n):
    """Poisson(log_rate=Dot(X, w)) with counts ~5e8 (exp(20 + 0.5 x)) from a vague prior:
    the first NCVMP step, with the curvature at the prior (exp(v / 2) of v ~ 1 / prior
    precision), lands at w ~ [-1, 0] with a precision of 1e23..1e230, and the next sweeps
    only halve it. The KL of those steps (0.3..0.6 nats) was excused as rounding, whose
    bound (the Bregman form's pieces, eps x m^T L m) was 2e8 there: converged=True after
    2 sweeps at [-1, 0] (the issue's report). The closed-form Gaussian KL's own rounding
    bound, and no settling where rounding alone can move q by a nat, let the fit go on to
    the optimum (94, 777 and 182 sweeps measured; with a bound of 1 nat the uniform case
    still stopped at [-1, 0] after 48). With 30 rows the KL of a step from a q of precision
    ~1e300 came out as -0.44 and passed for settled at [-0.5, 0.125] after 378 sweeps; a KL
    below 0 beyond its rounding now counts as a move (499 sweeps to the optimum)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n) if covariate == "normal" else rng.uniform(-1.0, 1.0, n)
    X = np.c_[np.ones(n), x]
    y = rng.poisson(np.exp(20 + 0.5 * x))
    w = bg.MultivariateNormal(np.zeros(2), prior_precision * np.eye(2), name="w")
    fit = bg.Model(bg.Poisson(log_rate=bg.Dot(X, w), name="y").observe(y)).fit("ncvmp")
    assert fit.converged and fit.n_iter > 10
    sd = np.sqrt(np.diag(w.posterior.cov))
    err = np.abs(w.posterior.mean - _poisson_mle(X, y, [20.0, 0.5])) / sd
    assert np.all(err < 0.05), err
