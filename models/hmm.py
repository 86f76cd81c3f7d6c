"""Hidden Markov model with K states and Gaussian emissions per column (docs/models/hmm.md).

Copy this file and adapt it. The rows of the table are time steps, in file order;
``sequence_column`` names the column that says which sequence a row belongs to (rows
of one sequence keep their order; sequences may have different lengths). The model
(variational Bayes, Beal 2003 ch. 3)::

    pi                ~ Dirichlet(alpha * ones(K))                      initial state
    A_i               ~ Dirichlet(alpha * ones(K) + sticky * e_i)       i = 1..K, transitions
    z_s               ~ CategoricalMarkovChain(pi, A, length=T)         s = 1..S, one node
    covariance="diag":
      (mu_dk, tau_dk) ~ NormalGamma(m0_d, beta0, a0, b0_d)              d = 1..D
      x_std | z_st = k ~ Normal(mu_dk, 1 / tau_dk)
    covariance="full":
      (mu_k, L_k)     ~ NormalWishart(m0, beta0, D + 2, D inv(C) / (D + 2))
      x_st | z_st = k ~ MultivariateNormal(mu_k, inv(L_k))

q of each whole state sequence is exact given the parameters (forward-backward), so
the bound is the structured one, not one factor per step. Priors scaled to the data
as in gmm.py: m0 = the column means, a priori a state's precision is D times the
data's, beta0 = 0.01. Sequences are padded to the longest and the padding masked
(a masked tail ends a sequence); missing cells are masked ("diag": cell by cell;
"full": the whole step is a missing observation of a latent state).

    import hmm
    model = hmm.build(df, k=3, sequence_column="id")
    fit = model.fit("vmp", seed=0, **model.meta["fit_options"])
    # EM: fit = model.fit("em", seed=0, **model.meta["fit_options_by_method"]["em"])
    hmm.summarize(fit)        # one row per (state, column)
    hmm.transitions(fit)      # (K, K) E[A]
    hmm.states(fit)           # per row: the Viterbi state and the state probabilities
"""
from __future__ import annotations

import warnings

import numpy as np

import blrgraph as bg
from blrgraph import io

NAME = "hmm"
DEFAULT_METHOD = "vmp"
DESCRIPTION = "hidden Markov model, Gaussian emissions per column, sequences by an id column"


def _sequences(data, sequence_column, columns):
    """(table of the emission columns, sequence index of each row (0..S-1, in order of
    first appearance), step of each row within its sequence, the sequence labels)."""
    pd = io.require_pandas()
    df = io.read_table(data)
    if sequence_column is None:
        seq = np.zeros(len(df), dtype=int)
        labels = [0]
        rest = df
    else:
        if sequence_column not in df.columns:
            raise ValueError(f"hmm: sequence_column {sequence_column!r} is not a column of the "
                             f"table; columns: {', '.join(map(str, df.columns))}")
        ids = df[sequence_column]
        if ids.isna().any():
            row = int(np.flatnonzero(ids.isna().to_numpy())[0])
            raise ValueError(f"hmm: the sequence column {sequence_column!r} is missing in row "
                             f"{row}; every row must say which sequence it belongs to")
        seq, labels = pd.factorize(ids, sort=False)
        labels = list(labels)
        rest = df.drop(columns=[sequence_column])
        rest.attrs.update(df.attrs)
    if columns is not None:
        columns = io.parse_columns(columns)
        if sequence_column is not None and sequence_column in columns:
            raise ValueError(f"hmm: {sequence_column!r} is the sequence column; it cannot also "
                             f"be an emission column")
    table = io.encode_table(rest, columns)
    table.require_numeric("the hidden Markov model (hmm)")
    step = np.zeros(len(seq), dtype=int)
    counts = np.zeros(len(labels), dtype=int)
    for i, s in enumerate(seq):          # the position of each row in its sequence
        step[i] = counts[s]
        counts[s] += 1
    return table, np.asarray(seq), step, labels


def build(data, k=3, sequence_column=None, columns=None, covariance="diag", alpha=1.0,
          sticky=0.0, beta0=0.01):
    """A K-state HMM over the numeric ``columns`` of ``data`` (a DataFrame, a CSV path or an
    (N, D) array; NaN = missing), one sequence per value of ``sequence_column`` (None: the
    whole table is one sequence). ``sticky`` adds prior weight to staying in a state."""
    k = int(k)
    if k < 1:
        raise ValueError(f"hmm: k must be >= 1, got {k}")
    if covariance not in ("full", "diag"):
        raise ValueError(f"hmm: covariance must be 'full' or 'diag', got {covariance!r}")
    if not alpha > 0 or not sticky >= 0:
        raise ValueError(f"hmm: alpha must be > 0 and sticky >= 0, got {alpha!r}, {sticky!r}")
    table, seq, step, labels = _sequences(data, sequence_column, columns)
    X, mask = table.numeric_array(), table.mask()
    N, D = X.shape
    S, T = len(labels), int(step.max()) + 1
    Xs = np.zeros((S, T, D))
    Ms = np.zeros((S, T, D), dtype=bool)
    Xs[seq, step] = np.where(mask, X, 0.0)
    Ms[seq, step] = mask
    m0, C = io.observed_mean_cov(X, mask)

    pi = bg.Dirichlet(alpha * np.ones(k), name="initial")
    A = bg.Dirichlet(alpha * np.ones((k, k)) + sticky * np.eye(k), plates=(k,), name="transition")
    if covariance == "full":
        nu0 = D + 2.0
        theta = bg.NormalWishart(m0, beta0, nu0, D * np.linalg.inv(C) / nu0, plates=(k,),
                                 name="theta")
        z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(S,), name="z")
        complete = Ms.all(axis=2)
        partial = (Ms.any(axis=2) & ~complete).sum()
        if partial:
            warnings.warn(f"hmm: {int(partial)} of {N} rows have missing cells; with "
                          f"covariance='full' those steps are missing observations (the state "
                          f"is still inferred from its neighbours); covariance='diag' uses every "
                          f"observed cell", stacklevel=2)
        x = bg.Mixture(z, bg.MultivariateNormal, theta, name="x").observe(Xs, mask=complete)
    else:
        a0 = 1.0
        b0 = a0 * np.diag(C) / D
        theta = bg.NormalGamma(m0[:, None] * np.ones((D, k)), beta0, a0,
                               b0[:, None] * np.ones((D, k)), plates=(D, k), name="theta")
        z = bg.CategoricalMarkovChain(pi, A, length=T, plates=(S,), columns=True, name="z")
        x = bg.Mixture(z, bg.Normal, theta, name="x").observe(Xs, mask=Ms)

    model = bg.Model(x)
    fit_options = {"max_iter": 1000, "tol": 1e-8, "init": "kmeans++"}
    # fit("em"): point masses for the transitions and the emissions; the initial-state
    # probabilities keep their Dirichlet q. Each sequence gives one initial state, so with
    # few sequences (one: the whole table) their MAP is a vertex of the simplex, where a
    # point mass has log p = -inf (the EM would stop at "reached the boundary")
    em_options = {**fit_options, "point": ["transition", "theta"]}
    model.meta = {"zoo": NAME, "table": table, "columns": table.numeric, "k": k,
                  "covariance": covariance, "sequence": seq, "step": step, "labels": labels,
                  "sequence_column": sequence_column, "fit_options": fit_options,
                  "fit_options_by_method": {"em": em_options}}
    return model


def transitions(fit):
    """(K, K) posterior mean of the transition matrix, E[A_ij] (row i: from state i)."""
    model = io.fitted_model(fit, NAME)
    return model["transition"].posterior.mean


def emissions(fit):
    """Posterior per state: mean E[mu_k] (K, D) and sd (sqrt of the diagonal of E[Sigma_k])."""
    model = io.fitted_model(fit, NAME)
    p = model["theta"].posterior.params
    D = len(model.meta["columns"])
    if model.meta["covariance"] == "full":
        nu, W = p["dof"], p["scale"]
        diag = np.diagonal(np.linalg.inv(W), axis1=-2, axis2=-1)
        return p["mean"], np.sqrt(diag / (nu - D - 1.0)[:, None])
    a, b = p["shape"].T, p["rate"].T
    return p["mean"].T, np.sqrt(b / np.where(a > 1.0, a - 1.0, np.nan))


def states(fit):
    """One row per row of the table: sequence, step, the Viterbi state (the most probable
    path of its sequence) and the posterior probability of each state, p0..pK-1."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    meta = model.meta
    post = model["z"].posterior
    seq, step = meta["sequence"], meta["step"]
    marg = post.marginals[seq, step]                       # (N, K)
    path = post.viterbi()[seq, step]
    df = pd.DataFrame(marg, columns=[f"p{j}" for j in range(marg.shape[1])],
                      index=meta["table"].index)
    df.insert(0, "state", path)
    df.insert(0, "step", step)
    df.insert(0, "sequence", [meta["labels"][s] for s in seq])
    return df


def _elog_dirichlet(model, name):
    """E[log p] under q of a Dirichlet node (log of the point for a point mass)."""
    from scipy.special import digamma
    post = model[name].posterior
    if post.is_point:
        with np.errstate(divide="ignore"):
            return np.log(np.asarray(post.point, dtype=float))
    a = post.params["alpha"]
    return digamma(a) - digamma(a.sum(axis=-1, keepdims=True))


def _emission_loglik(model, Xs, Ms):
    """(S, T, K) E_q[log p(x_st | state k)] summed over the observed cells (diag) or of
    the complete steps (full); 0 where nothing is observed."""
    from scipy.special import digamma
    post = model["theta"].posterior
    D = Xs.shape[-1]
    if model.meta["covariance"] == "full":
        complete = Ms.all(axis=2)
        Xc = np.where(Ms, Xs, 0.0)
        if post.is_point:
            mu, L = post.point
            elogdet = np.linalg.slogdet(L)[1]
            dx = Xc[:, :, None, :] - mu
            quad = np.einsum("stkd,kde,stke->stk", dx, L, dx)
        else:
            p = post.params
            mu, beta, nu, W = p["mean"], p["beta"], p["dof"], p["scale"]
            elogdet = (digamma(0.5 * (nu[:, None] - np.arange(D))).sum(axis=1) + D * np.log(2.0)
                       + np.linalg.slogdet(W)[1])
            dx = Xc[:, :, None, :] - mu
            quad = nu * np.einsum("stkd,kde,stke->stk", dx, W, dx) + D / beta
        ll = 0.5 * elogdet - 0.5 * D * np.log(2.0 * np.pi) - 0.5 * quad
        return np.where(complete[:, :, None], ll, 0.0)
    if post.is_point:                                        # plates (D, K)
        mu, tau = post.point
        elog_tau, e_tau, extra = np.log(tau), tau, 0.0
    else:
        p = post.params
        mu, a, b = p["mean"], p["shape"], p["rate"]
        elog_tau, e_tau, extra = digamma(a) - np.log(b), a / b, 1.0 / p["beta"]
    dx2 = (Xs[:, :, :, None] - mu) ** 2                      # (S, T, D, K)
    cell = 0.5 * elog_tau - 0.5 * np.log(2.0 * np.pi) - 0.5 * (e_tau * dx2 + extra)
    return np.where(Ms[:, :, :, None], cell, 0.0).sum(axis=2)


def _new_sequences(model, data):
    """(S, T, D) values, (S, T, D) observed cells, sequence and step of each row, labels
    and lengths of new rows, split into sequences as in the fit."""
    meta = model.meta
    table, seq, step, labels = _sequences(data, meta.get("sequence_column"), meta["columns"])
    X, mask = table.numeric_array(), table.mask()
    S, T, D = len(labels), int(step.max()) + 1, X.shape[1]
    Xs = np.zeros((S, T, D))
    Ms = np.zeros((S, T, D), dtype=bool)
    Xs[seq, step] = np.where(mask, X, 0.0)
    Ms[seq, step] = mask
    return Xs, Ms, seq, step, labels, np.bincount(seq, minlength=S)


def _new_chains(model, data):
    """Forward-backward on new sequences with the parameters fixed at the fit: log
    potentials E[log pi] + emissions (first step), E[log A], the emissions' expected
    log-likelihoods (the VB E-step of q(z), Beal 2003 ch. 3)."""
    from blrgraph.families.categorical_chain import forward_backward
    Xs, Ms, seq, step, labels, lengths = _new_sequences(model, data)
    U = _emission_loglik(model, Xs, Ms)
    U[:, 0] += _elog_dirichlet(model, "initial")
    P = _elog_dirichlet(model, "transition")
    return forward_backward(U, P, lengths), U, P, seq, step, labels, lengths


def log_predictive(fit, data):
    """(S,) held-out score of each new sequence (a table with the model's columns and
    its ``sequence_column``; rows of a sequence in time order, NaN = missing): the
    variational bound on log p(x_1..x_T | training data) with the parameters fixed at
    the fit, log sum_z exp(E_q[log p(x, z | pi, A, theta)]) by the forward algorithm.
    For an EM fit (point masses) it is the exact log-likelihood of the sequence (what
    hmmlearn's ``score`` returns). In order of the sequences' first rows
    (docs/predict.md, "Held-out scores of the zoo")."""
    model = io.fitted_model(fit, NAME)
    return _new_chains(model, data)[0].log_z


def predict_table(fit, data):
    """One row per new row (a table with the model's columns and its ``sequence_column``):
    sequence, step, the Viterbi ``state`` of its sequence and the state probabilities
    ``p0..pK-1``, with the parameters fixed at the fit (the E-step of the new sequences)."""
    from blrgraph.families.categorical_chain import viterbi
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    stats_, U, P, seq, step, labels, lengths = _new_chains(model, data)
    marg = stats_.marginals[seq, step]
    path = viterbi(U, P, lengths)[seq, step]
    df = pd.DataFrame(marg, columns=[f"p{j}" for j in range(marg.shape[1])])
    df.insert(0, "state", path)
    df.insert(0, "step", step)
    df.insert(0, "sequence", [labels[s] for s in seq])
    return df


def predict(fit, data):
    """(M,) the Viterbi state of each new row (the most probable path of its sequence,
    :func:`predict_table`; docs/predict.md, "What predict means")."""
    return predict_table(fit, data)["state"].to_numpy()


def summarize(fit):
    """One row per (state, column): E[pi_k] (initial), E[A_kk] (stay), n (expected steps in
    the state), the posterior mean of the state's mean and the state's sd."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    meta = model.meta
    initial = model["initial"].posterior.mean
    stay = np.diag(transitions(model))
    r = model["z"].posterior.marginals[meta["sequence"], meta["step"]]
    n = r.sum(axis=0)
    mean, sd = emissions(model)
    rows = [{"state": j, "initial": initial[j], "stay": stay[j], "n": n[j], "variable": c,
             "mean": mean[j, d], "sd": sd[j, d]}
            for j in range(meta["k"]) for d, c in enumerate(meta["columns"])]
    return pd.DataFrame(rows)


def write_outputs(fit, out_dir):
    """states.csv (per row: sequence, step, Viterbi state, state probabilities) and
    transitions.csv (E[A], rows = from)."""
    from pathlib import Path

    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    out = Path(out_dir)
    p1 = out / "states.csv"
    states(model).to_csv(p1, index_label="row")
    p2 = out / "transitions.csv"
    K = model.meta["k"]
    pd.DataFrame(transitions(model), columns=[f"to{j}" for j in range(K)],
                 index=[f"from{j}" for j in range(K)]).to_csv(p2, index_label="state")
    return [p1, p2]
