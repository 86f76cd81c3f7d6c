"""Conjugate messages are gradients (docs/math.md §1.1, §3.2).

For every conjugate factor p(x | parents), the message to parent slot i must be

    g_i = grad_{u_i} sum_n w_n E_q[log p(x_n | parents)]

where u_i are the parent's mean parameters (its ``moments()``), w_n the per-entry
weights (mask x counts [x responsibilities]) and the sum runs over the child's
plate entries, reduced onto the parent's plates by the gradient itself.

The gradient is computed here by central finite differences of the factor's own
``expected_loglik(x, u)``; the factor's ``message(i, x, u, w, target_plates)`` is a
separate code path (hand-written formulas, einsum reductions, bincounts).  The
expected log-likelihood of a conjugate factor is linear in each parent's moments,
so the differences are exact up to rounding.

Matrix moments are perturbed entry by entry, each entry independent (docs/math.md §0).
For a symmetric matrix argument only the symmetric part of that entrywise gradient
is defined by the function on symmetric matrices (x^T L m and m^T L x agree there
but not off it), so the finite-difference gradient is symmetrised before the
comparison, and the message itself must be symmetric.

Parents' moments are taken after a fit (so they are posterior moments, not the
prior's), and each model also has a latent child, masks or counts where the
factor supports them.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blrgraph as bg
from blrgraph.graph.node import Constant
from blrgraph.inference.blr import incoming

RTOL = 1e-6


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def rng_for(seed):
    return np.random.default_rng(seed)


def random_spd(rng, D, scale=1.0):
    A = rng.normal(size=(D, D))
    return scale * (A @ A.T / D + 0.5 * np.eye(D))


def weighted_loglik(factor, x, u, w):
    """sum_n w_n E[log p(x_n | parents)] (masked entries contribute nothing)."""
    ll = np.broadcast_to(np.asarray(factor.expected_loglik(x, u), dtype=float), x.plates)
    if w is not None:
        w = np.broadcast_to(np.asarray(w, dtype=float), x.plates)
        ll = np.where(w != 0, ll, 0.0) * w
    return float(np.sum(ll))


def fd_gradient(factor, x, u, w, i):
    """Central differences of weighted_loglik with respect to each array of u[i]."""
    grads = []
    for c, comp in enumerate(u[i]):
        comp = np.array(comp, dtype=float)
        g = np.zeros_like(comp)
        h = 1e-3 * max(1.0, float(np.max(np.abs(comp))))
        for idx in np.ndindex(*comp.shape):
            vals = []
            for sgn in (1.0, -1.0):
                pert = comp.copy()
                pert[idx] += sgn * h
                ui = tuple(pert if k == c else a for k, a in enumerate(u[i]))
                uu = list(u)
                uu[i] = ui
                vals.append(weighted_loglik(factor, x, uu, w))
            g[idx] = (vals[0] - vals[1]) / (2.0 * h)
        grads.append(g)
    return grads


def check_messages(child, slots=None, min_checked=1):
    """Every random parent slot of ``child``: message == finite-difference gradient.

    Returns the number of slots checked (so a test can insist it checked some)."""
    factor = child.factor
    x = child.child_data()
    u = [p.moments() for p in factor.parents]
    event = [p.provides.event_ndims for p in factor.parents]
    checked = 0
    for i, parent in enumerate(factor.parents):
        if isinstance(parent, Constant) or (slots is not None and i not in slots):
            continue
        w = child.message_weight(parent)
        msg = factor.message(i, x, u, w, parent.plates)
        fd = fd_gradient(factor, x, u, w, i)
        assert len(msg) == len(fd) == len(u[i])
        for c, (m, g, k) in enumerate(zip(msg, fd, event[i])):
            m = np.broadcast_to(np.asarray(m, dtype=float), g.shape)
            if k == 2:
                assert np.allclose(m, np.swapaxes(m, -1, -2), rtol=1e-12, atol=1e-12), \
                    f"{child.name} -> {parent.name}: message component {c} not symmetric"
                g = 0.5 * (g + np.swapaxes(g, -1, -2))
            scale = max(1.0, float(np.max(np.abs(g))))
            np.testing.assert_allclose(
                m, g, rtol=RTOL, atol=RTOL * scale,
                err_msg=f"message {child.name} -> {parent.name} (slot {i}), component {c}")
        checked += 1
    assert checked >= min_checked
    return checked


def fit(*obs, method="vmp", **kw):
    kw.setdefault("max_iter", 30)
    kw.setdefault("tol", 1e-10)
    return bg.Model(*obs).fit(method, seed=0, **kw)


# --------------------------------------------------------------------------
# univariate Gaussian children
# --------------------------------------------------------------------------
def test_normal_child_to_normal_mean_and_gamma_precision():
    rng = rng_for(1)
    A, N = 3, 7
    mu = bg.Normal(0.5, 0.3, plates=(A,), name="mu")
    tau = bg.Gamma(2.0, 1.5, name="tau")
    y = bg.Normal(mu, tau, plates=(N, A), name="y").observe(rng.normal(1.0, 1.3, (N, A)))
    fit(y)
    assert check_messages(y) == 2


def test_normal_messages_with_mask_and_weights():
    rng = rng_for(2)
    N = 12
    data = rng.normal(size=N)
    mask = rng.random(N) < 0.7
    data[~mask] = np.nan
    mu = bg.Normal(0.0, 1.0, name="mu")
    tau = bg.Gamma(3.0, 2.0, name="tau")
    y = bg.Normal(mu, tau, plates=(N,), name="y").observe(data, mask=mask,
                                                          weights=rng.integers(1, 4, N))
    fit(y)
    assert y.message_weight(mu) is not None
    assert check_messages(y) == 2


def test_latent_normal_child_messages():
    """A latent child sends messages with its moments (E[x], E[x^2]), not data."""
    rng = rng_for(3)
    m = bg.Normal(0.0, 0.5, name="m")
    s = bg.Gamma(2.0, 2.0, name="s")
    z = bg.Normal(m, s, plates=(4,), name="z")
    y = bg.Normal(z, 3.0, plates=(6, 4), name="y").observe(rng.normal(size=(6, 4)))
    fit(y)
    assert z.child_data().value is None
    assert check_messages(z) == 2
    assert check_messages(y) == 1  # y -> z (z is y's mean)


def test_normal_child_to_normal_gamma():
    rng = rng_for(4)
    th = bg.NormalGamma(0.2, 1.5, 2.0, 3.0, plates=(2,), name="theta")
    y = bg.Normal(th, plates=(9, 2), name="y").observe(rng.normal(0.0, 2.0, (9, 2)))
    fit(y, method="conjugate")
    assert check_messages(y) == 1


# --------------------------------------------------------------------------
# multivariate Gaussian children
# --------------------------------------------------------------------------
def test_mvn_child_to_mvn_mean_and_wishart():
    rng = rng_for(5)
    D, N = 3, 8
    mu = bg.MultivariateNormal(rng.normal(size=D), random_spd(rng, D), name="mu")
    Lam = bg.Wishart(D + 2.0, random_spd(rng, D, 0.3), name="Lam")
    y = bg.MultivariateNormal(mu, Lam, plates=(N,), name="y").observe(rng.normal(size=(N, D)))
    fit(y)
    assert check_messages(y) == 2


def test_mvn_plated_parents_and_latent_child():
    rng = rng_for(6)
    D, G, N = 2, 3, 5
    mu = bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(G,), name="mu")
    Lam = bg.Wishart(D + 1.0, np.eye(D), name="Lam")
    z = bg.MultivariateNormal(mu, Lam, plates=(G,), name="z")
    y = bg.MultivariateNormal(z, 4.0 * np.eye(D), plates=(N, G), name="y").observe(
        rng.normal(size=(N, G, D)))
    fit(y)
    assert z.child_data().value is None
    assert check_messages(z) == 2
    assert check_messages(y) == 1


def test_mvn_child_to_normal_wishart():
    rng = rng_for(7)
    D, N = 3, 10
    X = rng.normal(size=(N, D))
    mask = np.ones(N, bool)
    mask[[2, 5]] = False
    X[~mask] = np.nan
    th = bg.NormalWishart(np.zeros(D), 1.0, D + 1.0, np.eye(D), name="theta")
    y = bg.MultivariateNormal(th, plates=(N,), name="y").observe(X, mask=mask)
    fit(y, method="conjugate")
    assert check_messages(y) == 1


@pytest.mark.parametrize("tau_plates", [(), (3,)], ids=["isotropic", "ard"])
def test_mvn_child_to_gamma_precision(tau_plates):
    """DiagonalGammaFactor: the coordinate axis of the MVN is a plate axis of tau."""
    rng = rng_for(8)
    D, N = 3, 6
    w = bg.MultivariateNormal(np.zeros(D), np.eye(D), name="w")
    tau = bg.Gamma(2.0, 1.0, plates=tau_plates, name="tau")
    z = bg.MultivariateNormal(w, tau, plates=(N,), name="z")
    y = bg.MultivariateNormal(z, 2.0 * np.eye(D), plates=(N,), name="y").observe(
        rng.normal(size=(N, D)))
    fit(y)
    assert check_messages(z) == 2  # latent child
    obs = bg.MultivariateNormal(w, tau, plates=(N,), name="obs").observe(rng.normal(size=(N, D)))
    fit(obs)
    assert check_messages(obs) == 2  # observed child


# --------------------------------------------------------------------------
# Gamma-rate parents
# --------------------------------------------------------------------------
def test_gamma_child_to_gamma_rate():
    rng = rng_for(9)
    b = bg.Gamma(2.0, 1.0, plates=(2,), name="b")
    tau = bg.Gamma(np.array([1.5, 3.0]), b, plates=(4, 2), name="tau")  # latent Gamma child
    y = bg.Normal(0.0, tau, plates=(5, 4, 2), name="y").observe(rng.normal(size=(5, 4, 2)))
    fit(y)
    assert tau.child_data().value is None
    assert check_messages(tau) == 1
    g = bg.Gamma(2.5, b, plates=(6, 2), name="g").observe(rng.gamma(2.0, 1.0, (6, 2)))
    fit(g)
    assert check_messages(g) == 1


def test_poisson_and_exponential_to_gamma():
    rng = rng_for(10)
    lam = bg.Gamma(2.0, 0.5, plates=(3,), name="lam")
    counts = rng.poisson(4.0, (7, 3)).astype(float)
    mask = rng.random((7, 3)) < 0.8
    counts[~mask] = np.nan
    y = bg.Poisson(lam, plates=(7, 3), name="y").observe(counts, mask=mask)
    fit(y)
    assert check_messages(y) == 1
    r = bg.Gamma(1.5, 2.0, name="r")
    e = bg.Exponential(r, plates=(9,), name="e").observe(rng.exponential(2.0, 9),
                                                        weights=rng.integers(1, 5, 9))
    fit(e)
    assert check_messages(e) == 1


# --------------------------------------------------------------------------
# Beta and Dirichlet parents
# --------------------------------------------------------------------------
def test_bernoulli_and_binomial_to_beta():
    rng = rng_for(11)
    p = bg.Beta(2.0, 3.0, plates=(2,), name="p")
    x = bg.Bernoulli(p, plates=(10, 2), name="x").observe(rng.integers(0, 2, (10, 2)))
    fit(x)
    assert check_messages(x) == 1
    n = rng.integers(1, 9, (6, 2))
    k = bg.Binomial(n, p, name="k").observe(rng.binomial(n, 0.4))
    fit(k)
    assert check_messages(k) == 1


def test_categorical_and_multinomial_to_dirichlet():
    rng = rng_for(12)
    K = 4
    pi = bg.Dirichlet(np.array([1.0, 2.0, 0.5, 1.5]), plates=(2,), name="pi")
    lab = bg.Categorical(pi, plates=(9, 2), name="lab").observe(rng.integers(0, K, (9, 2)),
                                                                weights=rng.integers(1, 3, (9, 2)))
    fit(lab)
    assert check_messages(lab) == 1
    cnt = bg.Multinomial(6, pi, plates=(5, 2), name="cnt").observe(
        rng.multinomial(6, np.ones(K) / K, size=(5, 2)))
    fit(cnt)
    assert check_messages(cnt) == 1


def test_latent_categorical_to_dirichlet():
    """A latent Categorical (mixture assignments) sends E[z] (responsibilities)."""
    rng = rng_for(13)
    K, N = 3, 8
    pi = bg.Dirichlet(np.ones(K), name="pi")
    z = bg.Categorical(pi, plates=(N,), name="z")
    lam = bg.Gamma(1.0, 0.2, plates=(K,), name="lam")
    y = bg.Mixture(z, bg.Poisson, lam, name="y").observe(rng.poisson(5.0, N))
    fit(y)
    assert z.child_data().value is None
    assert check_messages(z) == 1


# --------------------------------------------------------------------------
# mixtures: message to z and to the component parameters
# --------------------------------------------------------------------------
def test_mixture_of_normals_messages():
    rng = rng_for(14)
    K, N = 3, 10
    pi = bg.Dirichlet(np.ones(K), name="pi")
    z = bg.Categorical(pi, plates=(N,), name="z")
    mu = bg.Normal(0.0, 0.1, plates=(K,), name="mu")
    tau = bg.Gamma(2.0, 2.0, plates=(K,), name="tau")
    data = np.concatenate([rng.normal(-3, 1, 5), rng.normal(3, 1, 5)])
    y = bg.Mixture(z, bg.Normal, mu, tau, name="y").observe(data)
    fit(y)
    np.testing.assert_allclose(z.moments()[0].sum(-1), 1.0)  # responsibilities
    assert check_messages(y) == 3  # z, mu, tau


def test_mixture_of_mvn_normal_wishart_messages():
    rng = rng_for(15)
    K, N, D = 2, 8, 2
    pi = bg.Dirichlet(np.ones(K), name="pi")
    z = bg.Categorical(pi, plates=(N,), name="z")
    th = bg.NormalWishart(np.zeros(D), 1.0, D + 2.0, np.eye(D), plates=(K,), name="theta")
    X = rng.normal(size=(N, D))
    mask = np.ones(N, bool)
    mask[3] = False
    X[3] = np.nan
    y = bg.Mixture(z, bg.MultivariateNormal, th, name="y").observe(X, mask=mask)
    fit(y)
    assert check_messages(y) == 2  # z, theta


def test_mixture_of_mvn_mean_wishart_messages():
    rng = rng_for(16)
    K, N, D = 2, 7, 2
    z = bg.Categorical(bg.Dirichlet(np.ones(K), name="pi"), plates=(N,), name="z")
    mu = bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(K,), name="mu")
    Lam = bg.Wishart(D + 1.0, np.eye(D), plates=(K,), name="Lam")
    y = bg.Mixture(z, bg.MultivariateNormal, mu, Lam, name="y").observe(rng.normal(size=(N, D)))
    fit(y)
    assert check_messages(y) == 3


def test_mixture_of_poissons_and_bernoullis_messages():
    rng = rng_for(17)
    K, N = 3, 9
    z = bg.Categorical(bg.Dirichlet(np.ones(K), name="pi"), plates=(N,), name="z")
    lam = bg.Gamma(1.0, 0.3, plates=(K,), name="lam")
    y = bg.Mixture(z, bg.Poisson, lam, name="y").observe(rng.poisson(3.0, N),
                                                         weights=rng.integers(1, 3, N))
    fit(y)
    assert check_messages(y) == 2
    z2 = bg.Categorical(bg.Dirichlet(np.ones(K), name="pi2"), plates=(N,), name="z2")
    p = bg.Beta(1.0, 1.0, plates=(K,), name="p")
    b = bg.Mixture(z2, bg.Bernoulli, p, name="b").observe(rng.integers(0, 2, N))
    fit(b)
    assert check_messages(b) == 2


def _z(K, N):
    return bg.Categorical(bg.Dirichlet(np.ones(K), name="pi"), plates=(N,), name="z")


MIXTURES = {
    "categorical": lambda r, K, N, D: bg.Mixture(
        _z(K, N), bg.Categorical, bg.Dirichlet(np.ones(4), plates=(K,), name="phi"),
        name="y").observe(r.integers(0, 4, N)),
    "normal_gamma": lambda r, K, N, D: bg.Mixture(
        _z(K, N), bg.Normal, bg.NormalGamma(0.0, 1.0, 2.0, 2.0, plates=(K,), name="th"),
        name="y").observe(r.normal(size=N)),
    "mvn_ard_gamma": lambda r, K, N, D: bg.Mixture(
        _z(K, N), bg.MultivariateNormal,
        bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(K,), name="m"),
        bg.Gamma(2.0, 1.0, plates=(K, D), name="t"), name="y").observe(r.normal(size=(N, D))),
    "mvn_isotropic_gamma": lambda r, K, N, D: bg.Mixture(
        _z(K, N), bg.MultivariateNormal,
        bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(K,), name="m"),
        bg.Gamma(2.0, 1.0, plates=(K, 1), name="t"), name="y").observe(r.normal(size=(N, D))),
    "mvn_wishart_known_mean": lambda r, K, N, D: bg.Mixture(
        _z(K, N), bg.MultivariateNormal, np.zeros(D),
        bg.Wishart(D + 1.0, np.eye(D), plates=(K,), name="L"), name="y").observe(
        r.normal(size=(N, D))),
    "exponential": lambda r, K, N, D: bg.Mixture(
        _z(K, N), bg.Exponential, bg.Gamma(2.0, 1.0, plates=(K,), name="l"),
        name="y").observe(r.exponential(size=N)),
    "gamma": lambda r, K, N, D: bg.Mixture(
        _z(K, N), bg.Gamma, 2.0, bg.Gamma(2.0, 1.0, plates=(K,), name="b"),
        name="y").observe(r.gamma(2.0, 1.0, N)),
    "binomial": lambda r, K, N, D: bg.Mixture(
        _z(K, N), bg.Binomial, 5, bg.Beta(1.0, 1.0, plates=(K,), name="p"),
        name="y").observe(r.integers(0, 6, N)),
    "multinomial": lambda r, K, N, D: bg.Mixture(
        _z(K, N), bg.Multinomial, 5, bg.Dirichlet(np.ones(3), plates=(K,), name="p"),
        name="y").observe(r.multinomial(5, [0.2, 0.3, 0.5], N)),
}


@pytest.mark.parametrize("case", sorted(MIXTURES))
def test_mixture_component_kinds(case):
    """Every conjugate component inside the gate: messages to z and to theta_k."""
    y = MIXTURES[case](rng_for(21), 3, 8, 2)
    fit(y)
    n_random = sum(not isinstance(p, Constant) for p in y.factor.parents)
    assert check_messages(y) == n_random >= 2


# --------------------------------------------------------------------------
# deterministic nodes: the message through Dot / Gather is the chain rule
# --------------------------------------------------------------------------
def _total_loglik_of(child, parent_node, moments):
    """sum_n w_n E[log p(child_n | ...)] with parent_node's moments replaced."""
    orig = parent_node.moments
    parent_node.moments = lambda: moments
    try:
        factor = child.factor
        u = [p.moments() for p in factor.parents]
        return weighted_loglik(factor, child.child_data(), u, child.message_weight(parent_node))
    finally:
        parent_node.moments = orig


def _fd_through(child, node):
    mom = tuple(np.array(a, dtype=float) for a in node.moments())
    grads = []
    for c, comp in enumerate(mom):
        g = np.zeros_like(comp)
        h = 1e-3 * max(1.0, float(np.max(np.abs(comp))))
        for idx in np.ndindex(*comp.shape):
            vals = []
            for sgn in (1.0, -1.0):
                pert = comp.copy()
                pert[idx] += sgn * h
                mm = tuple(pert if k == c else a for k, a in enumerate(mom))
                vals.append(_total_loglik_of(child, node, mm))
            g[idx] = (vals[0] - vals[1]) / (2.0 * h)
        grads.append(g)
    return grads


def test_dot_backward_is_the_chain_rule():
    rng = rng_for(18)
    N, P = 9, 3
    X = rng.normal(size=(N, P))
    w = bg.MultivariateNormal(np.zeros(P), np.eye(P), name="w")
    tau = bg.Gamma(2.0, 1.0, name="tau")
    y = bg.Normal(bg.Dot(X, w), tau, name="y").observe(rng.normal(size=N))
    model = bg.Model(y)
    model.fit("vmp", max_iter=20)
    msg = incoming(model, w)
    fd = _fd_through(y, w)
    np.testing.assert_allclose(msg[0], fd[0], rtol=RTOL, atol=RTOL)
    np.testing.assert_allclose(msg[1], 0.5 * (fd[1] + fd[1].T), rtol=RTOL, atol=RTOL)


def test_gather_backward_is_the_chain_rule():
    rng = rng_for(19)
    G = 3
    idx = np.array([0, 2, 2, 1, 0, 2, 2])
    lam = bg.Gamma(2.0, 1.0, plates=(G,), name="lam")
    y = bg.Poisson(lam[idx], name="y").observe(rng.poisson(3.0, idx.size))
    model = bg.Model(y)
    model.fit("conjugate")
    msg = incoming(model, lam)
    fd = _fd_through(y, lam)
    for m, g in zip(msg, fd):
        np.testing.assert_allclose(m, g, rtol=RTOL, atol=RTOL)
    # and the sum is per group: group 2 has 4 entries, rate message -(count)
    np.testing.assert_allclose(msg[1], -np.bincount(idx, minlength=G))


def test_fd_check_detects_a_wrong_message():
    """The harness itself can fail: a message off by a factor is caught."""
    rng = rng_for(20)
    lam = bg.Gamma(2.0, 1.0, name="lam")
    y = bg.Poisson(lam, plates=(5,), name="y").observe(rng.poisson(3.0, 5))
    fit(y)
    orig = y.factor.message

    def wrong(i, x, u, w, target):
        a, b = orig(i, x, u, w, target)
        return a, 1.01 * b

    y.factor.message = wrong
    with pytest.raises(AssertionError):
        check_messages(y)


# --------------------------------------------------------------------------
# hypothesis: broadcasting parent plates against child plates (N, A, B)
# --------------------------------------------------------------------------
def _plated_model(kind, pa, pb, rng, N, A, B, D=2):
    shape = (N, A, B)
    if kind == "normal":
        mu = bg.Normal(0.0, 1.0, plates=pa, name="mu")
        tau = bg.Gamma(2.0, 1.0, plates=pb, name="tau")
        return bg.Normal(mu, tau, plates=shape, name="y").observe(rng.normal(size=shape))
    if kind == "mvn":
        mu = bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=pa, name="mu")
        L = bg.Wishart(D + 1.0, np.eye(D), plates=pb, name="L")
        return bg.MultivariateNormal(mu, L, plates=shape, name="y").observe(
            rng.normal(size=shape + (D,)))
    if kind == "normal_wishart":
        th = bg.NormalWishart(np.zeros(D), 1.0, D + 1.0, np.eye(D), plates=pa, name="th")
        return bg.MultivariateNormal(th, plates=shape, name="y").observe(
            rng.normal(size=shape + (D,)))
    if kind == "normal_gamma":
        th = bg.NormalGamma(0.0, 1.0, 2.0, 1.0, plates=pa, name="th")
        return bg.Normal(th, plates=shape, name="y").observe(rng.normal(size=shape))
    if kind == "bernoulli":
        p = bg.Beta(1.0, 1.0, plates=pa, name="p")
        return bg.Bernoulli(p, plates=shape, name="y").observe(rng.integers(0, 2, shape))
    if kind == "categorical":
        p = bg.Dirichlet(np.ones(3), plates=pa, name="p")
        return bg.Categorical(p, plates=shape, name="y").observe(rng.integers(0, 3, shape))
    if kind == "multinomial":
        p = bg.Dirichlet(np.ones(3), plates=pa, name="p")
        return bg.Multinomial(4, p, plates=shape, name="y").observe(
            rng.multinomial(4, [0.2, 0.3, 0.5], shape))
    if kind == "gamma":
        b = bg.Gamma(2.0, 1.0, plates=pa, name="b")
        return bg.Gamma(3.0, b, plates=shape, name="y").observe(rng.gamma(2.0, 1.0, shape))
    raise AssertionError(kind)


KINDS = ["normal", "mvn", "normal_wishart", "normal_gamma", "bernoulli", "categorical",
         "multinomial", "gamma"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(KINDS), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
       st.integers(0, 4), st.integers(0, 4), st.booleans(), st.integers(0, 2**31 - 1))
def test_messages_with_broadcast_plates(kind, N, A, B, ca, cb, masked, seed):
    rng = rng_for(seed)
    plates = [(A, B), (B,), (A, 1), (1, B), ()]
    y = _plated_model(kind, plates[ca], plates[cb], rng, N, A, B)
    if masked:  # re-observe the same data with a mask and counts
        data = np.array(y.value, dtype=float)
        mask = rng.random((N, A, B)) < 0.7
        data[~mask] = np.nan
        y.observe(data, mask=mask, weights=rng.integers(1, 4, (N, A, B)))
    fit(y, max_iter=5)
    check_messages(y)
