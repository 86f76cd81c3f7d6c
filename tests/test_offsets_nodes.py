"""Location offsets through the nodes that observe or sum Gaussian quantities (issue 28):
``Add``, ``Dot(X, w)``, ``Gate`` and ``GaussianMarkovChain`` (zoo local_level), see
docs/dev/numerics.md, "Sums, linear predictors, gates and chains".

A location offset up to 1e8 (data and priors moved together) must change nothing but the
location: every fit is compared with the un-offset fit to 1e-8 relative, and with exact
arithmetic (60-digit mpmath) where a closed form exists. A hypothesis property moves and
scales the data of every node kind: the standardised posterior and the ELBO (plus
N log scale, the Jacobian) must not move.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

mpmath = pytest.importorskip("mpmath")

import blrgraph as bg  # noqa: E402
from test_offsets import assert_close, mp_normal_known_precision  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import local_level  # noqa: E402

mp = mpmath.mp
RTOL = 1e-8
OFFSETS = [1e3, 1e5, -1e6, 1e8]


def _move(v, offset, scale, ref=None):
    """offset + scale v; with ``ref`` = (o, s) the data o + s v as stored (rounded to doubles)
    mapped back to offset + scale (.) by exact differences: the fit at 0 that the fit at
    (o, s) must equal (data 1e8 + 1e-3 v carry v to 1e-5 only)."""
    if ref is None:
        return offset + scale * v
    o, s = ref
    return offset + scale * (((o + s * v) - o) / s)


# ---------------------------------------------------------------------------
# Add: Normal(Add(mu, c), tau) is Normal(mu) with the prior moved by c (closed form)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("offset", [0.0] + OFFSETS)
def test_add_of_a_latent_mean_and_a_constant_equals_exact_arithmetic(offset):
    rng = np.random.default_rng(3)
    y = offset + 0.7 + 0.5 * rng.standard_normal(5)
    mu = bg.Normal(0.0, 1.0, name="mu")
    obs = bg.Normal(bg.Add(mu, offset), 4.0, name="y").observe(y)
    fit = bg.Model(obs).fit("vmp")
    # y_n = mu + c + e_n: mu's posterior is that of a mean given y - c (exact differences,
    # Sterbenz), and the evidence does not depend on c
    post, lev = mp_normal_known_precision(y - offset, 0.0, 1.0, 4.0)
    assert_close(fit.elbo, lev, RTOL, what="ELBO = log evidence")
    assert_close(mu.posterior.mean, post["mean"], 1e-9, scale=1.0, what="E[mu]")
    assert_close(mu.posterior.params["precision"], post["precision"], 1e-12, what="precision")


def _mp_regression(X, y, m0, P0, tau):
    """Posterior mean, precision and log evidence of y ~ N(X w, 1/tau), w ~ N(m0, P0^-1)."""
    with mp.workdps(60):
        Xm = mp.matrix([[mp.mpf(float(v)) for v in r] for r in X])
        ym = mp.matrix([mp.mpf(float(v)) for v in y])
        m0m = mp.matrix([mp.mpf(float(v)) for v in m0])
        P0m = mp.matrix([[mp.mpf(float(v)) for v in r] for r in P0])
        t = mp.mpf(float(tau))
        P = P0m + t * Xm.T * Xm
        m = P ** -1 * (P0m * m0m + t * Xm.T * ym)
        n = len(y)
        C = mp.eye(n) / t + Xm * P0m ** -1 * Xm.T
        r = ym - Xm * m0m
        lev = -n * mp.log(2 * mp.pi) / 2 - mp.log(mp.det(C)) / 2 - (r.T * C ** -1 * r)[0] / 2
        return np.array([float(v) for v in m]), float(lev)


@pytest.mark.parametrize("offset", [0.0] + OFFSETS)
def test_dot_regression_with_known_noise_equals_exact_arithmetic(offset):
    rng = np.random.default_rng(5)
    N = 20
    X = np.column_stack([np.ones(N), rng.standard_normal(N)])
    y = offset + 1.5 + 2.0 * X[:, 1] + 0.3 * rng.standard_normal(N)
    m0, P0 = np.array([offset, 0.0]), np.diag([1e-2, 1.0])
    w = bg.MultivariateNormal(m0, P0, name="w")
    obs = bg.Normal(bg.Dot(X, w), 10.0, name="y").observe(y)
    fit = bg.Model(obs).fit("vmp")
    mean, lev = _mp_regression(X, y, m0, P0, 10.0)
    assert_close(fit.elbo, lev, RTOL, what="ELBO = log evidence")
    assert_close(w.posterior.mean[1], mean[1], 1e-9, what="slope")
    assert_close(w.posterior.mean[0] - offset, mean[0] - offset, 1e-9, scale=1.0, what="intercept - c")


def _linreg(offset, scale=1.0, seed=0, N=60, ref=None):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(N), rng.standard_normal(N)])
    y = _move(1.0 + 2.0 * X[:, 1] + 0.3 * rng.standard_normal(N), offset, scale, ref)
    w = bg.MultivariateNormal(np.array([offset, 0.0]), np.diag([1e-4, 1.0]) / scale ** 2, name="w")
    tau = bg.Gamma(1.0, scale ** 2, name="tau")
    obs = bg.Normal(bg.Dot(X, w), tau, name="y").observe(y)
    return bg.Model(obs), N


@pytest.mark.parametrize("offset", OFFSETS)
def test_dot_regression_with_learned_noise_at_an_offset_equals_the_fit_at_zero(offset):
    base_model, _ = _linreg(0.0, ref=(offset, 1.0))
    base_fit = base_model.fit("vmp", tol=1e-13, max_iter=500)
    model, _ = _linreg(offset)
    fit = model.fit("vmp", tol=1e-13, max_iter=500)
    assert fit.converged and base_fit.converged
    assert_close(fit.elbo, base_fit.elbo, RTOL, what="ELBO")
    assert_close(model["tau"].posterior.params["rate"], base_model["tau"].posterior.params["rate"], RTOL,
          what="tau rate")
    assert_close(model["w"].posterior.mean[1], base_model["w"].posterior.mean[1], RTOL, what="slope")
    assert_close(model["w"].posterior.mean[0] - offset, base_model["w"].posterior.mean[0], RTOL,
          scale=1.0, what="intercept")
    assert_close(model["w"].posterior.cov, base_model["w"].posterior.cov, RTOL, what="cov")


def test_zoo_linreg_at_large_offsets_converges_to_the_noise_of_the_fit_at_zero():
    import linreg
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200)
    y = 1.0 + 2.0 * x + 0.3 * rng.standard_normal(200)
    taus = []
    for off in (0.0, 1e4, 1e8):
        model = linreg.build((x[:, None], y + off))
        fit = model.fit("vmp", **model.meta["fit_options"])
        assert fit.converged, off
        taus.append(model["tau"].posterior.mean)
    # (the intercept's ARD prior is not moved with the data: agreement to its pull, 1e-8)
    assert_close(taus[1], taus[0], 1e-8, what="tau at 1e4")
    assert_close(taus[2], taus[0], 1e-8, what="tau at 1e8")


# ---------------------------------------------------------------------------
# Gate: Normal(Gate(z, NormalGamma)) on data at 1e8 is the Mixture
# ---------------------------------------------------------------------------
def _gate_model(offset, scale=1.0, gate=True, ref=None):
    rng = np.random.default_rng(1)
    x = _move(np.concatenate([rng.normal(-2, 1, 60), rng.normal(3, 0.5, 40)]), offset, scale, ref)
    th = bg.NormalGamma(offset, 1e-3, 1.0, scale ** 2, plates=(2,), name="theta")
    z = bg.Categorical(bg.Dirichlet(np.ones(2), name="w"), plates=(100,), name="z")
    y = (bg.Normal(bg.Gate(z, th), name="y") if gate else
         bg.Mixture(z, bg.Normal, th, name="y")).observe(x)
    return bg.Model(y)


@pytest.mark.parametrize("offset", [1e5, 1e8])
def test_gate_over_a_normal_gamma_at_an_offset_equals_the_mixture_and_the_fit_at_zero(offset):
    base = _gate_model(0.0, ref=(offset, 1.0))
    bf = base.fit("vmp", seed=0)
    gm, mm = _gate_model(offset), _gate_model(offset, gate=False)
    gf, mf = gm.fit("vmp", seed=0), mm.fit("vmp", seed=0)
    assert gf.converged and mf.converged
    assert_close(gf.elbo, bf.elbo, RTOL, what="gate ELBO vs at 0")
    assert_close(gf.elbo, mf.elbo, 1e-10, what="gate vs mixture")
    got, want = gm["theta"].posterior.params, base["theta"].posterior.params
    order = np.argsort(got["mean"]), np.argsort(want["mean"])
    assert_close(got["rate"][order[0]], want["rate"][order[1]], RTOL, what="rate")
    assert_close(got["mean"][order[0]] - offset, want["mean"][order[1]], RTOL, scale=1.0, what="mean")


# ---------------------------------------------------------------------------
# Chains: zoo local_level (Dot(H, chain)) and MultivariateNormal(chain) at offsets
# ---------------------------------------------------------------------------
def _series(T=80, seed=0, trend=False):
    rng = np.random.default_rng(seed)
    lvl = np.cumsum(0.5 * rng.standard_normal(T)) + (0.1 * np.arange(T) if trend else 0.0)
    return lvl + rng.standard_normal(T)


@pytest.mark.parametrize("trend", [False, True])
def test_local_level_at_large_offsets_equals_the_fit_at_zero(trend):
    y = _series(trend=trend)
    out = []
    for off in (0.0, 1e5, 1e8):
        model = local_level.build(y + off, trend=trend)
        fit = model.fit("vmp", **model.meta["fit_options"])
        assert fit.converged, off
        st = local_level.states(fit)
        out.append((local_level.summarize(fit)["sd"].values, fit.elbo,
                    st["level"].values - off, st["level_sd"].values))
    for sds, elbo, level, level_sd in out[1:]:
        assert_close(sds, out[0][0], RTOL, what="noise sds")
        assert_close(elbo, out[0][1], RTOL, what="ELBO")
        assert_close(level, out[0][2], RTOL, scale=1.0, what="level - offset")
        assert_close(level_sd, out[0][3], RTOL, what="level sd")


def _chain_model(offset, scale=1.0, T=40, D=2, ref=None):
    rng = np.random.default_rng(2)
    Y = _move(np.cumsum(rng.standard_normal((T, D)), axis=0) + 0.5 * rng.standard_normal((T, D)),
              offset, scale, ref)
    q = bg.Gamma(1.0, scale ** 2, plates=(D,), name="q")
    xs = bg.GaussianMarkovChain(np.full(D, offset), 1e-4 * np.eye(D) / scale ** 2, np.eye(D), q,
                                length=T, name="x")
    R = bg.Wishart(D + 1.0, np.eye(D) / scale ** 2, name="R")
    return bg.Model(bg.MultivariateNormal(xs, R, name="y").observe(Y))


@pytest.mark.parametrize("offset", [1e5, -1e8])
def test_a_chain_observed_through_a_multivariate_normal_at_an_offset_equals_the_fit_at_zero(offset):
    base, model = _chain_model(0.0, ref=(offset, 1.0)), _chain_model(offset)
    bf, f = base.fit("vmp", tol=1e-12, max_iter=2000), model.fit("vmp", tol=1e-12, max_iter=2000)
    assert f.converged and bf.converged
    assert_close(f.elbo, bf.elbo, RTOL, what="ELBO")
    assert_close(model["q"].posterior.params["rate"], base["q"].posterior.params["rate"], RTOL, what="q")
    assert_close(model["x"].posterior.mean - offset, base["x"].posterior.mean, RTOL, scale=1.0,
          what="states")
    assert_close(model["x"].posterior.cov, base["x"].posterior.cov, RTOL, what="state covariances")


# ---------------------------------------------------------------------------
# the property: every node kind, offsets and scales
# ---------------------------------------------------------------------------
def _add_model(offset, scale, ref=None):
    rng = np.random.default_rng(4)
    y = _move(0.7 + 0.5 * rng.standard_normal(30), offset, scale, ref)
    mu = bg.Normal(0.0, 1.0 / scale ** 2, name="mu")
    tau = bg.Gamma(2.0, 0.5 * scale ** 2, name="tau")
    return bg.Model(bg.Normal(bg.Add(mu, offset), tau, name="y").observe(y))


KINDS = {
    # name: (builder(offset, scale) -> Model, fit options, {node: [(param, location?, power)]})
    "add": (_add_model, {}, {"mu": [("mean", False, 1), ("precision", None, -2)],
                             "tau": [("rate", None, 2)]}),
    "dot": (lambda o, s, ref=None: _linreg(o, s, ref=ref)[0], {}, {"tau": [("rate", None, 2)]}),
    "gate": (_gate_model, {"seed": 0}, {"theta": [("rate", None, 2)]}),
    "chain": (_chain_model, {}, {"q": [("rate", None, 2)]}),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(offset=st.sampled_from([0.0, 1e3, -1e5, 1e6, 1e8, -12345678.9]),
       scale=st.sampled_from([1e-3, 1.0, 30.0]))
def test_offsets_and_scales_change_nothing_but_the_location_and_scale(kind, offset, scale):
    build, opts, params = KINDS[kind]
    opts = dict({"tol": 1e-12, "max_iter": 2000}, **opts)
    base, model = build(0.0, 1.0, ref=(offset, scale)), build(offset, scale)
    bf, f = base.fit("vmp", **opts), model.fit("vmp", **opts)
    assert f.converged and bf.converged
    n_obs = sum(int(np.sum(n.mask if n.mask is not None else np.ones(n.plates)))
                * int(np.prod(np.shape(n.value)[len(n.plates):], dtype=int))
                for n in model.nodes if n.stochastic and n.observed)
    assert_close(f.elbo + n_obs * np.log(scale), bf.elbo, 1e-8, scale=1.0, what="ELBO + N log scale")
    # an offset alone changes nothing; a scale moves the ELBO by N log s, so the relative
    # stopping rule ends the two fits some sweeps apart (parameters then agree to ~1e-6)
    rtol = 1e-8 if scale == 1.0 else 1e-5
    for name, rows in params.items():
        got, want = model[name].posterior.params, base[name].posterior.params
        for p, loc, power in rows:
            g, w = np.sort(np.ravel(got[p])), np.sort(np.ravel(want[p]))
            if loc:
                assert_close((g - offset) / scale, w, rtol, scale=1.0, what=f"{name}.{p}")
            else:
                assert_close(g * float(scale) ** -power, w, rtol, scale=1e-300, what=f"{name}.{p}")


# ---------------------------------------------------------------------------
# chains of states gating Gaussian quantities: the same start gives the same iterates
# ---------------------------------------------------------------------------
def _state_chain(K, name, T):
    return bg.CategoricalMarkovChain(bg.Dirichlet(np.ones(K), name=f"p{name}"),
                                     bg.Dirichlet(np.ones(K), plates=(K,), name=f"A{name}"),
                                     length=T, name=f"c{name}")


def _fhmm_model(offset, scale, ref=None, T=30):
    """The additive factorial HMM Normal(Add(Gate(c1, m1), Gate(c2, m2)), tau): the offset
    in m1's prior, both chains started at the same random paths."""
    rng = np.random.default_rng(0)
    v = (np.array([0.0, 3.0])[rng.integers(0, 2, T)] + np.array([0.0, 1.0, -2.0])[
        rng.integers(0, 3, T)] + 0.3 * rng.standard_normal(T))
    c1, c2 = _state_chain(2, "1", T), _state_chain(3, "2", T)
    m1 = bg.Normal(offset, 1e-2 / scale ** 2, plates=(2,), name="m1")
    m2 = bg.Normal(0.0, 1e-2 / scale ** 2, plates=(3,), name="m2")
    tau = bg.Gamma(1.0, scale ** 2, name="tau")
    y = bg.Normal(bg.Add(bg.Gate(c1, m1), bg.Gate(c2, m2)), tau, name="y")
    y.observe(_move(v, offset, scale, ref))
    start = {c1: np.eye(2)[rng.integers(0, 2, T)] + 1e-3, c2: np.eye(3)[rng.integers(0, 3, T)] + 1e-3}
    return bg.Model(y), start


def _hmm_model(offset, scale, ref=None, T=40):
    """An HMM with Normal-Gamma emissions, Mixture(c, Normal, theta) over one chain."""
    rng = np.random.default_rng(3)
    v = np.array([-2.0, 0.5, 3.0])[rng.integers(0, 3, T)] + 0.4 * rng.standard_normal(T)
    c = _state_chain(3, "", T)
    th = bg.NormalGamma(offset, 1e-3, 1.0, scale ** 2, plates=(3,), name="theta")
    y = bg.Mixture(c, bg.Normal, th, name="y").observe(_move(v, offset, scale, ref))
    return bg.Model(y), {c: np.eye(3)[rng.integers(0, 3, T)] + 1e-3}


CHAIN_KINDS = {
    # name: (builder, {node: [(param, location?, power)]})
    "fhmm": (_fhmm_model, {"m1": [("mean", True, 1), ("precision", None, -2)],
                           "m2": [("mean", False, 1)], "tau": [("rate", None, 2)]}),
    "hmm": (_hmm_model, {"theta": [("mean", True, 1), ("rate", None, 2)]}),
}


@pytest.mark.parametrize("kind", sorted(CHAIN_KINDS))
@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(offset=st.sampled_from([0.0, 1e3, -1e5, 1e6, 1e8, -12345678.9]),
       scale=st.sampled_from([1e-3, 1.0, 30.0]))
def test_chains_gating_gaussians_move_only_with_the_offset_and_scale(kind, offset, scale):
    """From the same start, 25 sweeps of the model on offset + scale v equal the sweeps on
    v: the ELBO (+ N log scale) to 1e-10 relative (measured <= 1e-13; the additive factorial
    HMM's Add of Gates was left uncentred and lost 31% of it at 1e8), every parameter to
    1e-8 beyond the resolution of a double at the offset (|offset| eps / scale)."""
    build, params = CHAIN_KINDS[kind]
    (base, bstart), (model, start) = build(0.0, 1.0, ref=(offset, scale)), build(offset, scale)
    opts = {"max_iter": 25, "tol": 0}
    bf, f = base.fit("vmp", init=bstart, **opts), model.fit("vmp", init=start, **opts)
    n_obs = sum(int(np.prod(n.plates)) for n in model.nodes if n.stochastic and n.observed)
    assert_close(f.elbo + n_obs * np.log(scale), bf.elbo, 1e-10, scale=1.0, what="ELBO")
    res = 4 * np.finfo(float).eps * abs(offset) / scale
    for name, rows in params.items():
        got, want = model[name].posterior.params, base[name].posterior.params
        for p, loc, power in rows:
            g, w = np.ravel(got[p]), np.ravel(want[p])
            if loc:
                assert_close((g - offset) / scale, w, 1e-8, scale=1.0 + res / 1e-8,
                             what=f"{name}.{p}")
            else:
                assert_close(g * float(scale) ** -power, w, 1e-8, scale=1e-300, what=f"{name}.{p}")
