"""Every code block of README.md and docs/**/*.md runs as written, and shows what it prints.

The conventions (docs/dev/docs_conventions.md):

* ```python blocks of a page run in order, in one namespace, in a fresh temporary
  working directory (so a page can write files and read them back later).
* A python block whose first line starts with ``>>>`` is a doctest: each expression's
  output is checked against the lines that follow it.
* An ```output block right after a python or sh block is what that block prints
  (stdout); it is checked.
* ```sh blocks run their lines: each line is ``blrgraph ARGS`` (``# comments`` and
  ``&&`` between commands allowed), run by ``blrgraph.cli.main`` in the same working directory, and must exit 0.
* ```python no-run / ```sh no-run blocks are shown, not run (each has a reason on the
  page); any other fence info string is text.
* Output comparison: text must match up to runs of whitespace; ``...`` matches
  anything; a number matches if it agrees to the digits the page prints (half a unit
  of the page's last digit, plus a relative 1e-9).
"""
from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md"] + list((ROOT / "docs").rglob("*.md")))

FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"
RUNNABLE = {"python", "sh", "output"}


def blocks(text):
    """[(info words, body, line number)] of the fenced blocks of a page."""
    out = []
    for m in FENCE.finditer(text):
        out.append((m.group(1).split(), m.group(2), text[:m.start()].count("\n") + 1))
    return out


# ---- output comparison --------------------------------------------------------------------
def _pattern(want):
    """A regex for the expected text: numbers captured, '...' = anything, spaces flexible."""
    parts, nums = [], []
    for tok in re.split(r"(\.\.\.|" + NUMBER + r"|\s+)", want.strip()):
        if not tok:
            continue
        if tok == "...":
            parts.append(r".*?")
        elif tok.isspace():
            parts.append(r"\s+")
            continue
        elif re.fullmatch(NUMBER, tok):
            parts.append("(" + NUMBER + ")")
            nums.append(tok)
        else:
            parts.append(re.escape(tok))
        parts.append(r"\s*")  # numpy pads columns: spacing next to punctuation may differ
    return re.compile(r"\s*" + "".join(parts) + r"\s*\Z", re.S), nums


def _close(got, want):
    digits = want.lower().split("e")[0]
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    exp = int(want.lower().split("e")[1]) if "e" in want.lower() else 0
    tol = 0.5 * 10.0 ** (exp - decimals) + 1e-9 * abs(float(want))
    return abs(float(got) - float(want)) <= tol


def matches(got, want):
    """True when the printed text `got` shows what the page shows (`want`)."""
    pat, nums = _pattern(want)
    m = pat.match(got)
    if not m:
        return False
    return all(_close(g, w) for g, w in zip(m.groups(), nums))


class _Checker(doctest.OutputChecker):
    def check_output(self, want, got, optionflags):
        return matches(got, want) if want.strip() else not got.strip()


# ---- running a page -----------------------------------------------------------------------
def _run_python(body, ns, name):
    if body.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(body, ns, name, name, 0)
        out = io.StringIO()
        runner = doctest.DocTestRunner(checker=_Checker(), optionflags=doctest.ELLIPSIS)
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            runner.run(test, out=out.write, clear_globs=False)
        ns.update(test.globs)
        assert runner.failures == 0, f"{name}:\n{out.getvalue()}"
        return printed.getvalue()
    code = compile(body, name, "exec")
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        exec(code, ns)
    return printed.getvalue()


def _run_sh(body, name):
    from blrgraph.cli import main
    printed = io.StringIO()
    for line in body.splitlines():
        line = line.split(" #")[0].strip()
        if line.startswith("$ "):
            line = line[2:]
        if not line or line.startswith("#"):
            continue
        for command in line.split("&&"):
            argv = shlex.split(command)
            assert argv and argv[0] == "blrgraph", (
                f"{name}: a runnable sh block may only call blrgraph, got {command!r}; "
                "mark the block `sh no-run` and say why on the page")
            err = io.StringIO()
            status = main(argv[1:], stdout=printed, stderr=err)
            assert status == 0, f"{name}: `{command.strip()}` exited {status}: {err.getvalue()}"
    return printed.getvalue()


def run_page(path):
    text = path.read_text()
    rel = path.relative_to(ROOT)
    ns = {"__name__": "__docs__"}
    last = None  # what the previous runnable block printed
    for info, body, line in blocks(text):
        lang = info[0] if info else ""
        name = f"{rel}:{line}"
        if "no-run" in info or lang not in RUNNABLE:
            last = None
            continue
        if lang == "output":
            assert last is not None, f"{name}: an output block must follow a python or sh block"
            assert matches(last, body), (
                f"{name}: the block prints\n{last}\nbut the page shows\n{body}")
            last = None
        elif lang == "python":
            last = _run_python(body, ns, name)
        else:
            last = _run_sh(body, name)


def runnable_pages():
    return [p for p in PAGES
            if any((i[:1] in (["python"], ["sh"])) and "no-run" not in i
                   for i, _, _ in blocks(p.read_text()))]


@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    run_page(page)


def test_no_hidden_commands():
    """A command or a doctest in an indented (unfenced) block would never be run: refuse it."""
    bad = []
    for p in PAGES:
        text = FENCE.sub("", p.read_text())
        for i, line in enumerate(text.splitlines()):
            if re.match(r"^ {4}(blrgraph |>>> |\$ blrgraph)", line):
                bad.append(f"{p.relative_to(ROOT)}: {line.strip()}")
    assert not bad, "fence these as ```sh (or ```sh no-run) blocks:\n" + "\n".join(bad)


def test_every_fence_is_known():
    """Catch typos such as ```pyhton, which would silently not run."""
    known = {"", "python", "sh", "output", "text"}
    bad = [f"{p.relative_to(ROOT)}:{line}: {' '.join(info)}"
           for p in PAGES for info, _, line in blocks(p.read_text())
           if info and info[0] not in known]
    assert not bad, bad


# ---- the checker itself ------------------------------------------------------------------
def test_matches_numbers_to_the_printed_digits():
    assert matches("elbo -32.37414563", "elbo -32.3741456")
    assert not matches("elbo -32.3751", "elbo -32.3741")
    assert matches("[0.69230769 0.0040]", "[0.6923 0.004]")
    assert not matches("[0.69230769 0.0040]", "[0.6924 0.004]")
    assert matches("a\n  b   c\n", "a b c")
    assert matches("[[-4.   4. ]\n [ 4.1  4. ]]", "[[-4.  4.]\n [ 4.1 4.]]")
    assert not matches("12", "1 2")
    assert matches("head 1\nmiddle\ntail 2", "head 1 ... tail 2")
    assert not matches("head 1 tail 2", "head 1 tail")
    assert matches("1.5e-08", "1.5e-8") and not matches("2.5e-08", "1.5e-8")
