"""The package's shape, asserted so it stays true (docs/dev/architecture.md).

No module in ``blrgraph/`` over 600 lines, no function over 60 (``end_lineno - lineno + 1``),
at most 25 ``getattr``/``hasattr`` probes in ``graph/`` and ``inference/`` together (none in
``inference/loop.py``), and no import cycle among the modules of ``blrgraph`` (every import
counted, at module level or inside a function).
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "blrgraph"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
MAX_PROBES = 25
PROBES = ("getattr", "hasattr")


def _modules():
    return sorted(ROOT.rglob("*.py"))


def _name(path):
    parts = ("blrgraph",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _tree(path):
    return ast.parse(path.read_text(), filename=str(path))


def _imported(path, names):
    """The blrgraph modules ``path`` imports (``from a import b`` names a.b if that is a module)."""
    own = _name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    out = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base
                       for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in names and t != own)
    return out


def _cycle(graph):
    """One import cycle as a list of module names, or None."""
    state = {}
    for start in sorted(graph):
        if start in state:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = "open"
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                state[node] = "done"
            elif state.get(child) == "open":
                return path[path.index(child):] + [child]
            elif child not in state:
                state[child] = "open"
                path.append(child)
                stack.append((child, iter(sorted(graph[child]))))
    return None


def test_no_module_over_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"


def test_no_function_over_the_limit():
    long = {}
    for path in _modules():
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = n
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def _probes_in(tree):
    return sum(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in PROBES
               for n in ast.walk(tree))


def _probes(path):
    return _probes_in(_tree(path))


def test_hooks_are_declared_not_probed():
    counts = {str(p.relative_to(ROOT)): c
              for sub in ("graph", "inference") for p in sorted((ROOT / sub).rglob("*.py"))
              if (c := _probes(p))}
    assert counts.get("inference/loop.py", 0) == 0, "loop.py probes a hook: declare it"
    assert sum(counts.values()) <= MAX_PROBES, (
        f"{sum(counts.values())} getattr/hasattr in graph/ and inference/ (at most "
        f"{MAX_PROBES}; declare the hook on the base class): {counts}")


def test_no_import_cycle():
    paths = _modules()
    names = {_name(p) for p in paths}
    graph = {_name(p): _imported(p, names) for p in paths}
    # a package's __init__ re-exports its modules; a module importing its own package's
    # __init__ would be a cycle through it and is counted
    # the parse sees relative imports, at module level and inside functions
    assert "blrgraph.graph.base" in graph["blrgraph.graph.node"]
    assert "blrgraph.predictive" in graph["blrgraph.graph.factors.base"]
    assert "blrgraph.inference.loop" in graph["blrgraph.sklearn._common"]
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checks_see_a_cycle_and_a_probe():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    src = "getattr(a, 'b', None)\nif hasattr(c, 'd'):\n    x.getattr(e)\n"
    assert _probes_in(ast.parse(src)) == 2
