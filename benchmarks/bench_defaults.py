"""Right answers by default (issue 13): blrgraph with no options beyond the method vs
scikit-learn with its defaults, on the same priors, data and evaluation code.

Parts (``--parts``, comma-separated; default all):

* ``gmm``: VB-GMM declared from nodes (Dirichlet + NormalWishart + Categorical +
  Mixture(MultivariateNormal); priors of bench_gmm.py: alpha0 = 1, m0 = data mean,
  beta0 = 1, nu0 = D + 2, W0 = inv(cov X) / nu0), ``fit("vmp", restarts=R)`` with no other
  option, against ``BayesianGaussianMixture(n_init=R,
  weight_concentration_prior_type="dirichlet_distribution")`` with the same priors and
  sklearn's other defaults (k-means start, tol=1e-3, max_iter=100, reg_covar=1e-6).
  Datasets: a synthetic 5-cluster mixture (bench_gmm.py's recipe, with labels) and
  scikit-learn's iris, wine and breast cancer tables, standardised, K = number of classes.
  Both solutions are scored by the same full ELBO (bench_gmm.evaluate_elbo, Bishop
  10.70-10.77) on (responsibilities, q(pi), q(mu, Lambda)); sklearn's state is read from
  its fitted attributes, its responsibilities from ``predict_proba``. ARI against the
  known classes from the most probable component. ``--priors sklearn`` (or
  ``bench,sklearn``) uses scikit-learn's own default priors instead (alpha0 = 1/K,
  beta0 = 1, nu0 = D, W0 = inv(cov X): bench_gmm.sklearn_priors), declared on the
  blrgraph side and left at None on sklearn's; the priors sklearn resolved are compared
  with the declared ones. sklearn also runs with ``--sk-tight`` (tol=1e-8, max_iter=2000
  by default), its converged optimum, so an ARI that only comes from sklearn stopping
  early shows as such.
* ``gmm-starts``: each start type alone (``fit("vmp", init=start, seed=s)``, s <
  ``--start-seeds``) on ``--starts-data`` (wine, breast cancer) under ``--priors``: the
  distinct optima, the best ELBO, the ARI of the best optima, Spearman(ELBO, ARI), and
  restart policies simulated from the single fits. ``sklearn-kmeans`` starts from the
  one-hot labels of one sklearn KMeans(K, n_init=1) run (the start of one sklearn init).
* ``lda``: LDA declared from nodes (bench_lda.build_blrgraph: theta[doc],
  Mixture(z, Categorical, phi), weights=counts), plain ``fit("vmp")`` (a callback
  evaluates held-out document completion after every sweep, excluded from the clock,
  and stops the run at the sweep budget), against sklearn batch LDA (20 passes): time to
  reach sklearn's held-out quality, the final quality. On the synthetic corpus of
  bench_lda.py, and with ``lee`` on a real corpus: the Lee background corpus (300 news
  articles of the Australian Broadcasting Corporation) that gensim ships inside its
  wheel (gensim/test/test_data/lee_background.cor; read as a text file, gensim is not
  imported; ``pip install -e '.[bench]'`` or ``pip install gensim``); with ``wiki`` on
  the 250 stemmed Wikipedia articles of gensim/test/test_data/head500.noblanks.cor.
* ``svi-gmm``: 200k x 2, K=5 (bench_gmm.py's data), ``fit("svi", batch_size=B,
  epochs=3)`` against the batch optimum ``fit("vmp")``: full ELBO gap.
* ``svi-lda``: ``fit("svi", batch_size=256)`` (everything else default) against sklearn
  online LDA (batch 256, learning_offset 10, learning_decay 0.7, 10 epochs) on the
  synthetic corpus: time to sklearn online's held-out quality.

    PYTHONPATH=. python benchmarks/bench_defaults.py --blas-threads 1 --json defaults.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402

import bench_gmm as G  # noqa: E402
import bench_lda as L  # noqa: E402


# =========================================================================================
# GMM
# =========================================================================================
def synthetic_gmm(N=3000, D=3, K=5, seed=0):
    """bench_gmm.make_data's recipe, keeping the labels."""
    return G.make_data(N, D, K, seed=seed, return_labels=True)


def gmm_datasets(names):
    from sklearn import datasets
    out = {}
    for name in names:
        if name == "synthetic":
            X, y = synthetic_gmm()
            out[name] = (X, y, 5, "3000 x 3, 5 clusters (bench_gmm.py recipe)")
            continue
        loader = {"iris": datasets.load_iris, "wine": datasets.load_wine,
                  "breast_cancer": datasets.load_breast_cancer}[name]
        d = loader()
        X = (d.data - d.data.mean(0)) / d.data.std(0)
        K = len(np.unique(d.target))
        out[name] = (X, d.target, K, f"{X.shape[0]} x {X.shape[1]}, standardised, {K} classes")
    return out


PRIOR_SETS = ("bench", "sklearn")


def gmm_priors(kind, X, K):
    """``bench``: bench_gmm.make_priors (alpha0 = 1, beta0 = 1, nu0 = D + 2,
    W0 = inv(cov X) / nu0, i.e. E[Lambda] = inv(cov X)). ``sklearn``: scikit-learn's own
    defaults (bench_gmm.sklearn_priors: alpha0 = 1/K, beta0 = 1, nu0 = D, W0 = inv(cov X),
    i.e. E[Lambda] = D inv(cov X)); sklearn then runs with its prior arguments left at
    None and the priors it resolved are compared with these."""
    if kind == "bench":
        return G.make_priors(X)
    if kind == "sklearn":
        return G.sklearn_priors(X, K)
    raise ValueError(f"unknown prior set {kind!r}: use one of {PRIOR_SETS}")


def gmm_blrgraph(X, K, pri, restarts, seed):
    model, nodes = G.build_blrgraph(X, K, pri)
    stamps = []

    def cb(it, Lb):
        stamps.append(time.perf_counter())
        return False

    t0, c0 = time.perf_counter(), time.process_time()
    res = model.fit("vmp", restarts=restarts, seed=seed, callback=cb)
    t, cpu = time.perf_counter() - t0, time.process_time() - c0
    r, params = G.blrgraph_params(nodes)
    per = C.per_iter(stamps, skip=1)[0] if len(stamps) > 2 else float("nan")
    elbo = G.evaluate_elbo(X, r, params, pri)
    return {"time": t, "cpu": cpu, "n_iter": int(res.n_iter), "elbo": elbo,
            "self_elbo": float(res.elbo), "self_rel": abs(float(res.elbo) - elbo) / abs(elbo),
            "restart_elbos": list(getattr(res, "restart_elbos", None) or []),
            "restart_starts": list(getattr(res, "restart_starts", None) or []),
            "best_restart": getattr(res, "best_restart", None),
            "labels": r.argmax(1), "converged": bool(getattr(res, "converged", False)),
            "per_sweep": per, "sweeps_total": len(stamps)}


def gmm_sklearn(X, K, pri, n_init, seed, kind="bench", tol=None, max_iter=None):
    """BayesianGaussianMixture(n_init, random_state=seed) on the priors ``pri``: with
    kind="bench" they are passed explicitly, with kind="sklearn" sklearn's own defaults
    are used (prior arguments None) and ``prior_diff`` records how far the priors sklearn
    resolved are from ``pri`` (relative, 0 = identical). tol / max_iter: None = sklearn's
    defaults (1e-3, 100)."""
    from sklearn.mixture import BayesianGaussianMixture
    kw = {} if kind == "sklearn" else dict(
        weight_concentration_prior=pri["alpha0"], mean_prior=pri["m0"], mean_precision_prior=pri["beta0"],
        degrees_of_freedom_prior=pri["nu0"], covariance_prior=np.linalg.inv(pri["W0"]))
    if tol is not None:
        kw["tol"] = tol
    if max_iter is not None:
        kw["max_iter"] = max_iter
    est = BayesianGaussianMixture(
        n_components=K, covariance_type="full", weight_concentration_prior_type="dirichlet_distribution",
        n_init=n_init, random_state=seed, **kw)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t0, c0 = time.perf_counter(), time.process_time()
        est.fit(X)
        t, cpu = time.perf_counter() - t0, time.process_time() - c0
    r, params = G.sklearn_params(est, X)
    return {"time": t, "cpu": cpu, "n_iter": int(est.n_iter_), "elbo": G.evaluate_elbo(X, r, params, pri),
            "labels": r.argmax(1), "converged": bool(est.converged_),
            "prior_diff": G.priors_differ(G.priors_of_sklearn(est), pri),
            "tol": est.tol, "max_iter": est.max_iter,
            "warnings": sorted({type(x.message).__name__ for x in w})}


def _prior_sets(args):
    kinds = args.priors.split(",")
    bad = [k for k in kinds if k not in PRIOR_SETS]
    if bad:
        raise ValueError(f"--priors: unknown prior set(s) {bad}; use {','.join(PRIOR_SETS)}")
    return kinds


def _sk_tight(args):
    if not args.sk_tight or args.sk_tight == "none":
        return None
    tol, it = args.sk_tight.split(",")
    return float(tol), int(it)


def part_gmm(args, out):
    from sklearn.metrics import adjusted_rand_score
    if args.gmm_restart_starts:  # an experiment: other default starts of the restarts
        from blrgraph.inference import starts
        starts.RESTART_STARTS = tuple(args.gmm_restart_starts.split(","))
        out["gmm_restart_starts"] = list(starts.RESTART_STARTS)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(range(args.repeats))
    tight = _sk_tight(args)
    out["sk_tight"] = tight
    for kind in _prior_sets(args):
        res = {}
        for name, (X, y, K, desc) in gmm_datasets(args.gmm_data.split(",")).items():
            pri = gmm_priors(kind, X, K)
            reps = []
            for i, rep in enumerate(seeds):
                order = ("blr", "sk") if i % 2 == 0 else ("sk", "blr")
                one = {"seed": rep}
                for who in order:
                    if who == "blr":
                        one["blr"] = gmm_blrgraph(X, K, pri, args.restarts, seed=rep)
                    else:
                        one["sk"] = gmm_sklearn(X, K, pri, args.restarts, seed=rep, kind=kind)
                if tight:
                    one["sk_tight"] = gmm_sklearn(X, K, pri, args.restarts, seed=rep, kind=kind, tol=tight[0],
                                                  max_iter=tight[1])
                for who in ("blr", "sk", "sk_tight"):
                    if who in one:
                        one[who]["ari"] = float(adjusted_rand_score(y, one[who].pop("labels")))
                reps.append(one)
                b, s = one["blr"], one["sk"]
                st = one.get("sk_tight")
                print(f"gmm [{kind} priors] {name} repeat {rep}: blrgraph ELBO {b['elbo']:.4f} ARI {b['ari']:.3f}"
                      f" ({b['time']:.2f} s, CPU {b['cpu']:.2f} s, {b['sweeps_total']} sweeps, best restart "
                      f"{b['best_restart']}, |fit.elbo - scorer|/|scorer| {b['self_rel']:.1e}); sklearn ELBO "
                      f"{s['elbo']:.4f} ARI {s['ari']:.3f} ({s['time']:.2f} s, CPU {s['cpu']:.2f} s, prior diff "
                      f"{s['prior_diff']:.1e})"
                      + ("" if st is None else f"; sklearn tol={st['tol']:g} ELBO {st['elbo']:.4f} ARI "
                                               f"{st['ari']:.3f} ({st['n_iter']} it, conv {st['converged']})"),
                      flush=True)
            res[name] = {"desc": desc, "K": K, "N": X.shape[0], "D": X.shape[1], "repeats": reps,
                         "priors": {k: float(v) for k, v in pri.items() if np.ndim(v) == 0}}
        out["gmm" if kind == "bench" else f"gmm_{kind}"] = res


def sklearn_kmeans_start(X, K, seed):
    """The start of one scikit-learn BayesianGaussianMixture init (init_params="kmeans"):
    one-hot labels of KMeans(K, n_init=1, random_state=RandomState(seed)), passed to
    fit(init=...) as explicit responsibilities."""
    from sklearn.cluster import KMeans
    labels = KMeans(K, n_init=1, random_state=np.random.RandomState(seed)).fit(X).labels_
    return np.eye(K)[labels]


def part_gmm_starts(args, out):
    """Each start type alone: fit("vmp", init=start, seed=s) for s < --start-seeds on the
    datasets of --starts-data, under each prior set of --priors: the optima reached
    (ELBO to 0.01), their ARI against the classes, and sklearn n_init=5's best over
    seeds 0..repeats-1 as the reference."""
    from sklearn.metrics import adjusted_rand_score
    res = out.setdefault("gmm_starts", {})
    for kind in _prior_sets(args):
        for name, (X, y, K, desc) in gmm_datasets(args.starts_data.split(",")).items():
            pri = gmm_priors(kind, X, K)
            ref = [gmm_sklearn(X, K, pri, args.restarts, seed=s, kind=kind) for s in range(args.repeats)]
            sk_best = max(r["elbo"] for r in ref)
            sk_best_ari = float(adjusted_rand_score(y, max(ref, key=lambda r: r["elbo"])["labels"]))
            runs = {}
            for start in args.start_types.split(","):
                rows = []
                c0 = time.process_time()
                for s in range(args.start_seeds):
                    model, nodes = G.build_blrgraph(X, K, pri)
                    fr = model.fit("vmp", init=sklearn_kmeans_start(X, K, s) if start == "sklearn-kmeans" else start,
                                   seed=s)
                    r, params = G.blrgraph_params(nodes)
                    e = G.evaluate_elbo(X, r, params, pri)
                    rows.append({"seed": s, "elbo": e, "self_rel": abs(float(fr.elbo) - e) / abs(e),
                                 "ari": float(adjusted_rand_score(y, r.argmax(1))), "sweeps": int(fr.n_iter),
                                 "converged": bool(fr.converged)})
                runs[start] = {"rows": rows, "cpu": time.process_time() - c0}
                el = np.array([r["elbo"] for r in rows])
                print(f"gmm-starts [{kind} priors] {name} {start}: {len(np.unique(np.round(el, 2)))} optima, best "
                      f"{el.max():.3f} (ARI {rows[int(el.argmax())]['ari']:.3f}), median {np.median(el):.3f}, "
                      f"share >= sklearn best {np.mean(el >= sk_best - 1e-6 * abs(sk_best)):.2f}, "
                      f"CPU {runs[start]['cpu']:.1f} s", flush=True)
            res[f"{kind}/{name}"] = {"priors": kind, "dataset": name, "desc": desc, "K": K,
                                     "sk_best": sk_best, "sk_best_ari": sk_best_ari,
                                     "sk": [{k: r[k] for k in ("elbo", "n_iter", "converged")} for r in ref],
                                     "runs": runs}


# =========================================================================================
# LDA
# =========================================================================================
#: real corpora shipped as text files (one document per line) in gensim's wheel
GENSIM_CORPORA = {"lee": "lee_background.cor",      # 300 news articles (ABC)
                  "wiki": "head500.noblanks.cor"}   # 250 Wikipedia articles, stemmed


def lee_corpus(heldout=0.1, seed=0, min_df=2, name="lee"):
    """A real corpus shipped in gensim's wheel (GENSIM_CORPORA; the Lee background corpus
    by default), as counts (sklearn CountVectorizer, English stop words, words in >= min_df
    documents; documents of 10 or more words), split as bench_lda.make_corpus does (10% of
    documents held out, tokens halved)."""
    import importlib.util
    from sklearn.feature_extraction.text import CountVectorizer
    spec = importlib.util.find_spec("gensim")
    if spec is None:
        raise RuntimeError("the real corpora come from gensim's wheel: pip install -e '.[bench]' (or pip install gensim)")
    path = os.path.join(spec.submodule_search_locations[0], "test", "test_data", GENSIM_CORPORA[name])
    with open(path, encoding="utf-8", errors="replace") as f:
        docs = [line.strip() for line in f if line.strip()]
    cv = CountVectorizer(stop_words="english", min_df=min_df, token_pattern=r"(?u)\b[a-zA-Z][a-zA-Z]+\b")
    counts = cv.fit_transform(docs).toarray().astype(np.int64)
    keep = counts.sum(1) >= 10
    counts = counts[keep]
    return split_counts(counts, heldout, seed) | {"n_docs": counts.shape[0], "V": counts.shape[1],
                                                   "tokens": int(counts.sum())}


def split_counts(counts, heldout, seed):
    return L.split_heldout(counts, heldout, np.random.default_rng(seed)) | {"phi_true": None}


def lda_default_run(corpus, K, alpha, eta, method, fit_kw, max_sweeps, eval_every=1, seed=0):
    """model.fit(method, seed=seed, callback=cb, **fit_kw): the callback evaluates held-out
    quality every eval_every sweeps/steps (excluded from the clock) and stops at max_sweeps."""
    clock = C.Clock()
    model, theta, phi = L.build_blrgraph(corpus["train"], K, alpha, eta)
    svi = method == "svi"
    trace = []

    def cb(it, Lb):
        if it % eval_every == 0:
            t, cpu = clock.now(), clock.cpu()
            ll = clock.exclude(lambda: L.doc_completion(L.phi_lambda(phi, svi), corpus["held_obs"],
                                                        corpus["held_eval"], alpha)[0])
            trace.append({"iter": it, "time": t, "cpu": cpu, "ll": ll})
        return it >= max_sweeps

    res = model.fit(method, seed=seed, callback=cb, **fit_kw)
    t_end = clock.now()
    lam = L.phi_lambda(phi)
    final = L.doc_completion(lam, corpus["held_obs"], corpus["held_eval"], alpha)[0]
    rec = L.topic_recovery(lam, corpus["phi_true"]) if corpus.get("phi_true") is not None else None
    return {"trace": trace, "time_total": t_end, "n_iter": int(res.n_iter), "final_ll": final,
            "converged": bool(getattr(res, "converged", False)), "recovery": rec, "fit_elbo": float(res.elbo)}


def first_reach(trace, target):
    for p in trace:
        if p["ll"] >= target:
            return p
    return None


def lda_compare(name, corpus, K, alpha, eta, args, out, online=False, seed=0):
    extra = json.loads(args.lda_options) if args.lda_options else {}
    if online:
        B = min(256, corpus["train"].shape[0])
        n = corpus["train"].shape[0]
        sk = L.run_sklearn(corpus, K, alpha, eta, learning_method="online", batch_size=B, learning_offset=10.0,
                           learning_decay=0.7, max_iter=10, total_samples=n, random_state=seed)
        per_epoch = -(-n // B)
        blr = lda_default_run(corpus, K, alpha, eta, "svi", {"batch_size": B, **extra},
                              max_sweeps=args.svi_max_epochs * per_epoch, eval_every=max(1, per_epoch // 4),
                              seed=seed)
    else:
        sk = L.run_sklearn(corpus, K, alpha, eta, learning_method="batch", max_iter=20, random_state=seed)
        blr = lda_default_run(corpus, K, alpha, eta, "vmp", extra, max_sweeps=args.lda_max_sweeps, seed=seed)
    sk["recovery"] = sk["recovery"] if corpus.get("phi_true") is not None else None
    reach = first_reach(blr["trace"], sk["ll"])
    row = {"seed": seed, "options": extra, "sklearn": sk, "blrgraph": blr, "reached": reach,
           "ratio_wall": None if reach is None else sk["time"] / reach["time"],
           "ratio_cpu": None if reach is None else sk["cpu"] / reach["cpu"],
           "best_ll": max(p["ll"] for p in blr["trace"])}
    print(f"lda {name}{' online' if online else ''}: sklearn {sk['time']:.2f} s ll {sk['ll']:.4f}; blrgraph "
          f"reached {reach} best {row['best_ll']:.4f} final {blr['final_ll']:.4f} ({blr['n_iter']} it, "
          f"{blr['time_total']:.1f} s)", flush=True)
    out.setdefault("lda", {}).setdefault(name + (" online" if online else ""), []).append(row)


def part_lda(args, out, which):
    alpha, eta = 0.1, 0.05
    if which in ("lda", "svi-lda"):
        corpus = L.make_corpus(3000, 1500, 20, 80, alpha, eta, seed=0)
        out["lda_corpus_synthetic"] = {"docs": 3000, "V": 1500, "K": 20, "nnz": corpus["train"].nnz}
        for seed in range(args.lda_repeats):
            lda_compare("synthetic", corpus, 20, alpha, eta, args, out, online=(which == "svi-lda"), seed=seed)
    if which in GENSIM_CORPORA:
        corpus = lee_corpus(name=which)
        out[f"lda_corpus_{which}"] = {k: corpus[k] for k in ("n_docs", "V", "tokens")}
        out[f"lda_corpus_{which}"]["train_nnz"] = corpus["train"].nnz
        print(f"{which} corpus: {corpus['n_docs']} docs, V={corpus['V']}, {corpus['tokens']} tokens", flush=True)
        for seed in range(args.lda_repeats):
            lda_compare(which, corpus, args.lee_topics, 1.0 / args.lee_topics, 1.0 / args.lee_topics, args, out,
                        seed=seed)


# =========================================================================================
# SVI GMM
# =========================================================================================
def part_svi_gmm(args, out):
    X = G.make_data(200_000, 2, 5, seed=0)
    pri = G.make_priors(X)
    rows = []
    extra = json.loads(args.svi_options) if args.svi_options else {}
    model, nodes = G.build_blrgraph(X, 5, pri)
    t0 = time.perf_counter()
    res = model.fit("vmp")
    t_vmp = time.perf_counter() - t0
    vmp_sweeps = int(res.n_iter)
    r, params = G.blrgraph_params(nodes)
    L_vmp = G.evaluate_elbo(X, r, params, pri)
    print(f"svi-gmm: batch fit('vmp') full ELBO {L_vmp:.2f} ({res.n_iter} sweeps, {t_vmp:.1f} s)", flush=True)
    for B in [int(b) for b in args.svi_batch.split(",")]:
        for seed in range(args.svi_seeds):
            model, nodes = G.build_blrgraph(X, 5, pri)
            t0 = time.perf_counter()
            res = model.fit("svi", batch_size=B, epochs=3, seed=seed, **extra)
            t = time.perf_counter() - t0
            r, params = G.blrgraph_params(nodes)
            L_svi = G.evaluate_elbo(X, r, params, pri)
            gap = (L_vmp - L_svi) / abs(L_vmp)
            rows.append({"batch_size": B, "seed": seed, "elbo": L_svi, "gap": gap, "time": t,
                         "steps": int(res.n_iter)})
            print(f"svi-gmm B={B} seed {seed}: full ELBO {L_svi:.2f}, gap {100 * gap:.3f}% ({t:.1f} s, "
                  f"{res.n_iter} steps)", flush=True)
    out["svi_gmm"] = {"vmp_elbo": L_vmp, "vmp_sweeps": vmp_sweeps, "options": extra, "vmp_time": t_vmp, "runs": rows}


# =========================================================================================
# report
# =========================================================================================
def _yes(a, b, rel=1e-6):
    return "yes" if a >= b - rel * abs(b) else "no"


def report_gmm(out, kind):
    key = "gmm" if kind == "bench" else f"gmm_{kind}"
    if key not in out:
        return
    R = out["restarts"]
    tight = out.get("sk_tight")
    tt = f"tol={tight[0]:g}, max_iter={tight[1]}" if tight else None
    n_elbo = n_ari = n_elbo_t = n_ari_t = n = 0
    self_rel, prior_diff = 0.0, 0.0
    for name, d in out[key].items():
        print(f"\n### GMM [{kind} priors], {name}: {d['desc']}, K={d['K']}, restarts/n_init={R}\n")
        rows = []
        for i, rp in enumerate(d["repeats"]):
            b, s, st = rp["blr"], rp["sk"], rp.get("sk_tight")
            best = b.get("best_restart")
            kept = "-" if best is None else (f"{best} ({b['restart_starts'][best]})" if b.get("restart_starts")
                                             else str(best))
            e_ok = _yes(b["elbo"], s["elbo"])
            a_ok = "yes" if b["ari"] >= s["ari"] - 1e-9 else "no"
            n += 1
            n_elbo += e_ok == "yes"
            n_ari += a_ok == "yes"
            self_rel = max(self_rel, b.get("self_rel", float("nan")))
            prior_diff = max(prior_diff, s.get("prior_diff", float("nan")))
            row = [rp.get("seed", i), f"{b['elbo']:.3f} ({b['ari']:.3f})", kept,
                   f"{b.get('cpu', float('nan')):.2f} s ({b['sweeps_total']})",
                   f"{s['elbo']:.3f} ({s['ari']:.3f})", f"{s.get('cpu', float('nan')):.2f} s ({s['n_iter']})"]
            if st is not None:
                et = _yes(b["elbo"], st["elbo"])
                at = "yes" if b["ari"] >= st["ari"] - 1e-9 else "no"
                n_elbo_t += et == "yes"
                n_ari_t += at == "yes"
                row += [f"{st['elbo']:.3f} ({st['ari']:.3f})",
                        f"{st.get('cpu', float('nan')):.2f} s ({st['n_iter']}, conv {st['converged']})",
                        f"{e_ok} ({et})", f"{a_ok} ({at})"]
            else:
                row += [e_ok, a_ok]
            rows.append(row)
        head = ["seed", "blrgraph ELBO (ARI)", "kept restart", f"blrgraph CPU (sweeps, {R} restarts)",
                "sklearn ELBO (ARI)", "sklearn CPU (iterations of the best init)"]
        if tight:
            head += [f"sklearn {tt} ELBO (ARI)", "its CPU (iterations, converged)",
                     f"ELBO >= sklearn ({tt.split(',')[0]})", f"ARI >= sklearn ({tt.split(',')[0]})"]
        else:
            head += ["ELBO >= sklearn", "ARI >= sklearn"]
        print(C.md_table(head, rows))
        r0 = d["repeats"][0]["blr"]
        print(f"\nblrgraph restart ELBOs (seed {d['repeats'][0].get('seed', 0)}): "
              f"{', '.join(f'{x:.3f}' for x in r0['restart_elbos'])}"
              + (f" (starts {', '.join(r0['restart_starts'])})" if r0.get("restart_starts") else ""))
    print(f"\n[{kind} priors] ELBO >= sklearn in {n_elbo} of {n}, ARI >= sklearn in {n_ari} of {n}"
          + (f"; against sklearn {tt}: ELBO >= in {n_elbo_t} of {n}, ARI >= in {n_ari_t} of {n}" if tight else "")
          + f". Largest |fit.elbo - scorer| / |scorer| of blrgraph: {self_rel:.1e}; largest relative difference"
            f" between the priors sklearn resolved and the declared ones: {prior_diff:.1e}")


POLICIES = (("kmeans",), ("kmeans", "random", "random"), ("kmeans", "random"), ("kmeans", "kmeans++", "random"),
            ("kmeans", "kmeans++"))


def restart_policies(runs, sk_best, R):
    """fit(restarts=R, seed=s) simulated from single fits: restart r is the fit
    fit(init=policy[r % len(policy)], seed=s + r) (tests/test_defaults.py checks that a
    restart is that fit), for every s whose s + R - 1 was run."""
    out = []
    for policy in POLICIES:
        if any(p not in runs for p in policy):
            continue
        n = min(len(runs[p]["rows"]) for p in policy) - R + 1
        if n <= 0:
            continue
        kept = []
        for s in range(n):
            fits = [runs[policy[r % len(policy)]]["rows"][s + r] for r in range(R)]
            kept.append(max(fits, key=lambda f: f["elbo"]))
        el = np.array([f["elbo"] for f in kept])
        out.append([", ".join(policy[r % len(policy)] for r in range(R)), n,
                    f"{np.mean(el >= sk_best - 1e-6 * abs(sk_best)):.2f}", f"{np.median(el):.3f}",
                    f"{np.mean([f['ari'] for f in kept]):.3f}"])
    return out


def report_gmm_starts(out):
    for key, d in out.get("gmm_starts", {}).items():
        print(f"\n### Start types [{d['priors']} priors], {d['dataset']}: {d['desc']}, K={d['K']}; sklearn n_init="
              f"{out['restarts']} best over seeds 0..{len(d['sk']) - 1}: {d['sk_best']:.3f} (ARI {d['sk_best_ari']:.3f})\n")
        rows, optima = [], {}
        sk = d["sk_best"]
        self_rel = 0.0
        for start, run in d["runs"].items():
            el = np.array([r["elbo"] for r in run["rows"]])
            ari = np.array([r["ari"] for r in run["rows"]])
            self_rel = max(self_rel, max(r["self_rel"] for r in run["rows"]))
            ib = int(el.argmax())
            rows.append([f"`{start!r}`".replace("'", '"'), len(run["rows"]), len(np.unique(np.round(el, 2))),
                         f"{el.max():.3f} ({ari[ib]:.3f})", f"{np.median(el):.3f}",
                         f"{np.mean(el >= sk - 1e-6 * abs(sk)):.2f}",
                         f"{np.mean([r['sweeps'] for r in run['rows']]):.1f}", f"{run['cpu']:.1f} s"])
            for e, a in zip(np.round(el, 2), ari):
                o = optima.setdefault(float(e), {"ari": set(), "hits": {}})
                o["ari"].add(round(float(a), 3))
                o["hits"][start] = o["hits"].get(start, 0) + 1
        print(C.md_table(["start", "fits", "distinct optima (ELBO to 0.01)", "best (its ARI)", "median",
                          "share >= sklearn's best", "mean sweeps", "CPU"], rows))
        top = sorted(optima, reverse=True)[:8]
        print()
        print(C.md_table(["rank", "optimum ELBO", "ARI", "ELBO - sklearn's best", "reached by (fits)"],
                         [[i + 1, f"{e:.2f}", ", ".join(f"{a:.3f}" for a in sorted(optima[e]["ari"])),
                           f"{e - sk:+.2f}", ", ".join(f"{k} {v}" for k, v in optima[e]["hits"].items())]
                          for i, e in enumerate(top)]))
        es = np.array(sorted(optima))
        aris = np.array([np.mean(sorted(optima[e]["ari"])) for e in es])
        from scipy.stats import spearmanr
        rho = spearmanr(es, aris).correlation if len(es) > 2 else float("nan")
        best_ari = max(optima, key=lambda e: max(optima[e]["ari"]))
        pol = restart_policies(d["runs"], sk, out["restarts"])
        if pol:
            print()
            print(C.md_table(["restart starts (simulated)", "values of s", "share >= sklearn's best",
                              "median kept ELBO", "mean ARI of the kept fit"], pol))
        print(f"\n{len(es)} distinct optima over all starts; Spearman(ELBO, ARI) over them {rho:+.2f}; the optimum "
              f"closest to the classes: ELBO {best_ari:.2f}, ARI {max(optima[best_ari]['ari']):.3f} "
              f"(rank {sorted(optima, reverse=True).index(best_ari) + 1}). Largest |fit.elbo - scorer| / |scorer|: "
              f"{self_rel:.1e}")


def report(out):
    print("\n# Defaults: blrgraph vs scikit-learn\n")
    print(C.machine_markdown(out["machine"]))
    for kind in PRIOR_SETS:
        report_gmm(out, kind)
    report_gmm_starts(out)
    for name, rows in out.get("lda", {}).items():
        print(f"\n### LDA {name}\n")
        tab = []
        for row in rows:
            sk, b, r = row["sklearn"], row["blrgraph"], row["reached"]
            tab.append([row.get("seed", 0), json.dumps(row.get("options") or {}) or "none",
                        f"{sk['time']:.2f} s", f"{sk['ll']:.4f}",
                        "not reached" if r is None else f"{r['time']:.2f} s (it {r['iter']})",
                        "-" if r is None else f"**{C.fmt_x(row['ratio_wall'])}** ({C.fmt_x(row['ratio_cpu'])})",
                        f"{b['final_ll']:.4f} ({b['n_iter']} it, {b['time_total']:.1f} s)", f"{row['best_ll']:.4f}",
                        "-" if sk.get("recovery") is None else f"{sk['recovery'][0]:.3f}",
                        "-" if b.get("recovery") is None else f"{b['recovery'][0]:.3f}"])
        print(C.md_table(["seed", "blrgraph options", "sklearn time", "sklearn held-out ll", "blrgraph time to reach it",
                          "sklearn / blrgraph time, wall (CPU)", "blrgraph final ll (iterations, time)",
                          "blrgraph best ll", "sklearn topic cos", "blrgraph topic cos"], tab))
    if "svi_gmm" in out:
        s = out["svi_gmm"]
        print(f"\n### SVI GMM 200k x 2, K=5, 3 epochs, options {s.get('options') or 'none'}; batch fit('vmp') full ELBO {s['vmp_elbo']:.2f} "
              f"({s['vmp_sweeps']} sweeps, {s['vmp_time']:.1f} s)\n")
        print(C.md_table(["batch_size", "seed", "SVI full ELBO", "gap to batch VMP", "time", "steps"],
                         [[r["batch_size"], r["seed"], f"{r['elbo']:.2f}", f"{100 * r['gap']:.3f}%",
                           f"{r['time']:.1f} s", r["steps"]] for r in s["runs"]]))
    print(f"\ncommand: `{out['command']}`")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="gmm,lda,lee,svi-gmm,svi-lda")
    ap.add_argument("--gmm-data", default="synthetic,iris,wine,breast_cancer")
    ap.add_argument("--restarts", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="GMM: repeats (seeds 0..n-1), interleaved")
    ap.add_argument("--seeds", help="GMM: comma-separated seeds (instead of --repeats)")
    ap.add_argument("--priors", default="bench",
                    help="GMM: prior set(s), comma-separated: 'bench' (bench_gmm.make_priors) and/or 'sklearn' "
                         "(scikit-learn's defaults, bench_gmm.sklearn_priors)")
    ap.add_argument("--sk-tight", default="1e-8,2000",
                    help="GMM: also run sklearn with 'tol,max_iter' (its converged optimum); 'none' to skip")
    ap.add_argument("--starts-data", default="wine,breast_cancer", help="gmm-starts: datasets")
    ap.add_argument("--start-types", default="kmeans,kmeans++,random,sklearn-kmeans",
                    help="gmm-starts: fit(init=...) values; 'sklearn-kmeans' = one sklearn k-means init "
                         "(one-hot KMeans(K, n_init=1) labels) as an explicit start")
    ap.add_argument("--start-seeds", type=int, default=100, help="gmm-starts: seeds per start type")
    ap.add_argument("--gmm-restart-starts", help="GMM, an experiment: the default starts of restarts "
                                                 "(restart 0, then the others in turn; 'screened' for "
                                                 "the screened start), e.g. 'kmeans' for k-means only")
    ap.add_argument("--lda-repeats", type=int, default=1,
                    help="LDA: runs with seed i for blrgraph and random_state i for sklearn, i < n")
    ap.add_argument("--lda-options", help="LDA: extra fit options as JSON (for experiments; "
                                          "the targets use none)")
    ap.add_argument("--lda-max-sweeps", type=int, default=40)
    ap.add_argument("--lee-topics", type=int, default=10)
    ap.add_argument("--svi-batch", default="1000")
    ap.add_argument("--svi-seeds", type=int, default=3)
    ap.add_argument("--svi-options", help="SVI GMM: extra fit options as JSON (for experiments)")
    ap.add_argument("--svi-max-epochs", type=int, default=20, help="SVI LDA: stop after this many epochs")
    ap.add_argument("--blas-threads", type=int)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    _limits = C.limit_blas(args.blas_threads)  # noqa: F841
    out = {"benchmark": "defaults", "command": C.command_line(), "machine": C.machine_info(),
           "restarts": args.restarts, "errors": {}}
    for part in args.parts.split(","):
        try:
            if part == "gmm":
                part_gmm(args, out)
            elif part == "gmm-starts":
                part_gmm_starts(args, out)
            elif part in ("lda", "svi-lda") or part in GENSIM_CORPORA:
                part_lda(args, out, part)
            elif part == "svi-gmm":
                part_svi_gmm(args, out)
            else:
                raise ValueError(f"unknown part {part!r}")
        except Exception as e:  # noqa: BLE001 - keep the other parts' numbers
            import traceback
            traceback.print_exc()
            out["errors"][part] = f"{type(e).__name__}: {e}"
        C.write_json(args.json and args.json + ".partial", out) if args.json else None
    report(out)
    C.write_json(args.json, out)


if __name__ == "__main__":
    main()
