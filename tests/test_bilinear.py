"""The matrix plan of ``Dot(A, B)`` (graph/bilinear.py; docs/latent_products.md, "The plan
of a product"): with disjoint plate axes the product's messages and sums are matrix
products. Each is checked against the dense formulas written out here with numpy from the
operands' per-entry moments, for every layout the plan accepts (either operand first, an
extra leading axis, Dot(x, W)); layouts it refuses (a shared or interleaved axis) take the
general path and give the same formulas; a new q of an operand is seen at once (the
per-q statistics are keyed on its natural parameters).
"""
from __future__ import annotations

import numpy as np
import pytest

import blrgraph as bg
from blrgraph.graph.bilinear import plan_of

K = 3


def _latent(plates, rng, name):
    v = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=plates, name=name)
    A = rng.normal(size=plates + (K, K))
    v.start_from(rng.normal(size=plates + (K,)), A @ np.swapaxes(A, -1, -2) + K * np.eye(K))
    v.start(rng)
    return v


def _full(v, plates):
    """E[v], E[v v^T] broadcast to the product's plates."""
    m, S = v.moments()
    return (np.broadcast_to(m, plates + (K,)), np.broadcast_to(S, plates + (K, K)))


def _reduce(a, target, event):
    """Sum a (plates + event) over the plate axes the target does not have."""
    n = a.ndim - event
    t = (1,) * (n - len(target)) + tuple(target)
    axes = tuple(j for j in range(n) if t[j] == 1 and a.shape[j] != 1)
    s = a.sum(axis=axes, keepdims=True) if axes else a
    return s.reshape(tuple(target) + a.shape[n:])


LAYOUTS = [((5, 1), (7,)), ((5,), (7, 1)), ((7,), (5, 1)), ((2, 5, 1), (7,)), ((4, 1), (1,))]


@pytest.mark.parametrize("pa, pb", LAYOUTS)
def test_plan_messages_and_sums_equal_the_dense_formulas(pa, pb):
    rng = np.random.default_rng(0)
    A, B = _latent(pa, rng, "A"), _latent(pb, rng, "B")
    dot = bg.Dot(A, B)
    assert plan_of(dot) is not None
    full = dot.plates
    (ma, Sa), (mb, Sb) = _full(A, full), _full(B, full)
    c1 = rng.normal(size=full)
    c2 = np.asarray(-0.7)
    for node, other_m, other_S in ((A, mb, Sb), (B, ma, Sa)):
        got = dot.backward((c1, c2), node)
        want1 = _reduce(c1[..., None] * other_m, node.plates, 1)
        want2 = float(c2) * _reduce(np.broadcast_to(other_S, full + (K, K)), node.plates, 2)
        np.testing.assert_allclose(got[0], want1, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got[1], want2, rtol=1e-12, atol=1e-12)
        assert got[0].shape == want1.shape and got[1].shape == want2.shape
    y = rng.normal(size=full)
    Ea = np.einsum("...k,...k->...", ma, mb)
    Ea2 = np.einsum("...kl,...kl->...", Sa, Sb)
    for coef in (None, np.asarray(2.5)):
        c = 1.0 if coef is None else float(coef)
        s1, s2 = dot.moment_sums(coef, y, (), full)
        np.testing.assert_allclose([s1, s2], [c * np.sum(y * Ea), c * np.sum(Ea2)], rtol=1e-12)
        s1, s2 = dot.moment_sums(coef, None, (), full, second=False)
        assert s1 is None and s2 is None


@pytest.mark.parametrize("pa, pb", [((5, 7), (7,)), ((5, 1, 2), (7, 1))])
def test_shared_or_interleaved_axes_take_the_general_path(pa, pb):
    rng = np.random.default_rng(1)
    A, B = _latent(pa, rng, "A"), _latent(pb, rng, "B")
    dot = bg.Dot(A, B)
    assert plan_of(dot) is None
    full = dot.plates
    (ma, Sa), (mb, Sb) = _full(A, full), _full(B, full)
    c1 = rng.normal(size=full)
    got = dot.backward((c1, np.asarray(-0.7)), A)
    np.testing.assert_allclose(got[0], _reduce(c1[..., None] * mb, pa, 1), rtol=1e-12)
    np.testing.assert_allclose(got[1], -0.7 * _reduce(np.broadcast_to(Sb, full + (K, K)), pa, 2),
                               rtol=1e-12)


def test_a_new_q_of_an_operand_is_seen():
    """The per-q statistics are keyed on the natural parameters (replaced, never modified):
    after an operand's update the message to the other operand and the sums are its new
    ones, also when the plan kept a product of the data with its old means."""
    rng = np.random.default_rng(2)
    W, X = _latent((4, 1), rng, "W"), _latent((6,), rng, "X")
    dot = bg.Dot(W, X)
    y = rng.normal(size=dot.plates)
    c1 = rng.normal(size=dot.plates)
    for _ in range(3):
        s1, s2 = dot.moment_sums(None, y, (), dot.plates)
        mx, Sx = _full(X, dot.plates)
        mw, Sw = _full(W, dot.plates)
        np.testing.assert_allclose(s1, np.sum(y * np.einsum("...k,...k->...", mw, mx)), rtol=1e-12)
        np.testing.assert_allclose(s2, np.sum(np.einsum("...kl,...kl->...", Sw, Sx)), rtol=1e-12)
        got = dot.backward((c1, np.asarray(1.0)), W)
        np.testing.assert_allclose(got[0], _reduce(c1[..., None] * mx, (4, 1), 1), rtol=1e-12)
        X.set_natural(_latent((6,), rng, "X2").nat)     # a new q of X (new arrays)


def test_pca_fit_equals_the_general_path(monkeypatch):
    """A whole PCA fit through the plan equals the same fit with the plan switched off
    (every product through plates.wsum), sweep by sweep, to 1e-12."""
    import blrgraph.graph.deterministic as det

    def fit():
        rng = np.random.default_rng(3)
        M, N, k = 8, 30, 3
        Y = rng.normal(size=(M, 2)) @ rng.normal(size=(2, N)) + 0.3 * rng.normal(size=(M, N))
        alpha = bg.Gamma(1e-2, 1e-2, plates=(k,), name="alpha")
        W = bg.MultivariateNormal(np.zeros(k), alpha, plates=(M, 1), name="W")
        X = bg.MultivariateNormal(np.zeros(k), np.eye(k), plates=(N,), name="X")
        tau = bg.Gamma(1e-2, 1e-2, name="tau")
        y = bg.Normal(bg.Dot(W, X), tau, name="Y").observe(Y)
        X.start_from(rng.normal(size=(N, k)), np.eye(k))
        W.start_from(rng.normal(size=(M, 1, k)), np.eye(k))
        model = bg.Model(y, schedule=[X, tau, alpha, W])
        return np.array(model.fit("vmp", max_iter=25, tol=0, rotate=False).elbo_trace)

    planned = fit()
    monkeypatch.setattr(det, "plan_of", lambda dot: None)
    general = fit()
    np.testing.assert_allclose(planned, general, rtol=1e-12)


def _shared_latent(plates, rng, name, alpha=None):
    """A q whose entries share one precision (a broadcast view: PCA's scores and
    loadings), with random means."""
    prior = np.eye(K) if alpha is None else alpha
    v = bg.MultivariateNormal(np.zeros(K), prior, plates=plates, name=name)
    A = rng.normal(size=(K, K))
    v.start_from(rng.normal(size=plates + (K,)), A @ A.T + K * np.eye(K))
    v.start(rng)
    return v


def test_shared_sums_and_entropy_total():
    """MultivariateNormal.shared_sums: (E[V], Sigma, n Sigma + E[V]^T E[V]) of a q whose
    entries share one precision, equal to the per-entry moments summed; entropy_total the
    entries' entropies summed (n H of one entry); a q without one shared precision: None,
    and entropy_total still the sum."""
    rng = np.random.default_rng(5)
    X = _shared_latent((6,), rng, "X")
    fam = X.family
    V, cov, S = fam.shared_sums(X.nat)
    m, mm = X.moments()
    np.testing.assert_allclose(V, m.reshape(6, K), rtol=1e-14)
    np.testing.assert_allclose(S, mm.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(cov, np.linalg.inv(-2.0 * X.nat[1][0]), rtol=1e-12)
    assert fam.shared_sums(X.nat) is fam.shared_sums(X.nat)          # once per q
    np.testing.assert_allclose(fam.entropy_total(X.nat), np.sum(fam.entropy(X.nat)), rtol=1e-13)
    Z = _latent((6,), rng, "Z")                                        # one precision each
    assert Z.family.shared_sums(Z.nat) is None
    np.testing.assert_allclose(Z.family.entropy_total(Z.nat), np.sum(Z.family.entropy(Z.nat)),
                               rtol=1e-13)


def test_the_first_sum_from_a_kept_message_product():
    """A message to one operand keeps c1 E[V_other] (per c1 and q); the first sum told
    that c1 = c y (``scaled``) is then <c1 E[V_w], E[V_x]> / c, without a product of y,
    equal to the dense sum; after the other operand's q changes, the kept product is
    not used."""
    rng = np.random.default_rng(6)
    W, X = _shared_latent((4, 1), rng, "W"), _shared_latent((6,), rng, "X")
    dot = bg.Dot(W, X)
    plan = plan_of(dot)
    y = rng.normal(size=dot.plates)
    c = 2.5
    c1 = c * y
    for _ in range(2):
        dot.backward((c1, np.asarray(-0.5 * c)), X)      # keeps c1 E[V_w]
        X.set_natural(_shared_latent((6,), rng, "X2").nat)
        s1, s2 = dot.moment_sums(None, y, (), dot.plates, scaled=(c, c1))
        assert all(d is None or d[0] is not y for d in plan._data)   # no product of y
        mx, Sx = _full(X, dot.plates)
        mw, Sw = _full(W, dot.plates)
        np.testing.assert_allclose(s1, np.sum(y * np.einsum("...k,...k->...", mw, mx)),
                                   rtol=1e-12)
        np.testing.assert_allclose(s2, np.sum(np.einsum("...kl,...kl->...", Sw, Sx)), rtol=1e-12)
        W.set_natural(_shared_latent((4, 1), rng, "W2").nat)   # the kept product is stale
        s1, _ = dot.moment_sums(None, y, (), dot.plates, scaled=(c, c1))
        mw = _full(W, dot.plates)[0]
        np.testing.assert_allclose(s1, np.sum(y * np.einsum("...k,...k->...", mw, mx)),
                                   rtol=1e-12)


def test_ard_message_from_shared_sums_equals_the_entrywise_message(monkeypatch):
    """The ARD precision's message from loadings whose entries share one covariance
    (DiagonalGammaFactor._shared_message: diag S and the column sums of E[V]) equals the
    message from the per-entry moments, for a zero and a nonzero prior mean."""
    from blrgraph.graph.base import _LazyMoments
    from blrgraph.graph.factors.gaussian import DiagonalGammaFactor
    rng = np.random.default_rng(7)
    for mean in (np.zeros(K), rng.normal(size=K)):
        alpha = bg.Gamma(2.0, 3.0, plates=(K,), name="alpha")
        W = bg.MultivariateNormal(mean, alpha, plates=(5, 1), name="W")
        A = rng.normal(size=(K, K))
        W.start_from(rng.normal(size=(5, 1, K)), A @ A.T + K * np.eye(K))
        W.start(rng)
        f = W.factor
        assert isinstance(f, DiagonalGammaFactor)
        u = _LazyMoments(f.parents)
        got = f.message(1, W.child_data(), u, None, alpha.plates)
        monkeypatch.setattr(DiagonalGammaFactor, "_shared_message", lambda *a: None)
        want = f.message(1, W.child_data(), _LazyMoments(f.parents), None, alpha.plates)
        monkeypatch.undo()
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
            assert np.shape(g) == np.shape(w)
