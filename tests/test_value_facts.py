"""Families declare their value facts (issue 14; docs/dev/architecture.md "Value facts").

* Binomial / Multinomial mixtures with a different number of trials per row are accepted
  (the support check compared arrays of different shapes) and equal, exactly, the
  Bernoulli / Categorical mixtures of the individual trials (the ELBOs differ by the
  constant sum log C(n, x)).
* A family that does not declare its support fails loudly at observe.
* graph/ holds no table of family names for value facts.
"""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest
from scipy.special import gammaln

import blrgraph as bg
from blrgraph.families import base as fbase
from blrgraph.families.poisson import Poisson as PoissonFamily

K = 2
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _mixture(data, comp, zplates, mask=None, seed=0, iters=12):
    """Fit from the same responsibilities (one Dirichlet(1) draw per row) for both forms."""
    start = np.random.default_rng(seed).dirichlet(np.ones(K), size=zplates[0])
    w = bg.Dirichlet(np.ones(K), name="w")
    z = bg.Categorical(w, plates=zplates, name="z")
    y = bg.Mixture(z, *comp(), name="y").observe(data, mask=mask)
    m = bg.Model(y)
    return m.fit("vmp", init=start.reshape(tuple(zplates) + (K,)), max_iter=iters, tol=0), m


def test_binomial_mixture_with_trials_per_row_equals_its_bernoulli_trials():
    r = np.random.default_rng(0)
    N = 40
    n = r.integers(1, 12, N)
    x = r.binomial(n, np.where(np.arange(N) < 20, 0.15, 0.8)).astype(float)
    f_bin, m_bin = _mixture(x, lambda: (bg.Binomial, n[:, None], bg.Beta(1.0, 1.0, plates=(K,), name="p")),
                            (N,))
    trials = np.arange(n.max())[None, :]
    bern = (trials < x[:, None]).astype(float)           # x successes, then failures
    f_ber, m_ber = _mixture(bern, lambda: (bg.Bernoulli, bg.Beta(1.0, 1.0, plates=(K,), name="p")),
                            (N, 1), mask=trials < n[:, None])
    log_choose = gammaln(n + 1) - gammaln(x + 1) - gammaln(n - x + 1)
    np.testing.assert_allclose(f_bin.elbo_trace, f_ber.elbo_trace + log_choose.sum(), rtol=1e-10)
    for name in ("w", "p"):
        for a, b in zip(m_bin[name].posterior.natural, m_ber[name].posterior.natural):
            np.testing.assert_allclose(a, b, rtol=1e-10)


def test_multinomial_mixture_with_trials_per_row_equals_its_categorical_draws():
    r = np.random.default_rng(1)
    N, C = 30, 3
    n = r.integers(1, 9, N)
    probs = np.where(np.arange(N)[:, None] < 15, [0.7, 0.2, 0.1], [0.1, 0.2, 0.7])
    counts = np.array([r.multinomial(k, p) for k, p in zip(n, probs)], dtype=float)
    f_mul, m_mul = _mixture(counts, lambda: (bg.Multinomial, n[:, None],
                                             bg.Dirichlet(np.ones(C), plates=(K,), name="phi")), (N,))
    labels = np.zeros((N, n.max()))
    for i in range(N):
        labels[i, : n[i]] = np.repeat(np.arange(C), counts[i].astype(int))
    f_cat, m_cat = _mixture(labels, lambda: (bg.Categorical, bg.Dirichlet(np.ones(C), plates=(K,), name="phi")),
                            (N, 1), mask=np.arange(n.max())[None, :] < n[:, None])
    log_coef = gammaln(n + 1) - gammaln(counts + 1).sum(axis=1)
    np.testing.assert_allclose(f_mul.elbo_trace, f_cat.elbo_trace + log_coef.sum(), rtol=1e-10)
    for name in ("w", "phi"):
        for a, b in zip(m_mul[name].posterior.natural, m_cat[name].posterior.natural):
            np.testing.assert_allclose(a, b, rtol=1e-10)


def test_counts_above_the_rows_own_n_are_still_refused():
    n = np.array([3, 10])
    z = bg.Categorical(bg.Dirichlet(np.ones(K)), plates=(2,), name="z")
    y = bg.Mixture(z, bg.Binomial, n[:, None], bg.Beta(1.0, 1.0, plates=(K,)), name="y")
    with pytest.raises(ValueError, match=r"integer counts between 0 and n; entry \(0,\) is .*4"):
        y.observe([4.0, 9.0])
    y.observe([np.nan, 9.0], mask=np.array([False, True]))   # a masked entry is not checked
    # per component n (shape (K,)): a value must be possible under every component
    z2 = bg.Categorical(bg.Dirichlet(np.ones(K)), plates=(2,), name="z2")
    y2 = bg.Mixture(z2, bg.Binomial, np.array([5, 8]), bg.Beta(1.0, 1.0, plates=(K,)), name="y2")
    with pytest.raises(ValueError, match=r"entry \(1,\)"):
        y2.observe([5.0, 7.0])


def test_bad_entry_is_named_by_its_position_in_the_data():
    """With a mask, the entry named is the data's own index (not the index among the
    observed entries)."""
    x = bg.Poisson(3.0, plates=(4,), name="x")
    with pytest.raises(ValueError, match=r"entry \(3,\) is .*2\.5"):
        x.observe([np.nan, 1.0, np.nan, 2.5], mask=np.array([False, True, False, True]))


def test_a_family_without_value_facts_fails_loudly_at_observe():
    class Forgot(fbase.ExponentialFamily):
        name = "Forgot"
        value_ndim = 0

    x = bg.Poisson(3.0, plates=(2,), name="x")
    x.family = Forgot()
    with pytest.raises(NotImplementedError, match="Forgot does not declare"):
        x.observe([1.0, 2.0])
    with pytest.raises(NotImplementedError):
        Forgot().placeholder(())


@pytest.mark.parametrize("family,facts", [
    ("Normal", (False, False, False)), ("MultivariateNormal", (False, False, True)),
    ("Categorical", (True, False, False)), ("Poisson", (False, False, False)),
    ("Wishart", (False, True, False))])
def test_family_flags(family, facts):
    import blrgraph.families as F
    fam = getattr(F, family)
    assert (fam.is_label, fam.symmetric_values, getattr(fam, "cell_masks", False)) == facts
    assert not F.NormalGamma.observable and not F.NormalWishart.observable and fam.observable


def test_placeholders_are_in_the_support():
    import blrgraph.families as F
    cases = {F.Normal(): (), F.Gamma(): (), F.Exponential(): (), F.Poisson(): (), F.Bernoulli(): (),
             F.Binomial(3): (), F.Categorical(): (), F.Beta(): (), F.Dirichlet(): (3,),
             F.Wishart(): (2, 2), F.MultivariateNormal(): (2,)}
    for fam, ev in cases.items():
        v = np.asarray(fam.placeholder(ev), dtype=float)
        assert v.shape == ev
        bad, _ = fam.check_support(v, categories=3)
        assert not np.any(bad), fam.name
    assert not np.any(PoissonFamily().check_support(np.array([0.0, 4.0]))[0])


def test_wishart_data_must_be_symmetric_positive_definite():
    X = np.array([[[2.0, 0.5], [0.5, 1.0]], [[1.0, 0.3], [0.0, 1.0]]])
    node = bg.Wishart(5.0, np.eye(2), plates=(2,), name="Wd")
    with pytest.raises(ValueError, match=r"symmetric matrices; entry \(1,\)"):
        node.observe(X)
    X[1] = [[1.0, 2.0], [2.0, 1.0]]                                  # symmetric, not PD
    with pytest.raises(ValueError, match=r"symmetric positive definite matrices; entry \(1,\)"):
        node.observe(X)


def test_graph_layer_compares_no_family_names_for_value_facts():
    for name in ("data.py", "inputs.py", "node.py"):
        src = (ROOT / "blrgraph" / "graph" / name).read_text()
        assert not re.search(r"__name__\s*(==|!=|in)", src), name
    src = (ROOT / "blrgraph" / "graph" / "data.py").read_text()
    assert "_PLACEHOLDER" not in src
