"""Bad input is refused where it enters (docs/errors.md).

Each case must raise ValueError or TypeError, and the message must name the
node the user declared (its ``name=``) so the user can find the mistake.  A fit
never returns NaN silently: divergence raises FloatingPointError naming the node
and the iteration.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import blrgraph as bg
from blrgraph.inference import blr_step


def refused(fn, name, exc=(ValueError, TypeError), match=None):
    """fn() raises ``exc`` whose message names the node ``name`` (quoted)."""
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    assert re.search(rf"['\"]{re.escape(name)}['\"]", msg), f"message does not name {name!r}: {msg}"
    if match is not None:
        assert re.search(match, msg, flags=re.IGNORECASE), f"{match!r} not in: {msg}"
    return info.value


def rate(name="rate", plates=()):
    return bg.Gamma(2.0, 1.0, plates=plates, name=name)


# --------------------------------------------------------------------------
# NaN / inf in data without a mask
# --------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_data_without_mask(bad):
    err = refused(lambda: bg.Poisson(rate(), plates=(3,), name="counts").observe([1.0, bad, 2.0]),
                  "counts", ValueError, match="nan|inf")
    assert "mask" in str(err)  # tells the user how to mark missing values


def test_nonfinite_vector_data_without_mask():
    X = np.ones((4, 2))
    X[2, 1] = np.nan
    mu = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="mu")
    refused(lambda: bg.MultivariateNormal(mu, np.eye(2), plates=(4,), name="points").observe(X),
            "points", ValueError, match="nan")


def test_nan_marked_observed_by_the_mask():
    data = np.array([1.0, np.nan, 2.0])
    refused(lambda: bg.Normal(0.0, 1.0, plates=(3,), name="yy").observe(data,
                                                                         mask=np.ones(3, bool)),
            "yy", ValueError)


def test_nan_with_mask_is_accepted():
    """The counterpart of the refusals: the same NaN behind a mask is fine."""
    data = np.array([1.0, np.nan, 2.0])
    y = bg.Poisson(rate(), plates=(3,), name="counts").observe(data, mask=~np.isnan(data))
    fit = bg.Model(y).fit("conjugate")
    assert np.isfinite(fit.elbo)


# --------------------------------------------------------------------------
# data outside the support
# --------------------------------------------------------------------------
def _dir(name="pi", K=3):
    return bg.Dirichlet(np.ones(K), name=name)


SUPPORT_CASES = {
    "poisson_negative": (lambda: bg.Poisson(rate(), plates=(3,), name="counts"), [1, -1, 2]),
    "poisson_fraction": (lambda: bg.Poisson(rate(), plates=(3,), name="counts"), [1, 1.5, 2]),
    "categorical_K": (lambda: bg.Categorical(_dir(), plates=(3,), name="labels"), [0, 3, 1]),
    "categorical_negative": (lambda: bg.Categorical(_dir(), plates=(3,), name="labels"), [0, -1, 1]),
    "categorical_fraction": (lambda: bg.Categorical(_dir(), plates=(3,), name="labels"), [0, 0.5, 1]),
    "bernoulli_two": (lambda: bg.Bernoulli(bg.Beta(1.0, 1.0, name="p"), plates=(3,), name="coin"),
                      [0, 2, 1]),
    "bernoulli_half": (lambda: bg.Bernoulli(bg.Beta(1.0, 1.0, name="p"), plates=(3,), name="coin"),
                       [0, 0.5, 1]),
    "bernoulli_negative": (lambda: bg.Bernoulli(0.3, plates=(3,), name="coin"), [0, -1, 1]),
    "binomial_above_n": (lambda: bg.Binomial(3, bg.Beta(1.0, 1.0, name="p"), plates=(3,),
                                             name="succ"), [0, 4, 1]),
    "exponential_negative": (lambda: bg.Exponential(rate(), plates=(3,), name="waits"),
                             [1.0, -0.1, 2.0]),
    "gamma_zero": (lambda: bg.Gamma(2.0, rate(), plates=(3,), name="gchild"), [1.0, 0.0, 2.0]),
    "multinomial_negative": (lambda: bg.Multinomial(3, _dir(), plates=(2,), name="cnt"),
                             [[1, 1, 1], [4, -1, 0]]),
    "multinomial_sum_not_n": (lambda: bg.Multinomial(3, _dir(), plates=(2,), name="cnt"),
                              [[1, 1, 1], [2, 0, 0]]),
    "multinomial_sum_not_row_n": (lambda: bg.Multinomial(np.array([3, 2]), _dir(), name="cnt"),
                                  [[1, 1, 1], [3, 0, 0]]),
    "wishart_not_spd": (lambda: bg.Wishart(3.0, np.eye(2), plates=(2,), name="covs"),
                        [np.eye(2), [[1.0, 2.0], [2.0, 1.0]]]),
    "wishart_negative_diag": (lambda: bg.Wishart(3.0, np.eye(2), name="covs"), -np.eye(2)),
}


@pytest.mark.parametrize("case", sorted(SUPPORT_CASES))
def test_data_outside_support(case):
    make, data = SUPPORT_CASES[case]
    node = make()
    refused(lambda: node.observe(np.asarray(data, dtype=float)), node.name, ValueError)


def test_multinomial_masked_row_may_have_any_sum():
    counts = np.array([[1.0, 1.0, 1.0], [np.nan, np.nan, np.nan], [0.0, 0.0, 3.0]])
    y = bg.Multinomial(np.array([3, 5, 3]), _dir(), name="cnt").observe(
        counts, mask=np.array([True, False, True]))
    assert np.isfinite(bg.Model(y).fit("conjugate").elbo)


def test_outside_support_inside_mask_is_ignored_but_outside_refused():
    data = np.array([1.0, -5.0, 2.0])
    ok = bg.Poisson(rate(), plates=(3,), name="counts").observe(data, mask=np.array([1, 0, 1], bool))
    assert bg.Model(ok).fit("conjugate").elbo < 0
    refused(lambda: bg.Poisson(rate("r2"), plates=(3,), name="counts2").observe(
        data, mask=np.array([1, 1, 0], bool)), "counts2", ValueError)


def test_data_must_be_numeric():
    refused(lambda: bg.Normal(0.0, 1.0, plates=(2,), name="yy").observe(["a", "b"]), "yy",
            TypeError)


# --------------------------------------------------------------------------
# shapes that do not broadcast with the plates
# --------------------------------------------------------------------------
def test_plates_do_not_broadcast_with_parent_plates():
    refused(lambda: bg.Poisson(rate(plates=(4,)), plates=(3,), name="counts"), "counts",
            ValueError, match="plates")


def test_plates_smaller_than_parent_plates():
    refused(lambda: bg.Poisson(rate(plates=(2, 4)), plates=(4,), name="counts"), "counts",
            ValueError, match="plates")


def test_parents_plates_do_not_broadcast_together():
    mu = bg.Normal(0.0, 1.0, plates=(3,), name="mu")
    tau = bg.Gamma(1.0, 1.0, plates=(4,), name="tau")
    refused(lambda: bg.Normal(mu, tau, name="child"), "child", ValueError, match="plates")


def test_data_plates_do_not_broadcast():
    refused(lambda: bg.Poisson(rate(plates=(4,)), name="counts").observe(np.ones((5, 3))),
            "counts", ValueError, match="plates")
    refused(lambda: bg.Poisson(rate(), plates=(4,), name="counts2").observe(np.ones(3)),
            "counts2", ValueError, match="plates")


EVENT_CASES = {
    "mvn_D": (lambda: bg.MultivariateNormal(
        bg.MultivariateNormal(np.zeros(3), np.eye(3), name="mu"), np.eye(3), plates=(4,),
        name="points"), np.ones((4, 2))),
    "normal_wishart_D": (lambda: bg.MultivariateNormal(
        bg.NormalWishart(np.zeros(2), 1.0, 3.0, np.eye(2), name="nw"), plates=(5,),
        name="points"), np.ones((5, 3))),
    "gamma_precision_D": (lambda: bg.MultivariateNormal(
        np.zeros(2), bg.Gamma(1.0, 1.0, plates=(2,), name="t"), plates=(5,), name="points"),
        np.ones((5, 3))),
    "multinomial_K": (lambda: bg.Multinomial(3, bg.Dirichlet(np.ones(3), name="pi"), plates=(2,),
                                             name="points"), [[1, 1, 1, 0], [3, 0, 0, 0]]),
    "wishart_D": (lambda: bg.Wishart(3.0, np.eye(2), name="points"), np.eye(3)),
    "dirichlet_K": (lambda: bg.Dirichlet(np.ones(3), plates=(2,), name="points"),
                    [[0.5, 0.5], [0.2, 0.8]]),
    "mixture_D": (lambda: bg.Mixture(
        bg.Categorical(bg.Dirichlet(np.ones(2), name="w"), plates=(5,), name="z"),
        bg.MultivariateNormal,
        bg.NormalWishart(np.zeros(2), 1.0, 3.0, np.eye(2), plates=(2,), name="th"),
        name="points"), np.ones((5, 3))),
}


@pytest.mark.parametrize("case", sorted(EVENT_CASES))
def test_values_with_the_wrong_event_shape(case):
    """A vector/matrix of the wrong size is refused at observe(), not deep in a fit."""
    make, data = EVENT_CASES[case]
    node = make()
    refused(lambda: node.observe(np.asarray(data, dtype=float)), "points", ValueError,
            match="shape")


PARAM_SHAPE_CASES = {
    "mean_vs_precision": lambda: bg.MultivariateNormal(np.zeros(3), np.eye(2), name="child"),
    "mean_vs_wishart": lambda: bg.MultivariateNormal(
        np.zeros(3), bg.Wishart(4.0, np.eye(2), name="L"), name="child"),
    "mvn_mean_node_vs_precision": lambda: bg.MultivariateNormal(
        bg.MultivariateNormal(np.zeros(2), np.eye(2), name="m"), np.eye(3), name="child"),
    "mixture_components": lambda: bg.Mixture(
        bg.Categorical(bg.Dirichlet(np.ones(2), name="w"), plates=(5,), name="z"),
        bg.MultivariateNormal,
        bg.MultivariateNormal(np.zeros(3), np.eye(3), plates=(2,), name="m"),
        bg.Wishart(3.0, np.eye(2), plates=(2,), name="L"), name="child"),
}


@pytest.mark.parametrize("case", sorted(PARAM_SHAPE_CASES))
def test_parameters_whose_event_shapes_do_not_fit(case):
    refused(PARAM_SHAPE_CASES[case], "child", ValueError, match="shape")


def test_refused_child_is_not_left_attached_to_its_parent():
    L = bg.Wishart(4.0, np.eye(2), name="L")
    with pytest.raises(ValueError):
        bg.MultivariateNormal(np.zeros(3), L, name="bad")
    assert L.children == []
    y = bg.MultivariateNormal(np.zeros(2), L, plates=(3,), name="good").observe(np.ones((3, 2)))
    assert np.isfinite(bg.Model(y).fit("conjugate").elbo)


def test_mask_and_weights_shapes():
    refused(lambda: bg.Poisson(rate(), plates=(4,), name="counts").observe(
        np.ones(4), mask=np.ones(3, bool)), "counts", ValueError, match="mask")
    refused(lambda: bg.Poisson(rate(), plates=(4,), name="counts").observe(
        np.ones(4), weights=np.ones(3)), "counts", ValueError, match="weights")
    refused(lambda: bg.Poisson(rate(), plates=(4,), name="counts").observe(
        np.ones(4), weights=-np.ones(4)), "counts", ValueError, match="weights")
    refused(lambda: bg.Poisson(rate(), plates=(4,), name="counts").observe(
        np.ones(4), mask=np.ones(4)), "counts", TypeError, match="mask")


def test_dot_design_matrix_columns():
    w = bg.MultivariateNormal(np.zeros(3), np.eye(3), name="weights")
    with pytest.raises(ValueError, match="weights"):
        bg.Dot(np.ones((5, 2)), w)


# --------------------------------------------------------------------------
# non-positive / invalid hyperparameters
# --------------------------------------------------------------------------
HYPER_CASES = {
    "gamma_shape_0": lambda: bg.Gamma(0.0, 1.0, name="node"),
    "gamma_shape_neg": lambda: bg.Gamma(-1.0, 1.0, name="node"),
    "gamma_shape_nan": lambda: bg.Gamma(np.nan, 1.0, name="node"),
    "gamma_rate_0": lambda: bg.Gamma(1.0, 0.0, name="node"),
    "gamma_rate_array": lambda: bg.Gamma(1.0, np.array([1.0, -2.0]), name="node"),
    "beta_a_0": lambda: bg.Beta(0.0, 1.0, name="node"),
    "beta_b_neg": lambda: bg.Beta(1.0, -1.0, name="node"),
    "dirichlet_alpha_0": lambda: bg.Dirichlet(np.array([1.0, 0.0, 1.0]), name="node"),
    "dirichlet_alpha_neg": lambda: bg.Dirichlet(np.array([1.0, -1.0]), name="node"),
    "wishart_dof_below": lambda: bg.Wishart(1.0, np.eye(3), name="node"),
    "wishart_dof_D_minus_1": lambda: bg.Wishart(2.0, np.eye(3), name="node"),
    "wishart_scale_not_spd": lambda: bg.Wishart(4.0, np.array([[1.0, 2.0], [2.0, 1.0]]),
                                                name="node"),
    "wishart_scale_not_symmetric": lambda: bg.Wishart(4.0, np.array([[1.0, 0.2], [0.0, 1.0]]),
                                                      name="node"),
    "normal_wishart_dof": lambda: bg.NormalWishart(np.zeros(3), 1.0, 1.5, np.eye(3), name="node"),
    "normal_wishart_beta": lambda: bg.NormalWishart(np.zeros(2), 0.0, 3.0, np.eye(2), name="node"),
    "normal_wishart_scale": lambda: bg.NormalWishart(np.zeros(2), 1.0, 3.0, -np.eye(2),
                                                     name="node"),
    "normal_gamma_beta": lambda: bg.NormalGamma(0.0, 0.0, 1.0, 1.0, name="node"),
    "normal_gamma_shape": lambda: bg.NormalGamma(0.0, 1.0, 0.0, 1.0, name="node"),
    "normal_gamma_rate": lambda: bg.NormalGamma(0.0, 1.0, 1.0, -1.0, name="node"),
    "normal_precision_0": lambda: bg.Normal(0.0, 0.0, name="node"),
    "normal_precision_neg": lambda: bg.Normal(0.0, -1.0, name="node"),
    "normal_mean_inf": lambda: bg.Normal(np.inf, 1.0, name="node"),
    "mvn_precision_not_spd": lambda: bg.MultivariateNormal(
        np.zeros(2), np.array([[1.0, 2.0], [2.0, 1.0]]), name="node"),
    "bernoulli_p_out": lambda: bg.Bernoulli(1.5, name="node"),
    "categorical_p_not_simplex": lambda: bg.Categorical(np.array([0.5, 0.6]), name="node"),
    "poisson_rate_neg": lambda: bg.Poisson(-1.0, name="node"),
    "exponential_rate_0": lambda: bg.Exponential(0.0, name="node"),
    "binomial_n_neg": lambda: bg.Binomial(-2, 0.5, name="node"),
    "multinomial_n_fraction": lambda: bg.Multinomial(2.5, np.array([0.5, 0.5]), name="node"),
}


@pytest.mark.parametrize("case", sorted(HYPER_CASES))
def test_invalid_hyperparameters(case):
    refused(HYPER_CASES[case], "node", ValueError)


def test_hyperparameter_messages_name_the_node_once():
    """The node label is not nested ("Beta 'Beta 'p''")."""
    for make in (lambda: bg.Beta(0.0, 1.0, name="p"),
                 lambda: bg.Dirichlet(np.zeros(2), name="p"),
                 lambda: bg.Wishart(0.5, np.eye(2), name="p")):
        with pytest.raises(ValueError) as info:
            make()
        msg = str(info.value)
        assert not re.search(r"['\"](Beta|Dirichlet|Wishart) '", msg), msg  # no nested label
        assert len(re.findall(r"['\"]p['\"]", msg)) == 1, msg


# --------------------------------------------------------------------------
# non-conjugate parents
# --------------------------------------------------------------------------
PARENT_CASES = {
    "normal_mean_gamma": lambda: bg.Normal(bg.Gamma(1.0, 1.0, name="g"), 1.0, name="child"),
    "normal_precision_normal": lambda: bg.Normal(0.0, bg.Normal(0.0, 1.0, name="n"), name="child"),
    "normal_precision_beta": lambda: bg.Normal(0.0, bg.Beta(1.0, 1.0, name="b"), name="child"),
    "poisson_rate_beta": lambda: bg.Poisson(bg.Beta(1.0, 1.0, name="b"), name="child"),
    "exponential_rate_normal": lambda: bg.Exponential(bg.Normal(0.0, 1.0, name="n"), name="child"),
    "bernoulli_p_gamma": lambda: bg.Bernoulli(bg.Gamma(1.0, 1.0, name="g"), name="child"),
    "binomial_p_dirichlet": lambda: bg.Binomial(3, bg.Dirichlet(np.ones(2), name="d"),
                                                name="child"),
    "categorical_p_beta": lambda: bg.Categorical(bg.Beta(1.0, 1.0, name="b"), name="child"),
    "mvn_mean_normal": lambda: bg.MultivariateNormal(bg.Normal(0.0, 1.0, name="n"), np.eye(2),
                                                     name="child"),
    "mvn_precision_mvn": lambda: bg.MultivariateNormal(
        np.zeros(2), bg.MultivariateNormal(np.zeros(2), np.eye(2), name="m"), name="child"),
    # a Gamma node as the shape is accepted (non-conjugate, fit("ncvmp")); a Normal is not
    "gamma_shape_normal": lambda: bg.Gamma(bg.Normal(0.0, 1.0, name="n"), 1.0, name="child"),
    "gamma_rate_normal": lambda: bg.Gamma(1.0, bg.Normal(0.0, 1.0, name="n"), name="child"),
    "beta_a_random": lambda: bg.Beta(bg.Gamma(1.0, 1.0, name="g"), 1.0, name="child"),
    "normal_theta_normal_wishart": lambda: bg.Normal(
        bg.NormalWishart(np.zeros(2), 1.0, 3.0, np.eye(2), name="nw"), name="child"),
    "mvn_theta_normal_gamma": lambda: bg.MultivariateNormal(
        bg.NormalGamma(0.0, 1.0, 1.0, 1.0, name="ng"), name="child"),
}


@pytest.mark.parametrize("case", sorted(PARENT_CASES))
def test_non_conjugate_parent(case):
    refused(PARENT_CASES[case], "child", TypeError)


def test_mixture_needs_categorical_assignments():
    mu = bg.Normal(0.0, 1.0, plates=(2,), name="mu")
    z = bg.Bernoulli(0.5, plates=(5,), name="z")
    refused(lambda: bg.Mixture(z, bg.Normal, mu, 1.0, name="mix"), "mix", TypeError)


def test_mixture_component_count_mismatch():
    z = bg.Categorical(bg.Dirichlet(np.ones(3), name="pi"), plates=(5,), name="z")
    mu = bg.Normal(0.0, 1.0, plates=(2,), name="mu")
    refused(lambda: bg.Mixture(z, bg.Normal, mu, 1.0, name="mix"), "mix", ValueError)


# --------------------------------------------------------------------------
# methods the model does not fit
# --------------------------------------------------------------------------
def test_conjugate_on_a_model_that_needs_iterations():
    mu = bg.Normal(0.0, 1.0, name="mu")
    tau = bg.Gamma(1.0, 1.0, name="tau")
    y = bg.Normal(mu, tau, plates=(5,), name="y").observe(np.arange(5.0))
    model = bg.Model(y)
    err = refused(lambda: model.fit("conjugate"), "tau", ValueError, match="vmp")
    assert "mu" in str(err)
    assert np.isfinite(model.fit("vmp").elbo)  # the suggested method works


def test_conjugate_on_a_mixture_is_refused():
    z = bg.Categorical(bg.Dirichlet(np.ones(2), name="pi"), plates=(6,), name="z")
    lam = bg.Gamma(1.0, 1.0, plates=(2,), name="lam")
    y = bg.Mixture(z, bg.Poisson, lam, name="y").observe(np.arange(6.0))
    with pytest.raises(ValueError, match="conjugate"):
        bg.Model(y).fit("conjugate")


def test_vmp_on_a_non_conjugate_factor_names_it_and_suggests_ncvmp():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 2))
    w = bg.MultivariateNormal(np.zeros(2), np.eye(2), name="w")
    try:
        y = bg.Bernoulli(logits=bg.Dot(X, w), name="clicks")
    except ImportError:  # the non-conjugate factors are an optional module
        pytest.skip("non-conjugate factors not available")
    y.observe(rng.integers(0, 2, 8))
    model = bg.Model(y)
    for method in ("vmp", "conjugate"):
        refused(lambda: model.fit(method), "clicks", ValueError, match="ncvmp")


@pytest.mark.parametrize("method", ["gibbs", "VMP", "", None, 3])
def test_unknown_method(method):
    y = bg.Poisson(rate(), plates=(2,), name="y").observe([1.0, 2.0])
    with pytest.raises((ValueError, TypeError)) as info:
        bg.Model(y).fit(method)
    assert "vmp" in str(info.value)  # lists the known methods


def test_unknown_fit_option_and_bad_max_iter():
    y = bg.Poisson(rate(), plates=(2,), name="y").observe([1.0, 2.0])
    model = bg.Model(y)
    with pytest.raises(TypeError, match="batch_sise"):
        model.fit("vmp", batch_sise=3)
    with pytest.raises(ValueError, match="max_iter"):
        model.fit("vmp", max_iter=0)


# --------------------------------------------------------------------------
# the Model itself
# --------------------------------------------------------------------------
def test_duplicate_node_names():
    a = bg.Gamma(1.0, 1.0, name="same")
    b = bg.Gamma(1.0, 1.0, name="same")
    y = bg.Poisson(a, plates=(2,), name="y").observe([1.0, 2.0])
    z = bg.Poisson(b, plates=(2,), name="z").observe([1.0, 2.0])
    refused(lambda: bg.Model(y, z), "same", ValueError, match="name")


def test_duplicate_name_between_data_and_parameter():
    a = bg.Gamma(1.0, 1.0, name="x")
    y = bg.Poisson(a, plates=(2,), name="x").observe([1.0, 2.0])
    refused(lambda: bg.Model(y), "x", ValueError)


def test_model_without_observed_nodes():
    y = bg.Poisson(rate(), plates=(2,), name="y")
    with pytest.raises(ValueError, match="observe"):
        bg.Model(y)


def test_model_without_nodes_or_with_non_nodes():
    with pytest.raises(ValueError):
        bg.Model()
    with pytest.raises(TypeError):
        bg.Model(np.ones(3))


def test_bad_schedule():
    a = bg.Gamma(1.0, 1.0, name="a")
    y = bg.Poisson(a, plates=(2,), name="y").observe([1.0, 2.0])
    refused(lambda: bg.Model(y, schedule=["y"]), "y", ValueError)
    with pytest.raises(KeyError, match="nope"):
        bg.Model(y, schedule=["nope"])


def test_posterior_before_fit_and_of_data():
    a = bg.Gamma(1.0, 1.0, name="a")
    y = bg.Poisson(a, plates=(2,), name="y").observe([1.0, 2.0])
    model = bg.Model(y)
    refused(lambda: a.posterior, "a", AttributeError, match="fit")
    model.fit("conjugate")
    refused(lambda: y.posterior, "y", AttributeError, match="observed")


# --------------------------------------------------------------------------
# a fit never returns NaN silently
# --------------------------------------------------------------------------
def test_overflowing_counts_raise_with_node_and_iteration():
    """Sum of two counts of 1e308 is inf: the Gamma update is not finite."""
    lam = bg.Gamma(2.0, 1.0, name="lam")
    y = bg.Poisson(lam, plates=(2,), name="y").observe([1e308, 1e308])
    err = refused(lambda: bg.Model(y).fit("vmp"), "lam", FloatingPointError, match="iteration 1")
    assert "non-finite" in str(err)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_overflowing_gaussian_data_raise():
    tau = bg.Gamma(2.0, 1.0, name="tau")
    y = bg.Normal(0.0, tau, plates=(2,), name="y").observe([1e200, 1.0])
    refused(lambda: bg.Model(y).fit("vmp"), "tau", FloatingPointError)
    mu = bg.Normal(0.0, 1.0, name="mu")
    y2 = bg.Normal(mu, 1e300, plates=(2,), name="y2").observe([1e10, 1.0])
    refused(lambda: bg.Model(y2).fit("conjugate"), "mu", FloatingPointError)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_blr_step_raises_on_injected_nonfinite_message(bad):
    lam = bg.Gamma(2.0, 1.0, name="lam")
    y = bg.Poisson(lam, plates=(3,), name="y").observe([1.0, 2.0, 3.0])
    model = bg.Model(y)
    model.fit("conjugate")
    before = tuple(np.copy(a) for a in lam.nat)
    orig = y.factor.message

    def poisoned(i, x, u, w, target):
        a, b = orig(i, x, u, w, target)
        return a, b + bad

    y.factor.message = poisoned
    refused(lambda: blr_step(model, lam, iteration=7), "lam", FloatingPointError,
            match="iteration 7")
    for a, b in zip(lam.nat, before):  # the node keeps its last finite state
        np.testing.assert_array_equal(a, b)
    refused(lambda: model.fit("vmp"), "lam", FloatingPointError, match="iteration 1")


def test_nonfinite_elbo_term_raises():
    lam = bg.Gamma(2.0, 1.0, name="lam")
    y = bg.Poisson(lam, plates=(3,), name="y").observe([1.0, 2.0, 3.0])
    model = bg.Model(y)
    y.factor.expected_log_partition = lambda u: np.nan
    refused(lambda: model.fit("conjugate"), "y", FloatingPointError)


# --------------------------------------------------------------------------
# a mixture whose z lines up with the parameters' column axis (N == D)
# --------------------------------------------------------------------------
def test_mixture_with_z_on_the_column_axis_is_refused_when_data_add_rows():
    N = D = 4
    z = bg.Categorical(bg.Dirichlet(np.ones(2)), plates=(N,), name="z")
    th = bg.NormalGamma(0.0, 1.0, 1.0, 1.0, plates=(D, 2), name="th")
    x = bg.Mixture(z, bg.Normal, th, name="cells")
    data = np.random.default_rng(0).normal(size=(N, D))
    refused(lambda: x.observe(data), "cells", ValueError, match=r"z plates \(4, 1\)")
    # explicit plates say one assignment per column is meant: accepted
    y = bg.Mixture(z, bg.Normal, th, name="cols", plates=(N, D)).observe(data)
    assert y.plates == (N, D)
    # the intended layout
    z1 = bg.Categorical(bg.Dirichlet(np.ones(2)), plates=(N, 1), name="z1")
    assert bg.Mixture(z1, bg.Normal, th, name="rows").observe(data).plates == (N, D)


def test_mixture_z_and_columns_that_do_not_broadcast_suggest_the_row_layout():
    z = bg.Categorical(bg.Dirichlet(np.ones(2)), plates=(5,), name="z")
    th = bg.NormalGamma(0.0, 1.0, 1.0, 1.0, plates=(4, 2), name="th")
    refused(lambda: bg.Mixture(z, bg.Normal, th, name="cells"), "cells", ValueError,
            match=r"z plates \(5, 1\)")
