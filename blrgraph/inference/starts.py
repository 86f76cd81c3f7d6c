"""Where a fit starts: every latent q at its prior, mixture assignments at a start
that breaks the symmetry between components (docs/scheduler.md, "Starts").

* ``"kmeans"`` (the default for mixtures over data): k-means++ seeds, then Lloyd's
  iterations to convergence, on the data the assignments explain (the first
  sufficient statistic of every observed mixture child, standardised per column;
  masked cells left out of distances and centres); one-hot responsibilities.
* ``"kmeans++"``: the k-means++ seeds only (one-hot to the nearest seed).
* ``"documents"`` (the default for per-entry mixture weights in batch fits, e.g. LDA's z
  under theta[doc]): k-means of the documents. Each group of entries (a document: the
  rows that share one row of the gathered weights) is its vector of word proportions;
  spherical k-means on their square roots (the Hellinger distance: greedy k-means++ seeds,
  Lloyd's iterations until no document changes cluster, the best of DOC_KMEANS_INITS runs
  by the k-means objective) groups the documents into K clusters, each topic's Dirichlet
  parameter becomes its prior plus the word counts of one cluster, and the assignments
  are their update from those topics with the per-document weights at their prior.
* ``"topics"`` (where ``"documents"`` does not apply): scikit-learn's LDA start. The
  components' Dirichlet parameters get random pseudo-counts Gamma(100, 1/100) (each
  about 1, +-10%), and the assignments are their update from those components with the
  per-entry weights at their prior.
* ``"diffuse"`` (the default for per-entry mixture weights under SVI and Dask, and where
  ``"topics"`` has no Dirichlet component parameter): Dirichlet(10) responsibilities,
  close to uniform.
* ``"random"``: Dirichlet(1) responsibilities (with ``restarts=R`` and no ``init=``,
  the default of a mixture over data in restarts 1, 3, 5, ...; restarts 2, 4, ... are
  screened: RESTART_STARTS, SCREEN_STARTS).
* an array (responsibilities of the one assignment node) or ``{node: array}``.
"""
from __future__ import annotations

import numpy as np
from scipy import sparse

INITS = ("kmeans", "kmeans++", "random", "diffuse", "topics", "documents")

#: Dirichlet concentration of the responsibilities drawn by init="diffuse"
DIFFUSE = 10.0
#: Gamma(shape, scale) of the components' pseudo-counts drawn by init="topics" (scikit-
#: learn's LatentDirichletAllocation: gamma(100, 1/100))
TOPICS_SHAPE, TOPICS_SCALE = 100.0, 0.01
#: Lloyd's iterations of the k-means start stop when no point changes cluster, or here
KMEANS_MAX_ITER = 300
#: init="documents": k-means runs (different seeds), the one with the lowest objective kept
DOC_KMEANS_INITS = 3
#: where a default start cannot work, the next one tried
FALLBACK = {"documents": "topics", "topics": "diffuse", "kmeans": "random", "kmeans++": "random"}


def check_init(model, init, assignments):
    """Refuse an ``init=`` the model cannot use before anything changes; returns
    {assignment node: start} (a name or an array)."""
    if init is None:
        return {z: None for z in assignments}
    if not assignments and not isinstance(init, str):   # a named start may apply to none
        raise ValueError(f"init={str(init)[:40]}: the model has no mixture assignment (the "
                         f"Categorical z of a Mixture) to start from; leave init out")
    if isinstance(init, str):
        if init not in INITS:
            raise ValueError(f"init={init!r}: choose one of {list(INITS)}, an array of "
                             f"responsibilities or {{node: array}}")
        return {z: init for z in assignments}
    if isinstance(init, dict):
        out = {z: None for z in assignments}
        for key, value in init.items():
            z = model[key] if isinstance(key, str) else key
            if z not in assignments:
                raise ValueError(f"init=: {key!r} is not a mixture assignment of this model; "
                                 f"give responsibilities of {[a.name for a in assignments]}")
            if isinstance(value, str) and value not in INITS:
                raise ValueError(f"init={{{key!r}: {value!r}}}: choose one of {list(INITS)} or an "
                                 f"array of responsibilities of {z.label()}")
            out[z] = value if isinstance(value, str) else _responsibilities(z, value)
        return out
    if len(assignments) != 1:
        raise ValueError(f"init=array: the model has {len(assignments)} mixture assignments "
                         f"({[a.name for a in assignments]}); pass {{node: array}}")
    z = assignments[0]
    return {z: _responsibilities(z, init)}


def _responsibilities(z, value):
    K = z.nat[0].shape[-1]
    try:
        r = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"init=: responsibilities of {z.label()} must be an array of numbers "
                        f"(plates + (K,)), got {str(value)[:40]!r}") from None
    want = tuple(z.plates) + (K,)
    if r.shape != want:
        raise ValueError(f"init=: responsibilities of {z.label()} must have shape {want} "
                         f"(plates + (K,)), got {r.shape}")
    if not np.all(np.isfinite(r)) or np.any(r < 0) or np.any(r.sum(-1) <= 0):
        raise ValueError(f"init=: responsibilities of {z.label()} must be finite, >= 0, with a "
                         f"positive sum per row")
    return r / r.sum(-1, keepdims=True)


class Default(str):
    """A start chosen by the scheduler, not the user: where it cannot work (k-means with
    no observed data below the assignments) the random start is used instead; with point
    masses (``soft``) its one-hot responsibilities keep a trace (1e-3) of every component,
    so that the first MAP step never puts a weight or a category probability on the
    boundary of its support (a zero count under a prior concentration of 1)."""

    soft = False

    def softened(self):
        d = Default(self)
        d.soft = True
        return d


#: the share of a soft default start spread evenly over the components
SOFT = 1e-3


def start_assignment(model, z, rng, init):
    """Set a mixture assignment to its starting responsibilities; returns the start
    used (a default start that cannot work here: the one it fell back to)."""
    K = z.nat[0].shape[-1]
    if isinstance(init, Default):
        try:
            start_assignment(model, z, rng, str(init))
        except ValueError:
            return start_assignment(model, z, rng, Default(FALLBACK.get(str(init), "random")))
        if init.soft:
            r = (1.0 - SOFT) * np.exp(z.nat[0]) + SOFT / K
            z.set_natural((np.log(r),))
        return init
    if isinstance(init, np.ndarray):
        r = init
    elif init in ("kmeans", "kmeans++"):
        r = kmeans_responsibilities(model, z, K, rng, lloyd=init == "kmeans")
    elif init == "topics":
        r = topics_responsibilities(model, z, rng)
    elif init == "documents":
        r = documents_responsibilities(model, z, K, rng)
    elif init == "diffuse":
        r = rng.dirichlet(np.full(K, DIFFUSE), size=z.plates)
    else:
        r = rng.dirichlet(np.ones(K), size=z.plates)
    z.set_natural((np.log(np.maximum(r, 1e-300)),))
    return init


#: the default starts of a mixture over data in restarts 0, 1, 2, ...: k-means (the
#: start of a single fit), then a random start and a screened one in turn; "screened"
#: is the best of SCREEN_STARTS (each with its own seed) after SCREEN_SWEEPS sweeps
#: (docs/scheduler.md "Restarts"; measured in docs/benchmarks.md §8.2.3: random starts
#: reach optima that k-means starts do not, screening finds good ones among many starts)
RESTART_STARTS = ("kmeans", "random", "screened")
SCREEN_STARTS = ("kmeans", "kmeans++", "kmeans", "random")
SCREEN_SWEEPS = 10


def restart_start(restart):
    """The default start of restart ``restart`` of a mixture over data: RESTART_STARTS[0]
    first, then RESTART_STARTS[1:] in turn."""
    if restart == 0 or len(RESTART_STARTS) == 1:
        return RESTART_STARTS[0]
    return RESTART_STARTS[1 + (restart - 1) % (len(RESTART_STARTS) - 1)]


def default_start(structure, z, restart=0, batch=True):
    """For per-entry mixture weights (z's prior is a local node: LDA's theta[doc]):
    "documents" in a batch fit, "diffuse" under SVI and Dask (``batch=False``); for a
    mixture over data, restart_start(restart): "kmeans" for a single fit (a "screened"
    restart where fit() does not screen, e.g. on Dask, is "random")."""
    from ..graph.deterministic import Gather
    local = structure.on_axis   # any observed node's axis (two corpora: two theta[doc])
    # (a gather of a local node: theta[doc] with a 2-d doc, which the axis does not cross)
    if any(p in local or (isinstance(p, Gather) and p.source in local) for p in z.parents):
        return "documents" if batch else "diffuse"
    name = restart_start(restart)
    return "random" if name == "screened" else name


def topics_responsibilities(model, z, rng):
    """init="topics": every Dirichlet component parameter of z's observed mixture children
    at random pseudo-counts Gamma(100, 1/100) (scikit-learn's LDA start), then z's
    update from them (its other parents at their current q: the prior). Returns z's
    responsibilities; the components keep the random start until the first global step.
    Raises ValueError when z has no such component parameter."""
    from .blr import blr_step
    params, _ = _topic_parameters(model, z)
    if not params:
        raise ValueError(f"init='topics': mixture assignment {z.label()} has no observed "
                         f"Mixture child with Dirichlet component parameters (topics); use "
                         f"init='diffuse'")
    for p in params:
        lam = rng.gamma(TOPICS_SHAPE, TOPICS_SCALE, size=np.shape(p.nat[0]))
        p.set_natural(p.family.natural_from_params(lam))
    blr_step(model, z, 1.0)
    return np.asarray(z.moments()[0], dtype=float)


def _topic_parameters(model, z):
    """The Dirichlet component parameters (topics) of z's observed Mixture children, with
    those children."""
    params, children = [], []
    for y in model.children[z]:
        if y.stochastic and y.observed and y.factor.selector() is z:
            found = [p for p in y.parents[1:] if p.stochastic and not p.observed
                     and not p.point and p.family.name == "Dirichlet"]
            if found:
                children.append(y)
            params += [p for p in found if p not in params]
    return params, children


def documents_responsibilities(model, z, K, rng):
    """init="documents": k-means of the documents (the module docstring), the topics at
    their prior plus one cluster's word counts each, then z's update from them. Returns
    z's responsibilities. Raises ValueError where the model is not of that shape: z must
    read per-document weights through a gather (``theta[doc]``) and have one observed
    Categorical Mixture child on its own plates whose components are one Dirichlet node."""
    from .blr import blr_step
    from ..graph.deterministic import Gather
    params, children = _topic_parameters(model, z)
    gathers = [g for g in z.parents if isinstance(g, Gather) and np.ndim(g.idx) == 1]
    if len(params) != 1 or len(children) != 1 or len(gathers) != 1 or len(z.plates) != 1:
        raise ValueError(f"init='documents': {z.label()} is not an LDA-like assignment "
                         f"(theta[doc] -> z -> Mixture(z, Categorical, topics)); use init='topics'")
    (phi,), (y,), (g,) = params, children, gathers
    V = np.shape(phi.nat[0])[-1]
    if y.family.name != "Categorical" or tuple(y.plates) != tuple(z.plates) or \
            np.shape(phi.nat[0]) != (K, V):
        raise ValueError(f"init='documents': {y.label()} is not a Categorical over the words of "
                         f"{phi.label()} on the plates of {z.label()}; use init='topics'")
    w = np.ones(z.plates) if y.weights is None else np.asarray(y.weights, dtype=float)
    if y.mask is not None:
        w = w * np.broadcast_to(y.mask, z.plates)
    words = np.where(w > 0, np.asarray(y.value), 0).astype(np.intp)
    X = sparse.csr_matrix((w, (g.idx, words)), shape=(g.source.plates[0], V))
    X.sum_duplicates()
    n_words = np.asarray(X.sum(axis=1)).ravel()
    if np.count_nonzero(n_words) < K:
        raise ValueError(f"init='documents': {z.label()} reads fewer than K={K} documents with "
                         f"observed words ({np.count_nonzero(n_words)}); use init='topics' or "
                         f"fewer components")
    S = (sparse.diags(1.0 / np.where(n_words > 0, n_words, 1.0)) @ X).sqrt().tocsr()
    labels = min((spherical_kmeans(S, K, rng) for _ in range(DOC_KMEANS_INITS)),
                 key=lambda run: run[1])[0]
    counts = _sum_by_label(labels, K, X)
    empty = int(np.count_nonzero(counts.sum(axis=1) == 0))
    if empty:   # fewer distinct documents than topics: those topics would start tied
        raise ValueError(f"init='documents': the documents of {z.label()} form fewer than K={K} "
                         f"distinct clusters ({K - empty}); use init='topics' or fewer components")
    phi.set_natural((phi.prior_natural()[0] + counts,))
    blr_step(model, z, 1.0)
    return np.asarray(z.moments()[0], dtype=float)


def spherical_kmeans(S, K, rng):
    """(labels, objective) of k-means on the unit-norm rows of the sparse matrix S (rows
    of zeros: no words; they take no part) with centres kept at unit norm: greedy k-means++
    seeds, then Lloyd's iterations until no row changes cluster. The objective is
    sum_n (1 - max_k <S_n, C_k>), half the sum of squared distances to the centres."""
    n = S.shape[0]
    live = np.asarray(S.power(2).sum(axis=1)).ravel() > 0

    def dist(rows):   # 1 - cosine from rows to every row, (len(rows), n); 0 at empty rows
        return np.where(live, np.maximum(1.0 - (S @ S[rows].toarray().T).T, 0.0), 0.0)

    first = rng.choice(np.flatnonzero(live))
    seeds = _greedy_seeds(first, dist([first])[0], live.astype(float), K, rng, dist)
    C = S[seeds].toarray()
    labels = None
    for _ in range(KMEANS_MAX_ITER):
        sim = S @ C.T
        new = np.argmax(sim, axis=1)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        M = _sum_by_label(labels, K, S, live.astype(float))
        norm = np.linalg.norm(M, axis=1)
        C = np.where(norm[:, None] > 0, M / np.where(norm > 0, norm, 1.0)[:, None], C)
    objective = float(np.sum(np.where(live, 1.0 - sim.max(axis=1), 0.0)))
    return labels, objective


def _sum_by_label(labels, K, M, weights=None):
    """(K, columns) dense: row k the (weighted) sum of the rows of the sparse M labelled k."""
    n = len(labels)
    A = sparse.csr_matrix((np.ones(n) if weights is None else weights, (labels, np.arange(n))),
                          shape=(K, n))
    return np.asarray((A @ M).todense())


def assignment_features(model, z):
    """(X, M): one row per entry of z of the observed mixture children's first
    sufficient statistic, standardised per column, with a 0/1 mask of observed cells.
    Raises ValueError when there are none (then a random start is used)."""
    data = [c for c in model.children[z] if c.stochastic and c.observed
            and c.factor.selector() is z]
    if not data:
        raise ValueError(f"init='kmeans': mixture assignment {z.label()} has no observed "
                         f"Mixture child to seed from; use init='random'")
    cols, masks = [], []
    for y in data:
        X, M = _child_features(z, y)
        if X is None:
            raise ValueError(f"init='kmeans': {y.label()} has plates {y.plates}, which do not "
                             f"extend the assignments' plates {z.plates}; use init='random'")
        cnt = M.sum(0)
        mean = (X * M).sum(0) / np.maximum(cnt, 1)
        X = np.where(M > 0, X, mean)
        sd = np.sqrt(((X - mean) ** 2 * M).sum(0) / np.maximum(cnt, 1))
        cols.append((X - mean) / np.where(sd > 0, sd, 1.0))
        masks.append(M)
    return np.concatenate(cols, axis=1), np.concatenate(masks, axis=1)


def _child_features(z, y):
    """Rows (one per entry of z) of y's first sufficient statistic, with a cell mask.
    y's plates broadcast z's: axes where z has size 1 and y does not (columns sharing
    one z) become feature columns, as does the value's event."""
    Pz, Py = z.plates, y.plates
    Pz = (1,) * (len(Py) - len(Pz)) + tuple(Pz)
    if len(Pz) != len(Py) or any(a not in (1, b) for a, b in zip(Pz, Py)):
        return None, None
    if y.value is not None and not y.family.is_label:
        t1 = np.asarray(y.value, dtype=float)  # x itself: never build x x^T for vectors
    else:
        t1 = np.asarray(y.moments()[0], dtype=float)
    ev = t1.ndim - len(Py)
    mask = np.ones(Py) if y.mask is None else np.broadcast_to(y.mask, Py).astype(float)
    if y.replicates is not None:
        mask = mask * np.broadcast_to(y.replicates, Py)
    entry = [j for j in range(len(Py)) if Pz[j] == Py[j]]
    feat = [j for j in range(len(Py)) if Pz[j] != Py[j]]
    n = int(np.prod([Py[j] for j in entry])) if entry else 1
    X = np.transpose(t1, entry + feat + list(range(len(Py), t1.ndim))).reshape(n, -1)
    M = np.transpose(mask, entry + feat).reshape(n, -1)
    M = np.repeat(M, X.shape[1] // M.shape[1], axis=1) if ev else M
    fin = np.isfinite(X)   # missing coordinates of partly observed vectors (NaN): missing cells
    return np.where(fin, X, 0.0), M * fin


def kmeans_responsibilities(model, z, K, rng, lloyd=True):
    """One-hot responsibilities from k-means++ seeds (Arthur & Vassilvitskii 2007;
    counts weight the draws) and, with ``lloyd``, Lloyd's iterations until no point
    changes cluster. Distances and centres use the observed cells only. Entries with
    no observed cell get uniform responsibilities (they carry no information)."""
    X, M = assignment_features(model, z)
    w = (M.max(axis=1) > 0).astype(float)
    if np.count_nonzero(w) < K:
        raise ValueError(f"init='kmeans': {z.label()} has fewer than K={K} observed entries; use "
                         f"init='random' or fewer components")
    labels, _ = kmeans(X, M, w, K, rng, lloyd)
    r = np.zeros((X.shape[0], K))
    r[np.arange(X.shape[0]), labels] = 1.0
    r[w == 0] = 1.0 / K
    return r.reshape(tuple(z.plates) + (K,))


def kmeans(X, M, w, K, rng, lloyd=True):
    """(labels, centres) of k-means on rows X with cell mask M and row weights w: greedy
    k-means++ seeds, then (``lloyd``) Lloyd's iterations until no row changes cluster."""
    MX, MX2 = M * X, (M * X * X).sum(1)
    C = _seeds(X, w, K, rng)
    labels = _nearest(MX, MX2, M, C)
    for _ in range(KMEANS_MAX_ITER if lloyd else 0):
        R = np.zeros((X.shape[0], K))
        R[np.arange(X.shape[0]), labels] = w
        num, den = R.T @ MX, R.T @ M
        C = np.where(den > 0, num / np.maximum(den, 1e-300), C)
        new = _nearest(MX, MX2, M, C)
        if np.array_equal(new, labels):
            break
        labels = new
    return labels, C


def _seeds(X, w, K, rng):
    """Greedy k-means++ seeds (:func:`_greedy_seeds`) of the rows X, (K, D)."""
    first = rng.choice(X.shape[0], p=w / w.sum())
    sq = np.sum(X * X, axis=1)
    rows = _greedy_seeds(first, np.sum((X - X[first]) ** 2, axis=1), w, K, rng,
                         lambda c: np.maximum(sq[None, :] - 2.0 * X[c] @ X.T + sq[c][:, None], 0.0))
    return X[rows]


def _greedy_seeds(first, d2, w, K, rng, dist):
    """Greedy k-means++ (as scikit-learn's KMeans seeds): from the row ``first`` (d2: every
    row's distance to it), each new seed is the best, by the w-weighted sum of distances
    to the nearest seed, of 2 + log K candidates drawn with probability proportional to
    w times that distance. ``dist(rows)``: (len(rows), n) distances. Returns K row numbers."""
    n = len(d2)
    trials = 2 + int(np.log(K))
    seeds = [int(first)]
    for _ in range(1, K):
        p = w * d2
        if p.sum() <= 0:  # fewer distinct rows than components: draw among the weighted
            p = w
        cand = rng.choice(n, size=trials, p=p / p.sum())
        new = np.minimum(d2[None, :], dist(cand))
        best = int(np.argmin(new @ w))
        seeds.append(int(cand[best]))
        d2 = new[best]
    return seeds


def _nearest(MX, MX2, M, C):
    """argmin_k sum_d M_nd (X_nd - C_kd)^2 for every row n."""
    d = MX2[:, None] - 2.0 * MX @ C.T + M @ (C * C).T
    return np.argmin(d, axis=1)


# ---- starts of rows held elsewhere (Dask partitions, docs/scaling.md) -----------------
#: rows read to the driver for the k-means start of rows held elsewhere
KMEANS_SAMPLE = 4096


def partition_starts(model, structure, starts, rng, used):
    """{assignment name: start} for partitions of the rows held elsewhere: an array
    (sliced per partition: :func:`slice_start`), ("random", concentration, seed) drawn
    per partition (:func:`start_partition`), or ("kmeans", centres, scaling): k-means on
    a sample of rows read to the driver, each partition's rows then assigned to the
    nearest centre. A default start that falls back is recorded in ``used``."""
    out = {}
    for z, init in starts.items():
        if isinstance(init, np.ndarray):
            out[z.name] = init
            continue
        kind = str(init)
        if kind in ("kmeans", "kmeans++"):
            try:
                out[z.name] = _sample_kmeans(model, structure, z, rng, lloyd=kind == "kmeans")
                continue
            except ValueError:
                if not isinstance(init, Default):
                    raise
                kind = "random"
                used[z] = Default(kind)  # FitResult.start
        conc = DIFFUSE if kind == "diffuse" else 1.0
        out[z.name] = ("random", conc, int(rng.integers(2 ** 63)))
    return out


def _sample_kmeans(model, structure, z, rng, lloyd):
    """Centres of k-means (k-means++ seeds, then Lloyd's iterations) on
    :data:`KMEANS_SAMPLE` rows drawn at random, with the standardisation of their
    features."""
    from .views import RowView
    N, K = structure.N, z.nat[0].shape[-1]
    rows = np.sort(rng.choice(N, min(N, KMEANS_SAMPLE), replace=False))
    with RowView(model, structure, rows):
        X, M, scale = partition_features(model, z)
    w = (M.max(axis=1) > 0).astype(float)
    if np.count_nonzero(w) < K:
        raise ValueError(f"init='kmeans': {z.label()} has fewer than K={K} observed entries "
                         f"in the sample; use init='random' or fewer components")
    _, C = kmeans(X, M, w, K, rng, lloyd)
    return ("kmeans", C, scale)


def slice_start(start, lo, hi):
    """A partition's share (rows lo..hi-1) of a start of :func:`partition_starts`."""
    return ("array", start[lo:hi]) if isinstance(start, np.ndarray) else start


def start_partition(model, z, start, p):
    """Set assignments ``z`` (restricted to partition ``p``'s rows) to their share of
    ``start``: ("array", r), ("kmeans", centres, scaling), ("random", conc, seed), or
    ("nat", natural parameters) drawn on the driver (:func:`minibatch_starts`)."""
    if start[0] == "nat":
        z.set_natural((start[1],))
        return
    K = z.nat[0].shape[-1]
    if start[0] == "array":
        r = start[1]
    elif start[0] == "kmeans":
        X, M, _ = partition_features(model, z, start[2])
        labels = _nearest(M * X, (M * X * X).sum(1), M, start[1])
        r = np.zeros((X.shape[0], K))
        r[np.arange(X.shape[0]), labels] = 1.0
        r[M.max(axis=1) == 0] = 1.0 / K
        r = r.reshape(tuple(z.plates) + (K,))
    else:
        _, conc, seed = start
        r = np.random.default_rng([seed, p]).dirichlet(np.full(K, conc), size=z.plates)
    z.set_natural((np.log(np.maximum(r, 1e-300)),))


def partition_features(model, z, scale=None):
    """(X, M, scale): the k-means features of z's entries (its observed mixture
    children's first statistic, as :func:`assignment_features`), standardised with
    ``scale`` ([(mean, sd)] per child; from these rows when None)."""
    data = [c for c in model.children[z] if c.stochastic and c.observed
            and c.factor.selector() is z]
    if not data:
        raise ValueError(f"init='kmeans': mixture assignment {z.label()} has no observed "
                         f"Mixture child to seed from; use init='random'")
    cols, masks, used = [], [], []
    for j, y in enumerate(data):
        X, M = _child_features(z, y)
        if X is None:
            raise ValueError(f"init='kmeans': {y.label()} has plates {y.plates}, which do not "
                             f"extend the assignments' plates {z.plates}; use init='random'")
        if scale is None:
            cnt = M.sum(0)
            mean = (X * M).sum(0) / np.maximum(cnt, 1)
            sd = np.sqrt(((np.where(M > 0, X, mean) - mean) ** 2 * M).sum(0) / np.maximum(cnt, 1))
        else:
            mean, sd = scale[j]
        X = np.where(M > 0, X, mean)
        cols.append((X - mean) / np.where(sd > 0, sd, 1.0))
        masks.append(M)
        used.append((mean, sd))
    return np.concatenate(cols, axis=1), np.concatenate(masks, axis=1), used


class _Assignments:
    """Stands for a mixture assignment restricted to a minibatch's entries while its
    start is drawn on the driver (:func:`start_assignment` reads the plates and K, and
    sets the natural parameters)."""

    replicates = None

    def __init__(self, z, n):
        self.plates = (int(n),) + tuple(z.plates[1:])
        self.nat = (np.zeros(self.plates + (z.nat[0].shape[-1],)),)

    def set_natural(self, nat):
        self.nat = tuple(nat)


def minibatch_starts(model, structure, starts, rows, idx, rng, used):
    """{assignment name: natural parameters of a minibatch's entries} drawn on the
    driver as in memory (the same rng draws) for a minibatch of rows held elsewhere: a
    random start needs the entries' count only; a k-means start reads the minibatch's
    rows. A default start that falls back is recorded in ``used``."""
    from .views import RowView
    out = {}
    for z, init in starts.items():
        if isinstance(init, np.ndarray):
            init = init[idx[z]]
        if not isinstance(init, np.ndarray) and str(init) in ("kmeans", "kmeans++"):
            with RowView(model, structure, rows):
                got = start_assignment(model, z, rng, init)
                out[z.name] = np.array(z.nat[0])
        else:
            stub = _Assignments(z, len(idx[z]))
            got = start_assignment(model, stub, rng, init)
            out[z.name] = np.asarray(stub.nat[0])
        if isinstance(got, Default):
            used[z] = got      # a fallback (FitResult.start)
    return out
