"""Prediction in the zoo and on the command line (docs/predict.md): `blrgraph fit --save`
then `blrgraph predict` in a fresh process equals the in-process API; the zoo's
predictions equal the engine's predictives; saved fits keep no training data."""
import subprocess
import sys
from io import StringIO

import numpy as np
import pandas as pd
import pytest

import blrgraph as bg
from blrgraph import cli, io
from blrgraph.saved import load_fit, save_fit


def _datasets(tmp_path):
    rng = np.random.default_rng(0)
    iris = io.load_example()
    cols = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    new_iris = iris[cols].iloc[[0, 55, 120, 140]].copy()
    new_iris.iloc[1, 2] = np.nan
    reg = pd.DataFrame({"x": rng.normal(size=60), "g": rng.choice(["a", "b", "c"], 60)})
    reg["y"] = 1.5 * reg.x + (reg.g == "b") + rng.normal(0, 0.5, 60)
    reg["yb"] = (reg.y + rng.normal(0, 1, 60) > 0.5).astype(int)
    reg["yc"] = rng.poisson(np.exp(0.5 + 0.4 * reg.x))
    cat = pd.DataFrame({"q1": rng.choice(["yes", "no"], 80), "q2": rng.choice([1, 2, 3], 80),
                        "q3": rng.choice(["a", "b"], 80)})
    mixed = pd.DataFrame({"u": np.r_[rng.normal(0, 1, 40), rng.normal(4, 1, 40)],
                          "c": np.r_[rng.choice(["x", "y"], 40, p=[.9, .1]),
                                     rng.choice(["x", "y"], 40, p=[.1, .9])]})
    counts = pd.DataFrame({"a": np.r_[rng.poisson(2, 40), rng.poisson(9, 40)],
                           "b": np.r_[rng.poisson(5, 40), rng.poisson(1, 40)]})
    texts = pd.DataFrame({"text": ["apple banana fruit salad", "banana fruit apple pie",
                                   "car engine wheel road", "engine road car truck",
                                   "fruit apple banana", "truck wheel engine"] * 5})
    seqs = pd.DataFrame({"id": np.repeat(["s1", "s2"], 30),
                         "a": np.r_[rng.normal(0, 1, 15), rng.normal(3, 1, 15), rng.normal(0, 1, 30)],
                         "b": rng.normal(size=60)})
    new_seqs = seqs.iloc[[0, 1, 2, 40, 41]].copy()
    new_seqs.iloc[1, 1] = np.nan
    W = rng.normal(size=(4, 2))
    table = pd.DataFrame(rng.normal(size=(80, 2)) @ W.T + rng.normal(0, 0.3, (80, 4)),
                         columns=["p", "q", "r", "s"])
    new_table = table.iloc[:3].copy()
    new_table.iloc[0, 2] = np.nan
    series = pd.DataFrame({"y": np.cumsum(rng.normal(0, 0.3, 60)) + rng.normal(0, 1, 60)})
    new_cat = cat.iloc[:4].copy()
    new_cat.loc[0, "q2"] = np.nan
    return {
        "gmm": (iris, {"k": 3, "columns": cols}, ["--k", "3", "--columns", *cols], new_iris),
        "linreg": (reg, {"target": "y", "columns": ["x", "g"]}, ["--target", "y", "--columns", "x", "g"],
                   reg[["x", "g"]].iloc[:5]),
        "logreg": (reg, {"target": "yb", "columns": ["x", "g"]}, ["--target", "yb", "--columns", "x", "g"],
                   reg[["x", "g"]].iloc[:5]),
        "poisson_reg": (reg, {"target": "yc", "columns": ["x"]}, ["--target", "yc", "--columns", "x"],
                        reg[["x"]].iloc[:5]),
        "latent_class": (cat, {"k": 2}, ["--k", "2"], new_cat),
        "mixed_mixture": (mixed, {"k": 2}, ["--k", "2"], mixed.iloc[[0, 1, 50]]),
        "poisson_mixture": (counts, {"k": 2}, ["--k", "2"], counts.iloc[[0, 45]]),
        "lda": (texts, {"k": 2, "columns": ["text"]}, ["--k", "2", "--columns", "text"],
                pd.DataFrame({"text": ["apple pie fruit", "road truck engine", "unknownword"]})),
        "hmm": (seqs, {"k": 2, "sequence_column": "id"}, ["--k", "2", "--sequence-column", "id"],
                new_seqs),
        "pca": (table, {"k": 2}, ["--k", "2"], new_table),
        "local_level": (series, {}, [], pd.DataFrame({"y": [0.5, np.nan, 1.0]})),
    }


@pytest.mark.parametrize("name", ["gmm", "linreg", "logreg", "poisson_reg", "latent_class",
                                  "mixed_mixture", "poisson_mixture", "lda", "hmm", "pca",
                                  "local_level"])
def test_fit_save_then_predict_in_a_fresh_process(tmp_path, name):
    data, options, flags, new = _datasets(tmp_path)[name]
    train, new_csv, fit_file = tmp_path / "train.csv", tmp_path / "new.csv", tmp_path / "fit.npz"
    data.to_csv(train, index=False)
    new.to_csv(new_csv, index=False)
    code = cli.main(["fit", name, str(train), *flags, "--save", str(fit_file), "--no-plots",
                     "--out", str(tmp_path / "out")], stdout=StringIO(), stderr=StringIO())
    assert code == 0
    proc = subprocess.run([sys.executable, "-m", "blrgraph.cli", "predict", str(fit_file), str(new_csv),
                           "--out", str(tmp_path / "pred")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = pd.read_csv(tmp_path / "pred" / "predictions.csv", index_col="row")
    # the in-process API on the same fit (same options, method and seed as the command line)
    module = cli.load_model(name)
    model = module.build(io.read_table(train), **options)
    method = module.DEFAULT_METHOD
    fit = model.fit(method, seed=0, **cli.fit_options_for(model.meta, method))
    expect = module.predict_table(fit, io.read_table(new_csv))
    # predict: one value per new row (docs/predict.md, "What predict means"); pca has transform
    if name == "pca":
        assert not hasattr(module, "predict")
        assert module.transform(fit, io.read_table(new_csv)).shape == (len(new), 2)
    else:
        got_predict = np.asarray(module.predict(fit, io.read_table(new_csv)))
        assert got_predict.shape == (len(new),)
    assert list(got.columns) == list(expect.columns)
    for c in expect.columns:
        if expect[c].dtype.kind in "fi":
            np.testing.assert_allclose(got[c].to_numpy(float), expect[c].to_numpy(float), rtol=1e-12,
                                       atol=1e-300)
        else:
            assert list(got[c].astype(str)) == list(expect[c].astype(str))
    assert len(got) == len(new)


def test_saved_fit_keeps_no_training_data_and_refuses_bad_files(tmp_path):
    iris = io.load_example()
    module = cli.load_model("gmm")
    model = module.build(iris, k=3, columns=["sepal_length", "sepal_width"])
    fit = model.fit("vmp", seed=0, **model.meta["fit_options"])
    path = tmp_path / "fit.npz"
    save_fit(fit, path)
    with np.load(path) as z:
        assert sorted(z.files) == ["__meta__", "nat/theta/0", "nat/theta/1", "nat/theta/2",
                                   "nat/theta/3", "nat/weights/0", "shift/theta"]
        # theta's location shift: one reference point per column, not the training rows
        assert z["shift/theta"].shape == (2,)
        np.testing.assert_array_equal(z["shift/theta"], model["theta"].family.shift)
    saved = load_fit(path)
    np.testing.assert_array_equal(saved["theta"].posterior.params["scale"],
                                  model["theta"].posterior.params["scale"])
    with pytest.raises(KeyError, match="keeps the global nodes"):
        saved["z"]
    bad = tmp_path / "bad.npz"
    bad.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(ValueError, match="not a readable blrgraph fit"):
        load_fit(bad)
    ck = tmp_path / "ck.npz"
    model.save(ck)
    with pytest.raises(ValueError, match="a checkpoint: use model.load"):
        load_fit(ck)
    out, err = StringIO(), StringIO()
    code = cli.main(["predict", str(tmp_path / "missing.npz"), str(path)], stdout=out, stderr=err)
    assert code == 1 and "not found" in err.getvalue()


def test_zoo_predictions_equal_the_engine_predictives():
    rng = np.random.default_rng(1)
    # Poisson mixture: negative-binomial cells, E[w] weights = z.predictive(inputs=...)
    counts = pd.DataFrame({"a": np.r_[rng.poisson(2, 30), rng.poisson(9, 30)],
                           "b": np.r_[rng.poisson(5, 30), rng.poisson(1, 30)]})
    pm = cli.load_model("poisson_mixture")
    model = pm.build(counts, k=2)
    fit = model.fit("vmp", seed=0)
    new = np.array([[1.0, 6.0], [10.0, np.nan]])
    table = pm.predict_table(fit, pd.DataFrame(new, columns=["a", "b"]))
    engine = model["z"].predictive(inputs={"x": new}).probs[:, 0, :]
    np.testing.assert_allclose(table[["p0", "p1"]].to_numpy(), engine, rtol=0, atol=1e-12)
    # latent class: several Categorical columns sharing z, one missing cell
    cat = pd.DataFrame({"q1": rng.choice(["no", "yes"], 60), "q2": rng.choice(["a", "b", "c"], 60)})
    lc = cli.load_model("latent_class")
    model = lc.build(cat, k=2)
    fit = model.fit("vmp", seed=0)
    new = pd.DataFrame({"q1": ["yes", None, "no"], "q2": ["a", "c", None]})
    table = lc.predict_table(fit, new)
    codes = {f"x[{c}]": io.level_codes(new[c].tolist(), model.meta["levels"][c], c, "t").astype(float)
             for c in ("q1", "q2")}
    codes = {k: np.where(v >= 0, v, np.nan) for k, v in codes.items()}
    engine = model["z"].predictive(inputs=codes).probs
    np.testing.assert_allclose(table[["p0", "p1"]].to_numpy(), engine, rtol=0, atol=1e-12)
    # full-covariance gmm: cluster probabilities and imputations of partial rows
    gm = cli.load_model("gmm")
    iris = io.load_example()
    cols = ["sepal_length", "sepal_width", "petal_length"]
    model = gm.build(iris, k=3, columns=cols)
    fit = model.fit("vmp", seed=2, **model.meta["fit_options"])
    X = iris[cols].to_numpy()[[3, 70, 130]].copy()
    X[0, 1] = X[1, 0] = np.nan
    X[2, :2] = np.nan
    pred = model["x"].predictive(inputs=X)
    np.testing.assert_allclose(gm.predict_proba(fit, X), pred.weights, rtol=0, atol=1e-10)
    mean, sd = gm.impute(fit, X)
    miss = ~np.isfinite(X)
    np.testing.assert_allclose(mean[miss], pred.mean[miss], rtol=0, atol=1e-10)
    np.testing.assert_allclose(sd[miss], np.sqrt(pred.var[miss]), rtol=0, atol=1e-10)
    assert np.all(mean[~miss] == X[~miss]) and np.all(sd[~miss] == 0)


def test_linreg_interval_and_lda_new_documents():
    rng = np.random.default_rng(2)
    lr = cli.load_model("linreg")
    df = pd.DataFrame({"x": rng.normal(size=50)})
    df["y"] = 2 * df.x + rng.normal(0, 0.3, 50)
    model = lr.build(df, target="y")
    fit = model.fit("vmp", **model.meta["fit_options"])
    table = lr.predict_table(fit, df.iloc[:4])
    # the interval's end points have predictive CDF 0.025 / 0.975 (quadrature over q(tau))
    m, v = io.linear_predictor(model, df.iloc[:4])
    p = model["tau"].posterior.params
    from scipy import integrate, stats
    for i in range(2):
        cdf = integrate.quad(lambda t: stats.norm.cdf(table["q97.5"][i], m[i], np.sqrt(v[i] + 1 / t))
                             * stats.gamma.pdf(t, p["shape"], scale=1 / p["rate"]), 0, np.inf)[0]
        assert cdf == pytest.approx(0.975, abs=1e-4)     # measured: 1e-5 (256 quantiles of q(tau))
    # lda: a new document made of one topic's words gets that topic
    ld = cli.load_model("lda")
    texts = ["apple banana fruit salad", "car engine wheel road"] * 10
    model = ld.build(texts, k=2)
    fit = model.fit("vmp", seed=0, **model.meta["fit_options"])
    theta = ld.transform(fit, ["banana salad apple", "wheel road engine", "nothing known here"])
    phi = ld.topic_word(fit)
    fruit = int(np.argmax(phi[:, model.meta["vocabulary"].index("banana")]))
    # (alpha + 3) / (2 alpha + 3) with alpha = 1/k when the three words are sure of their topic
    assert theta[0, fruit] == pytest.approx(3.5 / 4.0, abs=0.01)
    assert theta[1, fruit] == pytest.approx(0.5 / 4.0, abs=0.01)
    np.testing.assert_allclose(theta[2], 0.5, atol=1e-12)   # no known word: the prior's mean
    # training documents: the E-step at the fitted topics reproduces the fitted mixtures
    np.testing.assert_allclose(ld.transform(fit, texts[:4], tol=1e-10),
                               ld.doc_topics(fit).to_numpy()[:4], atol=1e-3)


def test_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from blrgraph import plotting
    t = np.arange(50.0)
    np.testing.assert_allclose(plotting.smooth_trace(t, 5)[2:-2], t[2:-2])
    np.testing.assert_allclose(plotting.smooth_trace(np.full(30, 3.0)), 3.0)
    rng = np.random.default_rng(0)
    p = plotting.plot_elbo(-100 + rng.normal(size=200), tmp_path / "e.png", objective="ELBO estimate")
    assert p.stat().st_size > 0
    X = rng.normal(size=(50, 2))
    r = np.c_[np.ones(50), np.zeros(50)]
    p = plotting.plot_clusters(X, r, tmp_path / "c.png", means=np.zeros((2, 2)),
                               covariances=np.stack([np.eye(2), 2 * np.eye(2)]), title="t")
    assert p.stat().st_size > 0
    p = plotting.plot_predictive_band(X[:, 0], X[:, 0], X[:, 0] - 1, X[:, 0] + 1, tmp_path / "b.png",
                                      y=X[:, 1])
    assert p.stat().st_size > 0


def test_fit_save_refuses_a_model_without_predict_table_before_fitting(tmp_path):
    model_file = tmp_path / "mine.py"
    model_file.write_text(
        "import blrgraph as bg\n"
        "def build(data, **options):\n"
        "    y = bg.Normal(bg.Normal(0.0, 1.0, name='mu'), 1.0, plates=(len(data),), name='y')\n"
        "    return bg.Model(y.observe(data.iloc[:, 0].to_numpy(float)))\n"
        "def summarize(fit):\n"
        "    import pandas as pd\n"
        "    return pd.DataFrame([{'mu': float(fit.model['mu'].posterior.mean)}])\n")
    data = tmp_path / "d.csv"
    pd.DataFrame({"v": [0.1, 0.5, -0.2]}).to_csv(data, index=False)
    out, err = StringIO(), StringIO()
    code = cli.main(["fit", str(model_file), str(data), "--save", str(tmp_path / "f.npz"),
                     "--no-plots", "--out", str(tmp_path / "o")], stdout=out, stderr=err)
    assert code == 1 and "defines no predict_table" in err.getvalue()
    assert "fitting" not in out.getvalue() and not (tmp_path / "f.npz").exists()


def test_pca_predictive_through_a_product_of_latents():
    """y = Dot(W, x) + mu with W, x, mu latent: the predictive's draws go through the
    product and the sum (it raised "needs its forward(values) map" before). Oracle: under
    q the mean is E[x].E[W] + E[mu] (independent factors) and the variance
    Var(x.W) + Var(mu) + the noise; data at +1e3 (centred mu)."""
    from blrgraph.zoo import pca
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(60, 3)) @ rng.normal(size=(3, 6)) + 0.3 * rng.normal(size=(60, 6)) + 1e3
    m = pca.build(Y, 3)
    m.fit("vmp")
    p = m["y"].predictive(samples=4000, seed=1)
    W, x, mu = m["W"].posterior.mean, m["x"].posterior.mean[:, 0], m["mu"].posterior.mean
    Sx, SW = m["x"].posterior.cov[:, 0], m["W"].posterior.cov
    mean = np.einsum("nk,dk->nd", x, W) + mu
    var = (np.einsum("dk,nkl,dl->nd", W, Sx, W) + np.einsum("nk,dkl,nl->nd", x, SW, x)
           + np.einsum("nkl,dlk->nd", Sx, SW) + m["mu"].posterior.var
           + 1.0 / m["tau"].posterior.mean)
    assert p.mean.shape == (60, 6)
    assert np.max(np.abs(p.mean - mean) / np.sqrt(var)) < 0.15     # 4000 draws: ~0.05
    assert np.allclose(p.var, var, rtol=0.12)
