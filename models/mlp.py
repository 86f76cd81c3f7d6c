"""A Bayesian neural network: a multi-layer perceptron classifier (softmax) or
regressor written with autograd as one ``bg.Potential`` with data, fitted by a
deep-learning row of the BLR table (docs/blr.md: IVON, VOGN, Adam). The model::

    w   ~ Normal(0, diag(prior precision))       all weights and biases, flattened: one
                                                 Normal node with plates (D,) -- q stays
                                                 diagonal, no D x D matrix is ever built
    h_0 = x_n,  h_l = relu(h_{l-1} W_l + b_l)    the hidden layers (``hidden=(32,)``)
    y_n ~ Categorical(softmax(h_L W + b))        classification (an integer/text target)
    y_n ~ Normal(h_L W + b, 1/tau)               regression (a numeric target; log tau is
                                                 one more weight, so q covers the noise)

Prior precisions: ``prior_precision`` x fan-in for the weights of a layer (prior sd
1/sqrt(fan-in), the scale of the usual initialisations), ``prior_precision`` for the
biases; by default (``"cv"``) chosen from :data:`PRIOR_GRID` by the held-out NLL of
IVON fits on 3 folds of the training rows. The fit starts from a random mean
(Glorot-uniform weights, zero biases, the ``seed`` of ``build``) so hidden units are
not symmetric. The Potential carries ``value_and_grad`` (the forward pass and the
back-propagation formula, :func:`classifier_value_and_grad`): the optimizers' steps
call it instead of tracing logp with autograd.

Input: a DataFrame or CSV path with ``target=`` the response column and ``columns=``
the predictors (default: every other column; text columns become 0/1 indicators), or
a pair of arrays ``(X, y)``. Numeric predictors are standardised with the training
rows' mean and sd (``standardize=True``; new rows get the same map). A classifier's
target is any column of labels (``task="classification"``, the default for text or
integer targets with at most ``max_classes`` levels); rows with a missing target or
predictor are left out of the fit (mask).

    from blrgraph.zoo import mlp
    model = mlp.build((X, y), hidden=(32,))
    fit = model.fit(mlp.DEFAULT_METHOD, **model.meta["fit_options"])
    mlp.predict_proba(fit, X_new)        # (n, classes): E_q[softmax], over draws of q
    mlp.predict(fit, X_new)              # the most probable class (classifier) / E_q[mean]
"""
from __future__ import annotations

import numpy as np

import blrgraph as bg

NAME = "mlp"
#: IVON: on digits and breast-cancer it matched VOGN's accuracy at a lower test NLL and
#: a fraction of VOGN's epoch cost (no per-row gradients); docs/benchmarks.md §10
DEFAULT_METHOD = "ivon"
DESCRIPTION = ("Bayesian MLP classifier/regressor (autograd Potential), diagonal Gaussian "
               "posterior by IVON (target= the label or response column)")
#: draws of q averaged by predict_proba
PREDICT_DRAWS = 200


# ---- the network ---------------------------------------------------------------------------
def layer_shapes(n_in, hidden, n_out):
    """[(fan_in, fan_out), ...] of the weight matrices, input to output."""
    sizes = [n_in] + list(hidden) + [n_out]
    return list(zip(sizes[:-1], sizes[1:]))


def _unpack(w, shapes):
    """[(W, b), ...] from the flat weights w (..., D): W (..., fan_in, fan_out), b (..., fan_out)."""
    out, a = [], 0
    lead = w.shape[:-1]
    for fi, fo in shapes:
        W = w[..., a:a + fi * fo].reshape(lead + (fi, fo))
        a += fi * fo
        b = w[..., a:a + fo]
        a += fo
        out.append((W, b))
    return out, a


def _forward_np(w, X, shapes, rowwise):
    """Plain numpy forward pass: (outputs, [inputs of each layer], [W of each layer])."""
    layers, _ = _unpack(w, shapes)
    h, hs, Ws = X, [], []
    for i, (W, b) in enumerate(layers):
        hs.append(h)
        Ws.append(W)
        if rowwise:
            z = np.einsum("nf,nfo->no", h, W) + b
        else:
            z = np.matmul(h, W) + b[..., None, :]
        h = z if i == len(layers) - 1 else np.maximum(z, 0.0)
    return h, hs, Ws


def _backward_np(g, w, hs, Ws, rowwise):
    """The back-propagation formula: the gradient in the flat weights w (..., D) of
    <g, outputs> from the gradient g (..., rows, n_out) in the outputs."""
    grads = []
    for i in range(len(Ws) - 1, -1, -1):
        h = hs[i]
        if rowwise:
            dW = np.einsum("nf,no->nfo", h, g)
            db = g
        elif h.ndim == g.ndim:      # one copy of the weights: h^T g
            dW = np.matmul(np.swapaxes(h, -1, -2), g)
            db = g.sum(-2)
        else:
            dW = np.matmul(np.swapaxes(np.broadcast_to(h, g.shape[:-1] + h.shape[-1:]),
                                       -1, -2), g)
            db = g.sum(-2)
        grads.append(db)
        grads.append(dW.reshape(dW.shape[:-2] + (-1,)))
        if i > 0:
            g = np.matmul(g, np.swapaxes(Ws[i], -1, -2)) if not rowwise else \
                np.einsum("no,nfo->nf", g, Ws[i])
            g = g * (hs[i] > 0)
    if all(a.shape[:-1] == w.shape[:-1] for a in grads):
        return np.concatenate(grads[::-1], axis=-1)
    flat = np.concatenate([np.broadcast_to(a, w.shape[:-1] + a.shape[-1:])
                           for a in grads[::-1]], axis=-1)
    return flat.reshape(w.shape)


def _network(shapes, rowwise):
    """The network as one autograd primitive: its vector-Jacobian product is the
    layer-wise back-propagation formula (a few matrix products, no tape of small ops)."""
    from autograd.extend import defvjp, primitive

    last = {}

    @primitive
    def net(w, X):
        out, hs, Ws = _forward_np(w, X, shapes, rowwise)
        last.clear()
        last.update(w=w, X=X, hs=hs, Ws=Ws)   # the backward pass of this call reuses them
        return out

    def vjp(ans, w, X):
        if last.get("w") is w and last.get("X") is X:
            hs, Ws = last["hs"], last["Ws"]
        else:
            _, hs, Ws = _forward_np(w, X, shapes, rowwise)
        return lambda g: _backward_np(g, w, hs, Ws, rowwise)

    defvjp(net, vjp, None)
    return net


def _softmax_eval(w, X, Y, shapes, rowwise):
    """(log softmax(network(w, X)) . Y per row, (layer inputs, layer weights, softmax))."""
    z, hs, Ws = _forward_np(w, X, shapes, rowwise)
    top = z.max(-1, keepdims=True)
    e = np.exp(z - top)
    tot = e.sum(-1, keepdims=True)
    out = np.sum(Y * z, -1) - (np.log(tot) + top)[..., 0]
    return out, (hs, Ws, e / tot)


def _softmax_loglik(shapes, rowwise):
    """log softmax(network(w, X)) . Y per row as one autograd primitive: its VJP is
    g (Y - softmax) back-propagated (no tape of the log-sum-exp's small ops)."""
    from autograd.extend import defvjp, primitive

    last = {}

    def _eval(w, X, Y):
        return _softmax_eval(w, X, Y, shapes, rowwise)

    @primitive
    def loglik(w, X, Y):
        out, parts = _eval(w, X, Y)
        last.clear()
        last.update(w=w, X=X, Y=Y, parts=parts)
        return out

    def vjp(ans, w, X, Y):
        if last.get("w") is w and last.get("X") is X and last.get("Y") is Y:
            hs, Ws, p = last["parts"]
        else:
            hs, Ws, p = _eval(w, X, Y)[1]
        return lambda g: _backward_np(np.asarray(g)[..., None] * (Y - p), w, hs, Ws, rowwise)

    defvjp(loglik, vjp, None, None)
    return loglik


_NETS = {}


def forward(w, X, shapes, rowwise=False):
    """The network's outputs, (..., rows, n_out) for weights w (..., D) and rows X (rows,
    F); with ``rowwise`` w is (rows, D), one copy per row, and the output (rows, n_out).
    Differentiable in w by autograd (one primitive with the back-propagation formula)."""
    key = (tuple(map(tuple, shapes)), bool(rowwise))
    if key not in _NETS:
        _NETS[key] = _network(shapes, rowwise)
    return _NETS[key](w, X)


def classifier_logp(shapes, K, rowwise=False):
    """logp(w, X, Y): log softmax(outputs) . Y per row (Y one-hot, (rows, K)), one
    autograd primitive (forward pass, log-sum-exp and back-propagation by hand)."""
    key = ("softmax", tuple(map(tuple, shapes)), bool(rowwise))
    if key not in _NETS:
        _NETS[key] = _softmax_loglik(shapes, rowwise)
    return _NETS[key]


def classifier_value_and_grad(shapes):
    """value_and_grad(w, X, Y, weights) of :func:`classifier_logp` (``Potential(...,
    value_and_grad=)``): the weighted row sum of log softmax . Y and its gradient in w,
    (Y - softmax) back-propagated by hand; w (..., D) with any leading axes of draws."""
    def value_and_grad(w, X, Y, weights):
        out, (hs, Ws, p) = _softmax_eval(w, X, Y, shapes, False)
        g = Y - p                                      # d out / d outputs, (..., rows, K)
        if weights is None:
            return out.sum(-1), [_backward_np(g, w, hs, Ws, False)]
        return (out * weights).sum(-1), [_backward_np(weights[:, None] * g, w, hs, Ws, False)]
    return value_and_grad


def regressor_value_and_grad(shapes):
    """value_and_grad(w, X, y, weights) of :func:`regressor_logp`: the weighted row sum
    of log N(y | output, 1/tau) and its gradient in w (the network's weights and log tau)."""
    def value_and_grad(w, X, y, weights):
        mu, hs, Ws = _forward_np(w[..., :-1], X, shapes, False)
        mu = mu[..., 0]
        log_tau = w[..., -1:]
        tau = np.exp(log_tau)
        r = y - mu                                     # (..., rows)
        out = 0.5 * log_tau - 0.5 * tau * r * r - 0.5 * np.log(2 * np.pi)
        d_mu = tau * r                                 # d out / d mu
        d_lt = 0.5 - 0.5 * tau * r * r                 # d out / d log tau
        if weights is not None:
            out, d_mu, d_lt = out * weights, d_mu * weights, d_lt * weights
        g_net = _backward_np(d_mu[..., None], w[..., :-1], hs, Ws, False)
        return out.sum(-1), [np.concatenate([g_net, d_lt.sum(-1, keepdims=True)], axis=-1)]
    return value_and_grad


def regressor_logp(shapes, rowwise=False):
    """logp(w, X, y): log N(y | output, 1/tau), log tau the last weight."""
    import autograd.numpy as anp

    def logp(w, X, y):
        mu = forward(w[..., :-1], X, shapes, rowwise)[..., 0]
        log_tau = w[..., -1] if rowwise else w[..., -1:]    # (rows,) or (..., 1): over rows
        return 0.5 * log_tau - 0.5 * anp.exp(log_tau) * (y - mu) ** 2 - 0.5 * np.log(2 * np.pi)
    return logp


# ---- build -----------------------------------------------------------------------------------
#: the prior precisions ``prior_precision="cv"`` chooses from (x fan-in for the weights)
PRIOR_GRID = (1e-3, 1e-2, 0.1, 1.0)
#: folds of the training rows it scores them on (held-out NLL)
CV_FOLDS = 3
#: IVON's q starts with this precision ess (h0 + delta) ~ N h0 for every weight (sd 0.05):
#: hess_init = INIT_PRECISION / N (the ivon package's hess_init = 1 at N = 400 rows;
#: measured on digits and breast cancer, docs/benchmarks.md §10)
INIT_PRECISION = 400.0
#: draws of q averaged for the held-out NLL of a fold
CV_DRAWS = 50


def build(data, target=None, columns=None, hidden=(32,), task=None, prior_precision="cv",
          standardize=True, max_classes=50, seed=0, batch_size=200, epochs=100):
    """The Bayesian MLP of ``target`` on ``columns`` (see the module docstring).
    ``prior_precision="cv"`` chooses it from :data:`PRIOR_GRID` by the held-out NLL
    of IVON fits on :data:`CV_FOLDS` folds of the training rows (``meta["cv_nll"]``);
    a number fixes it. ``batch_size`` and ``epochs`` set ``model.meta["fit_options"]``
    (IVON's learning rate rho 0.5 for a classifier, 0.2 for a regressor: with 0.5 the
    regressor of tests/test_deep.py diverged on 4 of 8 seeds, with 0.2 on none;
    ``hess_init`` = INIT_PRECISION / N)."""
    hidden = _hidden(hidden)
    X, y, names, target_name = _table(data, target, columns)
    classes = None
    if task is None:
        values = y[~_missing(y)]
        numeric = values.dtype.kind in "fiub"
        integral = numeric and np.all(np.asarray(values, dtype=float) ==
                                      np.round(np.asarray(values, dtype=float)))
        task = "classification" if (not numeric or integral) and \
            len(np.unique(values)) <= max_classes else "regression"
    if task not in ("classification", "regression"):
        raise ValueError(f"{NAME}: task={task!r}; choose 'classification' or 'regression'")
    if not (isinstance(prior_precision, str) and prior_precision == "cv") and (
            isinstance(prior_precision, (bool, str)) or not isinstance(prior_precision, (int, float))
            or not np.isfinite(prior_precision) or prior_precision <= 0):
        raise ValueError(f"{NAME}: prior_precision must be a positive number or 'cv' (chosen "
                         f"by cross-validation), got {prior_precision!r}")
    keep = ~_missing(y) & ~np.isnan(X).any(axis=1)
    if keep.sum() < 2:
        raise ValueError(f"{NAME}: fewer than 2 rows have the target and every predictor")
    mean, sd = np.zeros(X.shape[1]), np.ones(X.shape[1])
    if standardize:
        mean = X[keep].mean(0)
        sd = X[keep].std(0)
        sd[sd == 0] = 1.0
    Xs = np.where(np.isnan(X), 0.0, (X - mean) / sd)
    if task == "classification":
        classes, codes = np.unique(y[keep], return_inverse=True)
        K = len(classes)
        yy = np.zeros((len(y), K))
        yy[np.flatnonzero(keep), codes] = 1.0     # one-hot rows
        if K < 2:
            raise ValueError(f"{NAME}: the target {target_name!r} has one class; a classifier "
                             f"needs two or more")
        shapes = layer_shapes(X.shape[1], hidden, K)
        logp, per_row = classifier_logp(shapes, K), classifier_logp(shapes, K, rowwise=True)
        value_and_grad = classifier_value_and_grad(shapes)
        y_mean, y_sd = 0.0, 1.0
    else:
        yf = np.asarray(y, dtype=float)
        y_mean, y_sd = float(yf[keep].mean()), float(yf[keep].std() or 1.0)
        yy = np.where(keep, (yf - y_mean) / y_sd, 0.0)
        shapes = layer_shapes(X.shape[1], hidden, 1)
        logp, per_row = regressor_logp(shapes), regressor_logp(shapes, rowwise=True)
        value_and_grad = regressor_value_and_grad(shapes)
    parts = (shapes, task, seed, logp, per_row, value_and_grad)
    cv_nll = None
    if isinstance(prior_precision, str):
        prior_precision, cv_nll = _cross_validate(Xs[keep], yy[keep], parts, batch_size, epochs)
    model = _assemble(Xs, yy, keep, float(prior_precision), parts)
    model.meta = {"zoo": NAME, "task": task, "hidden": list(hidden), "shapes": shapes,
                  "columns": names, "target": target_name, "x_mean": mean, "x_sd": sd,
                  "classes": None if classes is None else classes.tolist(),
                  "y_mean": y_mean, "y_sd": y_sd, "rows": int(keep.sum()),
                  "prior_precision": float(prior_precision), "cv_nll": cv_nll,
                  "fit_options": _fit_options(task, int(keep.sum()), batch_size, epochs)}
    return model


def _fit_options(task, n, batch_size, epochs):
    """IVON's options for n rows (the module's defaults; see :func:`build`)."""
    return {"batch_size": int(min(batch_size, n)), "epochs": int(epochs),
            "rho": 0.5 if task == "classification" else 0.2, "beta2": 0.999,
            "hess_init": INIT_PRECISION / n}


def _assemble(Xs, yy, keep, p0, parts):
    """The model: the weights' Normal node and the likelihood's Potential."""
    shapes, task, seed, logp, per_row, value_and_grad = parts
    prec, init = _prior_and_start(shapes, p0, task, seed)
    w = bg.Normal(0.0, prec, plates=(len(prec),), name="w")
    w.start_from(init, prec)
    lik = bg.Potential(logp, w, data=(Xs, yy), mask=None if keep.all() else keep,
                       name="lik", vectorized=True, per_row=per_row,
                       value_and_grad=value_and_grad)
    return bg.Model(lik)


def _cross_validate(Xs, yy, parts, batch_size, epochs):
    """(the prior precision of :data:`PRIOR_GRID` with the least held-out NLL, {value:
    NLL}): IVON fits (the zoo's options, seed 0) on :data:`CV_FOLDS` folds of the rows
    (stratified by class for a classifier; the folds drawn with the build's seed); the
    NLL of a held-out row is -log of the predictive averaged over :data:`CV_DRAWS`
    draws of q (a regressor's on the standardised target)."""
    shapes, task, seed = parts[:3]
    n = len(yy)
    fold = cv_folds(yy, task, seed)
    if n < 2 * CV_FOLDS:
        raise ValueError(f"{NAME}: prior_precision='cv' needs at least {2 * CV_FOLDS} rows; "
                         f"give a number")
    scores = {}
    for p0 in PRIOR_GRID:
        total = 0.0
        for k in range(CV_FOLDS):
            tr, te = fold != k, fold == k
            model = _assemble(Xs[tr], yy[tr], np.ones(tr.sum(), bool), p0, parts)
            opts = _fit_options(task, int(tr.sum()), batch_size, epochs)
            try:
                model.fit("ivon", seed=0, **opts)
            except FloatingPointError:     # this prior's fit overflowed: not chosen
                total = np.inf
                break
            total += _heldout_nll(model, Xs[te], yy[te], shapes, task)
        scores[p0] = float(total / n)
    best = min(scores, key=lambda p: (scores[p], p))
    if not np.isfinite(scores[best]):
        raise FloatingPointError(f"{NAME}: every fit of the cross-validation overflowed; "
                                 f"standardise the inputs or give prior_precision")
    return best, scores


def cv_folds(yy, task, seed):
    """The fold (0 .. CV_FOLDS - 1) of each row in :func:`build`'s cross-validation: the
    rows in an order drawn with ``seed``, a classifier's (one-hot ``yy``) stratified by
    class (each class dealt round the folds)."""
    n = len(yy)
    order = np.random.default_rng(seed).permutation(n)
    if task == "classification":
        order = order[np.argsort(yy[order].argmax(1), kind="stable")]
    fold = np.empty(n, dtype=int)
    fold[order] = np.arange(n) % CV_FOLDS
    return fold


def _heldout_nll(model, X, y, shapes, task):
    """The summed -log predictive density of the rows (X, y) under the fitted q."""
    from scipy.special import logsumexp
    w = model["w"]
    m, v = np.asarray(w.posterior.mean, dtype=float), np.asarray(w.posterior.var, dtype=float)
    W = m + np.sqrt(v) * np.random.default_rng(0).standard_normal((CV_DRAWS, m.size))
    if task == "classification":
        z = forward(W, X, shapes)                              # (S, rows, K)
        logp = (z * y).sum(-1) - logsumexp(z, axis=-1)
    else:
        mu = forward(W[:, :-1], X, shapes)[..., 0]
        lt = W[:, -1:]
        logp = 0.5 * lt - 0.5 * np.exp(lt) * (y - mu) ** 2 - 0.5 * np.log(2 * np.pi)
    return float(-np.sum(logsumexp(logp, axis=0) - np.log(len(W))))


def _hidden(hidden):
    if isinstance(hidden, (int, np.integer)):
        hidden = (hidden,)
    if isinstance(hidden, str):
        hidden = tuple(int(h) for h in hidden.replace("(", "").replace(")", "").split(",") if h.strip())
    hidden = tuple(hidden)
    if not all(isinstance(h, (int, np.integer)) and h >= 1 for h in hidden):
        raise ValueError(f"{NAME}: hidden must be a tuple of layer sizes >= 1, got {hidden!r}")
    return hidden


def _missing(y):
    if y.dtype.kind in "fc":
        return np.isnan(y)
    return np.array([v is None or (isinstance(v, float) and np.isnan(v)) for v in y])


def _table(data, target, columns):
    """(X float with NaN, y, predictor names, target name) from arrays or a table."""
    if isinstance(data, tuple) and len(data) == 2:
        X = np.asarray(data[0], dtype=float)
        X = X[:, None] if X.ndim == 1 else X
        y = np.asarray(data[1])
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValueError(f"{NAME}: give (X, y) with X of shape (N, F) and y of shape (N,), "
                             f"got {X.shape} and {y.shape}")
        return X, y, [f"x{j}" for j in range(X.shape[1])], "y"
    from blrgraph import io
    pd = io.require_pandas()
    df = io.read_table(data) if not isinstance(data, pd.DataFrame) else data
    if target is None or target not in df.columns:
        raise ValueError(f"{NAME}: give target= one of the columns {list(df.columns)}, got "
                         f"{target!r}")
    cols = [c for c in df.columns if c != target] if columns is None else list(columns)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{NAME}: unknown columns {missing}; the table has {list(df.columns)}")
    Xdf = _encode(df[cols], pd)
    y = df[target].to_numpy()
    if y.dtype == object:
        y = np.array([None if (isinstance(v, float) and np.isnan(v)) else str(v) for v in y],
                     dtype=object)
    return Xdf.to_numpy(dtype=float), y, list(Xdf.columns), target


def _encode(frame, pd, levels=None):
    """Numeric columns as they are; a text column as 0/1 indicators (first level dropped)."""
    out = {}
    for c in frame.columns:
        col = frame[c]
        if col.dtype.kind in "fiub":
            out[c] = col.astype(float)
            continue
        lv = sorted(col.dropna().astype(str).unique())
        for level in lv[1:]:
            out[f"{c}[{level}]"] = np.where(col.isna(), np.nan, (col.astype(str) == level) * 1.0)
    return pd.DataFrame(out, index=frame.index)


def _prior_and_start(shapes, p0, task, seed):
    rng = np.random.default_rng(seed)
    prec, init = [], []
    for fi, fo in shapes:
        prec += [np.full(fi * fo, p0 * fi), np.full(fo, p0)]
        lim = np.sqrt(6.0 / (fi + fo))
        init += [rng.uniform(-lim, lim, fi * fo), np.zeros(fo)]
    if task == "regression":
        prec.append(np.array([p0]))
        init.append(np.zeros(1))      # log tau: unit noise precision on the standardised target
    return np.concatenate(prec), np.concatenate(init)


# ---- results -------------------------------------------------------------------------------
def _model(fit):
    model = getattr(fit, "model", fit)
    if getattr(model, "meta", {}).get("zoo") != NAME:
        raise TypeError(f"{NAME}: give the FitResult of a model built by {NAME}.build")
    return model


def _rows(model, X_new):
    meta = model.meta
    if hasattr(X_new, "columns"):
        from blrgraph import io
        pd = io.require_pandas()
        frame = _encode(X_new, pd)
        missing = [c for c in meta["columns"] if c not in frame.columns]
        for c in missing:   # an indicator of a level absent from the new rows
            if "[" in c:
                frame[c] = 0.0
        missing = [c for c in meta["columns"] if c not in frame.columns]
        if missing:
            raise ValueError(f"{NAME}: the new rows lack the columns {missing}")
        X = frame[meta["columns"]].to_numpy(dtype=float)
    else:
        X = np.asarray(X_new, dtype=float)
        X = X[:, None] if X.ndim == 1 else X
        if X.ndim != 2 or X.shape[1] != len(meta["columns"]):
            raise ValueError(f"{NAME}: new rows need {len(meta['columns'])} columns, got shape "
                             f"{X.shape}")
    if np.isnan(X).any():
        raise ValueError(f"{NAME}: the new rows hold missing values; fill or drop them")
    return (X - meta["x_mean"]) / meta["x_sd"]


def weight_draws(fit, S=PREDICT_DRAWS, seed=0):
    """(S, D) draws of the weights from q (the mean itself when q is a point mass)."""
    model = _model(fit)
    w = model["w"]
    m = np.asarray(w.posterior.mean, dtype=float)
    v = np.asarray(w.posterior.var, dtype=float)
    if np.all(v == 0):
        return m[None]
    rng = np.random.default_rng(seed)
    return m + np.sqrt(v) * rng.standard_normal((S, m.size))


def predict_proba(fit, X_new, S=PREDICT_DRAWS, seed=0):
    """(n, classes): E_q[softmax(network(x))], averaged over S draws of q (a classifier)."""
    from scipy.special import softmax
    model = _model(fit)
    if model.meta["task"] != "classification":
        raise TypeError(f"{NAME}: predict_proba is for a classifier; use predict for a regressor")
    X = _rows(model, X_new)
    W = weight_draws(model, S, seed)
    out = np.zeros((X.shape[0], len(model.meta["classes"])))
    for a in range(0, len(W), 50):   # bounded memory: 50 draws at a time
        z = forward(W[a:a + 50], X, model.meta["shapes"])
        out += softmax(z, axis=-1).sum(0)
    return out / len(W)


def predict(fit, X_new, S=PREDICT_DRAWS, seed=0):
    """The most probable class (classifier) or E_q[output] on the target's scale (regressor)."""
    model = _model(fit)
    if model.meta["task"] == "classification":
        return np.asarray(model.meta["classes"])[predict_proba(model, X_new, S, seed).argmax(1)]
    X = _rows(model, X_new)
    W = weight_draws(model, S, seed)
    mu = np.concatenate([forward(W[a:a + 50, :-1], X, model.meta["shapes"])[..., 0]
                         for a in range(0, len(W), 50)]).mean(0)
    return model.meta["y_mean"] + model.meta["y_sd"] * mu


def summarize(fit):
    """One row per layer: its shape, number of weights, mean |posterior mean| and mean
    posterior sd of its weights and of its biases."""
    from blrgraph import io
    pd = io.require_pandas()
    model = _model(fit)
    w = model["w"]
    m = np.asarray(w.posterior.mean, dtype=float)
    sd = np.sqrt(np.asarray(w.posterior.var, dtype=float))
    rows, a = [], 0
    for i, (fi, fo) in enumerate(model.meta["shapes"]):
        nW = fi * fo
        rows.append({"layer": i + 1, "shape": f"{fi}x{fo}", "weights": nW + fo,
                     "mean_abs_weight": float(np.abs(m[a:a + nW]).mean()),
                     "mean_sd_weight": float(sd[a:a + nW].mean()),
                     "mean_abs_bias": float(np.abs(m[a + nW:a + nW + fo]).mean()),
                     "mean_sd_bias": float(sd[a + nW:a + nW + fo].mean())})
        a += nW + fo
    return pd.DataFrame(rows)
