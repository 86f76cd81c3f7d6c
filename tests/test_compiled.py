"""The sweep resolved once per fit (inference/compiled.py): the same iterates as the
generic sweep, its closed-form ELBO terms equal to the nodes' own terms, and the fits it
does not cover left to the generic sweep."""
from __future__ import annotations

import numpy as np
import pytest

import blrgraph as bg
from blrgraph.inference import compiled

from helpers_models import gmm_model

_SWEEP = compiled.CompiledSweep.sweep


def _data(N=120, D=3, K=3, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 4.0, size=(K, D))
    return centres[rng.integers(0, K, N)] + rng.normal(size=(N, D))


def separate(X, K=3, mask=None):
    """bench_jmlr.py's GMM: separate Gaussian means and Wishart precisions."""
    N, D = X.shape
    alpha = bg.Dirichlet(np.ones(K), name="alpha")
    z = bg.Categorical(alpha, plates=(N,), name="z")
    mu = bg.MultivariateNormal(np.zeros(D), 1e-2 * np.eye(D), plates=(K,), name="mu")
    Lam = bg.Wishart(D, np.eye(D), plates=(K,), name="Lambda")
    return bg.Model(bg.Mixture(z, bg.MultivariateNormal, mu, Lam, name="Y").observe(X, mask=mask))


def hierarchical(X, K=3):
    """The component means under a latent common mean (a factor with a latent parent)."""
    N, D = X.shape
    alpha = bg.Dirichlet(np.full(K, 2.0), name="alpha")
    z = bg.Categorical(alpha, plates=(N,), name="z")
    m0 = bg.MultivariateNormal(np.zeros(D), 1e-2 * np.eye(D), name="m0")
    Lam = bg.Wishart(D + 2.0, np.eye(D), plates=(K,), name="Lambda")
    mu = bg.MultivariateNormal(m0, 0.05 * np.eye(D), plates=(K,), name="mu")
    return bg.Model(bg.Mixture(z, bg.MultivariateNormal, mu, Lam, name="Y").observe(X))


def _same_fits(m_gen, L_gen, m_cmp, L_cmp):
    """The compiled sweep's ELBO trace and q equal the generic sweep's."""
    np.testing.assert_allclose(L_cmp, L_gen, rtol=1e-12, atol=0)
    for a, b in zip(m_gen.latent, m_cmp.latent):
        for x, y in zip(a.nat, b.nat):
            np.testing.assert_allclose(y, x, rtol=1e-9, atol=1e-9)


def _record(monkeypatch, enabled):
    """The compiled sweep on or off; the list of the iterations it runs."""
    monkeypatch.setattr(compiled, "ENABLED", enabled)
    used = []
    monkeypatch.setattr(compiled.CompiledSweep, "sweep",
                        lambda self, it: used.append(it) or _SWEEP(self, it))
    return used


def _fit(build, X, K, enabled, monkeypatch, sweeps=25):
    used = _record(monkeypatch, enabled)
    model = build(X, K)
    r0 = np.random.default_rng(1).dirichlet(np.ones(K), size=len(X))
    res = model.fit("vmp", max_iter=sweeps, tol=0, init=r0, n_jobs=1)
    return model, np.asarray(res.elbo_trace), used


@pytest.mark.parametrize("build", [separate, hierarchical, lambda X, K: gmm_model(X, K)],
                         ids=["separate", "hierarchical", "normal-wishart"])
def test_same_iterates_as_the_generic_sweep(build, monkeypatch):
    X, K = _data(), 3
    m_gen, L_gen, used_gen = _fit(build, X, K, False, monkeypatch)
    m_cmp, L_cmp, used_cmp = _fit(build, X, K, True, monkeypatch)
    assert used_gen == [] and used_cmp == list(range(1, len(L_cmp) + 1))
    assert len(L_gen) == len(L_cmp) > 5
    _same_fits(m_gen, L_gen, m_cmp, L_cmp)


@pytest.mark.parametrize("build", [separate, hierarchical])
def test_closed_form_terms_equal_the_nodes_terms(build, monkeypatch):
    X, K = _data(seed=3), 3
    model, _, _ = _fit(build, X, K, True, monkeypatch, sweeps=7)
    closed = [n for n in model.latent if n.factor.closed_form_elbo]
    assert {n.name for n in closed} >= {"alpha", "z", "mu", "Lambda"}
    for n in closed:
        got, want = compiled.ClosedTerm(n)(), n.elbo_term()
        assert got == pytest.approx(want, rel=1e-12, abs=1e-9), n.name


def test_masked_data_take_the_generic_sweep(monkeypatch):
    X, K = _data(), 3
    mask = np.ones(len(X), dtype=bool)
    mask[::7] = False

    _, L, used = _fit(lambda X, K: separate(X, K, mask), X, K, True, monkeypatch, sweeps=5)
    assert used == [] and np.all(np.isfinite(L))


def test_damped_steps_take_the_generic_sweep(monkeypatch):
    X, K = _data(), 3
    used = _record(monkeypatch, True)
    model = separate(X, K)
    model.fit("vmp", max_iter=5, tol=0, rho=0.5, n_jobs=1)
    assert used == []


def _normal(rng):
    x = rng.normal(1.5, 0.7, size=60)
    mu = bg.Normal(0.0, 1e-2, name="mu")
    tau = bg.Gamma(1.0, 1.0, name="tau")
    return bg.Model(bg.Normal(mu, tau, plates=(60,), name="x").observe(x))


def _beta_bernoulli(rng):
    x = (rng.random((50, 3)) < [0.2, 0.5, 0.9]).astype(float)
    p = bg.Beta(1.0, 1.0, plates=(3,), name="p")
    return bg.Model(bg.Bernoulli(p, plates=(50, 3), name="x").observe(x))


def _poisson_mixture(rng):
    x = np.concatenate([rng.poisson(2.0, 40), rng.poisson(9.0, 40)]).astype(float)
    pi = bg.Dirichlet(np.ones(2), name="pi")
    z = bg.Categorical(pi, plates=(80,), name="z")
    lam = bg.Gamma(1.0, 0.1, plates=(2,), name="lam")
    return bg.Model(bg.Mixture(z, bg.Poisson, lam, name="x").observe(x))


def _label_mixture(rng):
    x = np.concatenate([rng.choice(4, 40, p=[0.7, 0.1, 0.1, 0.1]),
                        rng.choice(4, 40, p=[0.1, 0.1, 0.1, 0.7])])
    pi = bg.Dirichlet(np.ones(2), name="pi")
    z = bg.Categorical(pi, plates=(80,), name="z")
    theta = bg.Dirichlet(np.ones(4), plates=(2,), name="theta")
    return bg.Model(bg.Mixture(z, bg.Categorical, theta, name="x").observe(x))


@pytest.mark.parametrize("build, compiles", [(_normal, True), (_beta_bernoulli, True),
                                             (_poisson_mixture, True), (_label_mixture, False)],
                         ids=["normal-gamma", "beta-bernoulli", "poisson-mixture", "labels"])
def test_other_conjugate_models_same_iterates(build, compiles, monkeypatch):
    """(A mixture of labels keeps q(z) as gathered tables, families/gathered.py: the
    generic sweep.)"""
    traces = []
    for enabled in (False, True):
        used = _record(monkeypatch, enabled)
        res = build(np.random.default_rng(5)).fit("vmp", max_iter=15, tol=0, n_jobs=1, seed=2)
        traces.append(np.asarray(res.elbo_trace))
        assert bool(used) == (enabled and compiles)
    np.testing.assert_allclose(traces[1], traces[0], rtol=1e-12, atol=0)


def test_data_re_observed_by_a_callback_rebuild_the_sweep(monkeypatch):
    """A callback that observes new data (same shape) mid-fit: the compiled sweep, whose
    routes hold the data they were built from, is rebuilt, so the fit equals the generic
    sweep's (before, it went on fitting the old rows: final ELBO -574.1 against -623.9)."""
    X, X2 = _data(N=100), _data(N=100, seed=9)
    r0 = np.random.default_rng(1).dirichlet(np.ones(3), size=100)
    out = {}
    for enabled in (False, True):
        monkeypatch.setattr(compiled, "ENABLED", enabled)
        model = separate(X)

        def cb(it, L, model=model):
            if it == 5:
                model["Y"].observe(X2)
            return False
        res = model.fit("vmp", max_iter=15, tol=0, n_jobs=1, init=r0, callback=cb)
        out[enabled] = (np.asarray(res.elbo_trace), bg.elbo(model))
    np.testing.assert_allclose(out[True][0], out[False][0], rtol=1e-12, atol=0)
    assert out[True][1] == pytest.approx(out[False][1], rel=1e-12)


# ---- products of latent vectors: routes through deterministic nodes ------------------

def _pca(Y, K=4, ard=True, mask=None, offsets=False, noise=()):
    """bench_pca.py's model (ARD, or one precision shared by every loading with
    ``ard=False``); ``offsets``: the zoo's Add(Dot(W, x), mu); ``noise=(M, 1)``: one noise
    precision per row, ``(N,)`` one per column."""
    M, N = Y.shape
    rng = np.random.default_rng(11)
    alpha = bg.Gamma(1e-2, 1e-2, plates=(K,) if ard else (), name="alpha")
    W = bg.MultivariateNormal(np.zeros(K), alpha, plates=(M, 1), name="W")
    X = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(N,), name="X")
    tau = bg.Gamma(1e-2, 1e-2, plates=noise, name="tau")
    mean = bg.Dot(W, X)
    if offsets:
        mean = bg.Add(mean, bg.Normal(0.0, 1e-2, plates=(M, 1), name="mu"))
    y = bg.Normal(mean, tau, name="Y").observe(Y, mask=mask)
    X.start_from(rng.normal(size=(N, K)), np.eye(K))
    W.start_from(rng.normal(size=(M, 1, K)), np.eye(K))
    return bg.Model(y)


def _pca_data(M=12, N=60, seed=4):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(M, 3)) @ rng.normal(size=(3, N)) + 0.3 * rng.normal(size=(M, N)) + 1.0


@pytest.mark.parametrize("kw, compiles", [
    (dict(), True), (dict(ard=False), True), (dict(rotate=True), True),
    (dict(ard=False, rotate=True), True), (dict(offsets=True), False),
    (dict(noise=(60,)), True), (dict(noise=(12, 1)), False), (dict(missing=True), False),
    (dict(missing=True, rotate=True), False)],
    ids=["ard", "shared-precision", "ard-rotations", "shared-rotations", "offsets",
         "noise-per-column", "noise-per-row", "missing", "missing-rotations"])
def test_products_of_latents_same_iterates(kw, compiles, monkeypatch):
    """PCA (``Dot(W, X)``, a deterministic node between the latent vectors and the data)
    takes the compiled sweep, its messages routed through the product: the same ELBO
    trace and q as the generic sweep, with and without rotations; missing values (a
    mask) and a local block that iterates (the zoo's offsets mu, or a noise precision
    per row, local with W and read by it) take the generic sweep."""
    kw = dict(kw)
    rotate, missing = kw.pop("rotate", False), kw.pop("missing", False)
    Y = _pca_data()
    if missing:
        kw["mask"] = np.random.default_rng(2).random(Y.shape) > 0.1
    out = []
    for enabled in (False, True):
        used = _record(monkeypatch, enabled)
        model = _pca(Y, **kw)
        res = model.fit("vmp", max_iter=20, tol=0, n_jobs=1, seed=3, rotate=rotate)
        assert bool(used) == (enabled and compiles)
        out.append((model, np.asarray(res.elbo_trace)))
    (m_gen, L_gen), (m_cmp, L_cmp) = out
    assert len(L_gen) == len(L_cmp) == 20 and np.all(np.diff(L_cmp) > -1e-9 * np.abs(L_cmp[1:]))
    _same_fits(m_gen, L_gen, m_cmp, L_cmp)


@pytest.mark.parametrize("ard", [True, False])
def test_pca_closed_form_terms_equal_the_nodes_terms(ard, monkeypatch):
    """The Gamma precisions, the ARD loadings (a prior whose parents move) and the scores
    (one covariance for every entry: the sums over the entries without their stack) take
    the closed form, equal to the nodes' own terms."""
    monkeypatch.setattr(compiled, "ENABLED", True)
    model = _pca(_pca_data(seed=8), ard=ard)
    model.fit("vmp", max_iter=6, tol=0, n_jobs=1, seed=1, rotate=False)
    X, W = model["X"], model["W"]
    assert X.family.shared_covariance(X.nat) is not None
    assert W.family.shared_covariance(W.nat) is not None
    for n in model.latent:
        assert n.factor.closed_form_elbo, n.name
        got, want = compiled.ClosedTerm(n)(), n.elbo_term()
        assert got == pytest.approx(want, rel=1e-12, abs=1e-9), n.name


def test_pca_loadings_and_data_terms_fused(monkeypatch):
    """W is stepped last: its term and the data's (through Dot(W, X), linear in W's
    moments) are A(lam_W) - E[A0] + the data's rest, equal to the two terms apart."""
    monkeypatch.setattr(compiled, "ENABLED", True)
    built = []
    orig = compiled.compile_sweep
    monkeypatch.setattr("blrgraph.inference.loop.compile_sweep",
                        lambda run, view: built.append(orig(run, view)) or built[-1])
    model = _pca(_pca_data(seed=9))
    model.fit("vmp", max_iter=5, tol=0, n_jobs=1, seed=2, rotate=False)
    fused = [t for t in built[0].terms if isinstance(t, compiled.FusedTerm)]
    assert len(fused) == 1 and fused[0].step.node is model["W"]
    t = fused[0]
    apart = t.closed() + sum(c() for c in t.children)
    assert t() == pytest.approx(apart, rel=1e-12)
    assert apart == pytest.approx(model["W"].elbo_term() + model["Y"].elbo_term(), rel=1e-12)


def test_finiteness_test_finds_every_non_finite_entry():
    """The compiled step's test (one product with zeros per component) against
    np.isfinite on C- and Fortran-ordered, strided, broadcast and 0-d arrays, with one
    inf, -inf or nan at every position, and with finite entries whose sum overflows."""
    zeros = {}
    base = np.arange(24.0).reshape(2, 3, 4) - 7.5
    for bad in (np.inf, -np.inf, np.nan):
        for i in range(base.size):
            a = base.copy()
            a.flat[i] = bad
            for view in (a, np.asfortranarray(a), a[:, ::2], a.transpose(2, 0, 1)):
                want = bool(np.isfinite(view).all())
                assert compiled._all_finite((base, view), zeros) is want
        assert not compiled._all_finite((np.asarray(bad),), zeros)
        assert not compiled._all_finite((np.broadcast_to(np.array([1.0, bad]), (5, 2)),), zeros)
    huge = np.full((3, 4), 1.7e308)
    assert compiled._all_finite((base, np.asfortranarray(base), base[:, ::2], huge,
                                 np.asarray(2.0), np.broadcast_to(base[0], (4, 3, 4))), zeros)
    big = np.ones(compiled.SUM_CHECK + 1)   # (above SUM_CHECK: blr._finite, no kept zeros)
    assert compiled._all_finite((big,), zeros) and big.size not in zeros
    big[-1] = np.nan
    assert not compiled._all_finite((big,), zeros)
    with np.errstate(over="ignore"):
        assert np.add.reduce(huge, axis=None) == np.inf   # (a sum would have overflowed)


def test_non_finite_step_refused_as_by_the_generic_sweep(monkeypatch):
    """Data whose x x^T overflows: the compiled sweep refuses the same step with the
    same error as the generic one (blr_update names the node and the fix)."""
    X = _data()
    X[5, 0] = 1e160
    r0 = np.random.default_rng(1).dirichlet(np.ones(3), size=len(X))
    errors = []
    for enabled in (False, True):
        monkeypatch.setattr(compiled, "ENABLED", enabled)
        with pytest.raises(FloatingPointError) as err, np.errstate(all="ignore"):
            separate(X).fit("vmp", max_iter=5, tol=0, n_jobs=1, init=r0)
        errors.append(str(err.value))
    assert errors[0] == errors[1]
    assert "Wishart 'Lambda' produced non-finite natural parameters" in errors[1]


def test_mvn_log_partition_total_is_the_sum_of_log_partition():
    """MultivariateNormal.log_partition_total (ClosedTerm's A(lam) summed) against the
    entries' log_partition summed: distinct precisions, one precision shared by every
    entry (a broadcast view: PCA's scores), no plates."""
    from blrgraph.families.multivariate_normal import MultivariateNormal
    fam = MultivariateNormal()
    rng = np.random.default_rng(4)
    A = rng.normal(size=(6, 3, 3))
    P = A @ A.transpose(0, 2, 1) + 3 * np.eye(3)
    m = rng.normal(size=(6, 3))
    shared = np.broadcast_to(P[0], (6, 3, 3))
    for nat in (fam.natural_from_params(m, P), fam.natural_from_params(m, shared),
                fam.natural_from_params(m[0], P[0])):
        want = float(np.sum(fam.log_partition(nat)))
        assert fam.log_partition_total(nat) == pytest.approx(want, rel=1e-14, abs=1e-13)


def test_dirichlet_and_categorical_log_partition_totals_are_the_sums_of_log_partition():
    """Dirichlet.log_partition_total and Categorical.log_partition_total (the ELBO terms of
    a mixture's weights and assignments) give the number of _fsum(log_partition) exactly,
    with and without plates, against scipy's closed forms; the Dirichlet's kept alpha and
    alpha_0 follow a new q (a new array with other numbers) and its moments are scipy's
    digamma differences."""
    from scipy.special import digamma, gammaln, logsumexp
    from blrgraph.families.base import _fsum
    from blrgraph.families.categorical import Categorical
    from blrgraph.families.dirichlet import Dirichlet
    rng = np.random.default_rng(5)
    fam = Dirichlet()
    for shape in ((4,), (3, 4)):
        for _ in range(2):   # (a second q: the kept sums must follow it)
            al = rng.gamma(2.0, size=shape) + 0.1
            nat = fam.natural_from_params(al)
            want = np.sum(gammaln(al), axis=-1) - gammaln(np.sum(al, axis=-1))
            assert fam.log_partition_total(nat) == _fsum(fam.log_partition(nat))
            assert fam.log_partition_total(nat) == pytest.approx(float(np.sum(want)), rel=1e-14)
            np.testing.assert_allclose(fam.mean_params(nat)[0],
                                       digamma(al) - digamma(al.sum(-1, keepdims=True)),
                                       rtol=1e-14, atol=1e-14)
    cat = Categorical()
    for shape in ((5,), (200, 3), (4, 6, 3)):
        eta = rng.normal(size=shape) * 3
        nat = (eta,)
        assert cat.log_partition_total(nat) == _fsum(cat.log_partition(nat))
        assert cat.log_partition_total(nat) == pytest.approx(
            float(np.sum(logsumexp(eta, axis=-1))), rel=1e-13)


def test_small_sums_give_numpys_nan_and_inf():
    """families.base._fsum (the ELBO terms' small sums): inf - inf and an overflow give
    numpy's nan and inf, for the sweep's non-finite check to name the node, not a
    ValueError / OverflowError from math.fsum."""
    from blrgraph.families.base import _fsum
    with np.errstate(invalid="ignore", over="ignore"):
        assert np.isnan(_fsum(np.array([np.inf, -np.inf])))
        assert _fsum(np.array([1e308, 1e308])) == np.inf
    assert _fsum(np.array([0.1, 0.2, 0.3])) == pytest.approx(0.6, rel=1e-15)


def test_a_prior_in_permuted_memory_order_takes_the_compiled_step(monkeypatch):
    """A per-row prior precision whose memory is in another axis order (np.moveaxis): the
    compiled step's sum keeps that order and is spread back as numpy's broadcast (it once
    built a stride-0 view that needs C order, and raised); the same ELBO as the generic
    sweep."""
    A, B, N, K = 3, 2, 20, 2
    P = np.moveaxis(np.stack([np.eye(K) * (1 + a) for a in range(A)], axis=-1), -1, 0)[:, None, None]
    assert not P.flags.c_contiguous

    def build():
        W = bg.MultivariateNormal(np.zeros(K), P, plates=(A, B, 1), name="W")
        X = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(N,), name="X")
        tau = bg.Gamma(1.0, 1.0, name="tau")
        Y = np.random.default_rng(7).normal(size=(A, B, N))
        y = bg.Normal(bg.Dot(W, X), tau, name="Y").observe(Y)
        X.start_from(np.random.default_rng(1).normal(size=(N, K)), np.eye(K))
        return bg.Model(y)
    traces = []
    for on in (False, True):
        monkeypatch.setattr(compiled, "ENABLED", on)
        traces.append(build().fit("vmp", max_iter=5, tol=0, n_jobs=1, seed=0).elbo_trace)
    np.testing.assert_allclose(traces[1], traces[0], rtol=1e-12)
