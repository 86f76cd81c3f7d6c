"""The engine's fixed cost per sweep on small tables, two source trees side by side (issue 26,
item 2).

Cases, the same models as the benchmarks they come from (one BLAS thread):

* ``wine``: bench_jmlr.py's GMM (Dirichlet weights, separate Gaussian means and Wishart
  precisions, random responsibilities to start) on the wine table (178 x 13, K=3);
* ``n200``: the same GMM on N=200 x D=2, K=10 (BayesPy's speed table);
* ``pca``: bench_pca.py's Bayesian PCA, latent 10, 500 x 20, ``rotate=False``;
* ``hmm``: bench_hmm.py's VB HMM sweep (BLR steps of pi, A, theta, the chain, then the
  ELBO), one sequence of 10,000 steps, K=3, D=2, hmmlearn's start.

Each (case, tree) runs in a fresh subprocess with that tree's ``blrgraph`` first on
``sys.path``, alternating the trees (old, new) ``--repeats`` times. Reported per tree: the
minimum over the repeats of the median process CPU time per sweep (``--sweeps`` sweeps, the
first three intervals left out), the ratio old / new, cProfile's function calls per sweep
(sweeps 20 to 60 of a 60-sweep fit: independent of the machine's load), and the largest
relative difference of the two trees' ELBO traces (30 sweeps; 0 = the same iterates).

    PYTHONPATH=. python benchmarks/bench_overhead.py --old ../wt-old [--repeats 5] [--sweeps 80]

Needs scikit-learn (the wine data) and hmmlearn (the HMM's start).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CASES = ("wine", "n200", "pca", "hmm")


def _runner(case):
    """A function run(n, callback) -> ELBO trace, for ``case`` (imports the tree's blrgraph)."""
    import warnings
    warnings.simplefilter("ignore")
    import numpy as np
    import blrgraph as bg
    import bench_jmlr as J
    if case in ("wine", "n200"):
        X, K = (J.wine(), 3) if case == "wine" else (J.gmm_data(200, 2, 10, 0), 10)
        N, D = X.shape

        def run(n, cb=None):
            alpha = bg.Dirichlet(np.ones(K), name="alpha")
            z = bg.Categorical(alpha, plates=(N,), name="z")
            mu = bg.MultivariateNormal(np.zeros(D), 1e-2 * np.eye(D), plates=(K,), name="mu")
            Lam = bg.Wishart(D, np.eye(D), plates=(K,), name="Lambda")
            y = bg.Mixture(z, bg.MultivariateNormal, mu, Lam, name="Y").observe(X)
            r0 = np.random.default_rng(0).dirichlet(np.ones(K), size=N)
            return bg.Model(y).fit("vmp", max_iter=n, tol=0, init=r0, callback=cb,
                                   n_jobs=1).elbo_trace
        return run
    if case == "pca":
        from pca_sweeps import build   # (BayesPy's PCA 500 x 20 configuration)

        def run(n, cb=None):
            return build().fit("vmp", max_iter=n, tol=0, seed=0, callback=cb,
                               rotate=False).elbo_trace
        return run
    import bench_hmm as H
    X = H.make_data(1, 10000, 3, 2, 0)
    h = H.hmmlearn_start(X, 3, 0, "log")
    gen = H.blrgraph_sweeps(H.build_blrgraph(h, X), h)

    def run(n, cb=None):   # (continues the same sweeps on every call)
        out = []
        for i in range(n):
            out.append(next(gen))
            if cb is not None:
                cb(i, out[-1])
        return out
    return run


def worker(case, tree, sweeps):
    sys.path.insert(0, HERE)
    import _common as C
    sys.path.insert(0, tree)   # this tree's blrgraph first (after _common's own insert)
    C.limit_blas(1)
    import cProfile
    import pstats
    import numpy as np
    import blrgraph
    assert os.path.dirname(os.path.dirname(os.path.abspath(blrgraph.__file__))) == \
        os.path.abspath(tree), blrgraph.__file__
    run = _runner(case)
    cpu = []
    run(sweeps, lambda it, L: cpu.append(time.process_time()))
    per = float(np.median(np.diff(cpu[3:])))
    run = _runner(case)
    trace = [float(v) for v in run(30)]
    run = _runner(case)
    run(5)
    prof = cProfile.Profile()

    def cb(it, L):
        if it == 20:
            prof.enable()
    run(60, cb)
    prof.disable()
    calls = pstats.Stats(prof).total_calls / 40
    print(json.dumps({"cpu": per, "calls": calls, "trace": trace}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=False, help="source tree before the change")
    ap.add_argument("--new", default=ROOT, help="source tree after the change (default: this one)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sweeps", type=int, default=80)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.worker, a.tree, a.sweeps)
    if not a.old:
        ap.error("--old is required")
    sys.path.insert(0, HERE)
    import _common as C
    import numpy as np
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    trees = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    print(f"load before: {C.loadavg()}")
    rows = []
    for case in a.cases.split(","):
        got = {"old": [], "new": []}
        for _ in range(a.repeats):
            for kind in ("old", "new"):
                out = subprocess.run([sys.executable, __file__, "--worker", case, "--tree",
                                      trees[kind], "--sweeps", str(a.sweeps)], env=env,
                                     capture_output=True, text=True, check=True)
                got[kind].append(json.loads(out.stdout.strip().splitlines()[-1]))
        o, n = got["old"], got["new"]
        to, tn = min(r["cpu"] for r in o), min(r["cpu"] for r in n)
        Lo, Ln = np.array(o[0]["trace"]), np.array(n[0]["trace"])
        rel = float(np.max(np.abs(Lo - Ln) / np.abs(Lo)))
        rows.append([case, f"{1e3 * to:.2f} ms", f"{1e3 * tn:.2f} ms", f"{to / tn:.2f}x",
                     f"{o[0]['calls']:.0f}", f"{n[0]['calls']:.0f}", f"{rel:.1e}"])
    print(C.md_table(["case", "CPU / sweep old", "new", "old / new", "calls / sweep old", "new",
                      "ELBO rel. diff"], rows))
    print(f"\nload after: {C.loadavg()}\ncommand: {C.command_line()}")


if __name__ == "__main__":
    main()
