"""Gates (docs/latent_products.md): ``bg.Gate(z, node, axis=-1)``, a latent Categorical z
selecting one of the K entries of any node along a plate axis.

* On observed data, ``Normal(Gate(z, theta))`` is the mixture ``Mixture(z, Normal, theta)``:
  from the same start the ELBO traces agree to 1e-12 (two code paths: the gate's averaged
  moments vs the mixture's statistics matrix), also with the components on the first
  plate axis (``axis=0``, BayesPy's ``cluster_plate``) against the (D, K) layout.
* Over a latent node and nested (Gate of a Gate), the messages through the gate to the
  node and to each selector equal finite differences of the child's expected
  log-likelihood (tests/test_messages.py), and the VMP trace never decreases.
"""
from __future__ import annotations

import numpy as np
import pytest

import blrgraph as bg
from blrgraph.inference.blr import incoming
from test_messages import RTOL, _fd_through


def _check_through(model, child, node):
    msg = incoming(model, node)
    fd = _fd_through(child, node)
    for k, (m, g) in enumerate(zip(msg, fd)):
        m = np.broadcast_to(np.asarray(m, dtype=float), g.shape)
        scale = max(1.0, float(np.max(np.abs(g))))
        np.testing.assert_allclose(m, g, rtol=RTOL, atol=RTOL * scale,
                                   err_msg=f"{child.name} -> {node.name}, component {k}")


def _data(rng, N=150):
    return np.concatenate([rng.normal(-3, 1, N // 3), rng.normal(0, 0.5, N // 3),
                           rng.normal(4, 1.5, N - 2 * (N // 3))])


@pytest.mark.parametrize("masked", [False, True])
def test_gate_on_data_is_the_mixture(masked):
    """The traces agree to 1e-12, also with 10% masked cells: a masked row's z integrates
    out through the gate as through the mixture (``Gate.entries_reached_in``; before, the
    gate kept those z's as mean-field latents, 0.1 nats below the exact bound)."""
    rng = np.random.default_rng(0)
    X = _data(rng)
    if masked:
        X[rng.random(X.size) < 0.1] = np.nan
    mask = ~np.isnan(X)
    traces = []
    for gate in (True, False):
        w = bg.Dirichlet(np.ones(3), name="w")
        th = bg.NormalGamma(0.0, 0.01, 1.0, 1.0, plates=(3,), name="theta")
        z = bg.Categorical(w, plates=(X.size,), name="z")
        y = (bg.Normal(bg.Gate(z, th), name="y") if gate else
             bg.Mixture(z, bg.Normal, th, name="y")).observe(X, mask=mask)
        traces.append(bg.Model(y, schedule=[w, th, z]).fit("vmp", seed=3, max_iter=30, tol=0,
                                                           init="random").elbo_trace)
    np.testing.assert_allclose(traces[0], traces[1], rtol=1e-12)
    assert np.all(np.diff(traces[0]) >= -1e-10 * np.abs(traces[0][1:]))


def test_gate_component_axis_first_is_the_column_mixture():
    """z plates (N, 1), data (N, D): Gate(z, mu, axis=0) with mu plates (K, D) against
    Mixture(z, Normal, mu', tau) with mu' plates (D, K) (the same priors)."""
    rng = np.random.default_rng(1)
    N, D, K = 60, 3, 2
    lab = rng.integers(0, K, N)
    X = rng.normal(size=(N, D)) + 3.0 * lab[:, None]
    traces = []
    for gate in (True, False):
        w = bg.Dirichlet(np.ones(K), name="w")
        z = bg.Categorical(w, plates=(N, 1), name="z")
        if gate:
            mu = bg.Normal(0.0, 0.01, plates=(K, D), name="mu")
            y = bg.Normal(bg.Gate(z, mu, axis=0), 1.0, name="y").observe(X)
        else:
            mu = bg.Normal(0.0, 0.01, plates=(D, K), name="mu")
            y = bg.Mixture(z, bg.Normal, mu, 1.0, name="y").observe(X)
        traces.append(bg.Model(y, schedule=[w, mu, z]).fit("vmp", seed=5, max_iter=6, tol=0,
                                                           init="random").elbo_trace)
    np.testing.assert_allclose(traces[0], traces[1], rtol=1e-12)


def test_gate_over_a_latent_node_messages():
    """A mixture over latent values: x_n ~ N(mu_{z_n}, 1) latent, y_nj ~ N(x_n, tau)
    observed (a Mixture node needs observed data; a gate does not)."""
    rng = np.random.default_rng(2)
    N, K = 12, 2
    w = bg.Dirichlet(np.ones(K), name="w")
    mu = bg.Normal(0.0, 0.1, plates=(K,), name="mu")
    z = bg.Categorical(w, plates=(N,), name="z")
    x = bg.Normal(bg.Gate(z, mu), 1.0, name="x")
    tau = bg.Gamma(2.0, 1.0, name="tau")
    y = bg.Normal(x, tau, plates=(4, N), name="y").observe(
        rng.normal(size=(4, N)) + np.where(np.arange(N) < 6, -2.0, 2.0))
    model = bg.Model(y)
    res = model.fit("vmp", seed=0, max_iter=40, tol=0)
    tr = res.elbo_trace
    assert np.all(np.diff(tr) >= -1e-10 * np.abs(tr[1:]))
    _check_through(model, x, mu)
    _check_through(model, x, z)
    assert np.ptp(mu.posterior.mean) > 2.0        # the two components separated


def test_nested_gates_messages():
    """x = node[z1, z2]: Gate(z1, Gate(z2, m)) with m plates (K1, K2)."""
    rng = np.random.default_rng(3)
    N, K1, K2 = 10, 2, 3
    m = bg.Normal(0.0, 0.1, plates=(K1, K2), name="m")
    z1 = bg.Categorical(np.ones(K1) / K1, plates=(N,), name="z1")
    z2 = bg.Categorical(np.ones(K2) / K2, plates=(N, 1), name="z2")
    inner = bg.Gate(z2, m)                       # plates (N, K1)
    y = bg.Normal(bg.Gate(z1, inner), 2.0, name="y").observe(rng.normal(size=N) * 3)
    model = bg.Model(y)
    res = model.fit("vmp", seed=1, max_iter=30, tol=0)
    assert np.all(np.diff(res.elbo_trace) >= -1e-10 * np.abs(res.elbo_trace[1:]))
    for node in (m, z1, z2):
        _check_through(model, y, node)


def test_gate_refusals():
    z = bg.Categorical(np.ones(3) / 3, plates=(5,), name="z")
    mu = bg.Normal(0.0, 1.0, plates=(3,), name="mu")
    tau = bg.Gamma(1.0, 1.0, plates=(3,), name="tau")
    with pytest.raises(ValueError, match="3 categories but"):
        bg.Gate(z, bg.Normal(0.0, 1.0, plates=(4,), name="mu4"))
    with pytest.raises(TypeError, match="Categorical"):
        bg.Gate(mu, tau)
    with pytest.raises(ValueError, match="no plates"):
        bg.Gate(z, bg.Normal(0.0, 1.0, name="m0"))
    with pytest.raises(ValueError, match="same z"):
        bg.Normal(bg.Gate(z, mu), bg.Gate(z, tau), name="y")
