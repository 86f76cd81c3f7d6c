"""scikit-learn estimators over the zoo models (docs/sklearn.md; extra ``blrgraph[sklearn]``).

Each estimator stores its parameters in ``__init__`` (scikit-learn's convention), and
``fit`` builds the node graph of the matching zoo model (``blrgraph.zoo.*``) and fits
it: no second engine. ``score`` is the mean held-out log predictive density per
sample, so ``GridSearchCV`` chooses a number of components by predictive density.

    BayesianGaussianMixture     zoo gmm (full / diag), Dirichlet or stick-breaking weights
    BayesianRidge, ARDRegression  zoo linreg, hyper="evidence" (scikit-learn's models)
    BayesianLogisticRegression  zoo logreg
    LatentDirichletAllocation   zoo lda
    GaussianHMM                 zoo hmm
    ProbabilisticPCA            zoo pca
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy import stats
from scipy.special import logsumexp

try:
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


# ------------------------------------------------------------------------------- mixtures
class BayesianGaussianMixture(DensityMixin, BaseEstimator):
    """Variational Bayesian Gaussian mixture (zoo ``gmm``), scikit-learn's parameters.

    ``weight_concentration_prior_type="dirichlet_process"`` (default) puts
    ``bg.StickBreaking(gamma, K, truncated=False)`` weights on the components (scikit-
    learn's K Beta sticks), ``"dirichlet_distribution"`` a symmetric Dirichlet. Priors
    default as scikit-learn's: gamma = 1/K, mean precision 1, mean prior the data mean,
    degrees of freedom D, covariance prior the data covariance (per column for
    ``covariance_type="diag"``). ``tol``: the absolute change of the ELBO that ends a
    run; ``n_init`` runs (k-means starts with different seeds), the best ELBO kept.
    ``covariance_type`` "full" or "diag" ("tied" and "spherical" are refused)."""

    def __init__(self, n_components=1, *, covariance_type="full", tol=1e-3, max_iter=100,
                 n_init=1, init_params="kmeans", weight_concentration_prior_type="dirichlet_process",
                 weight_concentration_prior=None, mean_precision_prior=None, mean_prior=None,
                 degrees_of_freedom_prior=None, covariance_prior=None, random_state=None):
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.tol = tol
        self.max_iter = max_iter
        self.n_init = n_init
        self.init_params = init_params
        self.weight_concentration_prior_type = weight_concentration_prior_type
        self.weight_concentration_prior = weight_concentration_prior
        self.mean_precision_prior = mean_precision_prior
        self.mean_prior = mean_prior
        self.degrees_of_freedom_prior = degrees_of_freedom_prior
        self.covariance_prior = covariance_prior
        self.random_state = random_state

    def _check(self, X):
        K = self.n_components
        if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
            raise ValueError(f"BayesianGaussianMixture: n_components must be an integer >= 1, got {K!r}")
        if self.covariance_type not in ("full", "diag"):
            raise ValueError(f"BayesianGaussianMixture: covariance_type must be 'full' or 'diag', got "
                             f"{self.covariance_type!r} ('tied' and 'spherical' are not in the zoo gmm)")
        if self.weight_concentration_prior_type not in ("dirichlet_process", "dirichlet_distribution"):
            raise ValueError(f"BayesianGaussianMixture: weight_concentration_prior_type must be "
                             f"'dirichlet_process' or 'dirichlet_distribution', got "
                             f"{self.weight_concentration_prior_type!r}")
        if self.init_params not in ("kmeans", "k-means++", "random"):
            raise ValueError(f"BayesianGaussianMixture: init_params must be 'kmeans', 'k-means++' or "
                             f"'random', got {self.init_params!r}")
        for name in ("max_iter", "n_init"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"BayesianGaussianMixture: {name} must be an integer >= 1, got {v!r}")
        if not (np.isscalar(self.tol) and self.tol >= 0):
            raise ValueError(f"BayesianGaussianMixture: tol must be a number >= 0, got {self.tol!r}")
        if X.shape[0] < K:
            raise ValueError(f"BayesianGaussianMixture: n_components={K} needs at least {K} samples, "
                             f"got n_samples={X.shape[0]}")

    def _priors(self, X):
        N, D = X.shape
        K = self.n_components
        gamma = 1.0 / K if self.weight_concentration_prior is None else float(self.weight_concentration_prior)
        beta0 = 1.0 if self.mean_precision_prior is None else float(self.mean_precision_prior)
        m0 = X.mean(axis=0) if self.mean_prior is None else np.asarray(self.mean_prior, dtype=float)
        nu0 = float(D) if self.degrees_of_freedom_prior is None else float(self.degrees_of_freedom_prior)
        if self.covariance_type == "full":
            cov0 = (np.atleast_2d(np.cov(X.T)) if self.covariance_prior is None
                    else np.atleast_2d(np.asarray(self.covariance_prior, dtype=float)))
        else:
            cov0 = (np.var(X, axis=0, ddof=1) if self.covariance_prior is None
                    else np.asarray(self.covariance_prior, dtype=float) * np.ones(D))
        return gamma, beta0, m0, nu0, cov0

    def _start(self, X, rng):
        if self.init_params != "kmeans":
            return {"k-means++": "kmeans++", "random": "random"}[self.init_params]
        from sklearn.cluster import KMeans
        labels = KMeans(n_clusters=self.n_components, n_init=1, random_state=rng).fit(X).labels_
        R = np.zeros((len(X), self.n_components))
        R[np.arange(len(X)), labels] = 1.0
        return R

    def fit(self, X, y=None):
        from blrgraph.zoo import gmm
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2)
        self._check(X)
        gamma, beta0, m0, nu0, cov0 = self._priors(X)
        rng = check_random_state(self.random_state)
        best = None
        for _ in range(self.n_init):
            model = gmm.build(X, k=self.n_components, covariance=self.covariance_type, alpha=gamma,
                              beta0=beta0, m0=m0, nu0=nu0, cov0=cov0,
                              weights={"dirichlet_process": "dirichlet_process",
                                       "dirichlet_distribution": "dirichlet"}[
                                  self.weight_concentration_prior_type])
            stop = _AbsoluteTol(self.tol)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = model.fit("vmp", init=self._start(X, rng), seed=int(rng.randint(2 ** 31 - 1)),
                                max_iter=self.max_iter, tol=0.0, callback=stop)
            if best is None or fit.elbo > best[1].elbo:
                best = (model, fit, stop)
        model, fit, stop = best
        if not stop.converged:
            warnings.warn(f"BayesianGaussianMixture: the best of {self.n_init} runs did not converge "
                          f"in max_iter={self.max_iter} iterations; raise max_iter or tol",
                          ConvergenceWarning, stacklevel=2)
        self._model = model
        comp = _components(model)
        self.weights_ = np.asarray(comp["weight"], dtype=float)
        self.means_ = np.asarray(comp["mean"], dtype=float)
        cov = gmm.component_covariances(model)
        if self.covariance_type == "full":
            self.covariances_ = cov
            self.precisions_ = np.linalg.inv(cov)
            # scikit-learn's precisions_cholesky_: U with U U^T = precision (upper triangular)
            self.precisions_cholesky_ = np.linalg.cholesky(self.precisions_[:, ::-1, ::-1])[:, ::-1, ::-1]
        else:
            self.covariances_ = np.diagonal(cov, axis1=1, axis2=2).copy()
            self.precisions_ = 1.0 / self.covariances_
            self.precisions_cholesky_ = np.sqrt(self.precisions_)
        self.lower_bound_ = float(fit.elbo)
        self.converged_ = bool(stop.converged)
        self.n_iter_ = int(stop.n_iter)
        return self

    def _log_joint(self, X):
        """(n, K): log E[w_k] + log of component k's Student-t posterior predictive."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        comp = _components(self._model)
        loc, shape, df = comp["predictive"]
        K = len(self.weights_)
        out = np.empty((len(X), K))
        for k in range(K):
            if self.covariance_type == "full":
                lp = stats.multivariate_t(loc=loc[k], shape=shape[k], df=df[k]).logpdf(X)
            else:
                lp = stats.t.logpdf(X, df=df[k], loc=loc[k], scale=np.sqrt(shape[k])).sum(axis=1)
            out[:, k] = np.log(self.weights_[k]) + np.atleast_1d(lp)
        return out

    def score_samples(self, X):
        """Log posterior predictive density of each sample (the mixture of the
        components' Student-t predictives, weighted by E[w])."""
        return logsumexp(self._log_joint(X), axis=1)

    def score(self, X, y=None):
        """Mean log posterior predictive density per sample (held-out data: the
        criterion GridSearchCV maximises)."""
        return float(np.mean(self.score_samples(X)))

    def predict_proba(self, X):
        lj = self._log_joint(X)
        return np.exp(lj - logsumexp(lj, axis=1, keepdims=True))

    def predict(self, X):
        return self._log_joint(X).argmax(axis=1)

    def fit_predict(self, X, y=None):
        return self.fit(X).predict(X)

    def sample(self, n_samples=1):
        """(X, labels): n_samples draws from the fitted mixture (weights_, means_,
        covariances_, as scikit-learn's ``sample``)."""
        check_is_fitted(self)
        if n_samples < 1:
            raise ValueError(f"BayesianGaussianMixture.sample: n_samples must be >= 1, got {n_samples}")
        rng = check_random_state(self.random_state)
        counts = rng.multinomial(n_samples, self.weights_ / self.weights_.sum())
        out = []
        for k, n in enumerate(counts):
            cov = self.covariances_[k] if self.covariance_type == "full" else np.diag(self.covariances_[k])
            out.append(rng.multivariate_normal(self.means_[k], cov, int(n)))
        labels = np.repeat(np.arange(len(counts)), counts)
        return np.vstack(out), labels


def _components(model):
    """gmm.components without its posterior sds (NaN for an empty component whose
    Wishart has dof <= D + 1, as scikit-learn's default prior dof = D allows)."""
    from blrgraph.zoo import gmm
    with np.errstate(invalid="ignore", divide="ignore"):
        return gmm.components(model)


# ------------------------------------------------------------------------------- regression
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


# ------------------------------------------------------------------------------- PCA
class ProbabilisticPCA(TransformerMixin, BaseEstimator):
    """Bayesian PCA (zoo ``pca``: ARD on the loadings, mean-field VB). ``noise``:
    "isotropic" (probabilistic PCA) or "diagonal" (factor analysis). ``transform``:
    E[x | y] under the fitted W, mu, tau; ``inverse_transform``: E[W] x + E[mu];
    ``score``: mean log density of y under the Gaussian with the posterior predictive's
    mean E[mu] and covariance E[W W^T] + E[1/tau] (moment-matched)."""

    def __init__(self, n_components=2, *, noise="isotropic", max_iter=1000, tol=1e-7, random_state=None):
        self.n_components = n_components
        self.noise = noise
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    def fit(self, X, y=None):
        from blrgraph.zoo import pca
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2)
        D = X.shape[1]
        if D < 2:
            raise ValueError(f"ProbabilisticPCA: needs at least 2 features, got n_features = {D}")
        k = self.n_components
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= D:
            raise ValueError(f"ProbabilisticPCA: n_components must be an integer in 1..n_features "
                             f"({D}), got {k!r}")
        model = pca.build(X, k=k, noise=self.noise)
        fit = _fit_quietly(model, "vmp", max_iter=self.max_iter, tol=self.tol,
                           seed=_seed(self.random_state))
        self._model = model
        meta = model.meta
        W = model["W"].posterior
        self.components_ = np.asarray(W.mean, dtype=float).T            # (k, D), fit scale
        self._WW = np.einsum("dk,dl->kl", W.mean, W.mean) + np.asarray(W.cov).sum(axis=0)
        self._WWt = W.mean @ W.mean.T + np.diag(np.trace(W.cov, axis1=1, axis2=2))
        self.mean_ = meta["center"] + np.asarray(model["mu"].posterior.mean) * meta["scale"]
        t = model["tau"].posterior
        self._tau = np.broadcast_to(np.asarray(t.mean, dtype=float), (D,))
        p = t.params
        self.noise_variance_ = np.broadcast_to(p["rate"] / (p["shape"] - 1.0), (D,)).astype(float)
        self.lower_bound_ = float(fit.elbo)
        self.n_iter_ = len(fit.elbo_trace)
        return self

    def _centred(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return (X - self.mean_) / self._model.meta["scale"]

    def transform(self, X):
        Y = self._centred(X)
        Wt = self.components_ * self._tau                                # E[W]^T diag(tau)
        prec = np.eye(len(Wt)) + np.einsum("kd,ld->kl", self.components_ * self._tau, self.components_) \
            + (self._WW - self.components_ @ self.components_.T) * self._tau.mean()
        return np.linalg.solve(prec, Wt @ Y.T).T

    def inverse_transform(self, X):
        check_is_fitted(self)
        return (np.asarray(X, dtype=float) @ self.components_) * self._model.meta["scale"] + self.mean_

    def score_samples(self, X):
        Y = self._centred(X)
        scale = self._model.meta["scale"]
        C = self._WWt + np.diag(self.noise_variance_)
        lp = stats.multivariate_normal(np.zeros(len(C)), C, allow_singular=True).logpdf(Y)
        return np.atleast_1d(lp) - np.log(scale).sum()

    def score(self, X, y=None):
        return float(np.mean(self.score_samples(X)))


# ------------------------------------------------------------------------------- LDA
class LatentDirichletAllocation(TransformerMixin, BaseEstimator):
    """Latent Dirichlet allocation (zoo ``lda``) on a document-term count matrix.

    ``learning_method="batch"``: ``fit("vmp")`` of the zoo model (its default start and
    schedule, ``max_iter`` sweeps at most, ``tol`` the relative ELBO change);
    ``"online"``: ``fit("svi")`` over documents, ``max_iter`` epochs, rho_t =
    (learning_offset + t)^-learning_decay. ``partial_fit``: one SVI step on the given
    documents, scaled to ``total_samples`` documents, as scikit-learn's.
    ``components_`` (K, V): the topics' Dirichlet parameters lambda. ``transform``:
    the normalised E[theta_d] of each document's E-step with the topics fixed;
    ``score``: the mean per document of its ELBO term (a lower bound on log p(w_d));
    ``perplexity``: exp(-bound / word count), the bound of scikit-learn's
    ``perplexity`` (documents plus the topics' term, docs/math.md §3.5)."""

    def __init__(self, n_components=10, *, doc_topic_prior=None, topic_word_prior=None,
                 learning_method="batch", learning_decay=0.7, learning_offset=10.0, max_iter=500,
                 batch_size=128, total_samples=1e6, tol=1e-6, mean_change_tol=1e-3,
                 max_doc_update_iter=100, random_state=None):
        self.n_components = n_components
        self.doc_topic_prior = doc_topic_prior
        self.topic_word_prior = topic_word_prior
        self.learning_method = learning_method
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.total_samples = total_samples
        self.tol = tol
        self.mean_change_tol = mean_change_tol
        self.max_doc_update_iter = max_doc_update_iter
        self.random_state = random_state

    def _counts(self, X, reset):
        import scipy.sparse as sp
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=reset)
        data = X.data if sp.issparse(X) else X
        if np.any(data < 0):
            raise ValueError("LatentDirichletAllocation: Negative values in data passed to the "
                             "document-term matrix; it holds word counts >= 0")
        return sp.csr_matrix(X)

    def _check(self):
        K = self.n_components
        if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
            raise ValueError(f"LatentDirichletAllocation: n_components must be an integer >= 1, got {K!r}")
        if self.learning_method not in ("batch", "online"):
            raise ValueError(f"LatentDirichletAllocation: learning_method must be 'batch' or 'online', "
                             f"got {self.learning_method!r}")
        self.alpha_ = 1.0 / K if self.doc_topic_prior is None else float(self.doc_topic_prior)
        self.eta_ = 1.0 / K if self.topic_word_prior is None else float(self.topic_word_prior)
        if not (self.alpha_ > 0 and self.eta_ > 0):
            raise ValueError("LatentDirichletAllocation: doc_topic_prior and topic_word_prior must be > 0")

    def fit(self, X, y=None):
        from blrgraph.zoo import lda
        counts = self._counts(X, reset=True)
        self._check()
        model = lda.build(counts, k=self.n_components, alpha=self.alpha_, eta=self.eta_, stop_words=None)
        if self.learning_method == "batch":
            opts = dict(model.meta["fit_options"], max_iter=self.max_iter, tol=self.tol)
            fit = _fit_quietly(model, "vmp", seed=_seed(self.random_state), **opts)
        else:
            opts = dict(model.meta["fit_options_by_method"]["svi"],
                        batch_size=min(self.batch_size, counts.shape[0]), epochs=self.max_iter,
                        tau=self.learning_offset, kappa=self.learning_decay)
            fit = _fit_quietly(model, "svi", seed=_seed(self.random_state), **opts)
        self.components_ = np.array(model["phi"].posterior.params["alpha"], dtype=float)
        self.n_iter_ = int(len(fit.elbo_trace))
        self.n_batch_iter_ = self.n_iter_ if self.learning_method == "online" else 1
        return self

    def partial_fit(self, X, y=None):
        """One online step on the documents X: their E-step with the topics fixed, then
        lambda <- (1 - rho) lambda + rho (eta + total_samples / |X| * sstats), rho =
        (learning_offset + n_batch_iter_)^-learning_decay (scikit-learn's online step)."""
        first = not hasattr(self, "components_")
        counts = self._counts(X, reset=first)
        if first:
            self._check()
            rng = check_random_state(self.random_state)
            self.components_ = rng.gamma(100.0, 0.01, (self.n_components, counts.shape[1]))
            self.n_batch_iter_ = 1
            self.n_iter_ = 0
        _, sstats = self._e_step(counts)
        rho = (self.learning_offset + self.n_batch_iter_) ** -self.learning_decay
        scale = self.total_samples / counts.shape[0]
        self.components_ = (1.0 - rho) * self.components_ + rho * (self.eta_ + scale * sstats)
        self.n_batch_iter_ += 1
        self.n_iter_ += 1
        return self

    def _e_step(self, counts):
        """Each document's q(theta_d) = Dir(gamma_d) and its words' q(z) with the topics
        fixed at q(phi) = Dir(components_), alternated until the mean change of gamma_d is
        below mean_change_tol (each document stops on its own); returns (gamma, sstats)
        with sstats[k, v] = sum_d n_dv r_dvk."""
        from scipy.special import digamma
        lam = self.components_
        K = lam.shape[0]
        coo = counts.tocoo()
        M = counts.shape[0]
        elog_phi = digamma(lam) - digamma(lam.sum(axis=1, keepdims=True))
        ll = elog_phi[:, coo.col].T                                        # (nnz, K)
        n_d = np.asarray(counts.sum(axis=1)).ravel()
        g = np.ones((M, K))
        active = np.ones(M, dtype=bool)

        def resp(g):
            elog_theta = digamma(g) - digamma(g.sum(axis=1, keepdims=True))
            lr = elog_theta[coo.row] + ll
            r = np.exp(lr - lr.max(axis=1, keepdims=True))
            return r / r.sum(axis=1, keepdims=True)

        for _ in range(self.max_doc_update_iter):
            r = resp(g)
            new = self.alpha_ + np.stack([np.bincount(coo.row, coo.data * r[:, k], minlength=M)
                                          for k in range(K)], axis=1)
            change = np.mean(np.abs(new - g), axis=1)
            g = np.where(active[:, None], new, g)
            active &= change >= self.mean_change_tol
            if not active.any():
                break
        r = resp(g)
        sstats = np.stack([np.bincount(coo.col, coo.data * r[:, k], minlength=counts.shape[1])
                           for k in range(K)])
        del n_d
        return g, sstats

    def transform(self, X):
        check_is_fitted(self)
        g, _ = self._e_step(self._counts(X, reset=False))
        return g / g.sum(axis=1, keepdims=True)

    def _doc_bounds(self, counts, g):
        """Per document: sum_w n_dw logsumexp_k(E log theta_dk + E log phi_kw) plus
        E[log p(theta_d)] - E[log q(theta_d)] (docs/math.md §3.5)."""
        from scipy.special import digamma, gammaln
        lam, a = self.components_, self.alpha_
        K = lam.shape[0]
        coo = counts.tocoo()
        elog_phi = digamma(lam) - digamma(lam.sum(axis=1, keepdims=True))
        elog_theta = digamma(g) - digamma(g.sum(axis=1, keepdims=True))
        words = coo.data * logsumexp(elog_theta[coo.row] + elog_phi[:, coo.col].T, axis=1)
        out = np.bincount(coo.row, words, minlength=counts.shape[0])
        out += np.sum((a - g) * elog_theta + gammaln(g) - gammaln(a), axis=1)
        out += gammaln(K * a) - gammaln(g.sum(axis=1))
        return out

    def _topic_term(self):
        from scipy.special import digamma, gammaln
        lam, e = self.components_, self.eta_
        V = lam.shape[1]
        elog_phi = digamma(lam) - digamma(lam.sum(axis=1, keepdims=True))
        return float(np.sum((e - lam) * elog_phi) + np.sum(gammaln(lam) - gammaln(e))
                     + np.sum(gammaln(e * V) - gammaln(lam.sum(axis=1))))

    def score(self, X, y=None):
        """Mean per document of its ELBO term: a lower bound on the held-out log
        p(w_d | data), the topics integrated over q(phi)."""
        check_is_fitted(self)
        counts = self._counts(X, reset=False)
        g, _ = self._e_step(counts)
        return float(np.mean(self._doc_bounds(counts, g)))

    def perplexity(self, X):
        """exp(-(sum_d bound_d + topics' term) / word count), scikit-learn's definition."""
        check_is_fitted(self)
        counts = self._counts(X, reset=False)
        g, _ = self._e_step(counts)
        bound = self._doc_bounds(counts, g).sum() + self._topic_term()
        return float(np.exp(-bound / counts.sum()))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.input_tags.sparse = True
        return tags


# ------------------------------------------------------------------------------- HMM
class GaussianHMM(BaseEstimator):
    """Hidden Markov model with Gaussian emissions (zoo ``hmm``: variational Bayes,
    q of each state sequence by forward-backward), with hmmlearn's conventions:
    ``fit(X, lengths=...)`` (X the concatenated sequences, ``lengths`` their lengths;
    by keyword, since scikit-learn passes y second), ``predict`` = Viterbi,
    ``predict_proba`` = the state marginals, ``sample``; ``startprob_``, ``transmat_``,
    ``means_``, ``covars_`` (K, D, D) the posterior means. New sequences are decoded
    with the fitted q held fixed (the E-step of the fit: unary E[log p(x | theta_k)],
    transitions E[log A]); ``score`` is log Z of that E-step per sample (a lower bound
    on the held-out log predictive; hmmlearn's ``score`` is a total)."""

    def __init__(self, n_components=1, *, covariance_type="diag", n_iter=1000, tol=1e-8,
                 startprob_prior=1.0, transmat_prior=1.0, sticky=0.0, random_state=None):
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.n_iter = n_iter
        self.tol = tol
        self.startprob_prior = startprob_prior
        self.transmat_prior = transmat_prior
        self.sticky = sticky
        self.random_state = random_state

    @staticmethod
    def _lengths(X, lengths):
        if lengths is None:
            return np.array([len(X)])
        lengths = np.asarray(lengths)
        if lengths.ndim != 1 or lengths.dtype.kind not in "iu" or np.any(lengths < 1) \
                or lengths.sum() != len(X):
            raise ValueError(f"GaussianHMM: lengths must be positive integers summing to "
                             f"n_samples={len(X)}, got {lengths!r}")
        return lengths

    def fit(self, X, y=None, lengths=None):
        from blrgraph import io
        from blrgraph.zoo import hmm
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2)
        L = self._lengths(X, lengths)
        K = self.n_components
        if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
            raise ValueError(f"GaussianHMM: n_components must be an integer >= 1, got {K!r}")
        if self.startprob_prior != self.transmat_prior:
            raise ValueError("GaussianHMM: the zoo hmm has one Dirichlet concentration for the "
                             "initial state and the transitions; give startprob_prior == transmat_prior")
        pd = io.require_pandas()
        df = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
        df["sequence"] = np.repeat(np.arange(len(L)), L)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            model = hmm.build(df, k=K, sequence_column="sequence", covariance=self.covariance_type,
                              alpha=float(self.transmat_prior), sticky=float(self.sticky))
        opts = dict(model.meta["fit_options"], max_iter=self.n_iter, tol=self.tol)
        fit = _fit_quietly(model, "vmp", seed=_seed(self.random_state), **opts)
        self._model = model
        self.startprob_ = np.asarray(model["initial"].posterior.mean, dtype=float)
        self.transmat_ = np.asarray(model["transition"].posterior.mean, dtype=float)
        p = model["theta"].posterior.params
        if self.covariance_type == "full":
            self.means_ = np.asarray(p["mean"], dtype=float)
            self.covars_ = np.linalg.inv(p["scale"]) / p["dof"][:, None, None]
        else:
            self.means_ = np.asarray(p["mean"], dtype=float).T
            var = (p["rate"] / p["shape"]).T
            self.covars_ = var[:, :, None] * np.eye(X.shape[1])
        self.lower_bound_ = float(fit.elbo)
        self.n_iter_ = len(fit.elbo_trace)
        self.converged_ = bool(fit.converged)
        return self

    def _potentials(self, X):
        """(log unary (N, K), log transition (K, K)) of the E-step under the fitted q."""
        from scipy.special import digamma
        model = self._model
        p = model["theta"].posterior.params
        D = X.shape[1]
        if self.covariance_type == "full":
            m, beta, nu, W = p["mean"], p["beta"], p["dof"], p["scale"]
            i = np.arange(1, D + 1)
            elogdet = (digamma(0.5 * (nu[:, None] + 1 - i)).sum(axis=1) + D * np.log(2.0)
                       + np.linalg.slogdet(W)[1])
            diff = X[:, None, :] - m[None]
            maha = D / beta + nu * np.einsum("nki,kij,nkj->nk", diff, W, diff)
            U = 0.5 * (elogdet - D * np.log(2 * np.pi) - maha)
        else:
            m, beta, a, b = (np.asarray(p[n]).T for n in ("mean", "beta", "shape", "rate"))
            diff2 = (X[:, None, :] - m[None]) ** 2                        # (N, K, D)
            U = 0.5 * np.sum(digamma(a) - np.log(b) - np.log(2 * np.pi) - (a / b) * diff2 - 1.0 / beta,
                             axis=2)
        alpha0 = model["initial"].posterior.params["alpha"]
        A = model["transition"].posterior.params["alpha"]
        elog_pi = digamma(alpha0) - digamma(alpha0.sum())
        elog_A = digamma(A) - digamma(A.sum(axis=1, keepdims=True))
        return U, elog_pi, elog_A

    def _chains(self, X, lengths):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        L = self._lengths(X, lengths)
        U, elog_pi, elog_A = self._potentials(X)
        S, T, K = len(L), int(L.max()), U.shape[1]
        seq = np.repeat(np.arange(S), L)
        step = np.arange(len(X)) - np.repeat(np.cumsum(L) - L, L)
        unary = np.zeros((S, T, K))
        unary[seq, step] = U
        unary[:, 0] += elog_pi
        return unary, elog_A, L, seq, step

    def predict_proba(self, X, lengths=None):
        from blrgraph.families.categorical_chain import forward_backward
        unary, P, L, seq, step = self._chains(X, lengths)
        return forward_backward(unary, P, L).marginals[seq, step]

    def predict(self, X, lengths=None):
        from blrgraph.families.categorical_chain import viterbi
        unary, P, L, seq, step = self._chains(X, lengths)
        return viterbi(unary, P, L)[seq, step]

    def score_samples(self, X, lengths=None):
        """(log_prob, posteriors) as hmmlearn's: the sum over the sequences of log Z of
        their E-step (a lower bound on the held-out log predictive) and the state
        marginals (n_samples, K)."""
        from blrgraph.families.categorical_chain import forward_backward
        unary, P, L, seq, step = self._chains(X, lengths)
        st = forward_backward(unary, P, L)
        return float(np.sum(st.log_z)), st.marginals[seq, step]

    def score(self, X, y=None, lengths=None):
        """Mean per sample of the held-out bound: log_prob of :meth:`score_samples` /
        n_samples (hmmlearn's ``score`` is the total)."""
        log_prob, _ = self.score_samples(X, lengths)
        return log_prob / len(np.asarray(X))

    def sample(self, n_samples=1, random_state=None):
        """(X, states): one sequence of n_samples steps from the fitted means (startprob_,
        transmat_, means_, covars_), as hmmlearn's ``sample``."""
        check_is_fitted(self)
        rng = check_random_state(self.random_state if random_state is None else random_state)
        K = len(self.startprob_)
        A = self.transmat_ / self.transmat_.sum(axis=1, keepdims=True)
        states = np.empty(n_samples, dtype=int)
        states[0] = rng.choice(K, p=self.startprob_ / self.startprob_.sum())
        for t in range(1, n_samples):
            states[t] = rng.choice(K, p=A[states[t - 1]])
        chol = np.linalg.cholesky(self.covars_)
        X = self.means_[states] + np.einsum("nij,nj->ni", chol[states],
                                            rng.standard_normal((n_samples, self.means_.shape[1])))
        return X, states
