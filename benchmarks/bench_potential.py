"""A user's log-factor against the built-in factor (issue "The BLR on any log-factor").

The same Bayesian logistic regression two ways, side by side in one run:

* built-in: ``Bernoulli(logits=Dot(X, w))`` (Gauss-Hermite per row: the exact
  Gaussian-VI optimum), ``fit("ncvmp")``;
* Potential: ``Potential(loglik, w, data=(X, y))`` written with autograd.numpy,
  ``fit("ncvmp")`` (whitened antithetic draws, Stein Hessian).

Reported per size: wall time of each fit and their ratio, the largest mean
difference in posterior sds, the sd ratio, the ELBO difference, and the peak
memory (tracemalloc) of the Potential's fit next to S*N and N*D numbers.

    python benchmarks/bench_potential.py                      # 2,000 x 6 and 100,000 x 20
    python benchmarks/bench_potential.py --sizes 2000x6 --repeats 3
"""
from __future__ import annotations

import argparse
import time

import _common as C
import autograd.numpy as anp
import numpy as np

import blrgraph as bg


def data(N, D, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(N), rng.normal(size=(N, D - 1))])
    w = rng.normal(size=D) * 0.5
    y = (rng.random(N) < 1 / (1 + np.exp(-X @ w))).astype(float)
    return X, y


def loglik(w, X, y):
    a = w @ X.T
    return y * a - anp.logaddexp(0.0, a)


def builtin(X, y):
    w = bg.MultivariateNormal(np.zeros(X.shape[1]), np.eye(X.shape[1]), name="w")
    yy = bg.Bernoulli(logits=bg.Dot(X, w), name="y").observe(y)
    return w, bg.Model(yy).fit("ncvmp")


def potential(X, y):
    w = bg.MultivariateNormal(np.zeros(X.shape[1]), np.eye(X.shape[1]), name="w")
    lik = bg.Potential(loglik, w, data=(X, y), name="lik")
    return w, bg.Model(lik).fit("ncvmp"), lik


def timed(fn, *a):
    t = time.perf_counter()
    out = fn(*a)
    return time.perf_counter() - t, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000x6,100000x20")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--blas-threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    C.limit_blas(args.blas_threads)
    info = C.machine_info()
    print(C.machine_markdown(info))
    rows, out = [], []
    for size in args.sizes.split(","):
        N, D = map(int, size.split("x"))
        X, y = data(N, D)
        tb, tp = [], []
        for r in range(args.repeats):   # alternate, so both see the same load
            t, (w1, f1) = timed(builtin, X, y)
            tb.append(t)
            t, (w2, f2, lik) = timed(potential, X, y)
            tp.append(t)
        (_, _, lik), mem = C.measure_memory(potential, X, y)
        S = lik.factor.n_draws(D)
        sd = np.sqrt(np.diag(w1.posterior.cov))
        dmean = float(np.max(np.abs(w2.posterior.mean - w1.posterior.mean) / sd))
        sdr = np.sqrt(np.diag(w2.posterior.cov)) / sd
        ratio = [p / b for p, b in zip(tp, tb)]
        rec = {"N": N, "D": D, "S": S, "builtin_s": tb, "potential_s": tp, "ratio": ratio,
               "iters": [f1.n_iter, f2.n_iter], "max_mean_diff_sd": dmean,
               "sd_ratio": [float(sdr.min()), float(sdr.max())],
               "elbo": [f1.elbo, f2.elbo], "memory": mem,
               "SN_mb": S * N * 8 / C.MB, "ND_mb": N * D * 8 / C.MB}
        out.append(rec)
        rows.append([f"{N:,} x {D}", S, f"{C.fmt_t(min(tb))} .. {C.fmt_t(max(tb))}",
                     f"{C.fmt_t(min(tp))} .. {C.fmt_t(max(tp))}",
                     f"{min(ratio):.2f}x .. {max(ratio):.2f}x", f"{f1.n_iter} / {f2.n_iter}",
                     f"{dmean:.1e}", f"{sdr.min():.5f} .. {sdr.max():.5f}",
                     f"{f2.elbo - f1.elbo:+.1e}", C.fmt_mem(mem),
                     f"{rec['SN_mb']:.1f} / {rec['ND_mb']:.1f}"])
        print(C.md_table(["N x D", "draws S", "built-in wall", "Potential wall",
                          "Potential / built-in", "sweeps", "max |mean diff| / sd", "sd ratio",
                          "ELBO diff (nats)", "Potential peak MB (tracemalloc / RSS)",
                          "S*N / N*D MB"], rows[-1:]))
    print()
    print(C.md_table(["N x D", "draws S", "built-in wall", "Potential wall",
                      "Potential / built-in", "sweeps", "max |mean diff| / sd", "sd ratio",
                      "ELBO diff (nats)", "Potential peak MB (tracemalloc / RSS)",
                      "S*N / N*D MB"], rows))
    print(f"\n{C.command_line()}  (load {C.loadavg()})")
    C.write_json(args.json, {"machine": info, "results": out})


if __name__ == "__main__":
    main()
