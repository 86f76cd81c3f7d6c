"""A fixed number of plain-VB sweeps of bench_pca.py's model (for instruction counts).

BayesPy's JMLR configuration "PCA latent 10 on 500 x 20" (bench_jmlr.py's PCA row): the data,
priors and start of bench_pca.py, ``fit("vmp", rotate=False, tol=0)`` for the given number of
sweeps; prints the number of sweeps and the last ELBO. Under Valgrind, the difference of two
counts (e.g. 412 and 12 sweeps) divided by the difference of the sweeps is the instructions
per sweep, which does not depend on the machine's load (docs/benchmarks.md §12.15, §12.17):

    PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 PYTHONPATH=. valgrind --tool=cachegrind \\
        --cache-sim=no python benchmarks/pca_sweeps.py 412
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_pca as P  # noqa: E402

import numpy as np  # noqa: E402


def build(M=20, N=500, K=10, seed=0):
    """bench_pca.run_blrgraph's model and start, without its clocks."""
    import blrgraph as bg
    Y = P.make_data(M, N, min(K, 5), 0.5, seed)
    m0, w0 = P.start_means(M, N, K, seed)
    alpha = bg.Gamma(P.A0, P.A0, plates=(K,), name="alpha")
    W = bg.MultivariateNormal(np.zeros(K), alpha, plates=(M, 1), name="W")
    X = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(N,), name="X")
    tau = bg.Gamma(P.A0, P.A0, name="tau")
    y = bg.Normal(bg.Dot(W, X), tau, name="Y").observe(Y)
    X.start_from(m0, np.eye(K))
    W.start_from(w0[:, None, :], np.eye(K))
    return bg.Model(y, schedule=[X, tau, alpha, W])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    sweeps = int(argv[0]) if argv else 112
    res = build().fit("vmp", max_iter=sweeps, tol=0, seed=0, rotate=False)
    print(len(res.elbo_trace), repr(float(res.elbo_trace[-1])))


if __name__ == "__main__":
    main()
