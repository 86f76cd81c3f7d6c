"""Time per sweep / step of two source trees, side by side in one run (issue 12).

The driver runs each case in a fresh subprocess with ``PYTHONPATH=<tree>`` (so that
tree's ``blrgraph`` is imported; the worker checks ``blrgraph.__file__``), alternating
the trees and their order from repeat to repeat (old, new, new, old, ...), and reports
the median time per sweep of each tree, the ratio new / old of the medians, and the
spread of the per-repeat ratios. Both trees get the same data (drawn here, with numpy,
from fixed seeds) and the same explicit options, chosen so that the work per sweep is
the same in both: each worker also prints its final ELBO, and the table shows whether
the two trees' ELBOs agree (same iterates = same work).

Cases:

* ``gmm``: the VB-GMM of bench_gmm.py (200k x 2, K=5, full covariance),
  ``fit("vmp", init="random", max_iter=n, tol=0, seed=0)``.
* ``lda``: the synthetic corpus of bench_lda.py (3000 documents, V=1500, K=20): one
  update of z, theta and phi per sweep. Old tree: ``fit("vmp", init="random",
  max_iter=n, tol=0, seed=0)`` (the plain VMP of that commit); new tree: the same plus
  ``local_iters=1, local_restart=False`` (the new default for this structure is batch
  VB, which does more work per sweep).
* ``svi``: the streaming case of bench_streaming.py (a memory-mapped .npy of 100k x 2,
  K=5), ``fit("svi", batch_size=1000, max_steps=n, init="random", warmup=20, tau=1,
  kappa=0.7, batch_over=y, final_local_pass=False, seed=0)``; time per step.

Per sweep = the median interval between successive callback time stamps, leaving out
the first ``--skip`` intervals, in wall time and in process CPU time (``time.process_time``;
on an oversubscribed machine the CPU time is the steadier measure of the work, the wall
time what a user waits). Set ``--blas-threads 1`` on a shared machine (it sets
OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / MKL_NUM_THREADS in the workers).

    PYTHONPATH=. python benchmarks/bench_before_after.py --old ../wt-old --new . \
        --repeats 5 --blas-threads 1
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CASES = ("gmm", "lda", "svi")


# =========================================================================================
# worker: runs in a subprocess with PYTHONPATH=<tree>
# =========================================================================================
def _import_helpers():
    """bench_gmm / bench_lda import _common, which puts this checkout first on sys.path
    unless it is already there: put it at the end so that PYTHONPATH's tree wins."""
    if ROOT not in sys.path:
        sys.path.append(ROOT)
    if HERE not in sys.path:
        sys.path.append(HERE)
    import bench_gmm
    import bench_lda
    return bench_gmm, bench_lda


def _stamps_cb(stamps):
    def cb(it, L):
        stamps.append((time.perf_counter(), time.process_time()))
        return False
    return cb


def work_gmm(n_iter):
    G, _ = _import_helpers()
    X = G.make_data(200_000, 2, 5, seed=0)
    pri = G.make_priors(X)
    model, nodes = G.build_blrgraph(X, 5, pri)
    stamps = []
    res = model.fit("vmp", init="random", max_iter=n_iter, tol=0, seed=0, callback=_stamps_cb(stamps))
    return stamps, float(res.elbo), int(res.n_iter)


def work_lda(n_iter, tree_kind):
    _, L = _import_helpers()
    corpus = L.make_corpus(3000, 1500, 20, 80, 0.1, 0.05, seed=0)
    model, theta, phi = L.build_blrgraph(corpus["train"], 20, 0.1, 0.05)
    stamps = []
    extra = {} if tree_kind == "old" else {"local_iters": 1, "local_restart": False}
    res = model.fit("vmp", init="random", max_iter=n_iter, tol=0, seed=0, callback=_stamps_cb(stamps),
                    **extra)
    return stamps, float(res.elbo), int(res.n_iter)


def work_svi(n_iter):
    G, _ = _import_helpers()
    import numpy as np
    from bench_streaming import write_npy, priors_from_sample
    with tempfile.TemporaryDirectory(prefix="blrgraph-ba-") as tmp:
        path = os.path.join(tmp, "gmm.npy")
        write_npy(path, 100_000, seed=0)
        pri = priors_from_sample(path)
        X = np.load(path, mmap_mode="r")
        model, (w, theta, z) = G.build_blrgraph(X, 5, pri)
        stamps = []
        res = model.fit("svi", batch_size=1000, max_steps=n_iter, init="random", warmup=20, tau=1.0,
                        kappa=0.7, batch_over="y", final_local_pass=False,
                        seed=0, callback=_stamps_cb(stamps))
        means = np.sort(np.asarray(theta.family.params_from_natural(theta.nat)["mean"])[:, 0])
        return stamps, float(means.sum()), int(res.n_iter)


def worker(case, n_iter, tree, tree_kind):
    import blrgraph
    where = os.path.realpath(blrgraph.__file__)
    if not where.startswith(os.path.realpath(tree) + os.sep):
        raise SystemExit(f"worker imported blrgraph from {where}, not from {tree}")
    t0 = time.perf_counter()
    if case == "gmm":
        stamps, check, n = work_gmm(n_iter)
    elif case == "lda":
        stamps, check, n = work_lda(n_iter, tree_kind)
    else:
        stamps, check, n = work_svi(n_iter)
    print(json.dumps({"stamps": stamps, "check": check, "n_iter": n, "total": time.perf_counter() - t0,
                      "blrgraph": where}))


# =========================================================================================
# driver
# =========================================================================================
def run_one(case, n_iter, tree, kind, blas):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    if blas:
        for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[k] = str(blas)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", case, "--iters", str(n_iter),
           "--tree", os.path.abspath(tree), "--tree-kind", kind]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/")
    if p.returncode:
        raise RuntimeError(f"{case} on {tree} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", help="source tree before the change")
    ap.add_argument("--new", default=ROOT, help="source tree after the change (default: this one)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gmm-iters", type=int, default=25)
    ap.add_argument("--lda-iters", type=int, default=15)
    ap.add_argument("--svi-steps", type=int, default=150)
    ap.add_argument("--skip", type=int, default=2, help="leave out the first intervals (warm-up)")
    ap.add_argument("--blas-threads", type=int)
    ap.add_argument("--json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--iters", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    ap.add_argument("--tree-kind", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.iters, args.tree, args.tree_kind)
    if not args.old:
        ap.error("--old is required")
    sys.path.insert(0, HERE)
    import _common as C
    import numpy as np
    info = C.machine_info()
    iters = {"gmm": args.gmm_iters, "lda": args.lda_iters, "svi": args.svi_steps}
    trees = {"old": args.old, "new": args.new}
    out = {"benchmark": "before_after", "command": C.command_line(), "machine": info, "trees": trees,
           "cases": {}}
    t_all = time.perf_counter()
    for case in args.cases.split(","):
        res = {"old": [], "new": []}
        for r in range(args.repeats):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for kind in order:
                o = run_one(case, iters[case], trees[kind], kind, args.blas_threads)
                st = np.asarray(o["stamps"])
                per, _ = C.per_iter(st[:, 0], skip=args.skip)
                cpu, _ = C.per_iter(st[:, 1], skip=args.skip)
                res[kind].append({"per_iter": per, "cpu_per_iter": cpu, "check": o["check"],
                                  "n_iter": o["n_iter"], "total": o["total"], "load": C.loadavg()})
                print(f"{case} repeat {r} {kind}: {C.fmt_t(per)} per sweep ({C.fmt_t(cpu)} CPU), check "
                      f"{o['check']:.10g}, load {C.loadavg()}", flush=True)
        med = {k: float(np.median([x["per_iter"] for x in v])) for k, v in res.items()}
        med_cpu = {k: float(np.median([x["cpu_per_iter"] for x in v])) for k, v in res.items()}
        ratios = [n["per_iter"] / o["per_iter"] for o, n in zip(res["old"], res["new"])]
        cpu_ratios = [n["cpu_per_iter"] / o["cpu_per_iter"] for o, n in zip(res["old"], res["new"])]
        checks = {k: [x["check"] for x in v] for k, v in res.items()}
        same = bool(np.allclose(checks["old"][0], checks["new"][0], rtol=1e-9, atol=0))
        out["cases"][case] = {"runs": res, "median": med, "ratio_of_medians": med["new"] / med["old"],
                              "paired_ratios": ratios, "median_cpu": med_cpu,
                              "cpu_ratio_of_medians": med_cpu["new"] / med_cpu["old"], "paired_cpu_ratios": cpu_ratios, "same_result": same, "iters": iters[case]}
    out["total_seconds"] = time.perf_counter() - t_all
    report(out, C)
    C.write_json(args.json, out)


def report(out, C):
    import numpy as np
    print("\n# Time per sweep: old tree vs new tree\n")
    print(C.machine_markdown(out["machine"]))
    rows = []
    for case, r in out["cases"].items():
        olds = [x["per_iter"] for x in r["runs"]["old"]]
        news = [x["per_iter"] for x in r["runs"]["new"]]
        pr = r["paired_ratios"]
        rows.append([case, r["iters"], len(olds),
                     f"{C.fmt_t(r['median']['old'])} ({C.fmt_t(min(olds))} to {C.fmt_t(max(olds))})",
                     f"{C.fmt_t(r['median']['new'])} ({C.fmt_t(min(news))} to {C.fmt_t(max(news))})",
                     f"**{r['ratio_of_medians']:.3f}**",
                     f"{np.median(pr):.3f} ({min(pr):.3f} to {max(pr):.3f})",
                     f"{C.fmt_t(r['median_cpu']['old'])} / {C.fmt_t(r['median_cpu']['new'])}: "
                     f"**{r['cpu_ratio_of_medians']:.3f}** ({min(r['paired_cpu_ratios']):.3f} to "
                     f"{max(r['paired_cpu_ratios']):.3f})",
                     "yes" if r["same_result"] else
                     f"no ({r['runs']['old'][0]['check']:.8g} vs {r['runs']['new'][0]['check']:.8g})"])
    print(C.md_table(["case", "sweeps/steps per run", "repeats", "old: median per sweep (range)",
                      "new: median per sweep (range)", "new / old (medians)",
                      "paired new/old ratios: median (range)",
                      "CPU per sweep old / new: ratio of medians (paired range)", "same final ELBO / means"],
                     rows))
    print(f"\ncommand: `{out['command']}`; total {out['total_seconds']:.0f} s")


if __name__ == "__main__":
    main()
