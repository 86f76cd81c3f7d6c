"""The BLR on any log-factor (docs/blr.md): Potentials with data, and the delta-method
rows of the BLR table -- gradient descent, SGD, Newton/Laplace, MAP -- against
hand-written iterations, scipy.optimize and closed forms."""
import autograd.numpy as anp
import numpy as np
import pytest
import scipy.optimize as so
from scipy.special import expit, gammaln

import blrgraph as bg
from blrgraph import closed_form


def _logistic(N=150, D=3, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(N), rng.normal(size=(N, D - 1))])
    y = (rng.random(N) < expit(X @ np.linspace(0.5, -1.0, D))).astype(float)
    return X, y


def _poisson(N=120, D=3, seed=1):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(N), rng.normal(size=(N, D - 1)) * 0.5])
    y = rng.poisson(np.exp(X @ np.linspace(0.8, -0.5, D))).astype(float)
    return X, y


def logistic_rows(w, X, y):
    a = w @ X.T
    return y * a - anp.logaddexp(0.0, a)


def poisson_rows(w, X, y):
    a = w @ X.T
    return y * a - anp.exp(a)


P0 = 0.5


def _model(kind, X, y, builtin=False, name="w"):
    D = X.shape[1]
    w = bg.MultivariateNormal(np.zeros(D), P0 * np.eye(D), name=name)
    if builtin:
        f = bg.Bernoulli if kind == "logistic" else bg.Poisson
        key = "logits" if kind == "logistic" else "log_rate"
        lik = f(**{key: bg.Dot(X, w)}, name="y").observe(y)
    else:
        lik = bg.Potential(logistic_rows if kind == "logistic" else poisson_rows, w, data=(X, y),
                           name="lik")
    return w, bg.Model(lik)


def _grad_hess(kind, X, y, m):
    a = X @ m
    if kind == "logistic":
        mu, v = expit(a), expit(a) * expit(-a)
    else:
        mu = v = np.exp(a)
    g = X.T @ (y - mu) - P0 * m
    H = X.T @ (X * v[:, None]) + P0 * np.eye(len(m))
    return g, H


def _log_joint(kind, X, y, m, builtin=False):
    """log p(y, w = m) (the built-in Poisson factor includes log h(y) = -log y!)."""
    a = X @ m
    ll = np.sum(y * a - (np.logaddexp(0.0, a) if kind == "logistic" else np.exp(a)))
    if builtin and kind == "poisson":
        ll -= np.sum(gammaln(y + 1))
    D = len(m)
    return ll - 0.5 * P0 * m @ m - 0.5 * D * np.log(2 * np.pi / P0)


def _iterates(model, w, method, **kw):
    seen = []
    fit = model.fit(method, callback=lambda it, L: seen.append(np.array(w.posterior.mean)),
                    **kw)
    return fit, seen


# ---- gradient descent and Newton: the hand-written iterations --------------------------
@pytest.mark.parametrize("builtin", [False, True])
@pytest.mark.parametrize("kind", ["logistic", "poisson"])
def test_gd_iterates_equal_gradient_descent(kind, builtin):
    X, y = _logistic() if kind == "logistic" else _poisson()
    w, model = _model(kind, X, y, builtin)
    rho = 2e-3
    fit, seen = _iterates(model, w, "gd", rho=rho, max_iter=25)
    m = np.zeros(X.shape[1])
    for it, got in enumerate(seen):
        m = m + rho * _grad_hess(kind, X, y, m)[0]
        assert np.allclose(got, m, rtol=1e-12, atol=1e-12), it
    assert fit.elbo == pytest.approx(_log_joint(kind, X, y, m, builtin), rel=1e-12)
    assert fit.objective == "em_bound" and not fit.converged
    # the precision is the prior's, untouched (gradient descent moves the mean only); the
    # result is reported as the point it found
    assert np.allclose(-2 * w.nat[1], P0 * np.eye(X.shape[1]), rtol=1e-12)
    assert w.point and np.all(w.posterior.cov == 0)


@pytest.mark.parametrize("builtin", [False, True])
@pytest.mark.parametrize("kind", ["logistic", "poisson"])
def test_laplace_iterates_equal_newton_and_its_answer_the_map(kind, builtin):
    X, y = _logistic() if kind == "logistic" else _poisson()
    w, model = _model(kind, X, y, builtin)
    fit, seen = _iterates(model, w, "laplace", tol=1e-14)
    m = np.zeros(X.shape[1])
    for it, got in enumerate(seen[:4]):   # Newton's own steps (no backtracking needed)
        g, H = _grad_hess(kind, X, y, m)
        m = m + np.linalg.solve(H, g)
        assert np.allclose(got, m, rtol=1e-12, atol=1e-12), it
    assert fit.converged
    # the mode: scipy's MAP; the covariance: the inverse analytic Hessian there
    res = so.minimize(lambda v: -_log_joint(kind, X, y, v), np.zeros(X.shape[1]),
                      jac=lambda v: -_grad_hess(kind, X, y, v)[0], method="BFGS",
                      options={"gtol": 1e-11})
    assert np.allclose(w.posterior.mean, res.x, atol=1e-7)
    mode = w.posterior.mean
    H = _grad_hess(kind, X, y, mode)[1]
    assert np.abs(_grad_hess(kind, X, y, mode)[0]).max() < 1e-9
    assert np.allclose(w.posterior.cov, np.linalg.inv(H), rtol=1e-10, atol=1e-14)
    # the Laplace estimate of the evidence
    D = X.shape[1]
    want = _log_joint(kind, X, y, mode, builtin) + 0.5 * D * np.log(2 * np.pi) \
        - 0.5 * np.linalg.slogdet(H)[1]
    assert fit.log_evidence == pytest.approx(want, rel=1e-12)
    assert fit.elbo == pytest.approx(_log_joint(kind, X, y, mode, builtin), rel=1e-12)


def test_newton_with_rho_below_one_is_the_damped_blr_step():
    """rho < 1: S <- (1 - rho) S + rho H(m), m <- m + rho S^-1 grad (from the prior)."""
    X, y = _logistic()
    w, model = _model("logistic", X, y)
    rho = 0.3
    fit, seen = _iterates(model, w, "laplace", rho=rho, max_iter=6)
    m, S = np.zeros(X.shape[1]), P0 * np.eye(X.shape[1])
    for it, got in enumerate(seen):
        g, H = _grad_hess("logistic", X, y, m)
        S = (1 - rho) * S + rho * H
        m = m + rho * np.linalg.solve(S, g)
        assert np.allclose(got, m, rtol=1e-12, atol=1e-12), it


def test_laplace_log_evidence_is_exact_for_a_conjugate_gaussian_model():
    rng = np.random.default_rng(3)
    N, D, tau = 40, 3, 2.5
    X = rng.normal(size=(N, D))
    y = X @ np.array([1.0, -0.5, 0.25]) + rng.normal(size=N) / np.sqrt(tau)
    m0, L0 = np.array([0.1, 0.0, -0.2]), np.diag([0.5, 1.0, 2.0])

    def gauss_rows(w, X, y):
        r = y - w @ X.T
        return -0.5 * tau * r ** 2 + 0.5 * np.log(tau / (2 * np.pi))

    w = bg.MultivariateNormal(m0, L0, name="w")
    fit = bg.Model(bg.Potential(gauss_rows, w, data=(X, y), name="lik")).fit("laplace", tol=1e-14)
    ref = closed_form.linreg_known_precision(X, y, m0, L0, tau)
    assert fit.log_evidence == pytest.approx(ref.log_evidence, rel=1e-12)
    assert np.allclose(w.posterior.mean, ref.params["mean"], rtol=1e-10, atol=1e-12)
    assert np.allclose(w.posterior.cov, np.linalg.inv(ref.params["precision"]), rtol=1e-10)


def test_map_accepts_a_potential_and_finds_the_mode():
    X, y = _logistic()
    w, model = _model("logistic", X, y)
    fit = model.fit("map", tol=1e-14)
    assert fit.converged and fit.objective == "em_bound"
    assert np.abs(_grad_hess("logistic", X, y, w.posterior.mean)[0]).max() < 1e-8
    assert w.point and np.allclose(w.posterior.var, 0.0)


def test_laplace_keeps_conjugate_nodes_exact():
    """A Gamma prior precision next to a logistic likelihood: the Gamma keeps its exact
    update given the point w, so at convergence its q is the closed form."""
    X, y = _logistic()
    D, a0, b0 = X.shape[1], 2.0, 1.0
    alpha = bg.Gamma(a0, b0, name="alpha")
    w = bg.MultivariateNormal(np.zeros(D), alpha, name="w")
    lik = bg.Potential(logistic_rows, w, data=(X, y), name="lik")
    bg.Model(lik).fit("laplace", tol=1e-14)
    m = w.posterior.mean
    assert alpha.posterior.params["shape"] == pytest.approx(a0 + D / 2, rel=1e-12)
    # (alpha is updated before w in the sweep: it saw w's previous iterate)
    assert alpha.posterior.params["rate"] == pytest.approx(b0 + 0.5 * m @ m, rel=1e-6)
    assert not alpha.point and not w.point


# ---- data in a Potential: rows, masks, minibatches ---------------------------------------
def test_masked_and_nan_rows_equal_the_subset():
    X, y = _logistic(N=80)
    keep = np.ones(80, bool)
    keep[[3, 10, 41]] = False
    ref_w, ref = _model("logistic", X[keep], y[keep])
    ref.fit("laplace", tol=1e-14)
    for how in ("mask", "weights", "nan"):
        w = bg.MultivariateNormal(np.zeros(3), P0 * np.eye(3), name="w")
        Xn, kw = X.copy(), {}
        if how == "mask":
            kw["mask"] = keep
        elif how == "weights":
            kw["weights"] = keep.astype(float)
        else:
            Xn[~keep, 1] = np.nan
        lik = bg.Potential(logistic_rows, w, data=(Xn, y), name="lik", **kw)
        bg.Model(lik).fit("laplace", tol=1e-14)
        assert np.allclose(w.posterior.mean, ref_w.posterior.mean, rtol=1e-12, atol=1e-13), how
        assert np.allclose(w.posterior.cov, ref_w.posterior.cov, rtol=1e-12, atol=1e-15), how
    assert np.isnan(Xn).sum() == 3   # nothing the user gave is changed


def test_sgd_iterates_equal_minibatch_gradient_descent():
    X, y = _logistic(N=100)
    w, model = _model("logistic", X, y)
    B, rho, seed = 16, 1e-3, 4
    fit, seen = _iterates(model, w, "sgd", rho=rho, batch_size=B, max_steps=14, seed=seed)
    rng = np.random.default_rng(seed)
    m, perm, pos = np.zeros(3), rng.permutation(100), 0
    for it, got in enumerate(seen):
        if pos >= 100:
            perm, pos = rng.permutation(100), 0
        rows = perm[pos:pos + B]
        pos += len(rows)
        a = X[rows] @ m
        g = (100 / len(rows)) * X[rows].T @ (y[rows] - expit(a)) - P0 * m
        m = m + rho * g
        assert np.allclose(got, m, rtol=1e-12, atol=1e-12), it
    assert fit.estimate


def test_sgd_streams_memory_mapped_data_block_by_block(tmp_path):
    X, y = _logistic(N=100)
    y = y.copy()
    y[7] = np.nan                      # a missing row of the file: masked in its block
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    Xm, ym = (np.load(tmp_path / f, mmap_mode="r") for f in ("X.npy", "y.npy"))
    w = bg.MultivariateNormal(np.zeros(3), P0 * np.eye(3), name="w")
    model = bg.Model(bg.Potential(logistic_rows, w, data=(Xm, ym), name="lik"))
    with pytest.raises(ValueError, match="streamed data.*svi"):
        model.fit("gd")
    B, rho, seed = 25, 1e-3, 2
    fit, seen = _iterates(model, w, "sgd", rho=rho, batch_size=B, max_steps=10, seed=seed)
    rng = np.random.default_rng(seed)
    m, perm, pos = np.zeros(3), rng.permutation(4), 0
    for it, got in enumerate(seen):   # contiguous blocks in random order, as memmaps are read
        if pos >= 4:
            perm, pos = rng.permutation(4), 0
        rows = np.arange(perm[pos] * B, perm[pos] * B + B)
        pos += 1
        rows = rows[np.isfinite(y[rows])]
        g = (100 / B) * X[rows].T @ (y[rows] - expit(X[rows] @ m)) - P0 * m
        m = m + rho * g
        assert np.allclose(got, m, rtol=1e-12, atol=1e-12), it


def test_sgd_on_the_whole_data_is_gd():
    X, y = _logistic(N=60)
    w1, m1 = _model("logistic", X, y)
    m1.fit("gd", rho=2e-3, max_iter=10)
    w2, m2 = _model("logistic", X, y)
    m2.fit("sgd", rho=2e-3, batch_size=60, max_steps=10, seed=0)
    assert np.allclose(w1.posterior.mean, w2.posterior.mean, rtol=1e-12, atol=1e-14)


def test_svi_on_a_potential_with_data_reaches_the_batch_optimum():
    X, y = _logistic(N=400)
    w1, m1 = _model("logistic", X, y, builtin=True)
    m1.fit("ncvmp", tol=1e-12)
    w2, m2 = _model("logistic", X, y)
    fit = m2.fit("svi", batch_size=100, epochs=60, seed=0, kappa=0.6)
    sd = np.sqrt(np.diag(w1.posterior.cov))
    assert fit.estimate
    assert np.all(np.abs(w2.posterior.mean - w1.posterior.mean) < 0.2 * sd)


def test_potential_reaches_the_builtin_factors_gaussian_vi_optimum():
    """Means within 0.01 posterior sd and the ELBO within 0.01 nats of the built-in
    factor's exact (Gauss-Hermite) Gaussian-VI optimum, with the default draws."""
    for kind in ("logistic", "poisson"):
        X, y = _logistic(N=400) if kind == "logistic" else _poisson(N=400)
        w1, m1 = _model(kind, X, y, builtin=True)
        f1 = m1.fit("ncvmp", tol=1e-12)
        w2, m2 = _model(kind, X, y)
        f2 = m2.fit("ncvmp", tol=1e-12)
        sd = np.sqrt(np.diag(w1.posterior.cov))
        assert np.all(np.abs(w2.posterior.mean - w1.posterior.mean) < 0.01 * sd), kind
        assert np.allclose(np.sqrt(np.diag(w2.posterior.cov)), sd, rtol=0.01), kind
        logh = -np.sum(gammaln(y + 1)) if kind == "poisson" else 0.0  # the built-in's log h(y)
        assert f2.elbo + logh == pytest.approx(f1.elbo, abs=0.01), kind


# ---- bad input -------------------------------------------------------------------------
def test_bad_data_and_logp_are_refused_before_any_sweep():
    X, y = _logistic(N=20)
    w = bg.MultivariateNormal(np.zeros(3), np.eye(3), name="w")
    with pytest.raises(ValueError, match=r"Potential 'lik'.*different numbers of rows"):
        bg.Potential(logistic_rows, w, data=(X, y[:-1]), name="lik")
    with pytest.raises(ValueError, match=r"Potential 'lik'.*inf"):
        bg.Potential(logistic_rows, w, data=(X, np.where(y > 0, np.inf, 0)), name="lik")
    with pytest.raises(ValueError, match=r"Potential 'lik'.*mask"):
        bg.Potential(logistic_rows, w, data=(X, y), mask=np.ones(3, bool), name="lik")
    summed = bg.Potential(lambda w, X, y: anp.sum(logistic_rows(w, X, y), axis=-1), w,
                          data=(X, y), name="summed")
    with pytest.raises(ValueError, match=r"'summed'.*shape \(\).*one log-factor per data row"):
        bg.Model(summed).fit("ncvmp")
    w2 = bg.MultivariateNormal(np.zeros(3), np.eye(3), name="w2")
    bad = bg.Potential(lambda w, X, y: anp.log(w @ X.T - 1e9), w2, data=(X, y), name="bad")
    with pytest.raises(ValueError, match=r"'bad'.*not finite at the start"):
        bg.Model(bad).fit("laplace")
    assert np.all(w2.nat[0] == 0)   # nothing changed


def test_delta_methods_refuse_models_they_cannot_step():
    x = np.array([0, 1, 2, 1, 1])
    pi = bg.Dirichlet(np.ones(3), name="pi")
    model = bg.Model(bg.Categorical(pi, plates=(5,), name="x").observe(x))
    for method in ("laplace", "gd"):
        with pytest.raises(ValueError, match=r"has none.*vmp"):
            model.fit(method)
    with pytest.raises(ValueError, match="rho"):
        _model("logistic", *_logistic())[1].fit("gd", rho=0.0)
    with pytest.raises(ValueError, match="batch_size"):
        _model("logistic", *_logistic(N=30))[1].fit("sgd", batch_size=31)


def test_a_gd_step_that_overflows_names_the_node_and_the_fix():
    X, y = _poisson()
    w, model = _model("poisson", X * 30, y)
    with pytest.raises(FloatingPointError, match=r"'(w|lik)'.*iteration \d+ of fit\('gd'\).*lower rho"):
        model.fit("gd", rho=1.0, max_iter=50)


def test_laplace_on_a_non_log_concave_potential_never_stores_an_indefinite_precision():
    """Student-t likelihood with outliers on both sides: near 0 the Hessian of log p is
    positive; the Newton step is damped (rho halved) until the precision is PD."""
    nu, obs = 1.0, np.concatenate([np.full(20, 2.0), np.full(5, -10.0), np.full(5, 12.0)])
    x = bg.Normal(0.0, 0.5, name="x")

    def logt(v, o):
        return -0.5 * (nu + 1) * anp.log1p((o - v[..., None]) ** 2 / nu)

    precs = []
    model = bg.Model(bg.Potential(logt, x, data=(obs,), name="student"))
    fit = model.fit("laplace", callback=lambda it, L: precs.append(-2 * x.nat[1]), max_iter=200)
    assert fit.converged and np.isfinite(fit.elbo)
    assert all(p > 0 for p in precs) and x.posterior.var > 0
    # the mode of log p: zero gradient, the precision its negative curvature
    m = x.posterior.mean
    r = obs - m
    grad = (nu + 1) * np.sum(r / (nu + r ** 2)) - 0.5 * m
    curv = (nu + 1) * np.sum((r ** 2 - nu) / (nu + r ** 2) ** 2) - 0.5
    assert abs(grad) < 1e-8 and x.posterior.var == pytest.approx(-1 / curv, rel=1e-8)


def test_laplace_on_a_softmax_regression_reaches_the_map():
    """Categorical(logits=Dot) with a pinned reference class: the mode is scipy's MAP and
    each class's precision is its block of the Hessian there (mean field over classes)."""
    rng = np.random.default_rng(4)
    N, D, K = 90, 2, 3
    X = np.column_stack([np.ones(N), rng.normal(size=N)])
    lg = X @ (rng.normal(size=(K, D)) * 1.5).T
    y = (rng.random(N)[:, None] > np.cumsum(np.exp(lg) / np.exp(lg).sum(1, keepdims=True), 1)).sum(1)
    Xk = X[:, None, :] * (np.arange(K) > 0)[:, None]
    W = bg.MultivariateNormal(np.zeros(D), np.eye(D), plates=(K,), name="W")
    fit = bg.Model(bg.Categorical(logits=bg.Dot(Xk, W), name="y").observe(y)).fit(
        "laplace", tol=1e-14, max_iter=500)
    Y = np.eye(K)[y]

    def negf(v):
        Wm = v.reshape(K, D)
        a = np.einsum("nkd,kd->nk", Xk, Wm)
        return -(np.sum(Y * a) - np.sum(np.logaddexp.reduce(a, axis=1)) - 0.5 * v @ v)

    res = so.minimize(negf, np.zeros(K * D), method="BFGS", options={"gtol": 1e-10})
    assert fit.converged
    assert np.allclose(W.posterior.mean[1:], res.x.reshape(K, D)[1:], atol=1e-6)
    Wm = W.posterior.mean
    a = np.einsum("nkd,kd->nk", Xk, Wm)
    p = np.exp(a - np.logaddexp.reduce(a, axis=1, keepdims=True))
    for k in range(1, K):
        Hk = np.einsum("nd,n,ne->de", X, p[:, k] * (1 - p[:, k]), X) + np.eye(D)
        assert np.allclose(W.posterior.cov[k], np.linalg.inv(Hk), rtol=1e-8, atol=1e-12)
