"""The ``blrgraph`` command line.

    blrgraph fit MODEL DATA.csv [--columns A B ...] [--k 3] [--target Y] [--sequence-column ID]
                               [--option KEY=VALUE ...]
                               [--method vmp] [--seed 0] [--restarts 1] [--max-iter N] [--tol T]
                               [--batch-size B] [--epochs E] [--fit-option KEY=VALUE ...]
                               [--out DIR] [--no-plots] [--progress | --no-progress]
                               [--save FIT.npz]
    blrgraph predict FIT.npz NEW.csv [--model MODEL.py] [--out DIR]
    blrgraph demo [--out demo-output] [--k 3] [--seed 2] [--method svi ...]
    blrgraph models
    blrgraph example NAME [--rows N] [--seed 0] [--out DIR]

MODEL is the name of a model of the zoo (``models/<name>.py`` of the source
checkout: gmm, lda, linreg, logreg, poisson_reg, latent_class, mixed_mixture,
poisson_mixture, local_level, pca, hmm) or the path to a model file of your own: a Python
file that defines ``build(data, **options) -> Model`` and ``summarize(fit) -> DataFrame`` (and,
optionally, ``write_outputs(fit, out_dir) -> [paths]``).

``fit`` prints the posterior summary table and the ELBO and writes, in --out:
summary.csv, summary.json (the table, the ELBO and its trace, the settings),
elbo.png, and whatever the model's ``write_outputs`` writes (the Gaussian
mixture: assignments.csv and clusters.png). Exit status: 0 on success, 1 when
the data or the model cannot be used (the message on stderr says why and what
to do), 2 for a malformed command line.

The options of ``fit`` come from the model: ``model.meta["fit_options"]``, or
``model.meta["fit_options_by_method"][METHOD]`` when the model has options for
the chosen ``--method`` (gmm and lda: ``"svi"``); ``--max-iter``, ``--tol``,
``--batch-size``, ``--epochs`` and ``--fit-option KEY=VALUE`` override them.
With ``--method svi`` the printed ELBO is the stochastic estimate of the last
minibatch, followed by the ELBO of the final posterior on all the data.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np

from .cli_options import (USER_ERRORS, CLIError, ModelFileError, _call_model, _check_overrides,
                          _clip, _method_help, _override, _parse_option, _where, build_options,
                          check_out_dir, check_save_path, check_settings, exclude_columns,
                          _fit_overrides, fit_options_for)

IRIS_COLUMNS = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


# ---- the zoo -----------------------------------------------------------------------------
def zoo_dir():
    """``models/`` next to the package (a source checkout or an editable install), else
    the installed copy of the same files, the package ``blrgraph.zoo``."""
    import blrgraph
    local = Path(blrgraph.__file__).resolve().parent.parent / "models"
    if local.is_dir():
        return local
    try:  # an installed blrgraph ships models/ as the package blrgraph.zoo
        import blrgraph.zoo
    except ImportError:
        return local
    return Path(blrgraph.zoo.__file__).resolve().parent


def zoo_models():
    """{name: path} of the model files of the zoo (empty when models/ is not found)."""
    d = zoo_dir()
    if not d.is_dir():
        return {}
    return {p.stem: p for p in sorted(d.glob("*.py")) if not p.stem.startswith("_")}


def load_model(spec):
    """Import a model file: a zoo name (``gmm``) or a path (``my_model.py``)."""
    spec = str(spec)
    path = Path(spec)
    if spec.endswith(".py") or path.parent != Path("."):
        if not path.is_file():
            raise CLIError(f"model file '{spec}' not found")
    else:
        zoo = zoo_models()
        if spec not in zoo:
            if not zoo:
                raise CLIError(f"cannot find the model zoo (looked for {zoo_dir()}); the zoo lives in "
                               f"models/ of the blrgraph source checkout: install from it with "
                               f"'pip install -e .', or give the path of a model file "
                               f"(blrgraph fit path/to/{spec}.py DATA.csv)")
            raise CLIError(f"unknown model {spec!r}; zoo models: {', '.join(zoo)} (or give the path "
                           f"of a model file ending in .py)")
        path = zoo[spec]
    name = f"blrgraph_model_{path.stem}"
    mspec = importlib.util.spec_from_file_location(name, path)
    if mspec is None or mspec.loader is None:
        raise CLIError(f"cannot import '{path}' as a Python module")
    module = importlib.util.module_from_spec(mspec)
    sys.modules[name] = module
    try:
        mspec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise CLIError(f"importing the model file '{path}' failed: {type(e).__name__}: {e}") from e
    missing = [f for f in ("build", "summarize") if not callable(getattr(module, f, None))]
    if missing:
        raise CLIError(f"model file '{path}' must define build(data, **options) -> Model and "
                       f"summarize(fit) -> DataFrame; it lacks {', '.join(missing)}")
    module.MODEL_NAME = path.stem
    module.MODEL_PATH = str(path)
    module.IS_ZOO = path.parent.resolve() == zoo_dir().resolve()
    return module


def full_elbo(fit):
    """The ELBO of the fitted q on all the data: ``fit.elbo`` itself, except after SVI,
    whose ``fit.elbo`` is a minibatch estimate; then one pass over the data (the final
    local pass has fitted every local node). None when the data are streamed."""
    if not getattr(fit, "estimate", False):
        return fit.elbo
    if any(getattr(n, "source", None) is not None for n in fit.model.observed):
        return None
    from blrgraph import elbo
    return elbo(fit.model)


def _fit(model, method, seed, restarts, fit_options, out):
    """Fit with the engine's ``restarts`` (the best start by ELBO, on all the data after
    SVI); prints every start's ELBO. Returns (fit, the seed of the start kept)."""
    if restarts <= 1:
        return model.fit(method, seed=seed, **fit_options), seed
    fit = model.fit(method, seed=seed, restarts=restarts, **fit_options)
    for s, start, e in zip(fit.restart_seeds, fit.restart_starts, fit.restart_elbos):
        how = "" if start is None else f" (start {start})"
        print(f"  restart seed {s}{how}: ELBO {e:.6f}", file=out)
    return fit, fit.restart_seeds[fit.best_restart]


def _print_table(df, out):
    from blrgraph.io import require_pandas
    pd = require_pandas()
    with pd.option_context("display.width", 160, "display.max_columns", 50,
                           "display.max_colwidth", 80, "display.max_rows", 500):
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"), file=out)


def run(module, data, options, *, method=None, seed=0, restarts=1, max_iter=None, tol=None,
        fit_overrides=None, out_dir="blrgraph-output", plots=True, progress=None, stdout=None,
        stderr=None, data_label=None, after_summary=None):
    """Build, fit, print and write; returns (fit, summary). Used by ``fit`` and ``demo``.
    ``fit_overrides``: keyword arguments of ``fit`` over the model's (``--batch-size``,
    ``--epochs``, ``--fit-option``)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    if method is None:
        method = getattr(module, "DEFAULT_METHOD", "vmp")
    check_settings(seed=seed, restarts=restarts, max_iter=max_iter, tol=tol, out_dir=out_dir,
                   **{k: v for k, v in (fit_overrides or {}).items()
                      if k in ("batch_size", "epochs")})
    _check_overrides(method, fit_overrides)        # before the (possibly long) build
    if progress is None:
        progress = stderr.isatty() if hasattr(stderr, "isatty") else False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = _build(module, data, options)
        fit_options = _override(fit_options_for(getattr(model, "meta", {}) or {}, method),
                                method, max_iter, tol, fit_overrides)
        if progress:
            fit_options["progress"] = True
        print(f"blrgraph: fitting {module.MODEL_NAME} to {data_label or data} "
              f"(method {method!r}, seed {seed})", file=stdout)
        fit, used_seed = _fit(model, method, seed, restarts, fit_options, stdout)
        summary = _call_model(module, "summarize", module.summarize, fit)
        if type(summary.index).__name__ != "RangeIndex":   # named rows (e.g. terms): keep them
            summary = summary.reset_index()
    for w in caught:
        print(f"blrgraph: warning: {w.message}", file=stderr)
    what, elbo_all = _report(fit, summary, stdout)
    if after_summary is not None:
        after_summary(fit, stdout)
    record = {"model": module.MODEL_NAME, "data": str(data_label or data), "options": options,
              "method": fit.method, "seed": used_seed, "start": getattr(fit, "start", None),
              "objective": getattr(fit, "objective", "elbo"),
              "elbo": fit.elbo, "n_iter": fit.n_iter, "converged": fit.converged,
              "elbo_trace": list(np.asarray(fit.elbo_trace, dtype=float)),
              "elbo_estimate": bool(getattr(fit, "estimate", False)), "elbo_all_data": elbo_all,
              "columns": list(summary.columns), "summary": summary.to_dict(orient="records")}
    written = _write(module, fit, summary, record, what, Path(out_dir), plots, stderr)
    print("wrote " + ", ".join(str(p) for p in written), file=stdout)
    return fit, summary


def _build(module, data, options):
    """The model file's ``build(data, **options)``, which must return a Model."""
    model = _call_model(module, "build", module.build, data, **options)
    from blrgraph.model import Model
    if not isinstance(model, Model):
        raise CLIError(f"{_where(module)}: build() returned {type(model).__name__}, not a "
                       f"blrgraph Model; end build with 'return bg.Model(...)'")
    return model


def _report(fit, summary, stdout):
    """Print the summary table and the objective; returns (its name, the ELBO on all the
    data after SVI or None)."""
    print(file=stdout)
    _print_table(summary, stdout)
    print(file=stdout)
    what = "ELBO" if getattr(fit, "objective", "elbo") == "elbo" else "EM bound"
    if not getattr(fit, "estimate", False):
        status = "converged" if fit.converged else "NOT converged (raise --max-iter)"
        print(f"{what}: {fit.elbo:.6f}  ({fit.method}, {fit.n_iter} iterations, {status})",
              file=stdout)
        return what, None
    state = getattr(fit.model, "svi_state", None) or {}
    size = (f" of {state['batch_size']} along {state.get('batch_over')!r}"
            if "batch_size" in state else "")
    print(f"{what} estimate: {fit.elbo:.6f}  ({fit.method}, {fit.n_iter} steps on minibatches"
          f"{size}; the last minibatch's, scaled to all the data)", file=stdout)
    elbo_all = full_elbo(fit)
    if elbo_all is not None:
        print(f"{what} on all the data: {elbo_all:.6f}  (the final posterior)", file=stdout)
    return f"{what} estimate", elbo_all


def _write(module, fit, summary, record, what, out, plots, stderr):
    """summary.csv, summary.json, the ELBO plot and the model's own outputs; returns paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "summary.csv", out / "summary.json"]
    summary.to_csv(written[0], index=False)
    from blrgraph.io import jsonable
    written[1].write_text(json.dumps(jsonable(record), indent=2) + "\n")
    if plots:
        try:
            from blrgraph import plotting
            written.append(plotting.plot_elbo(fit.elbo_trace, out / "elbo.png",
                                              title=f"{module.MODEL_NAME}: {what} {fit.elbo:.6g} "
                                                    f"({fit.method}, {fit.n_iter} iterations)",
                                              objective=what))
        except ImportError as e:
            print(f"blrgraph: warning: plots skipped: {e}", file=stderr)
            plots = False
    extra = getattr(module, "write_outputs", None)
    if extra is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                written.extend(_call_model(module, "write_outputs", extra, fit, out) if plots
                               else _call_model(module, "write_outputs", _without_plots, extra,
                                                fit, out))
            except ImportError as e:
                print(f"blrgraph: warning: some outputs skipped: {e}", file=stderr)
    return written


def _without_plots(extra, fit, out):
    """Run ``write_outputs`` without drawing its images (--no-plots)."""
    from . import plotting
    with plotting.skipped():
        paths = extra(fit, out)
    keep = []
    for p in paths:
        if Path(p).suffix.lower() == ".png":
            Path(p).unlink(missing_ok=True)
        else:
            keep.append(p)
    return keep


# ---- commands ----------------------------------------------------------------------------
def cmd_fit(args, stdout, stderr):
    module = load_model(args.model)
    given = {"columns": args.columns, "k": args.k, "target": args.target,
             "sequence_column": args.sequence_column}
    for text in args.option or []:
        key, value = _parse_option(text)
        given[key] = value
    options = build_options(module, given)
    data = Path(args.data)
    if not data.is_file():
        raise CLIError(f"data file '{args.data}' not found")
    from blrgraph import io
    table = io.read_table(data)   # build() gets a DataFrame; df.attrs["source"] names the file
    if args.exclude:
        table = exclude_columns(table, args.exclude, given)
    if getattr(args, "save", None):
        _check_predictable(module)            # before the (possibly long) fit
        check_save_path(args.save)
    fit, _ = run(module, table, options, method=args.method, seed=args.seed,
                 restarts=args.restarts, max_iter=args.max_iter, tol=args.tol,
                 fit_overrides=_fit_overrides(args), out_dir=args.out, plots=not args.no_plots,
                 progress=args.progress, stdout=stdout, stderr=stderr, data_label=str(data))
    if getattr(args, "save", None):
        save_for_predict(module, fit, args.save, options, args.model, stdout)
    return 0


# ---- saved fits and predictions on new rows (docs/predict.md) -------------------------------
def save_for_predict(module, fit, path, options, spec, stdout):
    """``fit --save FIT.npz``: the global posteriors and the model's plain settings
    (blrgraph.saved), enough for ``blrgraph predict`` without the training data. A zoo
    model is recorded by name; a model file of the user's by its name and SHA-256, which
    ``predict --model FILE`` checks."""
    from blrgraph.saved import save_fit
    _check_predictable(module)
    extra = getattr(module, "prediction_meta", None)
    if callable(extra):        # what predict_table needs beyond the global posteriors
        fit.model.meta.update(extra(fit))
    if getattr(module, "IS_ZOO", False):
        save_fit(fit, path, model=module.MODEL_NAME, options=options, method=fit.method)
        again = f"blrgraph predict {path} NEW.csv"
    else:
        save_fit(fit, path, model_file=module.MODEL_PATH, options=options, method=fit.method)
        again = f"blrgraph predict {path} NEW.csv --model {module.MODEL_PATH}"
    print(f"saved the fit for prediction: {path}  ({again})", file=stdout)


def _check_predictable(module):
    if not callable(getattr(module, "predict_table", None)):
        raise CLIError(f"model '{module.MODEL_NAME}' defines no predict_table(fit, data); "
                       f"--save writes fits for 'blrgraph predict', which needs it")


def predict_module(saved, fit_path, model_arg=None):
    """The model module of a saved fit. The fit file never chooses a file to import: a zoo
    model is looked up by its name among the zoo's files, and a model file of the user's
    must be named on the command line (``--model FILE``) and have the SHA-256 recorded at
    fit time."""
    from blrgraph.saved import file_sha256
    mfile, name = saved.info.get("model_file"), saved.info.get("model")
    if mfile is not None:
        if model_arg is None:
            raise CLIError(f"{fit_path} was fitted with the model file '{mfile['name']}'; name it: "
                           f"blrgraph predict {fit_path} NEW.csv --model path/to/{mfile['name']}")
        path = Path(model_arg)
        if not path.is_file():
            raise CLIError(f"--model {model_arg}: model file not found")
        if file_sha256(path) != mfile["sha256"]:
            raise CLIError(f"--model {model_arg}: this file differs from the model file "
                           f"'{mfile['name']}' the fit was made with (SHA-256 mismatch); give "
                           f"that file, or fit again with this one")
        return load_model(path.resolve())
    zoo = zoo_models()
    if not isinstance(name, str) or name not in zoo:
        raise CLIError(f"{fit_path}: the fit names the model {_clip(repr(name))}, which is not "
                       f"a model of the zoo ({', '.join(zoo) or 'zoo not found'})")
    if model_arg is not None and model_arg != name:
        raise CLIError(f"--model {model_arg}: {fit_path} is a fit of the zoo model {name!r}; "
                       f"leave out --model")
    return load_model(name)


def cmd_predict(args, stdout, stderr):
    from blrgraph import io
    from blrgraph.saved import load_fit
    if not Path(args.fit).is_file():
        raise CLIError(f"fit file '{args.fit}' not found (write one with 'blrgraph fit MODEL "
                       f"DATA.csv --save {args.fit}')")
    if args.show < 0:
        raise CLIError(f"--show {args.show}: give a number of rows >= 0")
    check_out_dir(args.out)                   # before anything is read or predicted
    saved = load_fit(args.fit)
    module = predict_module(saved, args.fit, getattr(args, "model", None))
    predict = getattr(module, "predict_table", None)
    if not callable(predict):
        raise CLIError(f"model '{module.MODEL_NAME}' defines no predict_table(fit, data)")
    data = Path(args.data)
    if not data.is_file():
        raise CLIError(f"data file '{args.data}' not found")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = predict(saved, io.read_table(data))
    for w in caught:
        print(f"blrgraph: warning: {w.message}", file=stderr)
    print(f"blrgraph: predictions of {module.MODEL_NAME} (fit {args.fit}, method "
          f"{saved.method!r}) for {len(table)} rows of {data}", file=stdout)
    print(file=stdout)
    _print_table(table.head(args.show), stdout)
    if len(table) > args.show:
        print(f"... ({len(table) - args.show} more rows in predictions.csv)", file=stdout)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "predictions.csv", index_label="row")
    print(f"wrote {out / 'predictions.csv'}", file=stdout)
    return 0


def cmd_demo(args, stdout, stderr):
    from blrgraph import io
    module = load_model("gmm")
    path = io.example_path("iris")
    species = io.read_table(path)["species"].to_numpy()

    def crosstab(fit, out):
        pd = io.require_pandas()
        cluster = module.assignments(fit).argmax(axis=1)
        table = pd.crosstab(pd.Series(cluster, name="cluster"), pd.Series(species, name="species"))
        print("\nmost probable cluster of each flower against its species:", file=out)
        print(table.to_string(), file=out)
        weight = module.components(fit)["weight"]
        empty = [int(k) for k in np.flatnonzero(weight < 0.02)]
        if empty:
            print(f"\nnote: component(s) {empty} hold almost no flowers. The posterior of a mixture "
                  f"may leave components\nempty when the data do not support K of them "
                  f"(versicolor and virginica overlap); other starts\n(--seed, --restarts) reach "
                  f"other optima, and the ELBO says which one fits better.", file=out)

    run(module, io.read_table(path), {"k": args.k, "columns": IRIS_COLUMNS}, method=args.method,
        seed=args.seed, restarts=args.restarts, fit_overrides=_fit_overrides(args),
        out_dir=args.out, plots=not args.no_plots,
        progress=args.progress, stdout=stdout, stderr=stderr,
        data_label="the iris measurements (blrgraph/data/iris.csv, 150 flowers)",
        after_summary=crosstab)
    return 0


def cmd_models(args, stdout, stderr):
    zoo = zoo_models()
    if not zoo:
        raise CLIError(f"cannot find the model zoo (looked for {zoo_dir()}); install blrgraph from "
                       f"its source checkout with 'pip install -e .'")
    for name in zoo:
        try:
            mod = load_model(name)
            desc = getattr(mod, "DESCRIPTION", None) or (mod.__doc__ or "").strip().split("\n")[0]
        except CLIError as e:
            desc = f"(cannot import: {e})"
        print(f"{name:18s} {desc}", file=stdout)
    return 0


def cmd_example(args, stdout, stderr):
    from . import examples
    if args.name is None:
        for name, (rows, desc) in examples.NAMES.items():
            print(f"{name:10s} {desc} ({rows} rows)", file=stdout)
        return 0
    out = Path(args.out)
    if not out.is_dir():
        raise CLIError(f"--out {args.out!r} is not a directory")
    path = examples.write(args.name, out / f"{args.name}.csv", rows=args.rows, seed=args.seed)
    print(f"wrote {path}", file=stdout)
    return 0


def add_example_parser(sub):
    """``blrgraph example NAME``: write one of the example tables of the docs."""
    e = sub.add_parser("example", help="write an example CSV file used by the docs",
                       description="Write NAME.csv, a small simulated table used by the docs "
                                   "(no NAME: list them).")
    e.add_argument("name", nargs="?", metavar="NAME", help="blobs, customers, survey, houses, "
                   "loans, claims, counts, reviews or people")
    e.add_argument("--rows", type=int, help="number of rows (default: the example's)")
    e.add_argument("--seed", type=int, default=0, help="random seed (0)")
    e.add_argument("--out", default=".", help="directory to write NAME.csv in (.)")
    e.set_defaults(handler=cmd_example)


DEBUG_HELP = "show the Python traceback of an error (also: BLRGRAPH_DEBUG=1)"


def add_run_arguments(q, out_default, seed_default=0):
    """The settings of a fit that ``fit`` and ``demo`` share."""
    q.add_argument("--method", default=None,
                   help=_method_help() + " (default: the model file's DEFAULT_METHOD, "
                                         "else vmp)")
    q.add_argument("--seed", type=int, default=seed_default,
                   help=f"random seed of the initialisation ({seed_default})")
    q.add_argument("--restarts", type=int, default=1,
                   help="fit with seeds SEED..SEED+R-1 and keep the best ELBO (1)")
    q.add_argument("--out", default=out_default, help=f"output directory ({out_default})")
    q.add_argument("--no-plots", action="store_true", help="do not write PNG files")
    q.add_argument("--batch-size", type=int, metavar="B",
                   help="--method svi: rows (documents for lda) per minibatch (default: the "
                        "model's, else min(N, 256))")
    q.add_argument("--epochs", type=int, metavar="E",
                   help="--method svi: passes over the data (default: the model's, else 5)")
    q.add_argument("--fit-option", action="append", metavar="KEY=VALUE",
                   help="any other keyword argument of fit(), e.g. --fit-option kappa=0.9 "
                        "(svi: tau, kappa, batch_over, init, warmup)")
    g = q.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="show a progress bar (needs tqdm; default: when stderr is a terminal)")
    g.add_argument("--no-progress", dest="progress", action="store_false")
    q.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)


def add_fit_parser(sub):
    """``blrgraph fit MODEL DATA.csv``."""
    f = sub.add_parser("fit", help="fit MODEL to DATA.csv, print and write the posterior summary",
                       description="Fit MODEL (a zoo name or a model file) to DATA.csv.")
    f.add_argument("model", metavar="MODEL", help="zoo name (see 'blrgraph models') or path to a .py file")
    f.add_argument("data", metavar="DATA.csv", help="CSV file; first line = column names, empty = missing")
    f.add_argument("--columns", nargs="+", metavar="COL",
                   help="columns to use (names, space or comma separated; default: all)")
    f.add_argument("--exclude", action="append", metavar="COL",
                   help="leave column COL out (repeatable; names may be comma separated)")
    f.add_argument("--k", type=int, help="number of components / classes / topics")
    f.add_argument("--target", help="response column (linreg, logreg, poisson_reg)")
    f.add_argument("--sequence-column", metavar="COL",
                   help="column naming the sequence of each row (hmm; rows in time order)")
    f.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="any other option of the model's build(), e.g. --option covariance=diag")
    f.add_argument("--max-iter", type=int,
                   help="maximum number of sweeps (--method svi: of minibatch steps, instead of "
                        "--epochs)")
    f.add_argument("--tol", type=float, help="relative ELBO change that ends the run")
    f.add_argument("--save", metavar="FIT.npz",
                   help="also write the fitted global posteriors and the model's settings, for "
                        "'blrgraph predict FIT.npz NEW.csv' (no training data needed)")
    add_run_arguments(f, "blrgraph-output")
    f.set_defaults(handler=cmd_fit)


def add_predict_parser(sub):
    """``blrgraph predict FIT.npz NEW.csv``."""
    pr = sub.add_parser("predict", help="predict new rows with a fit saved by 'fit --save'",
                        description="Predictions for the rows of NEW.csv from a fit saved with "
                                    "'blrgraph fit ... --save FIT.npz': cluster probabilities "
                                    "(mixtures), predictive means and intervals (regressions), "
                                    "topic mixtures (lda).")
    pr.add_argument("fit", metavar="FIT.npz", help="file written by 'blrgraph fit ... --save'")
    pr.add_argument("data", metavar="NEW.csv", help="CSV file with the model's columns")
    pr.add_argument("--out", default="blrgraph-predictions",
                    help="output directory for predictions.csv (blrgraph-predictions)")
    pr.add_argument("--show", type=int, default=20, help="rows to print (20)")
    pr.add_argument("--model", metavar="MODEL.py",
                    help="the model file the fit was made with (a fit of a model file of your "
                         "own; its SHA-256 must match the one saved at fit time)")
    pr.set_defaults(handler=cmd_predict)


def make_parser():
    p = argparse.ArgumentParser(
        prog="blrgraph",
        description="Fit models of the blrgraph zoo (or your own model file) to a CSV table.")
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    add_fit_parser(sub)
    add_predict_parser(sub)
    d = sub.add_parser("demo", help="fit the Gaussian mixture to the bundled iris measurements",
                       description="Fit a 3-component Gaussian mixture to the iris measurements "
                                   "bundled with blrgraph; print and plot the result.")
    d.add_argument("--k", type=int, default=3, help="number of components (3)")
    add_run_arguments(d, "demo-output", seed_default=2)
    d.set_defaults(handler=cmd_demo)

    m = sub.add_parser("models", help="list the models of the zoo")
    m.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    m.set_defaults(handler=cmd_models)
    add_example_parser(sub)
    return p


def main(argv=None, stdout=None, stderr=None):
    """Run the command line; returns the exit status (0 success, 1 error, 2 usage)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    parser = make_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2): argparse already printed
        return e.code if isinstance(e.code, int) else 0
    try:
        return args.handler(args, stdout, stderr)
    except BrokenPipeError:  # output piped into e.g. head
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 1
    except (USER_ERRORS + (OSError,)) as e:
        if args.debug or os.environ.get("BLRGRAPH_DEBUG"):  # show the traceback
            if isinstance(e, ModelFileError):
                raise e.__cause__
            raise
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"blrgraph: error: {msg}", file=stderr)
        return 1
    except Exception as e:  # noqa: BLE001 -- one line, not a traceback, unless --debug
        if args.debug or os.environ.get("BLRGRAPH_DEBUG"):
            raise
        print(f"blrgraph: error: {type(e).__name__}: {_clip(e, 300)} (an unexpected error; run "
              f"with --debug to see the traceback)", file=stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
