"""Tables: CSV files and DataFrames -> arrays the engine can observe (read, select and
encode columns, texts); docs/api.md "Tables"."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np


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
    return Path(__file__).resolve().parent.parent / "data" / fname


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


def _as_frame(pd, source, na_values):
    """``source`` (a CSV path, a DataFrame, a Series, a dict of columns or an array) as a
    DataFrame, all its columns."""
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
    return df


def read_table(source, columns=None, *, na_values=None):
    """Read ``source`` into a DataFrame and keep ``columns`` (all when None).

    ``source`` is a path to a CSV file (first line = column names), a pandas
    DataFrame (copied), a dict of columns, or a numpy array (columns named
    x0, x1, ...). Cells that are empty, "NA", "NaN", "?" (see :data:`NA_VALUES`)
    are read as missing. An unknown column raises a ValueError listing the
    columns that exist.
    """
    pd = require_pandas()
    df = _as_frame(pd, source, na_values)
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
