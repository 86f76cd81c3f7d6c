"""Tabular input: pandas DataFrames and CSV files -> arrays the engine can observe,
and the zoo's tables back out.

* :func:`read_table` reads a CSV file (or takes a DataFrame or an array) and
  selects columns, refusing unknown names.
* :func:`encode_table` decides, column by column, whether the values are
  numbers or categories, and returns a :class:`Table`: numeric columns as
  floats with NaN where a cell is missing, categorical (text) columns as
  integer codes 0..L-1 with -1 where a cell is missing, and the labels that
  decode the codes back (summaries print labels, not codes).
* Missing cells are never dropped: :meth:`Table.mask` says which cells are
  observed, and the models pass it to ``observe(data, mask=...)``.
* A column that cannot be used raises a ``ValueError`` naming the column and
  the fix (text in a numeric column, a column with no values, an identifier
  column used as a category, non-count values in a count model).

* Regression models (``models/linreg.py``, ``logreg.py``, ``poisson_reg.py``)
  share :func:`design_matrix` (predictors -> X with indicator columns for
  categories, an intercept, optional standardisation; the target checked and
  masked), :func:`design_rows` (the same recipe on new rows) and the results
  side: :func:`weights_posterior`, :func:`linear_predictor`,
  :func:`weights_summary`, :func:`write_predictions`.
* Mixture models share :func:`responsibilities`, :func:`mixture_weights` and
  :func:`write_assignments`; every zoo model finds its Model in a FitResult
  with :func:`fitted_model`.

pandas is optional (``pip install blrgraph[tables]``); it is imported inside
the functions that need it.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .inference.jsonify import jsonable  # noqa: F401  (re-exported: io.jsonable)

PANDAS_HINT = "pip install blrgraph[tables]"

#: Extra cell values read as missing, on top of pandas' defaults
#: ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "None", "#N/A", ...).
NA_VALUES = ["?"]

#: Bundled example data sets (``blrgraph/data/<name>.csv``).
EXAMPLES = {"iris": "iris.csv"}


def require_pandas():
    """Import pandas or raise an ImportError that says how to install it."""
    try:
        import pandas as pd
    except ImportError:  # optional dependency
        raise ImportError(f"tables (DataFrames and CSV files) need pandas: {PANDAS_HINT}") from None
    return pd


def example_path(name="iris"):
    """Path of a data set bundled with the package (``blrgraph/data``)."""
    try:
        fname = EXAMPLES[name]
    except KeyError:
        raise ValueError(f"no bundled data set {name!r}; available: {sorted(EXAMPLES)}") from None
    return Path(__file__).resolve().parent / "data" / fname


def load_example(name="iris"):
    """A bundled data set as a DataFrame (iris: 150 rows, four measurements in cm
    and the species)."""
    return read_table(example_path(name))


def parse_columns(columns):
    """``None``, a list of names, or one string with comma-separated names -> list or None."""
    if columns is None:
        return None
    if isinstance(columns, str):
        columns = [columns]
    out = []
    for c in columns:
        if isinstance(c, str):
            out.extend(part.strip() for part in c.split(",") if part.strip())
        else:
            out.append(c)
    return out


def _source_name(df):
    src = df.attrs.get("source") if hasattr(df, "attrs") else None
    return f" in {src}" if src else ""


def read_table(source, columns=None, *, na_values=None):
    """Read ``source`` into a DataFrame and keep ``columns`` (all when None).

    ``source`` is a path to a CSV file (first line = column names), a pandas
    DataFrame (copied), a dict of columns, or a numpy array (columns named
    x0, x1, ...). Cells that are empty, "NA", "NaN", "?" (see :data:`NA_VALUES`)
    are read as missing. An unknown column raises a ValueError listing the
    columns that exist.
    """
    pd = require_pandas()
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"data file '{path}' not found")
        if path.is_dir():
            raise ValueError(f"'{path}' is a directory; give a CSV file")
        try:
            df = pd.read_csv(path, na_values=NA_VALUES + list(na_values or []), skipinitialspace=True)
        except pd.errors.EmptyDataError:
            raise ValueError(f"data file '{path}' is empty; it needs a header line with the column "
                             f"names and one line per row") from None
        except (pd.errors.ParserError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read '{path}' as a CSV file ({str(e).strip()}); check the "
                             f"separator (commas) and that every line has the same number of "
                             f"fields") from None
        df.attrs["source"] = str(path)
        _check_header(pd, path)
    elif isinstance(source, pd.DataFrame):
        df = source.copy()
    elif isinstance(source, pd.Series):
        df = source.to_frame(name=source.name if source.name is not None else "x")
    elif isinstance(source, dict):
        df = pd.DataFrame(source)
    else:
        arr = np.asarray(source)
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2:
            raise ValueError(f"data must be a table (rows x columns); got an array of shape {arr.shape}")
        df = pd.DataFrame(arr, columns=[f"x{j}" for j in range(arr.shape[1])])
    df.columns = [c.strip() if isinstance(c, str) else c for c in df.columns]
    dup = sorted({str(c) for c in df.columns if list(df.columns).count(c) > 1})
    if dup:
        raise ValueError(f"the table{_source_name(df)} has duplicate column names {dup}; rename them")
    cols = parse_columns(columns)
    if cols is not None:
        if not cols:
            raise ValueError("columns= is empty; name at least one column")
        unknown = [c for c in cols if c not in df.columns]
        if unknown:
            raise ValueError(f"unknown column(s) {', '.join(repr(c) for c in unknown)}{_source_name(df)}; "
                             f"available columns: {', '.join(map(str, df.columns))}")
        twice = sorted({str(c) for c in cols if cols.count(c) > 1})
        if twice:
            raise ValueError(f"column(s) {twice} selected twice; name each column once")
        attrs = dict(df.attrs)
        df = df[cols].copy()
        df.attrs.update(attrs)
    if len(df) == 0:
        raise ValueError(f"the table{_source_name(df)} has no rows")
    if df.shape[1] == 0:
        raise ValueError(f"the table{_source_name(df)} has no columns")
    return df


def _check_header(pd, path):
    """Duplicate names on the header line are refused (pandas would rename the second
    'a' to 'a.1' silently)."""
    try:
        head = pd.read_csv(path, header=None, nrows=1, dtype=str, skipinitialspace=True,
                           keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return
    names = [str(c).strip() for c in head.iloc[0]] if len(head) else []
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise ValueError(f"the table in {path} has duplicate column names "
                         f"{[clip(c) for c in dup]} on its header line; rename them")


def clip(value, n=80):
    """At most ``n`` characters of a cell or label echoed in a message."""
    text = str(value)
    return text if len(text) <= n else f"{text[: n - 3]}... ({len(text)} characters)"


class Column:
    """One encoded column: ``kind`` "numeric" (``values`` float, NaN = missing) or
    "categorical" (``values`` int codes 0..L-1, -1 = missing; ``levels`` the labels)."""

    def __init__(self, name, kind, values, levels=None):
        self.name = name
        self.kind = kind
        self.values = values
        self.levels = levels

    @property
    def mask(self):
        """True where the cell is observed."""
        return ~np.isnan(self.values) if self.kind == "numeric" else self.values >= 0

    @property
    def n_missing(self):
        return int(np.sum(~self.mask))

    def __repr__(self):
        extra = f", {len(self.levels)} levels" if self.kind == "categorical" else ""
        return f"<Column {self.name!r}: {self.kind}{extra}, {self.n_missing} missing>"


class Table:
    """An encoded table (see :func:`encode_table`). ``table[name]`` is a :class:`Column`."""

    def __init__(self, columns, index, source=None):
        self.columns = list(columns)
        self.index = index
        self.source = source
        self._by_name = {c.name: c for c in self.columns}

    # ---- structure -------------------------------------------------------------
    @property
    def names(self):
        return [c.name for c in self.columns]

    @property
    def numeric(self):
        """Names of the numeric columns, in table order."""
        return [c.name for c in self.columns if c.kind == "numeric"]

    @property
    def categorical(self):
        """Names of the categorical columns, in table order."""
        return [c.name for c in self.columns if c.kind == "categorical"]

    @property
    def n_rows(self):
        return len(self.index)

    def __getitem__(self, name):
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no column {name!r}; columns: {self.names}") from None

    def __repr__(self):
        return (f"<Table: {self.n_rows} rows; numeric {self.numeric}; categorical "
                f"{self.categorical}>")

    # ---- arrays ------------------------------------------------------------------
    def numeric_array(self, names=None):
        """(N, D) floats of the numeric columns ``names`` (default: all); NaN = missing."""
        names = self.numeric if names is None else list(names)
        for n in names:
            if self[n].kind != "numeric":
                raise ValueError(f"column {n!r} is categorical, not numeric")
        if not names:
            return np.empty((self.n_rows, 0))
        return np.column_stack([self[n].values for n in names]).astype(float)

    def mask(self, names=None):
        """(N, D) booleans, True where the cell of ``names`` (default: all) is observed."""
        names = self.names if names is None else list(names)
        if not names:
            return np.ones((self.n_rows, 0), dtype=bool)
        return np.column_stack([self[n].mask for n in names])

    def codes(self, name):
        """Integer codes of a categorical column (-1 = missing)."""
        col = self[name]
        if col.kind != "categorical":
            raise ValueError(f"column {name!r} is numeric, not categorical")
        return col.values

    def levels(self, name):
        """The labels of a categorical column, in code order."""
        return list(self[name].levels)

    def decode(self, name, codes):
        """Labels for integer codes of column ``name`` (-1 -> None)."""
        levels = self.levels(name)
        codes = np.asarray(codes)
        out = np.empty(codes.shape, dtype=object)
        for i, c in np.ndenumerate(codes):
            out[i] = levels[int(c)] if c >= 0 else None
        return out

    # ---- checks a model asks for ----------------------------------------------------
    def _where(self):
        return f" in {self.source}" if self.source else ""

    def require_numeric(self, model, alternative=None):
        """Raise a ValueError naming every categorical column; ``model`` and the
        suggested ``alternative`` go into the message."""
        bad = self.categorical
        if bad:
            col = self[bad[0]]
            alt = f", or use the {alternative} model, which takes categorical columns too" \
                if alternative else ""
            raise ValueError(f"column {bad[0]!r}{self._where()} is categorical (text; levels "
                             f"{_show_levels(col.levels)}) but {model} needs numeric columns: leave "
                             f"it out by selecting the numeric columns (columns=[...], --columns)"
                             f"{alt}")

    def require_counts(self, model):
        """Numeric columns must hold non-negative integers (counts)."""
        self.require_numeric(model)
        for c in self.columns:
            v = c.values
            obs = ~np.isnan(v)
            bad = obs & ((v < 0) | (v != np.round(v)))
            if np.any(bad):
                i = int(np.argmax(bad))
                row = f"line {i + 2}" if self.source else f"row {self.index[i]!r}"
                raise ValueError(f"column {c.name!r}{self._where()} must hold counts (non-negative "
                                 f"integers) for {model}, but {row} is {float(v[i]):g} "
                                 f"({int(bad.sum())} such cells); fix those cells, leave them "
                                 f"empty (missing), or leave the column out")


def _show_levels(levels, n=4):
    shown = ", ".join(repr(x) if len(repr(x)) <= 40 else repr(clip(x, 40)) for x in list(levels)[:n])
    return f"[{shown}{', ...' if len(levels) > n else ''}]"


def _sort_levels(values):
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=str)


def _encode_categorical(s, name, where, max_levels, pd):
    obs = s.dropna()
    if isinstance(s.dtype, pd.CategoricalDtype):
        levels = [lv for lv in s.cat.categories if lv in set(obs)]
    else:
        if obs.dtype == object or pd.api.types.is_string_dtype(obs.dtype):
            obs = obs.map(lambda v: v.strip() if isinstance(v, str) else v)
            s = s.map(lambda v: v.strip() if isinstance(v, str) else v)
        levels = _sort_levels([v.item() if isinstance(v, np.generic) else v for v in pd.unique(obs)])
    n_obs = len(obs)
    limit = max_levels if max_levels is not None else max(20, n_obs // 2)
    if len(levels) > limit:
        raise ValueError(f"column {name!r}{where} has {len(levels)} distinct values in {n_obs} "
                         f"observed rows; that looks like an identifier or free text, not a "
                         f"categorical variable: leave it out (columns=[...], --columns), or use "
                         f"the lda model for free text")
    lookup = {lv: i for i, lv in enumerate(levels)}
    codes = np.array([-1 if pd.isna(v) else lookup[v] for v in s], dtype=np.intp)
    return Column(name, "categorical", codes, levels)


def _row(s, i, where):
    """How to point at the i-th cell of ``s``: the CSV line when read from a file."""
    if where:  # read from a CSV file: rows are lines 2, 3, ... (line 1 holds the names)
        return f"line {i + 2}"
    return f"row {s.index[i]!r}"


def _encode_column(s, name, where, force, max_levels, pd):
    if s.isna().all():
        raise ValueError(f"column {name!r}{where} has no values (every cell is missing); leave it "
                         f"out (columns=[...], --columns)")
    if force == "categorical":
        return _encode_categorical(s, name, where, max_levels, pd)
    if pd.api.types.is_bool_dtype(s.dtype) and force != "numeric":
        return _encode_categorical(s, name, where, max_levels, pd)
    if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype):
        v = s.to_numpy(dtype=float, na_value=np.nan)
        inf = np.isinf(v)
        if np.any(inf):
            i = int(np.argmax(inf))
            raise ValueError(f"column {name!r}{where} holds an infinite value ({_row(s, i, where)}); "
                             f"replace it with a number or leave the cell empty (missing)")
        return Column(name, "numeric", v)
    # text (object, string or category dtype): numbers written as text, or labels
    obs = s.dropna()
    if force != "numeric" and len(obs) and all(isinstance(v, (bool, np.bool_)) for v in obs):
        return _encode_categorical(s, name, where, max_levels, pd)
    parsed = pd.to_numeric(obs, errors="coerce")
    n_num = int(parsed.notna().sum())
    if isinstance(s.dtype, pd.CategoricalDtype) and force != "numeric":
        return _encode_categorical(s, name, where, max_levels, pd)
    if n_num == len(obs):
        v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        return _encode_column(pd.Series(v, index=s.index), name, where, force, max_levels, pd)
    if force == "numeric" or n_num >= len(obs) / 2:
        bad = parsed.isna()
        first = obs[bad].index[0]
        i = s.index.get_loc(first)
        raise ValueError(f"column {name!r}{where} is numeric but holds text in {int(bad.sum())} "
                         f"cell(s) (first: {_row(s, i, where)} = {clip(repr(obs[first]))}); fix those cells or leave "
                         f"them empty (empty cells are missing values and are masked), or declare "
                         f"the column categorical (categorical=[{name!r}])")
    return _encode_categorical(s, name, where, max_levels, pd)


def encode_table(data, columns=None, *, categorical=None, numeric=None, max_levels=None):
    """Encode ``data`` (anything :func:`read_table` takes) into a :class:`Table`.

    Each column becomes numeric (numbers, possibly written as text) or
    categorical (text, booleans, pandas categories). ``categorical`` (a list of
    names, or ``"all"``) forces columns to be categorical (integer labels such
    as 1/2/3 become categories); ``numeric`` forces columns to be numeric.
    A categorical column with more distinct values than ``max_levels`` (default:
    max(20, half the observed rows)) is refused as an identifier. Missing cells
    stay in the table (NaN / code -1); :meth:`Table.mask` marks the observed ones.
    """
    pd = require_pandas()
    df = read_table(data, columns)
    where = _source_name(df)
    cat = parse_columns(categorical) if categorical != "all" else list(df.columns)
    num = parse_columns(numeric) or []
    for group, label in ((cat or [], "categorical"), (num, "numeric")):
        unknown = [c for c in group if c not in df.columns]
        if unknown:
            raise ValueError(f"{label}=: unknown column(s) {unknown}; columns: {list(df.columns)}")
    both = sorted(set(cat or []) & set(num))
    if both:
        raise ValueError(f"column(s) {both} are listed both as categorical and as numeric")
    cols = []
    for name in df.columns:
        force = "categorical" if name in (cat or []) else "numeric" if name in num else None
        cols.append(_encode_column(df[name], name, where, force, max_levels, pd))
    return Table(cols, df.index, source=df.attrs.get("source"))


def read_texts(data, column=None):
    """A list of documents (str) from a list/Series of strings, a DataFrame or a CSV
    file (``column``: the text column; default: the only text column). A missing
    text is an empty document (it keeps its row)."""
    pd = None
    if isinstance(data, (list, tuple)) and all(isinstance(t, str) or t is None for t in data):
        return ["" if t is None else t for t in data]
    pd = require_pandas()
    if isinstance(data, pd.Series):
        return ["" if pd.isna(t) else str(t) for t in data]
    df = read_table(data, None if column is None else [column])
    if column is None:
        text_cols = [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c].dtype)]
        if len(text_cols) != 1:
            raise ValueError(f"pick the text column with columns=[...] (--columns); text columns"
                             f"{_source_name(df)}: {text_cols or 'none'}")
        column = text_cols[0]
    s = df[column]
    if pd.api.types.is_numeric_dtype(s.dtype) and not s.isna().all():
        raise ValueError(f"column {column!r}{_source_name(df)} holds numbers, not text; pick the "
                         f"text column with columns=[...] (--columns)")
    return ["" if pd.isna(t) else str(t) for t in s]


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
    X, _ = _expand(table, recipe)
    return _with_intercept(X, recipe["intercept"])


def _input_terms(recipe):
    out = []
    for c in recipe["columns"]:
        out.extend([f"{c}[{lv}]" for lv in recipe["levels"][c][1:]] if c in recipe["levels"] else [c])
    return out


# ---- regression: results -------------------------------------------------------------------
def weights_posterior(model, node="w"):
    """Posterior mean and covariance of the regression weights on the original scale
    of the columns: (A m, A S A^T) with A = ``model.meta["to_original"]`` (exact: a
    linear map of the Gaussian q(w))."""
    q = model[node].posterior
    A = model.meta.get("to_original")
    if A is None:
        return q.mean, q.cov
    return A @ q.mean, A @ q.cov @ A.T


def linear_predictor(model, X_new, node="w"):
    """Mean and variance of a = x . w under q for new rows (see :func:`design_rows`)."""
    X = design_rows(model.meta["design"], X_new)
    m, S = weights_posterior(model, node)
    return X @ m, np.einsum("ni,ij,nj->n", X, S, X)


def prior_precision(model, node="w"):
    """(P,) diagonal of the weights' prior precision on the fit scale: E[alpha] for a
    Gamma precision node (shared or one per weight), else the fixed matrix's diagonal."""
    w = model[node]
    prec = w.factor.parents[1]
    P = np.shape(w.posterior.mean)[-1]
    if prec.stochastic:
        return np.broadcast_to(prec.posterior.mean, (P,))
    return np.diag(prec.moments()[0])


def prior_sd(model, node="w"):
    """Prior sd of each weight on the original scale: sqrt(diag(A diag(1/prec) A^T))."""
    prec = prior_precision(model, node)
    A = model.meta.get("to_original")
    A = np.eye(len(prec)) if A is None else A
    return np.sqrt(np.einsum("ij,j,ij->i", A, 1.0 / prec, A))


def interval_names(level=0.95):
    """Column names of a central ``level`` interval: ("q2.5", "q97.5") for 0.95."""
    return f"q{50 - 50 * level:g}", f"q{50 + 50 * level:g}"


def weights_summary(terms, mean, cov, level=0.95, **columns):
    """One row per weight: ``term``, ``mean``, ``sd``, the central ``level`` interval
    of the Gaussian marginal, then each of ``columns`` (name=array of one value per
    weight), in order."""
    from scipy import stats

    pd = require_pandas()
    mean = np.asarray(mean, dtype=float)
    sd = np.sqrt(np.diag(cov))
    zq = stats.norm.ppf(0.5 + level / 2)
    lo_name, hi_name = interval_names(level)
    return pd.DataFrame([{"term": t, "mean": mean[i], "sd": sd[i], lo_name: mean[i] - zq * sd[i],
                          hi_name: mean[i] + zq * sd[i],
                          **{k: np.asarray(v)[i] for k, v in columns.items()}}
                         for i, t in enumerate(terms)])


def training_predictions(model, predict):
    """``predict(model, rows)`` on the training rows that have every predictor; NaN for
    the others. ``predict`` may return an array or a tuple of arrays (one per row)."""
    X = model.meta["X"]
    ok = np.all(np.isfinite(X), axis=1)     # design_matrix guarantees at least one such row
    out = predict(model, X[ok][:, int(model.meta["design"]["intercept"]):])
    full = []
    for part in (out if isinstance(out, tuple) else (out,)):
        a = np.full(len(X), np.nan)
        a[ok] = part
        full.append(a)
    return tuple(full) if isinstance(out, tuple) else full[0]


def write_predictions(model, out_dir, **columns):
    """predictions.csv: the target and ``columns`` (name=array over the training rows),
    one line per row; returns its path."""
    pd = require_pandas()
    df = pd.DataFrame({model.meta["target"]: model.meta["y"], **columns})
    path = Path(out_dir) / "predictions.csv"
    df.to_csv(path, index_label="row")
    return path


# ---- prediction on new rows (the zoo's predict_table) -----------------------------------------
def new_rows(data, columns, model_name):
    """New rows for prediction as a DataFrame with ``columns`` (a DataFrame, a CSV path or
    a dict); a missing column is refused with a ValueError naming it."""
    df = read_table(data) if not hasattr(data, "columns") else data
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{model_name}.predict: the new rows lack the column(s) {missing}; "
                         f"they have {list(df.columns)}")
    return df


def level_codes(values, levels, column, model_name):
    """Codes of new categorical ``values`` by the training ``levels`` (compared as text:
    a CSV re-read gives 1 where training had "1"); -1 = missing. An unseen level is
    refused with a ValueError naming the column."""
    pd = require_pandas()
    index = {str(lv): i for i, lv in enumerate(levels)}
    out = np.full(len(values), -1, dtype=np.int64)
    unknown = set()
    for i, v in enumerate(values):
        if v is None or (not isinstance(v, str) and pd.isna(v)):
            continue
        key = str(v)
        if key not in index and isinstance(v, float) and float(v).is_integer():
            key = str(int(v))
        if key not in index:
            unknown.add(key)
        else:
            out[i] = index[key]
    if unknown:
        raise ValueError(f"{model_name}.predict: column {column!r} has levels {sorted(unknown)} not "
                         f"seen in training (known: {[str(lv) for lv in levels]})")
    return out


def normalise_log(logp):
    """Rows of log weights -> probabilities (log-sum-exp)."""
    from scipy.special import logsumexp
    return np.exp(logp - logsumexp(logp, axis=1, keepdims=True))


def assignment_table(resp, label="component"):
    """The most probable ``label`` and the probabilities p0..pK-1, one row per new row."""
    pd = require_pandas()
    df = pd.DataFrame(resp, columns=[f"p{k}" for k in range(resp.shape[1])])
    df.insert(0, label, resp.argmax(axis=1))
    return df


# ---- zoo results -----------------------------------------------------------------------------
def fitted_model(fit, zoo):
    """The Model of ``fit`` (a FitResult or a Model) after checking that the zoo model
    ``zoo`` built it (``model.meta["zoo"]``); a TypeError says what to pass."""
    model = getattr(fit, "model", fit)
    if getattr(model, "meta", {}).get("zoo") != zoo:
        raise TypeError(f"{zoo}: give the FitResult of a model built by {zoo}.build")
    return model


def responsibilities(model, node="z"):
    """(N, K) posterior probabilities of a mixture's assignments (any plates (N, 1, ...))."""
    r = np.asarray(model[node].posterior.mean)
    return r.reshape(r.shape[0], r.shape[-1])


def is_point(model, node):
    """True when ``node`` was fitted as a point mass (EM, ``point=``): its posterior is
    the point alone, with no spread, and a table should show it as an estimate."""
    return bool(model[node].posterior.is_point)


def point_table(df, posterior_sd=("mean_sd",), value="mean"):
    """A zoo table of point estimates (EM): the ``value`` column renamed ``estimate``
    (it is the MAP value, not a posterior mean; ``value=None`` keeps the name) and the
    posterior-sd columns dropped (a point mass has no posterior spread)."""
    df = df.drop(columns=[c for c in posterior_sd if c in df.columns])
    return df if value is None else df.rename(columns={value: "estimate"})


def mixture_weights(model, node="weights"):
    """E[w_k] = alpha_k / sum(alpha) of a Dirichlet weights node; for a point mass (EM),
    the point (the MAP weights)."""
    if is_point(model, node):
        return np.asarray(model[node].posterior.point, dtype=float)
    alpha = model[node].posterior.params["alpha"]
    return alpha / alpha.sum()


def write_assignments(resp, index, out_dir, label="component"):
    """assignments.csv: per row the most probable ``label`` and the probabilities p0..pK-1;
    returns its path."""
    pd = require_pandas()
    df = pd.DataFrame(resp, columns=[f"p{k}" for k in range(resp.shape[1])], index=index)
    df.insert(0, label, resp.argmax(axis=1))
    path = Path(out_dir) / "assignments.csv"
    df.to_csv(path, index_label="row")
    return path
