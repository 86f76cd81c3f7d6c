"""The zoo's Gaussian mixture fitted by EM reports point estimates as such.

Under fit("em") the weights and the component parameters are point masses (docs/math.md
§5): the table has no posterior sd, the MAP mean is the `estimate`, and the spread `sd`
is the one of the MAP precision, checked here against the mode formulas of docs/math.md §5
applied to the node's own natural parameters (Normal-Wishart: Lambda = (nu - D) W;
Normal-Gamma: tau = (a - 1/2)/b; Dirichlet: (alpha_k - 1)/(alpha_0 - K)).
"""
import io as _io

import numpy as np
import pytest
from scipy import stats

pd = pytest.importorskip("pandas")

from blrgraph import examples  # noqa: E402
from blrgraph.cli import main  # noqa: E402
from blrgraph.zoo import gmm  # noqa: E402


@pytest.fixture(scope="module")
def blobs(tmp_path_factory):
    return pd.read_csv(examples.write("blobs", tmp_path_factory.mktemp("d") / "blobs.csv"))


def test_full_covariance_em_table(blobs):
    model = gmm.build(blobs, k=3)
    fit = model.fit("em", seed=0, **model.meta["fit_options"])
    table = gmm.summarize(fit)
    assert list(table.columns) == ["component", "weight", "n", "variable", "estimate", "sd"]

    p = model["theta"].posterior.params            # the node's (m, beta, W, nu) after the M-step
    D = 2
    lam = (p["dof"] - D)[:, None, None] * p["scale"]  # joint NW mode, docs/math.md §2.7 / §5
    sd = np.sqrt(np.diagonal(np.linalg.inv(lam), axis1=1, axis2=2))
    np.testing.assert_allclose(table["sd"].to_numpy(), sd.ravel(), rtol=1e-10)
    np.testing.assert_allclose(table["estimate"].to_numpy(), p["mean"].ravel(), rtol=1e-10)

    alpha = model["weights"].posterior.params["alpha"]
    w = (alpha - 1) / (alpha.sum() - len(alpha))   # Dirichlet mode (every alpha_k > 1 here)
    np.testing.assert_allclose(table["weight"].to_numpy()[::2], w, rtol=1e-10)

    # the predictive of a point-mass component is the Gaussian of the estimates
    X = model.meta["X"][:5]
    logp = np.log(w) + np.column_stack([
        stats.multivariate_normal(p["mean"][k], np.linalg.inv(lam[k])).logpdf(X) for k in range(3)])
    expect = np.exp(logp - logp.max(axis=1, keepdims=True))
    expect /= expect.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(gmm.predict_proba(fit, X), expect, rtol=1e-8, atol=1e-12)


def test_diagonal_em_table(blobs):
    model = gmm.build(blobs, k=3, covariance="diag")
    fit = model.fit("em", seed=1, **model.meta["fit_options"])
    table = gmm.summarize(fit)
    assert "mean_sd" not in table.columns
    p = model["theta"].posterior.params            # plates (D, K)
    tau = (p["shape"] - 0.5) / p["rate"]           # joint Normal-Gamma mode
    np.testing.assert_allclose(table["sd"].to_numpy(), (1 / np.sqrt(tau)).T.ravel(), rtol=1e-10)
    np.testing.assert_allclose(table["estimate"].to_numpy(), p["mean"].T.ravel(), rtol=1e-10)


def test_vmp_table_keeps_posterior_columns(blobs):
    model = gmm.build(blobs, k=3)
    table = gmm.summarize(model.fit("vmp", seed=0, **model.meta["fit_options"]))
    assert list(table.columns) == ["component", "weight", "n", "variable", "mean", "mean_sd", "sd"]
    assert (table["mean_sd"] > 0).all()


def test_cli_em_prints_estimates(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    examples.write("blobs")
    out, err = _io.StringIO(), _io.StringIO()
    assert main(["fit", "gmm", "blobs.csv", "--k", "3", "--method", "em", "--no-plots"],
                stdout=out, stderr=err) == 0, err.getvalue()
    header = next(line for line in out.getvalue().splitlines() if "component" in line).split()
    assert header == ["component", "weight", "n", "variable", "estimate", "sd"]


def test_other_mixtures_print_estimates(tmp_path):
    from blrgraph.zoo import mixed_mixture, poisson_mixture
    counts = examples.write("counts", tmp_path / "counts.csv")
    model = poisson_mixture.build(counts, k=2)
    table = poisson_mixture.summarize(model.fit("em", seed=0, **model.meta["fit_options"]))
    assert "rate_sd" not in table.columns
    p = model["rate"].posterior.params             # Gamma mode (a - 1)/b, plates (D, K)
    np.testing.assert_allclose(table["rate"].to_numpy(), ((p["shape"] - 1) / p["rate"]).T.ravel(),
                               rtol=1e-10)

    customers = examples.write("customers", tmp_path / "customers.csv")
    model = mixed_mixture.build(customers, k=2)
    table = mixed_mixture.summarize(model.fit("em", seed=0, **model.meta["fit_options"]))
    assert "mean_sd" not in table.columns and "estimate" in table.columns
    p = model["theta"].posterior.params            # plates (Dn, K)
    tau = (p["shape"] - 0.5) / p["rate"]
    numeric = table[table["type"] == "numeric"]
    np.testing.assert_allclose(numeric["sd"].to_numpy(), (1 / np.sqrt(tau)).T.ravel(), rtol=1e-10)
