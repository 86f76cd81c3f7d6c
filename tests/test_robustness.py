"""Robustness: refusals that change nothing, checkpoints checked before they load, the
command line's one-line errors, inputs refused where they enter, streams that say which
row is wrong (issue 14: "Refusals that change state", "Command line and inputs").

Each test failed on the main branch before these checks were added."""
from __future__ import annotations

import io as _io
import json

import numpy as np
import pytest

import blrgraph as bg
from blrgraph.graph.stream import Stream
from blrgraph.inference import checkpoint


# ---- a refused observe() leaves the node as it was ------------------------------------------
def _coin():
    p = bg.Beta(1.0, 1.0, name="p")
    x = bg.Bernoulli(p, plates=(3,), name="x")
    return p, x


_WIDER = np.zeros((2, 3))         # data with more plates than the node: observe may extend them


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(data=[[0, 2, 0], [0, 0, 0]]), ValueError, "0/1 values"),                    # support
    (dict(data=_WIDER, mask=np.ones((2, 3))), TypeError, "boolean"),                   # mask dtype
    (dict(data=np.where([[1, 1, 1], [0, 1, 1]], 0.0, np.nan), mask=np.ones((2, 3), bool)),
     ValueError, "marked observed"),                                                   # mask vs NaN
    (dict(data=_WIDER, weights=-np.ones((2, 3))), ValueError, "weights"),              # weights
    (dict(data=_WIDER, weights=np.ones((5, 2, 3))), ValueError, "weights"),            # weights shape
    (dict(data=Stream(lambda: iter([np.zeros((4, 3))]), n=4), mask=np.ones((4, 3), bool)),
     ValueError, "streamed"),                                                          # stream + mask
])
def test_refused_observe_leaves_the_node_and_the_next_fit_unchanged(kwargs, error, words):
    p, x = _coin()
    x.observe([1, 1, 1])
    state = dict(x.__dict__)
    with pytest.raises(error, match=words):
        x.observe(**kwargs)
    assert x.plates == (3,) and x.source is None
    assert set(x.__dict__) == set(state) and all(x.__dict__[k] is v for k, v in state.items())
    bg.Model(x).fit("conjugate")
    # Beta(1, 1) prior and three ones: Beta(4, 1) (a refused (2, 3) observe gave Beta(7, 1))
    assert p.posterior.params["a"] == 4.0 and p.posterior.params["b"] == 1.0


def test_first_observe_refused_leaves_the_node_latent():
    p, x = _coin()
    with pytest.raises(ValueError, match="0/1"):
        x.observe([[0, 2, 0], [1, 1, 1]])
    assert not x.observed and x.plates == (3,) and x.value is None


# ---- model.load() checks everything before it changes a node ---------------------------------
def _dirichlet_model(labels=(0, 1, 1, 2, 1)):
    w = bg.Dirichlet(np.ones(3), name="w")
    x = bg.Categorical(w, plates=(len(labels),), name="x").observe(np.array(labels))
    return bg.Model(x)


def _rewrite(src, dst, meta_fn=None, arrays_fn=None):
    """A copy of checkpoint ``src`` with its metadata and arrays edited and the SHA-256
    recomputed (what someone editing the file by hand can do)."""
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(bytes(arrays.pop(checkpoint._META)).decode())
    if meta_fn is not None:
        meta_fn(meta)
    if arrays_fn is not None:
        arrays_fn(arrays)
    meta["sha256"] = checkpoint.checksum(meta, arrays)
    blob = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(dst, **arrays, **{checkpoint._META: blob})
    return dst


def _set(key, value):
    def edit(meta):
        meta[key] = value
    return edit


def _drop(key):
    def edit(meta):
        del meta[key]
    return edit


def _array(key, fn):
    def edit(arrays):
        arrays[key] = fn(arrays[key])
    return edit


@pytest.mark.parametrize("meta_fn, arrays_fn, words", [
    (_drop("point"), None, "'point'"),
    (_set("point", 5), None, "'point'"),
    (_set("fitted", ["w", "nobody"]), None, "nobody"),
    (_drop("nodes"), None, "'nodes'"),
    (_set("nodes", [{"name": "w"}]), None, "name, a family, plates"),
    (_set("svi", "fast"), None, "'svi'"),
    # the Dirichlet of the file has alpha = -4 (natural parameter -5): no distribution
    (None, _array("nat/w/0", lambda a: np.full_like(a, -5.0)), "parameter space"),
    (None, _array("nat/w/0", lambda a: np.zeros(4)), "shape"),
    (None, _array("nat/w/0", lambda a: a.astype(complex)), "dtype"),
])
def test_load_refuses_bad_metadata_and_parameters_before_changing_any_node(tmp_path, meta_fn,
                                                                           arrays_fn, words):
    fitted = _dirichlet_model()
    fitted.fit("conjugate")
    good = fitted.save(tmp_path / "good.npz")
    bad = _rewrite(good, tmp_path / "bad.npz", meta_fn, arrays_fn)
    fresh = _dirichlet_model()
    before = [a.copy() for a in fresh["w"].nat]
    with pytest.raises(ValueError, match=words):
        fresh.load(bad)
    for a, b in zip(before, fresh["w"].nat):
        np.testing.assert_array_equal(a, b)
    assert not fresh["w"].fitted and getattr(fresh, "svi_state", None) is None
    fresh.load(good)                                         # the untouched file still loads
    np.testing.assert_allclose(fresh["w"].posterior.params["alpha"], [2.0, 4.0, 2.0])


def _svi_state_edit(key, value):
    def edit(meta):
        meta["svi"][key] = value
    return edit


@pytest.mark.parametrize("meta_fn, arrays_fn, words", [
    (_svi_state_edit("t", "seven"), None, r"svi\['t'\]"),
    (_svi_state_edit("batch_size", 0), None, r"svi\['batch_size'\]"),
    (_svi_state_edit("rng", {"bit_generator": "NoSuchGenerator"}), None, "random generator"),
    (_svi_state_edit("rng", {"bit_generator": "PCG64", "state": "x"}), None, "random generator"),
    (_svi_state_edit("pos", 10 ** 6), None, "beyond the saved permutation"),
    (None, _array("svi/perm", lambda a: a.astype(float)), "svi/perm"),
])
def test_load_refuses_a_bad_svi_state(tmp_path, meta_fn, arrays_fn, words):
    rng = np.random.default_rng(0)
    y = rng.poisson(3.0, 200)

    def model():
        lam = bg.Gamma(2.0, 1.0, name="lam")
        return bg.Model(bg.Poisson(lam, plates=(200,), name="y").observe(y))

    m = model()
    m.fit("svi", seed=0, batch_size=50, max_steps=3)
    good = m.save(tmp_path / "svi.npz")
    bad = _rewrite(good, tmp_path / "bad.npz", meta_fn, arrays_fn)
    fresh = model()
    before = [a.copy() for a in fresh["lam"].nat]
    with pytest.raises(ValueError, match=words):
        fresh.load(bad)
    np.testing.assert_array_equal(before[0], fresh["lam"].nat[0])
    assert getattr(fresh, "svi_state", None) is None
    fresh.load(good)
    assert fresh.svi_state["t"] == 3


def _tamper(src, dst, meta_fn=None, arrays_fn=None):
    """A copy of checkpoint ``src`` edited by hand, its SHA-256 left as it was."""
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(bytes(arrays.pop(checkpoint._META)).decode())
    if meta_fn is not None:
        meta_fn(meta)
    if arrays_fn is not None:
        arrays_fn(arrays)
    blob = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(dst, **arrays, **{checkpoint._META: blob})
    return dst


@pytest.mark.parametrize("meta_fn, arrays_fn", [
    (_set("point", ["w"]), None),                  # the posterior made a point mass
    (_set("fitted", []), None),
    (_set("fit", {"method": "vmp", "n_iter": 1, "converged": True, "objective": 0.0}), None),
    (_set("omitted", ["w"]), None),
    (lambda meta: meta["nodes"][0].update(plates=[7]), None),
    (None, _array("nat/w/0", lambda a: a + 1.0)),
])
def test_an_edited_checkpoint_is_refused_in_one_line_before_changing_any_node(tmp_path, meta_fn,
                                                                              arrays_fn):
    """The checksum covers the metadata and the arrays (version 2): an edit that keeps the
    old SHA-256 is refused as corrupt, naming the file and what to do, on one line."""
    fitted = _dirichlet_model()
    fitted.fit("conjugate")
    good = fitted.save(tmp_path / "good.npz")
    bad = _tamper(good, tmp_path / "bad.npz", meta_fn, arrays_fn)
    fresh = _dirichlet_model()
    before = [a.copy() for a in fresh["w"].nat]
    with pytest.raises(ValueError) as e:
        fresh.load(bad)
    msg = str(e.value)
    assert msg == (f"{bad}: the checkpoint is corrupt or was edited (checksum mismatch); "
                   f"write it again with model.save")
    assert "\n" not in msg
    for a, b in zip(before, fresh["w"].nat):
        np.testing.assert_array_equal(a, b)
    assert not fresh["w"].fitted


def test_a_version_1_checkpoint_is_refused_saying_why(tmp_path):
    """Version 1 checksums covered the arrays only: reading one would trust its metadata."""
    fitted = _dirichlet_model()
    fitted.fit("conjugate")
    good = fitted.save(tmp_path / "good.npz")
    old = _rewrite(good, tmp_path / "old.npz", _set("version", 1))
    with pytest.raises(ValueError, match=r"checkpoint version 1 is not supported \(written by an "
                                         r"older blrgraph whose checksum did not cover the "
                                         r"metadata; save it again with model.save\)"):
        _dirichlet_model().load(old)


# ---- inputs refused where they enter -----------------------------------------------------------
def _normal(plates, name="y"):
    return bg.Normal(bg.Normal(0.0, 1.0, name="mu"), 1.0, plates=plates, name=name)


def test_complex_data_and_weights_are_refused_naming_the_node():
    with pytest.raises(TypeError, match="Normal 'y': data are complex"):
        _normal((3,)).observe(np.array([1 + 2j, 2, 3]))
    with pytest.raises(TypeError, match="Normal 'y': weights are complex"):
        _normal((3,)).observe([1.0, 2.0, 3.0], weights=np.array([1j, 1, 1]))


def test_non_symmetric_wishart_data_are_refused():
    A = np.array([[2.0, 1.0], [0.5, 2.0]])      # positive definite lower triangle, not symmetric
    W = bg.Wishart(3.0, np.eye(2), plates=(2,), name="W")
    with pytest.raises(ValueError, match=r"Wishart 'W': data must be symmetric.*entry \(1,\)"):
        W.observe(np.stack([np.eye(2), A]))
    ok = bg.Wishart(3.0, np.eye(2), plates=(2,), name="W2")
    ok.observe(np.stack([np.eye(2), A]), mask=np.array([True, False]))   # masked: not checked
    assert ok.observed


def test_a_mask_must_have_the_datas_shape():
    y = _normal((3, 3))
    with pytest.raises(ValueError, match=r"mask of shape \(3,\) does not match the data of shape "
                                         r"\(3, 3\)"):
        y.observe(np.ones((3, 3)), mask=np.array([True, False, True]))   # used to mask a column
    assert not y.observed


@pytest.mark.parametrize("plates, error, words", [
    (2.5, ValueError, "whole numbers"), ((2.5, 3), ValueError, "whole numbers"),
    ((3, True), TypeError, "integer"), ("3", TypeError, "integer"), ((-1,), ValueError, ">= 0"),
    ((10 ** 30,), ValueError, "more than an array can index"),
])
def test_plates_must_be_non_negative_integers(plates, error, words):
    with pytest.raises(error, match="Normal 'y': plates=.*" + words):
        _normal(plates)
    assert _normal((2.0, np.int64(3))).plates == (2, 3)          # whole numbers of any type


def test_huge_integers_name_the_node():
    with pytest.raises(ValueError, match=r"Poisson 'counts': data entry \(1,\) is the integer "
                                         r"100000\.\.\.0000 \(401 digits\)"):
        bg.Poisson(bg.Gamma(1.0, 1.0, name="r"), plates=(3,), name="counts").observe(
            [1, 10 ** 400, 2])
    with pytest.raises(ValueError, match=r"Normal 'y': weights entry \(0,\)"):
        _normal((2,)).observe([1.0, 2.0], weights=[10 ** 400, 1])
    with pytest.raises(ValueError, match=r"Binomial 'b': n has more than 2\*\*53"):
        bg.Binomial(10 ** 400, bg.Beta(1.0, 1.0, name="q"), name="b")


# ---- streams -------------------------------------------------------------------------------
def _gmm(data, n, K=2, D=2):
    w = bg.Dirichlet(np.ones(K), name="w")
    th = bg.NormalWishart(np.zeros(D), 1.0, D + 2.0, np.eye(D), plates=(K,), name="theta")
    z = bg.Categorical(w, plates=(n,), name="z")
    return bg.Model(bg.Mixture(z, bg.MultivariateNormal, th, name="y").observe(data))


_X = np.random.default_rng(0).normal(size=(1000, 2))


def _chunks(X, size=300):
    return lambda: (X[i:i + size] for i in range(0, len(X), size))


def test_stream_rows_beyond_n_are_an_error():
    m = _gmm(Stream(_chunks(_X), n=800), 800)
    with pytest.raises(ValueError, match="Mixture 'y': Stream: the chunks hold more rows than n=800"):
        m.fit("svi", seed=0, batch_size=100, epochs=1)


def test_stream_errors_give_the_global_row_and_no_mask_advice():
    X = _X.copy()
    X[734, 1] = np.nan
    m = _gmm(Stream(_chunks(X), n=1000), 1000)
    with pytest.raises(ValueError, match="row 734 of the streamed data") as info:
        m.fit("svi", seed=0, batch_size=100, epochs=1)
    assert "mask=~np.isnan" not in str(info.value) and "cannot be masked" in str(info.value)
    counts = np.random.default_rng(1).poisson(3.0, 500).astype(float)
    counts[377] = 2.5
    lam = bg.Gamma(1.0, 1.0, name="lam")
    y = bg.Poisson(lam, plates=(500,), name="y").observe(Stream(_chunks(counts, 100), n=500))
    with pytest.raises(ValueError, match=r"Poisson 'y': data must be non-negative integer counts; "
                                         r"entry \(377,\)"):
        bg.Model(y).fit("svi", seed=0, batch_size=50, epochs=1)


def test_a_stream_chunk_of_the_wrong_width_names_the_node():
    wide = lambda: (np.c_[_X[i:i + 300], _X[i:i + 300, :1]] if i >= 600 else _X[i:i + 300]  # noqa: E731
                    for i in range(0, 1000, 300))
    m = _gmm(Stream(wide, n=1000), 1000)
    with pytest.raises(ValueError, match=r"Mixture 'y': Stream: the chunk starting at row 600 has "
                                         r"rows of shape \(3,\)"):
        m.fit("svi", seed=0, batch_size=100, epochs=1)
    with pytest.raises(ValueError, match=r"Mixture 'y': each value must have shape \(2,\)"):
        _gmm(Stream(lambda: iter([np.c_[_X, _X[:, :1]]]), n=1000), 1000)     # at observe


# ---- the command line ----------------------------------------------------------------------
pd = pytest.importorskip("pandas")
from blrgraph import cli  # noqa: E402
from blrgraph import io as bio  # noqa: E402


def run(*argv):
    out, err = _io.StringIO(), _io.StringIO()
    code = cli.main([str(a) for a in argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def two_groups(tmp_path_factory):
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, 1, (30, 2)), rng.normal(5, 1, (30, 2))]
    path = tmp_path_factory.mktemp("cli") / "d.csv"
    path.write_text("a,b\n" + "\n".join(f"{x:.3f},{y:.3f}" for x, y in X) + "\n")
    return path


def test_a_bad_out_is_refused_before_fitting(two_groups, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    code, stdout, stderr = run("fit", "gmm", two_groups, "--k", "2", "--no-plots",
                               "--out", afile / "results")
    assert code == 1 and "--out" in stderr and "not a directory" in stderr
    assert "fitting" not in stdout and "Traceback" not in stderr


@pytest.mark.parametrize("source, words", [
    ("def build(data):\n    raise RuntimeError('boom')\n", "build() raised RuntimeError: boom"),
    ("def build(data):\n    return None\n", "build() returned NoneType, not a blrgraph Model"),
])
def test_a_model_file_that_fails_gives_one_line_naming_it(two_groups, tmp_path, source, words):
    f = tmp_path / "mine.py"
    f.write_text(source + "def summarize(fit):\n    return None\n")
    code, _, stderr = run("fit", f, two_groups, "--out", tmp_path / "o", "--no-plots")
    assert code == 1 and str(f) in stderr and words in stderr
    assert len(stderr.strip().splitlines()) == 1
    with pytest.raises(Exception):                  # --debug: the traceback (the error itself)
        run("--debug", "fit", f, two_groups, "--out", tmp_path / "o", "--no-plots")


@pytest.mark.parametrize("option, words", [
    ("k=1e400", "--option k=1e400: the value must be a finite real number"),
    ("k=[1,2]", "--option k=[1, 2]: model 'gmm' expects an integer"),
    ("alpha='big'", "--option alpha='big': model 'gmm' expects a number"),
])
def test_bad_option_values_name_the_option(two_groups, tmp_path, option, words):
    code, stdout, stderr = run("fit", "gmm", two_groups, "--option", option, "--no-plots",
                               "--out", tmp_path / "o")
    assert code == 1 and words in stderr and "fitting" not in stdout


@pytest.mark.parametrize("flag, value", [("--tol", "nan"), ("--tol", "-1"), ("--restarts", "0"),
                                         ("--restarts", "-3"), ("--seed", "-1"),
                                         ("--max-iter", "0")])
def test_bad_settings_are_refused_naming_the_flag(two_groups, tmp_path, flag, value):
    code, stdout, stderr = run("fit", "gmm", two_groups, flag, value, "--no-plots",
                               "--out", tmp_path / "o")
    assert code == 1 and f"{flag} {value}" in stderr.replace("-1.0", "-1")
    assert "fitting" not in stdout


def test_duplicate_header_names_are_refused(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("a,b, a\n1,2,3\n4,5,6\n")
    with pytest.raises(ValueError, match=r"duplicate column names \['a'\]"):
        bio.read_table(path)
    code, _, stderr = run("fit", "gmm", path, "--no-plots", "--out", tmp_path / "o")
    assert code == 1 and "duplicate column names" in stderr


def test_a_long_bad_cell_is_echoed_in_at_most_80_characters(tmp_path):
    path = tmp_path / "long.csv"
    path.write_text("a,b\n1,2\n3," + "x" * 5000 + "\n4,5\n6,7\n")
    with pytest.raises(ValueError, match="line 3") as info:
        bio.encode_table(path, numeric=["b"])
    assert "x" * 81 not in str(info.value) and "5002 characters" in str(info.value)
    assert len(str(info.value)) < 400


# ---- issue 28, item 12: constructors, checkpoints and the command line ------------------------
@pytest.mark.parametrize("make, error, words", [
    (lambda: bg.Gamma(1.0, 1.0, foo=1), TypeError,
     "Gamma: got an unexpected keyword argument 'foo'; its parameters are Gamma(shape, rate"),
    (lambda: bg.Normal(0.0, 1.0, 2.0), TypeError,
     "Normal: takes at most 2 parameters (mean, precision) before the keywords, got 3"),
    (lambda: bg.Normal(name="m"), TypeError, "Normal 'm': missing a required argument: 'mean'"),
    # the name is a keyword of every node constructor: a string in its place is refused, saying so
    (lambda: bg.Poisson(1.0, "x"), TypeError,
     "Poisson: takes at most 1 parameter (rate) before the keywords, got 2; a node's name is a "
     "keyword: name='x'; its parameters are Poisson(rate, log_rate=, plates=, name=)"),
    (lambda: bg.Bernoulli(0.3, "b"), TypeError, "a node's name is a keyword: name='b'"),
    (lambda: bg.Normal(0.0, 1.0, "m"), TypeError, "got 3; a node's name is a keyword: name='m'"),
    (lambda: bg.NormalGamma(0.0, 1.0, 1.0), TypeError,
     "NormalGamma: give its 4 parameters NormalGamma(mean, beta, shape, rate), got 3"),
    (lambda: bg.Beta("2", 3.0, name="p"), TypeError,
     "Beta 'p': parameter 'a' must be a number or an array of numbers, got '2'"),
    (lambda: bg.Wishart("3", np.eye(2)), TypeError, "Wishart: parameter 'dof' must be a number"),
    (lambda: bg.Wishart("3", rate=np.eye(2), name="L"), TypeError,
     "Wishart 'L': dof must be a number or an array of numbers, got '3'"),
    (lambda: bg.Binomial("5", 0.5, name="x"), TypeError,
     "Binomial 'x': n must be whole numbers of trials, got '5'"),
    (lambda: bg.Mixture(bg.Categorical(np.ones(2) / 2, plates=(3,)), bg.Normal, name="y"), TypeError,
     "Mixture 'y' of Normal components: missing a required argument: 'mean'"),
    (lambda: bg.Dot(np.array([["a"]]), bg.MultivariateNormal(np.zeros(1), np.eye(1), name="w")),
     TypeError, "Dot(X, w): X must be an array of numbers"),
    (lambda: bg.Normal(0.0, 1.0, plates=(3,), name="n").observe(np.zeros(3), weights="a"),
     TypeError, "Normal 'n': weights must be numbers (counts of identical observations)"),
])
def test_constructor_misuse_is_refused_naming_the_node(make, error, words):
    with pytest.raises(error) as e:
        make()
    assert words in str(e.value) and "\n" not in str(e.value)


def test_init_on_a_model_without_assignments_says_so():
    y = bg.Normal(bg.Normal(0.0, 1.0, name="m"), 1.0, plates=(3,), name="y").observe(np.zeros(3))
    with pytest.raises(ValueError, match="the model has no mixture assignment .* leave init out"):
        bg.Model(y).fit("vmp", init=3)


def _small_fitted():
    mu = bg.Normal(0.0, 1.0, name="mu")
    y = bg.Normal(mu, 1.0, plates=(5,), name="y").observe(np.ones(5))
    model = bg.Model(y)
    model.fit("vmp")
    return model


@pytest.mark.parametrize("path, error, words", [
    (3, TypeError, "the checkpoint path must be a file name (a str or pathlib.Path), got int"),
    (None, TypeError, "the checkpoint path must be a file name"),
    ("{tmp}", IsADirectoryError, "is a directory; give the checkpoint a file name"),
    ("{tmp}/no/such/c.npz", FileNotFoundError, "cannot write the checkpoint: the directory"),
])
def test_checkpoint_save_refuses_bad_paths_before_writing(tmp_path, path, error, words):
    """An int path was taken as an open file descriptor (fd 3 written to)."""
    model = _small_fitted()
    path = path.format(tmp=tmp_path) if isinstance(path, str) else path
    with pytest.raises(error) as e:
        model.save(path)
    assert words in str(e.value)


@pytest.mark.parametrize("content, words", [
    (b"garbage", "not an .npz archive"), (b"", "not an .npz archive"),
    (None, "a single array (.npy), not an .npz archive"),
])
def test_checkpoint_load_of_a_non_npz_file_gives_no_unpickling_advice(tmp_path, content, words):
    f = tmp_path / "c.npz"
    if content is None:
        with open(f, "wb") as fh:
            np.save(fh, np.ones(3))
    else:
        f.write_bytes(content)
    with pytest.raises(ValueError) as e:
        _small_fitted().load(f)
    assert words in str(e.value) and "pickle" not in str(e.value)
    with pytest.raises(TypeError, match="the checkpoint path must be a file name"):
        _small_fitted().load(None)
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        _small_fitted().load(tmp_path / "missing.npz")


@pytest.mark.parametrize("args, words", [
    (["--fit-option", "restarts=None"], "--fit-option restarts=None: give a value"),
    (["--fit-option", "restarts=3"], "--fit-option restarts=...: use --restarts"),
])
def test_fit_option_misuse_is_refused(two_groups, tmp_path, args, words):
    code, _, stderr = run("fit", "gmm", two_groups, "--k", "2", "--no-plots",
                          "--out", tmp_path / "o", *args)
    assert code == 1 and words in stderr and stderr.count("\n") == 1


def test_predict_checks_out_and_show_first(two_groups, tmp_path):
    fit = tmp_path / "f.npz"
    code, _, err = run("fit", "gmm", two_groups, "--k", "2", "--no-plots", "--out", tmp_path / "o",
                       "--save", fit)
    assert code == 0, err
    afile = tmp_path / "afile"
    afile.write_text("x")
    code, _, err = run("predict", fit, two_groups, "--out", afile)
    assert code == 1 and "--out" in err and "not a directory" in err and "Errno" not in err
    code, _, err = run("predict", fit, two_groups, "--show", "-1", "--out", tmp_path / "p")
    assert code == 1 and "--show -1: give a number of rows >= 0" in err


def test_a_model_built_or_loaded_but_never_fitted_is_freed(tmp_path):
    """The per-fit caches (a fixed prior's parameters, kept while its parents are the same)
    must not keep a model alive: a model built, or built and loaded from a checkpoint, and
    then deleted leaves none of its nodes behind."""
    import gc
    import weakref
    from helpers_models import gmm_model
    X = np.random.default_rng(0).normal(size=(200, 2))
    fitted = gmm_model(X)
    fitted.fit("vmp", seed=0, max_iter=3)
    fitted.save(tmp_path / "gmm.blr")

    def alive(load):
        m = gmm_model(X)
        if load:
            m.load(tmp_path / "gmm.blr")
            assert np.all(np.isfinite(m["pi"].posterior.mean))
        refs = [weakref.ref(n) for n in m.nodes]
        del m
        gc.collect()
        return [r() for r in refs if r() is not None]
    assert alive(False) == [] and alive(True) == []
