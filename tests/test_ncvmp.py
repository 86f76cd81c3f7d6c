"""Non-conjugate VMP (docs/math.md §4): logistic / Poisson / softmax likelihoods on a
Gaussian linear predictor, user Potentials by autograd, mixing with conjugate
nodes, the vmp refusal and the positive-definiteness safeguard.

Oracles: the exact Gaussian-VI optimum found by maximising the ELBO directly
(scipy BFGS over the mean and a Cholesky factor, autograd gradients), with its
own high-accuracy quadrature; finite differences for the message identities.
"""
import importlib.util
import pathlib

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
from scipy import integrate
from scipy.optimize import minimize
from scipy.special import expit, gammaln

import blrgraph as bg
from blrgraph.graph.factors import nonconjugate as nc
from blrgraph.inference.blr import blr_step, blr_target
from blrgraph.inference.steps import initial_rhos
from blrgraph.inference.methods import get_method

ROOT = pathlib.Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------
# data and the direct-ELBO oracle
def _glm_data(kind, N=80, seed=1):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(N), rng.normal(size=(N, 2))])
    if kind == "logistic":
        w = np.array([-0.5, 1.5, -1.0])
        y = (rng.random(N) < expit(X @ w)).astype(float)
    else:
        w = np.array([0.3, 0.6, -0.4])
        y = rng.poisson(np.exp(X @ w)).astype(float)
    L0 = np.array([[0.6, 0.1, 0.0], [0.1, 1.1, 0.1], [0.0, 0.1, 2.0]])  # full prior precision
    return X, y, L0


_T150, _W150 = np.polynomial.hermite.hermgauss(150)


def _expected_loglik(kind, y, ma, va):
    """sum_n E_{N(ma, va)}[log p(y_n | a)] (autograd-friendly)."""
    if kind == "logistic":  # 150-node Gauss-Hermite (the engine uses 64)
        a = ma[:, None] + anp.sqrt(2.0 * va)[:, None] * _T150[None, :]
        return anp.sum(y * ma) - anp.sum(anp.logaddexp(0.0, a) @ _W150) / np.sqrt(np.pi)
    return anp.sum(y * ma - anp.exp(ma + 0.5 * va) - gammaln(y + 1.0))


def _unpack(theta, P):
    m = theta[:P]
    rows, k = [], P
    for i in range(P):
        row = []
        for j in range(P):
            if j < i:
                row.append(theta[k])
                k += 1
            elif j == i:
                row.append(anp.exp(theta[k]))
                k += 1
            else:
                row.append(0.0 * theta[0])
        rows.append(anp.stack(row))
    return m, anp.stack(rows)


def _elbo(theta, X, y, L0, kind, prec_scale=1.0, log_scale=0.0):
    """Exact ELBO of q(w) = N(m, L L^T) under w ~ N(0, (prec_scale L0)^-1)."""
    P = X.shape[1]
    m, L = _unpack(theta, P)
    S = L @ L.T
    ma, va = X @ m, anp.sum((X @ L) ** 2, axis=1)
    prior = (-0.5 * prec_scale * anp.trace(L0 @ (S + anp.outer(m, m)))
             + 0.5 * (np.linalg.slogdet(L0)[1] + P * log_scale) - 0.5 * P * np.log(2 * np.pi))
    entropy = 0.5 * P * (1.0 + np.log(2 * np.pi)) + anp.sum(anp.log(anp.diag(L)))
    return _expected_loglik(kind, y, ma, va) + prior + entropy


def gaussian_vi_optimum(X, y, L0, kind, **kw):
    P = X.shape[1]
    f = lambda th: -_elbo(th, X, y, L0, kind, **kw)  # noqa: E731
    g = autograd.grad(f)
    res = minimize(f, np.zeros(P + P * (P + 1) // 2), jac=g, method="BFGS",
                   options=dict(gtol=1e-10, maxiter=20000))
    assert np.max(np.abs(g(res.x))) < 1e-6, res
    m, L = _unpack(res.x, P)
    return np.asarray(m), np.asarray(L @ L.T), -res.fun


def _logreg(X, y, L0):
    w = bg.MultivariateNormal(np.zeros(X.shape[1]), L0, name="w")
    yy = bg.Bernoulli(logits=bg.Dot(X, w), name="y").observe(y)
    return w, yy


# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["logistic", "poisson"])
def test_fixed_point_is_the_exact_gaussian_vi_optimum(kind):
    X, y, L0 = _glm_data(kind)
    w = bg.MultivariateNormal(np.zeros(3), L0, name="w")
    if kind == "logistic":
        yy = bg.Bernoulli(logits=bg.Dot(X, w), name="y").observe(y)
    else:
        yy = bg.Poisson(log_rate=bg.Dot(X, w), name="y").observe(y)
    fit = bg.Model(yy).fit("ncvmp", tol=1e-13, max_iter=2000)
    assert fit.converged and fit.method == "ncvmp"
    m, S, L = gaussian_vi_optimum(X, y, L0, kind)
    q = w.posterior
    assert np.allclose(q.mean, m, rtol=1e-4, atol=1e-4 * np.abs(m).max())
    assert np.abs(q.cov - S).max() <= 1e-3 * np.abs(S).max()
    assert fit.elbo == pytest.approx(L, rel=1e-6)
    # the oracle's own quadrature is accurate (checked by adaptive quadrature on a few rows)
    if kind == "logistic":
        ma, va = X @ m, np.einsum("nd,de,ne->n", X, S, X)
        for n in range(0, len(y), 20):
            f = lambda a: np.logaddexp(0.0, a) * np.exp(-(a - ma[n]) ** 2 / (2 * va[n]))  # noqa: E731
            ref = integrate.quad(f, -np.inf, np.inf, epsabs=1e-13)[0] / np.sqrt(2 * np.pi * va[n])
            gh = np.logaddexp(0.0, ma[n] + np.sqrt(2 * va[n]) * _T150) @ _W150 / np.sqrt(np.pi)
            assert gh == pytest.approx(ref, rel=1e-10)


def test_rho_one_and_user_rho_reach_the_same_fixed_point():
    X, y, L0 = _glm_data("logistic")
    means = []
    for rho in (1.0, 0.3):
        w, yy = _logreg(X, y, L0)
        bg.Model(yy).fit("ncvmp", rho=rho, tol=1e-13, max_iter=5000)
        means.append(w.posterior.mean)
    assert np.allclose(means[0], means[1], atol=1e-7)


@pytest.mark.parametrize("kind", ["logistic", "poisson"])
def test_message_is_the_mu_gradient_of_the_expected_loglik(kind):
    """The message identity (docs/math.md §3): message to a Normal parent
    = d E[log p] / d (E[a], E[a^2])."""
    rng = np.random.default_rng(0)
    N = 7
    m, v = rng.normal(size=N), rng.uniform(0.1, 2.0, size=N)
    a = bg.Normal(m, 1.0 / v, name="a")
    y = (rng.random(N) < 0.5).astype(float) if kind == "logistic" else rng.poisson(2.0, N)
    node = (bg.Bernoulli(logits=a, name="y") if kind == "logistic"
            else bg.Poisson(log_rate=a, name="y")).observe(y)
    c1, c2 = node.message_to(a)
    f = node.factor
    x = node.child_data()

    def S(mu1, mu2):
        return f.expected_loglik(x, [(mu1, mu2)])

    mu1, mu2 = m, m * m + v
    h = 1e-6
    d1 = (S(mu1 + h, mu2) - S(mu1 - h, mu2)) / (2 * h)
    d2 = (S(mu1, mu2 + h) - S(mu1, mu2 - h)) / (2 * h)
    assert np.allclose(c1, d1, atol=1e-7)
    assert np.allclose(c2, d2, atol=1e-7)
    assert np.all(c2 < 0)  # log-concave: the message precision -2 c2 is positive


def test_gauss_hermite_logistic_expectations_against_adaptive_quadrature():
    for m, v in [(0.3, 0.2), (-2.0, 4.0), (5.0, 9.0)]:
        got = nc.normal_expectations((nc._softplus, expit, nc._sig_prime), m, v)
        dens = lambda a: np.exp(-(a - m) ** 2 / (2 * v)) / np.sqrt(2 * np.pi * v)  # noqa: E731
        for g, fn in zip(got, (nc._softplus, expit, nc._sig_prime)):
            ref = integrate.quad(lambda a: fn(a) * dens(a), -np.inf, np.inf, epsabs=1e-13)[0]
            assert float(g) == pytest.approx(ref, rel=1e-6)


def test_logistic_parts_from_one_exp_equal_the_separate_functions():
    a = np.concatenate([np.linspace(-800, 800, 4001), [-1e-300, 0.0, 1e-300, 36.7, -36.7]])
    sp, sig, dsig = nc._logistic_parts(a)
    assert np.all(np.isfinite(sp)) and np.all(np.isfinite(dsig))
    assert np.allclose(sp, nc._softplus(a), rtol=1e-15, atol=0)
    assert np.allclose(sig, expit(a), rtol=4e-16, atol=1e-300)
    assert np.allclose(dsig, nc._sig_prime(a), rtol=1e-15, atol=1e-300)
    assert np.array_equal(nc._logistic_grad_parts(a)[0], sig)


def test_small_variance_rule_equals_the_64_node_rule():
    """Entries with v <= 1/4 take 24 nodes (GH_BUCKETS): equal to 64 nodes to rounding."""
    rng = np.random.default_rng(3)
    m, v = 4 * rng.normal(size=2000), rng.uniform(1e-6, 0.25, size=2000)
    got = nc.normal_expectations(nc._logistic_parts, m, v)
    ref = nc.normal_expectations((nc._softplus, expit, nc._sig_prime), m, v, n=64)
    for g, r in zip(got, ref):
        assert np.allclose(g, r, rtol=2e-15, atol=1e-300)
    mixed = np.concatenate([v, [1.0, 9.0, 30.0]])
    mm = np.concatenate([m, [0.5, -1.0, 2.0]])
    parts = nc.normal_expectations(nc._logistic_parts, mm, mixed)
    assert np.allclose(parts[0][:2000], got[0], rtol=0, atol=0)


def test_masked_rows_are_left_out():
    X, y, L0 = _glm_data("poisson", N=60)
    keep = np.arange(60) % 3 != 0
    w1 = bg.MultivariateNormal(np.zeros(3), L0, name="w")
    y1 = bg.Poisson(log_rate=bg.Dot(X, w1), name="y").observe(np.where(keep, y, np.nan), mask=keep)
    f1 = bg.Model(y1).fit("ncvmp", tol=1e-13)
    w2 = bg.MultivariateNormal(np.zeros(3), L0, name="w")
    y2 = bg.Poisson(log_rate=bg.Dot(X[keep], w2), name="y").observe(y[keep])
    f2 = bg.Model(y2).fit("ncvmp", tol=1e-13)
    assert np.allclose(w1.posterior.mean, w2.posterior.mean, atol=1e-8)
    assert f1.elbo == pytest.approx(f2.elbo, rel=1e-10)


# ---------------------------------------------------------------------------------------
def test_vmp_refuses_a_non_conjugate_factor_and_names_it():
    X, y, L0 = _glm_data("logistic")
    w, yy = _logreg(X, y, L0)
    with pytest.raises(ValueError, match=r"(?s)Bernoulli 'y'.*logits=.*ncvmp"):
        bg.Model(yy).fit("vmp")
    w2 = bg.MultivariateNormal(np.zeros(3), L0, name="w2")
    pot = bg.Potential(lambda v: -anp.sum(v ** 2), w2, name="my_factor")
    with pytest.raises(ValueError, match=r"(?s)my_factor.*ncvmp"):
        bg.Model(pot).fit("vmp")


def test_bad_parents_are_refused():
    w = bg.MultivariateNormal(np.zeros(3), np.eye(3), name="w")
    with pytest.raises(TypeError, match="Dot"):
        bg.Bernoulli(logits=w, name="y")
    with pytest.raises(TypeError, match="Normal or MultivariateNormal"):
        bg.Potential(lambda a: a, bg.Dot(np.ones((2, 3)), w), name="p")
    with pytest.raises(TypeError, match="Normal or MultivariateNormal"):
        bg.Potential(lambda a: a, bg.Gamma(1.0, 1.0, name="g"), name="p")
    with pytest.raises(ValueError, match="twice"):
        bg.Potential(lambda a, b: 0.0, w, w, name="p")
    with pytest.raises(ValueError, match="0/1"):
        bg.Bernoulli(logits=bg.Dot(np.ones((2, 3)), w), name="y").observe([0, 2])


# ---------------------------------------------------------------------------------------
def _logistic_potential(X, y):
    def loglik(w):  # batch-aware: w is (D,) or (S, D)
        a = w @ X.T
        return anp.sum(y * a - anp.logaddexp(0.0, a), axis=-1)
    return loglik


def test_potential_reproduces_the_builtin_logistic_factor():
    X, y, L0 = _glm_data("logistic")
    w, yy = _logreg(X, y, L0)
    fit = bg.Model(yy).fit("ncvmp", tol=1e-12)
    ref, ref_cov = w.posterior.mean, w.posterior.cov
    sd = np.sqrt(np.diag(ref_cov))

    w2 = bg.MultivariateNormal(np.zeros(3), L0, name="w")
    pot = bg.Potential(_logistic_potential(X, y), w2, name="lik", samples=2000, seed=0)
    fit2 = bg.Model(pot).fit("ncvmp", tol=1e-10)
    assert fit2.converged and pot.factor.vectorized
    # Monte Carlo error of 2000 antithetic draws: a few percent of a posterior sd
    assert np.all(np.abs(w2.posterior.mean - ref) < 0.05 * sd)
    assert np.abs(w2.posterior.cov - ref_cov).max() < 0.02 * np.abs(ref_cov).max()
    assert fit2.elbo == pytest.approx(fit.elbo, abs=0.1)
    with pytest.raises(AttributeError, match="no posterior"):
        pot.posterior


def test_potential_draw_by_draw_equals_batched():
    """A logp that only takes one draw is evaluated draw by draw: same numbers."""
    X, y, L0 = _glm_data("logistic", N=30)

    def one_draw(w):
        a = anp.dot(X, w)  # fails on a batch of draws
        return anp.sum(y * a - anp.logaddexp(0.0, a))

    out = []
    for fn, vec in ((one_draw, None), (_logistic_potential(X, y), True)):
        w = bg.MultivariateNormal(np.zeros(3), L0, name="w")
        pot = bg.Potential(fn, w, name="lik", samples=24, seed=3, vectorized=vec)
        bg.Model(pot).fit("ncvmp", tol=1e-10, max_iter=200)
        out.append((w.posterior.mean, w.posterior.cov, pot.factor.vectorized))
    assert out[0][2] is False and out[1][2] is True
    assert np.allclose(out[0][0], out[1][0], atol=1e-8)
    assert np.allclose(out[0][1], out[1][1], atol=1e-8)


def test_potential_on_a_plated_normal_parent_is_exact_for_a_quadratic():
    """Independent N(0,1) entries with a Gaussian potential: exact conjugate answer.
    logp(x) = -0.5 sum_i t_i (x_i - c_i)^2 -> q(x_i) = N((t_i c_i)/(1 + t_i), 1/(1 + t_i)).
    The whitened antithetic draws integrate quadratics exactly and Stein's Hessian is
    exact for them, whatever the number of draws (coordinates standardised one by one
    when the draws are fewer than 2 n + 2)."""
    rng = np.random.default_rng(2)
    n = 5
    c, t = rng.normal(size=n), rng.uniform(0.5, 2.0, size=n)
    for samples in (None, 4, 400):
        x = bg.Normal(0.0, 1.0, plates=(n,), name="x")
        pot = bg.Potential(lambda x: -0.5 * anp.sum(t * (x - c) ** 2, axis=-1), x, name="quad",
                           samples=samples)
        fit = bg.Model(pot).fit("ncvmp", tol=1e-14)
        assert fit.converged
        assert np.allclose(x.posterior.mean, t * c / (1 + t), atol=1e-10)
        assert np.allclose(x.posterior.var, 1 / (1 + t), atol=1e-10)


# ---------------------------------------------------------------------------------------
def test_conjugate_gamma_precision_with_a_logistic_likelihood():
    X, y, _ = _glm_data("logistic")
    P, a0, b0 = 3, 2.0, 2.0
    alpha = bg.Gamma(a0, b0, name="alpha")
    w = bg.MultivariateNormal(np.zeros(P), alpha, name="w")
    yy = bg.Bernoulli(logits=bg.Dot(X, w), name="y").observe(y)
    model = bg.Model(yy)
    cfg = get_method("ncvmp")
    rhos = initial_rhos(model, cfg)
    assert rhos[alpha] == 1.0   # conjugate block: closed form
    assert rhos[w] == 0.5       # receives a non-conjugate message
    fit = model.fit("ncvmp", tol=1e-13, max_iter=2000)
    assert fit.converged
    # alpha's q is the closed-form Gamma update given w's final moments (alpha comes first
    # in the sweep, so it saw w's previous iterate: equal up to the convergence tolerance)
    Eww = w.moments()[1]
    par = alpha.posterior.params
    assert par["shape"] == pytest.approx(a0 + P / 2, rel=1e-12)
    assert par["rate"] == pytest.approx(b0 + 0.5 * np.trace(Eww), rel=1e-6)
    # and q(w) is the exact Gaussian-VI optimum given q(alpha)
    Ea, Elog = alpha.posterior.mean, alpha.moments()[0]
    m, S, _ = gaussian_vi_optimum(X, y, np.eye(P), "logistic", prec_scale=float(Ea),
                                  log_scale=float(Elog))
    assert np.allclose(w.posterior.mean, m, rtol=1e-4, atol=1e-5)
    assert np.abs(w.posterior.cov - S).max() <= 1e-3 * np.abs(S).max()
    # with alpha updated last in the sweep the closed form holds exactly
    model2 = bg.Model(yy, schedule=["w", "alpha"])
    model2.fit("ncvmp", tol=1e-10)
    assert alpha.posterior.params["rate"] == pytest.approx(b0 + 0.5 * np.trace(w.moments()[1]),
                                                           rel=1e-13)


# ---------------------------------------------------------------------------------------
def test_pd_safeguard_halves_rho_for_a_non_log_concave_potential():
    """Student-t likelihood with far outliers on both sides: near x = 0 E[hess log t] > 0
    exceeds the prior precision, so the full step's precision is negative; blr_step
    backtracks."""
    nu, obs = 1.0, np.repeat([-10.0, 10.0], 25)
    x = bg.Normal(0.0, 0.5, name="x")

    def logt(v):
        r = obs - v[..., None]
        return -0.5 * (nu + 1) * anp.sum(anp.log1p(r ** 2 / nu), axis=-1)

    pot = bg.Potential(logt, x, name="student", samples=200)
    model = bg.Model(pot)
    target = blr_target(model, x)
    assert -2 * target[1] < 0  # the undamped target is not a distribution
    blr_step(model, x, rho=1.0)
    assert -2 * x.nat[1] > 0
    fit = model.fit("ncvmp", max_iter=300)
    assert np.isfinite(fit.elbo) and x.posterior.var > 0


def test_pd_safeguard_gives_up_with_the_node_name(monkeypatch):
    from blrgraph.inference import blr
    w = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="w")
    pot = bg.Potential(lambda v: -anp.sum(v ** 2, axis=-1), w, name="p", samples=10)
    model = bg.Model(pot)
    calls = []
    monkeypatch.setattr(blr, "precision_is_pd", lambda node, nat: calls.append(1) and False)
    with pytest.raises(FloatingPointError, match="MultivariateNormal 'w'.*positive definite"):
        blr_step(model, w, rho=0.5)
    assert len(calls) == blr.MAX_HALVINGS + 1


# ---------------------------------------------------------------------------------------
def _softmax_data(N=120, D=2, K=3, seed=4):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(N), rng.normal(size=(N, D - 1))])
    Wt = rng.normal(size=(K, D)) * 1.5
    Wt[0] = 0.0
    lg = X @ Wt.T
    p = np.exp(lg - lg.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (rng.random(N)[:, None] > np.cumsum(p, 1)).sum(1)
    return X, y, Wt


def test_categorical_logits_message_is_the_mu_gradient():
    rng = np.random.default_rng(1)
    N, K = 5, 3
    m, v = rng.normal(size=(N, K)), rng.uniform(0.1, 1.0, size=(N, K))
    a = bg.Normal(m, 1.0 / v, name="a")
    y = bg.Categorical(logits=a, name="y").observe(rng.integers(0, K, N))
    assert y.plates == (N,)
    c1, c2 = y.message_to(a)
    x = y.child_data()

    def S(mu1, mu2):
        return y.factor.expected_loglik(x, [(mu1, mu2)]).sum()

    h = 1e-5
    for k in range(K):
        e = np.zeros((N, K))
        e[:, k] = h
        d1 = np.array([(S(m + e * (i == np.arange(N))[:, None], m * m + v)
                        - S(m - e * (i == np.arange(N))[:, None], m * m + v)) / (2 * h)
                       for i in range(N)])
        d2 = np.array([(S(m, m * m + v + e * (i == np.arange(N))[:, None])
                        - S(m, m * m + v - e * (i == np.arange(N))[:, None])) / (2 * h)
                       for i in range(N)])
        assert np.allclose(c1[:, k], d1, atol=1e-5)
        assert np.allclose(c2[:, k], d2, atol=1e-5)


def test_softmax_regression_matches_direct_mean_field_optimum():
    """Categorical(logits=Dot) with a pinned reference class: the fixed point maximises
    the mean-field ELBO prod_k N(w_k | m_k, L_k L_k^T), computed with an independent
    high-accuracy product Gauss-Hermite rule."""
    X, y, Wt = _softmax_data(N=60)
    N, D = X.shape
    K = 3
    W = bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(K,), name="W")
    yy = bg.Categorical(logits=bg.Dot(X[:, None, :] * (np.arange(K) > 0)[:, None], W),
                        name="y").observe(y)
    fit = bg.Model(yy).fit("ncvmp", tol=1e-12, max_iter=3000)
    assert fit.converged

    t, wt = np.polynomial.hermite.hermgauss(40)
    t, wt = np.sqrt(2) * t, wt / np.sqrt(np.pi)
    Y = (y[:, None] == np.arange(K)).astype(float)
    nb = D + D * (D + 1) // 2

    def elbo(theta):
        ms, vs, total = [], [], 0.0
        for k in range(1, K):
            m, L = _unpack(theta[(k - 1) * nb: k * nb], D)
            ms.append(X @ m)
            vs.append(anp.sum((X @ L) ** 2, axis=1))
            total = total - 0.5 * anp.trace(L @ L.T + anp.outer(m, m)) \
                + 0.5 * D + anp.sum(anp.log(anp.diag(L)))
        # E[log(1 + e^a1 + e^a2)] on a 40 x 40 product rule
        a1 = ms[0][:, None, None] + anp.sqrt(vs[0])[:, None, None] * t[None, :, None]
        a2 = ms[1][:, None, None] + anp.sqrt(vs[1])[:, None, None] * t[None, None, :]
        big = anp.maximum(anp.maximum(a1, a2), 0.0)
        lse = big + anp.log(anp.exp(-big) + anp.exp(a1 - big) + anp.exp(a2 - big))
        E = anp.sum(anp.sum(lse * wt[None, None, :], axis=2) * wt[None, :], axis=1)
        return total + anp.sum(Y[:, 1] * ms[0] + Y[:, 2] * ms[1]) - anp.sum(E)

    f = lambda th: -elbo(th)  # noqa: E731
    res = minimize(f, np.zeros(2 * nb), jac=autograd.grad(f), method="BFGS",
                   options=dict(gtol=1e-9, maxiter=20000))
    for k in range(1, K):
        m, L = _unpack(res.x[(k - 1) * nb: k * nb], D)
        assert np.allclose(W.posterior.mean[k], m, atol=2e-4)
        assert np.allclose(W.posterior.cov[k], np.asarray(L @ L.T), atol=2e-4)
    assert np.allclose(W.posterior.mean[0], 0.0) and np.allclose(W.posterior.cov[0], np.eye(D))
    assert fit.elbo == pytest.approx(-res.fun, rel=1e-5)


# ---------------------------------------------------------------------------------------
def _zoo(name):
    spec = importlib.util.spec_from_file_location(f"zoo_{name}", ROOT / "models" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_zoo_logreg_recovers_the_weights(tmp_path):
    pd = pytest.importorskip("pandas")
    zoo = _zoo("logreg")
    rng = np.random.default_rng(7)
    N = 1500
    df = pd.DataFrame({"age": rng.normal(size=N), "income": rng.normal(size=N),
                       "region": rng.choice(["north", "south"], size=N)})
    wt = np.array([-0.4, 1.2, -0.8, 0.7])
    south = (df["region"] == "south").to_numpy(float)
    p = expit(wt[0] + wt[1] * df["age"] + wt[2] * df["income"] + wt[3] * south).to_numpy()
    df["default"] = np.where(rng.random(N) < p, "yes", "no")     # a two-level text target
    df.loc[:9, "default"] = None                                   # missing targets: masked
    model = zoo.build(df, target="default")
    assert zoo.DEFAULT_METHOD == "ncvmp" and model.meta["design"]["target_levels"] == ["no", "yes"]
    fit = model.fit(zoo.DEFAULT_METHOD, **model.meta["fit_options"])
    assert fit.converged
    table = zoo.summarize(fit)
    assert list(table["term"]) == ["intercept", "age", "income", "region[south]"]
    assert np.all(np.abs(table["mean"].to_numpy() - wt) < 4 * table["sd"].to_numpy())
    new = df.iloc[:20][["age", "income", "region"]]
    prob = zoo.predict_proba(fit, new)
    assert prob.shape == (20,) and np.all((prob > 0) & (prob < 1))
    assert np.abs(prob - p[:20]).max() < 0.1
    out = pd.read_csv(zoo.write_outputs(fit, tmp_path)[0])
    assert np.allclose(out["predicted_probability"][:20], prob)
    # arrays (X, y) and a Gamma precision (conjugate, updated in closed form)
    X = np.column_stack([df["age"], df["income"], south])[10:]
    y = (df["default"][10:] == "yes").to_numpy(float)
    fit2 = zoo.build((X, y), prior="gamma").fit("ncvmp", tol=1e-10)
    assert np.allclose(zoo.summarize(fit2)["mean"], table["mean"], atol=0.03)
    assert np.allclose(zoo.predict_proba(fit2, X[:5]), zoo.predict_proba(fit, new[10:15]), atol=0.01)
    # predict: the more probable class, here the target's levels (docs/predict.md)
    assert list(zoo.predict(fit, new[10:15])) == ["yes" if q > 0.5 else "no"
                                                  for q in zoo.predict_proba(fit, new[10:15])]
    with pytest.raises(ValueError, match="0/1"):
        zoo.build((X, y + 1.0))
    with pytest.raises(ValueError, match="target="):
        zoo.build(df)


def test_zoo_poisson_reg_recovers_the_weights():
    pd = pytest.importorskip("pandas")
    zoo = _zoo("poisson_reg")
    rng = np.random.default_rng(8)
    N = 1500
    df = pd.DataFrame({"x1": rng.normal(size=N), "x2": rng.uniform(-1, 1, size=N)})
    wt = np.array([0.5, 0.3, -0.7])
    rate = np.exp(wt[0] + wt[1] * df["x1"] + wt[2] * df["x2"]).to_numpy()
    df["claims"] = rng.poisson(rate)
    model = zoo.build(df, target="claims", columns=["x1", "x2"])
    fit = model.fit(zoo.DEFAULT_METHOD, **model.meta["fit_options"])
    table = zoo.summarize(fit)
    assert list(table.columns) == ["term", "mean", "sd", "q2.5", "q97.5", "rate_ratio",
                                   "prior_sd"]
    assert np.all(np.abs(table["mean"].to_numpy() - wt) < 4 * table["sd"].to_numpy())
    assert np.allclose(zoo.predict_rate(fit, df.iloc[:5]), rate[:5], rtol=0.1)
    fit_ard = zoo.build((df[["x1", "x2"]], df["claims"]), prior="ard").fit("ncvmp", tol=1e-10)
    assert np.allclose(zoo.summarize(fit_ard)["mean"], table["mean"], atol=0.02)
    with pytest.raises(ValueError, match="counts"):
        zoo.build((df[["x1", "x2"]], df["claims"] - 0.5))


def test_zoo_poisson_reg_raw_scale_covariates():
    """Ages 20..80 on the raw scale: E[exp(x . w)] under the unit prior overflows, which
    the factor reports naming the node; the default standardize=True fits, and reports
    the coefficients on the original scale."""
    pd = pytest.importorskip("pandas")
    zoo = _zoo("poisson_reg")
    rng = np.random.default_rng(9)
    N = 800
    df = pd.DataFrame({"age": rng.uniform(20, 80, N), "urban": rng.integers(0, 2, N)})
    wt = np.array([-1.0, 0.03, 0.5])
    rate = np.exp(wt[0] + wt[1] * df["age"] + wt[2] * df["urban"]).to_numpy()
    df["claims"] = rng.poisson(rate)
    with pytest.raises(FloatingPointError, match="Poisson 'y'.*overflows"):
        zoo.build(df, target="claims", standardize=False).fit("ncvmp")
    model = zoo.build(df, target="claims")
    fit = model.fit(zoo.DEFAULT_METHOD, **model.meta["fit_options"])
    table = zoo.summarize(fit)
    assert np.all(np.abs(table["mean"].to_numpy() - wt) < 4 * table["sd"].to_numpy())
    assert np.allclose(zoo.predict_rate(fit, df.iloc[:5]), rate[:5], rtol=0.1)
    # the original-scale posterior is the exact linear map of the fitted one
    A = model.meta["to_original"]
    Xs = np.column_stack([np.ones(N), (df["age"] - df["age"].mean()) / df["age"].std(ddof=0),
                          df["urban"]])
    q = model["w"].posterior
    assert np.allclose(Xs @ q.mean, np.column_stack([np.ones(N), df[["age", "urban"]]]) @ (A @ q.mean))


def test_undamped_ncvmp_on_badly_scaled_covariates_still_raises_the_elbo_every_sweep():
    """rho = 1 (no damping) on covariates of scale ~1e4: steps that overshoot are undone
    and halved, so the trace is non-decreasing and the optimum is the damped one's."""
    r = np.random.default_rng(3)
    N = 300
    X = np.c_[np.ones(N), r.normal(0, 1e4, N), r.normal(0, 1, N)]
    y = (r.random(N) < 1 / (1 + np.exp(-(X @ np.array([0.3, 2e-4, -1.0]))))).astype(float)
    outs = []
    for rho in (1.0, 0.5):
        w = bg.MultivariateNormal(np.zeros(3), np.eye(3), name="w")
        yy = bg.Bernoulli(logits=bg.Dot(X, w), name="y").observe(y)
        fit = bg.Model(yy).fit("ncvmp", rho=rho, tol=1e-12, max_iter=2000)
        tr = fit.elbo_trace
        assert fit.converged and np.all(np.diff(tr) >= -1e-9 * np.abs(tr[1:]))
        outs.append((fit.elbo, w.posterior.mean))
    assert outs[0][0] == pytest.approx(outs[1][0], rel=1e-9)
    np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-5, atol=1e-9)


def test_backtracking_does_not_declare_convergence_with_rho_halved():
    """With rho halved many times the ELBO barely moves; that is not convergence. The
    default tol must stop where tol=0 (run to the end) stops."""
    rng = np.random.default_rng(0)
    N = 200
    X = np.c_[np.ones(N), rng.normal(size=(N, 2))]
    y = (X @ [0.5, 1.5, -1] + rng.logistic(size=N) > 0).astype(float)
    Xr = X * np.r_[1, 1e5, 1e5]
    out = []
    for tol, max_iter in ((1e-8, 500), (0.0, 3000)):
        w = bg.MultivariateNormal(np.zeros(3), np.eye(3) * 1e-2, name="w")
        o = bg.Bernoulli(logits=bg.Dot(Xr, w), name="o").observe(y)
        fit = bg.Model(o).fit("ncvmp", max_iter=max_iter, tol=tol)
        assert fit.converged
        out.append((fit.elbo, w.posterior.mean * np.r_[1, 1e5, 1e5]))
    assert out[0][0] == pytest.approx(out[1][0], rel=1e-7)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-3, atol=1e-3)


def _lda_and_logreg(rng):
    D, V, K = 10, 12, 3
    rows, cols, cnt = [], [], []
    for d in range(D):
        for word in rng.choice(V, size=int(rng.integers(2, 8)), replace=False):
            rows.append(d), cols.append(word), cnt.append(int(rng.integers(1, 4)))
    X = rng.normal(size=(50, 2))
    b = (X @ [1.5, -1] + rng.normal(size=50) > 0).astype(float)
    theta = bg.Dirichlet(0.3 * np.ones(K), plates=(D,), name="theta")
    phi = bg.Dirichlet(0.2 * np.ones(V), plates=(K,), name="phi")
    z = bg.Categorical(theta[np.array(rows)], plates=(len(rows),), name="z")
    y = bg.Mixture(z, bg.Categorical, phi, name="y").observe(np.array(cols),
                                                              weights=np.array(cnt, float))
    w = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="w")
    o = bg.Bernoulli(logits=bg.Dot(X, w), name="o").observe(b)
    return bg.Model(y, o)


def test_ncvmp_with_restarted_local_fits_is_not_mistaken_for_an_overshoot():
    """Local fits restarted from their priors may lower the ELBO by themselves; the
    backtracking must not blame (and halve 30 times) the non-conjugate node for it."""
    fit = _lda_and_logreg(np.random.default_rng(0)).fit("ncvmp", seed=1, max_iter=40, tol=0,
                                                        local_iters=10, init="diffuse")
    assert np.all(np.isfinite(fit.elbo_trace)) and len(fit.local_sweeps) == fit.n_iter == 40


def test_local_sweeps_has_one_entry_per_accepted_iteration():
    """A rejected (backtracked) sweep is not an iteration: local_sweeps follows elbo_trace."""
    rng = np.random.default_rng(0)
    N = 200
    X = np.c_[np.ones(N), rng.normal(size=(N, 2))]
    b = (X @ [0.5, 1.5, -1] + rng.logistic(size=N) > 0).astype(float)
    X = X * np.r_[1, 1e4, 1e4]
    G = np.r_[rng.normal(-2, 1, (30, 2)), rng.normal(2, 1, (30, 2))]
    w = bg.MultivariateNormal(np.zeros(3), np.eye(3) * 1e-2, name="w")
    o = bg.Bernoulli(logits=bg.Dot(X, w), name="o").observe(b)
    th = bg.NormalWishart(np.zeros(2), 1.0, 4.0, np.eye(2), plates=(2,), name="th")
    z = bg.Categorical(bg.Dirichlet(np.ones(2), name="pi"), plates=(60,), name="z")
    y = bg.Mixture(z, bg.MultivariateNormal, th, name="y").observe(G)
    fit = bg.Model(y, o).fit("ncvmp", seed=0, max_iter=300, tol=1e-12, local_iters=1)
    assert len(fit.local_sweeps) == len(fit.elbo_trace) == fit.n_iter
    assert np.all(np.diff(fit.elbo_trace) >= -1e-9 * np.abs(fit.elbo_trace[1:]))
