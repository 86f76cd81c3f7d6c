"""``model.draw(path=None)``: the model's graph as a picture (docs/api.md, "Drawing a model").

Variables are circles (observed ones shaded), deterministic nodes (``Dot``, ``Add``,
gathers, gates) small diamonds, arrows go from parent to child, and plates are boxes
labelled with their size: a node sits in the box of every plate axis of size > 1 it
has. Nodes are laid out in rows by depth (parents above children) and in columns by
their plates, so that each box is one rectangle.

Two renderers: matplotlib (optional extra ``blrgraph[plot]``; the layout is computed
here from the networkx graph of the model) and Graphviz (the ``dot`` program, when it is
installed: :func:`to_dot` writes the DOT source, one cluster per set of plates). The
figure is drawn on matplotlib's Agg canvas (no pyplot), as in :mod:`blrgraph.plotting`.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import networkx as nx

#: inches per unit of the layout (one column, one row)
SCALE = 1.6
#: fill of an observed node (a shade of grey) and of a latent one
OBSERVED_FILL = "0.78"
LATENT_FILL = "white"


def node_kind(node):
    """("observed" | "latent" | "deterministic", the text under its name)."""
    if not node.stochastic:
        return "deterministic", type(node).__name__
    what = type(node).__name__
    family = getattr(getattr(node, "family", None), "name", None)
    if what == "Mixture":
        what = f"Mixture of {family}" if family else what
    elif family and family != what:
        what = f"{what} ({family})"
    return ("observed" if node.observed else "latent"), what


def plate_signature(node):
    """The sizes of the node's plate axes of size > 1, in order (its boxes)."""
    return tuple(int(s) for s in node.plates if int(s) > 1)


def layout(model):
    """{node: (x, y)}: y = -depth (the longest path from a node without parents), x by
    column: nodes are grouped by their plate signature, groups ordered so that the
    members of each plate are adjacent, and a group is as wide as its widest row."""
    g = model.graph
    depth = {}
    for n in nx.topological_sort(g):
        depth[n] = max((depth[p] + 1 for p in g.predecessors(n)), default=0)
    groups = {}
    for n in model.nodes:
        groups.setdefault(plate_signature(n), []).append(n)
    order = _column_order(g, groups)
    pos, x0 = {}, 0.0
    for sig in order:
        rows = {}
        for n in groups[sig]:
            rows.setdefault(depth[n], []).append(n)
        width = max(len(r) for r in rows.values())
        for d, members in rows.items():
            start = x0 + (width - len(members)) / 2.0
            for i, n in enumerate(members):
                pos[n] = (start + i, -float(d))
        x0 += width + 0.6
    return pos


def _column_order(g, groups, max_groups=7):
    """The order of the plate groups: first the orders in which every plate's groups are
    adjacent (its box one rectangle; as few plates split as possible), then the one with
    the shortest edges (sum of the column distances of parent and child). Up to
    ``max_groups`` groups every order is tried; beyond, the groups are sorted."""
    from itertools import permutations
    sigs = sorted(groups)
    if len(sigs) > max_groups:
        return sigs
    of = {n: sig for sig, members in groups.items() for n in members}
    edges = [(of[a], of[b]) for a, b in g.edges if of[a] != of[b]]
    sizes = {s for sig in sigs for s in sig}

    def cost(order):
        at = {sig: i for i, sig in enumerate(order)}
        split = 0
        for s in sizes:
            idx = [at[sig] for sig in sigs if s in sig]
            split += max(idx) - min(idx) + 1 != len(idx)
        return split, sum(abs(at[a] - at[b]) for a, b in edges)

    return list(min(permutations(sigs), key=cost))


def plates(model, pos, pad=0.42, step=0.12):
    """[(label, (x0, y0, x1, y1))]: one box per plate size around its members; a box
    inside another (its members a subset) gets less padding."""
    sizes = {}
    for n in model.nodes:
        for s in set(plate_signature(n)):
            sizes.setdefault(s, []).append(n)
    boxes = []
    for i, (s, members) in enumerate(sorted(sizes.items())):
        inner = sum(1 for t, other in sizes.items()
                    if t != s and set(other) < set(members))       # boxes nested inside it
        p = pad + step * inner + 0.05 * i                          # crossing boxes: apart
        xs = [pos[n][0] for n in members]
        ys = [pos[n][1] for n in members]
        boxes.append((str(s), (min(xs) - p, min(ys) - p - 0.18, max(xs) + p, max(ys) + p)))
    return sorted(boxes, key=lambda b: -(b[1][2] - b[1][0]) * (b[1][3] - b[1][1]))


def draw_matplotlib(model, path=None, radius=0.22):
    """The matplotlib figure of the model (written to ``path`` if given). Every artist
    carries a ``gid``: "node:<name>", "edge:<parent>-><child>" or "plate:<size>"."""
    from .plotting import _figure, _save
    from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, RegularPolygon
    pos = layout(model)
    boxes = plates(model, pos)
    xs = [p[0] for p in pos.values()] + [b[1][0] for b in boxes] + [b[1][2] for b in boxes]
    ys = [p[1] for p in pos.values()] + [b[1][1] for b in boxes] + [b[1][3] for b in boxes]
    width, height = max(xs) - min(xs) + 1.6, max(ys) - min(ys) + 1.2
    fig = _figure(SCALE * width, SCALE * height)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(min(xs) - 0.8, max(xs) + 0.8)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.set_aspect("equal")
    ax.axis("off")
    for label, (x0, y0, x1, y1) in boxes:
        ax.add_patch(FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0,rounding_size=0.08",
                                    fill=False, edgecolor="0.35", linewidth=1.0, gid=f"plate:{label}"))
        ax.text(x1 - 0.06, y0 + 0.06, label, ha="right", va="bottom", fontsize=8, color="0.25")
    for parent, child in model.graph.edges:
        shrink = radius * SCALE * 72.0 + 1.0          # the node's radius, in points
        ax.add_patch(FancyArrowPatch(pos[parent], pos[child], arrowstyle="-|>", mutation_scale=10,
                                     shrinkA=shrink, shrinkB=shrink, color="0.2", linewidth=0.9,
                                     gid=f"edge:{parent.name}->{child.name}"))
    for n, (x, y) in pos.items():
        kind, text = node_kind(n)
        if kind == "deterministic":
            patch = RegularPolygon((x, y), 4, radius=radius * 0.8, facecolor=LATENT_FILL,
                                   edgecolor="black", linewidth=1.0, gid=f"node:{n.name}")
        else:
            patch = Circle((x, y), radius, facecolor=OBSERVED_FILL if kind == "observed" else LATENT_FILL,
                           edgecolor="black", linewidth=1.2, gid=f"node:{n.name}")
        ax.add_patch(patch)
        ax.text(x, y, n.name if len(n.name) <= 6 else "", ha="center", va="center", fontsize=9)
        below = text if len(n.name) <= 6 else f"{n.name}\n{text}"
        ax.text(x, y - radius - 0.04, below, ha="center", va="top", fontsize=6.5, color="0.15")
    if path is not None:
        _save(fig, path)
    return fig


def to_dot(model):
    """Graphviz DOT source of the model: one cluster per set of plates (labelled with the
    sizes), observed nodes filled grey, deterministic nodes as diamonds."""
    def q(s):
        return '"' + str(s).replace('"', r'\"') + '"'
    lines = ["digraph model {", "  rankdir=TB;", '  node [fontsize=10, fontname="Helvetica"];']
    groups = {}
    for n in model.nodes:
        groups.setdefault(plate_signature(n), []).append(n)
    for i, (sig, members) in enumerate(sorted(groups.items(), key=lambda kv: kv[0])):
        indent = "  "
        if sig:
            lines.append(f"  subgraph cluster_{i} {{")
            lines.append(f"    label={q(' x '.join(map(str, sig)))}; style=rounded; labeljust=r; labelloc=b;")
            indent = "    "
        for n in members:
            kind, text = node_kind(n)
            attrs = {"label": f"{n.name}\\n{text}"}
            if kind == "deterministic":
                attrs.update(shape="diamond")
            else:
                attrs.update(shape="ellipse")
                if kind == "observed":
                    attrs.update(style="filled", fillcolor="gray80")
            lines.append(indent + q(n.name) + " [" + ", ".join(
                f"{k}={q(v) if k != 'label' else chr(34) + v + chr(34)}" for k, v in attrs.items()) + "];")
        if sig:
            lines.append("  }")
    for parent, child in model.graph.edges:
        lines.append(f"  {q(parent.name)} -> {q(child.name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def draw(model, path=None, engine=None):
    """The picture of ``model``. ``engine``: "matplotlib", "graphviz" or None (Graphviz
    when a ``path`` is given and the ``dot`` program is installed, else matplotlib).
    matplotlib returns its Figure (also written to ``path`` if given); Graphviz writes
    ``path`` (its format from the suffix: .png, .svg, .pdf) and returns it."""
    if engine not in (None, "matplotlib", "graphviz"):
        raise ValueError(f"draw: engine must be 'matplotlib', 'graphviz' or None, got {engine!r}")
    dot = shutil.which("dot")
    if engine is None:
        engine = "graphviz" if (dot and path is not None) else "matplotlib"
    if engine == "matplotlib":
        return draw_matplotlib(model, path)
    if dot is None:
        raise RuntimeError("draw(engine='graphviz') needs the Graphviz program 'dot' (e.g. "
                           "apt install graphviz); engine='matplotlib' needs no program")
    if path is None:
        raise ValueError("draw(engine='graphviz') writes a file: give path= (e.g. 'model.png')")
    path = Path(path)
    fmt = path.suffix.lstrip(".") or "png"
    subprocess.run([dot, f"-T{fmt}", "-o", str(path)], input=to_dot(model), text=True, check=True)
    return path
