"""``ProbabilisticPCA`` (the zoo's pca) and ``LatentDirichletAllocation`` (the zoo's lda),
docs/sklearn.md."""
from __future__ import annotations


import numpy as np
from scipy import stats
from scipy.special import logsumexp

from ._common import (BaseEstimator, TransformerMixin, _fit_quietly, _seed, check_is_fitted,
                      check_random_state, validate_data)


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
