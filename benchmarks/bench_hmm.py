"""Variational Bayes HMM with Gaussian emissions: blrgraph's CategoricalMarkovChain vs
hmmlearn's VariationalGaussianHMM, time per sweep and the ELBO, in one run.

* blrgraph: ``Dirichlet(initial)``, ``Dirichlet(transition, plates=(K,))``,
  ``NormalWishart(plates=(K,))``, ``CategoricalMarkovChain(pi, A, length=T, plates=(S,))``,
  ``Mixture(z, MultivariateNormal, theta).observe(X)`` with X of shape (S, T, D).
* hmmlearn: ``VariationalGaussianHMM(covariance_type="full")`` with the same priors
  (its defaults: Dirichlet 1/K, beta 1, dof D, inverse scale 1e-3 I, means at the data mean)
  on the S sequences concatenated (``lengths=[T] * S``), ``implementation="log"`` (its
  default) and ``"scaling"``.

Same start: hmmlearn's own initialisation of the emissions (k-means means, counts and
covariances), the initial and transition posteriors at the prior plus uniform counts,
copied into blrgraph's q. One sweep is hmmlearn's
iteration (E-step: forward-backward with sub-normalised exp E[log A] and the lower bound;
M-step: every parameter's posterior) and blrgraph's BLR steps of pi, A, theta, then the
chain, then the ELBO. After the same number of sweeps both are in the same state: the
ELBOs agree to rounding (hmmlearn leaves the constant -D/2 log 2 pi per step out of its
bound; it is added here). Time per sweep: median over the timed sweeps, in wall time and
in process CPU time (``time.process_time``: on a shared machine the CPU time does not count
the time spent waiting for a CPU; with ``--blas-threads 1`` both sides run one thread).
``--interleave`` runs one sweep of each implementation in turn (else each runs all its
sweeps before the next starts), so that a change in the machine's load during the run
falls on all three alike.

    PYTHONPATH=. python benchmarks/bench_hmm.py --blas-threads 1 [--interleave] [--parts 11]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402


def make_data(S, T, K, D, seed):
    """S sequences of a sticky K-state HMM (stay 0.95) with unit-variance Gaussian
    emissions around means drawn with spread 4."""
    rng = np.random.default_rng(seed)
    means = 4.0 * rng.normal(size=(K, D))
    A = np.full((K, K), 0.05 / (K - 1))
    np.fill_diagonal(A, 0.95)
    cum = A.cumsum(1)
    z = np.empty((S, T), dtype=int)
    z[:, 0] = rng.integers(K, size=S)
    for t in range(1, T):
        z[:, t] = np.minimum((cum[z[:, t - 1]] < rng.random(S)[:, None]).sum(1), K - 1)
    return means[z] + rng.normal(size=(S, T, D))


def hmmlearn_start(X, K, seed, implementation):
    """A VariationalGaussianHMM initialised by hmmlearn itself (priors and start)."""
    from hmmlearn.vhmm import VariationalGaussianHMM
    S, T, D = X.shape
    h = VariationalGaussianHMM(K, covariance_type="full", random_state=seed, tol=-np.inf,
                               implementation=implementation)
    h._init(X.reshape(-1, D), [T] * S)
    # hmmlearn draws the initial and transition posteriors from Dirichlet(1/K) (entries can
    # be 0, where the Dirichlet's log-normaliser is infinite): start them at the prior plus
    # uniform counts instead, keeping its k-means start of the emissions
    h.startprob_posterior_ = h.startprob_prior_ + S / K
    h.transmat_posterior_ = h.transmat_prior_ + S * (T - 1) / K ** 2
    h._check()
    return h


def copy_start(src, dst):
    for name in ("startprob_prior_", "transmat_prior_", "means_prior_", "beta_prior_",
                 "dof_prior_", "scale_prior_", "startprob_posterior_", "transmat_posterior_",
                 "means_posterior_", "beta_posterior_", "dof_posterior_", "scale_posterior_"):
        setattr(dst, name, np.array(getattr(src, name), dtype=float))


def hmmlearn_sweeps(h, X):
    """hmmlearn's fit loop (base.py, VariationalBaseHMM via _AbstractHMM.fit), one
    iteration per ``next``: yields the lower bound with the 2 pi constant."""
    S, T, D = X.shape
    Xf, lengths = X.reshape(-1, D), [T] * S
    const = S * T * D / 2 * np.log(2 * np.pi)
    while True:
        stats, logprob = h._do_estep(Xf, lengths)
        bound = h._compute_lower_bound(logprob)
        h._do_mstep(stats)
        yield bound - const


def timed(runs, n_iter):
    """``n_iter`` + 1 sweeps of each generator in ``runs``, taken in turn (one sweep of
    each per round); returns per run ((wall, CPU) median seconds per sweep, the first
    (warm-up) sweep left out, and the values yielded)."""
    times = [[] for _ in runs]
    values = [[] for _ in runs]
    for _ in range(n_iter + 1):
        for run, t, v in zip(runs, times, values):
            w, c = time.perf_counter(), time.process_time()
            v.append(next(run))
            t.append((time.perf_counter() - w, time.process_time() - c))
    return [(tuple(float(x) for x in np.median(np.array(t[1:]), axis=0)), np.array(v))
            for t, v in zip(times, values)]


def build_blrgraph(h, X):
    import blrgraph as bg
    S, T, D = X.shape
    K = h.n_components
    pi = bg.Dirichlet(h.startprob_prior_, name="pi")
    A = bg.Dirichlet(h.transmat_prior_, plates=(K,), name="A")
    theta = bg.NormalWishart(h.means_prior_, h.beta_prior_, h.dof_prior_,
                             np.linalg.inv(h.scale_prior_), plates=(K,), name="theta")
    z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(S,), name="z")
    y = bg.Mixture(z, bg.MultivariateNormal, theta, name="y").observe(X)
    return bg.Model(y)


def blrgraph_sweeps(model, h):
    """The same start as hmmlearn (its posteriors as blrgraph's q), then one sweep per
    ``next`` (the first: the chain's step alone, hmmlearn's first E-step); yields the ELBO."""
    from blrgraph.inference.blr import blr_step
    from blrgraph.inference.elbo import elbo
    pi, A, theta, z = (model[n] for n in ("pi", "A", "theta", "z"))
    model.fit("vmp", max_iter=1, seed=0)            # allocates q; the start is set next
    pi.set_natural(pi.family.natural_from_params(h.startprob_posterior_))
    A.set_natural(A.family.natural_from_params(h.transmat_posterior_))
    theta.set_natural(theta.family.natural_from_params(
        h.means_posterior_, h.beta_posterior_, h.dof_posterior_, np.linalg.inv(h.scale_posterior_)))

    def sweeps():
        blr_step(model, z)                          # hmmlearn's first E-step
        yield elbo(model)
        while True:
            for node in (pi, A, theta, z):
                blr_step(model, node)
            yield elbo(model)
    return sweeps()


def sweep_parts(model, n_sweeps):
    """Process CPU time of each part of a blrgraph sweep (after :func:`blrgraph_sweeps`), median
    over ``n_sweeps`` sweeps, in seconds: the updates of pi, A and theta; the chain's BLR
    step (its prior, the Mixture's message to z, their sum); forward-backward (the
    chain's moments); the ELBO."""
    from blrgraph.inference.blr import blr_step
    from blrgraph.inference.elbo import elbo
    pi, A, theta, z = (model[n] for n in ("pi", "A", "theta", "z"))
    parts = {k: [] for k in ("updates of pi, A, theta", "chain: prior + Mixture message",
                             "chain: forward-backward", "ELBO", "sweep")}
    for _ in range(n_sweeps):
        t = [time.process_time()]
        for node in (pi, A, theta):
            blr_step(model, node)
        t.append(time.process_time())
        blr_step(model, z)
        t.append(time.process_time())
        z.moments()
        t.append(time.process_time())
        elbo(model)
        t.append(time.process_time())
        for k, d in zip(parts, np.diff(t)):
            parts[k].append(d)
        parts["sweep"].append(t[-1] - t[0])
    return {k: float(np.median(v)) for k, v in parts.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sequences", type=int, default=100)
    ap.add_argument("--length", type=int, default=1000)
    ap.add_argument("--states", type=int, default=10)
    ap.add_argument("--dim", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10, help="timed sweeps (after one warm-up)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="20 sequences x 200 steps, 5 sweeps")
    ap.add_argument("--blas-threads", type=int, help="cap BLAS threads (default: as configured)")
    ap.add_argument("--parts", type=int, default=0, metavar="N",
                    help="then N more blrgraph sweeps, timing each part of a sweep (CPU)")
    ap.add_argument("--interleave", action="store_true",
                    help="one sweep of each implementation in turn (else all of hmmlearn's "
                         "'log' sweeps, then 'scaling', then blrgraph's)")
    ap.add_argument("--json", help="write every number to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.sequences, args.length, args.iters = 20, 200, 5
    import hmmlearn.vhmm  # noqa: F401 (its BLAS too is loaded before the thread cap)
    _limits = C.limit_blas(args.blas_threads)  # noqa: F841 (kept alive for the run)
    info = C.machine_info()
    S, T, K, D = args.sequences, args.length, args.states, args.dim
    X = make_data(S, T, K, D, args.seed)
    print(f"data: {S} sequences x {T} steps, D={D}, K={K}; hmmlearn initialisation ...", flush=True)
    ref = hmmlearn_start(X, K, args.seed, "log")
    runs = {}
    for impl in ("log", "scaling"):
        h = hmmlearn_start(X, K, args.seed, impl)
        copy_start(ref, h)        # (k-means is seeded; this makes the start identical anyway)
        runs[f"hmmlearn ({impl})"] = hmmlearn_sweeps(h, X)
    model = build_blrgraph(ref, X)
    runs["blrgraph"] = blrgraph_sweeps(model, ref)
    if args.interleave:
        out = dict(zip(runs, timed(list(runs.values()), args.iters)))
    else:
        out = {name: timed([run], args.iters)[0] for name, run in runs.items()}
    for name, (t, _) in out.items():
        print(f"{name}: {t[0] * 1e3:.1f} ms per sweep ({t[1] * 1e3:.1f} ms CPU)", flush=True)
    t_b, trace = out.pop("blrgraph")
    results = out

    rows = []
    for name, (t, bounds) in results.items():
        rel = float(np.max(np.abs(trace - bounds) / np.abs(bounds)))
        rows.append([name, C.fmt_t(t[0]), C.fmt_x(t[0] / t_b[0]), C.fmt_t(t[1]),
                     C.fmt_x(t[1] / t_b[1]), f"{bounds[-1]:.6f}", f"{rel:.1e}"])
    rows.append(["blrgraph CategoricalMarkovChain", C.fmt_t(t_b[0]), "1", C.fmt_t(t_b[1]), "1",
                 f"{trace[-1]:.6f}", "-"])
    print(f"\n# VB HMM, Gaussian emissions (full covariance): {S} sequences x {T} steps, "
          f"D={D}, K={K}; time per sweep (median of {args.iters})\n")
    print(C.machine_markdown(info))
    print(C.md_table(["implementation", "time per sweep", "time / blrgraph's",
                      "CPU per sweep", "CPU / blrgraph's",
                      f"ELBO after {args.iters + 1} sweeps",
                      "max rel. ELBO difference to blrgraph (every sweep)"], rows))
    parts = sweep_parts(model, args.parts) if args.parts else None
    if parts:
        print(f"\nblrgraph, process CPU time per part of a sweep (median of {args.parts}):\n")
        print(C.md_table(["part", "CPU per sweep"], [[k, C.fmt_t(v)] for k, v in parts.items()]))
    print(f"\ncommand: `{C.command_line()}`")
    C.write_json(args.json, {"machine": info, "S": S, "T": T, "K": K, "D": D, "iters": args.iters,
                             "blrgraph": {"per_sweep": t_b[0], "cpu_per_sweep": t_b[1],
                                          "elbo": trace, "cpu_parts": parts},
                             "hmmlearn": {k: {"per_sweep": v[0][0], "cpu_per_sweep": v[0][1],
                                              "elbo": v[1]}
                                          for k, v in results.items()}})


if __name__ == "__main__":
    main()
