"""Cost per sweep against N: a VB-GMM (full covariance, D=2, K=5) at N = 1e2 ... 1e6, blrgraph
and scikit-learn's BayesianGaussianMixture side by side in one run.

Each N: the data, priors and start of bench_gmm.py (``make_data``, ``make_priors``,
``initial_resp``); blrgraph ``Model(y).fit("vmp", tol=0)`` and sklearn's fit with the same
start (bench_gmm's ``run_blrgraph`` / ``run_sklearn``), each the median interval between
sweeps (wall and process CPU; one warm-up sweep left out). The number of timed sweeps
falls with N (``--work``: about that many rows x sweeps per point, between 5 and 200
sweeps). Then the least-squares fit of CPU per sweep = a + b N over the points: a is the
fixed cost of a sweep (its overhead), b the cost per row, and the log-log slope of the
CPU per sweep between the two largest N (1 = linear).

    PYTHONPATH=. python benchmarks/bench_scaling.py --blas-threads 1 [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402
import bench_gmm as G  # noqa: E402

import numpy as np  # noqa: E402


def one_point(N, D, K, n_iter, seed):
    X = G.make_data(N, D, K, seed=seed)
    pri = G.make_priors(X, alpha0=1.0)
    r0 = G.initial_resp(N, K, seed)
    b = G.run_blrgraph(X, K, pri, n_iter, seed, with_state=False)
    s = G.run_sklearn(X, K, pri, n_iter, r0, with_state=False)
    return {"N": N, "sweeps": n_iter, "blrgraph": b["per_iter"], "blrgraph_cpu": b["cpu_per_iter"],
            "sklearn": s["per_iter"], "sklearn_cpu": s["cpu_per_iter"]}


def linear_fit(N, t):
    """Least squares t = a + b N, weighted by 1 / t (relative errors)."""
    N, t = np.asarray(N, float), np.asarray(t, float)
    A = np.stack([np.ones_like(N), N], axis=1) / t[:, None]
    a, b = np.linalg.lstsq(A, np.ones_like(t), rcond=None)[0]
    return float(a), float(b)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1e2,1e3,1e4,1e5,1e6")
    ap.add_argument("--dim", type=int, default=2)
    ap.add_argument("--components", type=int, default=5)
    ap.add_argument("--work", type=float, default=5e6, help="about rows x sweeps per point")
    ap.add_argument("--repeat", type=int, default=1, help="runs of the whole sweep over N")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blas-threads", type=int, help="cap BLAS threads (default: as configured)")
    ap.add_argument("--json", help="write every number to this file")
    args = ap.parse_args(argv)
    _limits = C.limit_blas(args.blas_threads)  # noqa: F841 (kept alive for the run)
    info = C.machine_info()
    D, K = args.dim, args.components
    sizes = [int(float(n)) for n in args.sizes.split(",")]
    runs = []
    for rep in range(args.repeat):
        rows = []
        for N in sizes:
            n_iter = int(np.clip(args.work / N, 5, 200))
            p = one_point(N, D, K, n_iter, args.seed)
            rows.append(p)
            print(f"run {rep + 1}: N={N}: blrgraph {C.fmt_t(p['blrgraph_cpu'])} CPU per sweep, "
                  f"sklearn {C.fmt_t(p['sklearn_cpu'])} ({p['sweeps']} sweeps)", flush=True)
        runs.append(rows)
    print(f"\n# VB-GMM (full covariance), D={D}, K={K}: time per sweep against N\n")
    print(C.machine_markdown(info))
    for rep, rows in enumerate(runs):
        N = [r["N"] for r in rows]
        fits = {k: linear_fit(N, [r[k + "_cpu"] for r in rows]) for k in ("blrgraph", "sklearn")}
        table = [[f"{r['N']:,}", r["sweeps"], C.fmt_t(r["blrgraph_cpu"]), C.fmt_t(r["blrgraph"]),
                  f"{r['blrgraph_cpu'] / r['N'] * 1e9:.0f} ns", C.fmt_t(r["sklearn_cpu"]),
                  C.fmt_x(r["sklearn_cpu"] / r["blrgraph_cpu"])] for r in rows]
        print(f"\nrun {rep + 1}:\n")
        print(C.md_table(["N", "timed sweeps", "blrgraph CPU per sweep", "blrgraph wall",
                          "blrgraph CPU per row", "sklearn CPU per iteration",
                          "sklearn / blrgraph (CPU)"], table))
        for k, (a, b) in fits.items():
            slope = C.loglog_slope(N[-2:], [r[k + "_cpu"] for r in rows[-2:]])
            print(f"\n{k}: CPU per sweep = {C.fmt_t(a)} + {b * 1e9:.0f} ns x N (weighted least "
                  f"squares); log-log slope {N[-2]:.0e} to {N[-1]:.0e}: {slope:.2f}")
            rows[0].setdefault("fit", {})[k] = {"a": a, "b": b, "slope": slope}
    print(f"\ncommand: `{C.command_line()}`")
    C.write_json(args.json, {"machine": info, "D": D, "K": K, "runs": runs})


if __name__ == "__main__":
    main()
