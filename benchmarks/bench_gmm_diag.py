"""Diagonal-covariance VB-GMM: blrgraph (the zoo's declaration) vs scikit-learn, time per iteration.

* blrgraph: ``Dirichlet / NormalGamma(plates=(D, K)) / Categorical(plates=(N, 1)) /
  Mixture(z, Normal, theta)`` on data (N, D): one z per row shared by its D cells, the
  layout of ``models/gmm.py`` with ``covariance="diag"`` (it accepts missing cells).
* sklearn: ``BayesianGaussianMixture(covariance_type="diag",
  weight_concentration_prior_type="dirichlet_distribution", reg_covar=0)``.

Both start from the same responsibilities r0 (sklearn's initialisation is overridden, as in
``bench_gmm.py``) and run the same number of iterations. sklearn's diagonal model is not
the same posterior family (its E[log |Lambda|] uses the Wishart formula with one shared
degrees of freedom), so only time is compared here; ``bench_gmm.py`` compares quality for
full covariance, where both compute the same iterates.

    PYTHONPATH=. python benchmarks/bench_gmm_diag.py --blas-threads 1
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
import bench_gmm as G  # noqa: E402

import numpy as np  # noqa: E402


def run_blrgraph(X, K, n_iter, seed):
    import blrgraph as bg
    N, D = X.shape
    m0, var = X.mean(0), X.var(0)
    w = bg.Dirichlet(np.ones(K), name="w")
    theta = bg.NormalGamma(m0[:, None] * np.ones((D, K)), 1.0, 1.0, var[:, None] * np.ones((D, K)),
                           plates=(D, K), name="theta")
    z = bg.Categorical(w, plates=(N, 1), name="z")
    y = bg.Mixture(z, bg.Normal, theta, name="y").observe(X)
    stamps = []
    bg.Model(y).fit("vmp", max_iter=n_iter + 1, tol=0, seed=seed,
                    callback=lambda it, L: stamps.append(time.perf_counter()))
    return C.per_iter(stamps, skip=0)[0]


def run_sklearn(X, K, n_iter, r0):
    from sklearn.exceptions import ConvergenceWarning
    est = G._sklearn_class()(
        n_components=K, covariance_type="diag", weight_concentration_prior_type="dirichlet_distribution",
        weight_concentration_prior=1.0, mean_precision_prior=1.0, reg_covar=0.0, tol=0.0,
        max_iter=n_iter, n_init=1, random_state=0)
    est._r0, est._stamps, est._cpu = r0, [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X)
    return C.per_iter(est._stamps, skip=1)[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="200000x10x5:10,1000000x10x8:5", help="NxDxK:iters,...")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blas-threads", type=int)
    args = ap.parse_args(argv)
    if args.blas_threads:
        C.limit_blas(args.blas_threads)
    info = C.machine_info()
    rows = []
    for N, D, K, n_iter in G.parse_cases(args.cases):
        X = G.make_data(N, D, K, seed=args.seed)
        r0 = G.initial_resp(N, K, args.seed)
        t_b = run_blrgraph(X, K, n_iter, args.seed)
        t_s = run_sklearn(X, K, n_iter, r0)
        print(f"N={N} D={D} K={K}: blrgraph {t_b * 1e3:.1f} ms, sklearn {t_s * 1e3:.1f} ms", flush=True)
        rows.append([f"{N:,} x {D}, K={K}", str(n_iter), C.fmt_t(t_b), C.fmt_t(t_s), C.fmt_x(t_s / t_b)])
    print("\n# Diagonal VB-GMM: time per iteration (median)\n")
    print(C.machine_markdown(info))
    print(C.md_table(["data", "iters", "blrgraph", "sklearn", "sklearn/blrgraph"], rows))
    print(f"\ncommand: `{C.command_line()}`")


if __name__ == "__main__":
    main()
