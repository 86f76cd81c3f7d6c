"""Checks of the scalar / simplex exponential families against calculus, scipy.stats
and Monte Carlo: Normal, Gamma, Exponential, Beta, Dirichlet, Bernoulli, Binomial,
Categorical, Multinomial, Poisson."""
import itertools

import numpy as np
import pytest
import scipy.stats as st
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from hypothesis.extra import numpy as hnp
from numpy.testing import assert_allclose

from blrgraph.families.base import ExponentialFamily, inner
from blrgraph.families.bernoulli import Bernoulli
from blrgraph.families.beta import Beta
from blrgraph.families.binomial import Binomial
from blrgraph.families.categorical import Categorical
from blrgraph.families.dirichlet import Dirichlet
from blrgraph.families.exponential import Exponential
from blrgraph.families.gamma import Gamma
from blrgraph.families.multinomial import Multinomial
from blrgraph.families.normal import Normal
from blrgraph.families.poisson import Poisson

K_CAT = 4
K_DIR = 3


# ---------------------------------------------------------------------------
# one "case" per family: how to build it, draw valid parameters, and the scipy twin
class Case:
    def __init__(self, make, params, scipy, discrete=False):
        self.make = make          # (rng, plates) -> family instance
        self.params = params      # (rng, plates, fam) -> tuple of constructor params
        self.scipy = scipy        # (fam, params, plates, idx) -> frozen scipy distribution
        self.discrete = discrete


def _simplex(rng, shape, k):
    w = rng.uniform(0.2, 1.0, shape + (k,))
    return w / w.sum(-1, keepdims=True)


def _counts_n(rng, plates):
    return rng.integers(1, 12, size=plates[-1:]) if plates else np.int64(7)


CASES = {
    "Normal": Case(
        lambda rng, pl: Normal(),
        lambda rng, pl, f: (rng.normal(0, 2, pl), rng.uniform(0.2, 5, pl)),
        lambda f, p, pl, i: st.norm(p[0][i], 1 / np.sqrt(p[1][i]))),
    "Gamma": Case(
        lambda rng, pl: Gamma(),
        lambda rng, pl, f: (rng.uniform(0.5, 10, pl), rng.uniform(0.2, 5, pl)),
        lambda f, p, pl, i: st.gamma(p[0][i], scale=1 / p[1][i])),
    "Exponential": Case(
        lambda rng, pl: Exponential(),
        lambda rng, pl, f: (rng.uniform(0.2, 5, pl),),
        lambda f, p, pl, i: st.expon(scale=1 / p[0][i])),
    "Beta": Case(
        lambda rng, pl: Beta(),
        lambda rng, pl, f: (rng.uniform(0.7, 8, pl), rng.uniform(0.7, 8, pl)),
        lambda f, p, pl, i: st.beta(p[0][i], p[1][i])),
    "Dirichlet": Case(
        lambda rng, pl: Dirichlet(),
        lambda rng, pl, f: (rng.uniform(0.7, 5, pl + (K_DIR,)),),
        lambda f, p, pl, i: st.dirichlet(p[0][i])),
    "Bernoulli": Case(
        lambda rng, pl: Bernoulli(),
        lambda rng, pl, f: (rng.uniform(0.05, 0.95, pl),),
        lambda f, p, pl, i: st.bernoulli(p[0][i]), discrete=True),
    "Binomial": Case(
        lambda rng, pl: Binomial(_counts_n(rng, pl)),
        lambda rng, pl, f: (rng.uniform(0.05, 0.95, pl),),
        lambda f, p, pl, i: st.binom(int(np.broadcast_to(f.n, pl)[i]), p[0][i]), discrete=True),
    "Categorical": Case(
        lambda rng, pl: Categorical(K_CAT),
        lambda rng, pl, f: (_simplex(rng, pl, K_CAT),),
        lambda f, p, pl, i: st.rv_discrete(values=(np.arange(K_CAT), p[0][i])), discrete=True),
    "Multinomial": Case(
        lambda rng, pl: Multinomial(_counts_n(rng, pl)),
        lambda rng, pl, f: (_simplex(rng, pl, 3),),
        lambda f, p, pl, i: st.multinomial(int(np.broadcast_to(f.n, pl)[i]), p[0][i]), discrete=True),
    "Poisson": Case(
        lambda rng, pl: Poisson(),
        lambda rng, pl, f: (rng.uniform(0.2, 20, pl),),
        lambda f, p, pl, i: st.poisson(p[0][i]), discrete=True),
}
NAMES = list(CASES)
PLATES = [(), (3,), (2, 3)]


def setup(name, plates, seed=0):
    rng = np.random.default_rng(seed)
    case = CASES[name]
    fam = case.make(rng, plates)
    params = case.params(rng, plates, fam)
    return case, fam, params, fam.natural_from_params(*params), rng


def _scipy_logp(dist, x):
    return dist.logpmf(x) if hasattr(dist, "logpmf") else dist.logpdf(x)


def _value(fam, x, idx):
    """The value at plate index idx of a draw array x (event axes kept)."""
    return x[idx] if fam.value_ndim == 0 else x[idx + (slice(None),)]


# ---------------------------------------------------------------------------
# mu = grad A
@pytest.mark.parametrize("plates", PLATES, ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_mean_params_is_gradient_of_log_partition(name, plates):
    _, fam, _, nat, _ = setup(name, plates, seed=1)
    mu = fam.mean_params(nat)
    pl = np.broadcast_shapes(*[np.shape(m)[:np.ndim(m) - k] for m, k in zip(mu, fam.event_ndims)])
    fd = [np.zeros(np.broadcast_shapes(np.shape(m), pl + np.shape(m)[np.ndim(m) - k:]))
          for m, k in zip(mu, fam.event_ndims)]
    for c, (lam, k) in enumerate(zip(nat, fam.event_ndims)):
        lam = np.asarray(lam, float)
        for e in np.ndindex(*lam.shape[lam.ndim - k:]):
            sel = (Ellipsis,) + e
            h = 1e-3 * np.maximum(1.0, np.abs(lam[sel]))

            def A(step):
                moved = lam.copy()
                moved[sel] = moved[sel] + step
                return fam.log_partition(nat[:c] + (moved,) + nat[c + 1:])

            # fourth-order central difference, one A-evaluation per stencil point for all plates
            fd[c][sel] = (8 * (A(h) - A(-h)) - (A(2 * h) - A(-2 * h))) / (12 * h)
    err = sum(np.sum((f - m) ** 2, axis=tuple(range(len(pl), np.ndim(f)))) for f, m in zip(fd, mu))
    norm = sum(np.sum(np.asarray(m) ** 2, axis=tuple(range(len(pl), np.ndim(m)))) for m in mu)
    rel = np.sqrt(err / norm)
    assert np.shape(rel) == pl
    assert np.all(rel < 1e-6), rel


# ---------------------------------------------------------------------------
# entropy
@pytest.mark.parametrize("name", NAMES)
def test_entropy_matches_scipy(name):
    plates = (2, 3)
    case, fam, params, nat, _ = setup(name, plates, seed=2)
    H = fam.entropy(nat)
    assert H.shape == plates
    for idx in np.ndindex(*plates):
        dist = case.scipy(fam, params, plates, idx)
        ref = (st.multinomial(1, params[0][idx]).entropy() if name == "Categorical"
               else dist.entropy())
        assert_allclose(H[idx], ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_mean_and_var_match_scipy(name):
    plates = (2, 3)
    case, fam, params, nat, _ = setup(name, plates, seed=10)
    m, v = fam.mean(nat), fam.var(nat)
    for idx in np.ndindex(*plates):
        if name == "Categorical":   # one-hot representation
            p = params[0][idx]
            ref_m, ref_v = p, p * (1 - p)
        else:
            dist = case.scipy(fam, params, plates, idx)
            ref_m = dist.mean()
            ref_v = np.diag(dist.cov()) if name == "Multinomial" else dist.var()
        assert_allclose(m[idx], ref_m, rtol=1e-12)
        assert_allclose(v[idx], ref_v, rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_entropy_equals_generic_identity(name):
    """Closed form / series vs H = A - <lam, mu> - E[log h] (base-class default)."""
    _, fam, _, nat, _ = setup(name, (4,), seed=3)
    assert_allclose(fam.entropy(nat), ExponentialFamily.entropy(fam, nat), rtol=1e-9, atol=1e-12)


def test_entropy_series_for_large_counts():
    """The windowed sums (Poisson series, Binomial sums) for large rates / n."""
    rate = np.array([0.003, 1e3, 2e4])
    k = np.arange(60000)
    ref = [-np.sum(st.poisson(r).pmf(k) * st.poisson(r).logpmf(k)) for r in rate]
    P = Poisson()
    assert_allclose(P.entropy(P.natural_from_params(rate)), ref, rtol=1e-10)
    n, p = 5000, np.array([1e-4, 0.3, 0.999])
    B = Binomial(n)
    k = np.arange(n + 1)
    ref = [-np.sum(st.binom(n, q).pmf(k) * st.binom(n, q).logpmf(k)) for q in p]
    assert_allclose(B.entropy(B.natural_from_params(p)), ref, rtol=1e-10)


# ---------------------------------------------------------------------------
# KL
@pytest.mark.parametrize("name", NAMES)
def test_kl_matches_monte_carlo(name):
    plates = (3,)
    case, fam, p1, nat1, rng = setup(name, plates, seed=4)
    nat2 = fam.natural_from_params(*case.params(rng, plates, fam))
    kl = fam.kl(nat1, nat2)
    assert kl.shape == plates
    N = 20000
    x = fam.sample(nat1, rng=rng, size=N)
    d = fam.logpdf(x, nat1) - fam.logpdf(x, nat2)
    assert d.shape == (N,) + plates
    se = d.std(axis=0) / np.sqrt(N)
    assert np.all(np.abs(d.mean(axis=0) - kl) <= 4 * se + 1e-12), (d.mean(0), kl, se)
    assert np.all(kl > 0)
    # closed form vs the Bregman form of the base class
    assert_allclose(kl, ExponentialFamily.kl(fam, nat1, nat2), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_kl_zero_for_identical_and_nonnegative(name):
    plates = (200,)
    case, fam, _, nat1, rng = setup(name, plates, seed=5)
    assert np.all(np.abs(fam.kl(nat1, nat1)) <= 1e-12)
    nat2 = fam.natural_from_params(*case.params(rng, plates, fam))
    kl = fam.kl(nat1, nat2)
    assert np.all(kl >= 0)
    assert np.all(fam.kl(nat2, nat1) >= 0)


# ---------------------------------------------------------------------------
# params <-> natural round trip (hypothesis)
plate_shapes = hs.lists(hs.integers(1, 3), max_size=3).map(tuple)


def _floats(lo, hi):
    return hs.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def _signed(lo, hi):
    return hs.one_of(hs.just(0.0), _floats(lo, hi), _floats(-hi, -lo))


@hs.composite
def family_and_params(draw, name):
    pl = draw(plate_shapes)
    arr = lambda shape, el: draw(hnp.arrays(np.float64, shape, elements=el))
    if name == "Normal":
        return Normal(), (arr(pl, _signed(1e-6, 1e3)), arr(pl, _floats(1e-3, 1e3)))
    if name in ("Gamma", "Beta"):
        fam = Gamma() if name == "Gamma" else Beta()
        return fam, (arr(pl, _floats(1e-3, 1e3)), arr(pl, _floats(1e-3, 1e3)))
    if name in ("Exponential", "Poisson"):
        return (Exponential() if name == "Exponential" else Poisson()), (arr(pl, _floats(1e-3, 1e3)),)
    if name == "Dirichlet":
        K = draw(hs.integers(1, 4))
        return Dirichlet(), (arr(pl + (K,), _floats(1e-3, 1e3)),)
    if name == "Bernoulli":
        return Bernoulli(), (arr(pl, _floats(1e-6, 1 - 1e-6)),)
    if name in ("Categorical", "Multinomial"):
        K = draw(hs.integers(1, 4))
        w = arr(pl + (K,), _floats(1e-3, 1.0))
        p = w / w.sum(-1, keepdims=True)
        if name == "Categorical":
            return Categorical(), (p,)
    # Binomial / Multinomial: n broadcasts against the plates
    n_shape = draw(hs.sampled_from([(), pl[-1:]]))
    n = draw(hnp.arrays(np.int64, n_shape, elements=hs.integers(0, 50)))
    if name == "Binomial":
        return Binomial(n), (arr(pl, _floats(1e-6, 1 - 1e-6)),)
    return Multinomial(n), (p,)


def _roundtrip_test(name):
    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(family_and_params(name))
    def check(fp):
        fam, params = fp
        fam.validate_params(*params, where="x")
        nat = fam.natural_from_params(*params)
        assert isinstance(nat, tuple) and len(nat) == len(fam.event_ndims)
        back = fam.params_from_natural(nat)
        assert tuple(back) == fam.param_names
        given_ = dict(zip(fam.param_names[-len(params):], params))
        for k, v in given_.items():
            assert_allclose(back[k], np.broadcast_to(v, np.shape(back[k])), rtol=1e-10, atol=0)
        if "n" in back:
            assert np.all(back["n"] == np.broadcast_to(fam.n, np.shape(back["n"])))
        # and the other way: nat -> params -> nat (log-potentials up to rounding)
        nat2 = fam.natural_from_params(*[back[k] for k in fam.param_names])
        for a, b in zip(nat, nat2):
            assert_allclose(b, np.broadcast_to(a, np.shape(b)), rtol=1e-10, atol=1e-12)
    return check


@pytest.mark.parametrize("name", NAMES)
def test_params_natural_roundtrip(name):
    _roundtrip_test(name)()


# ---------------------------------------------------------------------------
# logpdf, to_scipy
@pytest.mark.parametrize("name", NAMES)
def test_logpdf_matches_scipy(name):
    plates = (2, 3)
    case, fam, params, nat, rng = setup(name, plates, seed=6)
    x = fam.sample(nat, rng=rng, size=5)
    lp = fam.logpdf(x, nat)
    assert lp.shape == (5,) + plates
    frozen = fam.to_scipy(nat)
    assert frozen.shape == plates and frozen.dtype == object
    for idx in np.ndindex(*plates):
        dist = case.scipy(fam, params, plates, idx)
        for s in range(5):
            xi = _value(fam, x[s], idx)
            ref = _scipy_logp(dist, xi)
            assert_allclose(lp[(s,) + idx], ref, rtol=1e-10, atol=1e-12)
            assert_allclose(_scipy_logp(frozen[idx], xi), ref, rtol=1e-10, atol=1e-12)
    # without plates to_scipy is a single frozen distribution
    _, fam0, params0, nat0, _ = setup(name, (), seed=6)
    single = fam0.to_scipy(nat0)
    assert hasattr(single, "entropy")
    assert_allclose(single.entropy(), fam0.entropy(nat0), rtol=1e-9)


# ---------------------------------------------------------------------------
# sampling moments
@pytest.mark.parametrize("name", NAMES)
def test_sample_moments(name):
    plates = (2,)
    _, fam, _, nat, rng = setup(name, plates, seed=7)
    N = 200_000
    x = fam.sample(nat, rng=np.random.default_rng(123), size=N)
    ev = (K_DIR,) if name == "Dirichlet" else (3,) if name == "Multinomial" else ()
    assert x.shape == (N,) + plates + ev
    for t, mu in zip(fam.suff_stats(x), fam.mean_params(nat)):
        se = t.std(axis=0) / np.sqrt(N)
        assert np.all(np.abs(t.mean(axis=0) - mu) <= 5 * se + 1e-12)
    if name == "Categorical":
        x = fam.suff_stats(x)[0]        # mean / var refer to the one-hot vector
    m, v = fam.mean(nat), fam.var(nat)
    assert np.all(np.abs(x.mean(0) - m) <= 5 * x.std(0) / np.sqrt(N) + 1e-12)
    sq = (x - x.mean(0)) ** 2
    assert np.all(np.abs(sq.mean(0) - v) <= 5 * sq.std(0) / np.sqrt(N) + 1e-12)


def test_sample_default_size_is_plates_and_rng_optional():
    _, fam, _, nat, _ = setup("Gamma", (2, 3))
    assert fam.sample(nat).shape == (2, 3)
    _, fam, _, nat, _ = setup("Dirichlet", (4,))
    assert fam.sample(nat, size=(2, 5)).shape == (2, 5, 4, K_DIR)


def test_dirichlet_sampler_small_concentrations():
    fam = Dirichlet()
    nat = fam.natural_from_params(np.array([0.02, 0.05, 0.1]))
    x = fam.sample(nat, rng=np.random.default_rng(0), size=100_000)
    assert np.all(np.isfinite(x)) and np.allclose(x.sum(-1), 1.0)
    se = x.std(0) / np.sqrt(len(x))
    assert np.all(np.abs(x.mean(0) - fam.mean(nat)) <= 5 * se)


# ---------------------------------------------------------------------------
# modes (docs/math.md §5)
def test_mode_gamma():
    fam = Gamma()
    a, b = np.array([3.0, 1.0, 0.4, 10.0]), np.array([2.0, 5.0, 1.0, 0.5])
    assert_allclose(fam.mode(fam.natural_from_params(a, b)), [1.0, 0.0, 0.0, 18.0])
    # it is the argmax of the density
    nat = fam.natural_from_params(3.0, 2.0)
    grid = np.linspace(0.01, 5, 20001)
    assert abs(grid[np.argmax(fam.logpdf(grid, nat))] - fam.mode(nat)) < 1e-3


def test_mode_beta():
    fam = Beta()
    a = np.array([3.0, 2.0, 0.5, 2.0, 1.0, 0.5, 0.9, 0.6])
    b = np.array([5.0, 2.0, 2.0, 0.8, 1.0, 0.7, 0.5, 0.6])
    expect = [2 / 6, 0.5, 0.0, 1.0, 0.5, 0.0, 1.0, 0.5]
    assert_allclose(fam.mode(fam.natural_from_params(a, b)), expect)


def test_mode_dirichlet():
    fam = Dirichlet()
    alpha = np.array([[2.0, 3.0, 5.0],      # interior: (alpha - 1)/(alpha0 - K)
                      [0.5, 3.0, 2.0],      # boundary: alpha_k <= 1 -> 0
                      [1.0, 1.0, 1.0],      # flat: centre
                      [0.3, 0.9, 0.5]])     # all < 1: the vertex of the largest alpha
    expect = [[1 / 7, 2 / 7, 4 / 7], [0.0, 2 / 3, 1 / 3], [1 / 3, 1 / 3, 1 / 3], [0.0, 1.0, 0.0]]
    m = fam.mode(fam.natural_from_params(alpha))
    assert_allclose(m, expect)
    # interior case is the argmax of the density among nearby simplex points
    nat = fam.natural_from_params(alpha[0])
    best = fam.logpdf(m[0], nat)
    rng = np.random.default_rng(0)
    d = rng.normal(0, 1e-3, (200, 3))
    d -= d.mean(-1, keepdims=True)
    assert np.all(fam.logpdf(m[0] + d, nat) <= best)


def test_mode_normal_bernoulli_categorical():
    assert_allclose(Normal().mode(Normal().natural_from_params([1.5, -2.0], [3.0, 0.1])), [1.5, -2.0])
    fb = Bernoulli()
    assert_allclose(fb.mode(fb.natural_from_params([0.2, 0.8, 0.0, 1.0])), [0, 1, 0, 1])
    fc = Categorical()
    m = fc.mode(fc.natural_from_params(np.array([[0.2, 0.5, 0.3], [0.6, 0.0, 0.4]])))
    assert_allclose(m, [[0, 1, 0], [1, 0, 0]])


@pytest.mark.parametrize("name", ["Binomial", "Poisson"])
def test_mode_discrete_is_pmf_argmax(name):
    case, fam, params, nat, _ = setup(name, (3,), seed=8)
    mode = fam.mode(nat)
    for i in range(3):
        dist = case.scipy(fam, params, (3,), (i,))
        k = np.arange(200)
        assert dist.pmf(mode[i]) >= dist.pmf(k).max() * (1 - 1e-12)


def test_mode_multinomial_brute_force():
    rng = np.random.default_rng(9)
    for n in [0, 1, 5, 9]:
        p = _simplex(rng, (4,), 3)
        fam = Multinomial(n)
        nat = fam.natural_from_params(p)
        mode = fam.mode(nat)
        assert mode.shape == (4, 3)
        vecs = np.array([v for v in itertools.product(range(n + 1), repeat=3) if sum(v) == n], float)
        for i in range(4):
            best = st.multinomial(n, p[i]).logpmf(vecs).max()
            assert mode[i].sum() == n
            assert st.multinomial(n, p[i]).logpmf(mode[i]) >= best - 1e-12


# ---------------------------------------------------------------------------
# boundary probabilities
def test_zero_probabilities_categorical_and_bernoulli():
    fc = Categorical(3)
    p = np.array([[0.0, 0.3, 0.7], [1.0, 0.0, 0.0]])
    nat = fc.natural_from_params(p)
    assert_allclose(fc.entropy(nat), [st.entropy(p[0]), 0.0])
    assert np.all(fc.kl(nat, nat) == 0)
    q = fc.natural_from_params(np.array([0.2, 0.3, 0.5]))
    assert_allclose(fc.kl(nat, q), [np.sum(p[0, 1:] * np.log(p[0, 1:] / [0.3, 0.5])), np.log(5.0)])
    assert np.all(np.isinf(fc.kl(q, nat)))
    x = fc.sample(nat, rng=np.random.default_rng(0), size=5000)
    assert not np.any(x[:, 0] == 0) and np.all(x[:, 1] == 0)
    assert_allclose(fc.logpdf(np.array([1, 0]), nat), [np.log(0.3), 0.0])
    assert fc.logpdf(np.array([0, 1]), nat)[0] == -np.inf
    fb = Bernoulli()
    nat = fb.natural_from_params(np.array([0.0, 1.0]))
    assert_allclose(fb.entropy(nat), [0.0, 0.0])
    assert_allclose(fb.logpdf(np.array([0, 1]), nat), [0.0, 0.0])
    assert np.all(fb.logpdf(np.array([1, 0]), nat) == -np.inf)
    assert_allclose(fb.sample(nat, rng=np.random.default_rng(0), size=100).mean(0), [0.0, 1.0])


def test_categorical_suff_stats_needs_k_and_valid_labels():
    with pytest.raises(ValueError, match="number of categories K"):
        Categorical().suff_stats(np.array([0, 1]))
    T = Categorical().suff_stats(np.array([[0, 2]]), K=3)[0]
    assert_allclose(T, [[[1, 0, 0], [0, 0, 1]]])
    with pytest.raises(ValueError, match="0..2"):
        Categorical(3).suff_stats(np.array([3]))
    with pytest.raises(ValueError, match="0..2"):
        Categorical().logpdf(np.array([-1]), (np.zeros(3),))


def test_plates_broadcast_between_components_and_n():
    fam = Normal()
    nat = (np.array([0.0, 1.0, 2.0]), np.array(-0.5))   # plates (3,) vs ()
    assert fam.mean_params(nat)[1].shape == (3,)
    assert fam.entropy(nat).shape == (3,)
    B = Binomial(np.array([[2], [5]]))                  # n of shape (2, 1) against plates (3,)
    nat = B.natural_from_params(np.array([0.1, 0.5, 0.9]))
    assert B.mean(nat).shape == (2, 3)
    assert_allclose(B.mean(nat), np.array([[2], [5]]) * [0.1, 0.5, 0.9])
    assert B.entropy(nat).shape == (2, 3)
    assert_allclose(B.entropy(nat)[1, 2], st.binom(5, 0.9).entropy())
    assert B.sample(nat, rng=np.random.default_rng(0), size=4).shape == (4, 2, 3)
    assert B.to_scipy(nat).shape == (2, 3)


# ---------------------------------------------------------------------------
# validation
BAD = [
    (Normal(), (0.0, -1.0), "precision must be > 0"),
    (Normal(), (np.nan, 1.0), "mean must be finite"),
    (Gamma(), (-1.0, 1.0), r"shape must be > 0, got -1"),
    (Gamma(), (1.0, np.array([1.0, 0.0])), r"rate must be > 0, got 0 at index \(1,\)"),
    (Exponential(), (0.0,), "rate must be > 0"),
    (Beta(), (1.0, -2.0), "b must be > 0"),
    (Dirichlet(), (np.array([1.0, 0.0, 2.0]),), "alpha must be > 0"),
    (Dirichlet(), (3.0,), r"last axis \(shape \(\.\.\., K\)\)"),
    (Bernoulli(), (1.5,), r"p must lie in \[0, 1\]"),
    (Binomial(4), (-0.1,), r"p must lie in \[0, 1\]"),
    (Binomial(4), (5, 0.3), "does not match"),
    (Binomial(4), (2.5, 0.3), "n must be a non-negative integer"),
    (Categorical(), (np.array([0.5, 0.6]),), "must sum to 1"),
    (Categorical(), (np.array([1.2, -0.2]),), "must be non-negative"),
    (Categorical(), (0.3,), "last axis"),
    (Multinomial(3), (np.array([[0.5, 0.5], [0.5, 0.4]]),), r"sum 0\.9 at index \(1,\)"),
    (Poisson(), (-2.0,), "rate must be > 0"),
]


@pytest.mark.parametrize("fam,args,msg", BAD, ids=[f"{b[0].name}-{i}" for i, b in enumerate(BAD)])
def test_validation_errors_name_the_node(fam, args, msg):
    with pytest.raises(ValueError, match=f"^{fam.name} 'node_x': .*{msg}"):
        fam.validate_params(*args, where="node_x")


def test_validation_accepts_good_params_and_tolerance():
    Categorical().validate_params(np.array([0.5, 0.5 + 5e-9]), where="z")
    with pytest.raises(ValueError, match="'z'"):
        Categorical().validate_params(np.array([0.5, 0.5 + 5e-8]), where="z")
    out = Gamma().validate_params([1, 2], 3, where="g")
    assert all(o.dtype == float for o in out)
    with pytest.raises(ValueError, match="n must be a non-negative integer"):
        Binomial(-1)
    with pytest.raises(ValueError, match="n must be a non-negative integer"):
        Multinomial(2.5)


# ---- the Categorical softmax (one global shift, per-row redo where it underflows) ----
@settings(max_examples=60, deadline=None)
@given(n=hs.integers(1, 6), k=hs.integers(1, 6), spread=hs.sampled_from([1.0, 50.0, 1e3, 1e5]),
       seed=hs.integers(0, 2**31 - 1))
def test_categorical_softmax_matches_scipy_with_rows_far_apart(n, k, spread, seed):
    """Rows whose offsets differ by up to 1e5 (far beyond exp's range) still give
    scipy's softmax, log-sum-exp and entropy to rounding."""
    from scipy.special import logsumexp, softmax
    from scipy.stats import entropy as sp_entropy
    from blrgraph.families import Categorical
    r = np.random.default_rng(seed)
    lam = r.normal(size=(n, k)) * 3.0 + r.uniform(-spread, spread, size=(n, 1))
    fam = Categorical()
    lse, p = fam._softmax(lam)
    np.testing.assert_allclose(p, softmax(lam, axis=-1), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(lse, logsumexp(lam, axis=-1), rtol=1e-14, atol=1e-12)
    np.testing.assert_allclose(fam.entropy((lam,)), sp_entropy(softmax(lam, axis=-1), axis=-1),
                               rtol=1e-9, atol=1e-9 * max(1.0, spread * 1e-3))


def test_categorical_entropy_with_impossible_categories():
    from blrgraph.families import Categorical
    with np.errstate(divide="ignore"):
        lam = np.log(np.array([[0.5, 0.0, 0.5], [0.0, 0.0, 1.0], [0.2, 0.3, 0.5]]))
    h = Categorical().entropy((lam,))
    np.testing.assert_allclose(h, [np.log(2.0), 0.0, -np.sum([.2, .3, .5] * np.log([.2, .3, .5]))],
                               rtol=1e-14, atol=1e-15)
    assert np.all(np.isfinite(Categorical().mean((lam,))))


def test_categorical_softmax_of_a_single_impossible_row_is_nan_not_an_error():
    from blrgraph.families import Categorical
    lse, p = Categorical._softmax(np.full(3, -np.inf))
    assert np.shape(lse) == () and np.shape(p) == (3,) and np.all(np.isnan(p))
