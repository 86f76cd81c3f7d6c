"""Fit files (blrgraph/saved.py, docs/predict.md) as a hostile user meets them: the
checksum covers the metadata, ``blrgraph predict`` imports only a zoo model by name or the
model file named on its command line (with the SHA-256 recorded at fit time), a forged
file with a recomputed checksum is refused with a one-line message, and ``--save`` is
checked before the fit."""
from __future__ import annotations

import io as _io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from blrgraph import cli, io  # noqa: E402
from blrgraph.saved import _fit_digest, file_sha256, load_fit  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COLS = ["sepal_length", "sepal_width"]


def run(*argv):
    out, err = _io.StringIO(), _io.StringIO()
    code = cli.main([str(a) for a in argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A training table, new rows, a zoo fit and a fit of a copied model file."""
    d = tmp_path_factory.mktemp("fits")
    iris = io.load_example()
    iris[COLS].to_csv(d / "train.csv", index=False)
    iris[COLS].iloc[:4].to_csv(d / "new.csv", index=False)
    shutil.copy(ROOT / "models" / "gmm.py", d / "mine.py")
    for model, fit in (("gmm", "zoo.npz"), (d / "mine.py", "own.npz")):
        code, _, err = run("fit", model, d / "train.csv", "--k", "2", "--no-plots",
                           "--out", d / "out", "--save", d / fit)
        assert code == 0, err
    return d


def _arrays_and_info(path):
    with np.load(path) as z:
        data = {k: z[k] for k in z.files}
    info = json.loads(bytes(data.pop("__meta__")).decode())
    return data, info


def _write(path, data, info, recompute=True):
    if recompute:
        info["sha256"] = _fit_digest(info, data)
    blob = np.frombuffer(json.dumps(info).encode(), dtype=np.uint8)
    np.savez(path, **data, __meta__=blob)
    return path


def test_a_fit_of_an_own_model_file_records_its_name_and_hash(files):
    saved = load_fit(files / "own.npz")
    assert saved.info["model"] is None
    assert saved.info["model_file"] == {"name": "mine.py", "sha256": file_sha256(files / "mine.py")}
    assert load_fit(files / "zoo.npz").info["model"] == "gmm"
    assert load_fit(files / "zoo.npz").info["model_file"] is None


def test_predict_imports_only_the_model_file_named_on_its_command_line(files, tmp_path):
    code, _, err = run("predict", files / "own.npz", files / "new.csv", "--out", tmp_path / "p")
    assert code == 1 and "--model path/to/mine.py" in err and err.count("\n") == 1
    code, _, err = run("predict", files / "own.npz", files / "new.csv", "--out", tmp_path / "p",
                       "--model", files / "mine.py")
    assert code == 0, err
    got = pd.read_csv(tmp_path / "p" / "predictions.csv")
    code, _, err = run("predict", files / "zoo.npz", files / "new.csv", "--out", tmp_path / "q")
    assert code == 0, err
    # the copied file is the zoo's gmm: the same predictions, to the last digit
    pd.testing.assert_frame_equal(got, pd.read_csv(tmp_path / "q" / "predictions.csv"))
    other = tmp_path / "other.py"
    other.write_text((files / "mine.py").read_text() + "\n# edited\n")
    code, _, err = run("predict", files / "own.npz", files / "new.csv", "--out", tmp_path / "p",
                       "--model", other)
    assert code == 1 and "SHA-256 mismatch" in err and "'mine.py'" in err
    code, _, err = run("predict", files / "zoo.npz", files / "new.csv", "--model", other)
    assert code == 1 and "fit of the zoo model 'gmm'; leave out --model" in err


def test_an_edited_fit_file_is_refused_by_its_checksum(files, tmp_path):
    data, info = _arrays_and_info(files / "zoo.npz")
    info["options"]["k"] = 3
    path = _write(tmp_path / "edited.npz", data, info, recompute=False)
    with pytest.raises(ValueError, match="corrupt or was edited"):
        load_fit(path)
    code, _, err = run("predict", path, files / "new.csv")
    assert code == 1 and "checksum mismatch" in err and err.count("\n") == 1


@pytest.mark.parametrize("edit, message", [
    (lambda i: i.update(model="../../../tmp/evil"), "not a model of the zoo"),
    (lambda i: i.update(model="/tmp/evil.py"), "not a model of the zoo"),
    (lambda i: i.update(model=None, model_file={"name": "evil.py", "sha256": "0" * 64}),
     "--model path/to/evil.py"),
    (lambda i: i.update(model_file="evil.py"), "metadata is invalid"),
    (lambda i: i["nodes"][0].pop("n"), "metadata is invalid"),
    (lambda i: i["nodes"][0].update(plates=[7]), "with plates (7,)"),
    (lambda i: i["nodes"][0].update(family="os.system"), "metadata is invalid"),
    (lambda i: i.update(nodes="shape"), "metadata is invalid"),
    (lambda i: i.update(meta_arrays=["nope"]), "metadata is invalid"),
])
def test_a_forged_fit_file_cannot_choose_code_and_fails_in_one_line(files, tmp_path, edit,
                                                                     message):
    """Forged with a recomputed checksum: the file still names no file to import."""
    data, info = _arrays_and_info(files / "zoo.npz")
    edit(info)
    path = _write(tmp_path / "forged.npz", data, info)
    code, _, err = run("predict", path, files / "new.csv", "--out", tmp_path / "p")
    assert code == 1 and message in err, err
    assert err.startswith("blrgraph: error: ") and err.count("\n") == 1
    assert "evil" not in "".join(str(m) for m in __import__("sys").modules)


def test_non_finite_natural_parameters_are_refused(files, tmp_path):
    data, info = _arrays_and_info(files / "zoo.npz")
    data["nat/weights/0"] = np.full_like(data["nat/weights/0"], np.nan)
    with pytest.raises(ValueError, match="node 'weights': natural parameter 0 must be finite"):
        load_fit(_write(tmp_path / "nan.npz", data, info))


def test_a_version_1_fit_file_is_refused_with_the_way_forward(files, tmp_path):
    data, info = _arrays_and_info(files / "zoo.npz")
    info["version"] = 1
    with pytest.raises(ValueError, match="version 1 is not supported .*fit again with --save"):
        load_fit(_write(tmp_path / "v1.npz", data, info))


@pytest.mark.parametrize("where, message", [
    ("no/such/dir/f.npz", "the directory 'no/such/dir' does not exist"),
    (".", "is a directory"),
])
def test_save_path_is_checked_before_the_fit(files, tmp_path, monkeypatch, where, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "run", lambda *a, **k: pytest.fail("fitted before checking --save"))
    code, _, err = run("fit", "gmm", files / "train.csv", "--k", "2", "--save", where,
                       "--out", tmp_path / "o")
    assert code == 1 and message in err and err.count("\n") == 1


@pytest.mark.parametrize("cell, message", [
    ("abc", "new_bad.csv is numeric but holds text in 1 cell(s) (first: line 3 = 'abc')"),
    ("inf", "new_bad.csv holds an infinite value (line 3)"),
    ("-inf", "holds an infinite value (line 3)"),
])
def test_predict_names_column_and_line_of_a_bad_cell(files, tmp_path, cell, message):
    path = tmp_path / "new_bad.csv"
    path.write_text(f"sepal_length,sepal_width\n5.1,3.5\n4.9,{cell}\n")
    code, _, err = run("predict", files / "zoo.npz", path, "--out", tmp_path / "p")
    assert code == 1 and message in err and err.count("\n") == 1, err
    assert err.startswith("blrgraph: error: gmm.predict: column 'sepal_width' in ")


def test_an_infinite_cell_is_not_imputed_as_missing_in_python(files):
    """gmm.predict_proba on an array: inf refused naming row and column; NaN imputed."""
    gmm = cli.load_model("gmm")
    saved = load_fit(files / "zoo.npz")
    with pytest.raises(ValueError, match=r"infinite value \(row 1, column 'sepal_width'\)"):
        gmm.predict_proba(saved, np.array([[5.1, 3.5], [4.9, np.inf]]))
    with pytest.raises(TypeError, match="new rows must be numbers"):
        gmm.predict_proba(saved, np.array([["5.1", "x"]]))
    r = gmm.predict_proba(saved, np.array([[5.1, 3.5], [4.9, np.nan]]))
    np.testing.assert_allclose(r.sum(axis=1), 1.0, rtol=1e-15)


@pytest.mark.parametrize("name, train, bad", [
    ("poisson_mixture", "a,b\n1,2\n3,4\n2,1\n5,6\n0,0\n7,1\n", "a,b\n1,2\n3,{}\n"),
    ("mixed_mixture", "u,c\n0.1,x\n0.5,y\n4.2,x\n3.9,y\n-0.3,x\n4.4,y\n", "u,c\n0.2,x\n{},y\n"),
])
def test_mixture_predictions_refuse_text_and_inf_cells(tmp_path, name, train, bad):
    (tmp_path / "t.csv").write_text(train)
    code, _, err = run("fit", name, tmp_path / "t.csv", "--k", "2", "--no-plots",
                       "--out", tmp_path / "o", "--save", tmp_path / "f.npz")
    assert code == 0, err
    for cell, text in (("zz", "holds text in 1 cell(s) (first: line 3 = 'zz')"),
                       ("inf", "holds an infinite value (line 3)")):
        (tmp_path / "n.csv").write_text(bad.format(cell))
        code, _, err = run("predict", tmp_path / "f.npz", tmp_path / "n.csv", "--out", tmp_path / "p")
        assert code == 1 and f"{name}.predict: column" in err and text in err, err
