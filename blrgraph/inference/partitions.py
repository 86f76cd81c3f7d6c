"""Rows held elsewhere (Dask, docs/scaling.md): which models can be fitted partition by
partition, and the partitions of the data axis. Used by
:mod:`~blrgraph.inference.dask_rows`."""
from __future__ import annotations

import numpy as np


def held_rows(model, structure):
    """The observed nodes whose rows are held elsewhere (a dask array), after refusing a
    model whose data axis does not carry them all (naming the node and the fix)."""
    dasked = [n for n in model.observed if (n.source is not None and n.source.dask)]
    links = set(structure.links)
    for n in dasked:
        if n not in links:
            raise ValueError(f"{n.label()} holds a dask array but is not on the data axis of "
                             f"{structure.root.label()}; observe an in-memory array there")
    for n in structure.local:
        if n not in links:
            raise ValueError(f"fit on dask data: the local node {n.label()} lies on another "
                             f"data axis than {structure.root.label()}'s; one data axis only")
    for n in structure.links:
        if n.stochastic and n.observed and not (n.source is not None and n.source.dask):
            raise ValueError(f"{n.label()} is on the data axis with {dasked[0].label()}, whose "
                             f"rows are a dask array; give it a dask array chunked the same way")
    return dasked


def partitions(structure, dasked):
    """(first row, end row of the data axis, first row, end row of the dask arrays) of
    every partition. Through a gather (LDA: documents -> entries) the entries must be
    sorted by the gathered row; chunk boundaries move to the next row's first entry so
    that no row of the data axis is split."""
    first = dasked[0].source
    gathers, n = [], dasked[0]
    while structure.links.get(n) is not None:
        kind, via = structure.links[n]
        if kind == "gather":
            gathers.append(n)
        n = via
    if not gathers:
        parts = [(lo, hi, lo, hi) for lo, hi in first.partitions()]
    elif len(gathers) == 1 and gathers[0].source is structure.root:
        idx = np.asarray(gathers[0].idx)
        if idx.size and np.any(np.diff(idx) < 0):
            raise ValueError(f"fit on dask data: the entries of {dasked[0].label()} must be "
                             f"sorted by their row of {structure.root.label()} (the index of "
                             f"{gathers[0].label()}), e.g. document by document")
        b = [int(np.searchsorted(idx, idx[e], "left")) for e in first.bounds[1:-1]]
        bounds = sorted(set([0] + b + [len(idx)]))
        if bounds != [int(e) for e in first.bounds]:
            sizes = tuple(np.diff(bounds).tolist())
            for n in dasked:
                n.source.rechunk(sizes)
        rows = [0] + [int(idx[e]) for e in bounds[1:-1]] + [structure.N]
        parts = [(rows[i], rows[i + 1], bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
    else:
        raise ValueError(f"fit on dask data: the data axis reaches {dasked[0].label()} "
                         f"through {len(gathers)} gathers; one gather from the data axis "
                         f"(theta[doc_ids]) at most")
    chunks0 = first.arr.chunks[0]
    for n in dasked[1:]:
        if n.source.arr.chunks[0] != chunks0:
            n.source.rechunk(chunks0)
    return parts


def data_children(model, structure):
    """{global node name: names of its children on the data axis}, whose messages the
    partitions send. Refuses a global node whose data messages read another global
    node (the messages gathered before the sweep's steps would then be stale)."""
    links, out = set(structure.links), {}
    for g in structure.globals:
        kids = []
        for c in model.children[g]:
            if c in links:
                kids.append(c)
                others = [p for p in _latent_parents(c) if p is not g and p not in links]
                if others:
                    raise ValueError(f"fit on dask data: the messages of {c.label()} to "
                                     f"{g.label()} read the global node(s) "
                                     f"{sorted(o.name for o in others)}, updated in the same "
                                     f"sweep; use a joint prior (NormalWishart, NormalGamma) "
                                     f"or compute the data into memory")
            elif c.deterministic and _below(model, c, links):
                raise ValueError(f"fit on dask data: {g.label()} reaches the data through "
                                 f"the deterministic node {c.label()}, which is off the data "
                                 f"axis; compute the data into memory")
        out[g.name] = [c.name for c in kids]
    return out


def _latent_parents(c):
    """The latent stochastic nodes whose moments ``c``'s factor reads (through
    deterministic nodes)."""
    out, stack = set(), list(c.parents)
    while stack:
        p = stack.pop()
        if p.deterministic:
            stack.extend(p.parents)
        elif p.stochastic and not p.observed:
            out.add(p)
    return out


def _below(model, node, links):
    """Does a deterministic ``node`` feed a node in ``links``?"""
    stack = list(model.children[node])
    while stack:
        c = stack.pop()
        if c in links:
            return True
        if c.deterministic:
            stack.extend(model.children[c])
    return False
