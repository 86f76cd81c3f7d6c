"""Frictions of a newcomer's day (issue 27): `--exclude COL`, the HMM's EM on one
sequence, wide tables plotted on standardised principal components, and the README's
claims about what a seed gives (recomputed here, so they cannot go stale)."""
import io as _io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from blrgraph import cli

ROOT = Path(__file__).resolve().parent.parent


def run(*argv):
    out, err = _io.StringIO(), _io.StringIO()
    code = cli.main([str(a) for a in argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_exclude_drops_columns_and_refuses_unknown_or_used_names(tmp_path):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=40), "b": rng.normal(size=40),
                       "id": np.arange(40), "note": ["x"] * 40})
    df["y"] = 2 * df.a + rng.normal(0, 0.1, 40)
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    code, out, err = run("fit", "linreg", path, "--target", "y", "--exclude", "id",
                         "--exclude", "note,b", "--no-plots", "--out", tmp_path / "o")
    assert code == 0, err
    terms = pd.read_csv(tmp_path / "o" / "summary.csv")["term"].tolist()
    assert terms[:2] == ["intercept", "a"] and not any(t in terms for t in ("b", "id", "note"))
    code, _, err = run("fit", "linreg", path, "--target", "y", "--exclude", "zz", "--no-plots",
                       "--out", tmp_path / "o")
    assert code == 1 and "--exclude: no column 'zz'" in err and "a, b, id, note, y" in err
    code, _, err = run("fit", "linreg", path, "--target", "y", "--exclude", "y", "--no-plots",
                       "--out", tmp_path / "o")
    assert code == 1 and "--target names it too" in err
    code, _, err = run("fit", "gmm", path, "--columns", "a", "b", "--exclude", "b", "--no-plots",
                       "--out", tmp_path / "o")
    assert code == 1 and "--columns names it too" in err


def test_hmm_em_on_one_sequence_with_the_default_prior(tmp_path):
    """`blrgraph fit hmm one.csv --method em`: one sequence, default prior. The EM keeps
    a Dirichlet q for the initial state (one draw of it) and finds the two regimes."""
    rng = np.random.default_rng(0)
    z = np.zeros(200, dtype=int)
    for t in range(1, 200):
        z[t] = z[t - 1] if rng.random() < 0.95 else 1 - z[t - 1]
    path = tmp_path / "one.csv"
    pd.DataFrame({"a": rng.normal(3.0 * z, 1.0), "b": rng.normal(-z, 1.0)}).to_csv(path, index=False)
    code, out, err = run("fit", "hmm", path, "--k", "2", "--method", "em", "--no-plots",
                         "--out", tmp_path / "o")
    assert code == 0, err
    summary = pd.read_csv(tmp_path / "o" / "summary.csv")
    means = np.sort(summary[summary.variable == "a"]["mean"].to_numpy())
    np.testing.assert_allclose(means, [0.0, 3.0], atol=0.35)
    states = pd.read_csv(tmp_path / "o" / "states.csv")["state"].to_numpy()
    agree = np.mean(states == z)
    assert max(agree, 1 - agree) > 0.95


def test_wide_tables_are_drawn_on_standardised_principal_components(tmp_path):
    pytest.importorskip("matplotlib")
    from blrgraph import plotting
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 13)) @ rng.normal(size=(13, 13))
    cols = [f"c{j}" for j in range(13)]
    scores, A, shift, labels = plotting.principal_axes(X, cols)
    # standardised: the units of a column do not change the picture
    Y = X.copy()
    Y[:, 4] *= 1e6
    scores2, _, _, labels2 = plotting.principal_axes(Y, cols)
    np.testing.assert_allclose(scores2, scores, rtol=1e-9, atol=1e-9)
    assert labels2 == labels
    # the scores are the standardised table's principal components (unit-norm loadings)
    Z = (X - X.mean(0)) / X.std(0)
    w, V = np.linalg.eigh(Z.T @ Z)
    np.testing.assert_allclose(np.abs(scores), np.abs(Z @ V[:, ::-1][:, :2]), atol=1e-9)
    share = w[::-1] / w.sum()
    assert re.match(rf"PC1 \({100 * share[0]:.0f}% of variance\) = -?\d\.\d\d c\d+ [+-] ", labels[0])
    path = plotting.plot_clusters(X, np.eye(2)[np.arange(120) % 2], tmp_path / "wide.png",
                                  columns=cols)
    assert path.stat().st_size > 10_000


def test_readme_seed_sentences_agree_with_its_seed_table():
    """The README's seed table is run by tests/test_docs.py (so it is today's); the
    sentences after it must name the seeds and ELBOs of that table."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("for seed in range(6):"):]
    table = table[table.index("```output") + len("```output"):]
    table = table[:table.index("```")]
    rows = [line.split()[:2] for line in table.strip().splitlines()]
    elbo = {int(seed): value.replace("-", "−") for seed, value in rows}
    prose = text[text.index("Seeds 0, 2"):text.index("checks that these sentences")]
    best = elbo[2]                                         # the demo's seed
    same = [s for s in sorted(elbo) if elbo[s] == best]
    assert prose.startswith("Seeds " + ", ".join(map(str, same[:-1])) + f" and {same[-1]} reach the "
                            f"optimum above (ELBO {best})")
    others = [s for s in sorted(elbo) if elbo[s] != best]
    for s in others:
        assert f"Seed {s} reaches" in prose or f"seed {s} reaches" in prose
        assert elbo[s] in prose
    # and the demo's own output block (run by test_docs) shows that optimum
    assert f"ELBO: {best.replace('−', '-')}" in text


def test_model_draw_writes_a_picture_with_shaded_observed_nodes_and_plate_boxes(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_rgba

    from blrgraph import drawing, io
    from blrgraph.zoo import gmm, pca
    model = gmm.build(io.load_example(), k=3, columns=["sepal_length", "sepal_width"])
    path = tmp_path / "gmm.png"
    fig = model.draw(path, engine="matplotlib")
    assert path.stat().st_size > 5_000
    patches = {a.get_gid(): a for a in fig.axes[0].patches}
    assert to_rgba(patches["node:x"].get_facecolor()) == to_rgba(drawing.OBSERVED_FILL)
    for latent in ("z", "theta", "weights"):
        assert to_rgba(patches[f"node:{latent}"].get_facecolor()) == to_rgba("white")
    assert {g for g in patches if g.startswith("plate:")} == {"plate:3", "plate:150"}
    assert {g for g in patches if g.startswith("edge:")} == {
        "edge:weights->z", "edge:theta->x", "edge:z->x"}

    def inside(node, plate):
        (x, y), box = patches[f"node:{node}"].center, patches[f"plate:{plate}"]
        return box.get_x() < x < box.get_x() + box.get_width() and \
            box.get_y() < y < box.get_y() + box.get_height()

    assert inside("z", 150) and inside("x", 150) and inside("theta", 3)
    assert not inside("theta", 150) and not inside("weights", 3) and not inside("z", 3)
    # crossing plates (PCA: rows x columns): y is in both boxes, W only in the columns'
    rng = np.random.default_rng(0)
    model = pca.build(rng.normal(size=(20, 4)), k=2)
    patches = {a.get_gid(): a for a in model.draw(engine="matplotlib").axes[0].patches}
    assert inside("y", 20) and inside("y", 4) and inside("W", 4) and not inside("W", 20)
    assert type(patches["node:dot(W,x)"]).__name__ == "RegularPolygon"    # deterministic
    # the Graphviz source: a cluster per set of plates, the observed node filled
    dot = drawing.to_dot(model)
    assert 'label="20 x 4"' in dot and '"y" [label="y\\nNormal", shape="ellipse", style="filled"' in dot
    assert dot.count(" -> ") == model.graph.number_of_edges()


def test_model_draw_with_graphviz_names_what_it_needs(tmp_path, monkeypatch):
    from blrgraph import drawing
    from blrgraph.zoo import gmm
    model = gmm.build(np.random.default_rng(0).normal(size=(30, 2)), k=2)
    monkeypatch.setattr(drawing.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="needs the Graphviz program 'dot'"):
        model.draw(tmp_path / "m.png", engine="graphviz")
    with pytest.raises(ValueError, match="engine must be"):
        model.draw(engine="dot")
