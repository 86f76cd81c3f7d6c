"""Design matrices of the regression zoo models: predictors -> X (indicator columns,
intercept, standardisation; the target checked and masked), and the same recipe on new rows."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .tables import clip, encode_table, parse_columns, read_table


# ---- regression: design matrices -----------------------------------------------------------
#: What a regression target may hold (``design_matrix(target_kind=...)``).
TARGET_KINDS = ("numeric", "binary", "counts")


@dataclass
class DesignMatrix:
    """What :func:`design_matrix` returns.

    ``X`` (N, P): the predictors on their original scale, with the intercept
    column first and NaN where a cell is missing; ``y`` (N,): the target, NaN =
    missing; ``observed``: rows with a target and every predictor (the fit's mask);
    ``terms``: the P column names; ``recipe``: how to rebuild X from new rows
    (:func:`design_rows`); ``to_original`` (P, P): w_original = A w_fit, the
    identity unless the columns were standardised."""

    X: np.ndarray
    y: np.ndarray
    observed: np.ndarray
    terms: list
    recipe: dict
    to_original: np.ndarray
    X_std: np.ndarray = field(repr=False, default=None)

    @property
    def X_fit(self):
        """The matrix for ``Dot(X, w)``: standardised if asked, missing cells set to 0
        (their rows are masked out of the fit)."""
        X = self.X if self.X_std is None else self.X_std
        return np.where(np.isfinite(X), X, 0.0)

    @property
    def y_fit(self):
        """The target for ``observe(..., mask=observed)``: 0 where not observed."""
        return np.where(self.observed, self.y, 0.0)

    def meta(self):
        """The entries of ``model.meta`` that :func:`design_rows`, :func:`weights_posterior`
        and :func:`write_predictions` read."""
        return {"terms": self.terms, "design": self.recipe, "X": self.X, "y": self.y,
                "observed": self.observed, "target": self.recipe["target"],
                "to_original": self.to_original}


def design_matrix(data, target=None, columns=None, *, intercept=True, target_kind="numeric",
                  standardize=False, name="regression", what=None):
    """The design matrix of a regression of ``target`` on ``columns``.

    ``data`` is a DataFrame or CSV path (``target`` names the response column,
    ``columns`` the predictors, default every other column) or a pair of arrays
    ``(X, y)``. A categorical predictor becomes 0/1 indicator columns
    ``col[level]`` for its levels after the first (the reference). The target
    must be numeric; with ``target_kind="binary"`` it must be 0/1 or a column
    with two levels (the second, in sorted order, is 1; ``recipe["target_levels"]``);
    with ``"counts"`` non-negative integers. A missing target masks its row; a
    row with a missing predictor is masked with a warning (``Dot(X, w)`` needs
    complete covariates). ``standardize=True`` centres (with an intercept) and
    scales every column with more than two distinct values, over the observed
    rows; ``to_original`` maps the fitted weights back. ``name`` starts the
    error messages, ``what`` (default: ``name``) says what needs the target
    ("logistic regression needs two levels"). Returns a :class:`DesignMatrix`."""
    if target_kind not in TARGET_KINDS:
        raise ValueError(f"target_kind={target_kind!r}; choose one of {TARGET_KINDS}")
    if isinstance(data, tuple) and len(data) == 2:
        X, y = (np.asarray(a, dtype=float) for a in data)
        X = X[:, None] if X.ndim == 1 else X
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValueError(f"{name}: give (X, y) with X of shape (N, P) and y of shape (N,), got "
                             f"{X.shape} and {y.shape}")
        names = [f"x{j}" for j in range(X.shape[1])]
        recipe = {"kind": "array", "columns": names, "intercept": intercept, "target": "y",
                  "levels": {}, "target_levels": None, "model": name}
        terms = names
    else:
        X, y, terms, recipe = _table_design(data, target, columns, intercept, target_kind, name,
                                            what or name)
    X = _with_intercept(X, intercept)
    terms = (["intercept"] if intercept else []) + terms
    observed = _check_target(y, recipe["target"], target_kind, name) & _complete_rows(X, name)
    if not observed.any():
        raise ValueError(f"{name}: no row has both the target and every predictor observed")
    X_std, A = _standardize(X, observed, intercept) if standardize else (None, np.eye(X.shape[1]))
    return DesignMatrix(X, y, observed, terms, recipe, A, X_std)


def _table_design(data, target, columns, intercept, target_kind, name, what):
    df = read_table(data)
    if target is None:
        raise ValueError(f"{name}: name the response column with target= (--target); columns: "
                         f"{list(df.columns)}")
    if target not in df.columns:
        raise ValueError(f"{name}: unknown target column {target!r}; columns: {list(df.columns)}")
    cols = parse_columns(columns) or [c for c in df.columns if c != target]
    if target in cols:
        raise ValueError(f"{name}: the target {target!r} cannot also be a predictor; leave it out "
                         f"of columns=")
    table = encode_table(df, cols + [target])
    recipe = {"kind": "table", "columns": cols, "intercept": intercept, "target": target,
              "levels": {c: table.levels(c) for c in table.categorical if c != target},
              "target_levels": None, "model": name}
    col = table[target]
    if col.kind == "categorical":
        if target_kind != "binary":
            needs = "counts" if target_kind == "counts" else "a numeric target"
            raise ValueError(f"{name}: the target column {target!r} is categorical (levels "
                             f"{table.levels(target)[:4]}); {what} needs {needs}")
        if len(col.levels) != 2:
            raise ValueError(f"{name}: the target {target!r} has {len(col.levels)} levels "
                             f"({table.levels(target)[:4]}); {what} needs two")
        recipe["target_levels"] = list(col.levels)
        y = np.where(col.values >= 0, col.values, np.nan).astype(float)
    else:
        y = col.values.astype(float)
    X, terms = _expand(table, recipe)
    return X, y, terms, recipe


def _check_target(y, target, kind, name):
    """Observed entries of the target, after checking its values."""
    obs = np.isfinite(y)
    if kind == "binary":
        bad = obs & (y != 0) & (y != 1)
        what = "must be 0/1 (or a column with two levels), but {n} values are not"
    elif kind == "counts":
        bad = obs & ((y < 0) | (y != np.round(y)))
        what = "must hold counts (non-negative integers), but {n} values do not"
    else:
        return obs
    if np.any(bad):
        raise ValueError(f"{name}: the target {target!r} " + what.format(n=int(bad.sum()))
                         + f", e.g. {y[np.argmax(bad)]:g}")
    return obs


def _complete_rows(X, name):
    ok = np.all(np.isfinite(X), axis=1)
    if not ok.all():
        warnings.warn(f"{name}: {int((~ok).sum())} of {len(X)} rows have a missing predictor; "
                      f"they are masked out of the fit (Dot(X, w) needs complete covariates): "
                      f"impute them to use those rows", stacklevel=4)
    if not ok.any():
        raise ValueError(f"{name}: no row has every predictor observed")
    return ok


def _standardize(X, rows, intercept):
    """Centre (with an intercept) and scale every column with more than two distinct
    values; returns (X_std, A) with w_original = A w_std (exact: a linear map of a
    Gaussian). The prior then applies to the standardised coefficients, and the
    first sweep never sees astronomically wide linear predictors."""
    Xs, A = X.copy(), np.eye(X.shape[1])
    for j in range(int(intercept), X.shape[1]):
        col = X[rows, j]
        if len(np.unique(col)) <= 2 or np.std(col) == 0:
            continue                                   # indicators and constants stay as they are
        c, s = (np.mean(col) if intercept else 0.0), np.std(col)
        Xs[:, j] = (X[:, j] - c) / s
        A[j, j] = 1.0 / s
        if intercept:
            A[0, j] = -c / s
    return Xs, A


def _expand(table, recipe):
    """Numeric columns as they are; a categorical column as indicators of its levels
    after the first (the reference level)."""
    blocks, terms = [], []
    for c in recipe["columns"]:
        col = table[c]
        if c in recipe["levels"]:
            if col.kind != "categorical":
                raise ValueError(f"{recipe['model']}: column {c!r} was categorical when the model "
                                 f"was built")
            labels = [col.levels[int(v)] if v >= 0 else None for v in col.values]
            for lv in recipe["levels"][c][1:]:
                blocks.append(np.array([np.nan if lab is None else float(lab == lv) for lab in labels]))
                terms.append(f"{c}[{lv}]")
        else:
            blocks.append(col.values.astype(float))
            terms.append(c)
    return np.column_stack(blocks) if blocks else np.empty((table.n_rows, 0)), terms


def _with_intercept(X, intercept):
    return np.column_stack([np.ones(len(X)), X]) if intercept else X


def design_rows(recipe, X_new):
    """X for new rows by the training ``recipe`` (``model.meta["design"]``): a DataFrame
    with the predictor columns (categorical levels re-used from training; an unseen
    level is refused) or an array without the intercept column."""
    name = recipe["model"]
    if recipe["kind"] == "array" or not hasattr(X_new, "columns"):
        X = np.atleast_2d(np.asarray(X_new, dtype=float))
        terms = _input_terms(recipe)
        if X.shape[1] != len(terms):
            raise ValueError(f"{name}.predict: new rows need {len(terms)} columns {terms}, got "
                             f"shape {X.shape}")
        _refuse_missing(np.isnan(X), terms, name)
        return _with_intercept(X, recipe["intercept"])
    missing = [c for c in recipe["columns"] if c not in X_new.columns]
    if missing:
        raise ValueError(f"{name}.predict: new rows lack the column(s) {missing}")
    table = encode_table(X_new[recipe["columns"]], categorical=list(recipe["levels"]))
    for c, levels in recipe["levels"].items():          # re-use the training levels
        col = table[c]
        labels = [col.levels[int(v)] if v >= 0 else None for v in col.values]
        unknown = sorted({lab for lab in labels if lab is not None and lab not in levels}, key=str)
        if unknown:
            raise ValueError(f"{name}.predict: column {c!r} has levels "
                             f"{[clip(u, 40) for u in unknown[:5]]}{' ...' if len(unknown) > 5 else ''} "
                             f"not seen in training")
        col.levels = list(levels)
        col.values = np.array([-1 if lab is None else levels.index(lab) for lab in labels])
    _refuse_missing(np.column_stack([~table[c].mask for c in recipe["columns"]]),
                    recipe["columns"], name)
    X, _ = _expand(table, recipe)
    return _with_intercept(X, recipe["intercept"])


def _refuse_missing(missing, columns, name):
    """A new row with a missing predictor has no prediction (x . w needs every x_j):
    refused with a ValueError naming the first such row and column, never a silent NaN."""
    if not missing.any():
        return
    rows = np.flatnonzero(missing.any(axis=1))
    i = int(rows[0])
    col = columns[int(np.flatnonzero(missing[i])[0])]
    raise ValueError(f"{name}.predict: new row {i} (counting from 0) has no value in the predictor "
                     f"column {col!r} ({len(rows)} row(s) have a missing predictor); a regression "
                     f"needs every predictor of a row: fill the cell in (impute it) or leave the "
                     f"row out")


def _input_terms(recipe):
    out = []
    for c in recipe["columns"]:
        out.extend([f"{c}[{lv}]" for lv in recipe["levels"][c][1:]] if c in recipe["levels"] else [c])
    return out


def observed_mean_cov(X, mask):
    """Column means and a positive-definite covariance of X (N, D) from its observed
    cells (``mask`` True): the covariance of the complete rows when there are more than
    D + 1 of them, else the diagonal of the observed variances; a constant or empty
    column counts as variance 1 (an empty column as mean 0). Each column gets a jitter of 1e-6 times its own
    variance, so a constant column is not singular and a column whose scale is far below
    the others' is not swamped (one shared jitter would be)."""
    X = np.asarray(X, dtype=float)
    mask = np.asarray(mask, dtype=bool)
    Xm = np.where(mask, X, np.nan)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # an empty column: variance 1
        m0 = np.nanmean(Xm, axis=0)
        var = np.nanvar(Xm, axis=0)
    m0 = np.where(np.isfinite(m0), m0, 0.0)   # an empty column: mean 0
    var = np.where(np.isfinite(var) & (var > 0), var, 1.0)
    complete = mask.all(axis=1)
    D = X.shape[1]
    C = np.atleast_2d(np.cov(X[complete].T)) if complete.sum() > D + 1 else np.diag(var)
    return m0, C + 1e-6 * np.diag(var)
