"""Local level and local linear trend models of one time series, with the noise
precisions learned (docs/models/local_level.md). Copy this file and adapt it.
The model (``trend=False``: the state is the level alone)::

    state_1 ~ N(m0, diffuse)          level at the series' mean, sd 100 x the series' sd
    level_t = level_{t-1} [+ slope_{t-1}] + e_t,    e_t ~ N(0, 1/q_level)
    slope_t = slope_{t-1} + f_t,                    f_t ~ N(0, 1/q_slope)   (trend=True)
    y_t     ~ N(level_t, 1/r)
    q ~ Gamma(a0, a0 var(y)) per state coordinate,  r ~ Gamma(a0, a0 var(y))

The states are one GaussianMarkovChain node: q(states) is the exact Kalman
smoother posterior given q(q) and q(r) (docs/kalman.md), and VMP alternates it
with the Gamma updates of the precisions. The Gamma rates a0 var(y) make the
priors free of the data's units (prior mean precision 1 / var(y), shape a0 = 1e-3:
vague). Missing values (NaN, empty cells) are masked: the smoother fills them.

Input: a DataFrame or CSV path with ``columns=`` one numeric column (the command
line's ``--column y``; a table with one numeric column needs none), or a 1-d array.

    import local_level
    model = local_level.build(df, columns="y", trend=True)
    fit = model.fit("vmp", **model.meta["fit_options"])
    local_level.summarize(fit)              # noise standard deviations
    local_level.states(fit)                 # smoothed level (and slope) per time step
    local_level.forecast(fit, steps=10)     # predictive mean and sd of y_{T+1..T+10}
"""
from __future__ import annotations

import numpy as np
from scipy import stats

import blrgraph as bg
from blrgraph import io

NAME = "local_level"
DEFAULT_METHOD = "vmp"
DESCRIPTION = "local level / local linear trend model of one time-series column (columns=, trend=)"


def _series(data, columns):
    """(name, values with NaN for missing) of the one series to model."""
    if isinstance(data, np.ndarray) and data.ndim == 1:
        return "y", np.asarray(data, dtype=float)
    table = io.encode_table(data, columns)
    numeric = table.numeric
    if len(table.names) != 1 and columns is None:
        raise ValueError(f"{NAME}: the table has columns {table.names}; name the series with "
                         f"columns='...' (command line: --column NAME)")
    if not numeric:
        raise ValueError(f"{NAME}: column {table.names[0]!r} is not numeric; a local level model "
                         f"needs a numeric series")
    if len(table.names) != 1:
        raise ValueError(f"{NAME}: give one column (a single time series), got {table.names}")
    return numeric[0], table[numeric[0]].values.astype(float)


def build(data, columns=None, trend=False, a0=1e-3):
    """A local level (``trend=False``) or local linear trend model of one column."""
    name, y = _series(data, columns)
    observed = np.isfinite(y)
    if observed.sum() < 2:
        raise ValueError(f"{NAME}: column {name!r} has {int(observed.sum())} observed value(s); "
                         f"the model needs at least 2")
    T = len(y)
    mean, var = float(np.mean(y[observed])), float(np.var(y[observed]))
    if var <= 0:
        raise ValueError(f"{NAME}: column {name!r} is constant; there is nothing to smooth")
    D = 2 if trend else 1
    A = np.array([[1.0, 1.0], [0.0, 1.0]]) if trend else np.eye(1)
    H = np.eye(D)[0]                                        # y_t sees the level only

    q = bg.Gamma(a0, a0 * var, plates=(D,), name="q")       # state noise precision per coordinate
    m0 = np.zeros(D)
    m0[0] = mean
    x = bg.GaussianMarkovChain(m0, np.eye(D) * 1e-4 / var, A, q, length=T, name="x")
    r = bg.Gamma(a0, a0 * var, name="r")                    # observation noise precision
    yv = bg.Normal(bg.Dot(H, x), r, name="y").observe(np.where(observed, y, 0.0), mask=observed)

    model = bg.Model(yv)
    model.meta = {"zoo": NAME, "target": name, "y": y, "trend": trend,
                  "fit_options": {"max_iter": 5000, "tol": 1e-10}}
    return model


def _sd_row(term, shape, rate, level):
    """Posterior of sd = tau^(-1/2) for tau ~ Gamma(shape, rate): E[1/tau]^(1/2) (when
    shape > 1) and the central ``level`` interval (quantiles of tau, reversed)."""
    g = stats.gamma(shape, scale=1.0 / rate)
    lo, hi = io.interval_names(level)
    return {"term": term, "precision_mean": g.mean(), "precision_sd": g.std(),
            "sd": np.sqrt(rate / (shape - 1.0)) if shape > 1 else np.nan,
            lo: g.ppf(0.5 + level / 2) ** -0.5, hi: g.ppf(0.5 - level / 2) ** -0.5}


def summarize(fit, level=0.95):
    """One row per noise: its precision's posterior mean and sd, the noise sd
    sqrt(E[1/tau]) and a central ``level`` interval of the sd."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    rows = [_sd_row("observation noise", **_gamma(model["r"]), level=level)]
    q = model["q"].posterior.params
    names = ["level noise", "slope noise"] if model.meta["trend"] else ["level noise"]
    for i, n in enumerate(names):
        rows.append(_sd_row(n, q["shape"][i], q["rate"][i], level))
    return pd.DataFrame(rows)


def _gamma(node):
    p = node.posterior.params
    return {"shape": float(p["shape"]), "rate": float(p["rate"])}


def states(fit):
    """Smoothed states per time step: the series, level mean and sd (slope mean and sd
    with trend=True)."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    post = model["x"].posterior
    m, v = post.mean, post.var
    out = {"t": np.arange(len(m)), model.meta["target"]: model.meta["y"],
           "level": m[:, 0], "level_sd": np.sqrt(v[:, 0])}
    if model.meta["trend"]:
        out.update(slope=m[:, 1], slope_sd=np.sqrt(v[:, 1]))
    return pd.DataFrame(out)


def _plug_in_dynamics(model, D):
    """The transition A of a D-state chain (level, or level and slope) and the noise
    variances at E[1/q] (diagonal, per state) and E[1/r] of the fitted Gamma precisions."""
    A = np.array([[1.0, 1.0], [0.0, 1.0]]) if D == 2 else np.eye(1)
    qp = model["q"].posterior.params
    rp = _gamma(model["r"])
    return A, np.diag(qp["rate"] / (qp["shape"] - 1.0)), rp["rate"] / (rp["shape"] - 1.0)


def forecast(fit, steps=10):
    """Predictive mean and sd of y_{T+1}, ..., y_{T+steps}: the last smoothed state
    moved on by A with the noise variances at their posterior means E[1/q], E[1/r]
    (the plug-in predictive of q; the Gamma uncertainty of the precisions is left out)."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    post = model["x"].posterior
    m, S = post.mean[-1], post.cov[-1]
    A, Qvar, rvar = _plug_in_dynamics(model, len(m))
    means, sds = [], []
    for _ in range(int(steps)):
        m, S = A @ m, A @ S @ A.T + Qvar
        means.append(m[0])
        sds.append(np.sqrt(S[0, 0] + rvar))
    T = len(post.mean)
    return pd.DataFrame({"t": np.arange(T, T + int(steps)), "mean": means, "sd": sds})


def _continuation(model, data):
    """One-step-ahead Kalman filter over new values y_{T+1..} of the series (a table with
    the model's column, or a 1-d array; NaN = missing), from the last smoothed state with
    the noise variances at E[1/q], E[1/r] (as :func:`forecast`): per new step the
    predictive mean and variance of y given the training series and the new values
    before it, the filtered level and its variance, and whether y was observed."""
    last = _last_state(model)
    m, S = last["last_mean"], last["last_cov"]
    A, Q, R = _plug_in_dynamics(model, len(m))
    target = model.meta["target"]
    if isinstance(data, np.ndarray) and data.ndim == 1:
        y = np.asarray(data, dtype=float)
    else:
        df = data if hasattr(data, "columns") else io.read_table(data)
        if target not in df.columns:
            raise ValueError(f"{NAME}: the new values lack the column {target!r}; give the series' "
                             f"next values (empty = unknown: a forecast)")
        y = df[target].to_numpy(dtype=float, na_value=np.nan)
    n = len(y)
    out = {k: np.empty(n) for k in ("mean", "var", "level", "level_var")}
    for t in range(n):                  # a recursion over time steps (each needs the last)
        m, S = A @ m, A @ S @ A.T + Q
        f = S[0, 0] + R
        out["mean"][t], out["var"][t] = m[0], f
        if np.isfinite(y[t]):
            gain = S[:, 0] / f
            m = m + gain * (y[t] - m[0])
            S = S - np.outer(gain, S[0, :])
        out["level"][t], out["level_var"][t] = m[0], S[0, 0]
    return y, out


def prediction_meta(fit):
    """What :func:`predict_table` needs beyond the global posteriors (``blrgraph fit
    --save`` keeps it): the length of the series and the mean and covariance of the last
    smoothed state."""
    post = io.fitted_model(fit, NAME)["x"].posterior
    return {"n_steps": int(len(post.mean)), "last_mean": np.asarray(post.mean[-1], dtype=float),
            "last_cov": np.asarray(post.cov[-1], dtype=float)}


def _last_state(model):
    """:func:`prediction_meta` of a fitted model, or as a saved fit keeps it."""
    try:
        model["x"]
    except KeyError:
        return {k: np.asarray(model.meta[k], dtype=float) if k != "n_steps" else int(model.meta[k])
                for k in ("n_steps", "last_mean", "last_cov")}
    return prediction_meta(model)


def log_predictive(fit, data):
    """(M,) held-out score of each new time step (the series' next M values, as a table
    with the model's column or a 1-d array; NaN = not observed, scores 0): the log
    one-step-ahead predictive density log p(y_{T+t} | y_1..y_T, y_{T+1}..y_{T+t-1}),
    Gaussian from the Kalman filter with the noise variances at E[1/q], E[1/r] (the
    plug-in of :func:`forecast`). Their sum is the log predictive of the whole
    continuation (docs/predict.md, "Held-out scores of the zoo")."""
    y, out = _continuation(io.fitted_model(fit, NAME), data)
    obs = np.isfinite(y)
    lp = stats.norm.logpdf(np.where(obs, y, 0.0), out["mean"], np.sqrt(out["var"]))
    return np.where(obs, lp, 0.0)


def predict_table(fit, data):
    """One row per new time step (the series' next values; NaN = unknown): ``t``, the
    one-step-ahead predictive ``mean`` and ``sd`` of y given everything before it, and the
    filtered ``level`` and ``level_sd`` after the step's value (if any). A table of empty
    cells is :func:`forecast`."""
    pd = io.require_pandas()
    model = io.fitted_model(fit, NAME)
    y, out = _continuation(model, data)
    T = _last_state(model)["n_steps"]
    return pd.DataFrame({"t": np.arange(T, T + len(y)), "mean": out["mean"],
                         "sd": np.sqrt(out["var"]), "level": out["level"],
                         "level_sd": np.sqrt(out["level_var"])})


def predict(fit, data):
    """(M,) the one-step-ahead predictive mean of each new time step (:func:`predict_table`;
    docs/predict.md, "What predict means")."""
    return predict_table(fit, data)["mean"].to_numpy()


def write_outputs(fit, out_dir):
    """states.csv: the smoothed level (and slope) with its sd per time step."""
    from pathlib import Path
    path = Path(out_dir) / "states.csv"
    states(fit).to_csv(path, index=False)
    return [path]
