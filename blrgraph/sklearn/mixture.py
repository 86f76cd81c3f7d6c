"""``BayesianGaussianMixture``: the zoo's gmm as scikit-learn's estimator (docs/sklearn.md)."""
from __future__ import annotations

import warnings

import numpy as np
from scipy import stats
from scipy.special import logsumexp

from ._common import (BaseEstimator, ConvergenceWarning, DensityMixin, _AbsoluteTol,
                      check_is_fitted, check_random_state, validate_data)


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
