"""Where the CPU of a large VB-GMM sweep goes: the parts of the mixture's one-pass z step
(``FlatStats.softmax_pass``, inference/zstep.py) timed in place, and each part's floor.

The GMM is bench_gmm.py's (``make_data``, ``make_priors``, ``build_blrgraph``); it is fitted
``--warm`` sweeps with ``n_jobs=1`` (BLAS at one thread, as the fit holds it), and the pass's
own inputs of the last sweep (the kept Phi^T and the coefficients) are taken. Then, in
``--rounds`` rounds taking turns, with BLAS at one thread:

* the whole pass (``softmax_pass``) and the same block loop with a clock around each part:
  lam = Mt Phi^T (``Phi coef``), the row maxima, lam - max, exp, the row sums, the division,
  the log-sum-exps, p^T Phi (``z^T Phi``);
* each product on one block kept in cache (the same block again and again, as many times
  as the pass has blocks), with K/2, K and 2K rows of coefficients (or of z): a product
  that costs about the same at K/2 rows as at K is bound by going over the block of Phi
  (OpenBLAS copies it into its panels on every call), not by its multiply-adds;
* exp of one block's lam minus its row maxima, in cache.

Times are thread CPU time per sweep (the sum over the blocks), medians over the rounds.

    PYTHONPATH=. python benchmarks/bench_pass_parts.py [--rows 400000] [--dim 10] [--k 8]
        [--rounds 7] [--warm 4]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402

import bench_gmm as G  # noqa: E402

PARTS = ("Phi coef", "max", "lam - max", "exp", "sum", "divide", "log-sum-exp", "z^T Phi")


def pass_inputs(N, D, K, warm, seed=0):
    """(the data's FlatStats, the pass's coefficients Mt) of the last of ``warm`` sweeps."""
    from threadpoolctl import threadpool_limits
    from blrgraph.graph import suffstats
    X = G.make_data(N, D, K, seed=seed)
    model, _ = G.build_blrgraph(X, K, G.make_priors(X))
    seen = {}
    orig = suffstats.FlatStats.softmax_pass

    def spy(self, Mt, out=None):
        seen["fs"], seen["Mt"] = self, np.array(Mt)
        return orig(self, Mt, out)
    suffstats.FlatStats.softmax_pass = spy
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            model.fit("vmp", max_iter=warm, tol=0, seed=seed,
                      init=G.initial_resp(N, K, seed), n_jobs=1)
    finally:
        suffstats.FlatStats.softmax_pass = orig
    if "fs" not in seen:
        raise SystemExit("the fit did not take the one-pass z step (rows too few?)")
    return seen["fs"], seen["Mt"]


def parts_loop(H, Mt, lam, p, lse, rows):
    """softmax_pass's block loop (suffstats.py) with a thread-CPU clock around each part."""
    clock = time.thread_time
    acc = np.zeros(len(PARTS))
    K, E = lam.shape
    S, tmp = np.zeros((K, H.shape[0])), np.empty((K, H.shape[0]))
    t = np.empty(len(PARTS) + 1)
    for i in range(0, E, rows):
        j = min(E, i + rows)
        Hb, L, q = H[:, i:j], lam[:, i:j], p[:, i:j]
        t[0] = clock()
        np.matmul(Mt, Hb, out=L)
        t[1] = clock()
        m = np.maximum.reduce(L, axis=0)
        t[2] = clock()
        np.subtract(L, m, out=q)
        t[3] = clock()
        np.exp(q, out=q)
        t[4] = clock()
        s = np.add.reduce(q, axis=0)
        t[5] = clock()
        np.divide(q, s, out=q)
        t[6] = clock()
        np.log(s, out=s)
        np.add(s, m, out=lse[i:j])
        t[7] = clock()
        S += np.matmul(q, Hb.T, out=tmp)
        t[8] = clock()
        acc += np.diff(t)
    return acc, S


def in_cache(H, Mt, q, lam, rows, blocks):
    """Thread CPU time of ``blocks`` calls on one block kept in cache: the two products
    with K/2, K and 2K rows of coefficients (of z), and exp of lam minus its row maxima."""
    Hb = np.ascontiguousarray(H[:, :rows])
    K = Mt.shape[0]
    out = {}
    for k in sorted({max(1, K // 2), K, 2 * K}):
        M = np.vstack([Mt] * 2)[:k]
        L, S = np.empty((k, rows)), np.empty((k, H.shape[0]))
        qk = np.ascontiguousarray(np.vstack([q[:, :rows]] * 2)[:k])
        for name, f in (("Phi coef", lambda: np.matmul(M, Hb, out=L)),
                        ("z^T Phi", lambda: np.matmul(qk, Hb.T, out=S))):
            f()
            t0 = time.thread_time()
            for _ in range(blocks):
                f()
            out[name, k] = time.thread_time() - t0
    x = np.ascontiguousarray(lam[:, :rows])
    np.subtract(x, np.maximum.reduce(x, axis=0), out=x)
    e = np.empty_like(x)
    np.exp(x, out=e)
    t0 = time.thread_time()
    for _ in range(blocks):
        np.exp(x, out=e)
    out["exp"] = time.thread_time() - t0
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=400_000)
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warm", type=int, default=4)
    a = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits
    from blrgraph.graph import suffstats
    N, D, K = int(a.rows), a.dim, a.k
    fs, Mt = pass_inputs(N, D, K, a.warm)
    H = fs._headT
    rows = suffstats.PASS_ROWS
    blocks = -(-N // rows)
    print(f"# one-pass z step, VB-GMM {N} x {D}, K={K} (P = {H.shape[0]}), blocks of {rows} "
          f"rows; load {C.loadavg()}")
    lam, p, lse = np.empty((K, N)), np.empty((K, N)), np.empty(N)
    whole, parts, cache = [], [], []
    with threadpool_limits(limits=1, user_api="blas"):
        fs.softmax_pass(Mt, (lam, p, lse))
        for _ in range(a.rounds):
            t0 = time.thread_time()
            fs.softmax_pass(Mt, (lam, p, lse))
            whole.append(time.thread_time() - t0)
            parts.append(parts_loop(H, Mt, lam, p, lse, rows)[0])
            cache.append(in_cache(H, Mt, p, lam, rows, blocks))
    ms = 1e3
    whole = np.median(whole) * ms
    parts = np.median(parts, axis=0) * ms
    floor = {k: np.median([c[k] for c in cache]) * ms for k in cache[0]}
    half = max(1, K // 2)
    rows_out = [["whole pass (softmax_pass)", f"{whole:.1f}", "", "", "", ""],
                ["the parts, summed", f"{parts.sum():.1f}", "100%", "", "", ""]]
    for name, t in zip(PARTS, parts):
        f = [floor.get((name, k)) for k in (half, K, 2 * K)] if (name, K) in floor else \
            [None, floor.get(name), None]
        rows_out.append([name, f"{t:.1f}", f"{100 * t / parts.sum():.0f}%"] +
                        ["" if v is None else f"{v:.1f}" for v in f])
    print(C.md_table(["part", "ms / sweep", "share", f"in cache, {half} rows",
                      f"in cache, K = {K}", f"in cache, {2 * K} rows"], rows_out))
    print(f"\nload after {C.loadavg()}")


if __name__ == "__main__":
    main()
