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

from ..inference.jsonify import jsonable  # noqa: F401  (io.jsonable)
from .tables import Column, EXAMPLES, NA_VALUES, PANDAS_HINT, Table, _check_header, _encode_categorical, _encode_column, _row, _show_levels, _sort_levels, _source_name, clip, encode_table, example_path, load_example, parse_columns, read_table, read_texts, require_pandas  # noqa: F401
from .design import DesignMatrix, TARGET_KINDS, _check_target, _complete_rows, _expand, _input_terms, _standardize, _table_design, _with_intercept, design_matrix, design_rows, observed_mean_cov  # noqa: F401
from .results import held_out, interval_names, linear_predictor, prior_precision, prior_sd, training_predictions, weights_posterior, weights_summary, write_predictions  # noqa: F401
from .outputs import assignment_table, check_finite_rows, fitted_model, is_point, level_codes, mixture_weights, new_rows, normalise_log, numeric_cells, point_table, responsibilities, write_assignments  # noqa: F401
