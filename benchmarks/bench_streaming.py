"""Streaming SVI: memory stays flat while N grows (blrgraph only).

For each N the VB-GMM data (D=2, K=5, as in bench_gmm.py) is written to a .npy file
in chunks (never held in memory whole), then opened with
``np.load(path, mmap_mode="r")`` and fitted with
``fit("svi", batch_size=1000, epochs=1)``, so the engine reads one minibatch at a time.
Measured around model build + fit:

* tracemalloc peak (numpy + Python heap allocated during the call);
* RSS growth (high-water mark reset before the call). This includes the pages of the
  memory-mapped file that were read (page cache mapped into the process, reclaimable),
  so it grows with N even when the heap does not;
* peak anonymous RSS growth (RssAnon sampled every 100 steps): memory that is not
  file-backed.

With ``--in-memory`` the same fit on an in-memory array is measured as a contrast
(there the N x K responsibilities and the data copy live in memory).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402

from bench_gmm import build_blrgraph, make_priors  # noqa: E402

D, K = 2, 5


def write_npy(path, N, chunk=1_000_000, seed=0):
    """N rows of a 5-component 2-D mixture, written chunk by chunk."""
    rng = np.random.default_rng(1000 + seed)
    means = rng.normal(0.0, 6.0, size=(K, D))
    chols = []
    for _ in range(K):
        A = rng.normal(size=(D, D)) * 0.6
        chols.append(np.linalg.cholesky(A @ A.T + 0.5 * np.eye(D)))
    chols = np.stack(chols)
    weights = rng.dirichlet(5.0 * np.ones(K))
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(N, D))
    for s in range(0, N, chunk):
        n = min(chunk, N - s)
        lab = rng.choice(K, size=n, p=weights)
        eps = rng.standard_normal((n, D))
        out[s:s + n] = means[lab] + np.einsum("nij,nj->ni", chols[lab], eps)
    out.flush()
    del out


def priors_from_sample(path, n=100_000):
    """Priors from the first rows (a full pass is not needed): same recipe as bench_gmm."""
    X = np.load(path, mmap_mode="r")
    return make_priors(np.array(X[:n]))


def run_stream(path, pri, batch_size, epochs, seed, in_memory=False):
    X = np.load(path, mmap_mode="r")
    if in_memory:
        X = np.array(X)
    N = X.shape[0]
    anon0 = C.proc_status_mb("RssAnon")
    peak = {"anon": 0.0, "file": 0.0}
    t0 = time.perf_counter()

    def cb(t, L):
        if t % 100 == 0:
            peak["anon"] = max(peak["anon"], C.proc_status_mb("RssAnon") - anon0)
            peak["file"] = max(peak["file"], C.proc_status_mb("RssFile"))
        return False

    model, (w, theta, z) = build_blrgraph(X, K, pri)
    res = model.fit("svi", batch_size=batch_size, epochs=epochs, seed=seed, callback=cb)
    t = time.perf_counter() - t0
    peak["anon"] = max(peak["anon"], C.proc_status_mb("RssAnon") - anon0)
    means = np.asarray(theta.posterior.params["mean"])
    weights = np.asarray(w.posterior.mean)
    return {"N": N, "time": t, "steps": int(res.n_iter), "elbo_estimate_per_point": float(res.elbo) / N,
            "peak_anon_mb": peak["anon"], "means": means, "weights": weights}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="N = 1e4, 1e5")
    ap.add_argument("--sizes", help="comma-separated N (default 1e5,1e6,1e7)")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--in-memory", help="also fit these N from an in-memory array (default: the "
                                        "two smallest sizes; '' for none)")
    ap.add_argument("--dir", help="where to write the .npy files (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the .npy files")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blas-threads", type=int, help="cap BLAS threads (default: as configured)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    _limits = C.limit_blas(args.blas_threads)  # noqa: F841
    sizes = [int(float(s)) for s in (args.sizes or ("1e4,1e5" if args.quick else "1e5,1e6,1e7")).split(",")]
    in_mem = sorted(sizes)[:2] if args.in_memory is None else \
        [int(float(s)) for s in args.in_memory.split(",") if s]
    info = C.machine_info()
    t_all = time.perf_counter()
    tmp = args.dir or tempfile.mkdtemp(prefix="blrgraph-bench-")
    rows, results = [], []
    # warm-up (imports, first-call caches) so the first measured size is not charged for them
    wpath = os.path.join(tmp, "warmup.npy")
    write_npy(wpath, 5000, seed=args.seed)
    run_stream(wpath, priors_from_sample(wpath), min(args.batch_size, 5000), 1, args.seed)
    os.remove(wpath)
    for N in sizes:
        path = os.path.join(tmp, f"gmm_{N}.npy")
        t0 = time.perf_counter()
        write_npy(path, N, seed=args.seed)
        t_write = time.perf_counter() - t0
        pri = priors_from_sample(path)
        for mode in (["mmap"] + (["in-memory"] if N in in_mem else [])):
            r, m = C.measure_memory(run_stream, path, pri, args.batch_size, args.epochs, args.seed,
                                    mode == "in-memory")
            r.update(mode=mode, file_mb=os.path.getsize(path) / C.MB, write_s=t_write, **m)
            results.append(r)
            print(f"N={N:,} {mode}: {r['time']:.1f} s, {r['steps']} steps, tracemalloc peak "
                  f"{r['tracemalloc_mb']:.1f} MB, RSS growth {r['maxrss_mb']:.1f} MB, "
                  f"anon {r['peak_anon_mb']:.1f} MB", flush=True)
        if not args.keep:
            os.remove(path)
    if not args.keep and not args.dir:
        os.rmdir(tmp)
    mm = [r for r in results if r["mode"] == "mmap"]
    print("\n# Streaming SVI (memory-mapped .npy): memory against N\n")
    print(C.machine_markdown(info))
    print(f"VB-GMM D={D}, K={K}; fit('svi', batch_size={args.batch_size}, epochs={args.epochs}). "
          f"Memory in MB during build + fit.\n")
    for r in results:
        rows.append([f"{r['N']:,}", r["mode"], f"{r['file_mb']:.0f}", f"{r['time']:.1f} s", r["steps"],
                     f"{r['tracemalloc_mb']:.1f}", f"{r['maxrss_mb']:.1f}" + ("" if r["maxrss_reset"] else "*"),
                     f"{r['peak_anon_mb']:.1f}",
                     f"{r['elbo_estimate_per_point']:.4f}"])
    print(C.md_table(["N", "data", "file (MB)", "time", "steps", "tracemalloc peak", "RSS growth",
                      "anon RSS growth", "ELBO estimate / N"], rows))
    if len(mm) > 1:
        lo, hi = mm[0], mm[-1]
        ratio = hi["tracemalloc_mb"] / lo["tracemalloc_mb"]
        print(f"\nN x{hi['N'] / lo['N']:.0f} ({lo['N']:,} -> {hi['N']:,}), streamed: tracemalloc peak "
              f"{lo['tracemalloc_mb']:.1f} -> {hi['tracemalloc_mb']:.1f} MB (x{ratio:.2f}), anonymous RSS "
              f"growth {lo['peak_anon_mb']:.1f} -> {hi['peak_anon_mb']:.1f} MB, time x{hi['time'] / lo['time']:.1f}")
    total = time.perf_counter() - t_all
    print(f"\ncommand: `{C.command_line()}`; total {total:.0f} s")
    C.write_json(args.json, {"benchmark": "streaming", "command": C.command_line(), "machine": info,
                             "results": results, "total_seconds": total})


if __name__ == "__main__":
    main()
