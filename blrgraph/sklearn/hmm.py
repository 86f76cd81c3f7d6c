"""``GaussianHMM``: the zoo's hmm as an hmmlearn-like estimator (docs/sklearn.md)."""
from __future__ import annotations

import warnings

import numpy as np

from ._common import (BaseEstimator, _fit_quietly, _seed, check_is_fitted, check_random_state,
                      validate_data)


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
