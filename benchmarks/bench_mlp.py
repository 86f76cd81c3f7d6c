"""The deep-learning rows of the BLR table (issue 24): a Bayesian MLP against
scikit-learn's MLPClassifier, and IVON / VOGN against the exact Gaussian-VI optimum.

Part "mlp", side by side in one run: scikit-learn's digits (pixels / 16) and
breast-cancer (standardised with the training rows' mean and sd) tables, a 70/30
stratified split (random_state=0); scikit-learn's ``MLPClassifier(hidden_layer_sizes=(32,),
solver="adam")`` with its defaults (relu, batch min(200, N), 200 epochs at most,
random_state=0) and ``blrgraph.zoo.mlp`` (one hidden layer of 32 relu units, the prior
precision chosen by ``build``'s cross-validation on the training rows, timed apart)
fitted by ``mlp.DEFAULT_METHOD`` with ``model.meta["fit_options"]`` (and VOGN with the
options below, the same prior). Reported: test accuracy, test NLL (mean -log p(y|x)), expected calibration
error (10 equal-width bins of the top-class probability), epochs, wall time per epoch
and its ratio to scikit-learn's, in wall time and in process CPU time (steadier on a
shared machine). ``--seeds N`` (default 1): seeds 0..N-1 for both libraries
(sklearn's random_state=s; ``mlp.build(seed=s)``: the initial weights and the CV folds,
and the fit's and ``predict_proba``'s seed s; the split stays random_state=0), reported
as mean ± sd over the seeds (time per epoch: the mean), and per blrgraph method on how
many seeds each target is met (paired by seed) and whether the means meet it. The last
column, the ECE floor, is the mean ECE of a perfectly calibrated predictor with the same
probabilities on the same rows (labels drawn from its own p, :func:`ece_floor`): an ECE
difference well inside it is noise.

Part "calib" (not run by default): the reliability of the default fit on the held-out
folds of the TRAINING rows (the build's own cross-validation folds and chosen prior; no
test row is read): mean confidence against accuracy per bin of the top-class probability,
pooled over ``--seeds``, and each seed's held-out accuracy, NLL, ECE and ECE floor.

Part "logreg": a 20,000-row logistic regression (6 weights, prior N(0, I)): the
built-in ``Bernoulli(logits=Dot(X, w))`` by ``fit("ncvmp")`` (the exact Gaussian-VI
optimum, Gauss-Hermite) against ``Potential`` fits by ``"ivon"`` and ``"vogn"``:
the largest |mean difference| in posterior sds and the range of the sd ratios.

    python benchmarks/bench_mlp.py                   # both parts
    python benchmarks/bench_mlp.py --parts mlp --blas-threads 1
    python benchmarks/bench_mlp.py --parts mlp --blas-threads 1 --seeds 5   # mean and sd
    python benchmarks/bench_mlp.py --parts calib --blas-threads 1 --seeds 5 # reliability, CV folds
"""
from __future__ import annotations

import argparse
import time
import warnings

import _common as C
import autograd.numpy as anp
import numpy as np
from scipy.special import expit

import blrgraph as bg

#: VOGN's options for the MLP (the zoo's defaults are IVON's)
VOGN_MLP = {"rho": 0.02, "beta2": 0.05}
IVON_LOGREG = {"batch_size": 500, "epochs": 50, "rho": 0.1, "beta2": 0.999, "hess_init": 0.1}
VOGN_LOGREG = {"batch_size": 500, "epochs": 20, "rho": 0.01, "beta2": 0.05}


def ece(p, y, bins=10):
    conf, acc = p.max(1), p.argmax(1) == y
    edges = np.linspace(0.0, 1.0, bins + 1)
    total = 0.0
    for a, b in zip(edges[:-1], edges[1:]):
        k = (conf > a) & (conf <= b)
        if k.any():
            total += k.mean() * abs(acc[k].mean() - conf[k].mean())
    return float(total)


def ece_floor(p, draws=1000, bins=10, seed=0):
    """(mean, sd) of the ECE that a perfectly calibrated predictor with these
    probabilities shows on this many rows: labels drawn from p itself (no label of the
    rows is read), the ECE of each draw. An ECE below it is noise, not calibration."""
    rng = np.random.default_rng(seed)
    u = rng.random((draws, len(p), 1))
    y = (u > p.cumsum(1)[None]).sum(-1)                # (draws, rows): y ~ Categorical(p)
    conf, top = p.max(1), p.argmax(1)
    hit = y == top[None]
    edges = np.linspace(0.0, 1.0, bins + 1)
    total = np.zeros(draws)
    for a, b in zip(edges[:-1], edges[1:]):
        k = (conf > a) & (conf <= b)
        if k.any():
            total += k.mean() * np.abs(hit[:, k].mean(1) - conf[k].mean())
    return float(total.mean()), float(total.std())


def reliability(p, y, bins=10):
    """Rows (bin, rows, mean confidence, accuracy, accuracy - confidence) of the top-class
    probability in equal-width bins, and a last row over every row."""
    conf, acc = p.max(1), p.argmax(1) == y
    edges = np.linspace(0.0, 1.0, bins + 1)
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        k = (conf > a) & (conf <= b)
        if k.any():
            out.append([f"({a:.1f}, {b:.1f}]", int(k.sum()), f"{conf[k].mean():.4f}",
                        f"{acc[k].mean():.4f}", f"{acc[k].mean() - conf[k].mean():+.4f}"])
    out.append(["all", len(y), f"{conf.mean():.4f}", f"{acc.mean():.4f}",
                f"{acc.mean() - conf.mean():+.4f}"])
    return out


def scores(p, y):
    return {"acc": float(np.mean(p.argmax(1) == y)),
            "nll": float(-np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-300, None)))),
            "ece": ece(p, y), "ece_floor": ece_floor(p)[0]}


def tables():
    from sklearn.datasets import load_breast_cancer, load_digits
    from sklearn.model_selection import train_test_split
    X, y = load_digits(return_X_y=True)
    out = {"digits": train_test_split(X / 16.0, y, test_size=0.3, stratify=y, random_state=0)}
    X, y = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    mu, sd = Xtr.mean(0), Xtr.std(0)
    out["breast-cancer"] = ((Xtr - mu) / sd, (Xte - mu) / sd, ytr, yte)
    return out


def part_mlp(seeds=1):
    """Seeds 0..seeds-1 for both libraries (sklearn's random_state=s; ``mlp.build(seed=s)``,
    the fit's and ``predict_proba``'s seed s; the split stays random_state=0). One seed:
    a row per model; more: mean and sd over the seeds (:func:`seed_summary`)."""
    rows, out = [], []
    for name, (Xtr, Xte, ytr, yte) in tables().items():
        runs = []
        for s in range(seeds):
            runs.append(_mlp_one_seed(name, Xtr, Xte, ytr, yte, s))
            if seeds > 1:   # each seed's scores as it ends
                print(C.md_table(["seed"] + HEAD_MLP[:5], [[s] + r[:5] for r in runs[-1][0]]),
                      flush=True)
        if seeds == 1:
            rows += runs[0][0]
            out.append(runs[0][1])
            print(C.md_table(HEAD_MLP, rows[-3:]), flush=True)
            continue
        rec = {"table": name, "N": len(ytr), "seeds": [r[1] for r in runs]}
        rows += seed_summary(name, rec)
        out.append(rec)
    return rows, out


def _mlp_one_seed(name, Xtr, Xte, ytr, yte, seed):
    from sklearn.neural_network import MLPClassifier

    from blrgraph.zoo import mlp
    rows = []
    t, c = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the ConvergenceWarning at 200 epochs
        sk = MLPClassifier(hidden_layer_sizes=(32,), solver="adam",
                           random_state=seed).fit(Xtr, ytr)
    t_sk, c_sk = time.perf_counter() - t, (time.process_time() - c) / sk.n_iter_
    e_sk = t_sk / sk.n_iter_
    rec = {"table": name, "N": len(ytr), "seed": seed,
           "sklearn": {**scores(sk.predict_proba(Xte), yte), "epochs": sk.n_iter_, "s": t_sk,
                       "epoch_s": e_sk, "cpu_epoch_s": c_sk}}
    rows.append([name, "sklearn MLPClassifier (adam)", f"{rec['sklearn']['acc']:.4f}",
                 f"{rec['sklearn']['nll']:.4f}", f"{rec['sklearn']['ece']:.4f}",
                 sk.n_iter_, C.fmt_t(e_sk), "1", C.fmt_t(c_sk), "1", "-",
                 f"{rec['sklearn']['ece_floor']:.4f}"])
    t = time.perf_counter()
    model = mlp.build((Xtr, ytr), hidden=(32,), standardize=False, seed=seed)  # the prior by CV
    t_cv = time.perf_counter() - t
    chosen = model.meta["prior_precision"]
    rec["prior"] = {"chosen": chosen, "cv_nll": model.meta["cv_nll"], "build_s": t_cv}
    print(f"{name} seed {seed}: prior_precision {chosen} by {mlp.CV_FOLDS}-fold CV (held-out "
          f"NLL { {k: round(v, 4) for k, v in model.meta['cv_nll'].items()} }), build "
          f"{t_cv:.1f} s", flush=True)
    for method, extra in ((mlp.DEFAULT_METHOD, {}), ("vogn", VOGN_MLP)):
        if method != mlp.DEFAULT_METHOD:   # the same prior, no second CV
            model = mlp.build((Xtr, ytr), hidden=(32,), standardize=False,
                              prior_precision=chosen, seed=seed)
        opts = {k: v for k, v in model.meta["fit_options"].items()
                if method == mlp.DEFAULT_METHOD or k in ("batch_size", "epochs")}
        opts["seed"] = seed
        opts.update(extra)
        t, c = time.perf_counter(), time.process_time()
        fit = model.fit(method, **opts)
        t_b, c_b = time.perf_counter() - t, (time.process_time() - c) / opts["epochs"]
        sc = scores(mlp.predict_proba(fit, Xte, seed=seed), yte)
        e_b = t_b / opts["epochs"]
        rec[method] = {**sc, "epochs": opts["epochs"], "s": t_b, "options": opts,
                       "epoch_s": e_b, "cpu_epoch_s": c_b,
                       "epoch_ratio": e_b / e_sk, "cpu_epoch_ratio": c_b / c_sk}
        rows.append([name, f"blrgraph mlp, fit({method!r})", f"{sc['acc']:.4f}",
                     f"{sc['nll']:.4f}", f"{sc['ece']:.4f}", opts["epochs"], C.fmt_t(e_b),
                     f"{e_b / e_sk:.2f}", C.fmt_t(c_b), f"{c_b / c_sk:.2f}",
                     C.fmt_t(t_cv) if method == mlp.DEFAULT_METHOD else "-",
                     f"{sc['ece_floor']:.4f}"])
    return rows, rec


def part_calib(seeds=1):
    """Reliability of the default fit on the cross-validation folds of the TRAINING rows
    (no test row is read): for seeds s = 0..seeds-1, ``mlp.build(seed=s)`` chooses the
    prior; on each of its folds (``mlp.cv_folds``, the build's own) the default method
    with ``fit_options`` and seed s is fitted on the other folds with that prior, and
    ``predict_proba(seed=s)`` predicts the held-out rows. Pooled over the seeds: mean
    confidence and accuracy per bin; per seed: the held-out accuracy, NLL, ECE and the
    ECE floor (:func:`ece_floor`)."""
    from blrgraph.zoo import mlp
    rows, out = [], []
    for name, (Xtr, _, ytr, _) in tables().items():
        K = int(ytr.max()) + 1
        P_all, per_seed = [], []
        for s in range(seeds):
            prior = mlp.build((Xtr, ytr), hidden=(32,), standardize=False,
                              seed=s).meta["prior_precision"]
            fold = mlp.cv_folds(np.eye(K)[ytr], "classification", s)
            P = np.zeros((len(ytr), K))
            for k in range(mlp.CV_FOLDS):
                tr, te = fold != k, fold == k
                sub = mlp.build((Xtr[tr], ytr[tr]), hidden=(32,), standardize=False,
                                prior_precision=prior, seed=s)
                fit = sub.fit(mlp.DEFAULT_METHOD, seed=s, **sub.meta["fit_options"])
                P[te] = mlp.predict_proba(fit, Xtr[te], seed=s)
            sc = scores(P, ytr)
            per_seed.append({"seed": s, "prior": prior, **sc,
                             "mean_confidence": float(P.max(1).mean())})
            P_all.append(P)
            print(f"{name} seed {s} (prior {prior:g}), held-out folds of the training rows: "
                  f"accuracy {sc['acc']:.4f}, mean confidence {P.max(1).mean():.4f}, NLL "
                  f"{sc['nll']:.4f}, ECE {sc['ece']:.4f} (floor {sc['ece_floor']:.4f})",
                  flush=True)
        table = reliability(np.concatenate(P_all), np.tile(ytr, seeds))
        rows += [[name] + r for r in table]
        out.append({"table": name, "seeds": per_seed, "reliability": table})
    return rows, out


HEAD_CALIB = ["table", "confidence bin", "rows (all seeds)", "mean confidence", "accuracy",
              "accuracy - confidence"]


def _mean_sd(v):
    v = np.asarray(v, dtype=float)
    return f"{v.mean():.4f} ± {v.std(ddof=1):.4f}"


def seed_summary(name, rec):
    """Rows of HEAD_MLP with ``mean ± sd`` over the seeds (sd with ddof 1) of the scores,
    the mean epochs, time and CPU per epoch (the ratios: of the means) and build time;
    and, for each blrgraph method, :data:`TARGET_ROWS` entries: on how many seeds each
    target is met (paired by seed) and whether the means meet it."""
    runs = rec["seeds"]
    sk = [r["sklearn"] for r in runs]
    e_sk = np.mean([r["epoch_s"] for r in sk])
    c_sk = np.mean([r["cpu_epoch_s"] for r in sk])
    rows = [[name, "sklearn MLPClassifier (adam)"] +
            [_mean_sd([r[k] for r in sk]) for k in ("acc", "nll", "ece")] +
            [f"{np.mean([r['epochs'] for r in sk]):.0f}", C.fmt_t(e_sk), "1",
             C.fmt_t(c_sk), "1", "-", _mean_sd([r["ece_floor"] for r in sk])]]
    rec["targets"] = {}
    methods = [k for k in runs[0] if k not in ("table", "N", "seed", "sklearn", "prior")]
    for method in methods:
        ours = [r[method] for r in runs]
        e_b = np.mean([r["epoch_s"] for r in ours])
        c_b = np.mean([r["cpu_epoch_s"] for r in ours])
        first = method == methods[0]
        rows.append([name, f"blrgraph mlp, fit({method!r})"] +
                    [_mean_sd([r[k] for r in ours]) for k in ("acc", "nll", "ece")] +
                    [f"{np.mean([r['epochs'] for r in ours]):.0f}", C.fmt_t(e_b),
                     f"{e_b / e_sk:.2f}", C.fmt_t(c_b), f"{c_b / c_sk:.2f}",
                     C.fmt_t(np.mean([r["prior"]["build_s"] for r in runs])) if first
                     else "-", _mean_sd([r["ece_floor"] for r in ours])])
        met = {"acc": [o["acc"] >= s["acc"] - 0.01 for o, s in zip(ours, sk)],
               "nll": [o["nll"] < s["nll"] for o, s in zip(ours, sk)],
               "ece": [o["ece"] < s["ece"] for o, s in zip(ours, sk)]}
        mean = {k: (np.mean([o[k] for o in ours]), np.mean([s[k] for s in sk]))
                for k in ("acc", "nll", "ece")}
        mean_met = {"acc": mean["acc"][0] >= mean["acc"][1] - 0.01,
                    "nll": mean["nll"][0] < mean["nll"][1],
                    "ece": mean["ece"][0] < mean["ece"][1]}
        rec["targets"][method] = {"seeds_met": {k: int(sum(v)) for k, v in met.items()},
                                  "mean_met": {k: bool(v) for k, v in mean_met.items()},
                                  "prior_chosen": [r["prior"]["chosen"] for r in runs]}
        TARGET_ROWS.append([name, f"fit({method!r})"] + [
            f"{sum(met[k])} of {len(runs)}; mean {'met' if mean_met[k] else 'MISSED'} "
            f"({mean[k][0]:.4f} vs {mean[k][1]:.4f})" for k in ("acc", "nll", "ece")] +
            [", ".join(f"{p:g}" for p in rec["targets"][method]["prior_chosen"])])
    print(C.md_table(HEAD_MLP, rows), flush=True)
    return rows


#: filled by :func:`seed_summary` (``--seeds`` > 1)
TARGET_ROWS = []
HEAD_TARGETS = ["table", "blrgraph", "accuracy >= sklearn's - 0.01: seeds met; mean",
                "lower NLL: seeds met; mean", "lower ECE: seeds met; mean",
                "prior chosen by CV, per seed"]


HEAD_MLP = ["table", "model", "test accuracy", "test NLL", "ECE", "epochs", "time / epoch",
            "epoch cost / sklearn's", "CPU / epoch", "CPU epoch cost / sklearn's",
            "build (prior by CV)", "ECE floor"]


def logistic_rows(w, X, y):
    a = w @ X.T
    return y * a - anp.logaddexp(0.0, a)


def logistic_per_row(w, X, y):
    a = anp.sum(w * X, axis=-1)
    return y * a - anp.logaddexp(0.0, a)


def part_logreg(N=20000, D=6):
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(N), rng.normal(size=(N, D - 1))])
    y = (rng.random(N) < expit(X @ np.linspace(1.0, -1.0, D))).astype(float)
    w = bg.MultivariateNormal(np.zeros(D), np.eye(D), name="w")
    t = time.perf_counter()
    bg.Model(bg.Bernoulli(logits=bg.Dot(X, w), name="y").observe(y)).fit("ncvmp", tol=1e-12)
    t0 = time.perf_counter() - t
    m0, sd0 = w.posterior.mean, np.sqrt(np.diag(w.posterior.cov))
    rows = [[f"{N:,} x {D}", "ncvmp (built-in factor, exact)", "-", "0", "1", C.fmt_t(t0)]]
    out = []
    for method, opts in (("ivon", IVON_LOGREG), ("vogn", VOGN_LOGREG)):
        v = bg.Normal(0.0, 1.0, plates=(D,), name="w")
        lik = bg.Potential(logistic_rows, v, data=(X, y), per_row=logistic_per_row, name="lik")
        t = time.perf_counter()
        bg.Model(lik).fit(method, seed=0, **opts)
        tm = time.perf_counter() - t
        dm = float(np.max(np.abs(v.posterior.mean - m0) / sd0))
        r = np.sqrt(v.posterior.var) / sd0
        out.append({"method": method, "options": opts, "max_mean_diff_sd": dm,
                    "sd_ratio": [float(r.min()), float(r.max())], "s": tm})
        rows.append([f"{N:,} x {D}", f"{method} (Potential) {opts}", f"{dm:.3f}", "",
                     f"{r.min():.3f} .. {r.max():.3f}", C.fmt_t(tm)])
        rows[-1][3] = "met" if dm <= 0.5 and r.min() >= 0.5 and r.max() <= 2 else "MISSED"
    return rows, out


HEAD_LOGREG = ["N x D", "fit", "max |mean diff| / sd", "target (0.5 sd, sd x/÷ 2)", "sd ratio",
               "wall"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="mlp,logreg")
    ap.add_argument("--blas-threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--seeds", type=int, default=1,
                    help="part mlp: seeds 0..N-1 for both libraries, mean and sd (default 1)")
    args = ap.parse_args()
    C.limit_blas(args.blas_threads)
    info = C.machine_info()
    print(C.machine_markdown(info))
    result = {"machine": info}
    parts = args.parts.split(",")
    if "mlp" in parts:
        if args.seeds < 1:
            ap.error(f"--seeds {args.seeds}: give 1 or more")
        rows, result["mlp"] = part_mlp(args.seeds)
        print()
        if args.seeds > 1:
            print(f"Over seeds 0..{args.seeds - 1} (mean ± sd, sd with ddof 1):")
        print(C.md_table(HEAD_MLP, rows))
        if TARGET_ROWS:
            print()
            print(C.md_table(HEAD_TARGETS, TARGET_ROWS))
    if "calib" in parts:
        rows, result["calib"] = part_calib(args.seeds)
        print()
        print(f"Reliability on the held-out folds of the training rows, seeds "
              f"0..{args.seeds - 1} pooled:")
        print(C.md_table(HEAD_CALIB, rows))
    if "logreg" in parts:
        rows, result["logreg"] = part_logreg()
        print()
        print(C.md_table(HEAD_LOGREG, rows))
    print(f"\n{C.command_line()}  (load {C.loadavg()})")
    C.write_json(args.json, result)


if __name__ == "__main__":
    main()
