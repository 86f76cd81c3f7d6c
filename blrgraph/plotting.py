"""Plots written to files: the ELBO trace and a scatter of mixture clusters.

matplotlib is optional (``pip install blrgraph[plot]``). The figures are drawn
on matplotlib's Agg canvas directly (no pyplot), so nothing here changes the
backend or any global state of a user's session.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

PLOT_HINT = "pip install blrgraph[plot]"

#: while > 0 (:func:`skipped`), the plot functions return their path without drawing
_SKIP = 0


class skipped:
    """``with skipped():`` the plot functions draw nothing and return their path (the
    command line's --no-plots: a model's outputs without the cost of its figures)."""

    def __enter__(self):
        global _SKIP
        _SKIP += 1
        return self

    def __exit__(self, *exc):
        global _SKIP
        _SKIP -= 1
        return False


def _figure(width, height):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:  # optional dependency
        raise ImportError(f"plots need matplotlib: {PLOT_HINT}") from None
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def smooth_trace(trace, window=None):
    """Centred moving average of a noisy trace (window: about a twentieth of its length,
    odd, at least 3); the ends average the values available."""
    trace = np.asarray(trace, dtype=float)
    n = len(trace)
    if window is None:
        window = max(3, (n // 20) | 1)
    window = int(min(window, n if n % 2 else n - 1))
    if window < 2:
        return trace.copy()
    half = window // 2
    c = np.concatenate([[0.0], np.cumsum(trace)])
    lo = np.clip(np.arange(n) - half, 0, n)
    hi = np.clip(np.arange(n) + half + 1, 0, n)
    return (c[hi] - c[lo]) / (hi - lo)


def plot_elbo(trace, path, title=None, objective="ELBO", smooth=None):
    """Line plot of the ELBO (one value per iteration) written to ``path`` (PNG).

    ``smooth``: draw the trace faint with its moving average (:func:`smooth_trace`) on
    top; default True when ``objective`` is an estimate (SVI's minibatch ELBO), whose
    raw trace is mostly noise. The y-axis then spans the smoothed curve (after its
    first tenth), so the noise does not flatten the trend."""
    if _SKIP:
        return Path(path)
    trace = np.asarray(trace, dtype=float)
    if smooth is None:
        smooth = "estimate" in str(objective) and len(trace) >= 10
    fig = _figure(6, 4)
    ax = fig.add_subplot(1, 1, 1)
    it = np.arange(1, len(trace) + 1)
    if smooth:
        sm = smooth_trace(trace)
        ax.plot(it, trace, color="C0", alpha=0.25, linewidth=0.8, label="per minibatch")
        ax.plot(it, sm, color="C1", linewidth=1.8, label="moving average")
        tail = sm[len(sm) // 10:]
        pad = 0.5 * (tail.max() - tail.min()) + 1e-12
        lo_raw = np.quantile(trace[len(trace) // 10:], 0.05)
        ax.set_ylim(min(tail.min() - pad, lo_raw), tail.max() + pad)
        ax.legend(fontsize=8, loc="lower right")
    else:
        ax.plot(it, trace, marker="o" if len(trace) < 30 else None, markersize=3)
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.set_xlabel("iteration")
    ax.set_ylabel(objective)
    ax.set_title(_wrap(title or f"{objective}: {trace[-1]:.6g} after {len(trace)} iteration(s)", 60),
                 fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def _wrap(text, width):
    import textwrap
    return "\n".join(textwrap.wrap(str(text), width)) if text else text


def _ellipse(ax, mean, cov, color, n_sd=(1.0, 2.0)):
    """Ellipses of a 2x2 covariance at ``n_sd`` standard deviations around ``mean``."""
    from matplotlib.patches import Ellipse
    w, V = np.linalg.eigh(cov)
    w = np.clip(w, 0.0, None)
    angle = np.degrees(np.arctan2(V[1, 1], V[0, 1]))
    for k, s in enumerate(n_sd):
        ax.add_patch(Ellipse(mean, 2 * s * np.sqrt(w[1]), 2 * s * np.sqrt(w[0]), angle=angle,
                             fill=False, edgecolor=color, linewidth=1.4 if k == 0 else 0.9,
                             linestyle="-" if k == 0 else "--", zorder=2))


def _cluster_panel(ax, X, i, j, label, conf, means, covariances, colors, D):
    """One panel of :func:`plot_clusters`: columns i and j of the rows by cluster (rings on
    the uncertain ones), the means and, given covariances (D > 1: the data's own columns), the
    1- and 2-sd ellipses."""
    K = len(colors)
    ok = np.isfinite(X[:, i]) & np.isfinite(X[:, j])
    for k in range(K):
        sel = ok & (label == k)
        if sel.any():
            ax.scatter(X[sel, i], X[sel, j], s=14, color=colors[k],
                       label=f"cluster {k}", edgecolors="none")
            unsure = sel & (conf < 0.8)
            if unsure.any():
                ax.scatter(X[unsure, i], X[unsure, j], s=30, facecolors="none",
                           edgecolors="0.3", linewidths=0.6)
    if means is not None:
        ax.scatter(means[:, i], means[:, j], marker="X", s=120, c=colors, edgecolors="black",
                   linewidths=1.0, zorder=3)
        if covariances is not None and D > 1:
            C = np.asarray(covariances, dtype=float)
            for k in range(K):
                if np.all(np.isfinite(C[k][np.ix_([i, j], [i, j])])):
                    _ellipse(ax, means[k, [i, j]], C[k][np.ix_([i, j], [i, j])], colors[k])


def plot_clusters(X, resp, path, columns=None, means=None, title=None, max_pairs=6,
                  covariances=None):
    """Scatter of the rows of ``X`` (N, D; NaN = missing) coloured by their most
    probable cluster (``resp``: (N, K) probabilities; faint = uncertain), with the
    cluster means (K, D) marked and, given ``covariances`` (K, D, D), each cluster's
    1- and 2-sd ellipse in every panel. D = 1: a strip plot; D <= 4: every pair of
    columns (at most ``max_pairs`` panels); larger D: one panel on the first two principal
    components of the standardised columns, each axis labelled with its share of the
    variance and its largest loadings (:func:`principal_axes`)."""
    if _SKIP:
        return Path(path)
    X = np.asarray(X, dtype=float)
    resp = np.asarray(resp, dtype=float)
    N, D = X.shape
    K = resp.shape[1]
    columns = list(columns) if columns is not None else [f"x{j}" for j in range(D)]
    label = resp.argmax(axis=1)
    conf = resp.max(axis=1)
    means = None if means is None else np.asarray(means, dtype=float)
    if D == 1:
        X = np.column_stack([X[:, 0], np.random.default_rng(0).uniform(-0.4, 0.4, N) + label])
        means = None if means is None else np.column_stack([means[:, 0], np.arange(K)])
        columns = [columns[0], "cluster (jittered)"]
        pairs = [(0, 1)]
    elif D <= 4:
        pairs = [(i, j) for i in range(D) for j in range(i + 1, D)][:max_pairs]
    else:
        X, A, shift, columns = principal_axes(X, columns)
        means = None if means is None else (means - shift) @ A.T
        if covariances is not None:
            covariances = A @ np.asarray(covariances, dtype=float) @ A.T
        pairs = [(0, 1)]
    ncol = min(3, len(pairs))
    nrow = int(np.ceil(len(pairs) / ncol))
    wide = D > 4
    fig = _figure(6.5, 5.6) if wide else _figure(4.2 * ncol, 3.8 * nrow)
    colors = [f"C{k % 10}" for k in range(K)]
    for p, (i, j) in enumerate(pairs):
        ax = fig.add_subplot(nrow, ncol, p + 1)
        _cluster_panel(ax, X, i, j, label, conf, means, covariances, colors, D)
        ax.set_xlabel(_wrap(columns[i], 90) if wide else columns[i], fontsize=8 if wide else None)
        ax.set_ylabel(_wrap(columns[j], 50) if wide else columns[j], fontsize=8 if wide else None)
        ax.grid(alpha=0.3)
        if p == 0:
            ax.legend(fontsize=7, loc="best")
    note = "X = cluster mean, ring = probability < 0.8" + (
        ", ellipses = 1 and 2 sd" if covariances is not None and D > 1 else "")
    width = int((6.5 if wide else 4.2 * ncol) * 72 / (10 * 0.6))          # characters of 10 pt text across the figure
    text = "\n".join(_wrap(t, width) for t in ((title, note) if title else (note,)))
    fig.suptitle(text, fontsize=10)
    fig.tight_layout()                                   # (it makes room for the suptitle)
    return _save(fig, path)


def principal_axes(X, columns, n=2, terms=3):
    """Scores of the rows of ``X`` (N, D; NaN = missing, filled with the column mean) on
    the first ``n`` principal components of the *standardised* columns (each centred and
    divided by its sd, so a column's units do not decide the picture), with axis labels
    that say what each component is: its share of the variance and its ``terms`` largest
    loadings, e.g. "PC1 (62% of variance) = 0.58 petal_length + 0.57 petal_width - 0.27 ...".
    Returns (scores (N, n), A (n, D), shift (D,), labels) with scores = (X - shift) @ A.T."""
    X = np.asarray(X, dtype=float)
    columns = list(columns)
    mean = np.nanmean(X, axis=0)
    sd = np.nanstd(X, axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    Z = (np.where(np.isfinite(X), X, mean) - mean) / sd
    _, sv, vt = np.linalg.svd(Z, full_matrices=False)
    vt = vt[:n] * np.where(vt[:n].sum(axis=1, keepdims=True) < 0, -1.0, 1.0)   # a fixed sign
    share = sv ** 2 / max(np.sum(sv ** 2), 1e-300)
    labels = []
    for c in range(n):
        top = np.argsort(-np.abs(vt[c]))[:terms]
        parts = "".join(f"{' - ' if vt[c, j] < 0 else ' + '}{abs(vt[c, j]):.2f} {columns[j]}"
                        for j in top).strip()
        parts = parts[2:] if parts.startswith("+ ") else "-" + parts[2:]
        labels.append(f"PC{c + 1} ({100 * share[c]:.0f}% of variance) = {parts}"
                      + (" ..." if len(columns) > terms else ""))
    A = vt / sd
    return (np.where(np.isfinite(X), X, mean) - mean) @ A.T, A, mean, labels


def plot_predictive_band(x, mean, lower, upper, path, y=None, x_label="x", y_label="y",
                         title=None, level=0.95):
    """The posterior predictive of a regression: its mean (line) and central ``level``
    interval (band) against ``x``, with the observed ``y`` as points (NaN: none)."""
    if _SKIP:
        return Path(path)
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="stable")
    fig = _figure(6.5, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    ax.fill_between(x[order], np.asarray(lower)[order], np.asarray(upper)[order], color="C0",
                    alpha=0.25, linewidth=0, label=f"{100 * level:g}% predictive interval")
    ax.plot(x[order], np.asarray(mean)[order], color="C0", linewidth=1.6, label="predictive mean")
    if y is not None:
        y = np.asarray(y, dtype=float)
        ok = np.isfinite(y)
        ax.scatter(x[ok], y[ok], s=10, color="black", alpha=0.6, label="observed", zorder=3)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    if title:
        ax.set_title(_wrap(title, 70), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return _save(fig, path)
