"""Tests of the matrix and joint exponential families:
MultivariateNormal, Wishart, NormalGamma, NormalWishart (docs/math.md §2.2, 2.5-2.7, §5).

Oracles are independent of the code under test: finite differences of A,
scipy.stats densities/entropies, Monte Carlo, the Bregman form of base.kl, and
numerical argmax for modes.
"""
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import integrate, optimize, stats
from scipy.special import digamma, gammaln

from blrgraph.families.base import ExponentialFamily, broadcast_nat
from blrgraph.families.multivariate_normal import MultivariateNormal
from blrgraph.families.normal_gamma import NormalGamma
from blrgraph.families.normal_wishart import NormalWishart
from blrgraph.families.wishart import Wishart

FAMILIES = {
    "MultivariateNormal": MultivariateNormal(),
    "Wishart": Wishart(),
    "NormalGamma": NormalGamma(),
    "NormalWishart": NormalWishart(),
}
PLATES = [(), (3,), (2, 2)]


# ---------------------------------------------------------------------------
# helpers
def rand_spd(rng, plates, d, lo=0.3, hi=3.0):
    """SPD matrices with eigenvalues in [lo, hi] and random eigenvectors."""
    q, _ = np.linalg.qr(rng.standard_normal(plates + (d, d)))
    eig = rng.uniform(lo, hi, plates + (d,))
    s = (q * eig[..., None, :]) @ np.swapaxes(q, -1, -2)
    return 0.5 * (s + np.swapaxes(s, -1, -2))


def rand_params(name, rng, plates=(), d=2, dof_lo=0.5):
    """Random valid constructor parameters. Monte Carlo tests pass dof_lo >= 1.5: with
    nu - D + 1 < 1 a Wishart draw is singular in floating point with probability ~1e-4
    (chi2 draws with < 1 dof below 1e-16), and its density cannot be evaluated."""
    if name == "MultivariateNormal":
        return rng.normal(size=plates + (d,)), rand_spd(rng, plates, d)
    if name == "Wishart":
        return d - 1 + rng.uniform(dof_lo, 5.0, plates), rand_spd(rng, plates, d)
    if name == "NormalGamma":
        return (rng.normal(size=plates), rng.uniform(0.3, 3.0, plates),
                rng.uniform(0.6, 5.0, plates), rng.uniform(0.3, 3.0, plates))
    if name == "NormalWishart":
        return (rng.normal(size=plates + (d,)), rng.uniform(0.3, 3.0, plates),
                d - 1 + rng.uniform(dof_lo, 5.0, plates), rand_spd(rng, plates, d))
    raise KeyError(name)


def rand_nat(name, rng, plates=(), d=2, dof_lo=0.5):
    return FAMILIES[name].natural_from_params(*rand_params(name, rng, plates, d, dof_lo))


def dims_for(name):
    return [None] if name == "NormalGamma" else [1, 2, 3]


def at(nat, i):
    """Natural parameters of plate entry i (plates all broadcast first)."""
    return tuple(c[i] for c in nat)


def gamma_kl(a1, b1, a2, b2):
    return ((a1 - a2) * digamma(a1) - gammaln(a1) + gammaln(a2)
            + a2 * (np.log(b1) - np.log(b2)) + a1 * (b2 - b1) / b1)


def mc_check(values, expected, n_se=5.0):
    """Mean of `values` over axis 0 equals `expected` within n_se standard errors."""
    values = np.asarray(values)
    est = values.mean(axis=0)
    se = values.std(axis=0) / np.sqrt(values.shape[0])
    assert np.all(np.abs(est - expected) <= n_se * se + 1e-12), (est, expected, se)


def chol_to_spd(theta, d):
    """Unconstrained vector -> SPD matrix via a Cholesky factor with log diagonal."""
    c = np.zeros((d, d))
    c[np.tril_indices(d)] = theta
    c[np.diag_indices(d)] = np.exp(np.diag(c))
    return c @ c.T


# ---------------------------------------------------------------------------
# 1. mean parameters = gradient of the log partition (finite differences)
CASES = [(n, p, d) for n in FAMILIES for p in PLATES for d in dims_for(n)]


@pytest.mark.parametrize("name,plates,d", CASES)
def test_mean_params_are_gradient_of_log_partition(name, plates, d):
    fam = FAMILIES[name]
    rng = np.random.default_rng(zlib.crc32(repr((name, plates, d)).encode()))
    nat = tuple(np.array(c) for c in broadcast_nat(rand_nat(name, rng, plates, d or 2),
                                                    fam.event_ndims))
    mu = fam.mean_params(nat)
    h = 1e-4
    for i, (comp, k) in enumerate(zip(nat, fam.event_ndims)):
        ev_shape = comp.shape[comp.ndim - k:]
        for idx in np.ndindex(*ev_shape):
            if k == 2 and idx[0] > idx[1]:
                continue
            # symmetric matrices: perturb (i,j) and (j,i) together; entries are
            # independent coordinates (docs/math.md §0), so the directional derivative
            # is mu_ij + mu_ji.
            sym = k == 2 and idx[0] != idx[1]

            def a_at(t):
                c = comp.copy()
                c[(Ellipsis,) + idx] += t
                if sym:
                    c[(Ellipsis, idx[1], idx[0])] += t
                return fam.log_partition(nat[:i] + (c,) + nat[i + 1:])

            fd = (-a_at(2 * h) + 8 * a_at(h) - 8 * a_at(-h) + a_at(-2 * h)) / (12 * h)
            expected = mu[i][(Ellipsis,) + idx]
            if sym:
                expected = expected + mu[i][(Ellipsis, idx[1], idx[0])]
            rel = np.abs(fd - expected) / np.maximum(np.abs(expected), 1e-2)
            assert np.all(rel < 1e-6), (name, i, idx, fd, expected)


def test_symmetric_component_gradient_is_full_matrix_not_vech():
    """Single-entry perturbation (entries independent) gives mu_ij, not 2 mu_ij."""
    fam = FAMILIES["Wishart"]
    nat = tuple(np.array(c) for c in rand_nat("Wishart", np.random.default_rng(3), (), 2))
    mu = fam.mean_params(nat)
    h = 1e-5
    c_p, c_m = nat[0].copy(), nat[0].copy()
    c_p[0, 1] += h
    c_m[0, 1] -= h
    fd = (fam.log_partition((c_p, nat[1])) - fam.log_partition((c_m, nat[1]))) / (2 * h)
    np.testing.assert_allclose(fd, mu[0][0, 1], rtol=1e-6)


# ---------------------------------------------------------------------------
# 2. natural parameters are exactly the spec table
def test_natural_params_match_spec_table():
    rng = np.random.default_rng(0)
    m, L = rand_params("MultivariateNormal", rng, (2,), 3)
    l1, l2 = FAMILIES["MultivariateNormal"].natural_from_params(m, L)
    np.testing.assert_allclose(l1, np.einsum("pij,pj->pi", L, m))
    np.testing.assert_allclose(l2, -L / 2)

    nu, W = rand_params("Wishart", rng, (2,), 3)
    l1, l2 = FAMILIES["Wishart"].natural_from_params(nu, W)
    np.testing.assert_allclose(l1, -np.linalg.inv(W) / 2, rtol=1e-10)
    np.testing.assert_allclose(l2, (nu - 3 - 1) / 2)

    m, k, a, b = rand_params("NormalGamma", rng, (2,))
    lam = FAMILIES["NormalGamma"].natural_from_params(m, k, a, b)
    for got, want in zip(lam, (k * m, -k / 2, -(b + k * m**2 / 2), a - 0.5)):
        np.testing.assert_allclose(got, want)

    m, beta, nu, W = rand_params("NormalWishart", rng, (2,), 3)
    lam = FAMILIES["NormalWishart"].natural_from_params(m, beta, nu, W)
    want = (beta[:, None] * m, -beta / 2,
            -(np.linalg.inv(W) + beta[:, None, None] * np.einsum("pi,pj->pij", m, m)) / 2,
            (nu - 3) / 2)
    for got, w in zip(lam, want):
        np.testing.assert_allclose(got, w, rtol=1e-10)
    assert FAMILIES["NormalWishart"].event_ndims == (1, 0, 2, 0)
    assert FAMILIES["NormalGamma"].event_ndims == (0, 0, 0, 0)


def test_natural_from_params_broadcasts_plates():
    lam = FAMILIES["NormalGamma"].natural_from_params(np.zeros(4), 1.0, 2.0, np.ones((3, 1)))
    assert all(c.shape == (3, 4) for c in lam)
    lam = FAMILIES["NormalWishart"].natural_from_params(np.zeros((5, 2)), 1.0, 3.0, np.eye(2))
    assert [c.shape for c in lam] == [(5, 2), (5,), (5, 2, 2), (5,)]
    lam = FAMILIES["Wishart"].natural_from_params(np.array([3.0, 4.0]), np.eye(2))
    assert [c.shape for c in lam] == [(2, 2, 2), (2,)]


# ---------------------------------------------------------------------------
# 3. entropy
@pytest.mark.parametrize("d", [1, 2, 3])
def test_entropy_mvn_and_wishart_match_scipy(d):
    rng = np.random.default_rng(d)
    fam = FAMILIES["MultivariateNormal"]
    m, L = rand_params("MultivariateNormal", rng, (3,), d)
    h = fam.entropy(fam.natural_from_params(m, L))
    ref = [stats.multivariate_normal(m[i], np.linalg.inv(L[i])).entropy() for i in range(3)]
    np.testing.assert_allclose(h, ref, rtol=1e-10)

    fam = FAMILIES["Wishart"]
    nu, W = rand_params("Wishart", rng, (3,), d)
    nat = fam.natural_from_params(nu, W)
    h = fam.entropy(nat)
    ref = [stats.wishart(nu[i], W[i]).entropy() for i in range(3)]
    np.testing.assert_allclose(h, ref, rtol=1e-10)
    # closed form equals the generic A - <lam, mu> of base.py
    np.testing.assert_allclose(h, ExponentialFamily.entropy(fam, nat), rtol=1e-10)


@pytest.mark.parametrize("plates,d", [((3,), 2), ((3,), 13), ((), 9), ((2, 2), 8), ((300,), 8)])
def test_moments_of_larger_matrices_match_numpy_inverses(plates, d):
    """The SPD inverses of a q's factorisation (families._spd._spd_inv: LAPACK's potri
    matrix by matrix for D >= 8 and a few matrices, else the batched c^-T c^-1): Sigma and
    E[L] = nu W equal numpy's inverses, exactly symmetric; sampling reads c^-1 from c."""
    rng = np.random.default_rng(d)
    b = rng.standard_normal(plates + (d, d))
    P = b @ np.swapaxes(b, -1, -2) + d * np.eye(d)
    mvn, wis = FAMILIES["MultivariateNormal"], FAMILIES["Wishart"]
    m = rng.standard_normal(plates + (d,))
    Ex, Exx = mvn.mean_params(mvn.natural_from_params(m, P))
    S = np.linalg.inv(P)
    np.testing.assert_allclose(Ex, m, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(Exx - S, m[..., :, None] * m[..., None, :], rtol=1e-9, atol=1e-12)
    assert np.array_equal(Exx, np.swapaxes(Exx, -1, -2))
    nu = np.full(plates, d + 2.5)
    EL, _ = wis.mean_params(wis.natural_from_params(nu, S))
    np.testing.assert_allclose(EL, nu[..., None, None] * S, rtol=1e-9)
    assert np.array_equal(EL, np.swapaxes(EL, -1, -2))
    x = mvn.sample(mvn.natural_from_params(m, P), rng=0, size=4000)
    np.testing.assert_allclose(np.mean(x, axis=0), m, atol=6 * np.sqrt(np.max(S)) / np.sqrt(4000))


@pytest.mark.parametrize("name,d", [("NormalGamma", None), ("NormalWishart", 1),
                                    ("NormalWishart", 2), ("NormalWishart", 3)])
def test_entropy_joint_matches_monte_carlo(name, d):
    fam = FAMILIES[name]
    rng = np.random.default_rng(11)
    nat = rand_nat(name, rng, (), d or 2, dof_lo=1.5)
    h = fam.entropy(nat)
    np.testing.assert_allclose(h, ExponentialFamily.entropy(fam, nat), rtol=1e-10)
    x = fam.sample(nat, rng, size=200_000)
    mc_check(-fam.logpdf(x, nat), h)


# ---------------------------------------------------------------------------
# 4. KL
@pytest.mark.parametrize("name", list(FAMILIES))
def test_kl_closed_form_equals_bregman_and_zero_on_diagonal(name):
    fam = FAMILIES[name]
    rng = np.random.default_rng(5)
    for d in dims_for(name):
        n1 = rand_nat(name, rng, (4,), d or 2)
        n2 = rand_nat(name, rng, (4,), d or 2)
        kl = fam.kl(n1, n2)
        assert kl.shape == (4,)
        np.testing.assert_allclose(kl, ExponentialFamily.kl(fam, n1, n2), rtol=1e-9, atol=1e-12)
        assert np.all(kl > 0)
        np.testing.assert_allclose(fam.kl(n1, n1), 0.0, atol=1e-10)
        # q2 without plates broadcasts against q1's plates
        n3 = rand_nat(name, rng, (), d or 2)
        np.testing.assert_allclose(fam.kl(n1, n3), ExponentialFamily.kl(fam, n1, n3),
                                   rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_kl_matches_monte_carlo(name):
    fam = FAMILIES[name]
    rng = np.random.default_rng(21)
    n1 = rand_nat(name, rng, (), 2, dof_lo=1.5)
    n2 = rand_nat(name, rng, (), 2)
    x = fam.sample(n1, rng, size=200_000)
    mc_check(fam.logpdf(x, n1) - fam.logpdf(x, n2), fam.kl(n1, n2))


def test_kl_closed_forms_of_math_md():
    """The docs/math.md §2 formulas written out from constructor parameters."""
    rng = np.random.default_rng(8)
    # Normal-Gamma
    p1, p2 = rand_params("NormalGamma", rng, (3,)), rand_params("NormalGamma", rng, (3,))
    (m1, k1, a1, b1), (m2, k2, a2, b2) = p1, p2
    want = (0.5 * np.log(k1 / k2) - 0.5 + k2 / 2 * (1 / k1 + a1 / b1 * (m1 - m2) ** 2)
            + gamma_kl(a1, b1, a2, b2))
    fam = FAMILIES["NormalGamma"]
    np.testing.assert_allclose(ExponentialFamily.kl(fam, fam.natural_from_params(*p1),
                                                    fam.natural_from_params(*p2)), want, rtol=1e-9)
    # Wishart and Normal-Wishart, D = 3
    d = 3
    m1, b1, nu1, W1 = rand_params("NormalWishart", rng, (), d)
    m2, b2, nu2, W2 = rand_params("NormalWishart", rng, (), d)

    def log_b(W, nu):
        return (-nu / 2 * np.linalg.slogdet(W)[1] - nu * d / 2 * np.log(2)
                - sum(gammaln((nu + 1 - i) / 2) for i in range(1, d + 1)) - d * (d - 1) / 4 * np.log(np.pi))

    elog = sum(digamma((nu1 + 1 - i) / 2) for i in range(1, d + 1)) + d * np.log(2) \
        + np.linalg.slogdet(W1)[1]
    kl_w = (log_b(W1, nu1) - log_b(W2, nu2) + (nu1 - nu2) / 2 * elog - nu1 * d / 2
            + nu1 / 2 * np.trace(np.linalg.solve(W2, W1)))
    fw = FAMILIES["Wishart"]
    np.testing.assert_allclose(ExponentialFamily.kl(fw, fw.natural_from_params(nu1, W1),
                                                    fw.natural_from_params(nu2, W2)), kl_w, rtol=1e-9)
    dm = m1 - m2
    kl_nw = (d / 2 * np.log(b1 / b2) - d / 2 + b2 / 2 * (d / b1 + nu1 * dm @ W1 @ dm) + kl_w)
    fnw = FAMILIES["NormalWishart"]
    np.testing.assert_allclose(
        ExponentialFamily.kl(fnw, fnw.natural_from_params(m1, b1, nu1, W1),
                             fnw.natural_from_params(m2, b2, nu2, W2)), kl_nw, rtol=1e-9)


# ---------------------------------------------------------------------------
# 5. params <-> natural round trip (hypothesis)
@st.composite
def family_params(draw):
    name = draw(st.sampled_from(list(FAMILIES)))
    plates = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    d = draw(st.integers(1, 3))
    fl = dict(allow_nan=False, allow_infinity=False, allow_subnormal=False)

    def spd():
        diag = draw(hnp.arrays(float, plates + (d,), elements=st.floats(0.2, 3.0, **fl)))
        off = draw(hnp.arrays(float, plates + (d, d), elements=st.floats(-2.0, 2.0, **fl)))
        c = np.tril(off, -1) + diag[..., :, None] * np.eye(d)
        s = draw(st.floats(0.05, 20.0, **fl)) * (c @ np.swapaxes(c, -1, -2))
        return 0.5 * (s + np.swapaxes(s, -1, -2))

    def pos(lo=0.1, hi=10.0):
        return draw(hnp.arrays(float, plates, elements=st.floats(lo, hi, **fl)))

    def vec(shape):
        return draw(hnp.arrays(float, shape, elements=st.floats(-3.0, 3.0, **fl)))

    if name == "MultivariateNormal":
        params = (vec(plates + (d,)), spd())
    elif name == "Wishart":
        params = (d - 1 + pos(0.05, 20.0), spd())
    elif name == "NormalGamma":
        params = (vec(plates), pos(), pos(), pos())
    else:
        params = (vec(plates + (d,)), pos(), d - 1 + pos(0.05, 20.0), spd())
    return name, params


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family_params())
def test_params_natural_round_trip(case):
    name, params = case
    fam = FAMILIES[name]
    nat = fam.natural_from_params(*params)
    back = fam.params_from_natural(nat)
    assert tuple(back) == fam.param_names
    for pname, p in zip(fam.param_names, params):
        p = np.broadcast_to(p, back[pname].shape)
        np.testing.assert_allclose(back[pname], p, rtol=1e-9, atol=1e-9 * np.abs(p).max(initial=0),
                                   err_msg=f"{name}.{pname}")
    nat2 = fam.natural_from_params(*(back[p] for p in fam.param_names))
    for c1, c2 in zip(nat, nat2):
        np.testing.assert_allclose(c2, c1, rtol=1e-9, atol=1e-9 * np.abs(c1).max(initial=0))


# ---------------------------------------------------------------------------
# 6. logpdf against scipy
@pytest.mark.parametrize("d", [1, 2, 3])
def test_logpdf_mvn_and_wishart_match_scipy(d):
    rng = np.random.default_rng(30 + d)
    fam = FAMILIES["MultivariateNormal"]
    m, L = rand_params("MultivariateNormal", rng, (3,), d)
    nat = fam.natural_from_params(m, L)
    x = rng.normal(size=(5, 3, d))
    lp = fam.logpdf(x, nat)
    assert lp.shape == (5, 3)
    for i in range(3):
        np.testing.assert_allclose(lp[:, i], stats.multivariate_normal(m[i], np.linalg.inv(L[i]))
                                   .logpdf(x[:, i]).reshape(5), rtol=1e-10)

    fam = FAMILIES["Wishart"]
    nu, W = rand_params("Wishart", rng, (3,), d)
    nat = fam.natural_from_params(nu, W)
    x = fam.sample(nat, rng, size=4)
    lp = fam.logpdf(x, nat)
    assert lp.shape == (4, 3)
    for i in range(3):
        for j in range(4):
            xi = x[j, i] if d > 1 else x[j, i, 0, 0]
            np.testing.assert_allclose(lp[j, i], stats.wishart(nu[i], W[i]).logpdf(xi), rtol=1e-10)
    assert fam.logpdf(-np.eye(d), at(nat, 0)) == -np.inf


def test_logpdf_normal_gamma_is_normal_times_gamma():
    fam = FAMILIES["NormalGamma"]
    rng = np.random.default_rng(40)
    m, k, a, b = rand_params("NormalGamma", rng, (2, 3))
    nat = fam.natural_from_params(m, k, a, b)
    mu, tau = fam.sample(nat, rng, size=5)
    ref = (stats.norm.logpdf(mu, m, 1 / np.sqrt(k * tau)) + stats.gamma.logpdf(tau, a, scale=1 / b))
    np.testing.assert_allclose(fam.logpdf((mu, tau), nat), ref, rtol=1e-10)
    # the base-class route (h + <lam, T> - A) agrees
    np.testing.assert_allclose(ExponentialFamily.logpdf(fam, (mu, tau), nat), ref, rtol=1e-10)
    assert fam.logpdf((0.0, -1.0), at(nat, (0, 0))) == -np.inf


@pytest.mark.parametrize("d", [1, 2, 3])
def test_logpdf_normal_wishart_is_mvn_times_wishart(d):
    fam = FAMILIES["NormalWishart"]
    rng = np.random.default_rng(50 + d)
    m, beta, nu, W = rand_params("NormalWishart", rng, (2,), d)
    nat = fam.natural_from_params(m, beta, nu, W)
    mu, L = fam.sample(nat, rng, size=3)
    lp = fam.logpdf((mu, L), nat)
    np.testing.assert_allclose(ExponentialFamily.logpdf(fam, (mu, L), nat), lp, rtol=1e-10)
    for j in range(3):
        for i in range(2):
            li = L[j, i] if d > 1 else L[j, i, 0, 0]
            ref = (stats.multivariate_normal(m[i], np.linalg.inv(beta[i] * L[j, i])).logpdf(mu[j, i])
                   + stats.wishart(nu[i], W[i]).logpdf(li))
            np.testing.assert_allclose(lp[j, i], ref, rtol=1e-10)


# ---------------------------------------------------------------------------
# 7. sampling: moments of T match mean_params; variances match var()
@pytest.mark.parametrize("name", list(FAMILIES))
def test_sample_moments_match_mean_params(name):
    fam = FAMILIES[name]
    rng = np.random.default_rng(60)
    if name == "Wishart":   # the case D = 3, nu = 5.5
        nat = fam.natural_from_params(np.array([5.5, 3.2]), rand_spd(rng, (2,), 3))
    else:
        nat = rand_nat(name, rng, (2,), 3, dof_lo=1.5)
    x = fam.sample(nat, rng, size=200_000)
    for t, mu in zip(fam.suff_stats(x), fam.mean_params(nat)):
        assert t.shape == (200_000,) + np.shape(mu)
        mc_check(t, mu)


def test_sample_shapes():
    rng = np.random.default_rng(0)
    shapes = {"MultivariateNormal": [(4, 5, 2, 3)], "Wishart": [(4, 5, 2, 3, 3)],
              "NormalGamma": [(4, 5, 2), (4, 5, 2)],
              "NormalWishart": [(4, 5, 2, 3), (4, 5, 2, 3, 3)]}
    for name, fam in FAMILIES.items():
        nat = rand_nat(name, rng, (2,), 3)
        x = fam.sample(nat, rng, size=(4, 5))
        xs = x if isinstance(x, tuple) else (x,)
        assert [a.shape for a in xs] == shapes[name], name
        y = fam.sample(nat, rng)
        ys = y if isinstance(y, tuple) else (y,)
        assert [a.shape for a in ys] == [s[2:] for s in shapes[name]], name


@pytest.mark.parametrize("name", list(FAMILIES))
def test_var_matches_sample_variance(name):
    fam = FAMILIES[name]
    rng = np.random.default_rng(70)
    p = list(rand_params(name, rng, (), 2))
    if name == "NormalGamma":
        p[2] = 4.0          # Student-t marginal of mu with 8 dof: finite 4th moment
    if name == "NormalWishart":
        p[2] = 8.0          # t with nu - D + 1 = 7 dof
    nat = fam.natural_from_params(*p)
    x = fam.sample(nat, rng, size=200_000)
    xs, vs, ms = x, fam.var(nat), fam.mean(nat)
    if not isinstance(x, tuple):
        xs, vs, ms = (xs,), (vs,), (ms,)
    for xi, vi, mi in zip(xs, vs, ms):
        mc_check(xi, mi)
        mc_check((xi - mi) ** 2, vi)


def test_var_mean_consistent_with_scipy():
    rng = np.random.default_rng(80)
    fw = FAMILIES["Wishart"]
    nu, W = rand_params("Wishart", rng, (), 3)
    nat = fw.natural_from_params(nu, W)
    np.testing.assert_allclose(fw.var(nat), stats.wishart(nu, W).var(), rtol=1e-10)
    np.testing.assert_allclose(fw.mean(nat), stats.wishart(nu, W).mean(), rtol=1e-10)
    np.testing.assert_allclose(fw.mean(nat), fw.mean_params(nat)[0])

    fam = FAMILIES["NormalGamma"]
    nat = fam.natural_from_params(*rand_params("NormalGamma", rng, (3,)))
    t, g = fam.to_scipy(nat)
    var_mu, var_tau = fam.var(nat)
    for i in range(3):
        np.testing.assert_allclose(var_mu[i], t[i].var(), rtol=1e-10)
        np.testing.assert_allclose(var_tau[i], g[i].var(), rtol=1e-10)
        np.testing.assert_allclose(fam.mean(nat)[1][i], g[i].mean(), rtol=1e-12)
    nat_small = fam.natural_from_params(0.0, 1.0, 0.8, 1.0)
    assert fam.var(nat_small)[0] == np.inf

    fam = FAMILIES["NormalWishart"]
    nat = fam.natural_from_params(*rand_params("NormalWishart", rng, (2,), 2))
    _, wi = fam.to_scipy(nat)
    for i in range(2):
        np.testing.assert_allclose(fam.var(nat)[1][i], wi[i].var(), rtol=1e-10)
    e_mu, e_l = fam.mean(nat)
    mp = fam.mean_params(nat)
    np.testing.assert_allclose(e_l, mp[2])
    np.testing.assert_allclose(np.einsum("pij,pj->pi", e_l, e_mu), mp[0], rtol=1e-12)
    np.testing.assert_allclose(fam.expected_logdet(nat), mp[3])
    np.testing.assert_allclose(fw.expected_logdet(fw.natural_from_params(nu, W)),
                               fw.mean_params(fw.natural_from_params(nu, W))[1])

    fm = FAMILIES["MultivariateNormal"]
    m, L = rand_params("MultivariateNormal", rng, (2,), 3)
    nat = fm.natural_from_params(m, L)
    np.testing.assert_allclose(fm.cov(nat), np.linalg.inv(L), rtol=1e-10)
    np.testing.assert_allclose(fm.var(nat), np.diagonal(np.linalg.inv(L), axis1=1, axis2=2),
                               rtol=1e-10)
    np.testing.assert_allclose(fm.mean(nat), m, rtol=1e-10)


# ---------------------------------------------------------------------------
# 8. Wishart with D = 1 is Gamma(nu/2, rate 1/(2W))
def test_wishart_d1_is_gamma():
    fam = FAMILIES["Wishart"]
    nu = np.array([0.7, 2.0, 5.3])
    w = np.array([0.4, 1.0, 2.5])
    nat = fam.natural_from_params(nu, w[:, None, None])
    a, b = nu / 2, 1 / (2 * w)
    g = stats.gamma(a, scale=1 / b)
    np.testing.assert_allclose(fam.entropy(nat), g.entropy(), rtol=1e-12)
    x = np.array([0.3, 1.7, 4.0])
    np.testing.assert_allclose(fam.logpdf(x[:, None, None], nat), g.logpdf(x), rtol=1e-12)
    mu = fam.mean_params(nat)
    np.testing.assert_allclose(mu[0][:, 0, 0], a / b, rtol=1e-12)
    np.testing.assert_allclose(mu[1], digamma(a) - np.log(b), rtol=1e-12)
    nat2 = fam.natural_from_params(nu[::-1], w[:, None, None])
    np.testing.assert_allclose(fam.kl(nat, nat2), gamma_kl(a, b, a[::-1], b), rtol=1e-10)


# ---------------------------------------------------------------------------
# 9. modes
def test_mode_formulas():
    rng = np.random.default_rng(90)
    fw = FAMILIES["Wishart"]
    nu, W = np.array([4.5, 7.0]), rand_spd(rng, (2,), 2)
    np.testing.assert_allclose(fw.mode(fw.natural_from_params(nu, W)),
                               (nu - 3)[:, None, None] * W, rtol=1e-10)
    # boundary: nu < D + 1 -> clamped to the zero matrix
    np.testing.assert_array_equal(fw.mode(fw.natural_from_params(2.5, W[0])), 0.0)

    fam = FAMILIES["NormalGamma"]
    m, k, a, b = rand_params("NormalGamma", rng, (3,))
    mu_hat, tau_hat = fam.mode(fam.natural_from_params(m, k, a, b))
    np.testing.assert_allclose(mu_hat, m, rtol=1e-10)
    np.testing.assert_allclose(tau_hat, np.maximum(a - 0.5, 0) / b, rtol=1e-10)

    fam = FAMILIES["NormalWishart"]
    m, beta, nu, W = rand_params("NormalWishart", rng, (2,), 3)
    nu = nu + 1.0
    mu_hat, l_hat = fam.mode(fam.natural_from_params(m, beta, nu, W))
    np.testing.assert_allclose(mu_hat, m, rtol=1e-10)
    np.testing.assert_allclose(l_hat, (nu - 3)[:, None, None] * W, rtol=1e-10)

    fm = FAMILIES["MultivariateNormal"]
    m, L = rand_params("MultivariateNormal", rng, (2,), 3)
    np.testing.assert_allclose(fm.mode(fm.natural_from_params(m, L)), m, rtol=1e-10)


def test_modes_are_numerical_argmax_of_logpdf():
    # Normal-Wishart, D = 2: maximise over (mu, Cholesky factor of L)
    d = 2
    fam = FAMILIES["NormalWishart"]
    m, W = np.array([0.5, -1.0]), np.array([[1.0, 0.3], [0.3, 0.5]])
    nat = fam.natural_from_params(m, 2.0, 4.5, W)

    def neg(theta):
        return -fam.logpdf((theta[:d], chol_to_spd(theta[d:], d)), nat)

    res = optimize.minimize(neg, np.zeros(d + 3), method="BFGS", options={"gtol": 1e-10})
    mu_hat, l_hat = fam.mode(nat)
    np.testing.assert_allclose(res.x[:d], mu_hat, atol=1e-5)
    np.testing.assert_allclose(chol_to_spd(res.x[d:], d), l_hat, atol=1e-5)
    np.testing.assert_allclose(l_hat, (4.5 - d) * W)
    # and the L-marginal mode (nu - D - 1) W is a different point
    assert not np.allclose(l_hat, (4.5 - d - 1) * W)

    # Wishart
    fw = FAMILIES["Wishart"]
    natw = fw.natural_from_params(4.5, W)
    res = optimize.minimize(lambda th: -fw.logpdf(chol_to_spd(th, d), natw), np.zeros(3),
                            method="BFGS", options={"gtol": 1e-10})
    np.testing.assert_allclose(chol_to_spd(res.x, d), fw.mode(natw), atol=1e-5)

    # Normal-Gamma
    fg = FAMILIES["NormalGamma"]
    natg = fg.natural_from_params(0.7, 2.0, 3.0, 1.5)
    res = optimize.minimize(lambda th: -fg.logpdf((th[0], np.exp(th[1])), natg), np.zeros(2),
                            method="BFGS", options={"gtol": 1e-10})
    np.testing.assert_allclose([res.x[0], np.exp(res.x[1])], fg.mode(natg), atol=1e-5)


# ---------------------------------------------------------------------------
# 10. to_scipy marginals
def test_normal_gamma_t_marginal_integrates_joint():
    fam = FAMILIES["NormalGamma"]
    nat = fam.natural_from_params(0.3, 1.7, 2.5, 0.8)
    t, g = fam.to_scipy(nat)
    for mu0 in (-1.0, 0.3, 2.0):
        val, _ = integrate.quad(lambda tau: np.exp(fam.logpdf((mu0, tau), nat)), 0, np.inf)
        np.testing.assert_allclose(t.pdf(mu0), val, rtol=1e-7)
    np.testing.assert_allclose(g.mean(), 2.5 / 0.8)


def test_normal_wishart_t_marginal_matches_monte_carlo():
    fam = FAMILIES["NormalWishart"]
    rng = np.random.default_rng(100)
    m, W = np.array([0.5, -1.0]), np.array([[1.0, 0.3], [0.3, 0.5]])
    beta, nu = 1.5, 4.0
    nat = fam.natural_from_params(m, beta, nu, W)
    t, wi = fam.to_scipy(nat)
    np.testing.assert_allclose(wi.mean(), nu * W)
    _, L = fam.sample(nat, rng, size=200_000)
    for mu0 in (m, m + np.array([0.4, -0.3])):
        # E_L[ N(mu0 | m, (beta L)^{-1}) ], D = 2
        dens = np.exp(0.5 * np.linalg.slogdet(beta * L)[1] - np.log(2 * np.pi)
                      - 0.5 * beta * np.einsum("i,nij,j->n", mu0 - m, L, mu0 - m))
        mc_check(dens, t.pdf(mu0))


def test_to_scipy_object_arrays_with_plates():
    rng = np.random.default_rng(110)
    for name, fam in FAMILIES.items():
        nat = rand_nat(name, rng, (2, 3), 2)
        out = fam.to_scipy(nat)
        parts = out if isinstance(out, tuple) else (out,)
        assert len(parts) == (2 if name.startswith("Normal") else 1)
        for p in parts:
            assert p.shape == (2, 3) and p.dtype == object
        one = fam.to_scipy(at(broadcast_nat(nat, fam.event_ndims), (1, 2)))
        one = one if isinstance(one, tuple) else (one,)
        assert not isinstance(one[0], np.ndarray)
    fm = FAMILIES["MultivariateNormal"]
    m, L = rand_params("MultivariateNormal", rng, (2,), 2)
    sp = fm.to_scipy(fm.natural_from_params(m, L))
    np.testing.assert_allclose(sp[1].cov, np.linalg.inv(L[1]), rtol=1e-10)


# ---------------------------------------------------------------------------
# 11. validation
def test_validation_errors_name_the_node():
    fw, fm = FAMILIES["Wishart"], FAMILIES["MultivariateNormal"]
    fg, fnw = FAMILIES["NormalGamma"], FAMILIES["NormalWishart"]
    with pytest.raises(ValueError, match=r"Wishart 'Lam': dof must be > D - 1 = 1, got 0\.5"):
        fw.validate_params(0.5, np.eye(2), where="Lam")
    with pytest.raises(ValueError, match=r"Wishart 'Lam'.*scale.*positive definite"):
        fw.validate_params(3.0, np.array([[1.0, 2.0], [2.0, 1.0]]), where="Lam")
    with pytest.raises(ValueError, match=r"Wishart 'Lam'.*scale.*symmetric"):
        fw.validate_params(3.0, np.array([[1.0, 0.5], [0.0, 1.0]]), where="Lam")
    with pytest.raises(ValueError, match=r"Wishart 'Lam'.*dof must be > D - 1 = 2"):
        fw.validate_params(np.array([4.0, 1.5]), np.eye(3), where="Lam")
    with pytest.raises(ValueError, match=r"MultivariateNormal 'x'.*mean has D = 3.*precision is 2x2"):
        fm.validate_params(np.zeros(3), np.eye(2), where="x")
    with pytest.raises(ValueError, match=r"MultivariateNormal 'x'.*precision.*positive definite"):
        fm.validate_params(np.zeros(2), -np.eye(2), where="x")
    with pytest.raises(ValueError, match=r"MultivariateNormal 'x'.*plate"):
        fm.validate_params(np.zeros((3, 2)), np.broadcast_to(np.eye(2), (4, 2, 2)), where="x")
    for bad, what in [((0.0, -1.0, 2.0, 1.0), "beta"), ((0.0, 1.0, 0.0, 1.0), "shape"),
                      ((0.0, 1.0, 2.0, -3.0), "rate"), ((np.nan, 1.0, 2.0, 1.0), "mean")]:
        with pytest.raises(ValueError, match=rf"NormalGamma 'theta'.*{what}"):
            fg.validate_params(*bad, where="theta")
    with pytest.raises(ValueError, match=r"NormalWishart 'cl'.*mean has D = 2.*scale is 3x3"):
        fnw.validate_params(np.zeros(2), 1.0, 5.0, np.eye(3), where="cl")
    with pytest.raises(ValueError, match=r"NormalWishart 'cl'.*dof must be > D - 1 = 2, got 2"):
        fnw.validate_params(np.zeros(3), 1.0, 2.0, np.eye(3), where="cl")
    with pytest.raises(ValueError, match=r"NormalWishart 'cl'.*beta"):
        fnw.validate_params(np.zeros(3), 0.0, 5.0, np.eye(3), where="cl")
    with pytest.raises(ValueError, match=r"NormalWishart 'cl'.*scale.*positive definite"):
        fnw.validate_params(np.zeros(2), 1.0, 5.0, np.diag([1.0, -1.0]), where="cl")
    # valid parameters pass and come back as float arrays
    out = fnw.validate_params([0, 1], 2, 3, np.eye(2), where="cl")
    assert all(isinstance(o, np.ndarray) and o.dtype == float for o in out)


def test_invalid_natural_parameters_raise():
    with pytest.raises(ValueError, match="Wishart"):
        FAMILIES["Wishart"].log_partition((np.eye(2), np.array(1.0)))      # -2 lam1 not PD
    with pytest.raises(ValueError, match="MultivariateNormal"):
        FAMILIES["MultivariateNormal"].mean_params((np.zeros(2), np.eye(2)))
    with pytest.raises(ValueError, match="NormalGamma"):
        FAMILIES["NormalGamma"].log_partition((0.0, 0.5, -1.0, 1.0))        # beta < 0
    with pytest.raises(ValueError, match="NormalWishart"):
        FAMILIES["NormalWishart"].log_partition((np.zeros(2), -0.5, -0.5 * np.eye(2), -1.0))


def test_mvn_sample_of_a_shared_precision_equals_the_per_entry_one():
    """q's entries sharing one precision (a stride-0 stack, PCA's scores): the draws are
    those of the same precision written out per entry (one factor inverted for all)."""
    from blrgraph.families import MultivariateNormal
    fam = MultivariateNormal()
    rng = np.random.default_rng(4)
    K, N = 3, 50
    A = rng.normal(size=(K, K))
    L = A @ A.T + K * np.eye(K)
    m = rng.normal(size=(N, K))
    shared = np.broadcast_to(L, (N, K, K))
    nat_s = (np.einsum("ij,nj->ni", L, m), -0.5 * shared)
    nat_e = (nat_s[0], -0.5 * np.ascontiguousarray(shared))
    a = fam.sample(nat_s, rng=np.random.default_rng(9), size=4)
    b = fam.sample(nat_e, rng=np.random.default_rng(9), size=4)
    assert a.shape == (4, N, K)
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("n", [1, 10, 100])
def test_spd_small_closed_form_2x2(n):
    """D = 2 factorisations in closed form (families._spd._spd_small): A^-1 and log|A|
    equal LAPACK's (Cholesky, its inverse and diagonal) to rounding, A^-1 exactly
    symmetric; any stack that is not PD and finite is left to the Cholesky (None), which
    refuses it as before; q's moments and samples read the same numbers as LAPACK's path."""
    from blrgraph.families._spd import _spd_small, _cholesky, _inv_from_chol, _chol_logdet
    rng = np.random.default_rng(n)
    b = rng.standard_normal((n, 2, 2))
    A = b @ np.swapaxes(b, -1, -2) + 0.5 * np.eye(2)
    inv, ld = _spd_small(A)
    c = _cholesky(A)
    scale = np.max(np.abs(inv), axis=(-2, -1))[:, None, None]
    assert np.max(np.abs(inv - _inv_from_chol(c)[0]) / scale) < 1e-14
    np.testing.assert_allclose(ld, _chol_logdet(c), rtol=1e-14, atol=1e-14)
    assert np.array_equal(inv, np.swapaxes(inv, -1, -2))
    for bad in (-1.0, 0.0, np.inf, np.nan):   # a11 <= 0, |A| <= 0, not finite
        B = A.copy()
        B[-1] = [[bad, 0.0], [0.0, 1.0]] if bad != 0.0 else [[1.0, 1.0], [1.0, 1.0]]
        assert _spd_small(B) is None
    assert _spd_small(np.eye(3)[None]) is None
    assert _spd_small(1e231 * A) is None   # (|A| would overflow: LAPACK's way)
    assert _spd_small(1e-160 * A) is None   # (|A| would not be a normal number)
    mvn, wis = FAMILIES["MultivariateNormal"], FAMILIES["Wishart"]
    m = rng.standard_normal((n, 2))
    nat = mvn.natural_from_params(m, A)
    assert mvn._unpack(nat)[4] is None   # (the closed form: c formed when sampling)
    x = mvn.sample(nat, rng=3, size=5)
    want = m + np.einsum("...ji,...j->...i", np.linalg.inv(c), np.random.default_rng(3)
                         .standard_normal((5, n, 2)))
    np.testing.assert_allclose(x, want, rtol=1e-12, atol=1e-12)
    wnat = wis.natural_from_params(np.full(n, 4.5), np.linalg.inv(A))
    assert wis._unpack(wnat)[4] is None
    L = wis.sample(wnat, rng=4, size=3)
    assert L.shape == (3, n, 2, 2) and np.all(np.linalg.eigvalsh(L) > 0)
    B = A.copy()
    B[0] = [[1.0, 2.0], [2.0, 1.0]]   # not PD: the Cholesky's error, as before
    with pytest.raises(ValueError, match="not positive definite"):
        mvn.mean_params((np.zeros((n, 2)), -0.5 * B))
    with pytest.raises(ValueError, match="not positive definite"):
        wis.mean_params((-0.5 * B, np.full(n, 2.0)))


@pytest.mark.parametrize("shape", [(3,), (2, 2), ()])
def test_spd_few_potrf_potri_in_place(shape):
    """A few D >= 8 matrices (families._spd._spd_inv_logdet_few: LAPACK's potrf and potri
    on each, in place): A^-1 equals the gufunc Cholesky's path to rounding and is exactly
    symmetric, log|A| equals it to the bit (the same lower factor); a stack with a matrix
    that is not PD or not finite is left to the Cholesky (None), so a q outside the natural
    parameter space is refused naming the node; q's samples (c formed then) are the same
    numbers as from the gufunc's factor."""
    from blrgraph.families._spd import _spd_inv_logdet_few, _cholesky, _spd_inv, _chol_logdet
    rng = np.random.default_rng(13)
    d = 13
    b = rng.standard_normal(shape + (d, d))
    A = b @ np.swapaxes(b, -1, -2) + d * np.eye(d)
    A = 0.5 * (A + np.swapaxes(A, -1, -2))
    inv, ld = _spd_inv_logdet_few(A)
    c = _cholesky(A)
    ref = _spd_inv(c)
    assert inv.shape == A.shape and np.shape(ld) == shape
    assert np.max(np.abs(inv - ref)) < 1e-15 * np.max(np.abs(ref)) * d
    assert np.array_equal(ld, _chol_logdet(c))   # (the same factor: lower potrf, as numpy)
    assert np.array_equal(inv, np.swapaxes(inv, -1, -2))
    inv_w, ld_w = _spd_inv_logdet_few(A, -2.0)
    assert np.array_equal(inv_w, inv) and np.array_equal(ld_w, -ld)
    for bad in (-1.0, np.nan, np.inf):
        B = A.copy()
        B[(0,) * len(shape) + (4, 4)] = bad
        assert _spd_inv_logdet_few(B) is None
    assert _spd_inv_logdet_few(A[..., :7, :7]) is None   # (D < POTRI_MIN_D: the gufuncs)
    many = np.broadcast_to(A.reshape((-1, d, d))[0], (9, d, d)).copy()
    assert _spd_inv_logdet_few(many) is None   # (> FEW_MAX_COUNT matrices: the gufuncs)
    wis = FAMILIES["Wishart"]
    nat = wis.natural_from_params(np.full(shape, d + 3.0), inv)
    assert wis._unpack(nat)[4] is None   # (c formed when sampling)
    bad = (nat[0].copy(), nat[1])
    bad[0][(0,) * len(shape) + (4, 4)] = 1e3   # -2 lam1 not positive definite
    with pytest.raises(ValueError, match="Wishart.*not positive definite"):
        wis.mean_params(bad)
    s1 = wis.sample(nat, rng=5, size=3)
    wis.release()
    assert s1.shape == (3,) + shape + (d, d) and np.all(np.isfinite(s1))


@pytest.mark.parametrize("d", [2, 3, 8, 13])
def test_nan_anywhere_in_a_precision_is_refused(d):
    """A nan entry of q's precision (or inverse scale), on the diagonal or off it, is refused
    with the Cholesky's error, never factorised into nan moments: the gufunc lets a nan off
    the diagonal through, and it reaches the last pivot, which _cholesky tests."""
    rng = np.random.default_rng(d)
    mvn, wis = FAMILIES["MultivariateNormal"], FAMILIES["Wishart"]
    for i, j in {(d - 1, 0), (1, 0), (0, 0), (d - 1, d - 1), (d // 2, d // 3)}:
        b = rng.standard_normal((2, d, d))
        A = b @ np.swapaxes(b, -1, -2) + d * np.eye(d)
        A[1, i, j] = A[1, j, i] = np.nan
        for fam, nat in ((mvn, (np.zeros((2, d)), -0.5 * A)), (wis, (-0.5 * A, np.full(2, 3.0)))):
            fam.release()
            with pytest.raises(ValueError, match="not positive definite"):
                fam.mean_params(nat)
