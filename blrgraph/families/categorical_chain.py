"""The q of a categorical Markov chain: forward-backward and Viterbi (docs/hmm.md).

A chain of T states z_0..z_{T-1} in {0..K-1} with unary log-potentials U_t (K,)
and one pairwise log-potential matrix P (K, K) (rows: from, columns: to) is the
exponential family

    q(z) = exp( sum_t U_t[z_t] + sum_{t>=1} P[z_{t-1}, z_t] - log Z ),

with mean parameters the marginals gamma_t = E[onehot z_t] and the expected
transition counts C = sum_{t>=1} E[onehot z_{t-1} onehot z_t^T]. In variational
Bayes (Beal 2003, ch. 3) U_0 = E[log pi] + m_0, U_t = m_t (the emissions'
messages) and P = E[log A]: exp(P) is sub-normalised (rows sum to < 1), which the
recursions below do not need.

Everything is vectorised over sequences (S) and states (K); the loops run over
time, O(T K^2) per sequence. The recursions are scaled (Rabiner 1989): the
forward vectors' running sum is divided out (every step, or every RENORM steps
with a shared transition matrix) and the logs of the divisors are summed into
log Z; the backward pass divides by the same factors. So nothing under- or
overflows however long the chain. A sequence whose divisors still fall below
TINY = 1e-250 (transition weights near 1e-300 against data that insist on them)
is recomputed in log space. ``lengths`` ends each sequence: steps t >= L_s
belong to no sequence (no term of log Z, no count) and publish the forward
prediction.
"""
from __future__ import annotations

import numpy as np
from scipy.special import logsumexp


#: a shared-transition forward pass divides out the running sum every RENORM steps
RENORM = 8
#: a divisor or final sum below this (or not finite): the sequence is redone in log space
TINY = 1e-250
#: forward_backward keeps an intermediate array in its ``work`` dict up to this size
WORK_BYTES = 2 ** 28
#: forward_backward's emissions (exp) are computed this many steps at a time, in the
#: forward loop; the marginals and the counts' operands BCHUNK steps at a time, in the
#: backward loop
CHUNK = 32
BCHUNK = 64
#: the block length of the scan over time (:func:`_forward_backward_scan`)
SCAN_BLOCK = 32
#: forward_backward takes the scan for S K^2 up to this (:func:`use_scan`)
SCAN_WORK = 128


class ChainStats:
    """Forward-backward results for S sequences (see :func:`forward_backward`)."""

    __slots__ = ("marginals", "counts", "log_z", "lengths", "valid")

    def __init__(self, marginals, counts, log_z, lengths, valid):
        self.marginals = marginals   # (S, T, K)
        self.counts = counts         # (S, K, K) expected transition counts (valid steps)
        self.log_z = log_z           # (S,) log normaliser of each (truncated) chain
        self.lengths = lengths       # (S,) ints
        self.valid = valid           # (S, T) bool: t < L_s


def _check(U, P, lengths):
    U = np.asarray(U, dtype=float)
    if U.ndim != 3:
        raise ValueError(f"forward_backward: log_unary must have shape (S, T, K), got {U.shape}")
    S, T, K = U.shape
    P = np.asarray(P, dtype=float)
    if P.shape[-2:] != (K, K) or P.ndim not in (2, 3) or (P.ndim == 3 and P.shape[0] not in (1, S)):
        raise ValueError(f"forward_backward: log_trans must have shape (K, K) or (S, K, K) with "
                         f"K = {K}, S = {S}, got {P.shape}")
    if lengths is None:
        L = np.full(S, T, dtype=np.intp)
    else:
        L = np.asarray(lengths, dtype=np.intp)
        if L.shape != (S,) or np.any(L < 0) or np.any(L > T):
            raise ValueError(f"forward_backward: lengths must be S = {S} integers in 0..{T}")
    return U, P, L


def _buffer(work, name, shape):
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


def forward_backward(log_unary, log_trans, lengths=None, work=None, scan=None):
    """Marginals, expected transition counts and log Z of S chains.

    log_unary (S, T, K); log_trans (K, K) or (S, K, K); lengths (S,) in 0..T or
    None (all T); ``work``: None or a dict in which the large intermediate arrays are
    kept for the next call with the same shapes (the caller's; the results never
    share memory with it); ``scan``: True for the blocked scan over time
    (:func:`_forward_backward_scan`), False for the recursions below, None (default)
    for the scan where it is the faster (:func:`use_scan`: few long sequences). The
    scan falls back to the recursions where its sums leave the floating-point range.
    Returns a :class:`ChainStats`.

    The recursions run on (T, K, S) arrays, so that one step is a contiguous (K, S)
    slice: with a shared transition matrix a forward step is one (K, K) @ (K, S)
    product and one product with the emissions (every RENORM steps one more call sums
    the forward vectors and one divides them by the sums); a backward step one
    elementwise product and one (K, K) @ (K, S) product (and at the same steps a
    division by the forward pass's sums). Any scaling of the forward vectors is exact
    as long as the backward pass divides by the same factors. The whole-array work is
    done a block of steps at a time next to the recursions, while those steps are in
    the CPU cache: the emissions' exp CHUNK steps at a time in the forward loop, the
    marginals and the operands of the counts BCHUNK steps at a time in the backward
    loop. The expected counts are one (K, n) @ (n, K) product per sequence and block."""
    U, P, L = _check(log_unary, log_trans, lengths)
    S, T, K = U.shape
    if T > 1 and (use_scan(S, T, K) if scan is None else scan):
        st = _forward_backward_scan(U, P, L, work=work)
        if st is not None:
            return st
    return _forward_backward_rec(U, P, L, work)


def _forward_backward_rec(U, P, L, work):
    """:func:`forward_backward` by the scaled recursions (:func:`_forward`, :func:`_backward`);
    a sequence whose sums leave the floating-point range is redone in log space."""
    S, T, K = U.shape
    valid = np.arange(T)[None, :] < L[:, None]                       # (S, T)
    short = not bool(np.all(valid))
    shared = P.ndim == 2 or P.shape[0] == 1
    Pm = P.reshape(K, K) if shared else P
    m = np.max(Pm, axis=(-2, -1), keepdims=True)                     # shift of P: At <= 1
    At = np.exp(Pm - m)
    if not shared:
        Ak = np.ascontiguousarray(np.moveaxis(At, 0, -1))             # (K, K, S)
    B = _buffer(work, "B", (T, K, S))          # exp(U_t - c_t), then G below
    alpha = _buffer(work, "alpha", (T, K, S))
    c = np.empty((T, S))                       # c_t = max_k U_t[k]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # redone in log space
        c_div = _forward(U, B, c, At, shared, alpha)
        last = np.clip(L - 1, 0, T - 1)
        k0 = alpha[last, :, np.arange(S)].sum(-1)                   # sum of the last alpha
        bad = ~(np.all(np.isfinite(c_div) & (c_div > TINY), axis=0) & np.isfinite(k0)
                & (k0 > TINY))

        # backward: G[t] = B_t beta_t / c_t on valid transitions (0 elsewhere), beta[t] =
        # beta_t / prod_{t < tau < L} c_tau, so alpha[t] beta[t] = p(z_t, x) / prod c = gamma_t k0
        inloop = shared and not short      # c_t != 1 only every RENORM steps: divide there
        if not inloop:
            rc = 1.0 / c_div
            if short:
                live = valid.T                                       # (T, S)
                rc = np.where(live, rc, 0.0)
        gamma, counts = _backward(B, alpha, At, None if shared else Ak, c_div,
                                  None if inloop else rc, live if short else None)
        rk0 = np.where(L > 0, 1.0 / k0, 0.0)
        counts *= At
        counts *= rk0[:, None, None]
        if short:
            logs = np.where(valid, np.log(np.where(valid, c_div.T, 1.0)) + c.T, 0.0).sum(1)
        else:   # the divisors differ from 1 only every RENORM steps with a shared matrix
            logs = c.sum(0) + np.log(c_div[RENORM::RENORM] if shared else c_div).sum(0)
        log_z = logs + np.where(L > 0, np.log(np.where(L > 0, k0, 1.0)), 0.0) \
            + np.maximum(L - 1, 0) * m.reshape(-1)
    if np.any(bad):
        idx = np.flatnonzero(bad)
        sub = _forward_backward_log(U[idx], P if shared else P[idx], L[idx])
        gamma[idx], counts[idx], log_z[idx] = sub.marginals, sub.counts, sub.log_z
    return ChainStats(gamma, counts, log_z, L, valid)


def _backward(B, alpha, At, Ak, c_div, rc, live):
    """The scaled backward pass, BCHUNK steps at a time, with the marginals (S, T, K) and
    the expected transition counts (S, K, K) before their last scaling (see
    :func:`forward_backward`). ``B`` (T, K, S) is overwritten with G; ``Ak``: the
    per-sequence transitions (K, K, S), or None for a shared ``At``; ``rc``: 1 / c_div
    (zero after a sequence's end), or None to divide inside the loop every RENORM steps
    (shared transitions, no short sequence); ``live`` (T, S): the steps within each
    sequence, or None when no sequence is short."""
    T, K, S = B.shape
    shared, inloop, short = Ak is None, rc is None, live is not None
    G = B
    gamma = np.empty((S, T, K))
    # counts[s] = sum_{t >= 1} alpha[t - 1, :, s] G[t, :, s]^T: per chunk, both as
    # (S, K, n) copies and one (K, n) @ (n, K) product per sequence
    counts = np.zeros((S, K, K))
    aT = np.empty((S, K, BCHUNK))
    gT = np.empty((S, K, BCHUNK))
    beta = np.empty((BCHUNK, K, S))                              # beta of one chunk
    nxt = np.ones((K, S))                                        # beta[t1 - 1]
    one = np.ones(K)
    dot, mul, div = np.dot, np.multiply, np.divide
    for t1 in range(T, 0, -BCHUNK):
        t0 = max(t1 - BCHUNK, 0)
        if not inloop:
            mul(G[t0:t1], rc[t0:t1, None, :], out=G[t0:t1])
        b = beta[t1 - 1 - t0]
        b[...] = nxt
        for t in range(t1 - 1, t0 - 1, -1):
            g = G[t]
            mul(g, b, g)
            if inloop and t % RENORM == 0:
                div(g, c_div[t], g)
            if t == 0:
                break
            b = beta[t - 1 - t0] if t > t0 else nxt
            if shared:
                dot(At, g, out=b)         # b[i, s] = sum_j At[i, j] g[j, s]
            else:
                np.einsum("ijs,js->is", Ak, g, out=b)
            if short:
                np.copyto(b, 1.0, where=~live[t])
        n = t1 - t0
        lo = max(t0, 1)                    # the pairs (t - 1, t) with t in [lo, t1)
        if t1 > lo:
            a, g = aT[:, :, :t1 - lo], gT[:, :, :t1 - lo]
            np.copyto(a, alpha[lo - 1:t1 - 1].transpose(2, 1, 0))
            np.copyto(g, G[lo:t1].transpose(2, 1, 0))
            counts += np.matmul(a, g.transpose(0, 2, 1))
        # the marginals (after a sequence's end: the forward prediction), as (S, T, K)
        ab = mul(alpha[t0:t1], beta[:n], out=beta[:n])
        div(ab, np.matmul(one, ab)[:, None, :], out=ab)
        np.copyto(gamma[:, t0:t1], ab.transpose(2, 0, 1))
    return gamma, counts


def _forward(U, B, c, At, shared, alpha):
    """The emissions and the scaled forward pass, CHUNK steps at a time: B[t] = exp(U_t -
    c_t) with c[t] = max_k U_t[k] (written into ``B`` (T, K, S) and ``c`` (T, S)), then
    alpha[t] = alpha_t / prod_{tau <= t} c_tau into ``alpha`` (T, K, S); returns c_div
    (T, S), the divisors applied (1 where none was). A shared transition matrix: one
    product with At^T and one with the emissions per step; the sum is divided out every
    RENORM steps only (between divisions the sums change by a factor in (tiny, K] per
    step); per-sequence matrices: one einsum and a division per step."""
    T, K, S = B.shape
    c_div = np.ones((T, S))
    one = np.ones(K)
    dot, mul, div = np.dot, np.multiply, np.divide
    if shared:
        AtT = np.ascontiguousarray(At.T)
    else:
        Ak = np.ascontiguousarray(np.moveaxis(At, 0, -1))             # (K, K, S)
    for t0 in range(0, T, CHUNK):
        t1 = min(t0 + CHUNK, T)
        Bc = B[t0:t1]
        np.copyto(Bc, U[:, t0:t1].transpose(1, 2, 0))
        cc = np.max(Bc, axis=1, out=c[t0:t1])     # over the middle axis: (S,) rows
        np.subtract(Bc, cc[:, None, :], out=Bc)
        np.exp(Bc, out=Bc)
        a = alpha[t0 - 1] if t0 else None
        for t in range(t0, t1):
            prev, a = a, alpha[t]
            if t == 0:
                np.copyto(a, B[0])
                if not shared:
                    div(a, dot(one, a, out=c_div[0]), a)
                continue
            if shared:
                dot(AtT, prev, out=a)
                mul(a, B[t], a)
                if t % RENORM == 0:
                    div(a, dot(one, a, out=c_div[t]), a)
            else:
                np.einsum("ijs,is->js", Ak, prev, out=a)
                mul(a, B[t], a)
                div(a, dot(one, a, out=c_div[t]), a)
    return c_div


def _forward_backward_log(U, P, L):
    """The same recursions in log space (the fallback of :func:`forward_backward`)."""
    S, T, K = U.shape
    Pm = np.broadcast_to(P.reshape((-1, K, K)), (S, K, K))
    valid = np.arange(T)[None, :] < L[:, None]
    la = np.empty((S, T, K))
    la[:, 0] = U[:, 0]
    for t in range(1, T):
        la[:, t] = logsumexp(la[:, t - 1, :, None] + Pm, axis=1) + U[:, t]
    lb = np.zeros((S, T, K))
    for t in range(T - 1, 0, -1):
        b = logsumexp(Pm + (U[:, t] + lb[:, t])[:, None, :], axis=2)
        lb[:, t - 1] = np.where(valid[:, t, None], b, 0.0)
    last = np.clip(L - 1, 0, T - 1)
    log_z = logsumexp(la[np.arange(S), last], axis=-1)
    log_z = np.where(L > 0, log_z, 0.0)
    lg = la + lb
    gamma = np.exp(lg - logsumexp(lg, axis=-1, keepdims=True))
    counts = np.zeros((S, K, K))
    for t in range(1, T):
        lx = la[:, t - 1, :, None] + Pm + (U[:, t] + lb[:, t])[:, None, :] - log_z[:, None, None]
        counts += np.where(valid[:, t, None, None], np.exp(lx), 0.0)
    return ChainStats(gamma, counts, log_z, L, valid)


def viterbi(log_unary, log_trans, lengths=None):
    """The most probable state sequence of each chain, (S, T) ints; steps beyond a
    sequence's length hold -1."""
    U, P, L = _check(log_unary, log_trans, lengths)
    S, T, K = U.shape
    Pm = np.broadcast_to(P.reshape((-1, K, K)), (S, K, K))
    delta = U[:, 0].copy()
    back = np.zeros((S, T, K), dtype=np.intp)
    for t in range(1, T):
        cand = delta[:, :, None] + Pm
        back[:, t] = np.argmax(cand, axis=1)
        new = np.take_along_axis(cand, back[:, t, None, :], axis=1)[:, 0] + U[:, t]
        live = (t < L)[:, None]
        delta = np.where(live, new, delta)
    path = np.full((S, T), -1, dtype=np.intp)
    cur = np.argmax(delta, axis=1)
    for t in range(T - 1, -1, -1):
        live = t < L
        at_end = t == L - 1
        cur = np.where(at_end, np.argmax(delta, axis=1), cur)
        path[:, t] = np.where(live, cur, -1)
        if t > 0:
            cur = np.where(live, back[np.arange(S), t, cur], cur)
    return path


def sample_paths(log_unary, log_trans, lengths=None, rng=None, size=()):
    """Exact draws of whole state paths from q (forward filtering, backward sampling).

    log_unary (S, T, K); log_trans (K, K) or (S, K, K); lengths (S,) or None (all T);
    ``size`` a tuple of leading draw axes. Returns ints of shape size + (S, T); steps
    t >= L_s (after a sequence's end) hold -1, as in :func:`viterbi`. The forward pass
    keeps the normalised filter log alpha_t (S, T, K) in log space (O(T K^2) per
    sequence, any potentials); the backward pass draws z_{L-1} from alpha_{L-1} and
    z_{t-1} | z_t from alpha_{t-1}(i) exp(P[i, z_t]), vectorised over draws and
    sequences (one inverse-CDF draw per step, O(T K) per path)."""
    U, P, L = _check(log_unary, log_trans, lengths)
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    size = tuple(int(s) for s in size)
    S, T, K = U.shape
    Pm = P.reshape((-1, K, K))                                       # (1 or S, K, K)
    la = np.empty((S, T, K))
    la[:, 0] = U[:, 0]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        la[:, 0] -= logsumexp(la[:, 0], axis=-1, keepdims=True)
        for t in range(1, T):
            a = logsumexp(la[:, t - 1, :, None] + Pm, axis=1) + U[:, t]
            la[:, t] = a - logsumexp(a, axis=-1, keepdims=True)
    bad = np.isnan(la).any(-1) & (np.arange(T)[None, :] < L[:, None])
    if np.any(bad):
        s = int(np.flatnonzero(bad.any(1))[0])
        raise ValueError(f"sample_paths: the potentials of sequence {s} give it no path of "
                         f"positive probability (its forward filter is not finite)")
    # the column K of the extended transition is 0: "no next state" (the sequence's last
    # step draws from its filter alone)
    Pe = np.concatenate([Pm, np.zeros(Pm.shape[:2] + (1,))], axis=2)
    PeT = np.ascontiguousarray(np.swapaxes(Pe, 1, 2))                  # (1 or S, K + 1, K)
    n = int(np.prod(size, dtype=int))
    seq = np.arange(S)[None, :] if PeT.shape[0] == S else np.zeros((1, S), dtype=np.intp)
    out = np.full((n, S, T), -1, dtype=np.intp)
    nxt = np.full((n, S), -1, dtype=np.intp)
    with np.errstate(invalid="ignore"):   # steps after a sequence's end: drawn, then cut
        for t in range(T - 1, -1, -1):
            logits = la[None, :, t, :] + PeT[seq, nxt]                # (n, S, K)
            w = np.exp(logits - np.max(logits, axis=-1, keepdims=True))
            cum = np.cumsum(w, axis=-1)
            u = rng.random((n, S)) * cum[..., -1]
            cur = np.minimum(np.sum(cum <= u[..., None], axis=-1), K - 1)
            nxt = np.where((t < L)[None, :], cur, -1)
            out[:, :, t] = nxt
    return out.reshape(size + (S, T))


def use_scan(S, T, K):
    """Whether :func:`forward_backward` takes the blocked scan for S sequences of T steps
    and K states: the recursions' cost is a fixed cost per step (a few numpy calls, any S)
    plus O(S K^2) per step, the scan's is O(S K^2) per step (more than the recursions')
    plus a fixed cost per block; measured (docs/benchmarks.md), the scan is the faster for
    S K^2 up to about SCAN_WORK and T of at least a few blocks. Its products of the steps
    take 32 T S K^2 bytes; above WORK_BYTES the recursions run instead (O(T K S) memory)."""
    return T >= 4 * SCAN_BLOCK and S * K * K <= SCAN_WORK and 32 * T * S * K * K <= WORK_BYTES


def _forward_backward_scan(U, P, L, block=None, work=None):
    """The results of :func:`forward_backward`'s recursions by a blocked scan over time
    (for few long sequences). With b_t = exp(U_t - c_t) and At = exp(P - m), the forward
    vectors are alpha_t = M_t alpha_{t-1} with M_t = diag(b_t) At^T, and the backward
    vectors beta_{t-1} = N_t beta_t with N_t = At diag(b_t) = M_t^T, from beta = 1 at a
    sequence's last step L - 1. The transitions are split into blocks of B steps (the
    forward blocks from t = 1, the backward blocks ending at t = L - 1, so the padding of
    the last (first) block comes after (before) every step it could change). Then:

    1. within every block at once, the products of its first k matrices M and of its last
       k matrices N: one loop of B steps, each one product of (K, K) with (K, K x blocks)
       for both directions (a divisor per block and direction every RENORM steps);
    2. the boundaries: the blocks' whole products scanned by recursive doubling (log2 of
       the number of blocks rounds, all blocks at once) give alpha and beta at every
       block's start;
    3. every step's alpha and beta: its block's product applied to the boundary's vector,
       all steps at once.

    The marginals are alpha_t beta_t and the expected counts the xi_t = alpha_{t-1} (At o
    (b_t beta_t)^T), each normalised to sum 1 (they sum to Z in exact arithmetic); log Z
    is the scale of alpha at step L - 1. Every sum is of positive terms, so the results
    equal the recursions' to rounding. Returns None when a divisor or a sum falls below
    TINY or is not finite (the caller then runs the recursions)."""
    S, T, K = U.shape
    n = T - 1                                       # transitions t = 1..T-1
    B = min(int(block) if block else SCAN_BLOCK, n)
    nb = -(-n // B)
    shared = P.ndim == 2 or P.shape[0] == 1
    Pm = P.reshape(1, K, K) if shared else P
    m = np.max(Pm, axis=(-2, -1))                   # (1 or S,): At <= 1
    At = np.exp(Pm - m[:, None, None])              # (1 or S, K, K)
    c = U[..., 0].copy()                            # (S, T): max_k U_t[k]
    for i in range(1, K):
        np.maximum(c, U[..., i], out=c)
    b = np.exp(U - c[..., None])                    # (S, T, K), max 1
    full = bool(np.all(L == T))
    bs = _scan_steps(b, L, B, nb, full)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        # 1. X[k] = M_k ... M_0 of each forward block, Y[k] = N_k ... N_{B-1} of each backward
        X, lx, Y, ly, ldiv = _block_products(bs, At, shared, S, nb, work)
        # 2. the boundaries: the whole products, scanned (the backward ones in reverse)
        a, la, r, sums, low = _scan_boundaries(X, lx, Y, ly, b[:, 0].T)
        # 3. alpha at steps 1 + j B + k, beta at L - 1 - (npad - j B - k)
        alpha, beta = _scan_vectors(X, Y, a, r, L, T, full)
        gamma, counts, log_z, gsum = _scan_stats(alpha, beta, b, c, At, m, L, la, lx, full)
        ok = low > TINY and ldiv > np.log(TINY) and \
            all(np.all(np.isfinite(v) & (v > TINY)) for v in sums + (gsum,))
        if not (ok and np.all(np.isfinite(counts)) and np.all(np.isfinite(log_z))):
            return None
    return ChainStats(gamma, counts, log_z, L, np.arange(T)[None, :] < L[:, None])


def _scan_steps(b, L, B, nb, full):
    """The b of step k of block j of sequence s (column s nb + j) for
    :func:`_forward_backward_scan`, (B, 2, K, 1, S nb): forward, transition t = 1 + j B + k;
    backward (taken in the order k = B - 1 .. 0), t = L_s - 1 - (npad - 1 - j B - k);
    steps outside 1..T-1 (padding) get b = 1."""
    S, T, K = b.shape
    n, npad, Nb = T - 1, nb * B, S * nb
    bs = np.empty((B, 2, K, 1, Nb))
    bf = np.ones((S, npad, K))
    bf[:, :n] = b[:, 1:]
    bs[:, 0, :, 0] = bf.reshape(S, nb, B, K).transpose(2, 3, 0, 1).reshape(B, K, Nb)
    if full:
        bw = np.ones((S, npad, K))
        bw[:, npad - n:] = b[:, 1:]
    else:
        p = np.arange(npad)
        tb = np.clip(L[:, None] - npad + p[None, :], 0, T)             # (S, npad)
        tb = np.where(tb >= 1, tb, T)
        bw = np.concatenate([b, np.ones((S, 1, K))], axis=1)[np.arange(S)[:, None], tb]
    bs[:, 1, :, 0] = bw.reshape(S, nb, B, K)[:, :, ::-1].transpose(2, 3, 0, 1).reshape(B, K, Nb)
    return bs


def _scan_boundaries(X, lx, Y, ly, a0):
    """Step 2 of :func:`_forward_backward_scan`: from the blocks' products (X, lx, Y, ly of
    :func:`_block_products`) and alpha_0 = a0 (K, S), alpha at every forward block's
    start (K, S, nb) with its log scale (S, nb), beta at the end of every backward block
    (K, S, nb), the sums that must not underflow, and the smallest divisor."""
    (K, S), nb = a0.shape, X.shape[-1] // a0.shape[1]
    G = np.empty((2, K, K, S, nb))
    G[0] = X[-1].reshape(K, K, S, nb)
    G[1] = Y[0].reshape(K, K, S, nb)[..., ::-1]
    lg = np.stack([lx[-1].reshape(S, nb), ly[0].reshape(S, nb)[:, ::-1]])
    G, lg, low = _doubling(G, lg)
    sa0 = a0.sum(0)
    a0 = a0 / sa0
    va = np.einsum("ijsn,js->isn", G[0], a0)                          # alpha at (j+1) B
    vr = G[1].sum(1)[..., ::-1]                                       # beta at the
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


def _scan_vectors(X, Y, a, r, L, T, full):
    """Step 3 of :func:`_forward_backward_scan`: alpha and beta (S, T, K) at every step, the
    blocks' products applied to their boundaries' vectors (a, r of :func:`_scan_boundaries`)."""
    B, K, _, Nb = X.shape
    _, S, nb = a.shape
    n, npad = T - 1, B * nb
    av = np.einsum("bkln,ln->bkn", X, a.reshape(K, Nb))               # (B, K, Nb)
    bv = np.einsum("bkln,ln->bkn", Y, r.reshape(K, Nb))
    alpha = np.empty((S, T, K))
    alpha[:, 0] = a[:, :, 0].T
    alpha[:, 1:] = av.reshape(B, K, S, nb).transpose(2, 3, 0, 1).reshape(S, npad, K)[:, :n]
    bflat = np.empty((S, npad + 1, K))
    bflat[:, :npad] = bv.reshape(B, K, S, nb).transpose(2, 3, 0, 1).reshape(S, npad, K)
    bflat[:, npad] = 1.0 / K
    if full:
        beta = bflat[:, npad - n:]
    else:   # beta at step tau < L - 1 is bflat[tau - L + 1 + npad]; 1 from L - 1 on
        idx = np.clip(np.arange(T)[None, :] - L[:, None] + 1 + npad, 0, npad)
        beta = bflat[np.arange(S)[:, None], idx]
    return alpha, beta


def _scan_stats(alpha, beta, b, c, At, m, L, la, lx, full):
    """The marginals, the expected counts and log Z of :func:`_forward_backward_scan` from
    alpha and beta at every step (and the marginals' sums, which must not underflow)."""
    S, T, K = alpha.shape
    B, nb = lx.shape[0], la.shape[1]
    tt = np.arange(T)
    ones = np.ones(K)
    # log Z: the scale of alpha at step L - 1 = 1 + j B + k (or 0)
    si = np.arange(S)
    last = np.clip(L - 1, 0, T - 1)
    j, k = np.divmod(np.maximum(last - 1, 0), B)
    lz = np.where(last == 0, la[:, 0], la[si, j] + lx[k, si * nb + j])
    csum = c.sum(1) if full else np.where(tt[None, :] < L[:, None], c, 0.0).sum(1)
    asum = alpha[si, last] @ ones
    log_z = lz + np.log(asum) + csum + np.maximum(L - 1, 0) * m
    log_z = np.where(L > 0, log_z, 0.0)
    ab = alpha * beta
    gsum = ab @ ones
    gamma = np.divide(ab, gsum[..., None], out=ab)
    # counts: xi_t = alpha_{t-1} (At o (b_t beta_t)^T) / its sum, t = 1..L-1 (the
    # same for any scale of alpha_{t-1} and of beta_t)
    g = b[:, 1:] * beta[:, 1:]                                        # (S, n, K)
    an = alpha[:, :-1] * np.matmul(g, np.swapaxes(At, -1, -2))
    w = 1.0 / (an @ ones)
    if not full:
        w[~(tt[None, 1:] < L[:, None])] = 0.0
    np.multiply(alpha[:, :-1], w[..., None], out=an)
    counts = np.matmul(np.swapaxes(an, 1, 2), g) * At
    return gamma, counts, log_z, gsum


def _block_products(bs, At, shared, S, nb, work=None):
    """Step 1 of :func:`_forward_backward_scan`: ``bs`` (B, 2, K, 1, Nb) the b of the
    forward and the backward steps. Both directions are a product with b then one with a
    fixed matrix: forward X_k = diag(b_k) At^T X_{k-1} is the product with At^T after the
    one with b (the state kept between steps is At^T X_{k-1}, starting from At^T),
    backward Y_k = At diag(b_k) Y_{k+1} (starting from the identity). Returns X (B, K, K,
    Nb), its log scale lx (B, Nb), Y (B, K, K, Nb) in the order of k and ly (B, Nb) (the
    products are X exp(lx), Y exp(ly)), and the log of the smallest divisor. Every RENORM
    steps each block's two matrices are divided by their sums (the sums grow by at most a
    factor K per step in between)."""
    B, _, K, _, Nb = bs.shape
    Tm = _buffer(work, "scan_t", (B, 2, K, K, Nb))    # b o state: the forward X_k
    Om = _buffer(work, "scan_o", (B, 2, K, K, Nb))    # after the matrix: the backward Y
    ls = np.zeros((B, 2, Nb))           # logs of the divisors applied after step k
    if shared:
        W = np.stack([At[0].T, At[0]])                                    # (2, K, K)
        Z = np.empty((2, K, K, Nb))
        Z[0] = At[0].T[:, :, None]
        Z[1] = np.eye(K)[:, :, None]
    else:
        Aw = np.moveaxis(At, 0, -1)                                       # (K, K, S)
        W = np.repeat(np.stack([Aw.transpose(1, 0, 2), Aw]), nb, axis=-1)  # (2, K, K, Nb)
        Z = np.empty((2, K, K, Nb))
        Z[0] = W[0]
        Z[1] = np.eye(K)[:, :, None]
    mul, div, matmul = np.multiply, np.divide, np.matmul
    for k in range(B):
        t, o = Tm[k], Om[k]
        mul(bs[k], Z, out=t)
        if shared:
            matmul(W, t.reshape(2, K, K * Nb), out=o.reshape(2, K, K * Nb))
        else:
            np.einsum("dijn,djln->diln", W, t, out=o)
        if (k + 1) % RENORM == 0 or k == B - 1:
            s = o.reshape(2, K * K, Nb).sum(1)
            div(o, s[:, None, None, :], out=o)
            np.log(s, out=ls[k])
        Z = o
    lc = np.cumsum(ls, axis=0)
    lx = np.zeros((B, Nb))
    lx[1:] = lc[:-1, 0]
    low = np.min(ls[RENORM - 1::RENORM]) if B >= RENORM else np.inf    # the smallest divisor
    return Tm[:, 0], lx, Om[::-1, 1], lc[::-1, 1], min(low, np.min(ls[B - 1]))


def _doubling(G, lg):
    """Prefix products P_j = G_j G_{j-1} ... G_0 along the last axis of the (2, K, K, S,
    n) matrices G (log scales lg (2, S, n): the products are G exp(lg)), by recursive
    doubling (Hillis and Steele 1986): log2(n) rounds, each one product of every pair
    (j, j - d), divided by its sum. Returns (P, lp, the smallest of those sums)."""
    n = G.shape[-1]
    d = 1
    low = np.inf
    while d < n:
        H, lh = G.copy(), lg.copy()
        w = np.einsum("dij...,djl...->dil...", G[..., d:], G[..., :-d], out=H[..., d:])
        s = w.sum(axis=(1, 2))
        np.divide(w, s[:, None, None], out=w)
        lh[..., d:] += lg[..., :-d] + np.log(s)
        low = min(low, s.min())
        G, lg = H, lh
        d *= 2
    return G, lg, low
