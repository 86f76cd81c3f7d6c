"""The kept einsum contraction plans of graph/plates.py (docs/dev/architecture.md): the
pairwise steps run through numpy's own ``bmm_einsum`` (numpy >= 2.3, a private name) and,
where that name is missing, through ``np.einsum(..., optimize=path)``. Both routes equal a
plain ``np.einsum``, and a fit gives the same ELBO trace on either."""
import numpy as np
import pytest

import blrgraph as bg
from blrgraph.graph import plates

# (expression, operand shapes): large enough that a plan is kept (not the one-pass C einsum)
CASES = [
    ("nk,nd->kd", [(20000, 8), (20000, 12)]),
    ("nk,nde->kde", [(10000, 5), (10000, 6, 6)]),
    ("nd,ke,de->nk", [(1500, 10), (7, 10), (10, 10)]),
    ("ij,jk,kl->il", [(60, 70), (70, 80), (80, 90)]),
]


@pytest.fixture
def fallback(monkeypatch):
    """The route taken when numpy has no ``bmm_einsum``, with fresh plans."""
    monkeypatch.setattr(plates, "_pairwise", None)
    monkeypatch.setattr(plates, "_PATHS", {})


def _operands(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s) for s in shapes]


@pytest.mark.parametrize("expr,shapes", CASES)
def test_kept_plans_equal_plain_einsum(expr, shapes):
    arrays = _operands(shapes)
    plates._PATHS.pop((expr,) + tuple(tuple(s) for s in shapes), None)
    first = plates._einsum(expr, arrays)
    again = plates._einsum(expr, arrays)      # the kept plan
    want = np.einsum(expr, *arrays)
    np.testing.assert_allclose(first, want, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(again, first)
    assert plates._path(expr, arrays) is not None


@pytest.mark.parametrize("expr,shapes", CASES)
def test_without_bmm_einsum_plans_equal_plain_einsum(fallback, expr, shapes):
    arrays = _operands(shapes, seed=1)
    path = plates._path(expr, arrays)
    assert path is not None and path[0] == "einsum_path"
    np.testing.assert_allclose(plates._einsum(expr, arrays), np.einsum(expr, *arrays),
                               rtol=1e-12, atol=1e-9)


def _gmm_trace():
    rng = np.random.default_rng(3)
    X = np.concatenate([rng.normal(-3, 1, (400, 3)), rng.normal(3, 1, (400, 3))])
    z = bg.Categorical(bg.Dirichlet(np.ones(4), name="a"), plates=(800,), name="z")
    mu = bg.MultivariateNormal(np.zeros(3), 1e-2 * np.eye(3), plates=(4,), name="mu")
    Lam = bg.Wishart(3, np.eye(3), plates=(4,), name="Lam")
    model = bg.Model(bg.Mixture(z, bg.MultivariateNormal, mu, Lam, name="x").observe(X))
    return np.array(model.fit("vmp", max_iter=15, tol=0, seed=0, restarts=1).elbo_trace)


def test_a_fit_is_the_same_without_bmm_einsum(monkeypatch):
    want = _gmm_trace()
    monkeypatch.setattr(plates, "_pairwise", None)
    monkeypatch.setattr(plates, "_PATHS", {})
    monkeypatch.setattr(plates, "DIRECT_FLOPS", 0.0)   # every contraction takes a plan
    got = _gmm_trace()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
