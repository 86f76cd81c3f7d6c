"""Plots written to files: the ELBO trace and a scatter of mixture clusters.

matplotlib is optional (``pip install blrgraph[plot]``). The figures are drawn
on matplotlib's Agg canvas directly (no pyplot), so nothing here changes the
backend or any global state of a user's session.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

PLOT_HINT = "pip install blrgraph[plot]"


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


def plot_elbo(trace, path, title=None, objective="ELBO"):
    """Line plot of the ELBO (one value per iteration) written to ``path`` (PNG)."""
    trace = np.asarray(trace, dtype=float)
    fig = _figure(6, 4)
    ax = fig.add_subplot(1, 1, 1)
    it = np.arange(1, len(trace) + 1)
    ax.plot(it, trace, marker="o" if len(trace) < 30 else None, markersize=3)
    ax.set_xlabel("iteration")
    ax.set_ylabel(objective)
    ax.set_title(title or f"{objective}: {trace[-1]:.6g} after {len(trace)} iteration(s)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def plot_clusters(X, resp, path, columns=None, means=None, title=None, max_pairs=6):
    """Scatter of the rows of ``X`` (N, D; NaN = missing) coloured by their most
    probable cluster (``resp``: (N, K) probabilities; faint = uncertain), with the
    cluster means (K, D) marked. D = 1: a strip plot; D <= 4: every pair of columns
    (at most ``max_pairs`` panels); larger D: the first two principal components."""
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
        filled = np.where(np.isfinite(X), X, np.nanmean(X, axis=0))
        mu = filled.mean(axis=0)
        _, _, vt = np.linalg.svd(filled - mu, full_matrices=False)
        X = (filled - mu) @ vt[:2].T
        means = None if means is None else (means - mu) @ vt[:2].T
        columns = ["principal component 1", "principal component 2"]
        pairs = [(0, 1)]
    ncol = min(3, len(pairs))
    nrow = int(np.ceil(len(pairs) / ncol))
    fig = _figure(4.2 * ncol, 3.8 * nrow)
    colors = [f"C{k % 10}" for k in range(K)]
    for p, (i, j) in enumerate(pairs):
        ax = fig.add_subplot(nrow, ncol, p + 1)
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
        ax.set_xlabel(columns[i])
        ax.set_ylabel(columns[j])
        ax.grid(alpha=0.3)
        if p == 0:
            ax.legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title + "  (X = cluster mean, ring = probability < 0.8)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)
