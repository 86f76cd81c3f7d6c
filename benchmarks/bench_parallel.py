"""VB-GMM sweeps over the cores: blrgraph ``fit(n_jobs=1)`` vs ``n_jobs=2`` (or more) vs
scikit-learn's ``BayesianGaussianMixture``, in one run, each with the default threading
(BLAS as installed; blrgraph holds BLAS at one thread inside its partitions).

The data, priors and start are bench_gmm.py's (``make_data``, ``make_priors``, r0 ~
Dirichlet(1) from ``seed``); each library runs ``--sweeps`` sweeps after one warm-up
sweep; the table gives the median wall time per sweep (and the process CPU time per
sweep), and the ratios. The ELBO traces of the blrgraph runs must agree to rounding (the
partitions take the steps of one thread); the largest relative difference is printed.

    PYTHONPATH=. python benchmarks/bench_parallel.py [--rows 400000] [--dim 10] [--k 8]
        [--jobs 1,2,1b] [--sweeps 10] [--json out.json]

(``1b``: ``n_jobs=1`` with BLAS held at one thread, the one-worker baseline of the partitions;
``n_jobs=1`` itself holds BLAS at one thread since §12.20, so ``1b`` times the same fit.)

The issue-26 targets: ``n_jobs=2`` >= 1.6x ``n_jobs=1`` and >= 10x scikit-learn per
sweep on 2 idle cores (docs/benchmarks.md §12).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402

import bench_gmm as G  # noqa: E402


def run_blrgraph(X, K, pri, sweeps, seed, jobs, blas1=False, partitions=False):
    """``blas1``: the whole fit with BLAS held at one thread (threadpoolctl);
    ``partitions``: the rows in partitions (the generic sweep), not the compiled sweep's
    row kernels over the threads."""
    from blrgraph.inference import compiled
    compiled.ENABLED = not partitions
    model, nodes = G.build_blrgraph(X, K, pri)
    r0 = G.initial_resp(X.shape[0], K, seed)
    cb, stamps, cpu = C.sweep_clock()
    limit = contextlib.nullcontext()
    if blas1:
        from threadpoolctl import threadpool_limits
        limit = threadpool_limits(limits=1, user_api="blas")
    t0 = time.perf_counter()
    with limit:
        fit = model.fit("vmp", max_iter=sweeps + 1, tol=0, seed=seed, callback=cb,
                        init=r0, n_jobs=jobs)
    total = time.perf_counter() - t0
    return {"per_sweep": C.per_iter(stamps, skip=0)[0], "cpu_per_sweep": C.per_iter(cpu, skip=0)[0],
            "fit_total": total, "trace": np.asarray(fit.elbo_trace)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=400_000)
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--jobs", default="1,2",
                    help="n_jobs of each run; '1b': n_jobs=1 with BLAS held at one thread; "
                         "'2p': n_jobs=2 with the rows in partitions (the generic sweep)")
    ap.add_argument("--sweeps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-sklearn", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    N, D, K = int(a.rows), a.dim, a.k
    X = G.make_data(N, D, K, seed=a.seed)
    pri = G.make_priors(X)
    print(f"# VB-GMM {N} x {D}, K={K}, {a.sweeps} sweeps after 1 warm-up; load {C.loadavg()}")
    rows, out = [], {"N": N, "D": D, "K": K, "runs": {}}
    base = None
    for spec in a.jobs.split(","):
        j, blas1, parts = int(spec.rstrip("bp")), spec.endswith("b"), spec.endswith("p")
        r = run_blrgraph(X, K, pri, a.sweeps, a.seed, j, blas1, parts)
        name = f"blrgraph n_jobs={j}" + (", BLAS 1 thread" if blas1 else "") + \
            (", rows in partitions" if parts else "")
        if name in out["runs"]:   # (a repeated setting: its own row, its own sklearn ratio)
            name += f" (run {sum(n.startswith(name) for n in out['runs']) + 1})"
        out["runs"][name] = {k: v for k, v in r.items() if k != "trace"}
        if base is None:
            base = r
        n = min(len(r["trace"]), len(base["trace"]))
        diff = float(np.max(np.abs(r["trace"][:n] - base["trace"][:n]) / np.abs(base["trace"][:n])))
        rows.append([name, C.fmt_t(r["per_sweep"]), C.fmt_t(r["cpu_per_sweep"]),
                     C.fmt_x(base["per_sweep"] / r["per_sweep"]), f"{diff:.1e}"])
    if not a.no_sklearn:
        r0 = G.initial_resp(N, K, a.seed)
        s = G.run_sklearn(X, K, pri, a.sweeps + 1, r0, with_state=False)
        out["runs"]["sklearn"] = {k: v for k, v in s.items() if k != "intervals"}
        rows.append(["scikit-learn BayesianGaussianMixture", C.fmt_t(s["per_iter"]),
                     C.fmt_t(s["cpu_per_iter"]), C.fmt_x(base["per_sweep"] / s["per_iter"]), ""])
        for r in rows[:-1]:
            name = r[0]
            r.append(C.fmt_x(s["per_iter"] / out["runs"][name]["per_sweep"]))
        rows[-1].append("1x")
    headers = ["", "wall / sweep", "CPU / sweep", "vs n_jobs=1", "ELBO rel. diff", "vs sklearn"]
    print(C.md_table(headers[:len(rows[0])], rows))
    print(f"\nload after: {C.loadavg()}")
    if a.json:
        C.write_json(a.json, out)


if __name__ == "__main__":
    main()
