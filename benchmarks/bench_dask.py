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
    """(fit, first sweep's wall s, median wall s of the others, median driver-process CPU
    s of the others)."""
    stamps, cpu = [time.perf_counter()], [time.process_time()]

    def cb(it, elbo):
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
        if on_sweep is not None:
            on_sweep(it)
        return False

    f = model.fit("vmp", init="random", seed=seed, max_iter=sweeps, tol=1e-300, callback=cb)
    dt, dc = np.diff(stamps), np.diff(cpu)
    med = (lambda a: float(np.median(a[1:])) if len(a) > 1 else float("nan"))
    return f, float(dt[0]), med(dt), med(dc)


def timed_svi(model, steps, batch_size, seed):
    """(median wall s per SVI step after the first 5, median driver CPU s, the fit)."""
    stamps, cpu = [time.perf_counter()], [time.process_time()]

    def cb(it, elbo):
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
        return False

    f = model.fit("svi", init="random", seed=seed, batch_size=batch_size, max_steps=steps,
                  warmup=0, callback=cb)
    return float(np.median(np.diff(stamps)[5:])), float(np.median(np.diff(cpu)[5:])), f


def _worker_memory():
    """(RSS now, peak RSS) of this worker process in bytes."""
    import resource
    import psutil
    return psutil.Process().memory_info().rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_dask(path, args, scheduler=None):
    """The Dask fit; per sweep (median of sweeps 2..S): wall, driver CPU, the tasks'
    wall and CPU seconds, bytes to and from the tasks."""
    from blrgraph import io_dask
    import dask
    m = gmm(io_dask.read_table(path), args.k)
    stats = []
    with dask.config.set({"blrgraph.partition-cache": args.partition_cache}):
        f, first, per, drv = timed_fit(m, args.sweeps, 0,
                                       lambda it: stats.append(dict(m.dask_view.stats)))
    med = (lambda key: float(np.median([st[key] for st in stats[1:]])))
    return dict(partitions=stats[-1]["partitions"], first=first, per_sweep=per, driver_cpu=drv,
                task_seconds=med("task_seconds"), task_cpu=med("task_cpu"),
                rebuilt_cpu=med("rebuilt_cpu"), rebuilt_rows=med("rebuilt_rows"),
                bytes_to=stats[-1]["bytes_to_tasks"], bytes_from=stats[-1]["bytes_from_tasks"],
                model_bytes=stats[-1]["model_bytes"], elbo=float(f.elbo))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--files", type=int, default=None, help="Parquet files (default: N / 1e6)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="8GB", help="per worker (LocalCluster)")
    ap.add_argument("--partition-cache", type=int, default=None,
                    help="partitions whose restricted model a worker keeps (default: all)")
    ap.add_argument("--sweeps", type=int, default=5)
    ap.add_argument("--skip-sync", action="store_true",
                    help="skip the one-process run of the tasks (it holds every row)")
    ap.add_argument("--skip-memory", action="store_true", help="skip the in-memory fit")
    ap.add_argument("--project-rows", type=float, default=1e9)
    ap.add_argument("--project-workers", type=int, default=100)
    ap.add_argument("--bandwidth", type=float, default=1e9 / 8, help="bytes/s for the projection")
    ap.add_argument("--svi-steps", type=int, default=0, help="also time fit('svi') steps")
    ap.add_argument("--batch-size", type=int, default=1000, help="SVI minibatch rows")
    ap.add_argument("--json")
    ap.add_argument("--report", metavar="JSON", help="print the tables of an earlier run's JSON")
    args = ap.parse_args()
    if args.report:
        import json
        with open(args.report) as f:
            out = json.load(f)
        for k, v in out["args"].items():
            if k not in ("project_rows", "project_workers", "bandwidth"):
                setattr(args, k, v)
        return report(out, args)
    args.files = args.files or max(1, int(round(args.n / 1e6)))
    C.limit_blas(1)
    from distributed import Client, LocalCluster

    tmp = tempfile.mkdtemp(prefix="bench_dask_")
    out = {"args": vars(args), "machine": C.machine_info(), "command": C.command_line()}
    try:
        t0 = time.perf_counter()
        write_parquet(tmp, args.n, args.d, args.k, args.files)
        print(f"wrote {args.n} x {args.d} to {args.files} Parquet files in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                          memory_limit=args.memory_limit, dashboard_address=None,
                          silence_logs=40,
                          env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                               "MKL_NUM_THREADS": "1"}) as cluster, Client(cluster) as client:
            out["dask"] = run_dask(tmp, args)
            if args.svi_steps:
                from blrgraph import io_dask
                m = gmm(io_dask.read_table(tmp), args.k)
                per, drv, f = timed_svi(m, args.svi_steps, args.batch_size, 0)
                out["svi_dask"] = dict(per_step=per, driver_cpu=drv, elbo=float(f.elbo),
                                       partitions=m.dask_view.stats["partitions"],
                                       task_cpu=m.dask_view.stats["task_cpu"])
                print("svi dask:", out["svi_dask"], flush=True)
            mem = list(client.run(_worker_memory).values())
            out["dask"]["worker_rss"] = [a for a, _ in mem]
            out["dask"]["worker_peak_rss"] = [b for _, b in mem]
            print("dask:", out["dask"], flush=True)
        if not args.skip_sync:
            # the same tasks in this process, one at a time (dask's synchronous
            # scheduler): the backend's own cost, without the cluster's processes
            import dask
            with dask.config.set(scheduler="sync"):
                out["sync"] = run_dask(tmp, args)
            print("sync:", out["sync"], flush=True)
        if not args.skip_memory:
            import pandas as pd
            C._reset_peak_rss()
            before = C._rss_now_mb()
            Xm = pd.read_parquet(tmp).to_numpy()
            f_mem, first_mem, per_mem, cpu_mem = timed_fit(gmm(Xm, args.k), args.sweeps, 0)
            out["memory"] = dict(first=first_mem, per_sweep=per_mem, cpu=cpu_mem,
                                 elbo=float(f_mem.elbo), rss_before_mb=before,
                                 peak_rss_mb=C._maxrss_mb(), data_mb=Xm.nbytes / C.MB)
            if args.svi_steps:
                per, cpu, f = timed_svi(gmm(Xm, args.k), args.svi_steps, args.batch_size, 0)
                out["svi_memory"] = dict(per_step=per, cpu=cpu, elbo=float(f.elbo))
                print("svi memory:", out["svi_memory"], flush=True)
            del Xm, f_mem
            print("memory:", out["memory"], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["loadavg_end"] = C.loadavg()
    report(out, args)
    if args.json:
        C.write_json(args.json, out)


def report(out, args):
    r = out["dask"]
    W, P, N = args.workers, r["partitions"], args.n
    Np, Wp = args.project_rows, args.project_workers
    Pp = int(np.ceil(Np / (N / P)))                  # partitions of the same size
    c = r["task_seconds"] / N                        # task seconds per row (contended)
    compute_wall = r["task_seconds"] / W             # if the tasks spread evenly
    o = max(r["per_sweep"] - compute_wall, 0.0) / P  # wall not explained by compute, per task
    bytes_sweep = r["bytes_to"] + r["bytes_from"]
    transfer = bytes_sweep / args.bandwidth
    proj = dict(c=c, o=o, partitions=Pp, compute=c * Np / Wp, overhead=o * Pp,
                bytes=bytes_sweep / P * Pp)
    if "sync" in out:
        proj["c_sync"] = out["sync"]["task_seconds"] / N
    kept_rows = N - r.get("rebuilt_rows", 0)                     # partitions kept
    proj["c_cpu"] = (r["task_cpu"] - r.get("rebuilt_cpu", 0.0)) / kept_rows
    if r.get("rebuilt_rows"):
        proj["c_rebuilt_cpu"] = r["rebuilt_cpu"] / r["rebuilt_rows"]
    proj["transfer"] = proj["bytes"] / args.bandwidth
    out["projection"] = proj
    print()
    print("| setting | first sweep (s) | time per sweep (s) | CPU per sweep (s) | "
          "bytes to tasks / sweep | bytes from tasks / sweep |")
    print("|---|---|---|---|---|---|")
    if "memory" in out:
        mm = out["memory"]
        print(f"| in memory, one process | {mm['first']:.2f} | {mm['per_sweep']:.3f} | "
              f"{mm['cpu']:.3f} (process) | - | - |")
    if "sync" in out:
        sy = out["sync"]
        print(f"| Dask tasks in one process (sync scheduler), {P} partitions | {sy['first']:.2f} "
              f"| {sy['per_sweep']:.3f} | {sy['task_cpu']:.3f} (tasks) | {sy['bytes_to']:,} | "
              f"{sy['bytes_from']:,} |")
    print(f"| Dask, LocalCluster of {W} worker processes, {P} partitions | {r['first']:.2f} | "
          f"{r['per_sweep']:.3f} | {r['task_cpu']:.3f} (tasks), {r['driver_cpu']:.3f} (driver) "
          f"| {r['bytes_to']:,} | {r['bytes_from']:,} |")
    print()
    print(f"tasks' wall {r['task_seconds']:.3f} s per sweep, their thread CPU {r['task_cpu']:.3f} s "
          f"({r.get('rebuilt_cpu', 0.0):.3f} s of it in the tasks of the "
          f"{r.get('rebuilt_rows', 0):,} rows whose partitions are rebuilt); "
          f"model shipped once: {r['model_bytes']:,} bytes; worker RSS "
          f"{[round(b / 2 ** 30, 2) for b in r['worker_rss']]} GiB, peak "
          f"{[round(b / 2 ** 30, 2) for b in r['worker_peak_rss']]} GiB")
    if "memory" in out:
        mm = out["memory"]
        print(f"in-memory peak RSS {mm['peak_rss_mb'] / 1024:.2f} GiB (data {mm['data_mb'] / 1024:.2f} "
              f"GiB, RSS before loading {mm['rss_before_mb'] / 1024:.2f} GiB); final ELBO dask "
              f"{r['elbo']:.10g}, memory {mm['elbo']:.10g}")
    print(f"transfer per sweep: {bytes_sweep:,} bytes = {transfer * 1e3:.3f} ms at "
          f"{args.bandwidth * 8 / 1e9:g} Gbit/s, against {compute_wall:.3f} s of compute wall "
          f"(ratio {transfer / max(compute_wall, 1e-12):.2e}); {bytes_sweep / max(r['task_seconds'], 1e-9):,.0f} "
          f"bytes per task-second")
    print(f"c = {c * 1e9:.1f} ns per row (task wall), {proj['c_cpu'] * 1e9:.1f} ns (task CPU, "
          f"partitions kept)"
          + (f", {proj['c_rebuilt_cpu'] * 1e9:.1f} ns (task CPU, partitions rebuilt)"
             if "c_rebuilt_cpu" in proj else "")
          + (f", {proj['c_sync'] * 1e9:.1f} ns (sync scheduler)" if "c_sync" in proj else "")
          + f"; o = {o * 1e3:.1f} ms per task")
    print(f"projection at {Np:.0e} rows on {Wp} workers ({Pp} partitions of {N / P:.0f} rows): "
          f"compute {proj['compute']:.1f} s (task wall c) / {proj['c_cpu'] * Np / Wp:.1f} s (task CPU) "
          f"+ overhead {proj['overhead']:.1f} s (o x partitions, taken as serial; "
          f"{proj['overhead'] / Wp:.2f} s if it overlaps across the workers) + transfer "
          f"{proj['transfer']:.2f} s ({proj['bytes'] / 2 ** 20:.1f} MiB through the scheduler)")
    if "svi_dask" in out:
        sd, sm = out["svi_dask"], out.get("svi_memory")
        print(f"SVI, batch_size {args.batch_size}: {sd['per_step'] * 1e3:.1f} ms per step on Dask "
              f"({sd['partitions']} partitions touched, tasks' CPU {sd['task_cpu'] * 1e3:.1f} ms, "
              f"driver CPU {sd['driver_cpu'] * 1e3:.1f} ms)"
              + (f", {sm['per_step'] * 1e3:.1f} ms in memory (CPU {sm['cpu'] * 1e3:.1f} ms); final "
                 f"ELBO estimates {sd['elbo']:.8g} / {sm['elbo']:.8g}" if sm else ""))
    print(f"load average at the end {out['loadavg_end']} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
