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

# RENORM: a shared-transition forward pass divides out the running sum every RENORM steps;
# TINY: a divisor or final sum below it (or not finite) and the sequence is redone in log
# space; WORK_BYTES: forward_backward keeps an intermediate array in its ``work`` dict up
# to this size (:func:`_buffer`)
from .chain_scan import RENORM, TINY, WORK_BYTES  # noqa: F401
from .chain_scan import buffer as _buffer
from .chain_scan import forward_backward_scan


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
    S K^2 up to about SCAN_WORK and T of at least a few blocks. Its work arrays take about
    100 T S K bytes; where 32 T S K^2 bytes pass WORK_BYTES the recursions run instead
    (O(T K S) memory, arrays of a few steps at a time)."""
    return T >= 4 * SCAN_BLOCK and S * K * K <= SCAN_WORK and 32 * T * S * K * K <= WORK_BYTES


def _forward_backward_scan(U, P, L, block=None, work=None):
    """:func:`forward_backward` by the blocked scan over time of families/chain_scan.py
    (blocks of ``block`` or SCAN_BLOCK steps), as a :class:`ChainStats`; None where its
    sums leave the floating-point range (the caller then runs the recursions)."""
    out = forward_backward_scan(U, P, L, int(block) if block else SCAN_BLOCK, work)
    if out is None:
        return None
    T = U.shape[1]
    return ChainStats(*out, L, np.arange(T)[None, :] < L[:, None])
