"""What every estimator of ``blrgraph.sklearn`` shares: scikit-learn itself (the optional
extra), the seed, a fit that passes the engine's warnings on as scikit-learn's, a stop rule."""
from __future__ import annotations

import warnings

import numpy as np

try:  # noqa: F401 below: the estimators' modules read these from here
    from sklearn.base import BaseEstimator, DensityMixin, RegressorMixin, TransformerMixin
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.utils import check_random_state
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as err:      # pragma: no cover - the optional extra is missing
    raise ImportError("blrgraph.sklearn needs scikit-learn: pip install 'blrgraph[sklearn]'") from err


def _seed(random_state):
    """An integer seed for ``Model.fit(seed=)`` from scikit-learn's random_state."""
    return int(check_random_state(random_state).randint(np.iinfo(np.int32).max))


def _fit_quietly(model, method, **options):
    """``model.fit`` with the engine's ConvergenceWarning passed on as scikit-learn's."""
    from blrgraph.inference.loop import ConvergenceWarning as EngineConvergence
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = model.fit(method, **options)
    for w in caught:
        if issubclass(w.category, EngineConvergence):
            warnings.warn(str(w.message), ConvergenceWarning, stacklevel=3)
        elif not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning)):
            warnings.warn(w.message, w.category, stacklevel=3)
    return fit


class _AbsoluteTol:
    """A ``fit(callback=)`` that stops when the ELBO changes by less than ``tol``
    (scikit-learn's mixtures: the absolute change of the lower bound)."""

    def __init__(self, tol):
        self.tol, self.prev, self.n_iter, self.converged = tol, None, 0, False

    def __call__(self, it, elbo):
        self.n_iter = it
        done = self.prev is not None and abs(elbo - self.prev) < self.tol
        self.prev = elbo
        self.converged = self.converged or done
        return done
