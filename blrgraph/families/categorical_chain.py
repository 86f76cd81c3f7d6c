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
time, O(T K^2) per sequence. The recursions are scaled (Rabiner 1989): each
forward vector is normalised and the log of its normaliser summed into log Z, so
nothing under- or overflows however long the chain. A sequence whose scaled
recursion still underflows (a forward vector of exact zeros: a transition
probability below 1e-300 against data that insist on it) is recomputed in log
space. ``lengths`` ends each sequence: steps t >= L_s belong to no sequence (no
term of log Z, no count) and publish the forward prediction.
"""
from __future__ import annotations

import numpy as np
from scipy.special import logsumexp


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


def forward_backward(log_unary, log_trans, lengths=None):
    """Marginals, expected transition counts and log Z of S chains.

    log_unary (S, T, K); log_trans (K, K) or (S, K, K); lengths (S,) in 0..T or
    None (all T). Returns a :class:`ChainStats`."""
    U, P, L = _check(log_unary, log_trans, lengths)
    S, T, K = U.shape
    valid = np.arange(T)[None, :] < L[:, None]                       # (S, T)
    shared = P.ndim == 2 or P.shape[0] == 1
    Pm = P.reshape(K, K) if shared else P
    m = np.max(Pm, axis=(-2, -1), keepdims=True)                     # shift of P: At <= 1
    At = np.exp(Pm - m)
    c = np.max(U, axis=-1)                                           # (S, T)
    B = np.exp(U - c[..., None])                                     # (S, T, K), max 1 per step

    alpha = np.empty((S, T, K))
    z = np.empty((S, T))
    with np.errstate(divide="ignore", invalid="ignore"):   # underflow: redone in log space
        a = B[:, 0]
        z[:, 0] = a.sum(-1)
        alpha[:, 0] = a / z[:, 0, None]
        if shared:
            for t in range(1, T):
                a = (alpha[:, t - 1] @ At) * B[:, t]
                zt = a.sum(-1)
                z[:, t] = zt
                alpha[:, t] = a / zt[:, None]
        else:
            for t in range(1, T):
                a = np.matmul(alpha[:, t - 1, None, :], At)[:, 0] * B[:, t]
                zt = a.sum(-1)
                z[:, t] = zt
                alpha[:, t] = a / zt[:, None]
    bad = ~np.all(np.isfinite(z) & (z > 0), axis=1)

    beta = np.ones((S, T, K))
    # G[:, t] = B_t beta_t / z_t for valid transitions t (t >= 1, t < L): zeroed otherwise
    G = np.zeros((S, T, K))
    with np.errstate(divide="ignore", invalid="ignore"):
        for t in range(T - 1, 0, -1):
            g = B[:, t] * beta[:, t] / z[:, t, None]
            live = valid[:, t]
            G[:, t] = np.where(live[:, None], g, 0.0)
            b = G[:, t] @ At.T if shared else np.matmul(At, G[:, t, :, None])[..., 0]
            beta[:, t - 1] = np.where(live[:, None], b, 1.0)
    with np.errstate(invalid="ignore"):
        gamma = alpha * beta
        counts = np.matmul(np.swapaxes(alpha[:, :-1], 1, 2), G[:, 1:]) * At   # (S, K, K)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(valid, np.log(np.where(valid, z, 1.0)) + c, 0.0)
    log_z = logs.sum(1) + np.maximum(L - 1, 0) * m.reshape(-1)
    if np.any(bad):
        idx = np.flatnonzero(bad)
        sub = _forward_backward_log(U[idx], P if shared else P[idx], L[idx])
        gamma[idx], counts[idx], log_z[idx] = sub.marginals, sub.counts, sub.log_z
    return ChainStats(gamma, counts, log_z, L, valid)


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
