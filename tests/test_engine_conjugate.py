"""The engine against the closed-form oracles (blrgraph.closed_form, docs/math.md §6).

Through the public API only (``import blrgraph as bg``):

* every oracle is reproduced by ``Model(obs).fit("conjugate")`` and by
  ``fit("vmp")``: posterior parameters (named as in closed_form) to 1e-8
  relative, and ``fit.elbo`` = log evidence to 1e-8 relative;
* ``posterior.mean``/``var`` agree with the frozen scipy object of ``to_scipy()``;
* masked (missing) rows give exactly the posterior/evidence of the observed
  subset, ``weights=`` counts equal repeated rows;
* hypothesis: random plate shapes and broadcasting parents give the closed form
  entry by entry;
* mean-field models (separate mean and precision nodes; linear regression with
  a Gamma noise precision): "conjugate" is refused, VMP has a monotone ELBO and
  reaches the mean-field fixed point written out here.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import integrate, stats
from scipy.special import digamma, gammaln

import blrgraph as bg
from blrgraph import closed_form as cf

RTOL = 1e-8
METHODS = ["conjugate", "vmp"]


def rng_for(seed):
    return np.random.default_rng(seed)


def random_spd(rng, D, scale=1.0):
    A = rng.normal(size=(D, D))
    return scale * (A @ A.T / D + 0.5 * np.eye(D))


def assert_rel(actual, expected, rtol=RTOL, what="", atol=1e-13):
    """max |actual - expected| / |expected| <= rtol (an absolute 1e-13 floor for zeros)."""
    actual = np.asarray(actual, dtype=float)
    expected = np.asarray(expected, dtype=float)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    scale = np.maximum(np.abs(expected), np.finfo(float).tiny)
    err = np.max(np.maximum(np.abs(actual - expected) - atol, 0.0) / scale) if actual.size else 0.0
    assert err <= rtol, f"{what}: relative error {err:.3g} > {rtol}"


def assert_matches(node, fit, res, rtol=RTOL):
    params = node.posterior.params
    assert set(res.params) <= set(params), f"{node.name}: params {sorted(params)}"
    for k, v in res.params.items():
        assert_rel(params[k], v, rtol, what=f"{node.name}.{k}")
    assert_rel(fit.elbo, res.log_evidence, rtol, what="elbo vs log evidence")


# --------------------------------------------------------------------------
# the oracle cases: data rows, a builder and the oracle, all indexed by rows
# --------------------------------------------------------------------------
class Case:
    """``build(rows)`` returns (latent node, unobserved data node) for those rows
    of the side information (trials n, design X); ``oracle(rows)`` the closed form
    for ``data[rows]``."""

    N = 14

    def __init__(self, rng):
        self.rng = rng
        self.data = self.make_data(rng)

    def rows(self):
        return np.arange(self.N)


class BetaBernoulli(Case):
    def make_data(self, rng):
        return rng.integers(0, 2, self.N).astype(float)

    def build(self, rows):
        p = bg.Beta(2.0, 3.0, name="p")
        return p, bg.Bernoulli(p, plates=(len(rows),), name="x")

    def oracle(self, rows):
        return cf.beta_bernoulli(self.data[rows], 2.0, 3.0)


class BetaBinomial(Case):
    def make_data(self, rng):
        self.n = rng.integers(1, 12, self.N)
        return rng.binomial(self.n, 0.35).astype(float)

    def build(self, rows):
        p = bg.Beta(1.5, 0.7, name="p")
        return p, bg.Binomial(self.n[rows], p, name="x")

    def oracle(self, rows):
        return cf.beta_binomial(self.data[rows], self.n[rows], 1.5, 0.7)


class GammaPoisson(Case):
    def make_data(self, rng):
        return rng.poisson(3.5, self.N).astype(float)

    def build(self, rows):
        r = bg.Gamma(2.0, 0.8, name="rate")
        return r, bg.Poisson(r, plates=(len(rows),), name="x")

    def oracle(self, rows):
        return cf.gamma_poisson(self.data[rows], 2.0, 0.8)


class GammaExponential(Case):
    def make_data(self, rng):
        return rng.exponential(1.7, self.N)

    def build(self, rows):
        r = bg.Gamma(1.5, 2.5, name="rate")
        return r, bg.Exponential(r, plates=(len(rows),), name="x")

    def oracle(self, rows):
        return cf.gamma_exponential(self.data[rows], 1.5, 2.5)


ALPHA = np.array([0.7, 2.0, 1.0, 3.5])


class DirichletCategorical(Case):
    def make_data(self, rng):
        return rng.integers(0, ALPHA.size, self.N).astype(float)

    def build(self, rows):
        pi = bg.Dirichlet(ALPHA, name="pi")
        return pi, bg.Categorical(pi, plates=(len(rows),), name="x")

    def oracle(self, rows):
        return cf.dirichlet_categorical(self.data[rows], ALPHA)


class DirichletMultinomial(Case):
    def make_data(self, rng):
        return rng.multinomial(9, [0.1, 0.2, 0.3, 0.4], size=self.N).astype(float)

    def build(self, rows):
        pi = bg.Dirichlet(ALPHA, name="pi")
        return pi, bg.Multinomial(9, pi, plates=(len(rows),), name="x")

    def oracle(self, rows):
        return cf.dirichlet_multinomial(self.data[rows], ALPHA)


class NormalKnownPrecision(Case):
    def make_data(self, rng):
        return rng.normal(1.2, 1.5, self.N)

    def build(self, rows):
        mu = bg.Normal(-0.4, 0.25, name="mu")
        return mu, bg.Normal(mu, 0.6, plates=(len(rows),), name="x")

    def oracle(self, rows):
        return cf.normal_known_precision(self.data[rows], -0.4, 0.25, 0.6)


class GammaKnownMean(Case):
    def make_data(self, rng):
        return rng.normal(0.5, 0.8, self.N)

    def build(self, rows):
        tau = bg.Gamma(2.5, 1.5, name="tau")
        return tau, bg.Normal(0.3, tau, plates=(len(rows),), name="x")

    def oracle(self, rows):
        return cf.gamma_known_mean(self.data[rows], 0.3, 2.5, 1.5)


class NormalGammaCase(Case):
    def make_data(self, rng):
        return rng.normal(-1.0, 2.0, self.N)

    def build(self, rows):
        th = bg.NormalGamma(0.5, 1.7, 2.0, 3.0, name="theta")
        return th, bg.Normal(th, plates=(len(rows),), name="x")

    def oracle(self, rows):
        return cf.normal_gamma(self.data[rows], 0.5, 1.7, 2.0, 3.0)


D = 3
_R = rng_for(1234)
M0 = _R.normal(size=D)
L0 = random_spd(_R, D, 0.5)
LX = random_spd(_R, D, 2.0)
W0 = random_spd(_R, D, 0.4)


class MvnKnownPrecision(Case):
    def make_data(self, rng):
        return rng.normal(size=(self.N, D)) + 1.0

    def build(self, rows):
        mu = bg.MultivariateNormal(M0, L0, name="mu")
        return mu, bg.MultivariateNormal(mu, LX, plates=(len(rows),), name="x")

    def oracle(self, rows):
        return cf.mvn_known_precision(self.data[rows], M0, L0, LX)


class WishartKnownMean(Case):
    def make_data(self, rng):
        return rng.multivariate_normal(np.zeros(D), random_spd(rng, D), size=self.N)

    def build(self, rows):
        Lam = bg.Wishart(D + 0.5, W0, name="Lam")
        return Lam, bg.MultivariateNormal(M0, Lam, plates=(len(rows),), name="x")

    def oracle(self, rows):
        return cf.wishart_known_mean(self.data[rows], M0, D + 0.5, W0)


class NormalWishartCase(Case):
    def make_data(self, rng):
        return rng.multivariate_normal(np.ones(D), random_spd(rng, D), size=self.N)

    def build(self, rows):
        th = bg.NormalWishart(M0, 0.8, D + 1.5, W0, name="theta")
        return th, bg.MultivariateNormal(th, plates=(len(rows),), name="x")

    def oracle(self, rows):
        return cf.normal_wishart(self.data[rows], M0, 0.8, D + 1.5, W0)


class LinregKnownPrecision(Case):
    def make_data(self, rng):
        self.X = rng.normal(size=(self.N, D))
        return self.X @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.7, self.N)

    def build(self, rows):
        w = bg.MultivariateNormal(M0, L0, name="w")
        return w, bg.Normal(bg.Dot(self.X[rows], w), 2.0, name="y")

    def oracle(self, rows):
        return cf.linreg_known_precision(self.X[rows], self.data[rows], M0, L0, 2.0)


CASES = [BetaBernoulli, BetaBinomial, GammaPoisson, GammaExponential, DirichletCategorical,
         DirichletMultinomial, NormalKnownPrecision, GammaKnownMean, NormalGammaCase,
         MvnKnownPrecision, WishartKnownMean, NormalWishartCase, LinregKnownPrecision]
IDS = [c.__name__ for c in CASES]


def test_every_oracle_has_a_case():
    covered = {"beta_bernoulli", "beta_binomial", "gamma_poisson", "gamma_exponential",
               "dirichlet_categorical", "dirichlet_multinomial", "normal_known_precision",
               "gamma_known_mean", "normal_gamma", "mvn_known_precision", "wishart_known_mean",
               "normal_wishart", "linreg_known_precision"}
    assert set(cf.__all__) - {"ConjugateResult"} == covered
    assert len(CASES) == len(covered)


# --------------------------------------------------------------------------
# exact reproduction of every oracle, by "conjugate" and by "vmp"
# --------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case_cls", CASES, ids=IDS)
def test_oracle_reproduced(case_cls, method):
    case = case_cls(rng_for(hash(case_cls.__name__) % 2**32))
    rows = case.rows()
    node, obs = case.build(rows)
    obs.observe(case.data[rows])
    fit = bg.Model(obs).fit(method)
    assert fit.method == method
    assert np.isfinite(fit.elbo)
    assert fit.elbo_trace[-1] == fit.elbo
    assert_matches(node, fit, case.oracle(rows))
    if method == "conjugate":
        assert fit.n_iter == 1 and fit.converged
    else:
        assert fit.converged and fit.n_iter <= 3  # exact after one sweep, confirmed by the next


def _scipy_mean_var(dist):
    """(mean, elementwise var) of a frozen scipy distribution."""
    if hasattr(dist, "df") and hasattr(dist, "loc") and hasattr(dist, "shape"):  # multivariate_t
        df = dist.df
        return dist.loc, np.diag(dist.shape) * df / (df - 2.0)
    if not callable(dist.mean):  # multivariate_normal: mean and cov are attributes
        return dist.mean, np.diag(dist.cov)
    return np.asarray(dist.mean()), np.asarray(dist.var())


@pytest.mark.parametrize("case_cls", CASES, ids=IDS)
def test_posterior_mean_var_agree_with_scipy(case_cls):
    case = case_cls(rng_for(7))
    node, obs = case.build(case.rows())
    obs.observe(case.data)
    bg.Model(obs).fit("conjugate")
    post = node.posterior
    frozen = post.to_scipy()
    means, variances = post.mean, post.var
    if isinstance(frozen, tuple):  # joint node: (marginal of mu, marginal of tau / Lambda)
        assert isinstance(means, tuple) and len(means) == len(frozen) == 2
        pairs = list(zip(frozen, means, variances))
    else:
        pairs = [(frozen, means, variances)]
    for dist, m, v in pairs:
        sm, sv = _scipy_mean_var(dist)
        np.testing.assert_allclose(m, sm, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(v, sv, rtol=1e-10, atol=1e-12)
    if hasattr(frozen, "cov") and not callable(frozen.cov) and hasattr(post.family, "cov"):
        np.testing.assert_allclose(post.cov, frozen.cov, rtol=1e-10)


def test_posterior_mean_matches_oracle_closed_forms():
    """A few means written out from the oracle's parameters (not via scipy)."""
    case = GammaPoisson(rng_for(3))
    node, obs = case.build(case.rows())
    obs.observe(case.data)
    bg.Model(obs).fit("conjugate")
    res = case.oracle(case.rows())
    assert_rel(node.posterior.mean, res.params["shape"] / res.params["rate"])
    assert_rel(node.posterior.var, res.params["shape"] / res.params["rate"] ** 2)
    case = NormalWishartCase(rng_for(3))
    node, obs = case.build(case.rows())
    obs.observe(case.data)
    bg.Model(obs).fit("conjugate")
    res = case.oracle(case.rows())
    m, L = node.posterior.mean
    assert_rel(m, res.params["mean"])
    assert_rel(L, res.params["dof"] * res.params["scale"])


# --------------------------------------------------------------------------
# masks and weights
# --------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case_cls", CASES, ids=IDS)
def test_masked_rows_equal_observed_subset(case_cls, method):
    case = case_cls(rng_for(11))
    rows = case.rows()
    mask = rng_for(12).random(case.N) < 0.6
    mask[:2] = [True, False]
    data = np.array(case.data, dtype=float)
    data[~mask] = np.nan
    node, obs = case.build(rows)
    obs.observe(data, mask=mask)
    fit = bg.Model(obs).fit(method)
    assert_matches(node, fit, case.oracle(rows[mask]))


@pytest.mark.parametrize("case_cls", CASES, ids=IDS)
def test_all_rows_masked_gives_the_prior(case_cls):
    case = case_cls(rng_for(13))
    rows = case.rows()
    data = np.full(np.shape(case.data), np.nan)
    node, obs = case.build(rows)
    obs.observe(data, mask=np.zeros(case.N, bool))
    fit = bg.Model(obs).fit("conjugate")
    assert_matches(node, fit, case.oracle(rows[:0]))
    assert abs(fit.elbo) < 1e-10


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case_cls", CASES, ids=IDS)
def test_weights_equal_repeated_rows(case_cls, method):
    case = case_cls(rng_for(21))
    rows = np.arange(6)
    counts = np.array([1, 3, 0, 2, 5, 1])
    node, obs = case.build(rows)
    obs.observe(case.data[rows], weights=counts)
    fit = bg.Model(obs).fit(method)
    assert_matches(node, fit, case.oracle(np.repeat(rows, counts)))


def test_mask_and_weights_together():
    case = GammaPoisson(rng_for(22))
    rows = np.arange(8)
    counts = np.array([2, 1, 4, 1, 3, 1, 2, 5])
    mask = np.array([1, 1, 0, 1, 0, 1, 1, 0], bool)
    data = case.data[rows].copy()
    data[~mask] = np.nan
    node, obs = case.build(rows)
    obs.observe(data, mask=mask, weights=counts)
    fit = bg.Model(obs).fit("conjugate")
    assert_matches(node, fit, case.oracle(np.repeat(rows[mask], counts[mask])))


def test_masked_entries_of_a_plated_node():
    """Entry-wise mask on (N, A) data: each column is its own subset."""
    rng = rng_for(23)
    N, A = 9, 3
    x = rng.normal(0.0, 1.0, (N, A))
    mask = rng.random((N, A)) < 0.6
    xd = np.where(mask, x, np.nan)
    tau = bg.Gamma(2.0, 1.0, plates=(A,), name="tau")
    y = bg.Normal(0.1, tau, plates=(N, A), name="y").observe(xd, mask=mask)
    fit = bg.Model(y).fit("conjugate")
    ev = 0.0
    for j in range(A):
        res = cf.gamma_known_mean(x[mask[:, j], j], 0.1, 2.0, 1.0)
        ev += res.log_evidence
        assert_rel(tau.posterior.params["shape"][j], res.params["shape"])
        assert_rel(tau.posterior.params["rate"][j], res.params["rate"])
    assert_rel(fit.elbo, ev)


# --------------------------------------------------------------------------
# hypothesis: plates and broadcasting, entry by entry
# --------------------------------------------------------------------------
def _groups(param_plates, data_plates):
    """For every entry of the parameter plates, the boolean selector of the data
    entries it is broadcast to (right-aligned numpy broadcasting)."""
    size = int(np.prod(param_plates)) if param_plates else 1
    ids = np.arange(size).reshape(param_plates)
    ids = np.broadcast_to(ids, data_plates)
    return [(np.unravel_index(k, param_plates) if param_plates else (), ids == k)
            for k in range(size)]


def _sub_plates(A, B, choice):
    return [(A, B), (B,), (A, 1), (1, B), ()][choice]


plate_setup = st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3),
                        st.integers(0, 4), st.integers(0, 2**31 - 1))

HYP = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.too_slow])


@HYP
@given(plate_setup, st.booleans())
def test_gamma_poisson_plates_entry_by_entry(setup, use_mask):
    N, A, B, choice, seed = setup
    rng = rng_for(seed)
    rplates = _sub_plates(A, B, choice)
    x = rng.poisson(2.5, (N, A, B)).astype(float)
    mask = rng.random((N, A, B)) < 0.7 if use_mask else np.ones((N, A, B), bool)
    rate = bg.Gamma(1.5, 0.5, plates=rplates, name="rate")
    y = bg.Poisson(rate, plates=(N, A, B), name="y")
    y.observe(np.where(mask, x, np.nan), mask=mask) if use_mask else y.observe(x)
    fit = bg.Model(y).fit("conjugate")
    post = rate.posterior.params
    assert np.shape(post["shape"]) == rplates
    ev = 0.0
    for idx, sel in _groups(rplates, (N, A, B)):
        res = cf.gamma_poisson(x[sel & mask], 1.5, 0.5)
        ev += res.log_evidence
        assert_rel(post["shape"][idx], res.params["shape"])
        assert_rel(post["rate"][idx], res.params["rate"])
    assert_rel(fit.elbo, ev)


@HYP
@given(plate_setup)
def test_broadcasting_hyperparameters_entry_by_entry(setup):
    """Gamma(shape (B,), rate (A, 1)) has plates (A, B); each entry its own prior."""
    N, A, B, _, seed = setup
    rng = rng_for(seed)
    shape = rng.uniform(0.5, 3.0, B)
    rate_h = rng.uniform(0.5, 3.0, (A, 1))
    x = rng.poisson(2.0, (N, A, B)).astype(float)
    lam = bg.Gamma(shape, rate_h, name="lam")
    assert lam.plates == (A, B)
    y = bg.Poisson(lam, name="y").observe(x)
    fit = bg.Model(y).fit("vmp")
    post = lam.posterior.params
    ev = 0.0
    for i in range(A):
        for j in range(B):
            res = cf.gamma_poisson(x[:, i, j], shape[j], rate_h[i, 0])
            ev += res.log_evidence
            assert_rel(post["shape"][i, j], res.params["shape"])
            assert_rel(post["rate"][i, j], res.params["rate"])
    assert_rel(fit.elbo, ev)


@HYP
@given(plate_setup)
def test_normal_gamma_plates_entry_by_entry(setup):
    N, A, B, choice, seed = setup
    rng = rng_for(seed)
    tplates = _sub_plates(A, B, choice)
    x = rng.normal(0.5, 1.5, (N, A, B))
    th = bg.NormalGamma(0.2, 1.3, 2.0, 1.5, plates=tplates, name="theta")
    y = bg.Normal(th, plates=(N, A, B), name="y").observe(x)
    fit = bg.Model(y).fit("conjugate")
    post = th.posterior.params
    ev = 0.0
    for idx, sel in _groups(tplates, (N, A, B)):
        res = cf.normal_gamma(x[sel], 0.2, 1.3, 2.0, 1.5)
        ev += res.log_evidence
        for k in ("mean", "beta", "shape", "rate"):
            assert_rel(post[k][idx], res.params[k], what=k)
    assert_rel(fit.elbo, ev)


@HYP
@given(plate_setup)
def test_beta_bernoulli_and_dirichlet_plates_entry_by_entry(setup):
    N, A, B, choice, seed = setup
    rng = rng_for(seed)
    pplates = _sub_plates(A, B, choice)
    x = rng.integers(0, 2, (N, A, B)).astype(float)
    p = bg.Beta(0.8, 1.7, plates=pplates, name="p")
    y = bg.Bernoulli(p, plates=(N, A, B), name="y").observe(x)
    fit = bg.Model(y).fit("conjugate")
    ev = 0.0
    for idx, sel in _groups(pplates, (N, A, B)):
        res = cf.beta_bernoulli(x[sel], 0.8, 1.7)
        ev += res.log_evidence
        assert_rel(p.posterior.params["a"][idx], res.params["a"])
        assert_rel(p.posterior.params["b"][idx], res.params["b"])
    assert_rel(fit.elbo, ev)
    # Dirichlet: the category axis is an event axis, plates as above; mask and counts
    K = 3
    lab = rng.integers(0, K, (N, A, B)).astype(float)
    mask = rng.random((N, A, B)) < 0.7
    counts = rng.integers(0, 3, (N, A, B))
    pi = bg.Dirichlet(np.ones(K) * 0.9, plates=pplates, name="pi")
    z = bg.Categorical(pi, plates=(N, A, B), name="z").observe(
        np.where(mask, lab, np.nan), mask=mask, weights=counts)
    fit = bg.Model(z).fit("conjugate")
    ev = 0.0
    for idx, sel in _groups(pplates, (N, A, B)):
        res = cf.dirichlet_categorical(np.repeat(lab[sel & mask], counts[sel & mask]),
                                       np.ones(K) * 0.9)
        ev += res.log_evidence
        assert_rel(pi.posterior.params["alpha"][idx], res.params["alpha"])
    assert_rel(fit.elbo, ev)


@HYP
@given(st.integers(1, 5), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_normal_wishart_plates_entry_by_entry(N, G, seed):
    rng = rng_for(seed)
    Dm = 2
    X = rng.normal(size=(N, G, Dm))
    th = bg.NormalWishart(np.zeros(Dm), 0.5, Dm + 0.5, np.eye(Dm), plates=(G,), name="theta")
    y = bg.MultivariateNormal(th, plates=(N, G), name="y").observe(X)
    fit = bg.Model(y).fit("vmp")
    post = th.posterior.params
    ev = 0.0
    for g in range(G):
        res = cf.normal_wishart(X[:, g], np.zeros(Dm), 0.5, Dm + 0.5, np.eye(Dm))
        ev += res.log_evidence
        for k in ("mean", "beta", "dof", "scale"):
            assert_rel(post[k][g], res.params[k], what=k)
    assert_rel(fit.elbo, ev)


# --------------------------------------------------------------------------
# mean-field Normal: separate mean and precision nodes
# --------------------------------------------------------------------------
def gamma_kl(a1, b1, a2, b2):
    """KL(Ga(a1, b1) || Ga(a2, b2)), shape/rate."""
    return ((a1 - a2) * digamma(a1) - gammaln(a1) + gammaln(a2)
            + a2 * (np.log(b1) - np.log(b2)) + a1 * (b2 - b1) / b1)


def test_meanfield_normal_gamma_model():
    """tau ~ Ga(a0, b0), mu | tau ~ N(m0, 1/tau), x_i ~ N(mu, 1/tau): the conjugate
    Normal-Gamma model with beta0 = 1, declared with separate nodes (docs/math.md §6)."""
    rng = rng_for(31)
    N, m0, a0, b0 = 25, 0.3, 2.0, 1.5
    x = rng.normal(1.0, 0.7, N)
    tau = bg.Gamma(a0, b0, name="tau")
    mu = bg.Normal(m0, tau, name="mu")
    y = bg.Normal(mu, tau, plates=(N,), name="x").observe(x)
    model = bg.Model(y)
    with pytest.raises(ValueError, match="conjugate") as err:
        model.fit("conjugate")
    assert "'tau'" in str(err.value) or "'mu'" in str(err.value)
    fit = model.fit("vmp", tol=0.0, max_iter=300)
    assert fit.converged
    tr = fit.elbo_trace
    assert np.all(np.diff(tr) >= -1e-10 * np.abs(tr[1:]))
    exact = cf.normal_gamma(x, m0, 1.0, a0, b0).params
    ev = cf.normal_gamma(x, m0, 1.0, a0, b0).log_evidence
    a_n, b_n = exact["shape"], exact["rate"]
    a_mf = a_n + 0.5
    b_mf = b_n * a_mf / a_n
    q_tau = tau.posterior.params
    assert_rel(q_tau["shape"], a_mf)
    assert_rel(q_tau["rate"], b_mf)
    assert_rel(tau.posterior.mean, a_n / b_n)
    q_mu = mu.posterior.params
    assert_rel(q_mu["mean"], exact["mean"])
    assert_rel(q_mu["precision"], (a_n / b_n) * exact["beta"])
    gap = 0.5 * (np.log(a_mf) - digamma(a_mf)) + gamma_kl(a_mf, b_mf, a_n, b_n)
    assert gap > 0
    assert_rel(ev - fit.elbo, gap, rtol=1e-6)
    assert fit.elbo < ev


def test_meanfield_independent_priors_fixed_point():
    """mu ~ N(m0, p0), tau ~ Ga(a0, b0) independent: the VMP fixed point satisfies
    the coordinate-ascent equations written out here."""
    rng = rng_for(32)
    N, m0, p0, a0, b0 = 20, -0.5, 0.2, 1.5, 2.0
    x = rng.normal(2.0, 1.3, N)
    mu = bg.Normal(m0, p0, name="mu")
    tau = bg.Gamma(a0, b0, name="tau")
    y = bg.Normal(mu, tau, plates=(N,), name="x").observe(x)
    model = bg.Model(y)
    with pytest.raises(ValueError, match="vmp"):
        model.fit("conjugate")
    fit = model.fit("vmp", tol=0.0, max_iter=300)  # run to the fixed point, not an ELBO tol
    tr = fit.elbo_trace
    assert len(tr) > 2
    assert np.all(np.diff(tr) >= -1e-10 * np.abs(tr[1:]))
    qm, qt = mu.posterior.params, tau.posterior.params
    Et = qt["shape"] / qt["rate"]
    Em, Em2 = qm["mean"], qm["mean"] ** 2 + 1.0 / qm["precision"]
    prec = p0 + N * Et
    assert_rel(qm["precision"], prec, rtol=1e-9)
    assert_rel(qm["mean"], (p0 * m0 + Et * x.sum()) / prec, rtol=1e-9)
    assert_rel(qt["shape"], a0 + N / 2)
    assert_rel(qt["rate"], b0 + 0.5 * np.sum(x ** 2 - 2 * x * Em + Em2), rtol=1e-9)
    # the ELBO of that q, written out
    Elt = digamma(qt["shape"]) - np.log(qt["rate"])
    L = (0.5 * N * (Elt - np.log(2 * np.pi)) - 0.5 * Et * np.sum(x ** 2 - 2 * x * Em + Em2)
         + 0.5 * np.log(p0 / (2 * np.pi)) - 0.5 * p0 * (Em2 - 2 * m0 * Em + m0 ** 2)
         + a0 * np.log(b0) - gammaln(a0) + (a0 - 1) * Elt - b0 * Et
         + 0.5 * np.log(2 * np.pi * np.e / qm["precision"])
         + stats.gamma(qt["shape"], scale=1 / qt["rate"]).entropy())
    assert_rel(fit.elbo, L, rtol=1e-10)


# --------------------------------------------------------------------------
# Bayesian linear regression with a Gamma noise precision (docs/math.md §6 (ii))
# --------------------------------------------------------------------------
def _linreg_problem():
    rng = rng_for(33)
    N, P = 30, 3
    X = rng.normal(size=(N, P))
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.8, N)
    m0 = np.array([0.1, 0.0, -0.2])
    S0inv = random_spd(rng, P, 0.5)
    return X, y, m0, S0inv, 2.0, 1.0


def _mf_elbo(X, y, m0, S0inv, a0, b0, m, S, a, b):
    N, P = X.shape
    Elt, Et = digamma(a) - np.log(b), a / b
    r = y - X @ m
    q = r @ r + np.trace(X.T @ X @ S)
    d = m - m0
    return (0.5 * N * (Elt - np.log(2 * np.pi)) - 0.5 * Et * q
            + 0.5 * np.linalg.slogdet(S0inv)[1] - 0.5 * P * np.log(2 * np.pi)
            - 0.5 * (d @ S0inv @ d + np.trace(S0inv @ S))
            + a0 * np.log(b0) - gammaln(a0) + (a0 - 1) * Elt - b0 * Et
            + 0.5 * np.linalg.slogdet(2 * np.pi * np.e * S)[1]
            + stats.gamma(a, scale=1 / b).entropy())


def test_linreg_gamma_noise_meanfield_iterates():
    X, y, m0, S0inv, a0, b0 = _linreg_problem()
    N, P = X.shape
    w = bg.MultivariateNormal(m0, S0inv, name="w")
    tau = bg.Gamma(a0, b0, name="tau")
    yn = bg.Normal(bg.Dot(X, w), tau, name="y").observe(y)
    model = bg.Model(yn, schedule=[w, tau])
    with pytest.raises(ValueError, match="conjugate"):
        model.fit("conjugate")
    fit = model.fit("vmp", tol=1e-14, max_iter=500)
    assert fit.converged
    tr = fit.elbo_trace
    assert np.all(np.diff(tr) >= -1e-10 * np.abs(tr[1:]))
    # the MF iterates of docs/math.md §6 (ii), same schedule: q(w) then q(tau)
    Et = a0 / b0
    ref = []
    for _ in range(fit.n_iter):
        S = np.linalg.inv(S0inv + Et * X.T @ X)
        m = S @ (S0inv @ m0 + Et * X.T @ y)
        r = y - X @ m
        a = a0 + N / 2
        b = b0 + 0.5 * (r @ r + np.trace(X.T @ X @ S))
        Et = a / b
        ref.append(_mf_elbo(X, y, m0, S0inv, a0, b0, m, S, a, b))
    assert_rel(tr, np.array(ref), rtol=1e-8, what="ELBO trace")
    assert_rel(w.posterior.params["mean"], m, rtol=1e-8)
    assert_rel(w.posterior.params["precision"], np.linalg.inv(S), rtol=1e-8)
    np.testing.assert_allclose(w.posterior.cov, S, rtol=1e-8)
    assert_rel(tau.posterior.params["shape"], a)
    assert_rel(tau.posterior.params["rate"], b, rtol=1e-8)
    # the bound is below the exact log evidence (1-D quadrature over tau)
    prior_tau = stats.gamma(a0, scale=1 / b0)
    K = X @ np.linalg.solve(S0inv, X.T)

    def logf(t):
        return prior_tau.logpdf(t) + stats.multivariate_normal(X @ m0, np.eye(N) / t + K).logpdf(y)

    c = logf(a / b)
    val, _ = integrate.quad(lambda t: np.exp(logf(t) - c), 0, np.inf, epsrel=1e-12, limit=200,
                            points=None)
    log_ev = c + np.log(val)
    assert fit.elbo < log_ev
    assert log_ev - fit.elbo < 0.5  # a small gap, not a broken bound


def test_linreg_gamma_noise_with_mask_equals_subset():
    X, y, m0, S0inv, a0, b0 = _linreg_problem()
    mask = np.arange(X.shape[0]) % 3 != 0
    fits = []
    for Xi, yi, kw in ((X, np.where(mask, y, np.nan), dict(mask=mask)), (X[mask], y[mask], {})):
        w = bg.MultivariateNormal(m0, S0inv, name="w")
        tau = bg.Gamma(a0, b0, name="tau")
        yn = bg.Normal(bg.Dot(Xi, w), tau, name="y").observe(yi, **kw)
        f = bg.Model(yn, schedule=[w, tau]).fit("vmp", tol=1e-14, max_iter=500)
        fits.append((f.elbo_trace, w.posterior.params["mean"], tau.posterior.params["rate"]))
    (t1, m1, b1), (t2, m2, b2) = fits
    assert len(t1) == len(t2)
    assert_rel(t1, t2, rtol=1e-10)
    assert_rel(m1, m2, rtol=1e-10)
    assert_rel(b1, b2, rtol=1e-10)


# --------------------------------------------------------------------------
# more conjugate structures with a closed form
# --------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("ard", [False, True], ids=["isotropic", "ard"])
def test_mvn_with_gamma_precision_node(ard, method):
    """x_n ~ N(m, diag(tau)^-1) with tau one Gamma (isotropic) or one per coordinate
    (ARD): gamma_known_mean on the flattened residuals / on each coordinate."""
    rng = rng_for(41)
    N, Dm = 7, 3
    X = rng.normal(size=(N, Dm)) * np.array([0.5, 1.0, 2.0])
    m = np.array([0.1, 0.2, -0.3])
    tau = bg.Gamma(2.0, 1.5, plates=(Dm,) if ard else (), name="tau")
    y = bg.MultivariateNormal(m, tau, plates=(N,), name="y").observe(X)
    fit = bg.Model(y).fit(method)
    if ard:
        res = [cf.gamma_known_mean(X[:, d], m[d], 2.0, 1.5) for d in range(Dm)]
        for k in ("shape", "rate"):
            assert_rel(tau.posterior.params[k], [r.params[k] for r in res], what=k)
        assert_rel(fit.elbo, sum(r.log_evidence for r in res))
    else:
        assert_matches(tau, fit, cf.gamma_known_mean((X - m).ravel(), 0.0, 2.0, 1.5))


def test_gathered_rates_are_per_group_posteriors():
    rng = rng_for(42)
    G = 4
    idx = np.array([0, 2, 2, 1, 0, 2, 2, 1, 1])  # group 3 gets no data: its prior
    x = rng.poisson(3.0, idx.size).astype(float)
    lam = bg.Gamma(2.0, 1.0, plates=(G,), name="lam")
    y = bg.Poisson(lam[idx], name="y").observe(x)
    fit = bg.Model(y).fit("conjugate")
    res = [cf.gamma_poisson(x[idx == g], 2.0, 1.0) for g in range(G)]
    for k in ("shape", "rate"):
        assert_rel(lam.posterior.params[k], [r.params[k] for r in res], what=k)
    assert_rel(fit.elbo, sum(r.log_evidence for r in res))


def test_multinomial_with_a_different_n_per_row():
    rng = rng_for(43)
    n = rng.integers(0, 8, 6)
    C = np.array([rng.multinomial(k, [0.2, 0.3, 0.5]) for k in n]).astype(float)
    alpha = np.array([1.0, 2.0, 0.5])
    pi = bg.Dirichlet(alpha, name="pi")
    y = bg.Multinomial(n, pi, name="y").observe(C)
    assert_matches(pi, bg.Model(y).fit("conjugate"), cf.dirichlet_multinomial(C, alpha))


@pytest.mark.parametrize("method", METHODS)
def test_two_observed_children_of_one_parent(method):
    """Poisson counts and Exponential waits share one Gamma rate: the evidence is the
    chain p(y1) p(y2 | y1), each factor a closed form."""
    rng = rng_for(44)
    x1 = rng.poisson(3.0, 5).astype(float)
    x2 = rng.exponential(0.5, 4)
    lam = bg.Gamma(2.0, 1.0, name="lam")
    y1 = bg.Poisson(lam, plates=(5,), name="y1").observe(x1)
    y2 = bg.Exponential(lam, plates=(4,), name="y2").observe(x2)
    fit = bg.Model(y1, y2).fit(method)
    r1 = cf.gamma_poisson(x1, 2.0, 1.0)
    r2 = cf.gamma_exponential(x2, r1.params["shape"], r1.params["rate"])
    for k in ("shape", "rate"):
        assert_rel(lam.posterior.params[k], r2.params[k], what=k)
    assert_rel(fit.elbo, r1.log_evidence + r2.log_evidence)


@HYP
@given(plate_setup)
def test_normal_gamma_plates_with_mask_entry_by_entry(setup):
    N, A, B, choice, seed = setup
    rng = rng_for(seed)
    tplates = _sub_plates(A, B, choice)
    x = rng.normal(0.5, 1.5, (N, A, B))
    mask = rng.random((N, A, B)) < 0.6
    th = bg.NormalGamma(0.2, 1.3, 2.0, 1.5, plates=tplates, name="theta")
    y = bg.Normal(th, plates=(N, A, B), name="y").observe(np.where(mask, x, np.nan), mask=mask)
    fit = bg.Model(y).fit("vmp")
    post = th.posterior.params
    ev = 0.0
    for idx, sel in _groups(tplates, (N, A, B)):
        res = cf.normal_gamma(x[sel & mask], 0.2, 1.3, 2.0, 1.5)
        ev += res.log_evidence
        for k in ("mean", "beta", "shape", "rate"):
            assert_rel(post[k][idx], res.params[k], what=k)
    assert_rel(fit.elbo, ev)


def test_weights_replicate_latent_children_too():
    """mu -> z_n (latent) -> y_n (observed, counts c_n): each count stands for a copy
    of z_n as well, so VMP runs exactly as on the repeated rows."""
    rng = rng_for(45)
    x = rng.normal(size=5)
    counts = np.array([1, 3, 2, 1, 4])

    def run(data, weights):
        mu = bg.Normal(0.0, 0.5, name="mu")
        z = bg.Normal(mu, 1.0, plates=(len(data),), name="z")
        y = bg.Normal(z, 2.0, name="y").observe(data, weights=weights)
        fit = bg.Model(y).fit("vmp", tol=0.0, max_iter=12)
        return fit.elbo_trace, mu.posterior.params

    t1, p1 = run(x, counts)
    t2, p2 = run(np.repeat(x, counts), None)
    assert len(t1) == len(t2) == 12
    assert_rel(t1, t2, rtol=1e-12)
    for k in ("mean", "precision"):
        assert_rel(p1[k], p2[k], rtol=1e-12)
    # and the mean-field bound is below the exact evidence: y_n ~ N(mu, 1 + 1/2)
    ev = cf.normal_known_precision(np.repeat(x, counts), 0.0, 0.5, 1.0 / 1.5).log_evidence
    assert t1[-1] < ev


@HYP
@given(st.integers(1, 5), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_binomial_broadcast_trials_entry_by_entry(N, A, seed):
    """n of shape (N, 1) broadcast against p with plates (A,): data (N, A)."""
    rng = rng_for(seed)
    n = rng.integers(0, 6, (N, 1))
    x = rng.binomial(np.broadcast_to(n, (N, A)), 0.4).astype(float)
    p = bg.Beta(1.0, 2.0, plates=(A,), name="p")
    y = bg.Binomial(n, p, name="y").observe(x)
    assert y.plates == (N, A)
    fit = bg.Model(y).fit("conjugate")
    res = [cf.beta_binomial(x[:, j], n[:, 0], 1.0, 2.0) for j in range(A)]
    for k in ("a", "b"):
        assert_rel(p.posterior.params[k], [r.params[k] for r in res], what=k)
    assert_rel(fit.elbo, sum(r.log_evidence for r in res))


def test_mvn_with_one_gamma_precision_per_group():
    """Gamma plates (G, 1): one isotropic precision per group (DiagonalGammaFactor);
    per group it is gamma_known_mean on the group's flattened residuals."""
    rng = rng_for(46)
    N, G, Dm = 5, 3, 2
    X = rng.normal(size=(N, G, Dm)) * np.array([0.5, 1.0, 2.0])[:, None]
    m = np.array([0.3, -0.1])
    tau = bg.Gamma(2.0, 1.5, plates=(G, 1), name="tau")
    y = bg.MultivariateNormal(m, tau, plates=(N, G), name="y").observe(X)
    fit = bg.Model(y).fit("conjugate")
    res = [cf.gamma_known_mean((X[:, g] - m).ravel(), 0.0, 2.0, 1.5) for g in range(G)]
    for k in ("shape", "rate"):
        assert_rel(tau.posterior.params[k], np.array([[r.params[k]] for r in res]), what=k)
    assert_rel(fit.elbo, sum(r.log_evidence for r in res))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("N", [1, 3, 5])
def test_one_latent_vector_per_row(N, method):
    """z_n ~ N(m0, L0) (plates (N,)), y_n ~ N(z_n, L) observed: N independent
    conjugate updates (N = D = 3 too, where an (N, D) mean looks like a matrix)."""
    rng = rng_for(47 + N)
    Y = rng.normal(size=(N, D))
    z = bg.MultivariateNormal(M0, L0, plates=(N,), name="z")
    y = bg.MultivariateNormal(z, LX, name="y").observe(Y)
    fit = bg.Model(y).fit(method)
    res = [cf.mvn_known_precision(Y[n:n + 1], M0, L0, LX) for n in range(N)]
    for k in ("mean", "precision"):
        assert_rel(z.posterior.params[k], np.stack([r.params[k] for r in res]), what=k)
    assert_rel(fit.elbo, sum(r.log_evidence for r in res))
