"""A linear-Gaussian state-space model of one long sequence: blrgraph's GaussianMarkovChain
(the Kalman filter / RTS smoother by blocked scans, and by the recursions one step per time
step) against pykalman, time per sweep, in one run.

* Data: D-dimensional states x_t = A x_{t-1} + noise (A a scaled rotation, |eig| 0.95),
  observations y_t = x_t + noise, T steps, 10% of the observations missing.
* blrgraph: ``GaussianMarkovChain(m0, P0, A, Wishart Q, length=T)`` observed through
  ``MultivariateNormal(x, Wishart R).observe(Y, mask=...)``; a sweep is the BLR steps of
  Q, R and the chain, then the ELBO; the chain's q is the exact smoother given E[Q], E[R].
* pykalman: ``KalmanFilter.smooth`` with the same plug-in E[Q]^{-1}, E[R]^{-1} (the
  smoother alone), and ``KalmanFilter.em(n_iter=1)`` learning both covariances (its
  smoother plus its M-step: the work of one sweep).

The smoothed means of blrgraph's chain and pykalman's smoother, both given the same
noise precisions, are compared (max abs difference). Times: median process CPU time per
call or sweep, the first left out, with ``--blas-threads 1`` on both sides.

    PYTHONPATH=. python benchmarks/bench_kalman.py --blas-threads 1
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402


def make_data(T, D, seed):
    rng = np.random.default_rng(seed)
    Qr = np.linalg.qr(rng.normal(size=(D, D)))[0]
    A = 0.95 * Qr
    X = np.zeros((T, D))
    for t in range(1, T):
        X[t] = A @ X[t - 1] + 0.3 * rng.normal(size=D)
    Y = X + rng.normal(size=(T, D))
    obs = rng.random(T) >= 0.1
    return A, np.where(obs[:, None], Y, 0.0), obs


def cpu_median(fn, repeat):
    ts = []
    for _ in range(repeat + 1):
        t0 = time.process_time()
        fn()
        ts.append(time.process_time() - t0)
    return float(np.median(ts[1:]))


def build(A, Y, obs):
    import blrgraph as bg
    T, D = Y.shape
    Q = bg.Wishart(D + 1.0, np.eye(D), name="Q")
    R = bg.Wishart(D + 1.0, np.eye(D), name="R")
    x = bg.GaussianMarkovChain(np.zeros(D), np.eye(D), A, Q, length=T, name="x")
    y = bg.MultivariateNormal(x, R, name="y").observe(Y, mask=obs)
    model = bg.Model(y)
    model.fit("vmp", max_iter=3, seed=0)
    return model


def blrgraph_times(model, repeat, scan):
    """(CPU per sweep, CPU of the chain's smoother alone, smoothed means)."""
    from blrgraph.families import gaussian_markov_chain as gmc
    from blrgraph.inference.blr import blr_step
    from blrgraph.inference.elbo import elbo
    old = gmc.SCAN_MIN_STEPS
    gmc.SCAN_MIN_STEPS = 2 if scan else 10 ** 12
    try:
        Q, R, x = (model[n] for n in ("Q", "R", "x"))

        def sweep():
            for node in (Q, R, x):
                blr_step(model, node)
            elbo(model)
        per_sweep = cpu_median(sweep, repeat)
        nat = x.nat
        smooth = cpu_median(lambda: x.family.moments_and_entropy(nat), repeat)
        return per_sweep, smooth
    finally:
        gmc.SCAN_MIN_STEPS = old


def pykalman_times(model, A, Y, obs, repeat):
    from pykalman import KalmanFilter
    T, D = Y.shape
    inv = np.linalg.inv
    EQ, ER = (model[n].posterior.mean for n in ("Q", "R"))
    kf = KalmanFilter(transition_matrices=A, observation_matrices=np.eye(D),
                      transition_covariance=inv(EQ), observation_covariance=inv(ER),
                      initial_state_mean=np.zeros(D), initial_state_covariance=np.eye(D))
    Ym = np.ma.masked_array(Y, mask=np.repeat(~obs[:, None], D, 1))
    means = kf.smooth(Ym)[0]
    smooth = cpu_median(lambda: kf.smooth(Ym), repeat)
    em = cpu_median(lambda: kf.em(Ym, n_iter=1, em_vars=["transition_covariance",
                                                          "observation_covariance"]), repeat)
    return smooth, em, means


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--length", type=int, default=10000)
    ap.add_argument("--dim", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5, help="timed calls (after one warm-up)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blas-threads", type=int, help="cap BLAS threads (default: as configured)")
    ap.add_argument("--json", help="write every number to this file")
    args = ap.parse_args(argv)
    import pykalman  # noqa: F401 (its imports before the BLAS cap)
    _limits = C.limit_blas(args.blas_threads)  # noqa: F841
    info = C.machine_info()
    A, Y, obs = make_data(args.length, args.dim, args.seed)
    model = build(A, Y, obs)
    scan = blrgraph_times(model, args.repeat, True)
    rec = blrgraph_times(model, args.repeat, False)
    pk_smooth, pk_em, pk_means = pykalman_times(model, A, Y, obs, args.repeat)
    x = model["x"]                     # its q is the smoother given the current E[Q], E[R]
    m_scan, m_rec = (x.family._smooth(x.nat, scan=s)[0] for s in (True, False))
    diff = float(np.max(np.abs(m_scan - pk_means)))
    diff_rec = float(np.max(np.abs(m_scan - m_rec)))
    rows = [["blrgraph, blocked scans", C.fmt_t(scan[0]), C.fmt_t(scan[1]), "1", "1"],
            ["blrgraph, recursions (before)", C.fmt_t(rec[0]), C.fmt_t(rec[1]),
             C.fmt_x(rec[0] / scan[0]), C.fmt_x(rec[1] / scan[1])],
            ["pykalman (`em(n_iter=1)`; `smooth`)", C.fmt_t(pk_em), C.fmt_t(pk_smooth),
             C.fmt_x(pk_em / scan[0]), C.fmt_x(pk_smooth / scan[1])]]
    print(f"\n# Kalman smoother, one sequence of {args.length} steps, D={args.dim}; CPU time, "
          f"median of {args.repeat}\n")
    print(C.machine_markdown(info))
    print(C.md_table(["implementation", "CPU per sweep", "CPU of the smoother alone",
                      "sweep / blrgraph's", "smoother / blrgraph's"], rows))
    print(f"\nsmoothed means: blrgraph scan vs pykalman max abs difference {diff:.1e}; "
          f"scan vs recursions {diff_rec:.1e}")
    print(f"\ncommand: `{C.command_line()}`")
    C.write_json(args.json, {"machine": info, "T": args.length, "D": args.dim,
                             "blrgraph_scan": scan[:2], "blrgraph_recursions": rec[:2],
                             "pykalman_smooth": pk_smooth, "pykalman_em_iter": pk_em,
                             "max_abs_diff_pykalman": diff, "max_abs_diff_recursions": diff_rec})


if __name__ == "__main__":
    main()
