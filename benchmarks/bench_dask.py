"""A GMM fitted from Parquet files on a Dask cluster against one in-memory process.

The data (N rows x D columns, K well-separated Gaussian clusters) are written to P
Parquet files in slices (never whole in memory), read with
``blrgraph.io_dask.read_table`` (one chunk of rows per file) and fitted with
``fit("vmp")`` on a ``LocalCluster`` of ``--workers`` processes, one thread each. The
same data loaded into memory (pandas) is fitted in this process with one BLAS thread.
Both start from random responsibilities with the same seed; S sweeps, the first one
(reading the files, persisting the chunks, shipping the model) reported apart.

Measured per sweep of the Dask fit (``model.dask_view.stats``): wall time, the sum of
the tasks' compute time, the bytes sent to the tasks (global natural parameters) and
back (their messages), and from them the projection of the time per sweep to
``--project-rows`` rows on ``--project-workers`` workers:

    T = c * N' / W' + o * P' + s

c = task seconds per row, o = the scheduler's cost per task (wall time not explained
by compute, per task), s = the driver's per-sweep cost (the global steps), P' the
partitions of 1e6 rows each.

    PYTHONPATH=. python benchmarks/bench_dask.py --n 1000000 --d 10 --k 8 --files 8
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402


def write_parquet(path, N, D, K, files, seed=0):
    import pandas as pd
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=6.0, size=(K, D))
    os.makedirs(path, exist_ok=True)
    for i in range(files):
        n = N // files + (1 if i < N % files else 0)
        z = rng.integers(0, K, n)
        X = means[z] + rng.normal(size=(n, D))
        pd.DataFrame(X, columns=[f"x{j}" for j in range(D)]).to_parquet(
            os.path.join(path, f"part{i:04d}.parquet"))


def gmm(data, K):
    import blrgraph as bg
    N, D = data.shape
    pi = bg.Dirichlet(np.ones(K), name="pi")
    z = bg.Categorical(pi, plates=(N,), name="z")
    theta = bg.NormalWishart(np.zeros(D), 0.01, D + 2.0, np.eye(D), plates=(K,), name="theta")
    x = bg.Mixture(z, bg.MultivariateNormal, theta, name="x").observe(data)
    return bg.Model(x)


def timed_fit(model, sweeps, seed, on_sweep=None):
    stamps = [time.perf_counter()]

    def cb(it, elbo):
        stamps.append(time.perf_counter())
        if on_sweep is not None:
            on_sweep(it)
        return False

    f = model.fit("vmp", init="random", seed=seed, max_iter=sweeps, tol=1e-300, callback=cb)
    dt = np.diff(stamps)
    return f, float(dt[0]), float(np.median(dt[1:])) if len(dt) > 1 else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sweeps", type=int, default=5)
    ap.add_argument("--project-rows", type=float, default=1e9)
    ap.add_argument("--project-workers", type=int, default=100)
    ap.add_argument("--json")
    args = ap.parse_args()
    C.limit_blas(1)
    from distributed import Client, LocalCluster
    from blrgraph import io_dask

    tmp = tempfile.mkdtemp(prefix="bench_dask_")
    try:
        t0 = time.perf_counter()
        write_parquet(tmp, args.n, args.d, args.k, args.files)
        print(f"wrote {args.n} x {args.d} to {args.files} Parquet files in "
              f"{time.perf_counter() - t0:.1f} s")
        out = {"args": vars(args)}
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                          dashboard_address=None, silence_logs=40,
                          env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                               "MKL_NUM_THREADS": "1"}) as cluster, Client(cluster):
            rows = []
            for files_per_chunk in (1,):
                X = io_dask.read_table(tmp)
                m = gmm(X, args.k)
                stats = []
                f, first, per = timed_fit(m, args.sweeps, 0,
                                          lambda it: stats.append(dict(m.dask_view.stats)))
                st = stats[-1]
                rows.append(dict(partitions=st["partitions"], first=first, per_sweep=per,
                                 task_seconds=st["task_seconds"],
                                 bytes_to=st["bytes_to_tasks"], bytes_from=st["bytes_from_tasks"],
                                 model_bytes=st["model_bytes"], elbo=float(f.elbo)))
            out["dask"] = rows
        # the same tasks in this process, one at a time (dask's synchronous scheduler):
        # the backend's own cost, without the cluster's processes sharing the cores
        import dask
        with dask.config.set(scheduler="sync"):
            m = gmm(io_dask.read_table(tmp), args.k)
            stats = []
            f, first, per = timed_fit(m, args.sweeps, 0,
                                      lambda it: stats.append(dict(m.dask_view.stats)))
            out["sync"] = dict(first=first, per_sweep=per, task_seconds=stats[-1]["task_seconds"],
                               elbo=float(f.elbo))
        import pandas as pd
        frame = pd.read_parquet(tmp)
        Xm = frame.to_numpy()
        del frame
        f_mem, first_mem, per_mem = timed_fit(gmm(Xm, args.k), args.sweeps, 0)
        out["memory"] = dict(first=first_mem, per_sweep=per_mem, elbo=float(f_mem.elbo))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    r = out["dask"][0]
    W, P, N = args.workers, r["partitions"], args.n
    c = r["task_seconds"] / N                       # task seconds per row
    compute_wall = r["task_seconds"] / W            # if the tasks spread evenly
    o = max(r["per_sweep"] - compute_wall, 0.0) / P  # wall not explained by compute, per task
    s = 0.0
    Np, Wp = args.project_rows, args.project_workers
    Pp = int(np.ceil(Np / 1e6))
    proj = c * Np / Wp + o * Pp + s
    c_sync = out["sync"]["task_seconds"] / N       # per row, one process alone
    proj_sync = c_sync * Np / Wp + o * Pp + s
    bytes_sweep = r["bytes_to"] + r["bytes_from"]
    out["projection"] = dict(c=c, c_sync=c_sync, o=o, rows=Np, workers=Wp, partitions=Pp,
                             seconds=proj, seconds_sync_c=proj_sync,
                             bytes_per_sweep=bytes_sweep / P * Pp)
    print()
    print("| setting | first sweep (s) | time per sweep (s) | task compute per sweep (s) | "
          "bytes to tasks / sweep | bytes from tasks / sweep |")
    print("|---|---|---|---|---|---|")
    print(f"| in memory, 1 process | {out['memory']['first']:.2f} | {out['memory']['per_sweep']:.3f} "
          f"| - | - | - |")
    sy = out["sync"]
    print(f"| Dask tasks in this process (sync scheduler), {P} partitions | {sy['first']:.2f} | "
          f"{sy['per_sweep']:.3f} | {sy['task_seconds']:.3f} | {r['bytes_to']:,} | "
          f"{r['bytes_from']:,} |")
    print(f"| Dask, {W} workers, {P} partitions | {r['first']:.2f} | {r['per_sweep']:.3f} | "
          f"{r['task_seconds']:.3f} | {r['bytes_to']:,} | {r['bytes_from']:,} |")
    print()
    print(f"model shipped once: {r['model_bytes']:,} bytes; final ELBO dask {r['elbo']:.6g}, "
          f"sync {sy['elbo']:.6g}, memory {out['memory']['elbo']:.6g}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"c = {c * 1e9:.1f} ns per row (task time), o = {o * 1e3:.1f} ms per task; "
          f"projection at {Np:.0e} rows on {Wp} workers ({Pp} partitions of 1e6 rows): "
          f"{proj:.1f} s per sweep, {bytes_sweep / P * Pp / 2 ** 20:.1f} MiB travelling per sweep")
    print(f"with the uncontended c = {c_sync * 1e9:.1f} ns per row (sync scheduler): "
          f"{proj_sync:.1f} s per sweep ({c_sync * Np / Wp:.1f} s compute + {o * Pp:.1f} s "
          f"task overhead, taken as serial)")
    print(f"transfer per sweep: {bytes_sweep:,} bytes for {r['task_seconds']:.2f} task-seconds "
          f"({bytes_sweep / max(r['task_seconds'], 1e-9) / 2 ** 20:.3f} MiB per task-second)")
    if args.json:
        C.write_json(args.json, out)


if __name__ == "__main__":
    main()
