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
