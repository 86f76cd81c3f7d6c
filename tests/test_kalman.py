"""GaussianMarkovChain: q over a whole linear-Gaussian state sequence (docs/kalman.md).

Oracles:
* fixed parameters: q is exact, so the ELBO equals the Kalman filter's log-likelihood
  and the smoothed means / covariances / lag-one covariances equal the RTS smoother's
  (a covariance-form filter written here; pykalman as a second reference), to 1e-10;
* the family's log partition and moments equal the dense Gaussian's (T D x T D);
* random parents (Wishart / Gamma noise precision, MultivariateNormal rows of A):
  the VMP trace never decreases;
* every message to a parent equals the finite-difference gradient of the chain's
  expected log-likelihood in that parent's mean parameters (tests/test_messages.py).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import multivariate_normal

import blrgraph as bg
from blrgraph.families.base import broadcast_nat
from blrgraph.families import gaussian_markov_chain as gmc
from blrgraph.families.gaussian_markov_chain import GaussianMarkovChain as ChainFamily
from test_messages import check_messages, random_spd

TOL = 1e-10


# --------------------------------------------------------------------------
# the reference: a covariance-form Kalman filter and RTS smoother (H = I)
# --------------------------------------------------------------------------
def kalman_reference(Y, observed, m0, V0, A, Qcov, Rcov, H=None):
    """log p(Y), smoothed means (T, D), covariances (T, D, D) and Cov(x_t, x_{t-1})
    (T, D, D), zero at t = 0, for one sequence (y_t = H x_t + noise, H = I by default);
    ``observed[t]`` False skips y_t."""
    T, D = len(Y), len(m0)
    H = np.eye(D) if H is None else H
    Dy = H.shape[0]
    mf, Vf = np.zeros((T, D)), np.zeros((T, D, D))
    mp, Vp = np.zeros((T, D)), np.zeros((T, D, D))
    ll = 0.0
    m, V = m0, V0
    for t in range(T):
        if t > 0:
            m, V = A @ m, A @ V @ A.T + Qcov
        mp[t], Vp[t] = m, V
        if observed[t]:
            S = H @ V @ H.T + Rcov
            r = Y[t] - H @ m
            ll += -0.5 * (Dy * np.log(2 * np.pi) + np.linalg.slogdet(S)[1] + r @ np.linalg.solve(S, r))
            K = V @ H.T @ np.linalg.inv(S)
            m, V = m + K @ r, V - K @ S @ K.T
        mf[t], Vf[t] = m, V
    ms, Vs, cross = mf.copy(), Vf.copy(), np.zeros((T, D, D))
    for t in range(T - 2, -1, -1):
        G = Vf[t] @ A.T @ np.linalg.inv(Vp[t + 1])
        ms[t] = mf[t] + G @ (ms[t + 1] - mp[t + 1])
        Vs[t] = Vf[t] + G @ (Vs[t + 1] - Vp[t + 1]) @ G.T
        cross[t + 1] = Vs[t + 1] @ G.T
    return ll, ms, Vs, cross


def lgssm(rng, S, T, D, missing=0.0, diagonal_R=False):
    """Parameters and data of a stable D-dimensional linear-Gaussian model."""
    A = rng.normal(size=(D, D))
    A = 0.9 * A / max(1.0, np.max(np.abs(np.linalg.eigvals(A))))
    m0 = rng.normal(size=D)
    P0 = random_spd(rng, D, 0.5)
    Q = random_spd(rng, D, 2.0)
    R = random_spd(rng, D, 1.0)
    if diagonal_R:
        R = np.diag(np.diag(R))
    X = np.zeros((S, T, D))
    X[:, 0] = rng.multivariate_normal(m0, np.linalg.inv(P0), size=S)
    for t in range(1, T):
        X[:, t] = X[:, t - 1] @ A.T + rng.multivariate_normal(np.zeros(D), np.linalg.inv(Q), size=S)
    Y = X + rng.multivariate_normal(np.zeros(D), np.linalg.inv(R), size=(S, T))
    observed = rng.random((S, T)) >= missing
    Y[~observed] = np.nan
    return dict(m0=m0, P0=P0, A=A, Q=Q, R=R), Y, observed


def fixed_chain(p, Y, observed):
    S, T, _ = Y.shape
    xs = bg.GaussianMarkovChain(p["m0"], p["P0"], p["A"], p["Q"], length=T, plates=(S,), name="x")
    y = bg.MultivariateNormal(xs, p["R"], name="y").observe(Y, mask=observed)
    return xs, y


def references(p, Y, observed):
    inv = np.linalg.inv
    return [kalman_reference(Y[s], observed[s], p["m0"], inv(p["P0"]), p["A"], inv(p["Q"]),
                             inv(p["R"])) for s in range(Y.shape[0])]


# --------------------------------------------------------------------------
# the family: block-tridiagonal algebra against the dense Gaussian
# --------------------------------------------------------------------------
def dense(nat):
    h, n2, C = nat
    T, D = h.shape
    J = np.zeros((T * D, T * D))
    for t in range(T):
        J[t * D:(t + 1) * D, t * D:(t + 1) * D] = -(n2[t] + n2[t].T)
        if t:
            J[t * D:(t + 1) * D, (t - 1) * D:t * D] = -C[t]
            J[(t - 1) * D:t * D, t * D:(t + 1) * D] = -C[t].T
    return J, h.ravel()


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 7), D=st.integers(1, 3), S=st.integers(1, 3), seed=st.integers(0, 2**31))
def test_family_matches_dense_gaussian(T, D, S, seed):
    """Random lengths, dimensions (D = 1 takes the scalar path) and numbers of sequences."""
    rng = np.random.default_rng(seed)
    fam = ChainFamily()
    p, _, _ = lgssm(rng, 1, 2, D)
    h, n2, C = fam.natural_from_params(p["m0"], p["P0"], p["A"], p["Q"], T)
    nat = broadcast_nat((h + rng.normal(size=(S, T, D)), n2 - 0.5 * random_spd(rng, D), C),
                        fam.event_ndims)
    m, XX, X10 = fam.mean_params(nat)
    A_t, H_t = fam.log_partition(nat), fam.entropy(nat)
    assert A_t.shape == H_t.shape == (S, T)
    for s in range(S):
        J, hv = dense(tuple(a[s] for a in nat))
        Sig = np.linalg.inv(J)
        mu = Sig @ hv
        logdet = np.linalg.slogdet(J)[1]
        logZ = 0.5 * hv @ mu - 0.5 * logdet + 0.5 * T * D * np.log(2 * np.pi)
        H = 0.5 * T * D * (1 + np.log(2 * np.pi)) - 0.5 * logdet
        np.testing.assert_allclose(A_t[s].sum(), logZ, rtol=1e-12)
        np.testing.assert_allclose(H_t[s].sum(), H, rtol=1e-12)
        E2 = Sig + np.outer(mu, mu)
        for t in range(T):
            b = slice(t * D, (t + 1) * D)
            np.testing.assert_allclose(m[s, t], mu[b], atol=1e-12)
            np.testing.assert_allclose(XX[s, t], E2[b, b], atol=1e-12)
            if t:
                np.testing.assert_allclose(X10[s, t], E2[b, (t - 1) * D:t * D], atol=1e-12)
        np.testing.assert_allclose(fam.cov(nat)[s, t], Sig[b, b], atol=1e-12)
        # log q(x) of a draw: the Gaussian with precision J
        x = fam.sample(nat, rng=rng)[s]
        lq = fam.logpdf(np.broadcast_to(x, (S, T, D)), nat)[s].sum()
        np.testing.assert_allclose(lq, multivariate_normal(mu, Sig).logpdf(x.ravel()), rtol=1e-10)
    assert np.all(X10[:, 0] == 0)


def test_family_gradient_of_log_partition_is_mean():
    """mu = grad A(lam), the coupling component included (central differences)."""
    rng = np.random.default_rng(3)
    fam = ChainFamily()
    p, _, _ = lgssm(rng, 1, 2, 2)
    h, n2, C = fam.natural_from_params(p["m0"], p["P0"], p["A"], p["Q"], 4)
    nat = [h + rng.normal(size=h.shape), n2, C]
    mu = fam.mean_params(tuple(nat))
    eps = 1e-6
    for c, idx in [(0, (2, 1)), (1, (1, 0, 1)), (2, (3, 1, 0)), (2, (2, 0, 0))]:
        vals = []
        for sgn in (1, -1):
            pert = [a.copy() for a in nat]
            pert[c][idx] += sgn * eps
            vals.append(fam.log_partition(tuple(pert)).sum())
        np.testing.assert_allclose((vals[0] - vals[1]) / (2 * eps), mu[c][idx], rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------------------
# fixed parameters: the exact Kalman evidence and RTS smoother
# --------------------------------------------------------------------------
@pytest.mark.parametrize("D,missing", [(1, 0.0), (2, 0.0), (3, 0.3)])
def test_elbo_is_kalman_loglik_and_q_is_rts(D, missing):
    rng = np.random.default_rng(10 + D)
    S, T = 3, 40
    p, Y, obs = lgssm(rng, S, T, D, missing)
    xs, y = fixed_chain(p, Y, obs)
    fit = bg.Model(y).fit("conjugate")
    refs = references(p, Y, obs)
    ll = sum(r[0] for r in refs)
    assert abs(fit.elbo - ll) <= TOL * abs(ll)
    post = xs.posterior
    assert post.mean.shape == (S, T, D) and post.cov.shape == (S, T, D, D)
    for s, (_, ms, Vs, cross) in enumerate(refs):
        np.testing.assert_allclose(post.mean[s], ms, rtol=0, atol=TOL)
        np.testing.assert_allclose(post.cov[s], Vs, rtol=0, atol=TOL)
        np.testing.assert_allclose(post.params["cross_cov"][s], cross, rtol=0, atol=TOL)
    np.testing.assert_allclose(post.var, np.diagonal(post.cov, axis1=-2, axis2=-1))
    # the same from VMP (one exact update, then no change)
    fit2 = bg.Model(y).fit("vmp", max_iter=3)
    np.testing.assert_allclose(fit2.elbo_trace, ll, rtol=TOL)


def test_pykalman_agrees():
    pykalman = pytest.importorskip("pykalman")
    rng = np.random.default_rng(21)
    S, T, D = 1, 60, 2
    p, Y, obs = lgssm(rng, S, T, D, missing=0.2)
    xs, y = fixed_chain(p, Y, obs)
    fit = bg.Model(y).fit("conjugate")
    inv = np.linalg.inv
    kf = pykalman.KalmanFilter(transition_matrices=p["A"], observation_matrices=np.eye(D),
                               transition_covariance=inv(p["Q"]),
                               observation_covariance=inv(p["R"]),
                               initial_state_mean=p["m0"], initial_state_covariance=inv(p["P0"]))
    Ym = np.ma.masked_array(np.nan_to_num(Y[0]), mask=np.repeat(~obs[0][:, None], D, 1))
    means, covs = kf.smooth(Ym)
    np.testing.assert_allclose(xs.posterior.mean[0], means, atol=1e-9)
    np.testing.assert_allclose(xs.posterior.cov[0], covs, atol=1e-9)
    np.testing.assert_allclose(fit.elbo, kf.loglikelihood(Ym), rtol=1e-10)


def test_scalar_observations_through_dot():
    """A local linear trend: y_t = level_t + noise observed by Normal(Dot(H, chain), r),
    H = [1, 0]; exact against the filter with that H (and missing values)."""
    rng = np.random.default_rng(22)
    T = 80
    A = np.array([[1.0, 1.0], [0.0, 1.0]])
    Q, r = np.diag([4.0, 25.0]), 0.7
    m0, P0 = np.array([1.0, 0.0]), np.diag([0.01, 0.1])
    y = np.cumsum(np.cumsum(rng.normal(0, 0.2, T))) + rng.normal(0, 1.2, T)
    obs = rng.random(T) > 0.15
    xs = bg.GaussianMarkovChain(m0, P0, A, Q, length=T, name="x")
    yv = bg.Normal(bg.Dot([1.0, 0.0], xs), r, name="y").observe(np.where(obs, y, 0.0), mask=obs)
    fit = bg.Model(yv).fit("conjugate")
    inv = np.linalg.inv
    ll, ms, Vs, _ = kalman_reference(y[:, None], obs, m0, inv(P0), A, inv(Q), np.eye(1) / r,
                                     H=np.array([[1.0, 0.0]]))
    np.testing.assert_allclose(fit.elbo, ll, rtol=TOL)
    np.testing.assert_allclose(xs.posterior.mean, ms, atol=TOL * np.abs(ms).max())
    np.testing.assert_allclose(xs.posterior.cov, Vs, atol=TOL * np.abs(Vs).max())


def random_walk(T=100, seed=7):
    rng = np.random.default_rng(seed)
    q, r, p0 = 1.0, 4.0, 1.0
    x = np.cumsum(rng.normal(size=T))
    return x + rng.normal(size=T) / np.sqrt(r), q, r, p0


def test_exact_where_one_node_per_step_is_not():
    """100-step random walk: the chain reaches the Kalman evidence and the exact
    smoothed variances; one Normal node per step (mean field) stays below the
    evidence and its variances are 1 / J_tt (the diagonal of the precision), below
    the exact (J^-1)_tt."""
    y, q, r, p0 = random_walk()
    T = len(y)
    xs = bg.GaussianMarkovChain(np.zeros(1), p0 * np.eye(1), np.eye(1), q * np.eye(1), length=T,
                                name="x")
    obs = bg.MultivariateNormal(xs, r * np.eye(1), name="y").observe(y[:, None])
    chain = bg.Model(obs).fit("vmp", max_iter=5)
    ll, _, Vs, _ = kalman_reference(y[:, None], np.ones(T, bool), np.zeros(1), np.eye(1) / p0,
                                    np.eye(1), np.eye(1) / q, np.eye(1) / r)
    np.testing.assert_allclose(chain.elbo, ll, rtol=TOL)
    np.testing.assert_allclose(xs.posterior.var[:, 0], Vs[:, 0, 0], rtol=TOL)

    nodes = [bg.Normal(0.0, p0, name="x0")]
    for t in range(1, T):
        nodes.append(bg.Normal(nodes[-1], q, name=f"x{t}"))
    ys = [bg.Normal(n, r, name=f"y{t}").observe(y[t]) for t, n in enumerate(nodes)]
    mf = bg.Model(*ys).fit("vmp", max_iter=5000, tol=1e-14)
    var_mf = np.array([n.posterior.var for n in nodes])
    Jdiag = np.full(T, r + 2 * q)
    Jdiag[0], Jdiag[-1] = r + p0 + q, r + q
    np.testing.assert_allclose(var_mf, 1 / Jdiag, rtol=1e-12)
    gap = ll - mf.elbo
    assert gap > 1.0                      # measured: 1.439 nats
    ratio = np.mean(var_mf / Vs[:, 0, 0])
    assert ratio < 0.96                   # measured: 0.943
    print(f"mean field: {gap:.3f} nats below the evidence, variances {ratio:.4f} x exact")


# --------------------------------------------------------------------------
# random parents: monotone VMP
# --------------------------------------------------------------------------
def _monotone(trace):
    d = np.diff(trace)
    assert np.all(d >= -1e-9 * np.abs(trace[1:])), d.min()


@pytest.mark.parametrize("noise", ["wishart", "gamma", "gamma_isotropic"])
def test_learned_parameters_vmp_monotone(noise):
    rng = np.random.default_rng(30)
    S, T, D = 4, 50, 2
    p, Y, obs = lgssm(rng, S, T, D, missing=0.1, diagonal_R=True)
    mu0 = bg.MultivariateNormal(np.zeros(D), 0.1 * np.eye(D), name="mu0")
    P0 = bg.Wishart(D + 1.0, np.eye(D), name="P0")
    A = bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(D,), name="A")
    if noise == "wishart":
        Q = bg.Wishart(D + 1.0, np.eye(D), name="Q")
    else:
        Q = bg.Gamma(1.0, 1.0, plates=(D,) if noise == "gamma" else (), name="Q")
    xs = bg.GaussianMarkovChain(mu0, P0, A, Q, length=T, plates=(S,), name="x")
    tau = bg.Gamma(1.0, 1.0, plates=(D,), name="tau")
    y = bg.MultivariateNormal(xs, tau, name="y").observe(Y, mask=obs)
    fit = bg.Model(y).fit("vmp", max_iter=300, tol=1e-12)
    _monotone(fit.elbo_trace)
    assert fit.elbo_trace[-1] > fit.elbo_trace[0] + 1.0
    # the learned transition is near the truth (200 transitions; measured max error 0.17-0.23)
    assert np.max(np.abs(A.posterior.mean - p["A"])) < 0.3


def test_d3_wishart_noise_with_random_rows():
    """Rows of A share a full Wishart noise precision: their update is one parallel
    step per sweep; measured monotone on this problem."""
    rng = np.random.default_rng(31)
    S, T, D = 3, 60, 3
    _, Y, obs = lgssm(rng, S, T, D)
    A = bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(D,), name="A")
    Q = bg.Wishart(D + 2.0, 0.5 * np.eye(D), name="Q")
    xs = bg.GaussianMarkovChain(np.zeros(D), np.eye(D), A, Q, length=T, plates=(S,), name="x")
    y = bg.MultivariateNormal(xs, np.eye(D), name="y").observe(Y)
    fit = bg.Model(y).fit("vmp", max_iter=200, tol=1e-12)
    _monotone(fit.elbo_trace)


# --------------------------------------------------------------------------
# messages = gradients
# --------------------------------------------------------------------------
@pytest.mark.parametrize("noise", ["wishart", "gamma", "gamma_isotropic"])
def test_messages_to_every_parent(noise):
    rng = np.random.default_rng(40)
    S, T, D = 2, 6, 2
    _, Y, obs = lgssm(rng, S, T, D, missing=0.2)
    mu0 = bg.MultivariateNormal(rng.normal(size=D), np.eye(D), plates=(S,), name="mu0")
    P0 = bg.Wishart(D + 2.0, random_spd(rng, D, 0.5), name="P0")
    A = bg.MultivariateNormal(rng.normal(size=D), random_spd(rng, D), plates=(D,), name="A")
    if noise == "wishart":
        Q = bg.Wishart(D + 2.0, random_spd(rng, D, 0.5), name="Q")
    else:
        Q = bg.Gamma(2.0, 1.5, plates=(D,) if noise == "gamma" else (), name="Q")
    xs = bg.GaussianMarkovChain(mu0, P0, A, Q, length=T, plates=(S,), name="x")
    y = bg.MultivariateNormal(xs, 2.0 * np.eye(D), name="y").observe(Y, mask=obs)
    bg.Model(y).fit("vmp", max_iter=5)
    assert check_messages(xs) == 4
    assert check_messages(y) == 1   # y -> chain, in per-step MultivariateNormal coordinates


def test_messages_per_sequence_parameters():
    """Each sequence its own A (plates (S, D)), noise precisions (S, D) and start
    precision (S,): the messages reduce over time only."""
    rng = np.random.default_rng(43)
    S, T, D = 3, 5, 2
    _, Y, _ = lgssm(rng, S, T, D)
    P0 = bg.Wishart(D + 2.0, random_spd(rng, D, 0.5), plates=(S,), name="P0")
    A = bg.MultivariateNormal(rng.normal(size=D), random_spd(rng, D), plates=(S, D), name="A")
    Q = bg.Gamma(2.0, 1.5, plates=(S, D), name="Q")
    xs = bg.GaussianMarkovChain(np.zeros(D), P0, A, Q, length=T, name="x")
    assert xs.plates == (S, T)
    y = bg.MultivariateNormal(xs, np.eye(D), name="y").observe(Y)
    fit = bg.Model(y).fit("vmp", max_iter=20)
    _monotone(fit.elbo_trace)
    assert check_messages(xs) == 3


def test_messages_one_dimensional_row_without_plate():
    """D = 1: A may be a MultivariateNormal node without plates (its one row)."""
    rng = np.random.default_rng(41)
    T = 8
    A = bg.MultivariateNormal(np.ones(1), np.eye(1), name="A")
    Q = bg.Gamma(2.0, 1.0, name="Q")
    xs = bg.GaussianMarkovChain(np.zeros(1), np.eye(1), A, Q, length=T, name="x")
    y = bg.MultivariateNormal(xs, np.eye(1), name="y").observe(rng.normal(size=(T, 1)))
    bg.Model(y).fit("vmp", max_iter=5)
    assert check_messages(xs) == 2


def test_observed_states_give_the_conjugate_posterior_of_A():
    """Observed states: A's rows get the Bayesian linear regression posterior of
    x_t on x_{t-1} (known noise precision Q, prior N(0, I) per row)."""
    rng = np.random.default_rng(42)
    T, D = 30, 2
    p, _, _ = lgssm(rng, 1, 2, D)
    X = rng.normal(size=(T, D))
    A = bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(D,), name="A")
    Qd = np.array([2.0, 0.5])
    xs = bg.GaussianMarkovChain(np.zeros(D), np.eye(D), A, Qd, length=T, name="x").observe(X)
    bg.Model(xs).fit("conjugate")
    Z, W = X[:-1], X[1:]
    for i in range(D):
        P = np.eye(D) + Qd[i] * Z.T @ Z
        np.testing.assert_allclose(A.posterior.mean[i], np.linalg.solve(P, Qd[i] * Z.T @ W[:, i]),
                                   atol=1e-12)
        np.testing.assert_allclose(A.posterior.cov[i], np.linalg.inv(P), atol=1e-12)
    assert check_messages(xs) == 1


# --------------------------------------------------------------------------
# refusals
# --------------------------------------------------------------------------
def test_bad_input_refused():
    with pytest.raises(TypeError, match="length=T"):
        bg.GaussianMarkovChain(np.zeros(2), np.eye(2), np.eye(2), np.eye(2))
    with pytest.raises(ValueError, match="length must be an integer"):
        bg.GaussianMarkovChain(np.zeros(2), np.eye(2), np.eye(2), np.eye(2), length=0)
    with pytest.raises(ValueError, match="A must be D x D"):
        bg.GaussianMarkovChain(np.zeros(2), np.eye(2), np.eye(3), np.eye(2), length=5)
    with pytest.raises(ValueError, match="noise_precision"):
        bg.GaussianMarkovChain(np.zeros(2), np.eye(2), np.eye(2), np.eye(3), length=5)
    with pytest.raises(ValueError, match="positive definite"):
        bg.GaussianMarkovChain(np.zeros(2), np.eye(2), np.eye(2), -np.eye(2), length=5)
    with pytest.raises(ValueError, match="mean0 must be a vector"):
        bg.GaussianMarkovChain(0.0, np.eye(1), np.eye(1), 1.0, length=5)
    with pytest.raises(TypeError, match="Wishart"):
        bg.GaussianMarkovChain(np.zeros(2), bg.Gamma(1.0, 1.0), np.eye(2), np.eye(2), length=5)
    xs = bg.GaussianMarkovChain(np.zeros(1), np.eye(1), np.eye(1), 1.0, length=4, name="x")
    with pytest.raises(ValueError, match="no mask"):
        xs.observe(np.zeros((4, 1)), mask=np.ones(4, bool))
    xs2 = bg.GaussianMarkovChain(np.zeros(1), np.eye(1), np.eye(1), 1.0, length=4, name="x2")
    y = bg.MultivariateNormal(xs2, np.eye(1), name="y").observe(np.zeros((4, 1)),
                                                                 weights=np.full(4, 2.0))
    with pytest.raises(ValueError, match="weights="):
        bg.Model(y).fit("vmp")


# --------------------------------------------------------------------------
# long chains: the blocked scans equal the recursions
# --------------------------------------------------------------------------
def _chain_nat(D, S, T, missing, seed):
    """The natural parameters of q(x) given data: a fixed chain observed through
    MultivariateNormal(x, R) with some steps missing."""
    p, Y, obs = lgssm(np.random.default_rng(seed), S, T, D, missing)
    xs, y = fixed_chain(p, Y, obs)
    bg.Model(y).fit("conjugate")
    nat = tuple(np.asarray(a) for a in xs.nat)
    return nat if S > 1 else tuple(a[0] for a in nat)


def _assert_same(a, b, rtol=1e-12):
    for x, r in zip(a, b):
        scale = max(np.max(np.abs(r)), 1.0)
        np.testing.assert_allclose(x, r, rtol=0, atol=rtol * scale)


@pytest.mark.parametrize("D,S,T,missing", [(1, 1, 300, 0.0), (1, 4, 150, 0.3), (2, 1, 500, 0.2),
                                           (2, 3, 97, 0.0), (5, 2, 130, 0.3), (5, 1, 64, 0.0)])
def test_scan_equals_recursion(D, S, T, missing):
    fam = ChainFamily()
    nat = _chain_nat(D, S, T, missing, seed=D + 10 * S)
    ref = fam._smooth(nat, scan=False)
    assert gmc._filter_by_scan(*broadcast_nat(nat, (1, 2, 2))) is not None   # not fallen back
    _assert_same(fam._smooth(nat, scan=True), ref)
    _assert_same(fam._filter(nat, scan=True)[:3], fam._filter(nat, scan=False)[:3])
    assert ChainFamily().log_partition(nat).shape == nat[0].shape[:-1]
    h, n2, C = broadcast_nat(nat, (1, 2, 2))
    Jd, C = (np.moveaxis(a, -3, 0) for a in (-(n2 + np.swapaxes(n2, -1, -2)), C))
    Ji = np.moveaxis(ref[4], -3, 0)
    Jf = np.linalg.inv(Ji)
    Phi = np.zeros(Jf.shape)
    Phi[1:] = C[1:] @ Ji[:-1]
    hf = np.moveaxis(ref[3], -2, 0)[..., None]
    for b in (1, 2, 7, T):                  # block lengths that do and do not divide T
        # the precisions alone (no Newton step) to the rounding of the blocks
        _assert_same((gmc.riccati_scan(Jd, C, b),), (Jf,), 1e-10)
        m, S = gmc.affine_scan(Phi, np.moveaxis(h, -2, 0)[..., None], Jd, b)
        _assert_same((m,), (hf,))
        S_ref = np.zeros(S.shape)
        for t in range(T):
            S_ref[t] = Phi[t] @ S_ref[t - 1] @ np.swapaxes(Phi[t], -1, -2) + Jd[t] if t else Jd[0]
        _assert_same((S,), (S_ref,))


def test_scan_is_taken_for_long_chains_and_falls_back_outside_the_space():
    assert not gmc.use_scan(gmc.SCAN_MIN_STEPS - 1) and gmc.use_scan(gmc.SCAN_MIN_STEPS)
    assert not gmc.use_scan(10 ** 4, 1, 1) and gmc.use_scan(10 ** 4, 1, 2)
    fam = ChainFamily()
    T = 200
    nat = list(fam.natural_from_params(np.zeros(2), np.eye(2), np.eye(2), np.eye(2), T))
    nat[1] = nat[1].copy()
    nat[1][120] = 0.4 * np.eye(2)           # J_tt negative: not a precision
    with pytest.raises(ValueError, match="filtered precision at step 120"):
        fam._smooth(tuple(nat))


def test_local_level_zoo_same_by_scan_and_recursion(monkeypatch):
    pd = pytest.importorskip("pandas")
    from test_zoo import load
    ll = load("local_level")
    rng = np.random.default_rng(3)
    y = 10.0 + np.cumsum(rng.normal(0, 0.5, 300)) + rng.normal(0, 1.0, 300)
    y[[20, 21, 22, 150]] = np.nan
    runs, taken = [], []
    scan = gmc._filter_by_scan

    def counted(*args):
        out = scan(*args)
        taken.append(out is not None)
        return out
    monkeypatch.setattr(gmc, "_filter_by_scan", counted)
    for steps in (10 ** 9, 2):
        monkeypatch.setattr(gmc, "SCAN_MIN_STEPS", steps)
        model = ll.build(pd.DataFrame({"y": y}), trend=True)
        res = model.fit("vmp", seed=0, max_iter=30, tol=0)
        runs.append((np.asarray(res.elbo_trace), model["x"].posterior.mean,
                     model["x"].posterior.cov))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-12, atol=0)
    _assert_same(runs[1][1:], runs[0][1:])
    # the first sweeps (diffuse start, noise precisions near their vague priors) are too
    # ill-conditioned for the scan and fall back; the rest take it
    assert sum(taken) > 0.7 * len(taken)


@pytest.mark.parametrize("D,S,size", [(2, 1, (4,)), (1, 3, (2, 3)), (3, 2, None)])
def test_sample_by_scan_draws_the_loops_paths(monkeypatch, D, S, size):
    fam = ChainFamily()
    nat = _chain_nat(D, S, 90, 0.2, seed=5 + D)
    draws = []
    for steps in (2, 10 ** 9):
        monkeypatch.setattr(gmc, "SCAN_MIN_STEPS", steps)
        draws.append(fam.sample(nat, rng=7, size=size))
    assert draws[0].shape == (size or ()) + nat[0].shape
    _assert_same(draws[:1], draws[1:], 1e-11)
