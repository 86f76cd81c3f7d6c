"""Rotations of Dot(W, x) (blrgraph/inference/rotations.py, docs/latent_products.md
"Rotations"): the cost is the ELBO's change, its gradient is the cost's, the optimum is
the closed form where one exists, and a fit never loses ELBO by them."""
import numpy as np
import pytest
from scipy.linalg import solve_continuous_are, sqrtm

import blrgraph as bg
from blrgraph.inference.elbo import elbo
from blrgraph.inference.methods import get_method
from blrgraph.inference.options import parse_options
from blrgraph.inference.rotations import find_rotations, plan_rotations


def _pca(x_prior="fixed", w_prior="ard", mask=False, offset=False, swap=False, M=8, N=60, K=3,
         seed=0, x_eye=False):
    rng = np.random.default_rng(seed)
    Y = rng.normal(size=(N, 2)) @ rng.normal(size=(2, M)) + 0.3 * rng.normal(size=(N, M))

    def prior(kind, name):
        if kind == "fixed":
            if name == "x":
                return np.eye(K) if x_eye else np.diag(rng.uniform(0.5, 2.0, size=K))
            return 2.0 * np.eye(K)
        return bg.Gamma(1e-2, 1e-2, plates=(K,) if kind == "ard" else (), name=f"alpha_{name}")

    W = bg.MultivariateNormal(np.zeros(K), prior(w_prior, "W"), plates=(M,), name="W")
    x = bg.MultivariateNormal(np.zeros(K), prior(x_prior, "x"), plates=(N, 1), name="x")
    f = bg.Dot(x, W) if swap else bg.Dot(W, x)
    if offset:
        f = bg.Add(f, bg.Normal(0.0, 1e-2, plates=(M,), name="mu"))
    y = bg.Normal(f, bg.Gamma(1e-2, 1e-2, name="tau"), name="y")
    if mask:
        m = rng.random((N, M)) < 0.8
        y.observe(np.where(m, Y, 0.0), mask=m)
    else:
        y.observe(Y)
    return bg.Model(y)


def _warm(model, sweeps=5):
    model.fit("vmp", seed=0, max_iter=sweeps, tol=0, rotate=False)
    (rot,) = find_rotations(model)
    return rot


KINDS = [("fixed", "ard"), ("fixed", "fixed"), ("ard", "ard"), ("iso", "fixed"), ("fixed", "iso")]


@pytest.mark.parametrize("x_prior,w_prior", KINDS)
def test_cost_is_zero_at_identity_and_its_gradient_is_the_finite_difference(x_prior, w_prior):
    rot = _warm(_pca(x_prior, w_prior))
    stats = rot.stats()
    K = stats[0].shape[0]
    f0, _ = rot.cost(np.eye(K), stats)
    assert f0 == 0.0
    rng = np.random.default_rng(1)
    for R in (np.eye(K), np.eye(K) + 0.3 * rng.normal(size=(K, K))):
        f, g = rot.cost(R, stats)
        h = 1e-6
        num = np.zeros_like(R)
        for i in range(K):
            for j in range(K):
                E = np.zeros_like(R)
                E[i, j] = h
                num[i, j] = (rot.cost(R + E, stats)[0] - rot.cost(R - E, stats)[0]) / (2 * h)
        np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-6 * np.abs(num).max())


@pytest.mark.parametrize("case", [dict(), dict(mask=True), dict(offset=True), dict(swap=True),
                                  dict(x_prior="ard"), dict(x_prior="iso", w_prior="fixed"),
                                  dict(w_prior="iso")])
def test_predicted_change_equals_the_recomputed_elbo(case):
    """Rotate, update the ARD precisions: the ELBO recomputed from scratch moves by
    exactly the step's prediction, and never down."""
    model = _pca(**case)
    rot = _warm(model)
    gains = []
    for _ in range(3):
        before = elbo(model)
        delta = rot.step(model)
        after = elbo(model)
        assert delta >= 0.0
        assert abs((after - before) - delta) <= 1e-8 * max(1.0, abs(after))
        assert after >= before - 1e-9 * abs(before)
        gains.append(delta)
    assert gains[0] > 1e-3     # a warm VMP state is far from the best rotation


def test_the_optimum_with_fixed_priors_is_the_riccati_solution():
    """x ~ N(0, I), w ~ N(0, I / lam): f depends on R through M = R^T R only,
    f = (n_x - n_w)/2 log|M| - tr(M S_x)/2 - lam tr(M^-1 S_w)/2, and its maximiser solves
    (n_x - n_w) M - M S_x M + lam S_w = 0 (a continuous algebraic Riccati equation)."""
    rot = _warm(_pca("fixed", "fixed", x_eye=True))
    Sx, Sw = rot.stats()
    K = Sx.shape[0]
    lam = rot.w.L[0, 0]
    assert np.array_equal(rot.x.L, np.eye(K)) and np.allclose(rot.w.L, lam * np.eye(K))
    n = rot.x.n - rot.w.n
    Mstar = solve_continuous_are(0.5 * n * np.eye(K), np.eye(K), lam * Sw, np.linalg.inv(Sx))
    Rstar = sqrtm(Mstar).real
    f_star, g_star = rot.cost(Rstar, (Sx, Sw))
    assert np.abs(g_star).max() <= 1e-9 * np.abs(rot.cost(np.eye(K), (Sx, Sw))[1]).max()
    R, f = rot.optimise((Sx, Sw), maxiter=300)
    assert f > 1.0
    assert f == pytest.approx(f_star, rel=1e-10)
    # unique up to an orthogonal factor on the left: R^T R is M*
    np.testing.assert_allclose(R.T @ R, Mstar, rtol=1e-5)


@pytest.mark.parametrize("case", [dict(), dict(mask=True), dict(offset=True)])
def test_fit_with_rotations_is_monotone(case):
    rotated = _pca(**case).fit("vmp", seed=0, max_iter=60, tol=0)
    t = rotated.elbo_trace
    assert np.all(np.diff(t) >= -1e-10 * np.abs(t[1:]))
    # the reported ELBO is the model's (the rotation's change is exact)
    assert rotated.elbo == pytest.approx(elbo(rotated.model), rel=1e-12)


def test_zoo_pca_is_rotated_by_default():
    import pandas as pd
    from models import pca
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(100, 3)) @ rng.normal(size=(3, 6)) + 0.1 * rng.normal(size=(100, 6)))
    model = pca.build(df, k=4)
    assert len(find_rotations(model)) == 1
    fit = model.fit("vmp", seed=0, max_iter=50, tol=0)
    assert np.all(np.diff(fit.elbo_trace) >= -1e-10 * np.abs(fit.elbo_trace[1:]))


def _plan(model, method="vmp", **options):
    m = get_method(method)
    return plan_rotations(model, m, parse_options(m, options), set(), False)


def test_where_the_step_is_planned():
    assert len(_plan(_pca())) == 1
    assert _plan(_pca(), rotate=False) == ()
    assert _plan(_pca(), "svi") == ()
    m = get_method("em")
    assert plan_rotations(_pca(), m, parse_options(m, {}), {"W"}, False) == ()
    # not recognised: an array operand, an operand read by another node, a prior mean
    rng = np.random.default_rng(0)
    w = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="w")
    y = bg.Normal(bg.Dot(rng.normal(size=(10, 2)), w), 1.0, name="y").observe(rng.normal(size=10))
    assert find_rotations(bg.Model(y)) == []
    W = bg.MultivariateNormal(np.zeros(2), np.eye(2), plates=(3,), name="W")
    x = bg.MultivariateNormal(np.ones(2), np.eye(2), plates=(10, 1), name="x")
    y = bg.Normal(bg.Dot(W, x), 1.0, name="y").observe(rng.normal(size=(10, 3)))
    assert find_rotations(bg.Model(y)) == []
    x = bg.MultivariateNormal(np.zeros(2), np.eye(2), plates=(10, 1), name="x")
    y = bg.Normal(bg.Dot(W, x), 1.0, name="y").observe(rng.normal(size=(10, 3)))
    z = bg.MultivariateNormal(W, np.eye(2), name="z").observe(np.zeros((3, 2)))
    assert find_rotations(bg.Model(y, z)) == []


def test_rotate_option_is_checked():
    with pytest.raises(TypeError, match="rotate must be True or False"):
        _pca().fit("vmp", rotate="yes")
    with pytest.raises(TypeError, match="options of the batch methods"):
        _pca().fit("svi", rotate=False)
