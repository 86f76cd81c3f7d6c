"""Held-out scores of the zoo (docs/predict.md, "Held-out scores of the zoo"):
``<model>.log_predictive(fit, data)`` per row, document or sequence, against exact
oracles (closed-form evidence ratios, normalisation over every possible row,
scikit-learn's LDA perplexity, hmmlearn's score, a joint Gaussian); the new
predict_table of hmm, pca and local_level; a new row with a missing predictor refused."""
import itertools

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from scipy import integrate, stats
from scipy.special import gammaln, logsumexp

from blrgraph import closed_form
from blrgraph.zoo import (gmm, hmm, latent_class, lda, linreg, local_level, logreg, mixed_mixture,
                          pca, poisson_mixture, poisson_reg)


def _fit(module, data, method=None, **options):
    model = module.build(data, **options)
    model.fit(method or module.DEFAULT_METHOD, seed=0, **model.meta["fit_options"])
    return model


# ---- mixtures: exact under q ---------------------------------------------------------------
def test_gmm_one_component_is_the_conjugate_evidence_ratio():
    """K = 1: q(theta) is the exact Normal-Wishart posterior, so the predictive of a new
    row is p(X, x) / p(X) (closed_form.normal_wishart), for every new row."""
    rng = np.random.default_rng(0)
    X = rng.multivariate_normal([1.0, -2.0, 0.5], [[2, .5, 0], [.5, 1, .3], [0, .3, .5]], 40)
    model = _fit(gmm, X, k=1)
    m0, C = gmm.io.observed_mean_cov(X, np.ones(X.shape, bool))      # gmm's prior
    D = 3
    prior = dict(mean=m0, beta=0.01, dof=D + 2.0, scale=D * np.linalg.inv(C) / (D + 2.0))
    new = rng.normal(size=(4, 3)) * 2
    base = closed_form.normal_wishart(X, **prior).log_evidence
    expect = [closed_form.normal_wishart(np.r_[X, x[None]], **prior).log_evidence - base for x in new]
    np.testing.assert_allclose(gmm.log_predictive(model, new), expect, rtol=1e-11)


def test_gmm_diag_one_component_is_the_conjugate_evidence_ratio():
    rng = np.random.default_rng(1)
    X = rng.normal([0.0, 5.0], [1.0, 3.0], size=(30, 2))
    model = _fit(gmm, X, k=1, covariance="diag")
    new = np.array([[0.3, 4.0], [-2.0, np.nan]])
    expect = np.zeros(2)
    m0, C = gmm.io.observed_mean_cov(X, np.ones(X.shape, bool))      # gmm's prior
    for d in range(2):
        prior = dict(mean=m0[d], beta=0.01, shape=1.0, rate=C[d, d] / 2)   # b0 = a0 C_dd / D
        base = closed_form.normal_gamma(X[:, d], **prior).log_evidence
        for i in range(2):
            if np.isfinite(new[i, d]):
                expect[i] += closed_form.normal_gamma(np.r_[X[:, d], new[i, d]], **prior).log_evidence - base
    np.testing.assert_allclose(gmm.log_predictive(model, new), expect, rtol=1e-11)


def test_latent_class_predictive_sums_to_one_over_every_row_and_marginalises_missing_cells():
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"a": rng.choice(["x", "y"], 60), "b": rng.choice([1, 2, 3], 60),
                       "c": rng.choice(["u", "v"], 60)})
    model = _fit(latent_class, df, k=2)
    rows = pd.DataFrame(list(itertools.product(["x", "y"], [1, 2, 3], ["u", "v"])),
                        columns=["a", "b", "c"])
    lp = latent_class.log_predictive(model, rows)
    assert np.exp(lp).sum() == pytest.approx(1.0, abs=1e-13)
    # a row missing column b: the sum over b's levels of the complete rows
    part = pd.DataFrame({"a": ["y"], "b": [np.nan], "c": ["u"]})
    keep = (rows.a == "y") & (rows.c == "u")
    assert latent_class.log_predictive(model, part)[0] == pytest.approx(logsumexp(lp[keep]), abs=1e-13)
    # posterior class probabilities are the joint over the predictive
    probs = latent_class.predict_table(model, rows)[["p0", "p1"]].to_numpy()
    lj = latent_class._log_joint(model, rows)
    np.testing.assert_allclose(probs, np.exp(lj - lp[:, None]), rtol=1e-12)


def test_poisson_mixture_predictive_sums_to_one():
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"a": np.r_[rng.poisson(2, 30), rng.poisson(8, 30)],
                       "b": np.r_[rng.poisson(4, 30), rng.poisson(1, 30)]})
    model = _fit(poisson_mixture, df, k=2)
    grid = np.array(list(itertools.product(range(80), range(80))), dtype=float)
    total = logsumexp(poisson_mixture.log_predictive(model, pd.DataFrame(grid, columns=["a", "b"])))
    assert total == pytest.approx(0.0, abs=1e-10)


def test_mixed_mixture_numeric_cell_integrates_to_the_categorical_marginal():
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"u": np.r_[rng.normal(0, 1, 40), rng.normal(4, 1, 40)],
                       "c": np.r_[rng.choice(["x", "y"], 40, p=[.9, .1]),
                                  rng.choice(["x", "y"], 40, p=[.1, .9])]})
    model = _fit(mixed_mixture, df, k=2)

    u = np.linspace(-40.0, 45.0, 200_001)                     # the t tails: < 1e-30 beyond
    lp = mixed_mixture.log_predictive(model, pd.DataFrame({"u": u, "c": ["y"] * len(u)}))
    area = np.exp(logsumexp(lp) + np.log(u[1] - u[0]))
    marginal = mixed_mixture.log_predictive(model, pd.DataFrame({"u": [np.nan], "c": ["y"]}))[0]
    assert np.log(area) == pytest.approx(marginal, abs=1e-9)


# ---- regressions ---------------------------------------------------------------------------
def _reg_data(seed=5, n=60):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"x": rng.normal(size=n), "g": rng.choice(["a", "b"], n)})
    df["y"] = 1.5 * df.x + (df.g == "b") + rng.normal(0, 0.5, n)
    df["yb"] = (df.y + rng.normal(0, 1, n) > 0.5).astype(int)
    df["yc"] = rng.poisson(np.exp(0.5 + 0.4 * df.x))
    return df


def test_linreg_log_predictive_is_the_scale_mixture_integral():
    """log E_q(tau)[N(y | x.m, xSx + 1/tau)] against a brute-force trapezoid over
    log tau with 2 million points, for ordinary rows and an outlier."""
    df = _reg_data()
    model = _fit(linreg, df, target="y", columns=["x", "g"])
    new = pd.DataFrame({"x": [0.0, 1.0, -2.0], "g": ["a", "b", "a"], "y": [0.1, 2.4, 30.0]})
    got = linreg.log_predictive(model, new)
    m, v = linreg.io.linear_predictor(model, new)
    p = model["tau"].posterior.params
    a, b = float(p["shape"]), float(p["rate"])
    for i in range(3):
        d = (new.y[i] - m[i]) ** 2

        def f(u):
            var = v[i] + np.exp(-u)
            return (-0.5 * np.log(2 * np.pi * var) - 0.5 * d / var + a * np.log(b) - gammaln(a)
                    + a * u - b * np.exp(u))

        top = max(f(np.log(a / b)), f(-np.log(max(d - v[i], 1e-300))))
        pts = sorted({np.log(a / b), -np.log(max(d - v[i], 1e-300))})
        q = integrate.quad(lambda u: np.exp(f(u) - top), -60.0, 10.0, points=pts, epsabs=0,
                           epsrel=1e-13, limit=500)[0]
        assert got[i] == pytest.approx(np.log(q) + top, abs=1e-12)
    # a missing target scores 0; the same rows as arrays (X without the intercept column)
    new.loc[1, "y"] = np.nan
    assert linreg.log_predictive(model, new)[1] == 0.0


def test_logreg_log_predictive_is_the_log_of_the_predictive_probability():
    df = _reg_data()
    model = _fit(logreg, df, target="yb", columns=["x", "g"])
    new = pd.DataFrame({"x": [0.0, 1.0, -2.0], "g": ["a", "b", "a"]})
    p1 = logreg.predict_proba(model, new)
    one = logreg.log_predictive(model, new.assign(yb=1))
    zero = logreg.log_predictive(model, new.assign(yb=0))
    np.testing.assert_allclose(one, np.log(p1), rtol=1e-13)
    np.testing.assert_allclose(np.exp(one) + np.exp(zero), 1.0, rtol=1e-13)


def test_poisson_reg_log_predictive_is_the_lognormal_poisson_integral():
    df = _reg_data()
    model = _fit(poisson_reg, df, target="yc", columns=["x"])
    X, y = np.array([[0.0], [1.5]]), np.array([2.0, 7.0])
    got = poisson_reg.log_predictive(model, (X, y))
    m, v = poisson_reg.linear_predictor(model, X)
    for i in range(2):
        f = lambda a: stats.poisson.pmf(y[i], np.exp(a)) * stats.norm.pdf(a, m[i], np.sqrt(v[i]))  # noqa: E731
        q = integrate.quad(f, m[i] - 40 * np.sqrt(v[i]), m[i] + 40 * np.sqrt(v[i]), epsabs=0,
                           epsrel=1e-13, limit=200)[0]
        assert got[i] == pytest.approx(np.log(q), abs=1e-10)


@pytest.mark.parametrize("module, target", [(linreg, "y"), (logreg, "yb"), (poisson_reg, "yc")])
def test_a_new_row_with_a_missing_predictor_is_refused_naming_row_and_column(module, target):
    df = _reg_data()
    model = _fit(module, df, target=target, columns=["x", "g"])
    new = pd.DataFrame({"x": [0.0, 1.0, np.nan], "g": ["a", "b", "a"]})
    with pytest.raises(ValueError, match=r"new row 2 .* predictor column 'x'"):
        module.predict_table(model, new)
    new = pd.DataFrame({"x": [0.0, 1.0], "g": ["a", None]})
    with pytest.raises(ValueError, match=r"new row 1 .* predictor column 'g'"):
        module.predict_table(model, new)
    with pytest.raises(ValueError, match=r"new row 0 .* column 'x'"):
        module.predict(model, np.array([[np.nan, 1.0]]))


# ---- LDA: per-document bound and scikit-learn's perplexity -----------------------------------
def test_lda_perplexity_equals_scikit_learns_for_the_same_topics():
    from scipy.special import digamma
    from sklearn.decomposition import LatentDirichletAllocation
    rng = np.random.default_rng(0)
    K, V, D = 3, 30, 40
    phi = rng.dirichlet(np.full(V, 0.3), K)
    theta = rng.dirichlet(np.full(K, 0.5), D)
    X = np.array([rng.multinomial(50, theta[d] @ phi) for d in range(D)], dtype=float)
    train, test = sp.csr_matrix(X[:30]), sp.csr_matrix(X[30:])
    model = _fit(lda, train, k=K)
    lam = model["phi"].posterior.params["alpha"]
    sk = LatentDirichletAllocation(n_components=K, doc_topic_prior=1 / K, topic_word_prior=1 / K,
                                   max_doc_update_iter=100_000, mean_change_tol=1e-13)
    sk.components_ = lam.copy()
    sk.exp_dirichlet_component_ = np.exp(digamma(lam) - digamma(lam.sum(1, keepdims=True)))
    sk.doc_topic_prior_, sk.topic_word_prior_, sk.n_features_in_ = 1 / K, 1 / K, V
    sk.n_batch_iter_ = sk.n_iter_ = 1
    ours = lda.perplexity(model, test, max_iter=100_000, tol=1e-13)
    assert ours == pytest.approx(sk.perplexity(test), rel=1e-8)
    # the perplexity is built from the per-document bounds
    docs = lda.log_predictive(model, test, max_iter=100_000, tol=1e-13)
    topics = sk._approx_bound(test[:0], np.ones((0, K)), False)    # the topics' term alone
    for d in (0, 7):
        doc = test[d:d + 1]
        assert docs[d] == pytest.approx(
            sk._approx_bound(doc, sk._unnormalized_transform(doc), False) - topics, rel=1e-8)


# ---- HMM -------------------------------------------------------------------------------------
def _hmm_table(seed=0, S=3, T=25):
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(S):
        z = 0
        for t in range(T):
            z = z if rng.random() < 0.9 else 1 - z
            rows.append({"id": s, "a": rng.normal(3.0 * z, 1.0), "b": rng.normal(-z, 0.7)})
    return pd.DataFrame(rows)


def test_hmm_em_log_predictive_equals_hmmlearn_score():
    """Point masses (EM): log_predictive is the exact log-likelihood of each sequence,
    which hmmlearn's score computes from the same parameters."""
    from hmmlearn.hmm import GaussianHMM
    df = _hmm_table()
    model = _fit(hmm, df, method="em", k=2, sequence_column="id")
    new = _hmm_table(seed=1, S=2, T=12)
    got = hmm.log_predictive(model, new)
    ref = GaussianHMM(n_components=2, covariance_type="diag")
    ref.startprob_ = model["initial"].posterior.point
    ref.transmat_ = model["transition"].posterior.point
    mu, tau = model["theta"].posterior.point                 # plates (D, K)
    ref.means_, ref.covars_ = mu.T, 1.0 / tau.T
    for s in range(2):
        assert got[s] == pytest.approx(ref.score(new.loc[new.id == s, ["a", "b"]].to_numpy()),
                                       rel=1e-12)


@pytest.mark.parametrize("covariance", ["diag", "full"])
def test_hmm_predict_table_on_the_training_rows_is_the_fitted_q(covariance):
    """The E-step of new sequences with the fitted parameters, run on the training
    sequences, gives back the fit's q(z) (it is the fit's own update at convergence)."""
    df = _hmm_table()
    model = _fit(hmm, df, k=2, sequence_column="id", covariance=covariance)
    got = hmm.predict_table(model, df)
    want = hmm.states(model)
    np.testing.assert_allclose(got[["p0", "p1"]].to_numpy(), want[["p0", "p1"]].to_numpy(),
                               atol=1e-12)
    assert (got.state.to_numpy() == want.state.to_numpy()).all()


def test_hmm_log_predictive_is_the_bound_over_every_path():
    df = _hmm_table()
    model = _fit(hmm, df, k=2, sequence_column="id")
    new = df[df.id == 0].iloc[:5].copy()
    new.iloc[2, new.columns.get_loc("a")] = np.nan
    Xs, Ms, *_ = hmm._new_sequences(model, new)
    from scipy.special import digamma
    p = model["theta"].posterior.params
    e_log = {n: digamma(model[n].posterior.params["alpha"])
             - digamma(model[n].posterior.params["alpha"].sum(-1, keepdims=True))
             for n in ("initial", "transition")}
    total = []
    for path in itertools.product(range(2), repeat=5):
        s = e_log["initial"][path[0]] + sum(e_log["transition"][path[t - 1], path[t]] for t in range(1, 5))
        for t, k in enumerate(path):
            for d in range(2):
                if Ms[0, t, d]:
                    a, b, m, beta = (p[n][d, k] for n in ("shape", "rate", "mean", "beta"))
                    s += 0.5 * (digamma(a) - np.log(b) - np.log(2 * np.pi)) - 0.5 * (
                        a / b * (Xs[0, t, d] - m) ** 2 + 1 / beta)
        total.append(s)
    assert hmm.log_predictive(model, new)[0] == pytest.approx(logsumexp(total), rel=1e-13)


# ---- PCA and the local level model -----------------------------------------------------------
def test_pca_predict_table_scores_the_training_rows_as_the_fit():
    rng = np.random.default_rng(6)
    W = rng.normal(size=(5, 2))
    Y = rng.normal(size=(200, 2)) @ W.T + rng.normal(0, 0.3, (200, 5)) + np.arange(5)
    df = pd.DataFrame(Y, columns=list("abcde"))
    model = _fit(pca, df, k=3)
    table = pca.predict_table(model, df)
    np.testing.assert_allclose(table[["pc0", "pc1", "pc2"]].to_numpy(), pca.scores(model), atol=1e-10)
    new = df.iloc[:3].copy()
    new.iloc[0, 1] = np.nan
    t = pca.predict_table(model, new)
    assert np.isfinite(t.loc[0, "b_imputed"]) and np.isnan(t.loc[1, "b_imputed"])
    assert abs(t.loc[0, "b_imputed"] - df.b[0]) < 3 * t.loc[0, "b_sd"]
    # log_predictive: near the plug-in Gaussian (q is narrow at N = 200); a missing cell
    # marginalised out
    lp = pca.log_predictive(model, new)
    Wm = pca.loadings(model)
    mu = model["mu"].posterior.mean + model.meta["center"]
    C = Wm @ Wm.T + np.eye(5) / model["tau"].posterior.mean
    o = [0, 2, 3, 4]
    plug = [stats.multivariate_normal(mu[o], C[np.ix_(o, o)]).logpdf(new.iloc[0, o]),
            stats.multivariate_normal(mu, C).logpdf(new.iloc[1]),
            stats.multivariate_normal(mu, C).logpdf(new.iloc[2])]
    np.testing.assert_allclose(lp, plug, atol=0.02)


def test_local_level_continuation_is_the_joint_gaussian_predictive():
    rng = np.random.default_rng(7)
    y = np.cumsum(rng.normal(0, 0.3, 90)) + rng.normal(0, 1, 90)
    model = local_level.build(pd.DataFrame({"y": y[:80]}), trend=True)
    model.fit("vmp", max_iter=200)                # converged or not: the oracle reads the same q
    new = y[80:86].copy()
    new[2] = np.nan
    lp = local_level.log_predictive(model, new)
    assert lp[2] == 0.0
    # the joint predictive of the continuation: x_{T+j} = A^j x_T + noise
    post = model["x"].posterior
    m, S = post.mean[-1], post.cov[-1]
    A = np.array([[1.0, 1.0], [0.0, 1.0]])
    qp, rp = model["q"].posterior.params, model["r"].posterior.params
    Q = np.diag(qp["rate"] / (qp["shape"] - 1))
    R = float(rp["rate"] / (rp["shape"] - 1))
    h = len(new)
    mean = np.array([(np.linalg.matrix_power(A, j + 1) @ m)[0] for j in range(h)])
    F = [np.linalg.matrix_power(A, j + 1) for j in range(h)]
    cov = np.array([[(F[i] @ S @ F[j].T)[0, 0] + sum(
        (np.linalg.matrix_power(A, i - l) @ Q @ np.linalg.matrix_power(A, j - l).T)[0, 0]
        for l in range(min(i, j) + 1)) for j in range(h)] for i in range(h)]) + R * np.eye(h)
    o = np.isfinite(new)
    joint = stats.multivariate_normal(mean[o], cov[np.ix_(o, o)]).logpdf(new[o])
    assert lp.sum() == pytest.approx(joint, rel=1e-12)
    # with no new values, predict_table is the forecast
    table = local_level.predict_table(model, np.full(4, np.nan))
    fc = local_level.forecast(model, 4)
    np.testing.assert_allclose(table[["mean", "sd"]].to_numpy(), fc[["mean", "sd"]].to_numpy(),
                               rtol=1e-12)
