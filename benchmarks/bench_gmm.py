"""VB Gaussian mixture (full covariance): blrgraph vs scikit-learn vs a hand-fused numpy floor.

All three run in this one process on the same data, the same priors and the same
starting responsibilities r0 ~ Dirichlet(1) drawn with ``np.random.default_rng(seed)``
(what ``fit("vmp", seed=seed)`` draws; sklearn's initialisation is overridden to use r0):

* blrgraph: ``Model(y).fit("vmp", max_iter=n+1, tol=0, seed=seed)``; 1 warm-up sweep,
  then n timed sweeps (time stamps from ``callback``). Each sweep updates q(pi),
  q(mu, Lambda) then the responsibilities and evaluates the ELBO.
* sklearn: ``BayesianGaussianMixture(weight_concentration_prior_type="dirichlet_distribution",
  reg_covar=0, tol=0, max_iter=n, n_init=1)`` with the same priors. Its initial M-step
  from r0 + n iterations (E, M, lower bound) + ``predict_proba`` reach exactly the state
  blrgraph has after n+1 sweeps. Time per iteration = the interval between successive
  E-steps (iterations 2..n); ``fit time / n_iter_`` (which also carries the initial
  M-step and sklearn's final label E-step) is reported too.
* floor: Bishop 10.46-10.63 in numpy with no Python loop over data, two variants:
  "gemm" (T(x) = [1, x, upper(x x^T)] precomputed once; one GEMM for the E-step and
  one for the M-step, all K at once) and "chol" (loop over K, Cholesky-whitened
  distances, weighted Gram matrices). The faster is the floor. Both monitor a bound
  each iteration, like the libraries do.

Quality is the full VB-GMM ELBO (docs/math.md §3.4, Bishop 10.70-10.77) of each fitted
(r, q(pi), q(mu, Lambda)), all through one function, :func:`evaluate_elbo`.

Memory: a separate short run (``--mem-iters``) of each under tracemalloc (numpy heap
peak) and with the RSS high-water mark reset (RSS growth).

Run ``python benchmarks/bench_gmm.py --quick`` (about a minute) or without ``--quick``
for the documented sizes; ``--profile-only`` profiles blrgraph's fit alone;
``--phi-rows 1e6,1e7`` times blrgraph alone (D=10, K=8) with Phi kept, streamed in chunks
above ``suffstats.MAX_BYTES``, or replaced by the per-entry formulas (docs/benchmarks.md §1.1).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (also puts the repository root on sys.path)

import numpy as np  # noqa: E402
from scipy.special import digamma, gammaln, multigammaln, xlogy  # noqa: E402

LOG2PI = np.log(2.0 * np.pi)


# =========================================================================================
# data and priors
# =========================================================================================
def make_data(N, D, K, seed=0, return_labels=False):
    """N points from a K-component Gaussian mixture in D dimensions (random means with
    spread 6, random covariances with eigenvalues ~ 0.5-3, Dirichlet(5) weights); with
    ``return_labels`` also each point's component."""
    rng = np.random.default_rng(1000 + seed)
    means = rng.normal(0.0, 6.0, size=(K, D))
    weights = rng.dirichlet(5.0 * np.ones(K))
    labels = rng.choice(K, size=N, p=weights)
    X = np.empty((N, D))
    for k in range(K):
        A = rng.normal(size=(D, D)) * 0.6
        cov = A @ A.T + 0.5 * np.eye(D)
        idx = np.flatnonzero(labels == k)
        X[idx] = means[k] + rng.standard_normal((len(idx), D)) @ np.linalg.cholesky(cov).T
    return (X, labels) if return_labels else X


def make_priors(X, alpha0=1.0, beta0=1.0, dof_extra=2.0):
    """m0 = data mean, W0 = inv(cov(X)) / nu0 (so E[Lambda] = inv(cov(X))), nu0 = D + dof_extra."""
    D = X.shape[1]
    nu0 = D + dof_extra
    W0 = np.linalg.inv(np.cov(X.T).reshape(D, D)) / nu0
    return {"alpha0": float(alpha0), "m0": X.mean(0), "beta0": float(beta0), "nu0": float(nu0),
            "W0": W0}


def sklearn_priors(X, K):
    """scikit-learn's own defaults for BayesianGaussianMixture(covariance_type="full",
    weight_concentration_prior_type="dirichlet_distribution") in this module's terms:
    weight_concentration_prior = 1/K, mean_prior = data mean, mean_precision_prior = 1,
    degrees_of_freedom_prior = D, covariance_prior = np.cov(X.T). sklearn's Wishart has
    scale matrix inv(covariance_prior) (its covariances_ = W_k^-1 / nu_k, with
    W_k^-1 = covariance_prior + ...), so W0 = inv(cov X), nu0 = D, E[Lambda] = D inv(cov X)."""
    X = np.asarray(X, float)
    D = X.shape[1]
    return {"alpha0": 1.0 / K, "m0": X.mean(0), "beta0": 1.0, "nu0": float(D),
            "W0": np.linalg.inv(np.atleast_2d(np.cov(X.T)))}


def priors_of_sklearn(est):
    """The priors a fitted BayesianGaussianMixture (full covariance, Dirichlet weights)
    used, read from its resolved ``*_prior_`` attributes, in this module's terms."""
    return {"alpha0": float(est.weight_concentration_prior_), "m0": np.asarray(est.mean_prior_, float),
            "beta0": float(est.mean_precision_prior_), "nu0": float(est.degrees_of_freedom_prior_),
            "W0": np.linalg.inv(np.atleast_2d(est.covariance_prior_))}


def priors_differ(a, b):
    """Largest relative difference between two prior dicts (0 when they are the same priors)."""
    out = 0.0
    for k in ("alpha0", "m0", "beta0", "nu0", "W0"):
        x, y = np.asarray(a[k], float), np.asarray(b[k], float)
        out = max(out, float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-300)))
    return out


def initial_resp(N, K, seed):
    """The responsibilities fit("vmp", seed=seed) starts from (Dirichlet(1) draws)."""
    return np.random.default_rng(seed).dirichlet(np.ones(K), size=N)


# =========================================================================================
# the one ELBO used for every fitted parameter set (docs/math.md §3.4 full form)
# =========================================================================================
def _log_wishart_B(W, nu):
    """log B(W, nu) (Bishop B.79)."""
    D = W.shape[-1]
    logdet = np.linalg.slogdet(W)[1]
    nu = np.asarray(nu, float)
    mg = np.array([multigammaln(0.5 * v, D) for v in np.ravel(nu)]).reshape(np.shape(nu))
    return -0.5 * nu * logdet - 0.5 * nu * D * np.log(2.0) - mg


def _e_log_det(W, nu):
    D = W.shape[-1]
    i = np.arange(1, D + 1)
    return digamma(0.5 * (np.asarray(nu, float)[..., None] + 1 - i)).sum(-1) + D * np.log(2.0) \
        + np.linalg.slogdet(W)[1]


def _log_dir_C(a):
    return gammaln(np.sum(a)) - np.sum(gammaln(a))


def evaluate_elbo(X, r, params, priors=None, parts=False, *, alpha0=None, m0=None, beta0=None, nu0=None,
                  W0=None):
    """Full VB-GMM ELBO, Bishop 10.70-10.77 term by term (valid for any r and q(theta)).

    params: alpha (K,), m (K, D), beta (K,), nu (K,), W (K, D, D) with E[Lambda_k] = nu_k W_k.
    The priors Dir(alpha0) NW(m0, beta0, nu0, W0) come from ``priors`` (a dict with those
    keys: make_priors, sklearn_priors, priors_of_sklearn) and/or the keyword arguments
    (a keyword overrides the dict's entry): alpha0 scalar or (K,), m0 (D,), beta0 > 0,
    nu0 > D - 1, W0 (D, D) symmetric positive definite."""
    pri = dict(priors or {})
    for k, v in (("alpha0", alpha0), ("m0", m0), ("beta0", beta0), ("nu0", nu0), ("W0", W0)):
        if v is not None:
            pri[k] = v
    missing = [k for k in ("alpha0", "m0", "beta0", "nu0", "W0") if k not in pri]
    if missing:
        raise TypeError(f"evaluate_elbo: the priors {missing} are missing (pass priors= or the keywords)")
    X = np.asarray(X, float)
    r = np.asarray(r, float)
    N, D = X.shape
    K = r.shape[1]
    alpha, m, beta, nu, W = (np.asarray(params[k], float) for k in ("alpha", "m", "beta", "nu", "W"))
    a0 = np.broadcast_to(np.asarray(pri["alpha0"], float), (K,))
    m0, beta0, nu0 = np.asarray(pri["m0"], float).reshape(D), float(pri["beta0"]), float(pri["nu0"])
    W0 = np.asarray(pri["W0"], float).reshape(D, D)
    if not (np.all(a0 > 0) and beta0 > 0 and nu0 > D - 1):
        raise ValueError(f"evaluate_elbo: priors need alpha0 > 0, beta0 > 0, nu0 > D - 1 = {D - 1} "
                         f"(got alpha0={pri['alpha0']}, beta0={beta0}, nu0={nu0})")
    W0inv = np.linalg.inv(W0)
    Nk = r.sum(0)
    safe = np.maximum(Nk, 1e-300)
    xbar = (r.T @ X) / safe[:, None]
    S = np.empty((K, D, D))
    for k in range(K):
        d = X - xbar[k]
        S[k] = (d * r[:, k, None]).T @ d / safe[k]
    elogpi = digamma(alpha) - digamma(alpha.sum())
    elogdet = _e_log_det(W, nu)
    dx, dm = xbar - m, m - m0
    quad_x = np.einsum("ki,kij,kj->k", dx, W, dx)
    quad_m = np.einsum("ki,kij,kj->k", dm, W, dm)
    trSW = np.einsum("kij,kji->k", S, W)
    trW0W = np.einsum("ij,kji->k", W0inv, W)
    e_px = 0.5 * np.sum(Nk * (elogdet - D / beta - nu * trSW - nu * quad_x - D * LOG2PI))
    e_pz = np.sum(Nk * elogpi)
    e_ppi = _log_dir_C(a0) + np.sum((a0 - 1) * elogpi)
    e_pml = 0.5 * np.sum(D * np.log(beta0 / (2 * np.pi)) + elogdet - D * beta0 / beta
                         - beta0 * nu * quad_m) \
        + K * _log_wishart_B(W0, nu0) + 0.5 * (nu0 - D - 1) * np.sum(elogdet) \
        - 0.5 * np.sum(nu * trW0W)
    e_qz = float(np.sum(xlogy(r, r)))
    e_qpi = np.sum((alpha - 1) * elogpi) + _log_dir_C(alpha)
    h_wish = -_log_wishart_B(W, nu) - 0.5 * (nu - D - 1) * elogdet + 0.5 * nu * D
    e_qml = np.sum(0.5 * elogdet + 0.5 * D * np.log(beta / (2 * np.pi)) - 0.5 * D - h_wish)
    total = float(e_px + e_pz + e_ppi + e_pml - e_qz - e_qpi - e_qml)
    if parts:
        return total, dict(px=e_px, pz=e_pz, ppi=e_ppi, pml=e_pml, qz=e_qz, qpi=e_qpi, qml=e_qml)
    return total


# =========================================================================================
# blrgraph
# =========================================================================================
def build_blrgraph(X, K, pri):
    import blrgraph as bg
    N, D = X.shape
    w = bg.Dirichlet(pri["alpha0"] * np.ones(K), name="w")
    theta = bg.NormalWishart(pri["m0"], pri["beta0"], pri["nu0"], pri["W0"], plates=(K,), name="theta")
    z = bg.Categorical(w, plates=(N,), name="z")
    y = bg.Mixture(z, bg.MultivariateNormal, theta, name="y").observe(X)
    return bg.Model(y), (w, theta, z)


def blrgraph_params(nodes):
    w, theta, z = nodes
    p = theta.posterior.params
    return np.asarray(z.posterior.mean), {"alpha": np.asarray(w.posterior.params["alpha"]),
                                          "m": p["mean"], "beta": p["beta"], "nu": p["dof"],
                                          "W": p["scale"]}


def run_blrgraph(X, K, pri, n_iter, seed, with_state=True):
    """Build + fit n_iter + 1 sweeps (1 warm-up). Returns timings and the fitted state."""
    t0 = time.perf_counter()
    model, nodes = build_blrgraph(X, K, pri)
    t_build = time.perf_counter() - t0
    cb, stamps, cpu = C.sweep_clock()
    t1 = time.perf_counter()
    fit = model.fit("vmp", max_iter=n_iter + 1, tol=0, seed=seed, callback=cb)
    t_fit = time.perf_counter() - t1
    it_time, ints = C.per_iter(stamps, skip=0)
    out = {"per_iter": it_time, "cpu_per_iter": C.per_iter(cpu, skip=0)[0], "intervals": ints,
           "build": t_build, "first_sweep": stamps[0] - t1, "fit_total": t_fit,
           "n_sweeps": fit.n_iter, "self_elbo": float(fit.elbo)}
    if with_state:
        out["r"], out["params"] = blrgraph_params(nodes)
    return out


# =========================================================================================
# scikit-learn
# =========================================================================================
def _sklearn_class():
    from sklearn.mixture import BayesianGaussianMixture

    class TimedBGM(BayesianGaussianMixture):
        """BayesianGaussianMixture starting from given responsibilities, with a time
        stamp at every E-step."""

        def _initialize_parameters(self, X, random_state, xp=None):
            self._initialize(X, self._r0)

        def _e_step(self, X, xp=None):
            self._stamps.append(time.perf_counter())
            self._cpu.append(time.process_time())
            return super()._e_step(X, xp=xp)

    return TimedBGM


def make_sklearn(K, pri, n_iter, r0):
    est = _sklearn_class()(
        n_components=K, covariance_type="full", weight_concentration_prior_type="dirichlet_distribution",
        weight_concentration_prior=pri["alpha0"], mean_prior=pri["m0"],
        mean_precision_prior=pri["beta0"], degrees_of_freedom_prior=pri["nu0"],
        covariance_prior=np.linalg.inv(pri["W0"]), reg_covar=0.0, tol=0.0, max_iter=n_iter,
        n_init=1, warm_start=False, random_state=0)
    est._r0 = r0
    est._stamps, est._cpu = [], []
    return est


def sklearn_params(est, X):
    nu = est.degrees_of_freedom_
    W = np.linalg.inv(est.covariances_ * nu[:, None, None])  # covariances_ = W_k^-1 / nu_k
    return est.predict_proba(X), {"alpha": est.weight_concentration_, "m": est.means_,
                                  "beta": est.mean_precision_, "nu": nu, "W": W}


def run_sklearn(X, K, pri, n_iter, r0, with_state=True):
    from sklearn.exceptions import ConvergenceWarning
    est = make_sklearn(K, pri, n_iter, r0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # tol=0: never "converges"
        t0 = time.perf_counter()
        est.fit(X)
        t_fit = time.perf_counter() - t0
    it_time, ints = C.per_iter(est._stamps, skip=1)
    out = {"per_iter": it_time, "cpu_per_iter": C.per_iter(est._cpu, skip=1)[0], "intervals": ints,
           "fit_over_n_iter": t_fit / est.n_iter_, "fit_total": t_fit,
           "n_iter_": int(est.n_iter_)}
    if with_state:
        out["r"], out["params"] = sklearn_params(est, X)
    return out


# =========================================================================================
# the numpy floor
# =========================================================================================
def _e_terms(alpha, nu, W_logdet, D):
    elogpi = digamma(alpha) - digamma(alpha.sum())
    i = np.arange(1, D + 1)
    elogdet = digamma(0.5 * (nu[:, None] + 1 - i)).sum(1) + D * np.log(2.0) + W_logdet
    return elogpi, elogdet


def _m_closed(Nk, Sx, Sxx, pri):
    """q(pi), q(mu, Lambda) from the weighted statistics (Bishop 10.58-10.63), with the
    Cholesky factor of W_k^-1. Returns (alpha, m, beta, nu, W, logdet W, normaliser part
    of the collapsed bound)."""
    a0, m0, beta0, nu0 = pri["alpha0"], pri["m0"], pri["beta0"], pri["nu0"]
    D = m0.shape[0]
    safe = np.maximum(Nk, 1e-300)
    xbar = Sx / safe[:, None]
    NkS = Sxx - safe[:, None, None] * np.einsum("ki,kj->kij", xbar, xbar)
    alpha = a0 + Nk
    beta = beta0 + Nk
    m = (beta0 * m0 + Sx) / beta[:, None]
    nu = nu0 + Nk
    dx = xbar - m0
    Winv = pri["_W0inv"] + NkS + (beta0 * Nk / beta)[:, None, None] * np.einsum("ki,kj->kij", dx, dx)
    Lc = np.linalg.cholesky(Winv)                              # Winv = Lc Lc^T
    Linv = np.linalg.inv(Lc)                                   # batched K x D x D, tiny
    W = np.einsum("kji,kjl->kil", Linv, Linv)                  # W = Lc^-T Lc^-1
    W_logdet = -2.0 * np.log(np.diagonal(Lc, axis1=1, axis2=2)).sum(1)
    # collapsed-bound normalisers (docs/math.md §3.4), except -sum r log r and -(ND/2) log 2pi
    K = Nk.shape[0]
    logB = -0.5 * nu * W_logdet - 0.5 * nu * D * np.log(2.0) - np.array(
        [multigammaln(0.5 * v, D) for v in nu])
    norm = (gammaln(K * a0) - K * gammaln(a0)) - (gammaln(alpha.sum()) - gammaln(alpha).sum()) \
        + np.sum(0.5 * D * np.log(beta0 / beta) + pri["_logB0"] - logB)
    return alpha, m, beta, nu, W, W_logdet, Linv, norm


def _prep_priors(pri):
    p = dict(pri)
    p["_W0inv"] = np.linalg.inv(pri["W0"])
    p["_logB0"] = float(_log_wishart_B(pri["W0"], pri["nu0"]))
    return p


def _softmax_inplace(logp):
    """logits (N, K) -> (responsibilities, sum_nk r log r); the logits are shifted in place
    and the responsibilities get one new N x K buffer."""
    logp -= logp.max(1, keepdims=True)
    r = np.exp(logp)
    s = r.sum(1)
    r /= s[:, None]
    # sum r log r = sum_nk r_nk (l_nk - log s_n) = sum_nk r_nk l_nk - sum_n log s_n
    rlogr = float(np.einsum("nk,nk->", r, logp) - np.log(s).sum())
    return r, rlogr


class FloorGemm:
    """T(x) = [1, x, upper(x x^T)] precomputed: E-step logits = T @ coef (one GEMM),
    M-step statistics = r^T @ T (one GEMM). O(N D^2) memory for T."""

    name = "gemm"

    def __init__(self, X, K, pri):
        N, D = X.shape
        self.N, self.D, self.K = N, D, K
        self.pri = _prep_priors(pri)
        iu = np.triu_indices(D)
        self.iu = iu
        self.T = np.empty((N, 1 + D + len(iu[0])))
        self.T[:, 0] = 1.0
        self.T[:, 1:1 + D] = X
        for j, (a, b) in enumerate(zip(*iu)):
            np.multiply(X[:, a], X[:, b], out=self.T[:, 1 + D + j])
        self.offdiag = np.where(iu[0] == iu[1], 1.0, 2.0)

    def m_step(self, r):
        D = self.D
        st = r.T @ self.T                                       # K x (1 + D + P)
        Nk, Sx = st[:, 0], st[:, 1:1 + D]
        Sxx = np.empty((self.K, D, D))
        Sxx[:, self.iu[0], self.iu[1]] = st[:, 1 + D:]
        Sxx[:, self.iu[1], self.iu[0]] = st[:, 1 + D:]
        return _m_closed(Nk, Sx, Sxx, self.pri)

    def e_step(self, q):
        alpha, m, beta, nu, W, W_logdet, _, _ = q
        D = self.D
        elogpi, elogdet = _e_terms(alpha, nu, W_logdet, D)
        Wm = np.einsum("kij,kj->ki", W, m)
        coef = np.empty((self.T.shape[1], self.K))
        coef[0] = elogpi + 0.5 * elogdet - 0.5 * D * LOG2PI - 0.5 * D / beta \
            - 0.5 * nu * np.einsum("ki,ki->k", m, Wm)
        coef[1:1 + D] = (nu[:, None] * Wm).T
        coef[1 + D:] = (-0.5 * nu[:, None] * W[:, self.iu[0], self.iu[1]] * self.offdiag).T
        return _softmax_inplace(self.T @ coef)


class FloorChol:
    """Loop over K: distances through the Cholesky factor of W_k^-1 (triangular solve),
    M-step weighted Gram matrices (X * r_k)^T X. O(N D) extra memory."""

    name = "chol"

    def __init__(self, X, K, pri):
        self.X = X
        self.N, self.D = X.shape
        self.K = K
        self.pri = _prep_priors(pri)

    def m_step(self, r):
        X = self.X
        Nk = r.sum(0)
        Sx = r.T @ X
        Sxx = np.stack([(X * r[:, k, None]).T @ X for k in range(self.K)])
        return _m_closed(Nk, Sx, Sxx, self.pri)

    def e_step(self, q):
        alpha, m, beta, nu, W, W_logdet, Linv, _ = q
        D = self.D
        elogpi, elogdet = _e_terms(alpha, nu, W_logdet, D)
        logp = np.empty((self.N, self.K))
        const = elogpi + 0.5 * elogdet - 0.5 * D * LOG2PI - 0.5 * D / beta
        for k in range(self.K):
            # (x - m)^T W (x - m) = |Lc^-1 (x - m)|^2 = |(x - m) Linv^T|^2
            y = self.X @ Linv[k].T
            y -= Linv[k] @ m[k]
            logp[:, k] = const[k] - 0.5 * nu[k] * np.einsum("nd,nd->n", y, y)
        return _softmax_inplace(logp)


def run_floor(cls, X, K, pri, n_iter, r0, with_state=True):
    t0 = time.perf_counter()
    fl = cls(X, K, pri)
    t_setup = time.perf_counter() - t0
    r, rlogr = r0, float(np.sum(xlogy(r0, r0)))
    stamps, cpu, bounds = [], [], []
    N, D = X.shape
    for _ in range(n_iter + 1):
        q = fl.m_step(r)
        bounds.append(-rlogr + q[-1] - 0.5 * N * D * LOG2PI)   # collapsed ELBO at (r, q)
        r, rlogr = fl.e_step(q)
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
    it_time, ints = C.per_iter(stamps, skip=0)
    out = {"per_iter": it_time, "cpu_per_iter": C.per_iter(cpu, skip=0)[0], "intervals": ints,
           "setup": t_setup, "last_bound": bounds[-1]}
    if with_state:
        alpha, m, beta, nu, W = q[:5]
        out["r"], out["params"] = r, {"alpha": alpha, "m": m, "beta": beta, "nu": nu, "W": W}
    return out


# =========================================================================================
# driver
# =========================================================================================
def parse_cases(s):
    """'200000x2x5:20,1000000x10x8:5' -> [(N, D, K, iters)]"""
    out = []
    for part in s.split(","):
        dims, _, it = part.partition(":")
        N, D, K = (int(float(v)) for v in dims.split("x"))
        out.append((N, D, K, int(it or 20)))
    return out


def bench_case(N, D, K, n_iter, args):
    X = make_data(N, D, K, seed=args.seed)
    pri = make_priors(X, alpha0=args.alpha0)
    r0 = initial_resp(N, K, args.seed)
    res = {"N": N, "D": D, "K": K, "n_iter": n_iter}
    print(f"\n## case N={N} D={D} K={K}: {n_iter} timed iterations (+1 warm-up)", flush=True)
    b = run_blrgraph(X, K, pri, n_iter, args.seed)
    print(f"  blrgraph {C.fmt_t(b['per_iter'])}/iter", flush=True)
    s = run_sklearn(X, K, pri, n_iter, r0)
    print(f"  sklearn  {C.fmt_t(s['per_iter'])}/iter", flush=True)
    floors = {}
    for cls in (FloorGemm, FloorChol):
        floors[cls.name] = run_floor(cls, X, K, pri, n_iter, r0)
        print(f"  floor-{cls.name} {C.fmt_t(floors[cls.name]['per_iter'])}/iter", flush=True)
    best = min(floors, key=lambda k: floors[k]["per_iter"])
    # quality, one function for every state
    for name, d in [("blrgraph", b), ("sklearn", s)] + [(f"floor-{k}", v) for k, v in floors.items()]:
        d["elbo"] = evaluate_elbo(X, d.pop("r"), d.pop("params"), pri)
    res.update(blrgraph=b, sklearn=s, floor=floors, floor_best=best)
    if not args.no_memory:
        m_it = args.mem_iters
        _, res["mem_blrgraph"] = C.measure_memory(run_blrgraph, X, K, pri, m_it, args.seed, False)
        _, res["mem_sklearn"] = C.measure_memory(run_sklearn, X, K, pri, m_it, r0, False)
        for cls in (FloorGemm, FloorChol):
            _, res[f"mem_floor_{cls.name}"] = C.measure_memory(run_floor, cls, X, K, pri, m_it, r0, False)
        res["data_mb"] = X.nbytes / C.MB
        res["resp_mb"] = N * K * 8 / C.MB
    return res


def time_only(N, D, K, n_iter, args):
    X = make_data(N, D, K, seed=args.seed)
    pri = make_priors(X, alpha0=args.alpha0)
    r0 = initial_resp(N, K, args.seed)
    b = run_blrgraph(X, K, pri, n_iter, args.seed, with_state=False)
    s = run_sklearn(X, K, pri, n_iter, r0, with_state=False)
    f = min((run_floor(cls, X, K, pri, n_iter, r0, with_state=False) for cls in (FloorGemm, FloorChol)),
            key=lambda x: x["per_iter"])
    print(f"  N={N} D={D} K={K}: blrgraph {C.fmt_t(b['per_iter'])}  sklearn {C.fmt_t(s['per_iter'])}  "
          f"floor {C.fmt_t(f['per_iter'])}", flush=True)
    out = {"N": N, "D": D, "K": K}
    for name, d in (("blrgraph", b), ("sklearn", s), ("floor", f)):
        out[name], out[name + "_cpu"] = d["per_iter"], d["cpu_per_iter"]
    return out


# =========================================================================================
# Phi above the memory cap (graph/suffstats.py: MAX_BYTES, STREAM)
# =========================================================================================
PHI_MODES = {   # name -> (MAX_BYTES, STREAM)
    "cached": (1 << 62, True),     # Phi kept whole, however large
    "default": (None, True),       # the library's cap: first rows kept, the rest streamed
    "stream": (0, True),           # every row rebuilt in chunks
    "per-entry": (0, False),       # no Phi: the factors' per-entry formulas
}


def phi_one(spec, args):
    """One (N, mode) run in this process: D=10, K=8 blrgraph fit, one JSON line out."""
    import json
    import resource
    from blrgraph.graph import suffstats
    n, mode = spec.split(":")
    N, (cap, stream) = int(float(n)), PHI_MODES[mode]
    if cap is not None:
        suffstats.MAX_BYTES = cap
    suffstats.STREAM = stream
    if args.phi_chunk:
        suffstats._STREAM_ROWS = args.phi_chunk
    X = make_data(N, 10, 8, seed=args.seed)
    pri = make_priors(X, alpha0=args.alpha0)
    if args.phi_model == "diag":
        b = run_diag(X, 8, args.phi_iters, args.seed)
    else:
        b = run_blrgraph(X, 8, pri, args.phi_iters, args.seed, with_state=False)
    print(json.dumps({"N": N, "mode": mode, "model": args.phi_model,
                      "chunk": suffstats._STREAM_ROWS,
                      "wall": b["per_iter"], "cpu": b["cpu_per_iter"], "elbo": b["self_elbo"],
                      "build": b["build"], "first_sweep": b["first_sweep"],
                      "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}),
          flush=True)


def run_diag(X, K, n_iter, seed):
    """The zoo's diagonal GMM, a multi-column mixture: z plates (N, 1), a NormalGamma per
    (column, component). Timings as run_blrgraph's."""
    import blrgraph as bg
    N, D = X.shape
    z = bg.Categorical(bg.Dirichlet(np.ones(K), name="w"), plates=(N, 1), name="z")
    th = bg.NormalGamma(np.tile(X.mean(0)[:, None], (1, K)), 1.0, 2.0, 2.0, plates=(D, K),
                        name="theta")
    y = bg.Mixture(z, bg.Normal, th, name="y").observe(X)
    cb, stamps, cpu = C.sweep_clock()
    t1 = time.perf_counter()
    fit = bg.Model(y).fit("vmp", max_iter=n_iter + 1, tol=0, seed=seed, callback=cb)
    return {"per_iter": C.per_iter(stamps, skip=0)[0], "cpu_per_iter": C.per_iter(cpu, skip=0)[0],
            "build": 0.0, "first_sweep": stamps[0] - t1, "self_elbo": float(fit.elbo)}


def phi_modes(args):
    """Each (N, mode) of --phi-rows x --phi-modes in its own process (clean peak RSS):
    CPU and wall time per row and sweep (median over --phi-iters sweeps after 1 warm-up)."""
    import json
    import subprocess
    rows = []
    for n in args.phi_rows.split(","):
        for mode in args.phi_modes.split(","):
            cmd = [sys.executable, os.path.abspath(__file__), "--phi-one", f"{n}:{mode}",
                   "--phi-iters", str(args.phi_iters), "--seed", str(args.seed)]
            if args.blas_threads:
                cmd += ["--blas-threads", str(args.blas_threads)]
            if args.phi_chunk:
                cmd += ["--phi-chunk", str(args.phi_chunk)]
            cmd += ["--phi-model", args.phi_model]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            rows.append(r)
            print(f"  N={r['N']:.0e} {mode:>9} (chunk {r['chunk']}): "
                  f"{r['cpu'] / r['N'] * 1e6:.3f} us CPU / {r['wall'] / r['N'] * 1e6:.3f} us wall "
                  f"per row and sweep; ELBO {r['elbo']:.10e}; peak RSS {r['maxrss_mb']:.0f} MB",
                  flush=True)
    print("\n| rows | mode | CPU us/row/sweep | wall us/row/sweep | ELBO | peak RSS MB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['N']:,} | {r['mode']} | {r['cpu'] / r['N'] * 1e6:.3f} | "
              f"{r['wall'] / r['N'] * 1e6:.3f} | {r['elbo']:.10e} | {r['maxrss_mb']:.0f} |")
    print(f"\ncommand: `{C.command_line()}`")
    C.write_json(args.json, {"benchmark": "gmm-phi", "command": C.command_line(), "runs": rows})


def report(results, scaling, info):
    print("\n# VB-GMM (full covariance): blrgraph vs scikit-learn vs numpy floor\n")
    print(C.machine_markdown(info))
    rows = []
    for r in results:
        b, s, f = r["blrgraph"], r["sklearn"], r["floor"][r["floor_best"]]
        bm, sm, fm = (min(x["intervals"]) for x in (b, s, f))
        rows.append([f"{r['N']:,} x {r['D']}, K={r['K']}", r["n_iter"],
                     f"{C.fmt_t(b['per_iter'])} ({C.fmt_t(bm)})",
                     f"{C.fmt_t(s['per_iter'])} ({C.fmt_t(sm)})",
                     f"{C.fmt_t(s['fit_over_n_iter'])}",
                     f"{C.fmt_t(f['per_iter'])} ({C.fmt_t(fm)}, {r['floor_best']})",
                     f"{C.fmt_x(s['per_iter'] / b['per_iter'])} ({C.fmt_x(sm / bm)})",
                     f"{C.fmt_x(b['per_iter'] / f['per_iter'])} ({C.fmt_x(bm / fm)})"])
    print("Time per iteration: median wall time over the timed iterations (in brackets: the fastest "
          "iteration; ratios of medians and, in brackets, of fastest iterations). sklearn fit/n_iter_ = "
          "whole fit() time / n_iter_. CPU times are in the JSON.\n")
    print(C.md_table(["data", "iters", "blrgraph", "sklearn", "sklearn fit/n_iter_", "floor",
                      "sklearn/blrgraph", "blrgraph/floor"], rows))
    rows = []
    for r in results:
        ref = r["floor"][r["floor_best"]]["elbo"]
        N = r["N"]
        cells = [f"{r['N']:,} x {r['D']}, K={r['K']}"]
        for name, e in [("blrgraph", r["blrgraph"]["elbo"]), ("sklearn", r["sklearn"]["elbo"]),
                        ("floor", ref)]:
            cells.append(f"{e / N:.6f}")
        cells.append(f"{abs(r['blrgraph']['elbo'] - ref) / abs(ref):.1e}")
        cells.append(f"{abs(r['sklearn']['elbo'] - ref) / abs(ref):.1e}")
        cells.append(f"{abs(r['blrgraph']['self_elbo'] - r['blrgraph']['elbo']) / abs(ref):.1e}")
        rows.append(cells)
    print("\nQuality: full ELBO per data point after the same number of updates from the same r0 "
          "(one evaluation function); relative differences to the floor, and blrgraph's own "
          "fit.elbo vs the evaluation.\n")
    print(C.md_table(["data", "blrgraph ELBO/N", "sklearn ELBO/N", "floor ELBO/N", "|blr-floor|/|floor|",
                      "|skl-floor|/|floor|", "|fit.elbo-eval|/|floor|"], rows))
    if any("mem_blrgraph" in r for r in results):
        rows = []
        for r in results:
            if "mem_blrgraph" not in r:
                continue
            rows.append([f"{r['N']:,} x {r['D']}, K={r['K']}", f"{r['data_mb']:.0f} / {r['resp_mb']:.0f}",
                         C.fmt_mem(r["mem_blrgraph"]), C.fmt_mem(r["mem_sklearn"]),
                         C.fmt_mem(r["mem_floor_gemm"]), C.fmt_mem(r["mem_floor_chol"])])
        print("\nPeak memory in MB, `tracemalloc peak / RSS growth` of build + a short fit "
              "(data X and one N x K array given for scale).\n")
        print(C.md_table(["data", "X / NxK (MB)", "blrgraph", "sklearn", "floor gemm", "floor chol"], rows))
    if scaling:
        for key, label in (("N", "N (D=2, K=5)"), ("K", "K")):
            runs = scaling.get(key) or []
            if not runs:
                continue
            xs = [r[key] for r in runs]
            rows = []
            for r in runs:
                unit = r["N"] * r["K"]
                rows.append([f"{r['N']:,}", r["K"], C.fmt_t(r["blrgraph"]), C.fmt_t(r["sklearn"]),
                             C.fmt_t(r["floor"]), f"{r['blrgraph'] / unit * 1e9:.1f}",
                             f"{r['sklearn'] / unit * 1e9:.1f}", f"{r['floor'] / unit * 1e9:.1f}"])
            slopes = {lib: C.loglog_slope(xs, [r[lib] for r in runs])
                      for lib in ("blrgraph", "sklearn", "floor", "blrgraph_cpu", "sklearn_cpu", "floor_cpu")}
            scaling[f"slope_{key}"] = slopes
            print(f"\nScaling in {label}: time per iteration, and ns per (N*K) unit.\n")
            print(C.md_table(["N", "K", "blrgraph", "sklearn", "floor", "blrgraph ns/NK",
                              "sklearn ns/NK", "floor ns/NK"], rows))
            print(f"\nlog-log slope of time per iteration vs {key} (1.0 = linear), wall (CPU): " +
                  ", ".join(f"{k} {slopes[k]:.2f} ({slopes[k + '_cpu']:.2f})"
                            for k in ("blrgraph", "sklearn", "floor")))


# =========================================================================================
# profile
# =========================================================================================
def profile_only(args):
    """Profile blrgraph's fit alone (model built outside the profile); print the top 25."""
    import cProfile
    import pstats
    N, D, K = args.profile_n, args.profile_d, args.profile_k
    X = make_data(N, D, K, seed=args.seed)
    pri = make_priors(X, alpha0=args.alpha0)
    import _lsprof
    outer = sys.getprofile()   # `python -m cProfile` runs its Profile as __main__.Profile
    outer = outer if isinstance(outer, _lsprof.Profiler) else None
    if outer is not None:   # run as python -m cProfile ...: keep only the fit in its record
        outer.disable()
        outer.clear()
    model, _ = build_blrgraph(X, K, pri)
    prof = outer or cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    model.fit("vmp", max_iter=args.profile_iters, tol=0, seed=args.seed)
    prof.disable()
    wall = time.perf_counter() - t0
    print(f"# cProfile of blrgraph fit('vmp'), N={N} D={D} K={K}, {args.profile_iters} sweeps: "
          f"{wall:.2f} s wall ({wall / args.profile_iters * 1e3:.0f} ms/sweep, profiler overhead "
          f"included)\n")
    st = pstats.Stats(prof, stream=sys.stdout).strip_dirs().sort_stats(args.profile_sort)
    st.print_stats(25)
    sys.stdout.flush()
    if outer is not None:
        # the outer `python -m cProfile` would now print every function again: stop here
        os._exit(0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, about a minute")
    ap.add_argument("--cases", help="NxDxK:iters,... (default 200000x2x5:20,1000000x10x8:5)")
    ap.add_argument("--scale-n", help="N values of the N-scaling run (D=2, K=5); '' to skip")
    ap.add_argument("--scale-k", help="K values of the K-scaling run; '' to skip")
    ap.add_argument("--scale-k-n", type=float, help="N of the K-scaling run (default 1e5)")
    ap.add_argument("--scale-iters", type=int, help="timed iterations per scaling point (default 5)")
    ap.add_argument("--mem-iters", type=int, default=2, help="iterations of the memory runs")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--alpha0", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blas-threads", type=int, help="cap BLAS threads (default: as configured)")
    ap.add_argument("--json", help="write all numbers to this file")
    ap.add_argument("--profile-only", action="store_true",
                    help="cProfile blrgraph's fit only and print the top 25 functions")
    ap.add_argument("--profile-n", type=int, default=200_000)
    ap.add_argument("--profile-d", type=int, default=2)
    ap.add_argument("--profile-k", type=int, default=5)
    ap.add_argument("--profile-iters", type=int, default=10)
    ap.add_argument("--profile-sort", default="cumtime", help="pstats sort key (cumtime, tottime)")
    ap.add_argument("--phi-rows", help="N values (D=10, K=8) of the Phi-above-the-cap runs only, "
                    "e.g. 1e6,1e7")
    ap.add_argument("--phi-modes", default="cached,default,stream,per-entry",
                    help="of " + ",".join(PHI_MODES) + " (cached at 1e7 holds 5.3 GB)")
    ap.add_argument("--phi-iters", type=int, default=3, help="timed sweeps per Phi run")
    ap.add_argument("--phi-chunk", type=int,
                    help="rows of a rebuilt Phi chunk (suffstats._STREAM_ROWS)")
    ap.add_argument("--phi-model", default="full", choices=("full", "diag"),
                    help="full covariance (NormalWishart) or the diagonal GMM (z plates (N, 1), "
                    "NormalGamma (D, K): a multi-column mixture)")
    ap.add_argument("--phi-one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    _limits = C.limit_blas(args.blas_threads)  # noqa: F841 (kept alive for the run)
    if args.phi_one:
        return phi_one(args.phi_one, args)
    if args.phi_rows:
        return phi_modes(args)
    if args.profile_only:
        return profile_only(args)
    q = args.quick
    cases = parse_cases(args.cases or ("20000x2x5:10,100000x5x4:3" if q else "200000x2x5:20,1000000x10x8:5"))
    scale_n = args.scale_n if args.scale_n is not None else ("1e3,1e4,1e5" if q else "1e4,1e5,1e6")
    scale_k = args.scale_k if args.scale_k is not None else ("2,4,8" if q else "2,4,8,16")
    scale_k_n = int(args.scale_k_n or (2e4 if q else 1e5))
    scale_iters = args.scale_iters or (3 if q else 5)
    info = C.machine_info()
    t0 = time.perf_counter()
    results = [bench_case(N, D, K, it, args) for N, D, K, it in cases]
    scaling = {}
    if scale_n:
        print("\n## scaling in N", flush=True)
        scaling["N"] = [time_only(int(float(n)), 2, 5, scale_iters, args) for n in scale_n.split(",")]
    if scale_k:
        print("\n## scaling in K", flush=True)
        scaling["K"] = [time_only(scale_k_n, 2, int(k), scale_iters, args) for k in scale_k.split(",")]
    report(results, scaling, info)
    total = time.perf_counter() - t0
    print(f"\ncommand: `{C.command_line()}`; total {total:.0f} s")
    C.write_json(args.json, {"benchmark": "gmm", "command": C.command_line(), "machine": info,
                             "cases": results, "scaling": scaling, "total_seconds": total})


if __name__ == "__main__":
    main()
