"""Forward-backward of a categorical Markov chain by a blocked scan over time (docs/hmm.md,
"Few long sequences"): the q of families/categorical_chain.py for few long sequences.

With b_t = exp(U_t - c_t) and At = exp(P - m), the forward vectors are alpha_t = M_t
alpha_{t-1} with M_t = diag(b_t) At^T, and the backward vectors beta_{t-1} = N_t beta_t
with N_t = At diag(b_t) = M_t^T, from beta = 1 at a sequence's last step L - 1. The
transitions are split into blocks of B steps (the forward blocks from t = 1; the backward
blocks ending at t = L - 1, so the padding of the last (first) block comes after (before)
every step it could change, or, when every chain has its full length, the forward blocks,
whose padding after the chain's end leaves beta at 1). Then:

1. every block's whole product, all blocks at once: one loop of B steps, each one product
   of (K, K) with (K, K x blocks) (a divisor per block every RENORM steps); forward and
   backward, or forward only when both directions share the blocks (a backward block's
   product is then the transpose of the forward one);
2. the boundaries: alpha and beta at every block's start from those products, in two
   levels (groups of about sqrt(blocks) blocks: a loop within the groups, recursive
   doubling over the groups' products, a loop on vectors within the groups);
3. every step's alpha and beta: the loop of step 1 again, on vectors from the boundaries.

The marginals are alpha_t beta_t and the expected counts the xi_t = alpha_{t-1} (At o (b_t
beta_t)^T), each normalised to sum 1 (they sum to Z in exact arithmetic; xi_t's sum is the
marginal's times a known ratio of the stored scales); log Z is the scale of alpha at step
L - 1. Every sum is of positive terms, so the results equal the recursions' to rounding.
The intermediate arrays live in the caller's ``work`` dict (:func:`buffer`): a call
allocates only its results, so no fresh pages are touched.
"""
from __future__ import annotations

import numpy as np

#: a product of steps is divided by its sum every RENORM steps
RENORM = 8
#: a divisor or final sum below this (or not finite): the chain is redone another way
TINY = 1e-250
#: :func:`buffer` keeps an intermediate array in its ``work`` dict up to this size
WORK_BYTES = 2 ** 28


def buffer(work, name, shape):
    """A float array of ``shape`` for intermediate values: the one kept under ``name`` in
    ``work`` (a dict owned by the caller, reused from call to call) if it has that shape,
    else a new one, kept there when it is at most WORK_BYTES. Reusing the arrays saves
    the page faults of fresh memory on every call (about 1 ms per 8 MB)."""
    if work is None:
        return np.empty(shape)
    a = work.get(name)
    if a is None or a.shape != shape:
        work.pop(name, None)
        a = np.empty(shape)
        if a.nbytes <= WORK_BYTES:
            work[name] = a
    return a


def forward_backward_scan(U, P, L, B, work=None):
    """(marginals (S, T, K), counts (S, K, K), log Z (S,)) of S chains with unary
    log-potentials U (S, T >= 2, K), pairwise P (K, K) or (S, K, K) and lengths L (S,),
    by the blocked scan with blocks of B steps; None when a divisor or a sum falls below
    TINY or is not finite (the caller then runs the recursions)."""
    S, T, K = U.shape
    n = T - 1                                       # transitions t = 1..T-1
    B = max(1, min(int(B), n))
    nb = -(-n // B)
    shared = P.ndim == 2 or P.shape[0] == 1
    Pm = P.reshape(1, K, K) if shared else P
    m = np.max(Pm, axis=(-2, -1))                   # (1 or S,): At <= 1
    At = np.exp(Pm - m[:, None, None])              # (1 or S, K, K)
    c = U[..., 0].copy()                            # (S, T): max_k U_t[k]
    for i in range(1, K):
        np.maximum(c, U[..., i], out=c)
    b = buffer(work, "scan_b", (S, T, K))           # exp(U - c), max 1
    np.exp(np.subtract(U, c[..., None], out=b), out=b)
    full = bool(np.all(L == T))
    bs = _scan_steps(b, L, B, nb, full, work)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        # 1. each forward block's M_{B-1} ... M_0, each backward block's N_0 ... N_{B-1}
        X, lx, Y, ly, ldiv = _block_products(bs, At, shared, S, nb, full, n - (nb - 1) * B,
                                             work)
        # 2. the boundaries: the whole products, scanned (the backward ones in reverse)
        a, la, r, sums, low = _scan_boundaries(X, lx, Y, ly, b[:, 0].T)
        # 3. alpha and beta at every step, from the boundaries
        alpha, beta, lx, rho, lv = _scan_vectors(bs, At, shared, a, r, L, T, full, work)
        gamma, counts, log_z, gsum = _scan_stats(alpha, beta, rho, b, c, At, m, L, la, lx,
                                                 full, work)
        ok = low > TINY and min(ldiv, lv) > np.log(TINY) and \
            all(_in_range(v) for v in sums + (gsum,))
        if not (ok and np.all(np.isfinite(counts)) and np.all(np.isfinite(log_z))):
            return None
    return gamma, counts, log_z


def _in_range(v):
    """Every entry of ``v`` finite and above TINY (a NaN fails too)."""
    return v.size == 0 or (bool(np.min(v) > TINY) and bool(np.max(v) < np.inf))


def _scan_steps(b, L, B, nb, full, work):
    """The b of step k of block j of sequence s (column s nb + j), (B, 2, K, 1, S nb):
    forward, transition t = 1 + j B + k; backward (taken in the order k = B - 1 .. 0),
    t = L_s - 1 - (npad - 1 - j B - k), or the forward blocks' if every chain is of full
    length (``full``); steps outside 1..T-1 (padding) get b = 1."""
    S, T, K = b.shape
    n, npad, Nb = T - 1, nb * B, S * nb
    bs = buffer(work, "scan_bs", (B, 2, K, 1, Nb))
    dst = bs[:, :, :, 0].reshape(B, 2, K, S, nb).transpose(1, 3, 4, 0, 2)  # (2, S, nb, B, K)
    q, r = divmod(n, B)            # whole blocks, steps in the last forward one
    np.copyto(dst[0, :, :q], b[:, 1:1 + q * B].reshape(S, q, B, K))
    if r:
        dst[0, :, q, :r] = b[:, 1 + q * B:]
        dst[0, :, q, r:] = 1.0
    rev = dst[1][:, :, ::-1]       # (S, nb, B, K) in the order of the steps
    if full:                       # the forward blocks, taken backwards
        np.copyto(rev, dst[0])
    else:
        p = np.arange(npad)
        tb = np.clip(L[:, None] - npad + p[None, :], 0, T)             # (S, npad)
        tb = np.where(tb >= 1, tb, T)
        bw = np.concatenate([b, np.ones((S, 1, K))], axis=1)[np.arange(S)[:, None], tb]
        np.copyto(rev, bw.reshape(S, nb, B, K))
    return bs


def _step_matrices(At, shared, K, nb):
    """The fixed matrices of the forward (At^T) and the backward (At) steps of
    :func:`_block_loop`: shared, one block-diagonal (2 K, 2 K) matrix (both directions in
    one product, np.dot: one BLAS call, a third of np.matmul's time on (2, K, K) at K=3);
    else (2, K, K, S nb), per block."""
    if shared:
        K = At.shape[-1]
        W = np.zeros((2 * K, 2 * K))
        W[:K, :K], W[K:, K:] = At[0].T, At[0]
        return W
    Aw = np.moveaxis(At, 0, -1)                                       # (K, K, S)
    return np.repeat(np.stack([Aw.transpose(1, 0, 2), Aw]), nb, axis=-1)


def _block_loop(bs, W, state, t, o, keep, work=None, snap=None, reset=None):
    """The B steps of every block at once, in the directions of ``state`` (d, K, ..., Nb),
    d = 1 (forward) or 2 (forward, backward): the state is multiplied by the steps' b
    (``bs`` (B, 2, K, 1, Nb), its first d directions) into ``t`` then by W into ``o``,
    which is the next state. The forward product after step k is t[0] (the state is At^T
    times it), the backward one o[1]. ``t`` and ``o`` are (B, ...) arrays, one slot per
    step, if ``keep``, else one slot reused (only the last step's products are wanted).
    Every RENORM steps (and after the last one) the state is divided by its sum over
    everything but the blocks; returns the logs of the divisors applied after each step
    (B, d, Nb) (0 where none). ``snap`` (k, out): t is copied into ``out`` after step k;
    ``reset`` (n, columns, v): after each of the first n steps the backward state's
    ``columns`` are set to v (steps after a chain's end)."""
    B, Nb = bs.shape[0], bs.shape[-1]
    ls = np.zeros((B, state.shape[0], Nb))
    axes = tuple(range(1, state.ndim - 1))
    mul, dot, div = np.multiply, np.dot, np.divide
    views = _loop_views(bs, t, o, keep, state.shape[0], state.ndim, work)
    for k, (bk, tk, ok, t2, o2) in enumerate(views):
        mul(bk, state, out=tk)
        if W.ndim == 2:
            dot(W, t2, out=o2)
        else:
            np.einsum("dijn,dj...n->di...n", W, tk, out=ok)
        if reset is not None and k < reset[0]:
            ok[1][..., reset[1]] = reset[2]
        if (k + 1) % RENORM == 0 or (k == B - 1 and not keep):
            sm = ok.sum(axis=axes)
            div(ok, sm.reshape(sm.shape[:1] + (1,) * len(axes) + sm.shape[1:]), out=ok)
            np.log(sm, out=ls[k])
        if snap is not None and k == snap[0]:
            np.copyto(snap[1], tk)
        state = ok
    return ls


def _loop_views(bs, t, o, keep, dirs, ndim, work):
    """The views :func:`_block_loop` works on at each step k: b of the step (its first
    ``dirs`` directions), its slots of ``t`` and ``o``, and those two as 2-d (dirs K,
    rest) arrays. Kept in ``work`` next to the arrays they view (a few hundred views per
    call otherwise)."""
    key = ("scan_views", keep, dirs, ndim)
    got = None if work is None else work.get(key)
    if got is not None and got[0] is bs and got[1] is t and got[2] is o:
        return got[3]
    B, _, K, _, Nb = bs.shape
    views = []
    for k in range(B):
        tk, ok = (t[k], o[B - 1 - k]) if keep else (t, o)
        views.append((bs[k, :dirs].reshape((dirs, K) + (1,) * (ndim - 3) + (Nb,)), tk, ok,
                      tk.reshape(dirs * K, -1), ok.reshape(dirs * K, -1)))
    if work is not None and max(bs.nbytes, t.nbytes, o.nbytes) <= WORK_BYTES:
        work[key] = (bs, t, o, views)
    return views


def _block_products(bs, At, shared, S, nb, full, r, work=None):
    """Step 1: ``bs`` (B, 2, K, 1, Nb) the b of the forward and the backward steps. Both
    directions are a product with b then one with a fixed matrix: forward X_k = diag(b_k)
    At^T X_{k-1} is the product with At^T after the one with b (the state kept between
    steps is At^T X_{k-1}, starting from At^T), backward Y_k = At diag(b_k) Y_{k+1}
    (starting from the identity). Only the blocks' whole products are kept: returns X =
    X_{B-1} (K, K, Nb), its log scale lx (Nb), Y = Y_0 (K, K, Nb), its log scale ly (Nb)
    (the products are X exp(lx), Y exp(ly)), and the log of the smallest divisor. Every
    RENORM steps each block's two matrices are divided by their sums (the sums grow by at
    most a factor K per step in between). Chains of full length (``full``) share the
    forward blocks in both directions, and a backward block's product is the transpose of
    the forward one (N_k = M_k^T): the loop runs forward only, and the last block's
    product over its ``r`` steps (the rest is padding) is copied after step r - 1."""
    B, _, K, _, Nb = bs.shape
    d = 1 if full else 2
    t = buffer(work, f"scan_t{d}", (d, K, K, Nb))     # b o state
    o = buffer(work, f"scan_o{d}", (d, K, K, Nb))     # after the matrix: the next state
    W = _step_matrices(At, shared, K, nb)
    if full:
        W = np.ascontiguousarray(At[0].T) if W.ndim == 2 else W[:1]
    state = np.empty((d, K, K, Nb))
    state[0] = W[0] if W.ndim == 4 else At[0].T[:, :, None]
    if not full:
        state[1] = np.eye(K)[:, :, None]
    snap = (r - 1, np.empty((1, K, K, Nb))) if full else None
    ls = _block_loop(bs, W, state, t, o, False, work, snap=snap)
    lx = ls[:-1, 0].sum(0)
    low = np.min(ls[RENORM - 1::RENORM]) if B >= RENORM else np.inf    # the smallest divisor
    low = min(low, np.min(ls[B - 1]))
    if not full:
        return t[0], lx, o[1], ls[:, 1].sum(0), low
    Y = np.empty((K, K, S, nb))
    Y[...] = t[0].reshape(K, K, S, nb).transpose(1, 0, 2, 3)
    Y[..., -1] = snap[1][0].reshape(K, K, S, nb)[..., -1].transpose(1, 0, 2)
    return t[0], lx, Y.reshape(K, K, Nb), np.zeros(Nb), low


def _scan_boundaries(X, lx, Y, ly, a0):
    """Step 2: from the blocks' whole products (X, lx, Y, ly of :func:`_block_products`)
    and alpha_0 = a0 (K, S), alpha at every forward block's start (K, S, nb) with its log
    scale (S, nb), beta at the end of every backward block (K, S, nb), the sums that must
    not underflow, and the smallest divisor."""
    (K, S), nb = a0.shape, X.shape[-1] // a0.shape[1]
    G = np.empty((2, K, K, S, nb))
    G[0] = X.reshape(K, K, S, nb)
    G[1] = Y.reshape(K, K, S, nb)[..., ::-1]
    lg = np.stack([lx.reshape(S, nb), ly.reshape(S, nb)[:, ::-1]])
    sa0 = a0.sum(0)
    a0 = a0 / sa0
    V, lg, low = _chain_vectors(G, lg, np.stack([a0, np.ones((K, S))]))
    va = V[0]                                                         # alpha at (j+1) B
    vr = V[1][..., ::-1]                                              # beta at the
    sva, svr = va.sum(0), vr.sum(0)                                   # backward boundaries
    a = np.empty((K, S, nb))                                          # alpha at j B
    a[:, :, 0] = a0
    a[:, :, 1:] = va[:, :, :-1] / sva[:, :-1]
    la = np.empty((S, nb))                                            # its log scale
    la[:, 0] = np.log(sa0)
    la[:, 1:] = la[:, :1] + lg[0][:, :-1] + np.log(sva[:, :-1])
    r = np.empty((K, S, nb))                                          # beta at the end
    r[:, :, -1] = 1.0 / K                                             # of backward block j
    r[:, :, :-1] = vr[:, :, 1:] / svr[:, 1:]
    return a, la, r, (sa0, sva, svr), low


def _chain_vectors(G, lg, v0):
    """v_j = G_j G_{j-1} ... G_0 v0 for the (2, K, K, S, n) matrices G (log scales lg (2,
    S, n): the matrices are G exp(lg)) and start vectors v0 (2, K, S), in two levels
    (n^(1/2) calls of small arrays instead of log2(n) rounds over all of G): groups of g
    ~ n^(1/2) matrices; a loop of g steps gives every group's whole product (all groups at
    once); those products' prefixes by :func:`_doubling` give v at every group's start;
    a loop of g steps on vectors gives v within every group. Returns v (2, K, S, n), its
    log scale (2, S, n) and the smallest divisor (of the matrices and vectors, which are
    divided by their sums every RENORM steps and at the groups' ends)."""
    D, K, _, S, n = G.shape
    g = max(1, int(np.ceil(np.sqrt(n))))
    ng = -(-n // g)
    Gp = np.empty((D, K, K, S, ng * g))
    Gp[..., :n] = G
    Gp[..., n:] = np.eye(K)[:, :, None, None]
    Gp = Gp.reshape(D, K, K, S, ng, g)
    lp = np.zeros((D, S, ng * g))
    lp[..., :n] = lg
    lp = lp.reshape(D, S, ng, g)
    Q = np.empty((D, K, K, S, ng))
    Q[...] = np.eye(K)[:, :, None, None]
    lq = lp.sum(-1)                                   # each group's product: Q exp(lq)
    low = np.inf
    for p in range(g):
        Q = np.einsum("dijsq,djlsq->dilsq", Gp[..., p], Q)
        if (p + 1) % RENORM == 0 or p == g - 1:
            sm = Q.sum(axis=(1, 2))
            Q /= sm[:, None, None]
            low = min(low, sm.min())
            lq += np.log(sm)
    R, lr, low_r = _doubling(Q, lq)                   # R_q: groups 0..q
    W = np.empty((D, K, S, ng))                       # v at each group's start
    W[..., 0] = v0
    np.einsum("dijsq,djs->disq", R[..., :-1], v0, out=W[..., 1:])
    sw = W.sum(1)
    W /= sw[:, None]
    lv = np.cumsum(lp, axis=-1)                       # the log scale of v, below
    run = np.log(sw)
    run[..., 1:] += lr[..., :-1]
    lv += run[..., None]
    V = np.empty((D, K, S, ng, g))
    for p in range(g):
        W = np.einsum("dijsq,djsq->disq", Gp[..., p], W, out=V[..., p])
        if (p + 1) % RENORM == 0:
            sm = W.sum(1)
            W /= sm[:, None]
            low = min(low, sm.min())
            lv[..., p:] += np.log(sm)[..., None]
    return V.reshape(D, K, S, ng * g)[..., :n], lv.reshape(D, S, ng * g)[..., :n], \
        min(low, low_r, sw.min())


def _doubling(G, lg):
    """Prefix products P_j = G_j G_{j-1} ... G_0 along the last axis of the (2, K, K, S,
    n) matrices G (log scales lg (2, S, n): the products are G exp(lg)), by recursive
    doubling (Hillis and Steele 1986): log2(n) rounds, each one product of every pair
    (j, j - d), divided by its sum. Returns (P, lp, the smallest of those sums)."""
    n = G.shape[-1]
    d = 1
    low = np.inf
    H, lh = np.empty_like(G), np.empty_like(lg)
    while d < n:
        H[..., :d], lh[..., :d] = G[..., :d], lg[..., :d]
        w = np.einsum("dij...,djl...->dil...", G[..., d:], G[..., :-d], out=H[..., d:])
        s = w.sum(axis=(1, 2))
        np.divide(w, s[:, None, None], out=w)
        low = min(low, s.min())
        s = np.add(lg[..., :-d], np.log(s, out=s), out=s)
        np.add(lg[..., d:], s, out=lh[..., d:])
        G, H, lg, lh = H, G, lh, lg
        d *= 2
    return G, lg, low


def _scan_vectors(bs, At, shared, a, r, L, T, full, work):
    """Step 3: alpha and beta (S, T, K) at every step: the B steps of every block run again
    (:func:`_block_loop`), now on vectors from the boundaries' (a, r of
    :func:`_scan_boundaries`), then written into the (S, T, K) layout. Also returns the
    log scale of alpha within its block (B, Nb), rho (S, T - 1) and the log of the smallest
    divisor: rho_t = alpha_t / (b_t o At^T alpha_{t-1}) of the vectors as stored, t = 1..T-1
    (1 / the divisor applied before step t within a block, 1 / the sum of alpha_{t-1} at
    a block's start, whose vector is alpha_{t-1} normalised)."""
    B, _, K, _, Nb = bs.shape
    _, S, nb = a.shape
    n, npad = T - 1, B * nb
    W = _step_matrices(At, shared, K, nb)
    state = np.empty((2, K, Nb))
    if W.ndim == 2:
        np.dot(At[0].T, a.reshape(K, Nb), out=state[0])
    else:
        np.einsum("ijn,jn->in", W[0], a.reshape(K, Nb), out=state[0])
    state[1] = r.reshape(K, Nb)
    t = buffer(work, "scan_vt", (B, 2, K, Nb))      # b o state: alpha at each step
    o = buffer(work, "scan_vo", (B, 2, K, Nb))      # beta, in the order of the steps
    # full: the backward blocks are the forward ones; the last one's padding steps (after
    # the chain's end, taken first) leave beta at 1
    reset = (npad - n, slice(nb - 1, None, nb), 1.0 / K) if full else None
    ls = _block_loop(bs, W, state, t, o, True, work, reset=reset)
    lx = np.zeros((B, Nb))
    np.cumsum(ls[:-1, 0], axis=0, out=lx[1:])
    low = np.min(ls[RENORM - 1::RENORM]) if B >= RENORM else np.inf
    ab = buffer(work, "scan_alpha", (S, npad + 1, K))
    ab[:, 0] = a[:, :, 0].T
    np.copyto(ab[:, 1:].reshape(S, nb, B, K), t[:, 0].reshape(B, K, S, nb).transpose(2, 3, 0, 1))
    rho = np.ones((B, Nb))
    rho[RENORM::RENORM] = np.exp(-ls[RENORM - 1:B - 1:RENORM, 0])
    rho[0] = 1.0 / (ab[:, 0:npad:B] @ np.ones(K)).reshape(Nb)
    rho = rho.reshape(B, S, nb).transpose(1, 2, 0).reshape(S, npad)[:, :n]
    bb = buffer(work, "scan_beta", (S, npad + 1, K))
    np.copyto(bb[:, :npad].reshape(S, nb, B, K), o[:, 1].reshape(B, K, S, nb).transpose(2, 3, 0, 1))
    bb[:, npad] = 1.0 / K
    if full:   # beta at step tau is bb[tau]
        beta = bb[:, :T]
    else:   # beta at step tau < L - 1 is bb[tau - L + 1 + npad]; 1 from L - 1 on
        idx = np.clip(np.arange(T)[None, :] - L[:, None] + 1 + npad, 0, npad)
        beta = bb[np.arange(S)[:, None], idx]
    return ab[:, :T], beta, lx, rho, low


def _scan_stats(alpha, beta, rho, b, c, At, m, L, la, lx, full, work):
    """The marginals, the expected counts and log Z from alpha and beta at every step and
    rho (of :func:`_scan_vectors`) (and the marginals' sums, which must not underflow)."""
    S, T, K = alpha.shape
    B, nb = lx.shape[0], la.shape[1]
    ones = np.ones(K)
    # log Z: the scale of alpha at step L - 1 = 1 + j B + k (or 0)
    si = np.arange(S)
    last = np.clip(L - 1, 0, T - 1)
    j, k = np.divmod(np.maximum(last - 1, 0), B)
    lz = np.where(last == 0, la[:, 0], la[si, j] + lx[k, si * nb + j])
    live = None if full else np.arange(T)[None, :] < L[:, None]
    csum = c.sum(1) if full else np.where(live, c, 0.0).sum(1)
    log_z = lz + np.log(alpha[si, last] @ ones) + csum + np.maximum(L - 1, 0) * m
    log_z = np.where(L > 0, log_z, 0.0)
    gamma = np.multiply(alpha, beta)
    gsum = gamma @ ones
    np.divide(gamma, gsum[..., None], out=gamma)
    # counts: xi_t = alpha_{t-1} (At o (b_t beta_t)^T) / its sum, t = 1..L-1 (the
    # same for any scale of alpha_{t-1} and of beta_t); its sum is (b_t o At^T
    # alpha_{t-1}) . beta_t = gsum_t / rho_t
    g = np.multiply(b[:, 1:], beta[:, 1:], out=buffer(work, "scan_g", (S, T - 1, K)))
    w = np.divide(rho, gsum[:, 1:])
    if not full:
        w[~live[:, 1:]] = 0.0
    an = np.multiply(alpha[:, :-1], w[..., None], out=buffer(work, "scan_an", (S, T - 1, K)))
    counts = np.matmul(np.swapaxes(an, 1, 2), g)
    counts *= At
    return gamma, counts, log_z, gsum
