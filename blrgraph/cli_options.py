"""What the ``blrgraph`` command line checks before it fits: a model's options
(``--option``, ``--fit-option``, the model's ``fit_options``), the settings (``--seed``,
``--restarts``, ``--out``, ``--save``, ``--exclude``) and the errors a model file raises.
Each refusal is a ``CLIError`` naming the flag."""
from __future__ import annotations

import ast
import inspect
import os
from pathlib import Path

import numpy as np

from .inference.methods import METHODS


class CLIError(Exception):
    """A problem the user can fix; printed as ``blrgraph: error: ...`` with exit status 1."""


def build_options(module, given):
    """Keep the options the user gave (not None) and check that ``build`` takes them."""
    given = {k: v for k, v in given.items() if v is not None}
    params = inspect.signature(module.build).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    names = [n for n, p in params.items() if n != "data" and p.kind is not inspect.Parameter.VAR_KEYWORD]
    for k in given:
        if k not in params and not takes_any:
            flag = {"k": "--k", "columns": "--columns", "target": "--target",
                    "sequence_column": "--sequence-column"}.get(k, f"--option {k}=...")
            raise CLIError(f"model '{module.MODEL_NAME}' has no option {k!r} ({flag}); its options: "
                           f"{', '.join(names) or 'none'}")
        if k in params:
            given[k] = _check_option_type(module, k, given[k], params[k].default)
    return given


def _check_option_type(module, key, value, default):
    """An option whose default in ``build`` is a bool, int, float or str takes a value of
    that kind (an int where a float is expected, a whole float where an int is)."""
    shown = _clip(repr(value))

    def refuse(kind):
        return CLIError(f"--option {key}={shown}: model '{module.MODEL_NAME}' expects {kind} for {key!r} "
                        f"(default {default!r})")

    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise refuse("True or False")
    elif isinstance(default, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise refuse("an integer")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise refuse("a number")
    elif isinstance(default, str):
        if not isinstance(value, str):
            raise refuse("a word")
    return value


def _clip(text, n=80):
    """At most ``n`` characters of ``text`` (a bad value echoed in a message)."""
    text = str(text)
    return text if len(text) <= n else text[: n - 3] + "..."


def _parse_option(text, flag="--option"):
    if "=" not in text:
        raise CLIError(f"{flag} takes KEY=VALUE, got {_clip(repr(text))}")
    key, value = text.split("=", 1)
    try:
        value = ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass  # a plain string
    if isinstance(value, complex) or (isinstance(value, float) and not np.isfinite(value)):
        raise CLIError(f"{flag} {_clip(text)}: the value must be a finite real number "
                       f"(1e400 overflows to infinity)")
    return key.strip(), value


# ---- running a fit -----------------------------------------------------------------------
SVI_ONLY = ("batch_size", "epochs")


def fit_options_for(meta, method):
    """The model's keyword arguments for ``fit(method)``: ``meta["fit_options_by_method"]
    [method]`` if the model has them, else ``meta["fit_options"]``."""
    by_method = meta.get("fit_options_by_method") or {}
    return dict(by_method[method] if method in by_method else meta.get("fit_options", {}))


def _stochastic(method):
    """Does the method named ``method`` visit the data in minibatches (its Method's
    ``stochastic``)? An unknown name is refused by fit() itself."""
    m = METHODS.get(method)
    return m is not None and m.stochastic


def _method_help():
    """The --method help: every entry of METHODS with its description."""
    return "inference method: " + "; ".join(f"{name} ({m.description})" if m.description else name
                                            for name, m in METHODS.items())


def _check_overrides(method, extra):
    """Refuse fit keywords the command line does not pass on: --batch-size and --epochs
    without a stochastic method (--method svi), and --fit-option keys that have their own
    flag."""
    extra = {k: v for k, v in (extra or {}).items() if v is not None}
    given = [k for k in SVI_ONLY if k in extra]
    if not _stochastic(method) and given:
        flags = " and ".join("--" + k.replace("_", "-") for k in given)
        names = " or ".join(name for name, m in METHODS.items() if m.stochastic)
        raise CLIError(f"{flags} {'is an option' if len(given) == 1 else 'are options'} of "
                       f"--method {names}, not of {method!r}")
    for key, flag in (("seed", "--seed"), ("progress", "--progress"), ("restarts", "--restarts")):
        if key in extra:
            raise CLIError(f"--fit-option {key}=...: use {flag}")
    return extra


def _override(fit_options, method, max_iter=None, tol=None, extra=None):
    """The command line's settings over the model's; for SVI a step budget replaces an
    epoch budget and the other way round (fit("svi") takes one of them)."""
    out = dict(fit_options)
    extra = _check_overrides(method, extra)
    if max_iter is not None:
        out["max_iter"] = max_iter
    if tol is not None:
        out["tol"] = tol
    if _stochastic(method):
        if max_iter is not None or "max_steps" in extra:
            out.pop("epochs", None)
        if "epochs" in extra:
            out.pop("max_iter", None)
            out.pop("max_steps", None)
    out.update(extra)
    return out


#: errors a zoo model raises on purpose, with a message for the user (they pass unchanged)
USER_ERRORS = (CLIError, ValueError, TypeError, KeyError, ImportError, FileNotFoundError,
               FloatingPointError, np.linalg.LinAlgError)


def _where(module):
    return (f"model '{module.MODEL_NAME}'" if getattr(module, "IS_ZOO", False)
            else f"model file '{getattr(module, 'MODEL_PATH', module.MODEL_NAME)}'")


def _call_model(module, what, func, *args, **kw):
    """Call a function of the model file; an error that is not one of the messages a zoo
    model gives on purpose is reported in one line naming the file (--debug: traceback)."""
    try:
        return func(*args, **kw)
    except USER_ERRORS as e:
        if getattr(module, "IS_ZOO", False) or isinstance(e, CLIError):
            raise
        raise ModelFileError(module, what, e) from e
    except Exception as e:  # noqa: BLE001 -- a user's model file may raise anything
        raise ModelFileError(module, what, e) from e


class ModelFileError(CLIError):
    """An exception raised inside a model file's build / summarize / write_outputs."""

    def __init__(self, module, what, error):
        msg = str(error).strip().splitlines()[0] if str(error).strip() else ""
        super().__init__(f"{_where(module)}: {what}() raised {type(error).__name__}"
                         f"{': ' + _clip(msg, 200) if msg else ''} (run with --debug to see the "
                         f"traceback)")


def check_settings(seed=0, restarts=1, max_iter=None, tol=None, out_dir=None, batch_size=None,
                   epochs=None):
    """The command line's settings, checked before anything is built or fitted."""
    def whole(flag, v, low):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))
                              or v < low):
            raise CLIError(f"{flag} {v}: give an integer >= {low}")

    whole("--seed", seed, 0)
    whole("--restarts", restarts, 1)
    whole("--max-iter", max_iter, 1)
    whole("--batch-size", batch_size, 1)
    whole("--epochs", epochs, 1)
    if tol is not None and not (np.isfinite(tol) and tol >= 0):
        raise CLIError(f"--tol {tol}: give a finite number >= 0 (the relative ELBO change that "
                       f"ends the run)")
    if out_dir is not None:
        check_out_dir(out_dir)


def check_out_dir(out_dir):
    """--out must be a directory that exists or can be made, and be writable: checked
    before fitting (the results of a long fit are not lost), without creating it."""
    out = Path(out_dir)
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        where = "" if probe == out else f" ('{probe}' is a file)"
        raise CLIError(f"--out {out_dir}: not a directory{where}; give a directory for the results")
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "" if probe == out else f" (its parent '{probe}' is not writable)"
        raise CLIError(f"--out {out_dir}: cannot write there{what}; give a writable directory")


def check_save_path(save):
    """--save FIT.npz: a file (not a directory) in an existing, writable directory, checked
    before fitting so that a long fit is not lost."""
    path = Path(save)
    if path.is_dir():
        raise CLIError(f"--save {save}: is a directory; give a file name such as {path / 'fit.npz'}")
    parent = path.parent
    if not parent.is_dir():
        raise CLIError(f"--save {save}: the directory '{parent}' does not exist; create it first "
                       f"or save elsewhere")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CLIError(f"--save {save}: cannot write there; give a writable location")


def exclude_columns(table, exclude, given):
    """``--exclude COL`` (repeatable, or comma separated): the table without those
    columns. An unknown name, or one that --columns, --target or --sequence-column
    also names, is refused."""
    from blrgraph import io
    names = [c for text in exclude for c in io.parse_columns(text)]
    unknown = [c for c in names if c not in table.columns]
    if unknown:
        raise CLIError(f"--exclude: no column {unknown[0]!r} in the table; columns: "
                       f"{', '.join(map(str, table.columns))}")
    used = {"--columns": io.parse_columns(given.get("columns")) or [],
            "--target": [given.get("target")], "--sequence-column": [given.get("sequence_column")]}
    for flag, cols in used.items():
        both = [c for c in names if c in cols]
        if both:
            raise CLIError(f"--exclude {both[0]!r}: {flag} names it too; leave it out of one of them")
    out = table.drop(columns=names)
    out.attrs.update(table.attrs)
    return out


def _fit_overrides(args):
    """--batch-size, --epochs and --fit-option KEY=VALUE as keyword arguments of fit."""
    out = {"batch_size": args.batch_size, "epochs": args.epochs}
    for text in args.fit_option or []:
        key, value = _parse_option(text, "--fit-option")
        if value is None:
            raise CLIError(f"--fit-option {_clip(text)}: give a value, or leave the option out "
                           f"for its default")
        out[key] = value
    return out
