"""The ``blrgraph`` command line, end to end: in-process through ``cli.main``
and once as a subprocess (``python -m blrgraph.cli``), on CSV files with
missing cells and a categorical column; bad input exits non-zero with a clear
message on stderr."""
from __future__ import annotations

import io as _io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

from blrgraph import cli  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def run(*argv):
    out, err = _io.StringIO(), _io.StringIO()
    code = cli.main([str(a) for a in argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def table_csv(tmp_path_factory):
    """Two groups in two numeric columns, a categorical colour that follows the
    group, a few empty (missing) cells in each column."""
    rng = np.random.default_rng(0)
    n = 120
    g = rng.choice(2, size=n)
    df = pd.DataFrame({"height": np.round(rng.normal([150.0, 180.0], 5.0, size=(n, 2))[np.arange(n), g], 1),
                       "weight": np.round(rng.normal([50.0, 80.0], 4.0, size=(n, 2))[np.arange(n), g], 1),
                       "color": np.where(rng.random(n) < 0.9, np.array(["red", "blue"])[g],
                                         np.array(["blue", "red"])[g])})
    df = df.astype(object)
    df.iloc[[3, 10, 50], 0] = None
    df.iloc[[7, 60], 1] = None
    df.iloc[[5, 90, 100], 2] = None
    path = tmp_path_factory.mktemp("data") / "people.csv"
    df.to_csv(path, index=False)
    assert ",," in path.read_text() or ",\n" in path.read_text()      # really has empty cells
    return path


def test_fit_mixed_table_in_process(table_csv, tmp_path):
    out = tmp_path / "out"
    code, stdout, stderr = run("fit", "mixed_mixture", table_csv, "--k", "2", "--out", out, "--seed", "0")
    assert code == 0, stderr
    for name in ("summary.csv", "summary.json", "elbo.png", "assignments.csv", "clusters.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns) == ["component", "weight", "n", "variable", "type", "category",
                                     "mean", "mean_sd", "sd"]
    assert set(summary.variable) == {"height", "weight", "color"}
    assert set(summary.category.dropna()) == {"red", "blue"}          # labels decoded back
    means = summary[summary.variable == "height"].sort_values("mean")["mean"].to_numpy()
    assert abs(means[0] - 150) < 3 and abs(means[1] - 180) < 3
    record = json.loads((out / "summary.json").read_text())
    assert record["model"] == "mixed_mixture" and record["method"] == "vmp"
    assert math.isfinite(record["elbo"]) and record["elbo"] == pytest.approx(record["elbo_trace"][-1])
    assert record["columns"] == list(summary.columns) and len(record["summary"]) == len(summary)
    assign = pd.read_csv(out / "assignments.csv")
    assert len(assign) == 120 and list(assign.columns) == ["row", "component", "p0", "p1"]
    assert "ELBO:" in stdout and "converged" in stdout and "height" in stdout


def test_fit_gmm_selected_columns_with_missing_cells(table_csv, tmp_path):
    out = tmp_path / "gmm"
    code, stdout, stderr = run("fit", "gmm", table_csv, "--columns", "height,weight", "--k", "2",
                               "--out", out)
    assert code == 0, stderr
    assert "missing cells" not in stderr      # partly observed rows stay in the fit (no warning)
    assert (out / "clusters.png").is_file() and (out / "elbo.png").is_file()
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns) == ["component", "weight", "n", "variable", "mean", "mean_sd", "sd"]
    assert summary.groupby("component")["n"].first().sum() == pytest.approx(120)
    code, _, stderr = run("fit", "gmm", table_csv, "--columns", "height", "weight", "--k", "2",
                          "--option", "covariance='diag'", "--out", tmp_path / "diag", "--no-plots")
    assert code == 0, stderr
    assert not (tmp_path / "diag" / "clusters.png").exists()
    assert (tmp_path / "diag" / "summary.csv").is_file()


def test_fit_as_a_subprocess(table_csv, tmp_path):
    out = tmp_path / "sub"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "blrgraph.cli", "fit", "latent_class", str(table_csv),
                           "--columns", "color", "--k", "1", "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ELBO:" in proc.stdout and "red" in proc.stdout
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns) == ["class", "weight", "variable", "category", "prob", "prob_sd"]
    assert (out / "elbo.png").is_file()
    # one class over one column: the Dirichlet posterior of the colour frequencies
    counts = pd.read_csv(table_csv)["color"].value_counts()
    red = summary.set_index("category").loc["red", "prob"]
    assert red == pytest.approx((counts["red"] + 1) / (counts.sum() + 2))


def test_unknown_column_exits_1_naming_it(table_csv, tmp_path):
    code, stdout, stderr = run("fit", "gmm", table_csv, "--columns", "height", "shoe_size",
                               "--out", tmp_path)
    assert code == 1
    assert "error: unknown column(s) 'shoe_size'" in stderr
    assert "available columns: height, weight, color" in stderr


def test_text_in_a_numeric_column_exits_1_naming_cell_and_fix(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("x,y\n1.0,2.0\n2.0,abc\n3.0,\n4.0,5.5\n")
    code, _, stderr = run("fit", "gmm", path, "--k", "2", "--out", tmp_path / "o")
    assert code == 1
    assert "column 'y'" in stderr and "holds text" in stderr and "line 3 = 'abc'" in stderr
    assert "leave them empty" in stderr
    assert not (tmp_path / "o" / "summary.csv").exists()


def test_categorical_column_in_a_numeric_model_exits_1_with_the_fix(table_csv, tmp_path):
    code, _, stderr = run("fit", "gmm", table_csv, "--out", tmp_path)
    assert code == 1
    assert "column 'color'" in stderr and "--columns" in stderr and "mixed_mixture" in stderr


def test_bad_model_and_options(table_csv, tmp_path):
    code, _, stderr = run("fit", "no_such_model", table_csv)
    assert code == 1 and "unknown model 'no_such_model'" in stderr and "gmm" in stderr
    code, _, stderr = run("fit", "linreg", table_csv, "--k", "3")
    assert code == 1 and "no option 'k'" in stderr
    code, _, stderr = run("fit", "gmm", tmp_path / "missing.csv")
    assert code == 1 and "not found" in stderr
    code, _, _ = run("fit")                                              # usage error
    assert code == 2


def test_model_file_given_by_path(tmp_path):
    """A user's own model file: a conjugate Beta-Bernoulli; its ELBO is the log evidence."""
    model_file = tmp_path / "coin.py"
    model_file.write_text(
        "import numpy as np\n"
        "import blrgraph as bg\n"
        "from blrgraph import io\n"
        "DEFAULT_METHOD = 'conjugate'\n"
        "def build(data, columns=None):\n"
        "    t = io.encode_table(data, columns)\n"
        "    x = t.numeric_array()[:, 0]\n"
        "    p = bg.Beta(1.0, 1.0, name='p')\n"
        "    y = bg.Bernoulli(p, plates=(len(x),), name='y').observe(np.nan_to_num(x), mask=~np.isnan(x))\n"
        "    return bg.Model(y)\n"
        "def summarize(fit):\n"
        "    pd = io.require_pandas()\n"
        "    post = fit.model['p'].posterior\n"
        "    return pd.DataFrame({'mean': [float(post.mean)], 'sd': [float(np.sqrt(post.var))]})\n")
    data = tmp_path / "flips.csv"
    data.write_text("flip\n1\n0\n1\n1\n\n1\n")
    code, stdout, stderr = run("fit", model_file, data, "--out", tmp_path / "o", "--no-plots")
    assert code == 0, stderr
    record = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert record["method"] == "conjugate"
    # Beta(1,1) with 4 ones and 1 zero observed (one cell missing): log B(5, 2) - log B(1, 1)
    assert record["elbo"] == pytest.approx(math.log(math.gamma(5) * math.gamma(2) / math.gamma(7)))
    assert record["summary"][0]["mean"] == pytest.approx(5 / 7)
    bad = tmp_path / "empty_model.py"
    bad.write_text("x = 1\n")
    code, _, stderr = run("fit", bad, data)
    assert code == 1 and "must define build" in stderr


def test_lda_and_linreg_from_csv(tmp_path):
    docs = tmp_path / "docs.csv"
    rows = [("the cat and the dog and the cat", 1), ("a dog, a cat; a mouse", 2),
            ("stocks and bonds and markets", 3), ("bonds, markets, stocks!", 4), ("", 5)]
    pd.DataFrame(rows, columns=["text", "id"]).to_csv(docs, index=False)
    code, stdout, stderr = run("fit", "lda", docs, "--columns", "text", "--k", "2", "--out", tmp_path / "l")
    assert code == 0, stderr
    assert (tmp_path / "l" / "doc_topics.csv").is_file()
    assert list(pd.read_csv(tmp_path / "l" / "summary.csv").columns) == ["topic", "share", "top_words"]

    rng = np.random.default_rng(1)
    df = pd.DataFrame({"x": rng.normal(size=60), "g": rng.choice(["a", "b"], 60)})
    df["y"] = 1.0 + 2.0 * df.x + (df.g == "b") + rng.normal(scale=0.1, size=60)
    df.loc[0, "y"] = np.nan
    path = tmp_path / "reg.csv"
    df.to_csv(path, index=False)
    code, stdout, stderr = run("fit", "linreg", path, "--target", "y", "--out", tmp_path / "r")
    assert code == 0, stderr
    s = pd.read_csv(tmp_path / "r" / "summary.csv").set_index("term")
    assert abs(s.loc["x", "mean"] - 2.0) < 0.1 and abs(s.loc["g[b]", "mean"] - 1.0) < 0.1
    pred = pd.read_csv(tmp_path / "r" / "predictions.csv")
    assert np.isnan(pred.loc[0, "y"]) and np.isfinite(pred.loc[0, "predicted_mean"])


def test_fit_with_method_svi(tmp_path):
    """--method svi takes the model's SVI options (gmm: minibatches of rows; lda:
    of documents), prints the minibatch ELBO estimate and the ELBO on all the data,
    and --batch-size / --epochs / --fit-option override them."""
    rng = np.random.default_rng(2)
    n = 2000
    g = rng.choice(2, size=n)
    df = pd.DataFrame({"height": rng.normal([150.0, 180.0], 5.0, size=(n, 2))[np.arange(n), g],
                       "weight": rng.normal([50.0, 80.0], 4.0, size=(n, 2))[np.arange(n), g]})
    df.loc[[3, 10], "weight"] = np.nan
    path = tmp_path / "people.csv"
    df.to_csv(path, index=False)
    out = tmp_path / "g"
    code, stdout, stderr = run("fit", "gmm", path, "--k", "2", "--method", "svi", "--restarts", "2",
                               "--out", out, "--no-plots")
    assert code == 0, stderr
    assert "(method 'svi', seed" in stdout and "restart seed 1" in stdout
    assert "ELBO estimate:" in stdout and "20 steps on minibatches of 1000 along 'x'" in stdout
    assert "ELBO on all the data:" in stdout
    record = json.loads((out / "summary.json").read_text())
    assert record["method"] == "svi" and record["n_iter"] == 20 and record["elbo_estimate"] is True
    assert record["start"] == "kmeans++"   # the zoo's SVI start, used by both restarts
    assert math.isfinite(record["elbo_all_data"]) and record["elbo"] == record["elbo_trace"][-1]
    summary = pd.read_csv(out / "summary.csv")
    means = np.sort(summary[summary.variable == "height"]["mean"].to_numpy())
    assert abs(means[0] - 150) < 1 and abs(means[1] - 180) < 1
    assert len(pd.read_csv(out / "assignments.csv")) == n
    # the command line's settings over the model's
    code, stdout, stderr = run("fit", "gmm", path, "--k", "2", "--method", "svi", "--batch-size", "250",
                               "--epochs", "2", "--fit-option", "kappa=0.9", "--out", tmp_path / "g2",
                               "--no-plots")
    assert code == 0, stderr
    assert "16 steps on minibatches of 250" in stdout
    code, stdout, stderr = run("fit", "gmm", path, "--k", "2", "--method", "svi", "--max-iter", "7",
                               "--out", tmp_path / "g3", "--no-plots")
    assert code == 0 and "7 steps" in stdout, stderr
    code, _, stderr = run("fit", "gmm", path, "--k", "2", "--batch-size", "100", "--out", tmp_path / "x")
    assert code == 1 and "--batch-size is an option of --method sgd or adam or ogn or vogn or " \
        "ivon or svi, not of 'vmp'" in stderr
    code, _, stderr = run("fit", "gmm", path, "--k", "2", "--method", "svi", "--fit-option", "kappa=0.3",
                          "--out", tmp_path / "x")
    assert code == 1 and "kappa must be a finite number > 0.5 and <= 1.0" in stderr

    docs = tmp_path / "docs.csv"
    topics = [["apple", "banana", "cherry", "grape"], ["goal", "match", "team", "score"]]
    texts = [" ".join(rng.choice(topics[d % 2], size=20)) for d in range(300)]
    pd.DataFrame({"text": texts}).to_csv(docs, index=False)
    code, stdout, stderr = run("fit", "lda", docs, "--k", "2", "--method", "svi", "--out",
                               tmp_path / "l", "--no-plots")
    assert code == 0, stderr
    assert "minibatches of 256 along 'theta'" in stdout              # batches of documents
    top = pd.read_csv(tmp_path / "l" / "summary.csv")["top_words"]
    assert sorted(sorted(t.split()[:4]) for t in top) == sorted(sorted(t) for t in topics)
    assert len(pd.read_csv(tmp_path / "l" / "doc_topics.csv")) == 300


def test_demo(tmp_path):
    code, stdout, stderr = run("demo", "--out", tmp_path / "demo")
    assert code == 0, stderr
    assert "iris" in stdout and "ELBO:" in stdout and "species" in stdout
    for name in ("summary.csv", "summary.json", "elbo.png", "clusters.png", "assignments.csv"):
        assert (tmp_path / "demo" / name).is_file(), name
    summary = pd.read_csv(tmp_path / "demo" / "summary.csv")
    assert set(summary.variable) == set(cli.IRIS_COLUMNS) and summary.component.nunique() == 3


def test_models_lists_the_zoo():
    code, stdout, _ = run("models")
    assert code == 0
    for name in ("gmm", "lda", "linreg", "logreg", "poisson_reg", "latent_class", "mixed_mixture",
                 "poisson_mixture", "pca"):
        assert name in stdout


def test_missing_zoo_gives_a_clear_error(table_csv, monkeypatch, tmp_path):
    """Installed without the source checkout, a zoo name cannot be resolved: the
    message says where the zoo lives and that a model file path works too."""
    monkeypatch.setattr(cli, "zoo_dir", lambda: tmp_path / "nowhere" / "models")
    code, _, stderr = run("fit", "gmm", table_csv)
    assert code == 1
    assert "cannot find the model zoo" in stderr and "pip install -e ." in stderr
    assert "path/to/gmm.py" in stderr


def test_fit_pca_writes_loadings_and_scores(tmp_path):
    """`blrgraph fit pca table.csv --k 4`: 6 columns from a 2-dimensional subspace;
    two components active in summary.csv, loadings.csv (column x component) and
    scores.csv (row x component)."""
    rng = np.random.default_rng(5)
    Y = rng.normal(size=(150, 2)) @ rng.normal(size=(2, 6)) + 0.1 * rng.normal(size=(150, 6))
    Y[rng.random(Y.shape) < 0.03] = np.nan
    path = tmp_path / "t.csv"
    pd.DataFrame(Y, columns=list("abcdef")).to_csv(path, index=False)
    code, stdout, stderr = run("fit", "pca", path, "--k", "4", "--max-iter", "200",
                               "--out", tmp_path / "o", "--no-plots")
    assert code == 0, stderr
    assert "ELBO:" in stdout
    s = pd.read_csv(tmp_path / "o" / "summary.csv")
    assert s.active.sum() == 2 and len(s) == 4
    load = pd.read_csv(tmp_path / "o" / "loadings.csv", index_col=0)
    assert list(load.index) == list("abcdef") and load.shape == (6, 4)
    assert pd.read_csv(tmp_path / "o" / "scores.csv", index_col=0).shape == (150, 4)
