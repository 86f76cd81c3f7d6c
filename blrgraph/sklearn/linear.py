"""Regression and classification: ``BayesianRidge``, ``ARDRegression`` (the zoo's linreg,
hyper="evidence") and ``BayesianLogisticRegression`` (the zoo's logreg), docs/sklearn.md."""
from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

from ._common import BaseEstimator, RegressorMixin, _fit_quietly, check_is_fitted, validate_data


class _EvidenceRegression(RegressorMixin, BaseEstimator):
    """Shared by BayesianRidge / ARDRegression: zoo linreg with ``hyper="evidence"``."""

    _ard = False

    def _fit(self, X, y):
        from blrgraph.zoo import linreg
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True, multi_output=False)
        for name in ("alpha_1", "alpha_2", "lambda_1", "lambda_2"):
            v = getattr(self, name)
            if not (np.isscalar(v) and v > 0):
                raise ValueError(f"{type(self).__name__}: {name} must be a positive number, got {v!r}")
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, (int, np.integer)) \
                or self.max_iter < 1:
            raise ValueError(f"{type(self).__name__}: max_iter must be an integer >= 1, got {self.max_iter!r}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            model = linreg.build((X, y), ard=self._ard, intercept=self.fit_intercept,
                                 standardize=False, hyper="evidence",
                                 weight_prior=(self.lambda_1, self.lambda_2),
                                 noise_prior=(self.alpha_1, self.alpha_2))
        stop = _CoefTol(model["w"], self.tol)
        opts = dict(model.meta["fit_options_by_method"]["em"], max_iter=self.max_iter, tol=0.0,
                    callback=stop)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit("em", **opts)
        self._model = model
        m, S = model["w"].posterior.mean, model["w"].posterior.cov
        self.coef_ = np.array(m, dtype=float)
        self.sigma_ = np.array(S, dtype=float)
        self.alpha_ = float(model["tau"].posterior.point)
        lam = np.asarray(model["alpha"].posterior.point, dtype=float)
        self.lambda_ = lam if self._ard else float(lam)
        self.n_iter_ = int(stop.n_iter)
        offset = model.meta["offset"]
        A = model.meta["to_original"]
        self.intercept_ = float(offset[0] + A[0] @ m) if self.fit_intercept else 0.0
        self.X_offset_ = -A[0] if self.fit_intercept else np.zeros(X.shape[1])
        return self

    def predict(self, X, return_std=False):
        """Predictive mean (and sd: sqrt(x^T sigma_ x + 1/alpha_), with x centred, as
        scikit-learn's ``return_std``)."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        mean = X @ self.coef_ + self.intercept_
        if not return_std:
            return mean
        Xc = X - self.X_offset_
        var = np.einsum("ni,ij,nj->n", Xc, self.sigma_, Xc) + 1.0 / self.alpha_
        return mean, np.sqrt(var)

    def score(self, X, y, sample_weight=None):
        """Mean log predictive density of the targets (Normal(mean, sd) of ``predict``)."""
        mean, sd = self.predict(X, return_std=True)
        y = np.asarray(y, dtype=float).ravel()
        lp = stats.norm.logpdf(y, mean, sd)
        return float(np.average(lp, weights=sample_weight))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = True   # score is a log density, not R^2
        return tags


class _CoefTol:
    """scikit-learn's stopping rule of BayesianRidge / ARDRegression:
    sum |coef_t - coef_{t-1}| < tol (read from q(w) through ``fit(callback=)``)."""

    def __init__(self, w, tol):
        self.w, self.tol, self.prev, self.n_iter = w, tol, None, 0

    def __call__(self, it, elbo):
        self.n_iter = it
        m = np.array(self.w.posterior.mean, dtype=float)
        done = self.prev is not None and np.sum(np.abs(m - self.prev)) < self.tol
        self.prev = m
        return done


class BayesianRidge(_EvidenceRegression):
    """scikit-learn's BayesianRidge (one weight precision lambda_, noise precision
    alpha_, both type-II ML with Gamma hyperpriors) as zoo linreg with
    ``ard=False, hyper="evidence"`` fitted by EM. ``tol``: scikit-learn's rule, the
    sum of the absolute changes of the coefficients."""

    def __init__(self, *, max_iter=300, tol=1e-3, alpha_1=1e-6, alpha_2=1e-6, lambda_1=1e-6,
                 lambda_2=1e-6, fit_intercept=True):
        self.max_iter = max_iter
        self.tol = tol
        self.alpha_1 = alpha_1
        self.alpha_2 = alpha_2
        self.lambda_1 = lambda_1
        self.lambda_2 = lambda_2
        self.fit_intercept = fit_intercept

    def fit(self, X, y):
        return self._fit(X, y)


class ARDRegression(_EvidenceRegression):
    """scikit-learn's ARDRegression (one precision per weight, type-II ML) as zoo
    linreg with ``ard=True, hyper="evidence"``; coefficients whose precision exceeds
    ``threshold_lambda`` are set to 0, as scikit-learn prunes them."""

    _ard = True

    def __init__(self, *, max_iter=300, tol=1e-3, alpha_1=1e-6, alpha_2=1e-6, lambda_1=1e-6,
                 lambda_2=1e-6, threshold_lambda=1e4, fit_intercept=True):
        self.max_iter = max_iter
        self.tol = tol
        self.alpha_1 = alpha_1
        self.alpha_2 = alpha_2
        self.lambda_1 = lambda_1
        self.lambda_2 = lambda_2
        self.threshold_lambda = threshold_lambda
        self.fit_intercept = fit_intercept

    def fit(self, X, y):
        self._fit(X, y)
        pruned = self.lambda_ > self.threshold_lambda
        if pruned.any():
            self.coef_[pruned] = 0.0
            if self.fit_intercept:
                self.intercept_ = float(self._model.meta["offset"][0] - self.X_offset_ @ self.coef_)
        return self


# ------------------------------------------------------------------------------- classification
class BayesianLogisticRegression(BaseEstimator):
    """Bayesian logistic regression (zoo ``logreg``, fit("ncvmp")): two classes, q(w)
    Gaussian. ``prior``: "fixed" (precision ``prior_precision``), "gamma" or "ard"
    (learnt precisions); ``standardize`` as the zoo's. ``predict_proba`` = E_q[sigmoid];
    ``score`` = mean log predictive probability of the held-out labels."""

    def __init__(self, *, prior="fixed", prior_precision=1.0, fit_intercept=True, standardize=True,
                 max_iter=2000, tol=1e-10):
        self.prior = prior
        self.prior_precision = prior_precision
        self.fit_intercept = fit_intercept
        self.standardize = standardize
        self.max_iter = max_iter
        self.tol = tol

    def fit(self, X, y):
        from sklearn.utils.multiclass import check_classification_targets
        from blrgraph.zoo import logreg
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        if len(self.classes_) != 2:
            raise ValueError(f"BayesianLogisticRegression: Only binary classification is supported. "
                             f"y has {len(self.classes_)} classes ({self.classes_[:5]}); for more, "
                             f"fit one model per class (sklearn.multiclass.OneVsRestClassifier)")
        if not (np.isscalar(self.prior_precision) and self.prior_precision > 0):
            raise ValueError(f"BayesianLogisticRegression: prior_precision must be > 0, got "
                             f"{self.prior_precision!r}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            model = logreg.build((X, codes.astype(float)), intercept=self.fit_intercept, prior=self.prior,
                                 prior_precision=self.prior_precision, standardize=self.standardize)
        fit = _fit_quietly(model, logreg.DEFAULT_METHOD, max_iter=self.max_iter, tol=self.tol)
        self._model = model
        m, S = _weights(model)
        k = int(self.fit_intercept)
        self.coef_ = m[None, k:]
        self.intercept_ = np.array([m[0] if k else 0.0])
        self.coef_cov_ = S
        self.n_iter_ = len(fit.elbo_trace)
        return self

    def predict_proba(self, X):
        from blrgraph.zoo import logreg
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        p1 = np.clip(logreg.predict_proba(self._model, X), 0.0, 1.0)
        return np.column_stack([1.0 - p1, p1])

    def predict_log_proba(self, X):
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def decision_function(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ self.coef_[0] + self.intercept_[0]

    def predict(self, X):
        check_is_fitted(self)
        return self.classes_[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]

    def score(self, X, y, sample_weight=None):
        """Mean log predictive probability of the labels y."""
        check_is_fitted(self)
        p = self.predict_proba(X)
        idx = np.searchsorted(self.classes_, np.asarray(y))
        idx = np.clip(idx, 0, 1)
        known = self.classes_[idx] == np.asarray(y)
        with np.errstate(divide="ignore"):
            lp = np.where(known, np.log(p[np.arange(len(p)), idx]), -np.inf)
        return float(np.average(lp, weights=sample_weight))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.estimator_type = "classifier"
        from sklearn.utils import ClassifierTags
        tags.classifier_tags = ClassifierTags(multi_class=False)
        return tags


def _weights(model):
    from blrgraph import io
    m, S = io.weights_posterior(model)
    return np.asarray(m, dtype=float), np.asarray(S, dtype=float)
