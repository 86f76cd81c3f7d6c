"""Bayesian PCA with ARD: blrgraph vs BayesPy's PCA demo model, time per sweep and ELBO.

The model is BayesPy's ``bayespy/demos/pca.py`` (M data dimensions, N samples, K latent
components), written in both libraries with the same priors and layout::

    alpha ~ Gamma(1e-2, 1e-2), plates (K,)           one ARD precision per component
    W     ~ N(0, diag(alpha)^-1), plates (M, 1)      BayesPy: GaussianARD(0, alpha, shape=(K,))
    X     ~ N(0, I), plates (1, N)                   BayesPy: GaussianARD(0, 1, shape=(K,))
    tau   ~ Gamma(1e-2, 1e-2)
    Y     ~ N(W . X, 1/tau), plates (M, N)           blrgraph: bg.Dot(W, X); BayesPy: SumMultiply('i,i', W, X)

Same start: q(X) = N(m0, I) and q(W) = N(w0, I) in both, m0 and w0 draws from N(0, I)
(blrgraph: ``start_from``; BayesPy: ``initialize_from_mean_and_covariance``); tau and alpha
at their priors. Same order: blrgraph's loop steps the global nodes X, tau, alpha (the
schedule's order) and then W, local on the data axis (the M rows of Y); BayesPy is called
as ``Q.update(X, tau, alpha, W)``. So after each sweep both are in the same state and
their ELBOs must agree to rounding; the table reports the largest relative difference
over the sweeps. This table runs plain VB in both (blrgraph: ``fit(rotate=False)``).

The second table is the rotation (issue 26, docs/latent_products.md "Rotations"): at
N = 2000, M = 50, K = 10 (``--rot-n``, ``--rot-m``, ``--rot-k``), the same model and start,
BayesPy with its ``RotationOptimizer(RotateGaussianARD(W, alpha), RotateGaussianARD(X), K)``
after each sweep (its demo's ``Q.callback = R.rotate``) for ``--rot-sweeps`` sweeps (225);
its ELBO then is the target. blrgraph's ``fit("vmp")`` (rotations on by default) runs
until it reaches the target or has used as much CPU time as BayesPy's whole run; each
library's time to the target is the time (from the start of its updates, each sweep with
its ELBO) to the first sweep whose ELBO is at least the target minus 1e-8 |target|.
blrgraph with ``rotate=False`` runs under the same rule, for reference.

Time per sweep: the median interval between successive sweeps (each includes the ELBO),
after one warm-up sweep, as in the other scripts (benchmarks/README.md); the same median of
the process CPU time (``time.process_time``) beside it, less disturbed by other jobs on a
shared machine when BLAS runs one thread.

    PYTHONPATH=. python benchmarks/bench_pca.py [--quick] [--sweeps 30] [--rot-sweeps 225] [--json pca.json]
    PYTHONPATH=. python benchmarks/bench_pca.py --split --blas-threads 1 [--sweeps 30]

``--split`` prints only where blrgraph's sweep spends its CPU time: the VMP updates (the
global steps and the local block), the ELBO, and the rotation between sweeps, for BayesPy's
speed-table sizes (500 x 20, K = 10, with and without rotation; 2000 x 100, K = 40) and
the rotation table's 2000 x 50, K = 10.

Needs bayespy (``pip install bayespy``).
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

A0 = 1e-2


def make_data(M, N, rank, noise, seed):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(M, rank))
    X = rng.normal(size=(rank, N))
    return W @ X + noise * rng.normal(size=(M, N))


def start_means(M, N, K, seed):
    rng = np.random.default_rng(seed + 1)
    return rng.normal(size=(N, K)), rng.normal(size=(M, K))


def run_blrgraph(Y, K, m0, w0, sweeps, rotate=False, cumulative=False, target=None, budget=None):
    import blrgraph as bg
    M, N = Y.shape
    alpha = bg.Gamma(A0, A0, plates=(K,), name="alpha")
    W = bg.MultivariateNormal(np.zeros(K), alpha, plates=(M, 1), name="W")
    X = bg.MultivariateNormal(np.zeros(K), np.eye(K), plates=(N,), name="X")
    tau = bg.Gamma(A0, A0, name="tau")
    y = bg.Normal(bg.Dot(W, X), tau, name="Y").observe(Y)
    X.start_from(m0, np.eye(K))
    W.start_from(w0[:, None, :], np.eye(K))
    model = bg.Model(y, schedule=[X, tau, alpha, W])
    stamp, stamps, cpu = C.sweep_clock()
    t0, c0 = time.perf_counter(), time.process_time()

    def until(it, L):   # stop at the target, or once the CPU time exceeds the budget
        stamp(it, L)
        return (target is not None and reach([L], target) is not None) or \
            (budget is not None and cpu[-1] - c0 > budget)
    res = model.fit("vmp", max_iter=sweeps, tol=0, seed=0, callback=until, rotate=rotate)
    if cumulative:   # times since the start of the fit, per sweep
        return np.asarray(res.elbo_trace), np.asarray(stamps) - t0, np.asarray(cpu) - c0
    return np.asarray(res.elbo_trace), C.per_iter(stamps)[0], C.per_iter(cpu)[0]


def run_bayespy(Y, K, m0, w0, sweeps, rotate=False):
    from bayespy import nodes
    from bayespy.inference import VB
    from bayespy.inference.vmp import transformations
    M, N = Y.shape
    alpha = nodes.Gamma(A0, A0, plates=(K,), name="alpha")
    W = nodes.GaussianARD(0, alpha, shape=(K,), plates=(M, 1), name="W")
    X = nodes.GaussianARD(0, 1, shape=(K,), plates=(1, N), name="X")
    F = nodes.SumMultiply("i,i", W, X, name="F")
    tau = nodes.Gamma(A0, A0, name="tau")
    y = nodes.GaussianARD(F, tau, name="Y")
    y.observe(Y)
    X.initialize_from_mean_and_covariance(m0[None], np.eye(K))
    W.initialize_from_mean_and_covariance(w0[:, None, :], np.eye(K))
    Q = VB(y, F, W, X, tau, alpha)
    if rotate:   # bayespy/demos/pca.py
        R = transformations.RotationOptimizer(transformations.RotateGaussianARD(W, alpha),
                                              transformations.RotateGaussianARD(X), K)
        Q.callback = R.rotate
    stamps, cpu, trace = [], [], []
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(sweeps):
        Q.update(X, tau, alpha, W, repeat=1, verbose=False)
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
        trace.append(Q.L[Q.iter - 1])
    if rotate:
        return np.asarray(trace), np.asarray(stamps) - t0, np.asarray(cpu) - c0
    return np.asarray(trace), C.per_iter(stamps)[0], C.per_iter(cpu)[0]


def reach(trace, target, rtol=1e-8):
    """Index of the first sweep whose ELBO is at least ``target`` - rtol |target| (None)."""
    hit = np.flatnonzero(np.asarray(trace) >= target - rtol * abs(target))
    return int(hit[0]) if hit.size else None


def rotation_table(args):
    """Time to BayesPy's rotated ELBO (the second table of the module docstring)."""
    N, M, K, rank = args.rot_n, args.rot_m, args.rot_k, 5
    Y = make_data(M, N, rank, 0.5, args.seed)
    m0, w0 = start_means(M, N, K, args.seed)
    S = args.rot_sweeps
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        L_bp, t_bp, c_bp = run_bayespy(Y, K, m0, w0, S, rotate=True)
    target, budget = L_bp[-1], c_bp[-1]
    L_bg, t_bg, c_bg = run_blrgraph(Y, K, m0, w0, 20 * S, rotate=True, cumulative=True,
                                    target=target, budget=budget)
    L_pl, t_pl, c_pl = run_blrgraph(Y, K, m0, w0, 20 * S, rotate=False, cumulative=True,
                                    target=target, budget=budget)
    print(f"\nRotations: N = {N} samples x M = {M} dimensions, K = {K} (data rank {rank}); "
          f"target = BayesPy's rotated ELBO after {S} sweeps = {target:.10g}; blrgraph runs "
          f"until it reaches the target or has used BayesPy's CPU time; load {C.loadavg()}\n")
    rows, out = [], {}
    i_bp = reach(L_bp, target)
    for name, L, t, c in (("blrgraph `fit('vmp')` (rotations on)", L_bg, t_bg, c_bg),
                          ("BayesPy + `RotationOptimizer`", L_bp, t_bp, c_bp),
                          ("blrgraph `fit('vmp', rotate=False)`", L_pl, t_pl, c_pl)):
        i = reach(L, target)
        hit = i is not None
        rows.append([name, str(len(L)), f"{L[-1]:.10g}", f"{L[-1] - target:+.3f}",
                     str(i + 1) if hit else f"not in {len(L)}",
                     C.fmt_t(t[i]) if hit else "-", C.fmt_t(c[i]) if hit else "-",
                     C.fmt_x(t_bp[i_bp] / t[i]) if hit else "-",
                     C.fmt_x(c_bp[i_bp] / c[i]) if hit else "-",
                     C.fmt_t(float(np.median(np.diff(t)))), ])
        out[name] = {"elbo": L, "wall": t, "cpu": c, "reached_at": i}
    print(C.md_table(["", "sweeps run", "ELBO at the end", "minus target", "sweeps to target",
                      "time to target (wall)", "time to target (CPU)", "speed-up (wall)",
                      "speed-up (CPU)", "median time per sweep (wall)"], rows))
    return {"N": N, "M": M, "K": K, "sweeps": S, "target": float(target), "runs": out}


def split_table(sizes, sweeps, seed):
    """Where a blrgraph sweep's CPU time goes (the ``--split`` table): the VMP updates
    (the global steps and the local block, or the compiled sweep's node steps), the ELBO,
    and the rotation between sweeps,
    per sweep (process CPU time, totals over ``sweeps`` sweeps after one warm-up sweep).
    Each phase is timed by wrapping the loop's own methods for the run."""
    from blrgraph.inference import compiled, local, loop
    spent = {}

    def timed(obj, name, tag):
        f = getattr(obj, name)

        def g(*a, **k):
            t = time.process_time()
            try:
                return f(*a, **k)
            finally:
                spent[tag] = spent.get(tag, 0.0) + time.process_time() - t
        setattr(obj, name, g)
        return f
    saved = [(loop.Run, "update_globals", timed(loop.Run, "update_globals", "updates")),
             (local.LocalBlock, "fit", timed(local.LocalBlock, "fit", "updates")),
             (loop.Run, "elbo", timed(loop.Run, "elbo", "ELBO")),
             # the sweep resolved once per fit (inference/compiled.py): its steps, its ELBO
             (compiled.NodeStep, "step", timed(compiled.NodeStep, "step", "updates")),
             (compiled.CompiledSweep, "elbo", timed(compiled.CompiledSweep, "elbo", "ELBO"))]
    orig = loop.Run._run

    def run(self):   # the rotation steps, read from the plan when the run starts
        self.plan.between_sweeps = tuple(_timed_step(f, spent) for f in self.plan.between_sweeps)
        return orig(self)
    loop.Run._run = run
    rows = []
    try:
        for M, N, K, rotate in sizes:
            Y = make_data(M, N, min(K, 5), 0.5, seed)
            m0, w0 = start_means(M, N, K, seed)
            run_blrgraph(Y, K, m0, w0, 3, rotate=rotate)          # warm-up (imports, plans)
            spent.clear()
            c0 = time.process_time()
            run_blrgraph(Y, K, m0, w0, sweeps, rotate=rotate)
            total = time.process_time() - c0
            parts = [spent.get(k, 0.0) / sweeps for k in ("updates", "ELBO", "rotation")]
            rows.append([f"{N} x {M}, K = {K}", "on" if rotate else "off",
                         *(C.fmt_t(v) for v in parts), C.fmt_t(total / sweeps)])
    finally:
        loop.Run._run = orig
        for obj, name, f in saved:
            setattr(obj, name, f)
    print(f"\nWhere a sweep's CPU time goes ({sweeps} sweeps, one BLAS thread unless "
          f"--blas-threads says otherwise; load {C.loadavg()})\n")
    print(C.md_table(["data (N x M), K", "rotation", "VMP updates / sweep", "ELBO / sweep",
                      "rotation / sweep", "whole fit / sweep"], rows))


def _timed_step(f, spent):
    def g(model):
        t = time.process_time()
        try:
            return f(model)
        finally:
            spent["rotation"] = spent.get("rotation", 0.0) + time.process_time() - t
    return g


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1000 x 20, K = 5")
    ap.add_argument("--sweeps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blas-threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--rot-sweeps", type=int, default=225, help="0: no rotation table")
    ap.add_argument("--rot-n", type=int, default=2000)
    ap.add_argument("--rot-m", type=int, default=50)
    ap.add_argument("--rot-k", type=int, default=10)
    ap.add_argument("--split", action="store_true",
                    help="only the table of where a sweep's time goes (updates, ELBO, rotation)")
    args = ap.parse_args(argv)
    limit = C.limit_blas(args.blas_threads)
    if args.split:
        split_table([(20, 500, 10, False), (20, 500, 10, True), (50, 2000, 10, True),
                     (100, 2000, 40, False)], args.sweeps, args.seed)
        print(f"\ncommand: {C.command_line()}")
        del limit
        return
    N, M, K, rank = (1000, 20, 5, 3) if args.quick else (10_000, 50, 10, 5)
    Y = make_data(M, N, rank, 0.5, args.seed)
    m0, w0 = start_means(M, N, K, args.seed)
    info = C.machine_info()
    print(C.machine_markdown(info))
    print(f"\nBayesian PCA, N = {N} samples x M = {M} dimensions, K = {K} components "
          f"(data rank {rank}), {args.sweeps} sweeps, load {C.loadavg()}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        L_bp, t_bp, c_bp = run_bayespy(Y, K, m0, w0, args.sweeps)
    L_bg, t_bg, c_bg = run_blrgraph(Y, K, m0, w0, args.sweeps)
    rel = np.abs(L_bg - L_bp) / np.abs(L_bp)
    rows = [["blrgraph `Dot(W, X)`", C.fmt_t(t_bg), C.fmt_x(t_bp / t_bg), C.fmt_t(c_bg),
             C.fmt_x(c_bp / c_bg), f"{L_bg[-1]:.10g}", f"{rel.max():.1e}"],
            ["BayesPy `SumMultiply('i,i', W, X)`", C.fmt_t(t_bp), "1.00x", C.fmt_t(c_bp), "1.00x",
             f"{L_bp[-1]:.10g}", "-"]]
    print(C.md_table(["", "time per sweep (wall)", "speed-up (wall)", "CPU time per sweep",
                      "speed-up (CPU)", f"ELBO after {args.sweeps} sweeps",
                      "max relative ELBO difference over the sweeps"], rows))
    rot = rotation_table(args) if args.rot_sweeps > 0 else None
    print(f"\ncommand: {C.command_line()}")
    C.write_json(args.json, {"machine": info, "N": N, "M": M, "K": K, "rank": rank, "rotation": rot,
                             "sweeps": args.sweeps, "time_per_sweep": {"blrgraph": t_bg, "bayespy": t_bp},
                             "cpu_per_sweep": {"blrgraph": c_bg, "bayespy": c_bp},
                             "elbo": {"blrgraph": L_bg, "bayespy": L_bp}, "max_rel_diff": float(rel.max())})
    del limit


if __name__ == "__main__":
    main()
