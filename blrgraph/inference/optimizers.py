"""The deep-learning rows of the BLR table (docs/blr.md): Adam, OGN, VOGN and IVON as
settings of the one step, each a diagonal-Gaussian BLR step with its own estimate of the
natural gradient (Khan & Rue 2023, §4; Shen et al. 2024).

A Method whose ``update`` is one of :data:`OPTIMIZERS` steps the Normal /
MultivariateNormal nodes fed by non-conjugate factors through an :class:`Optimizer`
bound to the run (:func:`bind`): it holds the state that outlives one step (moments,
curvature, momentum) and computes the gradients of log p(D, theta) itself, at the mean
(delta method: adam, ogn) or at draws of q (vogn, ivon):

* the prior's gradient from lam0 = (eta1, eta2): eta1 + 2 eta2 theta;
* each Potential child's gradient by one reverse pass over the draws (its other
  parents at their means), scaled by N/|B| on a minibatch; OGN/VOGN also need the
  per-row gradients (Gauss-Newton curvature): one reverse pass of the Potential's
  ``per_row`` function when given, else the diagonal of the (rows x rows) evaluation;
* any other non-conjugate child (``Bernoulli(logits=Dot)``, ...) through its
  delta-method message at the mean (adam only).

The q of a stepped node stays diagonal: a Normal node with plates, or a
MultivariateNormal node whose precision is kept diagonal; no D x D matrix is formed
for a Normal node. Every step refuses non-finite gradients, naming the node, the
iteration and the fix.
"""
from __future__ import annotations

import numpy as np

#: the update kinds served here (``Method.update``)
OPTIMIZERS = ("adam", "ogn", "vogn", "ivon", "mog")

#: defaults of the hyper-parameters (``fit(..., beta1=, beta2=, eps=, hess_init=, ess=,
#: mc_samples=, components=)``), per optimizer; ess=None means N, the number of data rows.
#: adam: Kingma & Ba (2015), Algorithm 1. ivon: the authors' package
#: (team-approx-bayes/ivon, ``ivon/_ivon.py``: beta1 0.9, beta2 0.99999, hess_init 1.0,
#: mc_samples 1) and Shen et al. (2024), Algorithm 1 (ess = N). ogn/vogn: the BLR step
#: of Khan & Rue (2023), eq. (4.4)--(4.6) (beta2 = None: the curvature moves with rho, the
#: plain BLR; beta1 = 0: no momentum), one draw per step (Osawa et al. 2019 use one).
#: mog: two components, 64 fixed draws per component (:mod:`.mixture_q`).
DEFAULTS = {
    "adam": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
    "ogn": {"beta1": 0.0, "beta2": None, "ess": None},
    "vogn": {"beta1": 0.0, "beta2": None, "ess": None, "mc_samples": 1},
    "ivon": {"beta1": 0.9, "beta2": 0.99999, "hess_init": 1.0, "ess": None, "mc_samples": 1},
    "mog": {"components": 2, "mc_samples": 64},
}
#: every hyper-parameter name (fit options)
HYPER = ("beta1", "beta2", "eps", "hess_init", "ess", "mc_samples", "components")


def check_hyper(method_name, update, given):
    """The hyper-parameters of ``update`` with the given ones; a misplaced or out-of-range
    one raises ValueError naming the option."""
    if update not in OPTIMIZERS:
        bad = sorted(k for k, v in given.items() if v is not None)
        if bad:
            raise TypeError(f"fit({method_name!r}): {bad} are options of the optimizer methods "
                            f"{list(OPTIMIZERS)}")
        return {}
    out = dict(DEFAULTS[update])
    for k, v in given.items():
        if v is None:
            continue
        if k not in out:
            raise TypeError(f"fit({method_name!r}) has no option {k}; its options are "
                            f"{sorted(out)}")
        if k in ("mc_samples", "components"):
            low = 2 if (k, update) == ("mc_samples", "mog") else 1
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"fit({method_name!r}): {k} must be an integer >= {low}, "
                                 f"got {v!r}")
            out[k] = int(v)
            continue
        ok = isinstance(v, (int, float, np.number)) and not isinstance(v, bool) and np.isfinite(v)
        if k == "beta1":
            ok = ok and 0.0 <= v < 1.0
            want = "in [0, 1)"
        elif k == "beta2":   # a curvature that is all new each step is the plain BLR for ogn/vogn
            top_ok = v < 1.0 if update in ("adam", "ivon") else v <= 1.0
            ok = ok and 0.0 < v and top_ok
            want = "in (0, 1)" if update in ("adam", "ivon") else "in (0, 1]"
        else:
            ok = ok and v > 0.0
            want = "> 0"
        if not ok:
            raise ValueError(f"fit({method_name!r}): {k} must be a finite number {want}, got {v!r}")
        out[k] = float(v)
    return out


def bind(updates, method, plan, rng, classes):
    """Replace the optimizer update names of ``updates`` ({node: kind}) by stateful
    :class:`Optimizer` objects for one run (the loop's one hook); ``classes`` maps each
    name of :data:`OPTIMIZERS` to its class (fit.py's ``OPTIMIZER_CLASSES``: the mixture
    q of :mod:`.mixture_q` builds on :class:`Optimizer`, so this module cannot import it)."""
    if method.update not in OPTIMIZERS:
        return updates
    hyper = dict(method.hyper)
    N = getattr(plan.rows, "N", None) or plan.structure.N
    seq = getattr(rng.bit_generator, "seed_seq", None) or rng.bit_generator._seed_seq
    draws = np.random.default_rng(seq.spawn(1)[0])   # the minibatch stream is left as it is
    cls = classes[method.update]
    return {n: (cls(method, n, hyper, N, draws) if kind == method.update else kind)
            for n, kind in updates.items()}


# ---- gradients ---------------------------------------------------------------------------
class _Node:
    """A stepped node's vector view: mean and diagonal precision as flat vectors."""

    def __init__(self, node):
        self.node = node
        e1, e2 = node.nat
        self.mvn = np.ndim(e2) > np.ndim(e1)
        self.shape = np.shape(e1)
        self._prior = None    # (the parents' moments it was computed from, the result)

    def mean_prec(self):
        e1, e2 = (np.asarray(a, dtype=float) for a in self.node.nat)
        if self.mvn:
            P = -2.0 * e2
            m = np.linalg.solve(P, e1[..., None])[..., 0]
            return m, np.array(np.diagonal(P, axis1=-2, axis2=-1))
        P = -2.0 * (e2 if e2.shape == e1.shape else np.broadcast_to(e2, e1.shape))  # a new array
        return e1 / P, P

    def set(self, m, prec):
        """q = N(m, diag(1/prec)) (the MVN's precision a diagonal matrix)."""
        if self.mvn:
            P = prec[..., :, None] * np.eye(prec.shape[-1])
            self.node.set_natural((prec * m, -0.5 * P))
        else:
            self.node.set_natural((prec * m, -0.5 * prec))

    def prior(self):
        """(gradient function of log prior, its diagonal precision, log prior density per
        draw), computed again only when a parent's moments are new objects (a latent
        parent moved)."""
        moms = [p.moments() for p in self.node.parents]
        if self._prior is None or not all(a is b for a, b in zip(self._prior[0], moms)):
            self._prior = (moms, self._make_prior())
        return self._prior[1]

    def _make_prior(self):
        e1, e2 = (np.asarray(a, dtype=float) for a in self.node.prior_natural())
        n = len(self.shape)          # the draws' axes precede the value's
        with np.errstate(all="ignore"):   # an improper or singular prior: no log density
            return self._prior_parts(e1, e2, n)

    def _prior_parts(self, e1, e2, n):
        if self.mvn:
            e1 = np.broadcast_to(e1, self.shape)
            e2 = np.broadcast_to(e2, self.shape + self.shape[-1:])
            # log N(th | mu, L^-1) = e1.th + th' e2 th - 1/2 e1' L^-1 e1 + 1/2 log|L| - D/2 log 2 pi
            L = -2.0 * e2
            try:
                const = float(np.sum(0.5 * np.linalg.slogdet(L)[1] - 0.5 * np.einsum(
                    "...i,...i->...", e1, np.linalg.solve(L, e1[..., None])[..., 0]))
                    - 0.5 * np.prod(self.shape) * np.log(2.0 * np.pi))
            except np.linalg.LinAlgError:
                const = np.nan
            axes = tuple(range(-n, 0))
            return (lambda th: e1 + 2.0 * np.einsum("...ij,...j->...i", e2, th),
                    -2.0 * np.array(np.diagonal(e2, axis1=-2, axis2=-1)),
                    _finite(const, lambda th: np.sum(
                        th * (e1 + np.einsum("...ij,...j->...i", e2, th)), axis=axes) + const))
        e1 = np.broadcast_to(e1, self.shape)
        e2 = np.broadcast_to(e2, self.shape)
        # log N(th | mu, 1/L) = e1 th + e2 th^2 + e1^2 / (4 e2) + 1/2 log L - 1/2 log 2 pi
        const = float(np.sum(e1 * e1 / (4.0 * e2) + 0.5 * np.log(-2.0 * e2))
                      - 0.5 * e1.size * np.log(2.0 * np.pi))
        axes = tuple(range(-n, 0))
        e2x2 = 2.0 * e2
        if not e1.any():      # a prior mean of 0 (the usual weight prior): no e1 terms
            return ((lambda th: e2x2 * th), -e2x2,
                    _finite(const, lambda th: np.sum(th * (e2 * th), axis=axes) + const))
        return ((lambda th: e1 + e2x2 * th), -e2x2,
                _finite(const, lambda th: np.sum(th * (e1 + e2 * th), axis=axes) + const))


def _potential_call(factor, k, x):
    """(xs, data, weights): the Potential's arguments with parent k at the draws x
    (S,) + shape and its other parents at their means."""
    data, w = factor.rows()
    S = x.shape[0]
    xs = []
    for j, p in enumerate(factor.parents):
        if j == k:
            xs.append(x)
        else:
            m = np.asarray(p.moments()[0], dtype=float)
            shp = (tuple(p.plates) + m.shape[-1:]) if p.provides.event_ndims[0] else tuple(p.plates)
            xs.append(np.broadcast_to(m, (S,) + shp))
    return xs, data, w


def _finite(const, logpdf):
    """The log prior density function, or None when its constant is not finite."""
    return logpdf if np.isfinite(const) else None


def potential_grad(factor, k, x):
    """(values (S,), gradients (S,) + shape): the weighted sum over the rows of logp and
    its gradient in parent k at each draw of x, by one reverse pass."""
    import autograd.numpy as anp
    from autograd import make_vjp
    xs, data, w = _potential_call(factor, k, x)
    if factor.node.value_and_grad is not None:   # the user's gradient: no trace of logp
        return _user_grad(factor, k, xs, data, w)
    if x.shape[0] == 1 and factor._batched(xs, data):   # one draw: logp on the value itself
        def single(xk):
            full = [a[0] for a in xs]
            full[k] = xk
            return factor._totals(full, data, w, anp)
        vjp, v = make_vjp(single)(x[0])
        return np.atleast_1d(np.asarray(v, dtype=float)), np.asarray(vjp(1.0), dtype=float)[None]
    if factor._batched(xs, data):
        def total(xk):
            full = list(xs)
            full[k] = xk
            return factor._totals(full, data, w, anp)
        vjp, v = make_vjp(total)(x)
        return np.atleast_1d(np.asarray(v, dtype=float)), np.asarray(vjp(np.ones_like(v)), dtype=float)
    vals, grads = [], []
    for s in range(x.shape[0]):
        def one(xk, s=s):
            full = [a[s] for a in xs]
            full[k] = xk
            return factor._totals(full, data, w, anp)
        vjp, v = make_vjp(one)(x[s])
        vals.append(float(v))
        grads.append(np.asarray(vjp(1.0), dtype=float))
    return np.array(vals), np.stack(grads)


def _user_grad(factor, k, xs, data, w):
    """:func:`potential_grad` from ``Potential(value_and_grad=f)``: one call on the
    value itself (one draw) or on all draws (when logp takes a leading axis of them),
    else one call per draw."""
    S = xs[k].shape[0]
    if S == 1:
        v, g = factor.user_value_and_grad([a[0] for a in xs], data, w)
        return np.reshape(v, (1,)), g[k][None]
    if not factor._batched(xs, data):
        vals, grads = [], []
        for s in range(S):
            v, g = factor.user_value_and_grad([a[s] for a in xs], data, w)
            vals.append(float(v))
            grads.append(g[k])
        return np.array(vals), np.stack(grads)
    v, g = factor.user_value_and_grad(xs, data, w)
    return np.atleast_1d(v), g[k]


#: at most this many rows at a time in the (rows x rows) per-row evaluation
ROW_BLOCK = 256


def potential_row_sq(factor, k, x):
    """Per draw, the sum over the rows of the squared per-row gradients in parent k
    (the Gauss-Newton / empirical-Fisher diagonal), (S,) + shape: one reverse pass of
    ``Potential(per_row=...)`` over a per-row copy of the parameters, else the diagonal
    of logp evaluated with a batch of row-many copies (blocks of ROW_BLOCK rows)."""
    import autograd.numpy as anp
    from autograd import grad
    xs, data, w = _potential_call(factor, k, x)
    per_row = getattr(factor.node, "per_row", None)
    if not data:
        raise ValueError(f"{factor.node.label()}: Gauss-Newton curvature needs per-row "
                         f"log-factors; give the Potential data=(...)")
    N = len(data[0])
    if per_row is None and not factor._batched(xs, data):
        raise ValueError(f"{factor.node.label()}: fit('vogn'/'ogn') needs per-row gradients: "
                         f"write logp to accept a leading axis of draws (``...``, axis=-1) or "
                         f"give Potential(..., per_row=f) (docs/blr.md)")
    out = np.zeros(x.shape)
    for s in range(x.shape[0]):
        for a in range(0, N, N if per_row is not None else ROW_BLOCK):
            rows = slice(a, min(a + (N if per_row is not None else ROW_BLOCK), N))
            B = rows.stop - rows.start
            d = tuple(arr[rows] for arr in data)
            rep = [np.broadcast_to(xj[s], (B,) + xj.shape[1:]) for xj in xs]
            if per_row is not None:
                def f(xk):
                    full = list(rep)
                    full[k] = xk
                    return anp.sum(per_row(*full, *d))
            else:
                eye = np.eye(B)

                def f(xk):
                    full = list(rep)
                    full[k] = xk
                    return anp.sum(factor._call(full, d) * eye)
            G = np.asarray(grad(f)(np.array(rep[k])), dtype=float)   # (B,) + shape
            G2 = G * G
            if w is not None:
                G2 = G2 * w[rows].reshape((B,) + (1,) * (G2.ndim - 1))
            out[s] += G2.sum(0)
    return out


def _add(total, s, a):
    """total + s a, with None for a total of 0 so far (and no product for s = 1)."""
    a = a if s == 1.0 else s * a
    return a if total is None else total + a


def _entropy(prec):
    """H[N(m, diag(1/prec))], summed."""
    return float(0.5 * np.sum(np.log(2.0 * np.pi * np.e / prec)))


def own_objective(model, updates):
    """What a run of the optimizers reports each step without another pass over the rows
    (the loop's objective): for a model whose latent nodes are all stepped by an
    optimizer that reports :attr:`Optimizer.objective` and whose observed nodes are all
    Potentials of one of them, a function returning the sum of the optimizers'
    objectives: log p(D, theta) on the step's rows (scaled by N/|B|) at the draws the
    gradients were computed at, from the values of that forward pass (the delta
    method: at the mean; vogn, ivon: + H[q], a one-draw estimate of the ELBO of the q
    before the step), or None when a step has none (an improper prior). None
    otherwise: the loop evaluates the view's ELBO."""
    from ..graph.potential import Potential
    opts = [u for u in updates.values() if isinstance(u, Optimizer)]
    if not opts or not all(u.reports_objective for u in opts):
        return None
    stepped = {u.node for u in opts}
    if any(n not in stepped for n in model.latent):
        return None
    if any(not isinstance(n, Potential) or len(n.parents) != 1 or n.parents[0] not in stepped
           for n in model.observed):
        return None

    def objective():
        parts = [u.objective for u in opts]
        return None if any(v is None for v in parts) else sum(parts)
    return objective


def refused(err, updates, iteration, name):
    """The error a run of an optimizer method stops with when a step (or the objective
    after it) is not finite: every stepped node back at its q before that step, and the
    message naming the nodes, the iteration and the fix."""
    opts = [u for u in updates.values() if isinstance(u, Optimizer)]
    for u in opts:
        if u.saved is not None:
            u.node.set_natural(u.saved)
    text = str(err)
    if text.startswith(f"fit({name!r})"):
        return FloatingPointError(text)
    nodes = ", ".join(u.node.label() for u in opts)
    return FloatingPointError(f"fit({name!r}): the step of {nodes} at iteration {iteration} was "
                              f"refused: {text}; lower rho (the learning rate), or standardise "
                              f"the inputs")


class Optimizer:
    """A stepped node's state for one run; ``step`` is the hook of ``blr_step``."""

    saved = None
    #: its step refuses a q whose mean or precision is not finite (or the precision not
    #: positive), so the loop does not check the point mass's moments again each step
    checks_q = True
    #: the step's objective (:func:`own_objective`): log p(D, theta) at the step's draws
    #: from the forward pass that computed its gradients (+ H[q] for vogn/ivon); None
    #: when a child is not a Potential (or for a class that does not report one)
    objective = None
    reports_objective = False

    #: gradients at draws of q (False: at the mean, the delta method)
    sampled = False
    #: needs per-row gradients (Gauss-Newton curvature)
    per_row = False

    def __init__(self, method, node, hyper, N, rng):
        self.name, self.node, self.N, self.rng = method.name, node, N, rng
        self.hyper = {**DEFAULTS[method.update], **hyper}
        self.view = _Node(node)
        self.t = 0
        self.state = None

    def gradients(self, model, theta, scale, iteration, prior=True):
        """(G (S,) + shape, GN (S,) + shape or None): gradient of log p(D, theta) (the
        likelihood scaled; without the prior's term when ``prior`` is False) at each
        draw, and the scaled sum of squared per-row gradients. Sets :attr:`objective`
        to log p(D, theta) averaged over the draws: the values of the forward pass that
        computed the gradients and the log prior (no other pass over the rows)."""
        node = self.node
        G = self.prior[0](theta) if prior else None      # None: 0 so far
        GN = None
        values = None                  # the likelihood per draw (None: 0 so far)
        potentials_only = True
        from ..graph.potential import Potential
        from .blr import message_from
        for c in model.children[node]:
            s = 1.0 if scale is None else scale(c)
            if isinstance(c, Potential):
                k = c.factor.parents.index(node)
                with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                    v, g = potential_grad(c.factor, k, theta)
                    if self.per_row:
                        GN = _add(GN, s, potential_row_sq(c.factor, k, theta))
                G = _add(G, s, g)
                values = _add(values, s, v)
                continue
            potentials_only = False
            if self.sampled or self.per_row:
                raise ValueError(f"fit({self.name!r}) needs the gradients of {c.label()} at draws "
                                 f"of q or per data row; write the likelihood as a "
                                 f"bg.Potential(logp, {node.name}, data=(...)) or use "
                                 f"fit('adam') / fit('ncvmp')")
            else:   # any other child at the point: its delta-method message (g - H m, H/2)
                msg = message_from(model, c, node)
                if msg is None:
                    continue
                m = theta[0]
                if self.view.mvn:
                    g = msg[0] + 2.0 * np.einsum("...ij,...j->...i", msg[1], m)
                else:
                    g = msg[0] + 2.0 * msg[1] * m
                G = _add(G, s, np.asarray(g)[None])
        if G is None:
            G = np.zeros_like(theta)
        self._check(G, iteration, "gradient")
        if self.per_row:
            GN = np.zeros_like(theta) if GN is None else GN
            self._check(GN, iteration, "Gauss-Newton curvature")
        self.objective = None
        if potentials_only and self.reports_objective and self.prior[2] is not None:
            with np.errstate(over="ignore", invalid="ignore"):
                values = self.prior[2](theta) if values is None else values + self.prior[2](theta)
            self._check(values, iteration, "value")
            self.objective = float(values[0] if values.size == 1 else np.mean(values))
        return G, GN

    def _check(self, a, iteration, what):
        if not np.isfinite(a).all():
            at = f" at iteration {iteration}" if iteration is not None else ""
            raise FloatingPointError(
                f"fit({self.name!r}): the {what} of log p for {self.node.label()} is not "
                f"finite{at} (the loss overflowed); the step is refused: lower rho (the "
                f"learning rate), or standardise the inputs")

    def step(self, model, node, rho, iteration, scale):
        self.saved = node.nat      # restored if the run stops on this step (:func:`refused`)
        self.t += 1
        self.prior = self.view.prior()   # (gradient, diagonal precision, log density): once a step
        m, prec = self.view.mean_prec()
        new_m, new_prec = self.update(model, m, prec, rho, iteration, scale)
        self._check(new_m, iteration, "step")
        if not ((new_prec > 0.0).all() and np.isfinite(new_prec).all()):
            raise FloatingPointError(
                f"fit({self.name!r}): the step of {node.label()} at iteration {iteration} gives "
                f"q a precision that is not positive and finite; the step is refused: lower "
                f"rho (the learning rate), or standardise the inputs")
        self.view.set(new_m, new_prec)
        return node.nat


class Adam(Optimizer):
    """The BLR's RMSprop/Adam (Khan & Rue §4.2): the delta method on a diagonal Gaussian,
    the curvature replaced by the squared gradient, square-root scaling and momentum:
    with the loss l(w) = -log p(D, w) (the likelihood scaled by N/|B|), g = grad l(m),
    u <- b1 u + (1 - b1) g, v <- b2 v + (1 - b2) g^2, m <- m - rho uhat / (sqrt(vhat) + eps)
    (uhat, vhat bias-corrected). q's precision stays the prior's (reported as the point m)."""

    reports_objective = True

    def update(self, model, m, prec, rho, iteration, scale):
        h = self.hyper
        g = -self.gradients(model, m[None], scale, iteration)[0][0]
        if self.state is None:
            self.state = (np.zeros_like(m), np.zeros_like(m))
        u, v = self.state
        u = h["beta1"] * u + (1.0 - h["beta1"]) * g
        v = h["beta2"] * v + (1.0 - h["beta2"]) * g * g
        self.state = (u, v)
        uhat = u / (1.0 - h["beta1"] ** self.t)
        vhat = v / (1.0 - h["beta2"] ** self.t)
        return m - rho * uhat / (np.sqrt(vhat) + h["eps"]), prec


class GaussNewton(Optimizer):
    """OGN (at the mean) and VOGN (at draws of q): the BLR step of a diagonal Gaussian
    with the Gauss-Newton curvature, the squared per-row gradients summed (scaled by
    N/|B|): with precision S = lam0's diagonal precision P0 + ess/N * s_lik,

        s_lik <- (1 - b2) s_lik + b2 GN(theta),    S = P0 + (ess / N) s_lik
        u <- b1 u + (1 - b1) G                    (G = grad log-lik(theta) + grad log prior(m))
        m <- m + rho uhat / S

    b2 = rho by default (the plain BLR step: S <- (1 - rho) S + rho (P0 + GN));
    theta = m (ogn) or m + S^-1/2 eps (vogn; ``mc_samples`` draws averaged); ess = N
    (the data size) by default."""

    per_row = True
    reports_objective = True

    def __init__(self, method, node, hyper, N, rng):
        super().__init__(method, node, hyper, N, rng)
        self.sampled = method.update == "vogn"

    def update(self, model, m, prec, rho, iteration, scale):
        h = self.hyper
        grad_prior, P0 = self.prior[:2]
        P0 = np.broadcast_to(P0, m.shape)
        ess = h.get("ess") or self.N
        b1 = h["beta1"]
        b2 = rho if h["beta2"] is None else h["beta2"]
        if self.state is None:
            self.state = {"s": np.maximum(prec - P0, 0.0) * self.N / ess, "u": np.zeros_like(m)}
        st = self.state
        S = P0 + (ess / self.N) * st["s"]
        if self.sampled:
            eps = self.rng.standard_normal((h["mc_samples"],) + m.shape)
            theta = m + eps / np.sqrt(S)
        else:
            theta = m[None]
        G, GN = self.gradients(model, theta, scale, iteration, prior=False)
        if self.sampled and self.objective is not None:   # + H[q]: an estimate of the ELBO
            self.objective += _entropy(S)
        G = G.mean(0) + grad_prior(m)       # the prior's exact expectation: its gradient at m
        GN = GN.mean(0)
        st["s"] = (1.0 - b2) * st["s"] + b2 * GN
        st["u"] = b1 * st["u"] + (1.0 - b1) * G
        S = P0 + (ess / self.N) * st["s"]
        uhat = st["u"] / (1.0 - b1 ** self.t) if b1 > 0 else st["u"]
        return m + rho * uhat / S, S


class IVON(Optimizer):
    """IVON (Shen et al. 2024, Algorithm 1; the authors' ``ivon`` package): with the
    mean loss per row l(theta) = -log-lik(theta) / N (minibatch estimate), the weight
    decay delta = P0 / ess (P0: the prior's diagonal precision), sigma = 1/sqrt(ess (h + delta)):

        theta = m + sigma eps,  ghat = grad l(theta),  hhat = ghat * eps / sigma (Price)
        g <- b1 g + (1 - b1) ghat
        h <- b2 h + (1 - b2) hhat + (1 - b2)^2 / 2 (h - hhat)^2 / (h + delta)
        m <- m - rho (h0 + delta) (g / (1 - b1^t) + delta (m - m0)) / (h + delta)

    and q = N(m, 1/(ess (h + delta))). The prior term delta (m - m0) is minus the
    prior's gradient over ess (the package's ``weight_decay * m`` for m0 = 0)."""

    sampled = True
    reports_objective = True

    def update(self, model, m, prec, rho, iteration, scale):
        hy = self.hyper
        grad_prior, P0 = self.prior[:2]
        ess = hy.get("ess") or self.N
        b1, b2, h0 = hy["beta1"], hy["beta2"], hy["hess_init"]
        if self.state is None or self.state["P0"] is not P0:   # the start, or the prior moved
            delta = np.broadcast_to(P0, m.shape) / ess
            if self.state is None:
                self.state = {"h": np.full(m.shape, h0), "g": np.zeros_like(m)}
            hd = self.state["h"] + delta
            self.state.update(P0=P0, delta=delta, h0d=h0 + delta, hd=hd, prec=ess * hd)
        st = self.state
        delta, hd = st["delta"], st["hd"]              # h + delta
        sigma = 1.0 / np.sqrt(st["prec"])              # q's precision ess (h + delta)
        eps = self.rng.standard_normal((hy["mc_samples"],) + m.shape)
        theta = m + sigma * eps
        G = self.gradients(model, theta, scale, iteration, prior=False)[0]
        if self.objective is not None:     # + H[q]: an estimate of the ELBO
            self.objective += _entropy(st["prec"])
        ghat = G / -self.N                             # the likelihood's mean loss gradient
        if ghat.shape[0] == 1:
            gbar, hhat = ghat[0], ghat[0] * eps[0] / sigma
        else:
            gbar, hhat = ghat.mean(0), (ghat * eps).mean(0) / sigma
        st["g"] = b1 * st["g"] + (1.0 - b1) * gbar
        hh = st["h"]
        st["h"] = b2 * hh + (1.0 - b2) * hhat + 0.5 * (1.0 - b2) ** 2 * (hh - hhat) ** 2 / hd
        self._check(st["h"], iteration, "Hessian estimate")
        st["hd"] = hd = st["h"] + delta
        st["prec"] = ess * hd
        decay = grad_prior(m) / -ess
        step = (st["g"] / (1.0 - b1 ** self.t) + decay) / hd
        return m - rho * st["h0d"] * step, st["prec"]
