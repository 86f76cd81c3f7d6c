"""The zoo's outputs: new rows for prediction, category codes, assignment tables, the
fitted model of a FitResult, responsibilities, mixture weights, point estimates."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .tables import read_table, require_pandas


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


def numeric_cells(df, columns, model_name):
    """The cells of ``columns`` of new rows as floats (NaN = missing cell). A text cell or an
    infinite one is refused with a ValueError naming the column and the line of the CSV
    file (the row label for a DataFrame): inf is not a missing value."""
    from .tables import _encode_column, _source_name
    pd = require_pandas()
    where = _source_name(df)
    out = np.full((len(df), len(columns)), np.nan)
    for j, c in enumerate(columns):
        s = df[c]
        if s.isna().all():
            continue
        try:
            out[:, j] = _encode_column(s, c, where, "numeric", None, pd).values
        except ValueError as e:
            msg = str(e).replace(f", or declare the column categorical (categorical=[{c!r}])", "")
            raise ValueError(f"{model_name}.predict: {msg}") from None
    return out


def check_finite_rows(X, columns, model_name):
    """New rows given as an array: an infinite cell is refused naming its row and column
    (NaN cells are missing)."""
    inf = np.isinf(X)
    if inf.any():
        i, j = np.argwhere(inf)[0]
        raise ValueError(f"{model_name}.predict: the new rows hold an infinite value (row {i}, "
                         f"column {columns[j]!r}); give a number, or NaN for a missing cell")
    return X


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
    """(N, K) posterior probabilities of a mixture's assignments: z with plates (N,) or
    (N, 1, ..., 1) (one assignment per row); other plates are refused."""
    z = model[node]
    r = np.asarray(z.posterior.mean)
    plates = tuple(z.plates)
    if len(plates) < 1 or any(p != 1 for p in plates[1:]):
        raise ValueError(f"{z.label()}: responsibilities need one assignment per row, z with "
                         f"plates (N,) or (N, 1, ...); it has plates {plates} (read "
                         f"{node}.posterior.mean, shape plates + (K,), instead)")
    return r.reshape(plates[0], r.shape[-1])


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
    """E[w_k] = alpha_k / sum(alpha) of a Dirichlet weights node (of StickBreaking weights:
    E[pi_k], normalised when the last stick is a Beta too); for a point mass (EM), the
    point (the MAP weights)."""
    if is_point(model, node):
        return np.asarray(model[node].posterior.point, dtype=float)
    w = np.asarray(model[node].posterior.mean, dtype=float)
    return w / w.sum()


def write_assignments(resp, index, out_dir, label="component"):
    """assignments.csv: per row the most probable ``label`` and the probabilities p0..pK-1;
    returns its path."""
    pd = require_pandas()
    df = pd.DataFrame(resp, columns=[f"p{k}" for k in range(resp.shape[1])], index=index)
    df.insert(0, label, resp.argmax(axis=1))
    path = Path(out_dir) / "assignments.csv"
    df.to_csv(path, index_label="row")
    return path
