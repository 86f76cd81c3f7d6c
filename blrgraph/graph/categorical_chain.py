"""CategoricalMarkovChain: one node for a whole hidden state sequence (docs/hmm.md).

    z_0 ~ Categorical(pi),   z_t | z_{t-1} = i ~ Categorical(A[i]),   t = 1..T-1

The node's q is the exact chain posterior given its messages (not one factor per
step): q(z) proportional to exp(<E log pi, z_0> + sum_t z_{t-1}^T E[log A] z_t +
sum_t <m_t, z_t>), with m_t the messages of its children (a Mixture's emission
log-likelihoods). Its natural parameters ``nat`` are the unary log-potentials
(plates + (K,): E log pi at t = 0 plus the messages); the pairwise potential
E[log A] is read from the transition parent when q is set (:meth:`set_natural`),
so the BLR step of the engine (prior + messages, then ``set_natural``) is the
VMP update of the whole chain at once. Its moments, as a Mixture's selector sees
them, are the marginals (plates + (K,)) from scaled forward-backward
(families/categorical_chain.py); its messages to the parents are the expected
initial state and the expected transition counts; its ELBO term is
E[log p(z | pi, A)] + H[q].
"""
from __future__ import annotations

import math
import operator

import numpy as np

from ..families.categorical import Categorical as CategoricalFamily
from ..families.categorical_chain import forward_backward, sample_paths, viterbi
from ..families.dirichlet import Dirichlet as DirichletFamily
from .factors.base import Conditional, Slot
from .node import Stochastic
from .plates import broadcast_plates, reduce_to


class MarkovChainFactor(Conditional):
    """p(z | pi, A) of a categorical Markov chain; slots ``initial`` (pi, a Dirichlet
    node or a probability vector) and ``transition`` (A, rows on the last plate axis:
    a Dirichlet node with plates (..., K) or a (K, K) row-stochastic array)."""

    independent_entries = False   # the time steps are coupled (lengths: see _lengths)

    def __init__(self, node, parents, slots, length, columns):
        self.length = length
        self.columns = columns
        super().__init__(node, parents, slots)
        init, trans = self.parents
        K = np.shape(init.moments()[0])[-1]
        kt = np.shape(trans.moments()[0])[-1]
        if not trans.plates or trans.plates[-1] != kt or kt != K:
            raise ValueError(
                f"{node.label()}: the transition matrix must have one row per state, K rows of K "
                f"probabilities (a Dirichlet node with plates (..., K) or a (K, K) array), and the "
                f"initial distribution the same K; got initial with {K} states and transition "
                f"plates {trans.plates} with {kt} columns")
        self.K = K

    def plates(self):
        init, trans = self.parents
        try:
            seq = broadcast_plates(init.plates, trans.plates[:-1])
        except ValueError:
            raise ValueError(f"{self.node.label()}: the plates of initial {init.plates} and of the "
                             f"transition rows {trans.plates[:-1]} (without the row axis) do not "
                             f"broadcast") from None
        return seq + (self.length,) + ((1,) if self.columns else ())

    def prior_natural(self, u):
        """The unary log-potentials of the prior chain: E[log pi] at t = 0, 0 after."""
        node = self.node
        lp = np.asarray(u[0][0], dtype=float)
        U = np.zeros(node.seq_plates + (self.length, self.K))
        U[..., 0, :] = lp
        return (U.reshape(node.plates + (self.K,)),)

    def expected_log_partition(self, u):
        return 0.0

    def _terms(self, u):
        """E[log p(z | pi, A)] of each sequence (S',) under the node's current q."""
        st = self.node._stats()
        S = st.marginals.shape[0]
        lp = np.broadcast_to(np.asarray(u[0][0], dtype=float),
                             self.node.seq_plates + (self.K,)).reshape(S, self.K)
        la = self.node._seq_trans(np.asarray(u[1][0], dtype=float))
        first = np.einsum("sk,sk->s", lp, st.marginals[:, 0]) * (st.lengths > 0)
        return first + np.einsum("sij,sij->s", np.broadcast_to(la, st.counts.shape), st.counts)

    def expected_loglik(self, x, u):
        """Per plate entry: a sequence's E[log p(z | pi, A)] at its entry t = 0 (and 0 at
        the later steps, which it covers)."""
        node = self.node
        out = np.zeros(node.seq_plates + (self.length,))
        out[..., 0] = self._terms(u).reshape(node.seq_plates)
        return out.reshape(node.plates)

    def weighted_loglik(self, x, u, w):
        self.node._no_weights(w)
        return float(np.sum(self._terms(u)))

    def message(self, i, x, u, w, target):
        node = self.node
        node._no_weights(w)
        st = node._stats()
        if i == 0:   # E[onehot z_0] of every sequence that has a first step
            m = st.marginals[:, 0] * (st.lengths > 0)[:, None]
            return (reduce_to(m.reshape(node.seq_plates + (self.K,)), 1, target),)
        # expected transition counts: rows i are plate entries of A, columns its event axis
        return (reduce_to(st.counts.reshape(node.seq_plates + (self.K, self.K)), 1, target),)


class ChainPosterior:
    """The fitted q of a :class:`CategoricalMarkovChain`.

    ``marginals`` / ``mean``: E[onehot z_t], shape seq plates + (T, K);
    ``transition_counts``: sum_t E[onehot z_{t-1} onehot z_t^T], seq plates + (K, K);
    ``lengths``: each sequence's length (from its children's masks);
    ``log_normaliser``: log Z of each chain; ``entropy()``: H[q] of each chain;
    ``viterbi()``: the most probable state path under q (seq plates + (T,), -1 after a
    sequence's end); ``sample(size, seed)``: exact draws of whole paths from q (forward
    filtering, backward sampling), shape (size,) + the node's plates, -1 after a
    sequence's end."""

    def __init__(self, node):
        self.node = node
        self.is_point = False
        st = node._stats()
        seq, K = node.seq_plates, node.factor.K
        self.marginals = st.marginals.reshape(seq + (node.length, K))
        self.transition_counts = st.counts.reshape(seq + (K, K))
        self.lengths = st.lengths.reshape(seq)
        self.log_normaliser = st.log_z.reshape(seq)
        self._entropy = node.entropy()
        self._potentials = node._potentials()   # (U, P, lengths) of this q

    @property
    def mean(self):
        return self.marginals

    @property
    def var(self):
        return self.marginals * (1.0 - self.marginals)

    def entropy(self):
        return self._entropy

    def viterbi(self):
        U, P, L = self._potentials
        return viterbi(U, P, L).reshape(self.node.seq_plates + (self.node.length,))

    def sample(self, size=None, seed=None):
        """Whole state paths drawn from q: ints of shape (size,) + the node's plates
        (seq plates + (T,), + (1,) with ``columns=True``; no leading axis for size=None).
        Exact draws by forward filtering, backward sampling
        (families/categorical_chain.py ``sample_paths``): z_{L-1} from the filter, then
        z_{t-1} | z_t back to t = 0. The steps after a sequence's end (t >= its length,
        the masked trailing steps) belong to no chain and hold -1, as in ``viterbi()``.
        ``seed``: an int, None or a numpy Generator."""
        U, P, L = self._potentials
        lead = () if size is None else ((int(size),) if np.ndim(size) == 0 else tuple(size))
        paths = sample_paths(U, P, L, rng=seed, size=lead)
        return paths.reshape(lead + tuple(self.node.plates))

    def __repr__(self):
        return (f"<Posterior of {self.node.label()}: Markov chain, T={self.node.length}, "
                f"K={self.node.factor.K}, sequences={self.node.seq_plates}>")


class CategoricalMarkovChain(Stochastic):
    """CategoricalMarkovChain(initial, transition, length=T): a hidden state sequence
    z_0..z_{T-1} with z_0 ~ Categorical(initial) and z_t ~ Categorical(transition[z_{t-1}]).

    ``initial``: a Dirichlet node (K categories) or a probability vector;
    ``transition``: a Dirichlet node with plates (..., K) (one row per state) or a
    (K, K) row-stochastic array. ``plates=(S,)``: S independent sequences (sharing
    the parents, or with parents plated (S,) / (S, K)). The node's plates are
    (S, T) (with ``columns=True``: (S, T, 1), one state per step shared by the
    columns of a (S, T, D) table whose Mixture parameters have plates (D, K)).

    It is the selector of a Mixture: ``bg.Mixture(z, bg.Normal, mu, tau).observe(x)``
    with x of plates (S, T). Sequences of different lengths: pad them to T and mask
    the padding (``observe(x, mask=...)``); the steps after a sequence's last
    observed step (in every child) are cut from its chain. Masked steps inside a
    sequence are missing observations of a latent step."""

    @property
    def restrictable(self):
        """A view of some entries along the data axis (a minibatch, the local block's
        active rows) is a view of whole sequences: only with a sequence axis. One unplated
        sequence has its time steps on the data axis, and they are coupled."""
        return bool(self.seq_plates)


    def __init__(self, initial, transition, length, plates=None, columns=False, name=None):
        try:
            T = operator.index(length)
        except TypeError:
            T = None
        if T is None or T < 1:
            raise ValueError(f"CategoricalMarkovChain '{name}': length must be an integer >= 1 "
                             f"(the number of time steps), got {length!r}")
        self.length = T
        self.columns = bool(columns)
        full = None
        if plates is not None:
            seq = tuple(int(p) for p in np.atleast_1d(plates)) if np.ndim(plates) else (int(plates),)
            full = seq + (T,) + ((1,) if self.columns else ())
        slots = [Slot("initial", DirichletFamily(), kind="simplex"),
                 Slot("transition", DirichletFamily(), kind="simplex")]
        self._snap = None
        self._cache = None
        self._work = {}      # forward_backward's intermediate arrays, reused from sweep to sweep
        super().__init__(CategoricalFamily(), MarkovChainFactor, [initial, transition], slots,
                         plates=full, name=name, length=T, columns=self.columns)

    # ---- shapes ---------------------------------------------------------------------
    @property
    def seq_plates(self):
        return self.plates[: len(self.plates) - 1 - int(self.columns)]

    def aligned_plates(self, parent):
        """Per-sequence parents line up with the sequences: ``initial`` (S,) and the rows of
        ``transition`` (S, K) are seen as (S, 1) against the chain's (S, T) (a sequence's
        parameters are local to it)."""
        batch = tuple(parent.plates) if parent is self.factor.parents[0] \
            else tuple(parent.plates[:-1])
        return batch + (1,) * (len(self.plates) - len(batch)) if batch else batch

    def _n_seq(self):
        return math.prod(self.seq_plates)

    def _seq_trans(self, la):
        """A transition parent's E[log A] (plates (..., K) + (K,)) as (K, K) if shared by
        every sequence, else (S', K, K)."""
        K = self.factor.K
        if la.ndim == 2:
            return la
        full = np.broadcast_to(la, self.seq_plates + (K, K))
        return full.reshape(self._n_seq(), K, K)

    def _no_weights(self, w):
        if w is not None or self.replicates is not None:
            raise ValueError(f"{self.label()}: its children carry weights= (counts); a count "
                             f"would replicate single time steps of a chain. Give each sequence "
                             f"its own steps instead")

    # ---- q --------------------------------------------------------------------------
    @property
    def point(self):
        return False

    @point.setter
    def point(self, value):
        if value:
            raise ValueError(f"{self.label()} cannot be a point mass: its q is the exact chain "
                             f"posterior (forward-backward); leave it out of point=")

    def observe(self, data, mask=None, weights=None):
        raise TypeError(f"{self.label()}: a Markov chain node is latent; observe its emissions "
                        f"(the Mixture child). For known state sequences use a Categorical node "
                        f"per step")

    def set_natural(self, nat):
        """q's unary potentials ``nat``; the pairwise potential is the transition
        parent's current E[log A] (the VMP update of the chain given its parents)."""
        super().set_natural(nat)
        self._snap = np.asarray(self.factor.parents[1].moments()[0], dtype=float)
        self._cache = None

    def release(self):
        """Also drop forward-backward's work arrays (kept from sweep to sweep in a fit)."""
        super().release()
        self._work.clear()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_work"] = {}   # scratch (up to WORK_BYTES each): never pickled or shipped
        return state

    def _lengths(self):
        """(S',) lengths: one past each sequence's last step observed by some child (a
        child with no mask, or a latent child, observes every step)."""
        T, n = self.length, len(self.plates)
        seen = None
        for c in self.children:
            w = None if (c.deterministic or not c.observed) else c.message_weight(self)
            if w is None:
                return None
            obs = np.broadcast_to(np.asarray(w) != 0, c.plates)
            if obs.ndim > n:   # the child's extra leading axes: a step is seen if any entry is
                obs = np.any(obs, axis=tuple(range(obs.ndim - n)))
            off = n - obs.ndim
            axes = tuple(j - off for j in range(off, n)
                         if self.plates[j] == 1 and obs.shape[j - off] != 1)
            if axes:           # columns sharing a state (the chain's size-1 axes)
                obs = np.any(obs, axis=axes, keepdims=True)
            obs = np.broadcast_to(obs, self.plates)
            obs = obs.reshape(self._n_seq(), T)
            seen = obs if seen is None else (seen | obs)
        if seen is None:
            return None
        last = T - np.argmax(seen[:, ::-1], axis=1)
        return np.where(seen.any(axis=1), last, 0)

    def _potentials(self):
        """(U (S', T, K), P (K, K) or (S', K, K), lengths (S',) or None) of q."""
        K = self.factor.K
        if self.nat is None:
            self.set_natural(self.prior_natural())
        U = np.broadcast_to(self.nat[0], self.plates + (K,)).reshape(self._n_seq(), self.length, K)
        P = self._seq_trans(self._snap)
        if P.ndim == 3 and P.shape[0] != U.shape[0]:   # q restricted to a batch of sequences
            P = self._seq_trans(np.asarray(self.factor.parents[1].moments()[0], dtype=float))
        return U, P, self._lengths()

    def _stats(self):
        """Forward-backward of the current q (kept while nat, E[log A] and lengths stay)."""
        if self.replicates is not None:
            self._no_weights(None)
        if self.nat is None:
            self.set_natural(self.prior_natural())
        L = self._lengths()
        key = (self.nat[0], self._snap, None if L is None else L.tobytes())
        c = self._cache
        if c is not None and c[0][0] is key[0] and c[0][1] is key[1] and c[0][2] == key[2]:
            return c[1]   # (the potentials are built only when forward-backward runs)
        U, P, L = self._potentials()
        st = forward_backward(U, P, L, work=self._work)
        self._cache = (key, st)
        return st

    def moments(self):
        if self._moments is None:
            st = self._stats()
            self._moments = (st.marginals.reshape(self.plates + (self.factor.K,)),)
        return self._moments

    def entropy(self):
        """H[q] of each chain (seq plates): log Z - <U, marginals> - <P, counts>."""
        st = self._stats()
        U, P, _ = self._potentials()
        S = U.shape[0]
        Uv = U if st.valid.all() else np.where(st.valid[..., None], U, 0.0)
        unary = np.einsum("stk,stk->s", Uv, st.marginals)
        pair = np.einsum("sij,sij->s", np.broadcast_to(P, (S,) + P.shape[-2:]), st.counts)
        return (st.log_z - unary - pair).reshape(self.seq_plates)

    def elbo_term(self):
        """E[log p(z | pi, A)] + H[q], summed over sequences."""
        self._no_weights(None)
        u = [p.moments() for p in self.factor.parents]
        return self.factor.weighted_loglik(None, u, None) + float(np.sum(self.entropy()))

    @property
    def posterior(self):
        if not self.fitted:
            raise AttributeError(f"{self.label()} has no posterior yet: call Model(...).fit() first")
        return ChainPosterior(self)
