"""The four configurations of BayesPy's speed table (Luttinen, JMLR 17(41), 2016): CPU time
per VB sweep, blrgraph against BayesPy, in one run, BLAS held at one thread.

* GMM K=10 on N=200 x D=2 and K=40 on N=2000 x D=10: alpha ~ Dirichlet(1), mu_k ~ N(0,
  (1e-2 I)^-1), Lambda_k ~ Wishart(D, I) (E[Lambda] = D I in both libraries' conventions),
  z_n ~ Categorical(alpha), x_n ~ N(mu_z, Lambda_z^-1); the same model in both (separate
  mean and precision nodes, BayesPy's GMM example). Data: K well separated clusters.
  Starts: random responsibilities (blrgraph: ``init=`` Dirichlet(1) draws; BayesPy:
  ``z.initialize_from_random()``).
* PCA with ARD, latent dimension 10 on 500 samples x 20 dimensions and 40 on 2000 x 100:
  bench_pca.py's model and start (the same in both libraries; its ELBO traces agree).

Time per sweep: the median interval of ``time.process_time`` between successive sweeps
(each with its ELBO), after one warm-up sweep; CPU time is less disturbed by other jobs
on a shared machine than wall time (one BLAS thread, so CPU = one core's time).

    PYTHONPATH=. python benchmarks/bench_jmlr.py [--sweeps 40] [--only gmm|pca] [--json out.json]

Also the wine table (178 x 13, standardised, K=3; issue 26's small-table case) with the
same GMM. Needs bayespy and scikit-learn (for the wine data).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402

import bench_pca as P  # noqa: E402

GMM = [("GMM K=10, N=200, D=2", 200, 2, 10), ("GMM K=40, N=2000, D=10", 2000, 10, 40)]
PCA = [("PCA latent 10, 500 x 20", 500, 20, 10), ("PCA latent 40, 2000 x 100", 2000, 100, 40)]


def gmm_data(N, D, K, seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 5.0, size=(K, D))
    return centres[rng.integers(0, K, N)] + rng.normal(size=(N, D))


def wine():
    from sklearn.datasets import load_wine
    X = load_wine().data
    return (X - X.mean(0)) / X.std(0)


def gmm_blrgraph(X, K, sweeps, seed):
    import blrgraph as bg
    N, D = X.shape
    alpha = bg.Dirichlet(np.ones(K), name="alpha")
    z = bg.Categorical(alpha, plates=(N,), name="z")
    mu = bg.MultivariateNormal(np.zeros(D), 1e-2 * np.eye(D), plates=(K,), name="mu")
    Lam = bg.Wishart(D, np.eye(D), plates=(K,), name="Lambda")
    y = bg.Mixture(z, bg.MultivariateNormal, mu, Lam, name="Y").observe(X)
    r0 = np.random.default_rng(seed).dirichlet(np.ones(K), size=N)
    cb, stamps, cpu = C.sweep_clock()
    res = bg.Model(y).fit("vmp", max_iter=sweeps, tol=0, init=r0, callback=cb, n_jobs=1)
    return C.per_iter(cpu)[0], res.n_iter


def gmm_bayespy(X, K, sweeps, seed):
    from bayespy import nodes
    from bayespy.inference import VB
    N, D = X.shape
    np.random.seed(seed)
    alpha = nodes.Dirichlet(np.ones(K), name="alpha")
    z = nodes.Categorical(alpha, plates=(N,), name="z")
    mu = nodes.Gaussian(np.zeros(D), 1e-2 * np.eye(D), plates=(K,), name="mu")
    Lam = nodes.Wishart(D, np.eye(D), plates=(K,), name="Lambda")
    y = nodes.Mixture(z, nodes.Gaussian, mu, Lam, name="Y")
    z.initialize_from_random()
    y.observe(X)
    Q = VB(y, mu, z, Lam, alpha)
    cpu = []
    for _ in range(sweeps):
        Q.update(repeat=1, verbose=False, tol=0)
        cpu.append(time.process_time())
    return C.per_iter(cpu)[0], sweeps


def pca(M, N, K, sweeps, seed):
    Y = P.make_data(M, N, min(K, 5), 0.5, seed)
    m0, w0 = P.start_means(M, N, K, seed)
    L_bp, _, c_bp = P.run_bayespy(Y, K, m0, w0, sweeps)
    L_bg, _, c_bg = P.run_blrgraph(Y, K, m0, w0, sweeps)
    return c_bg, c_bp, float(np.max(np.abs(L_bg - L_bp) / np.abs(L_bp)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=("gmm", "pca"))
    ap.add_argument("--repeats", type=int, default=1,
                    help="run each configuration's pair this many times, BayesPy and blrgraph "
                         "taking turns, and keep each library's fastest median: this VM's "
                         "speed moves by up to 1.7x from minute to minute (docs/benchmarks.md "
                         "§12.13)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    limit = C.limit_blas(1)
    info = C.machine_info()
    print(C.machine_markdown(info))
    print(f"\nCPU time per sweep, one BLAS thread, median over {a.sweeps} sweeps"
          + (f", the fastest of {a.repeats} runs taking turns" if a.repeats > 1 else "")
          + f"; load {C.loadavg()}\n")
    rows, out = [], {"machine": info, "sweeps": a.sweeps, "rows": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if a.only != "pca":
            for name, N, D, K in [("GMM K=3, wine 178 x 13", None, 13, 3)] + GMM:
                X = wine() if N is None else gmm_data(N, D, K, a.seed)
                t_bp = t_bg = np.inf
                for _ in range(a.repeats):
                    t_bp = min(t_bp, gmm_bayespy(X, K, a.sweeps, a.seed)[0])
                    t, n = gmm_blrgraph(X, K, a.sweeps, a.seed)
                    t_bg = min(t_bg, t)
                rows.append([name, C.fmt_t(t_bg), C.fmt_t(t_bp), C.fmt_x(t_bp / t_bg), f"{n} sweeps"])
                out["rows"].append({"name": name, "blrgraph": t_bg, "bayespy": t_bp})
        if a.only != "gmm":
            for name, N, M, K in PCA:
                t_bg = t_bp = np.inf
                for _ in range(a.repeats):
                    t1, t2, rel = pca(M, N, K, a.sweeps, a.seed)
                    t_bg, t_bp = min(t_bg, t1), min(t_bp, t2)
                rows.append([name, C.fmt_t(t_bg), C.fmt_t(t_bp), C.fmt_x(t_bp / t_bg),
                             f"ELBO rel. diff {rel:.1e}"])
                out["rows"].append({"name": name, "blrgraph": t_bg, "bayespy": t_bp, "elbo_rel": rel})
    print(C.md_table(["configuration", "blrgraph CPU / sweep", "BayesPy CPU / sweep",
                      "blrgraph speed-up", "note"], rows))
    print(f"\nload after: {C.loadavg()}\ncommand: {C.command_line()}")
    C.write_json(a.json, out)
    del limit


if __name__ == "__main__":
    main()
