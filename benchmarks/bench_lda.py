"""LDA: blrgraph vs scikit-learn LatentDirichletAllocation, batch (VMP) and online (SVI).

One process, one synthetic corpus drawn from known topics (phi_k ~ Dir(eta), theta_d ~
Dir(alpha), fixed document length), the same priors alpha, eta for both libraries.
10% of the documents are held out; each held-out document's tokens are shuffled and
split in half (document completion): theta is fitted on the first half with the topics
fixed and the second half is scored by log p(w) = log (E[theta] @ E[phi])_w.
:func:`doc_completion` does this for both libraries from the topic-word Dirichlet
parameters lambda (blrgraph: ``phi.posterior.params["alpha"]``; sklearn: ``components_``,
which is lambda = eta + expected counts), with Hoffman's fixed-point iteration for
gamma under E[log phi].

* Batch: sklearn ``learning_method="batch", max_iter=20`` sets the target held-out
  log-likelihood; blrgraph ``fit("vmp", tol=0, local_iters=--local-iters, init="diffuse")``
  (the LDA zoo's options: each sweep fits theta and z to the topics from their priors,
  then updates phi -- sklearn's batch schedule) runs until it first reaches it (a
  callback evaluates after every sweep; evaluation time is excluded from blrgraph's
  clock). Reported: both times and their ratio, topic recovery (Hungarian-matched cosine
  similarity to the true topics), the final training ELBO (sklearn ``score(X)`` is the
  full ELBO, docs/math.md §7.1) and peak memory. ``--seeds n`` repeats the blrgraph run with
  seeds 0..n-1 against the same target (LDA's local optima depend on the start).
* Batch, plain VMP: ``fit("vmp", tol=0)`` with z, theta and phi updated once per sweep
  (evaluated every ``--eval-every`` sweeps); on this corpus it settles in a worse
  optimum: the gap is the schedule.
* Online: sklearn ``learning_method="online"`` (batch_size B, learning_offset tau,
  learning_decay kappa; its first rho is (tau + 1)^-kappa) sets the target;
  blrgraph ``fit("svi", batch_over=theta, batch_size=B, tau=tau, kappa=kappa,
  init="random")`` (rho_t = (t + tau)^-kappa, t from 1: the same schedule) runs until
  it reaches it, once with ``warmup=0`` (no warm-up, like sklearn) and once with the
  default warm-up (20 rounds of VMP on the first minibatch).
* Memory of blrgraph at two corpus sizes: peak / (nnz K 8 bytes) should stay about
  constant (O(nnz K): the responsibilities of every (document, word type) pair).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from scipy.optimize import linear_sum_assignment  # noqa: E402
from scipy.special import digamma  # noqa: E402


# =========================================================================================
# corpus
# =========================================================================================
def make_corpus(n_docs, V, K, doc_len, alpha, eta, heldout=0.1, seed=0):
    """Train counts (csr), held-out observed / evaluated halves (csr), true topics (K, V)."""
    rng = np.random.default_rng(seed)
    phi = rng.dirichlet(eta * np.ones(V), size=K)
    theta = rng.dirichlet(alpha * np.ones(K), size=n_docs)
    counts = np.empty((n_docs, V), dtype=np.int64)
    for d in range(n_docs):
        nk = rng.multinomial(doc_len, theta[d])
        counts[d] = rng.multinomial(nk, phi).sum(0)
    return split_heldout(counts, heldout, rng) | {"phi_true": phi}


def split_heldout(counts, heldout, rng):
    """Train counts (csr) and, for a ``heldout`` share of the documents drawn by ``rng``,
    their tokens split at random into an observed and an evaluated half (csr)."""
    n_docs, V = counts.shape
    n_held = int(round(heldout * n_docs))
    is_held = np.zeros(n_docs, bool)
    is_held[rng.permutation(n_docs)[:n_held]] = True
    obs = np.zeros((n_held, V))
    ev = np.zeros((n_held, V))
    for i, d in enumerate(np.flatnonzero(is_held)):
        tokens = np.repeat(np.arange(V), counts[d])
        rng.shuffle(tokens)
        h = len(tokens) // 2
        obs[i] = np.bincount(tokens[:h], minlength=V)
        ev[i] = np.bincount(tokens[h:], minlength=V)
    return {"train": sp.csr_matrix(counts[~is_held].astype(float)), "held_obs": sp.csr_matrix(obs),
            "held_eval": sp.csr_matrix(ev)}


# =========================================================================================
# evaluation, one code path for both libraries
# =========================================================================================
def doc_completion(lam, X_obs, X_eval, alpha, max_iter=200, tol=1e-8):
    """Held-out log-likelihood per token of X_eval given topics q(phi_k) = Dir(lam_k):
    gamma fitted on X_obs by fixed-point iterations under E[log phi] (phi fixed; Hoffman's
    E-step on the nonzero counts only), then log p(w) = log sum_k E[theta_k] E[phi_kw].
    Returns (loglik per token, perplexity)."""
    lam = np.asarray(lam, float)
    K = lam.shape[0]
    Elogphi = digamma(lam) - digamma(lam.sum(1, keepdims=True))
    Ephi = lam / lam.sum(1, keepdims=True)
    Xo = sp.coo_matrix(X_obs)
    d, w, n = Xo.row, Xo.col, Xo.data
    n_docs = Xo.shape[0]
    eb = np.exp(Elogphi[:, w].T)                             # nnz x K
    S = sp.csr_matrix((np.ones(len(d)), (d, np.arange(len(d)))), shape=(n_docs, len(d)))
    gamma = np.ones((n_docs, K))
    for _ in range(max_iter):
        et = np.exp(digamma(gamma) - digamma(gamma.sum(1, keepdims=True)))
        etd = et[d]
        phinorm = np.einsum("ik,ik->i", etd, eb) + 1e-100
        new = alpha + et * (S @ (eb * (n / phinorm)[:, None]))
        change = np.max(np.mean(np.abs(new - gamma), axis=1))
        gamma = new
        if change < tol:
            break
    Etheta = gamma / gamma.sum(1, keepdims=True)
    Xe = sp.coo_matrix(X_eval)
    p = np.einsum("ik,ik->i", Etheta[Xe.row], Ephi[:, Xe.col].T)
    ll = float(np.sum(Xe.data * np.log(p)) / Xe.data.sum())
    return ll, float(np.exp(-ll))


def _doc_completion_dense(lam, X_obs, X_eval, alpha, max_iter=200, tol=1e-8):
    """Dense reference implementation of :func:`doc_completion` (for checking it)."""
    lam = np.asarray(lam, float)
    expElogphi = np.exp(digamma(lam) - digamma(lam.sum(1, keepdims=True)))
    Ephi = lam / lam.sum(1, keepdims=True)
    Xo = np.asarray(sp.csr_matrix(X_obs).todense())
    gamma = np.ones((Xo.shape[0], lam.shape[0]))
    for _ in range(max_iter):
        et = np.exp(digamma(gamma) - digamma(gamma.sum(1, keepdims=True)))
        new = alpha + et * ((Xo / (et @ expElogphi + 1e-100)) @ expElogphi.T)
        change = np.max(np.mean(np.abs(new - gamma), axis=1))
        gamma = new
        if change < tol:
            break
    Xe = np.asarray(sp.csr_matrix(X_eval).todense())
    p = (gamma / gamma.sum(1, keepdims=True)) @ Ephi
    ll = float(np.sum(Xe * np.log(np.where(Xe > 0, p, 1.0))) / Xe.sum())
    return ll, float(np.exp(-ll))


def topic_recovery(lam, phi_true):
    """Hungarian-matched cosine similarity between E[phi] and the true topics: (mean, min);
    None for a real corpus (no true topics)."""
    if phi_true is None:
        return None
    Ephi = np.asarray(lam, float) / np.sum(lam, 1, keepdims=True)
    a = Ephi / np.linalg.norm(Ephi, axis=1, keepdims=True)
    b = phi_true / np.linalg.norm(phi_true, axis=1, keepdims=True)
    cos = a @ b.T
    r, c = linear_sum_assignment(-cos)
    return float(cos[r, c].mean()), float(cos[r, c].min())


# =========================================================================================
# libraries
# =========================================================================================
def build_blrgraph(train, K, alpha, eta):
    import blrgraph as bg
    coo = train.tocoo()
    n_docs, V = train.shape
    theta = bg.Dirichlet(alpha * np.ones(K), plates=(n_docs,), name="theta")
    phi = bg.Dirichlet(eta * np.ones(V), plates=(K,), name="phi")
    z = bg.Categorical(theta[coo.row], plates=(coo.nnz,), name="z")
    y = bg.Mixture(z, bg.Categorical, phi, name="w").observe(coo.col, weights=coo.data)
    return bg.Model(y), theta, phi


def phi_lambda(phi, during_svi=False):
    """The topic-word Dirichlet parameters of the current iterate."""
    if during_svi:  # globals are marked fitted only when fit('svi') returns
        return np.asarray(phi.family.params_from_natural(phi.nat)["alpha"])
    return np.asarray(phi.posterior.params["alpha"])


def make_sklearn(K, alpha, eta, random_state=0, **kw):
    from sklearn.decomposition import LatentDirichletAllocation
    return LatentDirichletAllocation(n_components=K, doc_topic_prior=alpha, topic_word_prior=eta,
                                     evaluate_every=-1, random_state=random_state, **kw)


def run_sklearn(corpus, K, alpha, eta, **kw):
    est = make_sklearn(K, alpha, eta, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0, c0 = time.perf_counter(), time.process_time()
        est.fit(corpus["train"])
        t, cpu = time.perf_counter() - t0, time.process_time() - c0
        train_elbo = float(est.score(corpus["train"]))  # _approx_bound: the full ELBO (docs/math.md §7.1)
    ll, ppl = doc_completion(est.components_, corpus["held_obs"], corpus["held_eval"], alpha)
    rec = topic_recovery(est.components_, corpus["phi_true"])
    return {"time": t, "cpu": cpu, "ll": ll, "ppl": ppl, "recovery": rec, "n_iter": int(est.n_iter_),
            "train_elbo": train_elbo}


def run_blrgraph(corpus, K, alpha, eta, target, method, eval_every, fit_kw, seed=0):
    """Fit until the held-out log-likelihood first reaches ``target`` (or the budget ends).
    Returns the time-quality trace and the time at which the target was reached."""
    clock = C.Clock()
    model, theta, phi = build_blrgraph(corpus["train"], K, alpha, eta)
    t_build = clock.now()
    trace, state = [], {"reached": None}
    svi = method == "svi"

    def evaluate(it):
        lam = phi_lambda(phi, svi)
        ll, ppl = doc_completion(lam, corpus["held_obs"], corpus["held_eval"], alpha)
        return ll, lam

    def cb(it, L):
        if it % eval_every:
            return False
        t, cpu = clock.now(), clock.cpu()
        ll, lam = clock.exclude(evaluate, it)
        trace.append((it, t, ll, cpu))
        if len(trace) % 10 == 0:
            print(f"  {method} iteration {it}: {t:.1f} s, held-out ll {ll:.4f} (target {target:.4f})",
                  flush=True)
        if target is not None and ll >= target and state["reached"] is None:
            state["reached"] = (it, t, ll, cpu)
            state["lam"] = lam.copy()
            return True
        state["lam"] = lam
        return False

    if svi:
        fit_kw = dict(fit_kw, batch_over=theta)
    res = model.fit(method, tol=0, seed=seed, callback=cb, **fit_kw) if not svi else \
        model.fit(method, seed=seed, callback=cb, **fit_kw)
    t_end = clock.now()
    lam = phi_lambda(phi)  # the last iterate (= the one that reached the target, if any)
    out = {"build": t_build, "time_total": t_end, "n_iter": int(res.n_iter), "fit_elbo": float(res.elbo),
           "elbo_is_estimate": bool(res.estimate),
           "trace": [{"iter": i, "time": t, "ll": ll, "cpu": c} for i, t, ll, c in trace],
           "reached": None if state["reached"] is None else
           dict(zip(("iter", "time", "ll", "cpu"), state["reached"])),
           "final_ll": doc_completion(lam, corpus["held_obs"], corpus["held_eval"], alpha)[0],
           "recovery": topic_recovery(lam, corpus["phi_true"])}
    return out


def ll_at_time(trace, t):
    """Best held-out log-likelihood among evaluations done by time t (None if none)."""
    vals = [p["ll"] for p in trace if p["time"] <= t]
    return max(vals) if vals else None


def memory_blrgraph(train, K, alpha, eta, iters=2):
    def go():
        model, _, _ = build_blrgraph(train, K, alpha, eta)
        model.fit("vmp", max_iter=iters, tol=0, seed=0, local_iters=100, init="diffuse")
    _, m = C.measure_memory(go)
    return m


def memory_sklearn(train, K, alpha, eta, iters=2):
    def go():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            make_sklearn(K, alpha, eta, learning_method="batch", max_iter=iters).fit(train)
    _, m = C.measure_memory(go)
    return m


# =========================================================================================
# driver
# =========================================================================================
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small corpus, under a minute")
    ap.add_argument("--docs", type=int, help="documents incl. held out (default 3000)")
    ap.add_argument("--vocab", type=int, help="V (default 1500)")
    ap.add_argument("--topics", type=int, help="K (default 20)")
    ap.add_argument("--doc-len", type=int, help="tokens per document (default 80)")
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--eta", type=float, default=0.05)
    ap.add_argument("--sk-passes", type=int, default=20, help="sklearn batch max_iter")
    ap.add_argument("--vmp-max-iter", type=int, help="blrgraph plain VMP budget in sweeps (default 300)")
    ap.add_argument("--local-max-iter", type=int, help="blrgraph VMP with local iterations: budget in "
                                                       "sweeps (default 40)")
    ap.add_argument("--eval-every", type=int, default=2, help="blrgraph VMP: evaluate every n sweeps")
    ap.add_argument("--local-iters", type=int, default=100,
                    help="blrgraph fit('vmp', local_iters=): at most this many local sweeps per sweep")
    ap.add_argument("--batch-size", type=int, help="SVI minibatch, both libraries (default 256)")
    ap.add_argument("--tau", type=float, default=10.0, help="SVI delay (sklearn learning_offset)")
    ap.add_argument("--kappa", type=float, default=0.7, help="SVI forgetting rate (learning_decay)")
    ap.add_argument("--sk-epochs", type=int, help="sklearn online max_iter in epochs (default 10)")
    ap.add_argument("--svi-epochs", type=int, help="blrgraph SVI budget in epochs (default 2x sklearn's)")
    ap.add_argument("--svi-eval-every", type=int, help="SVI: evaluate every n steps (default 1/4 epoch)")
    ap.add_argument("--mem-sizes", help="document counts of the memory-growth run (default docs,2*docs)")
    ap.add_argument("--no-plain", action="store_true", help="skip the plain fit('vmp') run")
    ap.add_argument("--seeds", type=int, default=1,
                    help="blrgraph batch runs with seeds 0..n-1 (the table shows seed 0)")
    ap.add_argument("--no-svi", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blas-threads", type=int, help="cap BLAS threads (default: as configured)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    _limits = C.limit_blas(args.blas_threads)  # noqa: F841
    q = args.quick
    n_docs = args.docs or (400 if q else 3000)
    V = args.vocab or (400 if q else 1500)
    K = args.topics or (8 if q else 20)
    L = args.doc_len or (60 if q else 80)
    vmp_max = args.vmp_max_iter or (80 if q else 300)
    local_max = args.local_max_iter or (15 if q else 40)
    args.batch_size = args.batch_size or (64 if q else 256)
    args.sk_epochs = args.sk_epochs or (5 if q else 10)
    alpha, eta = args.alpha, args.eta
    info = C.machine_info()
    t_all = time.perf_counter()

    corpus = make_corpus(n_docs, V, K, L, alpha, eta, seed=args.seed)
    train = corpus["train"]
    n_train = train.shape[0]
    nnz = train.nnz
    print(f"corpus: {n_docs} docs ({n_train} train, {corpus['held_obs'].shape[0]} held out), "
          f"V={V}, K={K}, {L} tokens/doc, nnz={nnz}", flush=True)
    out = {"benchmark": "lda", "command": C.command_line(), "machine": info,
           "corpus": {"docs": n_docs, "train_docs": n_train, "V": V, "K": K, "doc_len": L,
                      "alpha": alpha, "eta": eta, "nnz": nnz}, "errors": {}}
    out["true_topics_ll"] = doc_completion(np.maximum(corpus["phi_true"], 1e-300) * 1e6,
                                           corpus["held_obs"], corpus["held_eval"], alpha)[0]

    def section(name, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - keep the other sections' numbers
            import traceback
            traceback.print_exc()
            out["errors"][name] = f"{type(e).__name__}: {e}"
            print(f"!! section {name} failed: {out['errors'][name]}", flush=True)
        C.write_json(args.json and args.json + ".partial", out) if args.json else None

    # ---- batch ----------------------------------------------------------------------------
    def batch():
        sk = run_sklearn(corpus, K, alpha, eta, learning_method="batch", max_iter=args.sk_passes)
        out["batch"] = {"sklearn": sk}
        print(f"sklearn batch {args.sk_passes} passes: {sk['time']:.2f} s, held-out ll {sk['ll']:.4f}",
              flush=True)
        kw = {"max_iter": local_max, "local_iters": args.local_iters, "init": "diffuse"}
        out["batch"]["fit_options"] = kw
        out["batch"]["seeds"] = []
        for seed in range(max(1, args.seeds)):
            blr = run_blrgraph(corpus, K, alpha, eta, sk["ll"], "vmp", 1, kw, seed=seed)
            if seed == 0:
                out["batch"]["blrgraph"] = blr
            out["batch"]["seeds"].append({"seed": seed, "reached": blr["reached"],
                                          "best": max(p["ll"] for p in blr["trace"])})
            print(f"blrgraph vmp {kw} seed {seed}: reached {blr['reached']} "
                  f"({blr['time_total']:.1f} s)", flush=True)

    def batch_plain():
        sk = out["batch"]["sklearn"]
        blr = run_blrgraph(corpus, K, alpha, eta, sk["ll"], "vmp", args.eval_every, {"max_iter": vmp_max})
        out["batch"]["blrgraph_plain"] = blr
        print(f"blrgraph plain vmp: reached {blr['reached']} (budget {vmp_max} sweeps, "
              f"{blr['time_total']:.1f} s)", flush=True)

    # ---- online ---------------------------------------------------------------------------
    def online():
        B = min(args.batch_size, n_train)
        per_epoch = -(-n_train // B)
        sko = run_sklearn(corpus, K, alpha, eta, learning_method="online", batch_size=B,
                          learning_offset=args.tau, learning_decay=args.kappa, max_iter=args.sk_epochs,
                          total_samples=n_train)
        out["online"] = {"sklearn": sko, "batch_size": B, "steps_per_epoch": per_epoch,
                         "tau": args.tau, "kappa": args.kappa}
        print(f"sklearn online {args.sk_epochs} epochs: {sko['time']:.2f} s, held-out ll {sko['ll']:.4f}",
              flush=True)
        svi_epochs = args.svi_epochs or 2 * args.sk_epochs
        ev = args.svi_eval_every or max(1, per_epoch // 4)
        for key, extra in (("blrgraph_nowarmup", {"warmup": 0}), ("blrgraph", {})):
            # warmup=0 (the LDA zoo's SVI option) is the schedule sklearn/Hoffman use;
            # fit('svi') defaults to 20 warm-up rounds of VMP on the first minibatch
            blo = run_blrgraph(corpus, K, alpha, eta, sko["ll"], "svi", ev,
                               {"batch_size": B, "epochs": svi_epochs, "tau": args.tau, "kappa": args.kappa,
                                "init": "random", "final_local_pass": False, **extra})
            out["online"][key] = blo
            print(f"blrgraph svi {extra or 'defaults'}: reached {blo['reached']} ({blo['time_total']:.1f} s)",
                  flush=True)

    # ---- memory ---------------------------------------------------------------------------
    def memory():
        mem = {"sklearn_batch": memory_sklearn(train, K, alpha, eta),
               "blrgraph_vmp": memory_blrgraph(train, K, alpha, eta)}
        sizes = [int(s) for s in args.mem_sizes.split(",")] if args.mem_sizes else [n_docs, 2 * n_docs]
        growth = []
        for nd in sizes:
            c2 = make_corpus(nd, V, K, L, alpha, eta, heldout=0.0, seed=args.seed + 1)
            m = memory_blrgraph(c2["train"], K, alpha, eta)
            unit = c2["train"].nnz * K * 8 / C.MB
            growth.append({"docs": nd, "nnz": c2["train"].nnz, "nnzK_mb": unit, **m,
                           "per_nnzK": m["tracemalloc_mb"] / unit})
            print(f"memory blrgraph {nd} docs: {C.fmt_mem(m)} MB; nnz*K*8 = {unit:.1f} MB", flush=True)
        mem["growth"] = growth
        out["memory"] = mem

    section("batch", batch)
    if not args.no_plain and "batch" in out:
        section("batch_plain", batch_plain)
    if not args.no_svi:
        section("online", online)
    if not args.no_memory:
        section("memory", memory)

    report(out, args)
    out["total_seconds"] = time.perf_counter() - t_all
    print(f"\ncommand: `{C.command_line()}`; total {out['total_seconds']:.0f} s")
    C.write_json(args.json, out)
    if args.json and os.path.exists(args.json + ".partial"):
        os.remove(args.json + ".partial")


def _reach_cells(sk, blr):
    rt = blr["reached"]
    if rt is None:
        best = max((p["ll"] for p in blr["trace"]), default=float("nan"))
        return ["not reached", f"best {best:.4f} in {blr['time_total']:.1f} s ({blr['n_iter']} it)", "-"]
    return [f"{rt['time']:.2f} s ({rt['iter']} it)", f"{rt['ll']:.4f}",
            f"{C.fmt_x(sk['time'] / rt['time'])} ({C.fmt_x(sk['cpu'] / rt['cpu'])})"]


def _row(label, sk, blr):
    at_sk = ll_at_time(blr["trace"], sk["time"])
    elbo_b = "-" if blr.get("elbo_is_estimate") and label.startswith("online") else f"{blr['fit_elbo']:.4g}"
    return ([label, f"{sk['time']:.2f} s", f"{sk['ll']:.4f}"] + _reach_cells(sk, blr) +
            ["-" if at_sk is None else f"{at_sk:.4f}",
             f"{sk['recovery'][0]:.3f} ({sk['recovery'][1]:.2f})",
             f"{blr['recovery'][0]:.3f} ({blr['recovery'][1]:.2f})",
             f"{sk['train_elbo']:.4g} / {elbo_b}"])


def report(out, args):
    c = out["corpus"]
    print("\n# LDA: blrgraph vs scikit-learn\n")
    print(C.machine_markdown(out["machine"]))
    print(f"Corpus: {c['docs']} documents ({c['train_docs']} train), V={c['V']}, K={c['K']}, "
          f"{c['doc_len']} tokens/doc, nnz={c['nnz']}, alpha={c['alpha']}, eta={c['eta']}. "
          f"Held-out log-likelihood per token (document completion); with the true topics: "
          f"{out['true_topics_ll']:.4f}.\n")
    rows = []
    b = out.get("batch", {})
    if "blrgraph" in b:
        rows.append(_row(f"batch: sklearn {args.sk_passes} passes / blrgraph fit('vmp', "
                         f"local_iters={args.local_iters}, init='diffuse')", b["sklearn"], b["blrgraph"]))
    if "blrgraph_plain" in b:
        rows.append(_row(f"batch: sklearn {args.sk_passes} passes / blrgraph plain fit('vmp') (one "
                         f"update of z, theta, phi per sweep)", b["sklearn"], b["blrgraph_plain"]))
    o = out.get("online", {})
    if "blrgraph_nowarmup" in o:
        rows.append(_row(f"online: sklearn {args.sk_epochs} epochs / blrgraph fit('svi', warmup=0) "
                         f"(B={o['batch_size']}, tau={o['tau']}, kappa={o['kappa']})", o["sklearn"],
                         o["blrgraph_nowarmup"]))
    if "blrgraph" in o:
        rows.append(_row(f"online: sklearn {args.sk_epochs} epochs / blrgraph fit('svi'), default warmup=20 "
                         f"(B={o['batch_size']}, tau={o['tau']}, kappa={o['kappa']})", o["sklearn"],
                         o["blrgraph"]))
    if len(b.get("seeds", [])) > 1:
        print("blrgraph fit('vmp', local_iters, init='diffuse') by seed, against sklearn's target "
              f"{b['sklearn']['ll']:.4f} ({b['sklearn']['time']:.2f} s):\n")
        print(C.md_table(["seed", "reached at", "best held-out ll in the budget"],
                         [[r["seed"], "not reached" if r["reached"] is None else
                           f"{r['reached']['time']:.2f} s (sweep {r['reached']['iter']})", f"{r['best']:.4f}"]
                          for r in b["seeds"]]))
        print()
    print(C.md_table(["run", "sklearn time", "sklearn held-out ll", "blrgraph time to reach it",
                      "blrgraph ll then", "sklearn time / blrgraph time, wall (CPU)",
                      "blrgraph ll at sklearn's time", "sklearn topic cos (min)",
                      "blrgraph topic cos (min)", "final training ELBO sklearn / blrgraph"], rows))
    if out.get("errors"):
        print("\nfailed sections: " + "; ".join(f"{k}: {v}" for k, v in out["errors"].items()))
    if "memory" in out:
        m = out["memory"]
        print("\nPeak memory in MB (`tracemalloc peak / RSS growth`) of build + 2 batch passes/sweeps:\n")
        print(C.md_table(["sklearn batch", "blrgraph VMP"], [[C.fmt_mem(m["sklearn_batch"]),
                                                             C.fmt_mem(m["blrgraph_vmp"])]]))
        print("\nblrgraph VMP memory against corpus size (O(nnz K) expected):\n")
        rows = [[g["docs"], g["nnz"], f"{g['nnzK_mb']:.1f}", C.fmt_mem(g), f"{g['per_nnzK']:.1f}"]
                for g in m["growth"]]
        print(C.md_table(["docs", "nnz", "nnz*K*8 bytes (MB)", "blrgraph peak (MB)",
                          "tracemalloc peak / (nnz*K*8)"], rows))


if __name__ == "__main__":
    main()
