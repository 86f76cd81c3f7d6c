"""The deep-learning rows of the BLR table (docs/blr.md): Adam, OGN, VOGN and IVON as
settings of the one step, against hand-written iterations (textbook Adam, the IVON
package's update, the BLR step with the Gauss-Newton curvature) and the exact
Gaussian-VI optimum of the built-in logistic factor."""
import autograd.numpy as anp
import numpy as np
import pytest
from scipy.special import expit

import blrgraph as bg

P0 = 0.5


def _logistic(N=150, D=3, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(N), rng.normal(size=(N, D - 1))])
    y = (rng.random(N) < expit(X @ np.linspace(0.5, -1.0, D))).astype(float)
    return X, y


def logistic_rows(w, X, y):
    a = w @ X.T
    return y * a - anp.logaddexp(0.0, a)


def logistic_per_row(w, X, y):    # w (rows, D): one copy per row
    a = anp.sum(w * X, axis=-1)
    return y * a - anp.logaddexp(0.0, a)


def _model(X, y, kind="potential", node="mvn", per_row=False):
    D = X.shape[1]
    if node == "mvn":
        w = bg.MultivariateNormal(np.zeros(D), P0 * np.eye(D), name="w")
    else:
        w = bg.Normal(0.0, P0, plates=(D,), name="w")
    if kind == "builtin":
        lik = bg.Bernoulli(logits=bg.Dot(X, w), name="y").observe(y)
    else:
        lik = bg.Potential(logistic_rows, w, data=(X, y), name="lik",
                           per_row=logistic_per_row if per_row else None)
    return w, bg.Model(lik)


def _grad(X, y, m, scale=1.0):
    """gradient of log p(D, m): the likelihood scaled, the prior N(0, 1/P0)."""
    return scale * X.T @ (y - expit(X @ m)) - P0 * m


def _iterates(model, w, method, **kw):
    seen = []
    fit = model.fit(method, callback=lambda it, L: seen.append(np.array(w.posterior.mean)), **kw)
    return fit, seen


# ---- Adam ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,node", [("potential", "mvn"), ("potential", "normal"),
                                       ("builtin", "mvn")])
def test_full_batch_adam_iterates_equal_textbook_adam(kind, node):
    X, y = _logistic(N=120)
    w, model = _model(X, y, kind, node)
    rho, steps = 0.05, 30
    fit, seen = _iterates(model, w, "adam", rho=rho, batch_size=120, max_steps=steps, seed=0)
    # Kingma & Ba (2015), Algorithm 1, on the loss -log p(D, w)
    b1, b2, eps = 0.9, 0.999, 1e-8
    m, u, v = np.zeros(3), np.zeros(3), np.zeros(3)
    assert len(seen) == steps
    for t, got in enumerate(seen, start=1):
        g = -_grad(X, y, m)
        u = b1 * u + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m = m - rho * (u / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        assert np.allclose(got, m, rtol=1e-10, atol=1e-10), t
    assert w.point and fit.estimate


def test_minibatch_adam_iterates_equal_adam_on_the_scaled_minibatch_gradient():
    X, y = _logistic(N=100)
    w, model = _model(X, y)
    B, rho, seed = 16, 0.02, 4
    fit, seen = _iterates(model, w, "adam", rho=rho, batch_size=B, max_steps=15, seed=seed,
                          beta1=0.8, beta2=0.99, eps=1e-6)
    rng = np.random.default_rng(seed)
    m, u, v, perm, pos = np.zeros(3), np.zeros(3), np.zeros(3), rng.permutation(100), 0
    for t, got in enumerate(seen, start=1):
        if pos >= 100:
            perm, pos = rng.permutation(100), 0
        rows = perm[pos:pos + B]
        pos += len(rows)
        g = -_grad(X[rows], y[rows], m, 100 / len(rows))
        u = 0.8 * u + 0.2 * g
        v = 0.99 * v + 0.01 * g * g
        m = m - rho * (u / (1 - 0.8 ** t)) / (np.sqrt(v / (1 - 0.99 ** t)) + 1e-6)
        assert np.allclose(got, m, rtol=1e-10, atol=1e-10), t


def _batches(seed, N, B):
    """The run's minibatch rows and its draws' generator, as fit(seed=seed) makes them."""
    rng = np.random.default_rng(seed)
    draws = np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0])
    state = {"perm": rng.permutation(N), "pos": 0}

    def rows():
        if state["pos"] >= N:
            state["perm"], state["pos"] = rng.permutation(N), 0
        r = state["perm"][state["pos"]:state["pos"] + B]
        state["pos"] += len(r)
        return r
    return rows, draws


# ---- IVON ---------------------------------------------------------------------------------
@pytest.mark.parametrize("node", ["mvn", "normal"])
@pytest.mark.parametrize("mc", [1, 2])
def test_ivon_iterates_equal_the_ivon_update(node, mc):
    """The update of the authors' package (ivon/_ivon.py), written out: mean loss per row,
    weight decay delta = P0 / ess, Price Hessian estimate, momentum, debiasing."""
    N, B, seed, lr = 100, 20, 3, 0.1
    X, y = _logistic(N=N)
    w, model = _model(X, y, node=node)
    b1, b2, h0 = 0.9, 0.999, 0.5
    fit, seen = _iterates(model, w, "ivon", rho=lr, batch_size=B, max_steps=12, seed=seed,
                          beta2=b2, hess_init=h0, mc_samples=mc)
    rows, draws = _batches(seed, N, B)
    ess, delta = N, P0 / N
    m, h, g = np.zeros(3), np.full(3, h0), np.zeros(3)
    for t, got in enumerate(seen, start=1):
        r = rows()
        sigma = 1 / np.sqrt(ess * (h + delta))
        eps = draws.standard_normal((mc, 3))
        gs = np.stack([-X[r].T @ (y[r] - expit(X[r] @ (m + sigma * e))) / len(r) for e in eps])
        ghat, hhat = gs.mean(0), (gs * eps).mean(0) / sigma
        g = b1 * g + (1 - b1) * ghat
        h = b2 * h + (1 - b2) * hhat + 0.5 * (1 - b2) ** 2 * (h - hhat) ** 2 / (h + delta)
        m = m - lr * (h0 + delta) * (g / (1 - b1 ** t) + delta * m) / (h + delta)
        assert np.allclose(got, m, rtol=1e-10, atol=1e-12), t
    assert not w.point
    assert np.allclose(w.posterior.var, 1 / (ess * (h + delta)), rtol=1e-10)
    assert fit.estimate and fit.method == "ivon"


def _log_joint(X, y, th, scale):
    """log p(D, th): the likelihood scaled, the prior N(0, 1/P0) per coordinate."""
    a = X @ th
    return (scale * np.sum(y * a - np.logaddexp(0.0, a))
            + np.sum(0.5 * np.log(P0 / (2 * np.pi)) - 0.5 * P0 * th ** 2))


@pytest.mark.parametrize("node", ["mvn", "normal"])
@pytest.mark.parametrize("mc", [1, 2])
def test_the_objective_of_a_step_is_the_log_joint_at_its_gradient_point(node, mc):
    """Each step reports log p(D, theta) on its rows (scaled by N/|B|) at the point its
    gradient was taken (adam: the mean before the step; ivon: the draws of q, + H[q]),
    the values of the gradient's own forward pass (no second pass over the rows)."""
    N, B, seed = 100, 20, 3
    X, y = _logistic(N=N)
    w, model = _model(X, y, node=node)
    Ls, ms, vs = [], [], []

    def keep(it, L):
        Ls.append(L)
        ms.append(np.array(w.posterior.mean))
        prec = -2 * np.asarray(w.nat[1])         # q's precision (a point mass while running)
        vs.append(1 / (np.diag(prec) if node == "mvn" else prec))
    fit = model.fit("adam", rho=0.05, batch_size=N, max_steps=8, seed=0, callback=keep)
    m = np.zeros(3)
    for t in range(8):
        assert np.isclose(Ls[t], _log_joint(X, y, m, 1.0), rtol=1e-12), t
        m = ms[t]
    assert fit.elbo == Ls[-1] and fit.objective == "em_bound"   # log p(D, point)
    Ls.clear(), ms.clear(), vs.clear()
    h0 = 0.5
    fit = model.fit("ivon", rho=0.1, batch_size=B, max_steps=12, seed=seed, beta2=0.999,
              hess_init=h0, mc_samples=mc, callback=keep)
    rows, draws = _batches(seed, N, B)
    m, var = np.zeros(3), np.full(3, 1 / (N * (h0 + P0 / N)))
    for t in range(12):
        r = rows()
        th = m + np.sqrt(var) * draws.standard_normal((mc, 3))
        want = np.mean([_log_joint(X[r], y[r], a, N / B) for a in th]) \
            + np.sum(0.5 * np.log(2 * np.pi * np.e * var))
        assert np.isclose(Ls[t], want, rtol=1e-12), t
        m, var = ms[t], vs[t]
    assert fit.objective == "elbo"      # + H[q]: a one-draw estimate of the ELBO


# ---- Potential(value_and_grad=...) ---------------------------------------------------------
def logistic_value_and_grad(w, X, y, weights):
    """The weighted row sum of logistic_rows and its gradient, by hand."""
    a = w @ X.T
    lp, r = y * a - np.logaddexp(0.0, a), y - expit(a)
    if weights is not None:
        lp, r = lp * weights, r * weights
    return lp.sum(-1), [r @ X]


def _masked_weighted(value_and_grad, node="normal", N=120):
    """A logistic Potential with masked rows, a NaN row and weights (0 for some rows)."""
    X, y = _logistic(N=N)
    X[5, 1] = np.nan
    mask = np.ones(N, bool)
    mask[[2, 7, 11]] = False
    weights = np.random.default_rng(1).uniform(0.5, 2.0, N)
    weights[[3, 9]] = 0.0
    D = X.shape[1]
    if node == "mvn":
        w = bg.MultivariateNormal(np.zeros(D), P0 * np.eye(D), name="w")
    else:
        w = bg.Normal(0.0, P0, plates=(D,), name="w")
    lik = bg.Potential(logistic_rows, w, data=(X, y), mask=mask, weights=weights, name="lik",
                       value_and_grad=value_and_grad)
    return w, bg.Model(lik)


@pytest.mark.parametrize("method,options,node", [
    ("ivon", {"batch_size": 30, "max_steps": 12, "mc_samples": 1}, "normal"),
    ("ivon", {"batch_size": 30, "max_steps": 12, "mc_samples": 3}, "mvn"),
    ("adam", {"batch_size": 40, "max_steps": 10, "rho": 0.05}, "normal"),
    ("ncvmp", {"max_iter": 8}, "mvn")])
def test_a_potential_with_value_and_grad_fits_as_with_autograd(method, options, node):
    """The user's value and gradient (masked rows, a NaN row, weights) give the iterates,
    the trace and the q of autograd's gradient of logp to rounding."""
    runs = []
    for vg in (None, logistic_value_and_grad):
        w, model = _masked_weighted(vg, node)
        fit, seen = _iterates(model, w, method, seed=2, **options)
        runs.append((np.array(fit.elbo_trace), seen, np.array(w.posterior.var)))
    (t1, s1, v1), (t2, s2, v2) = runs
    assert len(s1) == len(s2) > 1
    assert np.allclose(t1, t2, rtol=1e-12, atol=0)
    for a, b in zip(s1, s2):
        assert np.allclose(a, b, rtol=1e-12, atol=1e-14)
    assert np.allclose(v1, v2, rtol=1e-12, atol=0)


def test_value_and_grad_of_the_zoo_networks_equals_autograd():
    """mlp's classifier / regressor value_and_grad against autograd's gradient of the
    weighted row sum of logp, with weights 0 on some rows and a row without a label,
    for one copy of the weights and for a leading axis of draws."""
    from autograd import grad
    mlp = _zoo_mlp()
    rng = np.random.default_rng(3)
    shapes = mlp.layer_shapes(5, (6,), 3)
    D = sum(a * b + b for a, b in shapes)
    X, Y = rng.normal(size=(11, 5)), np.eye(3)[rng.integers(0, 3, 11)]
    Y[4] = 0.0
    weights = rng.uniform(0.2, 3.0, 11)
    weights[[1, 6]] = 0.0
    y = rng.normal(size=11)
    cases = [(mlp.classifier_logp(shapes, 3), mlp.classifier_value_and_grad(shapes), Y, D),
             (mlp.regressor_logp(mlp.layer_shapes(5, (6,), 1)),
              mlp.regressor_value_and_grad(mlp.layer_shapes(5, (6,), 1)), y, 5 * 6 + 6 + 7 + 1)]
    for logp, vg, target, n in cases:
        for w in (rng.normal(size=n) * 0.5, rng.normal(size=(4, n)) * 0.5):
            for wt in (None, weights):
                def total(a):
                    lp = logp(a, X, target)
                    return anp.sum(lp if wt is None else lp * wt, axis=-1)
                v, (g,) = vg(w, X, target, wt)
                assert v.shape == w.shape[:-1] and g.shape == w.shape
                assert np.allclose(v, total(w), rtol=1e-10, atol=1e-12)
                want = grad(lambda a: anp.sum(total(a)))(w)
                assert np.allclose(g, want, rtol=1e-10, atol=1e-12)


def test_the_zoo_mlp_trace_is_that_of_autograd_through_its_network():
    """The zoo's Potential with its value_and_grad, and the same Potential without it
    (autograd through the network's primitive): the same IVON trace and q to 1e-12."""
    mlp = _zoo_mlp()
    X, y = _blobs(N=150)
    runs = []
    for keep in (True, False):
        model = mlp.build((X, y), hidden=(8,), prior_precision=0.1, epochs=5, batch_size=50)
        if not keep:
            model["lik"].value_and_grad = None
        fit = model.fit("ivon", seed=1, **model.meta["fit_options"])
        runs.append((np.array(fit.elbo_trace), np.array(model["w"].posterior.mean),
                     np.array(model["w"].posterior.var)))
    for a, b in zip(*runs):
        assert np.allclose(a, b, rtol=1e-12, atol=1e-14)


def test_value_and_grad_is_refused_when_it_disagrees_with_logp():
    X, y = _logistic(N=40)
    w = bg.Normal(0.0, 1.0, plates=(3,), name="w")
    with pytest.raises(TypeError, match=r"Potential 'lik'.*value_and_grad must be a function"):
        bg.Potential(logistic_rows, w, data=(X, y), name="lik", value_and_grad=3.0)

    def off_gradient(w, X, y, weights):
        v, (g,) = logistic_value_and_grad(w, X, y, weights)
        return v, [g * 1.01]

    def off_value(w, X, y, weights):
        v, g = logistic_value_and_grad(w, X, y, weights)
        return v + 1e-3, g

    def unsummed(w, X, y, weights):
        v, g = logistic_value_and_grad(w, X, y, weights)
        return v[..., None] * np.ones(len(y)) / len(y), g

    def one_draw_only(w, X, y, weights):
        v, (g,) = logistic_value_and_grad(np.reshape(w, (-1, 3))[0], X, y, weights)
        return v, [g]

    def right_only_at_the_start(w, X, y, weights):
        v, (g,) = logistic_value_and_grad(w, X, y, weights)
        return v, [g + 5.0 * np.asarray(w)]   # right at the prior mean w = 0 only

    for bad, match in [(off_gradient, r"gradient in w differs from autograd"),
                       (right_only_at_the_start,
                        r"gradient in w differs .* at a point off the prior mean"),
                       (off_value, r"total .* differs from the weighted row sum of logp"),
                       (unsummed, r"returned a total of shape \(40,\)"),
                       (one_draw_only, r"leading axis of draws"),
                       (lambda *a: 1 / 0, r"value_and_grad failed at the start \(ZeroDivision")]:
        w = bg.Normal(0.0, 1.0, plates=(3,), name="w")
        w.start_from(np.array([0.3, -0.2, 0.1]), 1.0)
        lik = bg.Potential(logistic_rows, w, data=(X, y), name="lik", value_and_grad=bad)
        with pytest.raises(ValueError, match=r"fit\('ivon'\): Potential 'lik'.*" + match):
            bg.Model(lik).fit("ivon", batch_size=10, max_steps=2)


def test_value_and_grad_of_a_logp_autograd_cannot_trace_is_checked_by_differences():
    """logp written with plain numpy (autograd cannot differentiate it): a gradient twice
    too large is refused by a central difference along a random direction; the right one
    fits."""
    X, y = _logistic(N=40)

    def numpy_rows(w, X, y):
        a = np.asarray(w) @ X.T
        return y * a - np.logaddexp(0.0, a)

    def doubled(w, X, y, weights):
        v, (g,) = logistic_value_and_grad(w, X, y, weights)
        return v, [2.0 * g]

    for vg, ok in ((logistic_value_and_grad, True), (doubled, False)):
        w = bg.Normal(0.0, 1.0, plates=(3,), name="w")
        lik = bg.Potential(numpy_rows, w, data=(X, y), name="lik", value_and_grad=vg,
                           vectorized=False)
        if ok:
            bg.Model(lik).fit("ivon", batch_size=10, max_steps=2)
        else:
            with pytest.raises(ValueError, match=r"Potential 'lik'.*along a random direction"
                                                 r".*central difference"):
                bg.Model(lik).fit("ivon", batch_size=10, max_steps=2)


# ---- OGN / VOGN ---------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["ogn", "vogn"])
@pytest.mark.parametrize("per_row", [False, True])
def test_gauss_newton_iterates_equal_the_blr_step_with_squared_row_gradients(method, per_row):
    """S <- (1 - rho) S + rho (P0 + N/|B| sum_i g_i(theta)^2), m <- m + rho (grad log-lik(theta)
    + grad log prior(m)) / S,
    theta = m (ogn) or a draw of q (vogn)."""
    N, B, seed, rho = 90, 30, 5, 0.3
    X, y = _logistic(N=N)
    w, model = _model(X, y, node="normal", per_row=per_row)
    fit, seen = _iterates(model, w, method, rho=rho, batch_size=B, max_steps=9, seed=seed)
    rows, draws = _batches(seed, N, B)
    m, S = np.zeros(3), np.full(3, P0)
    s = np.zeros(3)
    for t, got in enumerate(seen, start=1):
        r = rows()
        th = m + draws.standard_normal(3) / np.sqrt(S) if method == "vogn" else m
        res = y[r] - expit(X[r] @ th)
        gn = (N / len(r)) * ((res[:, None] * X[r]) ** 2).sum(0)
        s = (1 - rho) * s + rho * gn
        S = P0 + s
        m = m + rho * (_grad(X[r], y[r], th, N / len(r)) + P0 * th - P0 * m) / S
        assert np.allclose(got, m, rtol=1e-10, atol=1e-12), t
    if method == "vogn":
        assert not w.point and np.allclose(w.posterior.var, 1 / S, rtol=1e-10)
    else:
        assert w.point


# ---- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["adam", "ogn", "vogn", "ivon"])
def test_bad_options_are_refused_naming_them(method):
    X, y = _logistic(N=30)
    w, model = _model(X, y)
    before = [np.array(a) for a in w.nat]
    with pytest.raises(ValueError, match="batch_size"):
        model.fit(method, batch_size=31)
    with pytest.raises(ValueError, match="rho"):
        model.fit(method, rho=0.0)
    with pytest.raises(ValueError, match="rho"):
        model.fit(method, rho=-1e-3)
    if method != "adam":
        for bad in (0.0, -5.0, float("nan")):
            with pytest.raises(ValueError, match="ess"):
                model.fit(method, ess=bad)
    else:
        with pytest.raises(TypeError, match="ess"):
            model.fit(method, ess=10.0)
    with pytest.raises(ValueError, match="beta2"):
        model.fit(method, beta2=1.5)
    with pytest.raises(TypeError, match="beta1"):
        model.fit("gd", beta1=0.5)
    with pytest.raises(ValueError, match="resume"):
        model.fit(method, resume=True)
    assert all(np.array_equal(a, b) for a, b in zip(before, w.nat))


def _overflowing(N=40):
    """exp of a large linear predictor: a loss that overflows after a big step."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, 2)) * 300
    y = rng.poisson(1.0, size=N).astype(float)

    def poisson_rows(w, X, y):
        a = w @ X.T
        return y * a - anp.exp(a)
    w = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="w")
    return w, bg.Model(bg.Potential(poisson_rows, w, data=(X, y), name="lik"))


@pytest.mark.parametrize("method,options", [
    ("adam", {}), ("ogn", {"beta2": 1e-9}), ("vogn", {"beta2": 1e-9}), ("ivon", {"hess_init": 1e-8})])
def test_a_step_with_non_finite_gradients_is_refused_naming_node_iteration_and_fix(method, options):
    """Too long a step (rho = 1; a curvature that cannot catch up): exp overflows."""
    w, model = _overflowing()
    seen = []
    with pytest.raises(FloatingPointError, match=r"fit\('%s'\).*'w'.*iteration \d+.*lower rho"
                       % method):
        model.fit(method, rho=1.0, batch_size=40, max_steps=200, seed=0,
                  callback=lambda it, L: seen.append(np.array(w.nat[0])), **options)
    # the refused step is undone: q is the last finite iterate, never NaN
    assert np.all(np.isfinite(w.nat[0])) and np.all(np.isfinite(w.nat[1]))
    assert np.array_equal(w.nat[0], seen[-1] if seen else np.zeros(2))


def test_vogn_and_ivon_refuse_a_child_without_draws():
    X, y = _logistic(N=30)
    for method in ("vogn", "ivon", "ogn"):
        w, model = _model(X, y, kind="builtin")
        with pytest.raises(ValueError, match=r"Potential"):
            model.fit(method, batch_size=10)


# ---- the Bayesian MLP of the zoo ----------------------------------------------------------
def _zoo_mlp():
    from blrgraph.zoo import mlp
    return mlp


def _plain_forward(w, X, shapes):
    """The MLP written op by op with autograd.numpy (the oracle of the primitive)."""
    mlp = _zoo_mlp()
    layers, _ = mlp._unpack(w, shapes)
    h = X
    for i, (W, b) in enumerate(layers):
        z = anp.matmul(h, W) + b[..., None, :] if W.ndim == 3 else anp.dot(h, W) + b
        h = z if i == len(layers) - 1 else anp.maximum(z, 0.0)
    return h


def test_mlp_network_gradients_equal_autograd_through_the_plain_network():
    from autograd import grad
    mlp = _zoo_mlp()
    rng = np.random.default_rng(0)
    shapes = mlp.layer_shapes(5, (4, 3), 3)
    D = sum(a * b + b for a, b in shapes)
    X, Y = rng.normal(size=(7, 5)), np.eye(3)[rng.integers(0, 3, 7)]
    for w in (rng.normal(size=D), rng.normal(size=(4, D))):
        g1 = grad(lambda a: anp.sum(anp.sin(mlp.forward(a, X, shapes))))(w)
        g2 = grad(lambda a: anp.sum(anp.sin(_plain_forward(a, X, shapes))))(w)
        assert np.allclose(g1, g2, rtol=1e-12, atol=1e-13)
    # per_row: row i's gradient at its own copy of the weights
    W = rng.normal(size=(7, D))
    rows = grad(lambda a: anp.sum(mlp.classifier_logp(shapes, 3, rowwise=True)(a, X, Y)))(W)
    one = mlp.classifier_logp(shapes, 3)
    for i in range(7):
        gi = grad(lambda a: anp.sum(one(a, X[i:i + 1], Y[i:i + 1])))(W[i])
        assert np.allclose(rows[i], gi, rtol=1e-12, atol=1e-13)
    # the log-softmax is the normalised one
    z = _plain_forward(W[0], X, shapes)
    want = np.sum(Y * z, 1) - np.log(np.exp(z).sum(1))
    assert np.allclose(one(W[0], X, Y), want, rtol=1e-12)


def test_mlp_softmax_loglik_primitive_equals_autograd_through_the_plain_ops():
    from autograd import grad
    mlp = _zoo_mlp()
    rng = np.random.default_rng(1)
    shapes = mlp.layer_shapes(5, (4,), 3)
    D = sum(a * b + b for a, b in shapes)
    X, Y = rng.normal(size=(7, 5)), np.eye(3)[rng.integers(0, 3, 7)]
    Y[2] = 0.0                                        # a masked row: no label

    def plain(a):
        z = _plain_forward(a, X, shapes)
        return anp.sum(Y * z, -1) - anp.log(anp.sum(anp.exp(z), -1))

    fused = mlp.classifier_logp(shapes, 3)
    for w in (rng.normal(size=D), rng.normal(size=(4, D))):
        assert np.allclose(fused(w, X, Y), plain(w), rtol=1e-12, atol=1e-13)
        g1 = grad(lambda a: anp.sum(anp.sin(fused(a, X, Y))))(w)
        g2 = grad(lambda a: anp.sum(anp.sin(plain(a))))(w)
        assert np.allclose(g1, g2, rtol=1e-12, atol=1e-13)


def _blobs(N=240, F=4, K=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(K, F)) * 3
    y = rng.integers(0, K, N)
    return centres[y] + rng.normal(size=(N, F)), y


def test_mlp_classifier_fits_and_predict_proba_is_the_draws_average():
    mlp = _zoo_mlp()
    X, y = _blobs()
    model = mlp.build((X[:180], y[:180]), hidden=(8,), prior_precision=1e-3)
    assert model.meta["fit_options"]["batch_size"] == 180 and mlp.DEFAULT_METHOD in ("ivon", "vogn")
    fit = model.fit(mlp.DEFAULT_METHOD, **{**model.meta["fit_options"], "epochs": 40})
    w = model["w"]
    assert not w.point and np.all(w.posterior.var > 0) and w.posterior.mean.shape == (4 * 8 + 8 + 8 * 3 + 3,)
    p = mlp.predict_proba(fit, X[180:], S=30, seed=1)
    assert p.shape == (60, 3) and np.allclose(p.sum(1), 1.0, rtol=1e-12)
    assert np.mean(p.argmax(1) == y[180:]) >= 0.9
    # E_q[softmax] over the same draws, by hand
    W = w.posterior.mean + np.sqrt(w.posterior.var) * np.random.default_rng(1).standard_normal((30, w.posterior.mean.size))
    Xs = (X[180:] - model.meta["x_mean"]) / model.meta["x_sd"]
    z = np.stack([_plain_forward(Wi, Xs, model.meta["shapes"]) for Wi in W])
    e = np.exp(z - z.max(-1, keepdims=True))
    assert np.allclose(p, (e / e.sum(-1, keepdims=True)).mean(0), rtol=1e-10)
    assert list(mlp.predict(fit, X[180:182], S=30, seed=1)) == list(p[:2].argmax(1))
    table = mlp.summarize(fit)
    assert list(table["layer"]) == [1, 2] and list(table["weights"]) == [40, 27]


def test_mlp_prior_precision_by_cross_validation_is_the_least_heldout_nll():
    """prior_precision="cv": IVON fits on 3 stratified folds of the training rows for each
    value of the grid; the held-out NLL of one value recomputed by hand (the same folds,
    fits and draws of q), the chosen value its least."""
    from scipy.special import logsumexp
    mlp = _zoo_mlp()
    X, y = _blobs(N=90)
    model = mlp.build((X, y), hidden=(4,), epochs=10)
    scores = model.meta["cv_nll"]
    assert sorted(scores) == sorted(mlp.PRIOR_GRID)
    assert model.meta["prior_precision"] == min(scores, key=scores.get)
    assert model.meta["fit_options"]["hess_init"] == mlp.INIT_PRECISION / 90
    Xs = (X - X.mean(0)) / X.std(0)
    order = np.random.default_rng(0).permutation(90)
    order = order[np.argsort(y[order], kind="stable")]
    fold = np.empty(90, dtype=int)
    fold[order] = np.arange(90) % 3
    assert np.array_equal(mlp.cv_folds(np.eye(3)[y], "classification", 0), fold)
    p0, total = mlp.PRIOR_GRID[1], 0.0
    for k in range(3):
        tr, te = fold != k, fold == k
        assert set(y[te]) == {0, 1, 2}                      # stratified
        sub = mlp.build((Xs[tr], y[tr]), hidden=(4,), epochs=10, prior_precision=p0,
                        standardize=False)
        assert sub.meta["fit_options"]["hess_init"] == mlp.INIT_PRECISION / tr.sum()
        sub.fit("ivon", seed=0, **sub.meta["fit_options"])
        w = sub["w"]
        W = w.posterior.mean + np.sqrt(w.posterior.var) * \
            np.random.default_rng(0).standard_normal((mlp.CV_DRAWS, w.posterior.mean.size))
        z = np.stack([_plain_forward(Wi, Xs[te], sub.meta["shapes"]) for Wi in W])
        logp = z[:, np.arange(te.sum()), y[te]] - logsumexp(z, axis=-1)
        total -= np.sum(logsumexp(logp, axis=0) - np.log(mlp.CV_DRAWS))
    assert np.isclose(scores[p0], total / 90, rtol=1e-10)
    for bad in ("auto", True, -1.0, float("inf")):
        with pytest.raises(ValueError, match="prior_precision"):
            mlp.build((X, y), prior_precision=bad)


def test_mlp_regressor_prior_by_cross_validation_scores_the_predictive_density():
    """A regressor's held-out NLL: -log of the predictive density averaged over draws
    of q, sum_s N(y | network(w_s), 1/tau_s) / S, on the standardised target."""
    from scipy.special import logsumexp
    from scipy.stats import norm
    mlp = _zoo_mlp()
    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, size=(60, 1))
    y = np.sin(X[:, 0]) * 3 + 0.3 * rng.normal(size=60)
    model = mlp.build((X, y), hidden=(4,), epochs=10, task="regression")
    scores = model.meta["cv_nll"]
    assert model.meta["prior_precision"] == min(scores, key=scores.get)
    Xs, ys = (X - X.mean(0)) / X.std(0), (y - y.mean()) / y.std()
    fold = np.empty(60, dtype=int)
    fold[np.random.default_rng(0).permutation(60)] = np.arange(60) % 3
    p0, total = mlp.PRIOR_GRID[0], 0.0
    parts = (model.meta["shapes"], "regression", 0, mlp.regressor_logp(model.meta["shapes"]),
             mlp.regressor_logp(model.meta["shapes"], rowwise=True),
             mlp.regressor_value_and_grad(model.meta["shapes"]))
    for k in range(3):
        tr, te = fold != k, fold == k
        sub = mlp._assemble(Xs[tr], ys[tr], np.ones(tr.sum(), bool), p0, parts)
        sub.fit("ivon", seed=0, **mlp._fit_options("regression", int(tr.sum()), 200, 10))
        w = sub["w"]
        W = w.posterior.mean + np.sqrt(w.posterior.var) * \
            np.random.default_rng(0).standard_normal((mlp.CV_DRAWS, w.posterior.mean.size))
        mu = np.stack([_plain_forward(Wi[:-1], Xs[te], model.meta["shapes"])[:, 0] for Wi in W])
        dens = norm.logpdf(ys[te], mu, np.exp(-0.5 * W[:, -1:]))
        total -= np.sum(logsumexp(dens, axis=0) - np.log(mlp.CV_DRAWS))
    assert np.isclose(scores[p0], total / 60, rtol=1e-10)


def test_mlp_regressor_and_bad_input():
    mlp = _zoo_mlp()
    rng = np.random.default_rng(2)
    X = rng.uniform(-2, 2, size=(200, 1))
    y = np.sin(X[:, 0]) * 3 + 0.1 * rng.normal(size=200)
    model = mlp.build((X, y), hidden=(16,), task="regression", prior_precision=1e-3)
    assert model.meta["fit_options"]["rho"] == 0.2
    fit = model.fit("ivon", **{**model.meta["fit_options"], "epochs": 150, "seed": 0})
    pred = mlp.predict(fit, X[:50], S=20)
    assert pred.shape == (50,) and np.sqrt(np.mean((pred - y[:50]) ** 2)) < 0.5 * np.std(y)
    with pytest.raises(TypeError, match="predict_proba is for a classifier"):
        mlp.predict_proba(fit, X[:5])
    with pytest.raises(ValueError, match="hidden"):
        mlp.build((X, y), hidden=(0,))
    with pytest.raises(ValueError, match="prior_precision"):
        mlp.build((X, y), prior_precision=-1.0)
    with pytest.raises(ValueError, match="new rows need 1 columns"):
        mlp.predict(fit, np.zeros((3, 2)))


def test_blrgraph_fit_mlp_on_a_table(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    import io as _io

    from blrgraph import cli
    X, y = _blobs(N=150)
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    df["label"] = np.array(["red", "green", "blue"])[y]
    path = tmp_path / "table.csv"
    df.to_csv(path, index=False)
    out, err = _io.StringIO(), _io.StringIO()
    code = cli.main(["fit", "mlp", str(path), "--target", "label", "--epochs", "20",
                     "--out", str(tmp_path / "out"), "--no-plots"], stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    assert "ivon" in out.getvalue() and (tmp_path / "out" / "summary.csv").is_file()


def test_progress_bar_counts_epochs(capsys):
    pytest.importorskip("tqdm")
    X, y = _logistic(N=60)
    w, model = _model(X, y)
    model.fit("ivon", batch_size=20, epochs=4, seed=0, progress=True)
    err = capsys.readouterr().err
    assert "epoch" in err and "4/4" in err


def test_a_non_finite_minibatch_elbo_under_sgd_gives_sgds_fix_not_svis():
    """-exp(20 x.w) overflows after the first step: the refusal names the Potential and
    SGD's fix (a lower rho), not SVI's step-size schedule (tau=)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 3))
    w = bg.MultivariateNormal(np.zeros(3), np.eye(3), name="w")
    lik = bg.Potential(lambda w, X: -anp.exp(20 * (X @ w)), w, data=(X,), name="lik")
    with pytest.raises(FloatingPointError, match=r"minibatch ELBO.*'lik'.*fit\('sgd'\).*lower rho") \
            as err:
        bg.Model(lik).fit("sgd", rho=1.0, batch_size=50, max_iter=5, seed=0)
    assert "tau=" not in str(err.value)
