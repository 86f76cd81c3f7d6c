"""Latent Dirichlet allocation (Blei, Ng & Jordan 2003; docs/models/lda.md).
Copy this file and adapt it. The model, on the non-zero entries of the
document-term matrix (document d, word v, count n_dv)::

    theta_d ~ Dirichlet(alpha * ones(K)),  plates (D,)     topic mixture of document d
    phi_k   ~ Dirichlet(eta * ones(V)),    plates (K,)     word distribution of topic k
    z_i     ~ Categorical(theta[doc_ids]), plates (nnz,)   topic of the word type of entry i
    y_i     ~ Mixture(z_i, Categorical, phi), observed word_ids with weights = counts

``weights=counts`` makes one z stand for the n_dv identical tokens of a word
type in a document (docs/math.md §3.5), so memory grows with the non-zero entries,
not with the tokens. Input: a scipy.sparse (or dense) document-term matrix with
an optional ``vocabulary``, or texts (a list of strings, a pandas Series, or a
DataFrame / CSV file with the text column picked by ``columns=``), which a
simple tokenizer (:func:`tokenize`) turns into counts.

    import lda
    model = lda.build(texts, k=5)
    fit = model.fit("vmp", seed=0, **model.meta["fit_options"])
    lda.summarize(fit)      # one row per topic: its corpus share and top words
    lda.doc_topics(fit)     # (D, K) topic mixture of every document

A large corpus: stochastic VI on minibatches of documents (batch_over="theta",
so that a document's theta sees all its words; docs/models/lda.md, "SVI")::

    fit = model.fit("svi", seed=0, **model.meta["fit_options_by_method"]["svi"])
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np
import scipy.sparse as sp

import blrgraph as bg
from blrgraph import io

NAME = "lda"
DEFAULT_METHOD = "vmp"
DESCRIPTION = "latent Dirichlet allocation from a document-term matrix or texts (columns=TEXT)"

#: A short English stop-word list (articles, pronouns, auxiliaries, prepositions).
STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will with
would you your yours yourself yourselves
""".split())

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def tokenize(text, stop_words=STOP_WORDS, min_length=2):
    """Lower-case words (letters and digits, inner apostrophes kept) of at least
    ``min_length`` characters, without the ``stop_words``."""
    stop = stop_words or ()
    return [t for t in _TOKEN.findall(text.lower()) if len(t) >= min_length and t not in stop]


def document_term_matrix(texts, vocabulary=None, stop_words=STOP_WORDS, min_count=1):
    """(CSR counts (D, V), vocabulary) from a list of texts. Without a
    ``vocabulary`` it is every word seen at least ``min_count`` times, sorted;
    with one, other words are ignored."""
    docs = [Counter(tokenize(t, stop_words)) for t in texts]
    if vocabulary is None:
        total = Counter()
        for d in docs:
            total.update(d)
        vocabulary = sorted(w for w, n in total.items() if n >= min_count)
    index = {w: j for j, w in enumerate(vocabulary)}
    rows, cols, vals = [], [], []
    for i, d in enumerate(docs):
        for word, n in d.items():
            j = index.get(word)
            if j is not None:
                rows.append(i)
                cols.append(j)
                vals.append(n)
    counts = sp.csr_matrix((np.asarray(vals, dtype=float), (rows, cols)),
                           shape=(len(docs), len(vocabulary)))
    return counts, list(vocabulary)


def build(data, k=10, columns=None, vocabulary=None, alpha=None, eta=None, stop_words="english",
          min_count=1, learn_alpha=False):
    """LDA with ``k`` topics; ``alpha`` and ``eta`` default to 1/k (as scikit-learn's).
    ``stop_words``: "english" (:data:`STOP_WORDS`), None, or a set of words.
    ``learn_alpha=True``: alpha is a vector of K random concentrations, node "alpha",
    alpha_k ~ Gamma(1, 1/alpha) (prior mean ``alpha``), fitted with fit("ncvmp")
    (docs/hyperpriors.md)."""
    k = int(k)
    if k < 1:
        raise ValueError(f"lda: k must be >= 1, got {k}")
    alpha = 1.0 / k if alpha is None else float(alpha)
    eta = 1.0 / k if eta is None else float(eta)
    counts, vocabulary = _counts(data, columns, vocabulary, stop_words, min_count)
    D, V = counts.shape
    coo = sp.coo_matrix(counts)
    coo.sum_duplicates()
    coo.eliminate_zeros()
    if coo.nnz == 0:
        raise ValueError("lda: the documents contain no words (after tokenizing and removing stop "
                         "words); check the text column and stop_words=")

    if learn_alpha:
        if k < 2:
            raise ValueError(f"lda: learn_alpha=True needs k >= 2 topics, got {k}")
        concentrations = bg.Gamma(1.0, 1.0 / alpha, plates=(k,), name="alpha")
        theta = bg.Dirichlet(concentrations, plates=(D,), name="theta")
    else:
        theta = bg.Dirichlet(alpha * np.ones(k), plates=(D,), name="theta")
    phi = bg.Dirichlet(eta * np.ones(V), plates=(k,), name="phi")
    z = bg.Categorical(theta[coo.row], plates=(coo.nnz,), name="z")
    y = bg.Mixture(z, bg.Categorical, phi, name="words").observe(coo.col, weights=coo.data)

    model = bg.Model(y)
    model.meta = {"zoo": NAME, "vocabulary": list(vocabulary), "k": k, "n_docs": D,
                  "alpha": alpha, "eta": eta, "columns": io.parse_columns(columns),
                  "stop_words": None if stop_words is None else sorted(
                      STOP_WORDS if stop_words == "english" else stop_words),
                  # the scheduler's defaults: topics started from k-means of the documents
                  # (init="documents"), batch VB with the local rounds capped while the
                  # topics still move (docs/scheduler.md; measured in docs/benchmarks.md
                  # §8.3.3: better optima, sooner, than scikit-learn's batch LDA)
                  "fit_options": {"max_iter": 500, "tol": 1e-6},
                  "learn_alpha": bool(learn_alpha),
                  # fit("svi"): minibatches of documents (theta's axis, reaching z and the
                  # words through the gather theta[doc_ids]); random starting topics
                  # (k-means++ seeds on one-hot words can start two topics on one); no
                  # warm-up: VMP on the first minibatch fits the topics to its documents
                  # and, with many topics, the steps that follow do not undo it
                  # (docs/benchmarks.md, LDA)
                  "fit_options_by_method": {"svi": {"batch_over": "theta",
                                                    "batch_size": min(D, 256), "epochs": 20,
                                                    "init": "random", "warmup": 0}}}
    return model


def _counts(data, columns, vocabulary, stop_words, min_count):
    if stop_words == "english":
        stop_words = STOP_WORDS
    if sp.issparse(data) or (isinstance(data, np.ndarray) and data.ndim == 2
                             and data.dtype.kind in "iuf"):
        counts = sp.csr_matrix(data, dtype=float)
        if counts.nnz and (counts.data.min() < 0 or not np.all(np.isfinite(counts.data))):
            raise ValueError("lda: the document-term matrix must hold finite counts >= 0")
        V = counts.shape[1]
        if vocabulary is None:
            vocabulary = [f"w{j}" for j in range(V)]
        if len(vocabulary) != V:
            raise ValueError(f"lda: vocabulary has {len(vocabulary)} words but the matrix has {V} "
                             f"columns")
        return counts, list(vocabulary)
    cols = io.parse_columns(columns)
    if cols is not None and len(cols) != 1:
        raise ValueError(f"lda: pick one text column (columns=[name]), got {cols}")
    texts = io.read_texts(data, None if cols is None else cols[0])
    return document_term_matrix(texts, vocabulary, stop_words, min_count)


def topic_word(fit):
    """(K, V) posterior mean word probabilities of each topic, E[phi_k]."""
    return np.asarray(io.fitted_model(fit, NAME)["phi"].posterior.mean)


def doc_topics(fit):
    """DataFrame (D, K): the posterior mean topic mixture E[theta_d] of every document."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    theta = np.asarray(model["theta"].posterior.mean)
    return pd.DataFrame(theta, columns=[f"topic{k}" for k in range(theta.shape[1])])


def transform(fit, data, max_iter=200, tol=1e-3):
    """Topic mixtures of new documents (texts, a DataFrame/CSV with the text column, or a
    document-term matrix over the training vocabulary; unknown words are ignored) with
    the topics fixed at the fit: the variational E-step of each document (q(theta_d) and
    its words' q(z), alternated until the mean change of theta's concentrations is below
    ``tol``, as scikit-learn's transform). Returns (M, K): E[theta_d] normalised."""
    g = _e_step(io.fitted_model(fit, NAME), _new_counts(fit, data), max_iter, tol)[0]
    return g / g.sum(axis=1, keepdims=True)


def log_predictive(fit, data, max_iter=200, tol=1e-3):
    """(M,) held-out score of each new document (as :func:`transform` takes them): the
    variational bound on log p(words of the document | topics) with the topics fixed
    at the fit, after the E-step of :func:`transform`:
    sum_v n_dv log sum_k exp(E[log theta_dk] + E[log phi_kv]) + E[log p(theta_d) -
    log q(theta_d)], the per-document terms of scikit-learn's ``_approx_bound``
    (docs/predict.md, "Held-out scores of the zoo"). Unknown words are ignored."""
    model = io.fitted_model(fit, NAME)
    return _doc_bounds(model, _new_counts(model, data), max_iter, tol)


def perplexity(fit, data, max_iter=200, tol=1e-3):
    """Perplexity of new documents as scikit-learn's ``LatentDirichletAllocation.perplexity``
    defines it: exp(-(sum of the documents' bounds (:func:`log_predictive`) + the topics'
    E[log p(phi) - log q(phi)]) / the number of words). Lower is better."""
    from scipy.special import digamma, gammaln
    model = io.fitted_model(fit, NAME)
    counts = _new_counts(model, data)
    lam = model["phi"].posterior.params["alpha"]
    eta = float(model.meta.get("eta", 1.0 / lam.shape[0]))
    elog_phi = digamma(lam) - digamma(lam.sum(axis=1, keepdims=True))
    topics = (np.sum((eta - lam) * elog_phi) + np.sum(gammaln(lam) - gammaln(eta))
              + np.sum(gammaln(eta * lam.shape[1]) - gammaln(lam.sum(axis=1))))
    words = counts.sum()
    if words <= 0:
        raise ValueError("lda.perplexity: the documents hold no word of the training vocabulary")
    return float(np.exp(-(_doc_bounds(model, counts, max_iter, tol).sum() + topics) / words))


def _new_counts(fit, data):
    """CSR counts (M, V) of new documents over the training vocabulary."""
    model = io.fitted_model(fit, NAME)
    meta = model.meta
    vocab = meta["vocabulary"]
    if sp.issparse(data) or (isinstance(data, np.ndarray) and data.ndim == 2 and data.dtype.kind in "iuf"):
        counts = sp.csr_matrix(data, dtype=float)
        if counts.shape[1] != len(vocab):
            raise ValueError(f"lda.transform: the matrix has {counts.shape[1]} columns but the "
                             f"vocabulary {len(vocab)} words")
        return counts
    cols = meta.get("columns")
    texts = io.read_texts(data, None if not cols else cols[0])
    stop = meta.get("stop_words")
    return document_term_matrix(texts, vocab, frozenset(stop) if stop else None)[0]


def _e_step(model, counts, max_iter, tol):
    """q(theta_d) of new documents with the topics fixed: (gamma (M, K), the document-term
    entries as COO, E[log phi] (K, V), the Dirichlet prior alpha (K,) or a scalar)."""
    from scipy.special import digamma
    lam, meta = model["phi"].posterior.params["alpha"], model.meta
    coo = sp.coo_matrix(counts)
    M, K = counts.shape[0], lam.shape[0]
    elog_phi = digamma(lam) - digamma(lam.sum(axis=1, keepdims=True))       # (K, V)
    ll = elog_phi[:, coo.col].T                                              # (nnz, K)
    # a learnt alpha: its posterior mean (what theta's VB update uses)
    alpha = model["alpha"].posterior.mean if meta.get("learn_alpha") else float(meta["alpha"])
    g = alpha + np.asarray(counts.sum(axis=1)).ravel()[:, None] / K * np.ones((M, K))
    for _ in range(max_iter):
        elog_theta = digamma(g) - digamma(g.sum(axis=1, keepdims=True))
        lr = elog_theta[coo.row] + ll
        r = np.exp(lr - lr.max(axis=1, keepdims=True))
        r /= r.sum(axis=1, keepdims=True)
        new = alpha + np.stack([np.bincount(coo.row, coo.data * r[:, k], minlength=M)
                                for k in range(K)], axis=1)
        done = np.mean(np.abs(new - g)) < tol
        g = new
        if done:
            break
    return g, coo, elog_phi, alpha


def _doc_bounds(model, counts, max_iter, tol):
    """(M,) the per-document terms of the variational bound at the E-step's q(theta)."""
    from scipy.special import digamma, gammaln, logsumexp
    g, coo, elog_phi, alpha = _e_step(model, counts, max_iter, tol)
    M, K = g.shape
    alpha = np.broadcast_to(alpha, (K,))
    elog_theta = digamma(g) - digamma(g.sum(axis=1, keepdims=True))
    words = coo.data * logsumexp(elog_theta[coo.row] + elog_phi[:, coo.col].T, axis=1)
    out = np.bincount(coo.row, words, minlength=M)
    out += (np.sum((alpha - g) * elog_theta, axis=1) + np.sum(gammaln(g) - gammaln(alpha), axis=1)
            + gammaln(alpha.sum()) - gammaln(g.sum(axis=1)))
    return out


def predict_table(fit, data):
    """One row per new document: its most probable ``topic`` and the topic mixture
    ``topic0..topicK-1`` (:func:`transform`)."""
    pd = io.require_pandas()
    theta = transform(fit, data)
    df = pd.DataFrame(theta, columns=[f"topic{k}" for k in range(theta.shape[1])])
    df.insert(0, "topic", theta.argmax(axis=1))
    return df


def predict(fit, data):
    """(M,) the most probable topic of each new document (argmax of :func:`transform`;
    docs/predict.md, "What predict means")."""
    return transform(fit, data).argmax(axis=1)


def topic_words(fit, n_words=10):
    """Long table: topic, rank, word, prob (the top ``n_words`` words of each topic)."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    phi = topic_word(model)
    vocab = model.meta["vocabulary"]
    rows = []
    for k in range(phi.shape[0]):
        for r, j in enumerate(np.argsort(-phi[k])[:n_words]):
            rows.append({"topic": k, "rank": r + 1, "word": vocab[j], "prob": phi[k, j]})
    return pd.DataFrame(rows)


def summarize(fit, n_words=8):
    """One row per topic: its share of the corpus (mean of E[theta_dk] over the
    documents) and its top ``n_words`` words, most probable first."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    phi = topic_word(model)
    share = np.asarray(model["theta"].posterior.mean).mean(axis=0)
    vocab = model.meta["vocabulary"]
    rows = [{"topic": k, "share": share[k],
             "top_words": " ".join(vocab[j] for j in np.argsort(-phi[k])[:n_words])}
            for k in range(phi.shape[0])]
    return pd.DataFrame(rows)


def write_outputs(fit, out_dir):
    """doc_topics.csv (topic mixture per document) and topic_words.csv (top 20 words)."""
    from pathlib import Path

    out = [Path(out_dir) / "doc_topics.csv", Path(out_dir) / "topic_words.csv"]
    doc_topics(fit).to_csv(out[0], index_label="document")
    topic_words(fit, 20).to_csv(out[1], index=False)
    return out
